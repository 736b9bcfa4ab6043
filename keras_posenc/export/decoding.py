"""Decoding graphs: a sequence-to-sequence model as an encoder graph and a one-step decoder
graph (:func:`export_seq2seq`), a language model as its step graph and, where it decodes
prompts in one call, its prompt graph (:func:`export_language_model`), each verified on the
inputs decoding produces."""

from __future__ import annotations

import os
from typing import Any

import keras
import numpy as np

from keras_posenc.export import staging
from keras_posenc.export.inputs import _VERIFY_BATCH, _VERIFY_LENGTHS
from keras_posenc.export.model import export_model
from keras_posenc.export.report import ExportReport


def export_seq2seq(
    model: keras.Model,
    directory: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (as export_model)
    verify: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    check_memory: bool = True,
    overwrite: bool = False,
) -> dict[str, ExportReport]:
    """Exports a sequence-to-sequence zoo model as an encoder graph and a one-step decoder graph.

    The two graphs are :class:`~keras_posenc.zoo.seq2seq.Seq2SeqEncoder`
    (``encoder_token_ids -> encoder state``; T5's also takes ``encoder_padding_mask``) and
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqDecoderStep` (``[token_ids,
    index, *cache] -> [logits, *new_cache]``), each exported and verified by
    :func:`export_model`. A runtime decodes with them as
    :mod:`keras_posenc.generation` does: run the encoder once; the cache
    starts as the encoder state followed by zeros for the decoder buffers
    (their shapes are in the step's report); feed ``bos_id`` at index 0, then
    each chosen token, passing the returned cache back in.

    The graphs' inputs and outputs are named by
    :func:`~keras_posenc.zoo.seq2seq.decoding_names`: the encoder takes
    ``encoder_token_ids`` (a model with padding-mask inputs, T5, also
    ``encoder_padding_mask``: int32 ``(batch, source_time)``, 1 for real tokens, so
    sources may be padded on the left) and returns the encoder state, each output named as
    the step input it feeds (ConvS2S: ``encoder_keys``, ``encoder_values``,
    ``source_mask``); the step takes ``token_ids``, ``index`` and the cache
    (one tensor per decoder layer, ``cache_<layer>``) and returns ``logits``
    and ``new_<name>`` for each cache tensor ``<name>``
    (docs/guides/export.md lists them per model family).

    Args:
        model: a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`.
        directory: folder for ``encoder`` and ``decoder_step`` (``.onnx`` files
            or ``.savedmodel`` SavedModel folders).
        format: ``"onnx"``, ``"tf_saved_model"`` or ``"litert"`` (a ``.tflite`` file).
        verify: verify each graph as :func:`export_model` does, on real
            decoding inputs: sources of two lengths (one row padded on the right;
            with a mask input another on the left, with its mask), their
            encoder states, and the cache after the ``bos`` step. Random-normal
            caches would be states no encoder produces; with them, a full-size
            WMT ConvS2S differs by ~1e-2 between eager Keras and a compiled
            TensorFlow graph alone, and a correct export would fail.
        atol: the verification tolerance's absolute part, as in :func:`export_model`.
        rtol: its relative part, as in :func:`export_model`.
        check_memory: as in :func:`export_model`.
        overwrite: replace existing ``encoder`` / ``decoder_step`` artifacts in
            ``directory``; False (default) refuses them. Both graphs are
            written to a temporary folder and moved into ``directory`` only
            after both have verified; other files in ``directory`` are left alone.

    Returns:
        ``{"encoder": report, "decoder_step": report}``.

    Raises:
        TypeError: if ``model`` does not follow the decoding contract.
        FileExistsError: if a graph's target exists and ``overwrite`` is False.
        ValueError, ImportError, MemoryError, RuntimeError: as :func:`export_model`.
    """
    from keras_posenc.zoo.seq2seq import (
        Seq2SeqDecoderStep,
        Seq2SeqEncoder,
        Seq2SeqModel,
        decoding_names,
        decoding_signatures,
    )

    if not isinstance(model, Seq2SeqModel):
        raise TypeError(
            "export_seq2seq: `model` must be a keras_posenc.zoo.seq2seq.Seq2SeqModel "
            f"(a sequence-to-sequence zoo model); got {type(model).__name__}."
        )
    encoder_signature, step_signature = decoding_signatures(model)
    names = decoding_names(model)
    encoder_runs, step_runs = _decoding_inputs(model) if verify else (None, None)
    graphs = {
        "encoder": (Seq2SeqEncoder(model, name="encoder"), encoder_signature, encoder_runs),
        "decoder_step": (
            Seq2SeqDecoderStep(model, name="decoder_step"),
            step_signature,
            step_runs,
        ),
    }
    options = dict(verify=verify, atol=atol, rtol=rtol, check_memory=check_memory)
    return _export_graphs("export_seq2seq", graphs, names, directory, format, overwrite, **options)


def export_language_model(
    model: keras.Model,
    directory: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (as export_model)
    verify: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    check_memory: bool = True,
    overwrite: bool = False,
) -> dict[str, ExportReport]:
    """Exports a decoder-only zoo model's decoding step, and its prompt graph, as graphs.

    The step graph is :class:`~keras_posenc.zoo.language_model.LanguageModelStep`,
    ``[token_ids, index, *cache] -> [logits, *new_cache]``, exported and
    verified by :func:`export_model`, as :func:`export_seq2seq` exports an
    encoder-decoder's step. A model whose ``decodes_prompts`` is True
    (``decoder_lm_*``) also gets the prompt graph
    :class:`~keras_posenc.zoo.language_model.LanguageModelPrompt`,
    ``[token_ids, *cache] -> [logits, *new_cache]``, which writes a
    ``(batch, time)`` prompt from position 0 in one call and returns the logits
    of every position. Inputs and outputs are named by
    :func:`keras_posenc.zoo.language_model.decoding_names` and
    :func:`~keras_posenc.zoo.language_model.prompt_names` (``convs2s_lm``:
    ``cache_decoder_conv_<i>``, one per convolution; ``decoder_lm_*``:
    ``cache_transformer_layer_<i>``); each graph's ``new_<name>`` outputs feed
    the next graph's ``<name>`` inputs.

    A runtime generates as :mod:`keras_posenc.generation` does: the cache
    starts as zeros, as long as the whole generation (its shapes are in the
    reports). With the prompt graph, run it once on the first ``P`` tokens of
    every prompt, ``P`` the shortest prompt's length (the whole prompts when
    their lengths are equal): its last logits choose the token at ``P`` of
    the rows whose prompt ends there. Then run the step graph at indices
    ``P, P + 1, ...`` on each row's token at that index (a prompt token while
    the row's prompt lasts, else the chosen one), passing the returned cache
    back in. Without the prompt graph, the steps start at index 0.

    Args:
        model: a :class:`~keras_posenc.zoo.language_model.LanguageModel`.
        directory: folder for ``decoder_step`` and ``prompt`` (``.onnx``,
            ``.savedmodel`` or ``.tflite``).
        format: ``"onnx"``, ``"tf_saved_model"`` or ``"litert"`` (a ``.tflite`` file).
        verify: verify each graph as :func:`export_model` does: the step on the
            cache that decoding random prompts of two lengths leaves, the prompt
            graph on random prompts of those lengths and zero caches.
        atol: the verification tolerance's absolute part.
        rtol: its relative part.
        check_memory: as in :func:`export_model`.
        overwrite: replace existing ``decoder_step`` / ``prompt`` artifacts in
            ``directory``. All graphs are written to a temporary folder and moved
            into ``directory`` only after each has verified.

    Returns:
        ``{"decoder_step": report}``, and ``"prompt": report`` where the model
        decodes prompts.

    Raises:
        TypeError: if ``model`` is not a language model.
        FileExistsError, ValueError, ImportError, MemoryError, RuntimeError: as
            :func:`export_seq2seq`.
    """
    from keras_posenc.zoo.language_model import (
        LanguageModel,
        LanguageModelPrompt,
        LanguageModelStep,
        decoding_names,
        decoding_signatures,
        prompt_names,
        prompt_signature,
    )

    if not isinstance(model, LanguageModel):
        raise TypeError(
            "export_language_model: `model` must be a keras_posenc.zoo.language_model."
            f"LanguageModel (a decoder-only zoo model); got {type(model).__name__}."
        )
    runs = _language_model_inputs(model) if verify else None
    graphs = {
        "decoder_step": (
            LanguageModelStep(model, name="decoder_step"),
            decoding_signatures(model),
            runs,
        )
    }
    names = {"decoder_step": decoding_names(model)}
    if model.decodes_prompts:
        graphs["prompt"] = (
            LanguageModelPrompt(model, name="prompt"),
            prompt_signature(model),
            _prompt_inputs(model) if verify else None,
        )
        names["prompt"] = prompt_names(model)
    options = dict(verify=verify, atol=atol, rtol=rtol, check_memory=check_memory)
    return _export_graphs(
        "export_language_model", graphs, names, directory, format, overwrite, **options
    )


def _prompt_inputs(model: Any) -> list:
    """Verification inputs of a language model's prompt graph: for each verification length,
    random prompts of that length and zero caches two positions longer (room for steps)."""
    rng = np.random.default_rng(1)
    low = model.eos_id + 1
    runs = []
    for length in _VERIFY_LENGTHS:
        prompt = rng.integers(low, model.vocab_size, (_VERIFY_BATCH, length)).astype("int32")
        cache = model.init_cache(_VERIFY_BATCH, length + 2)
        runs.append([prompt, *(keras.ops.convert_to_numpy(t) for t in cache)])
    return runs


def _language_model_inputs(model: Any) -> list:
    """Verification inputs of a language model's step graph, as decoding produces them:
    for each verification length, random prompts decoded up to it, then a random token."""
    rng = np.random.default_rng(0)
    low = model.eos_id + 1
    runs = []
    for length in _VERIFY_LENGTHS:
        prompt = rng.integers(low, model.vocab_size, (_VERIFY_BATCH, length)).astype("int32")
        cache = model.init_cache(_VERIFY_BATCH, length + 2)
        for index in range(length):
            _, cache = model.decode_step(prompt[:, index], cache, index)
        token = rng.integers(low, model.vocab_size, (_VERIFY_BATCH,)).astype("int32")
        arrays = [keras.ops.convert_to_numpy(t) for t in cache]
        runs.append([token, np.array([length], "int32"), *arrays])
    return runs


def _export_graphs(
    who: str,
    graphs: dict[str, tuple],
    names: dict[str, tuple[list[str], list[str]]],
    directory: str | os.PathLike,
    format: str,  # noqa: A002 (as export_model)
    overwrite: bool,
    **options: Any,
) -> dict[str, ExportReport]:
    """Exports each ``graphs[name] = (model, input_signature, verify_inputs)`` as
    ``directory/name`` with its ``names[name] = (inputs, outputs)``, all or none: they
    are written to a temporary folder and moved in once every graph has verified."""
    directory = os.fspath(directory)
    # posenc's naming (cli.SUFFIXES)
    suffix = {"onnx": ".onnx", "litert": ".tflite"}.get(format, ".savedmodel")
    targets = [os.path.join(directory, name + suffix) for name in graphs]
    for target in targets:
        staging.check_target(target, overwrite, who)
    with staging.staged(targets, overwrite, who) as staged:
        reports = {
            name: export_model(
                graph,
                path,
                format=format,
                input_signature=signature,
                verify_inputs=runs,
                input_names=names[name][0],
                output_names=names[name][1],
                **options,
            )
            for path, (name, (graph, signature, runs)) in zip(staged, graphs.items())
        }
    for report, target in zip(reports.values(), targets):
        report.path = target
    return reports


def _decoding_inputs(model: Any) -> tuple[list, list]:
    """Verification inputs of a seq2seq model's two graphs, as decoding produces them.

    For each verification length: a batch of sources (real token ids, the
    last row ending in padding), and for the step graph a random next token
    at index 1 with the cache that encoding those sources and decoding
    ``bos`` at index 0 leaves. A model whose encoder graph takes
    ``encoder_padding_mask`` (T5) gets the mask too, and its first row is padded
    on the left with ids other than ``pad_id``: only the mask marks that padding, so
    a graph that ignored the mask (and found it from the ids) would differ there.
    """
    from keras_posenc.zoo.seq2seq import encoder_input_names

    masked = len(encoder_input_names(model)) > 1
    rng = np.random.default_rng(0)
    low = model.eos_id + 1
    encoder_runs, step_runs = [], []
    for length in _VERIFY_LENGTHS:
        source = rng.integers(low, model.source_vocab_size, (_VERIFY_BATCH, length))
        source = source.astype("int32")
        source[-1, length - 2 :] = model.pad_id
        mask = (source != model.pad_id).astype("int32")
        if masked:  # the first row's tokens moved right, after 3 positions of padding
            row = source[0].copy()
            source[0, 3:] = row[: length - 3]
            mask[0] = np.arange(length) >= 3
        inputs = [source, mask] if masked else source
        masks = {"encoder_padding_mask": mask} if masked else {}
        state = model.encode(source, training=False, **masks)
        cache = model.init_cache(state, max_length=4)
        bos = np.full((_VERIFY_BATCH,), model.bos_id, "int32")
        _, cache = model.decode_step(bos, cache, 0)
        token = rng.integers(low, model.target_vocab_size, (_VERIFY_BATCH,)).astype("int32")
        arrays = [keras.ops.convert_to_numpy(t) for t in cache]
        encoder_runs.append(inputs)
        step_runs.append([token, np.array([1], "int32"), *arrays])
    return encoder_runs, step_runs
