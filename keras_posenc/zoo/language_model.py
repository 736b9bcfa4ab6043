"""The base class of the zoo's decoder-only models and their decoding contract.

A decoder-only zoo model (``convs2s_lm``, ...) is a :class:`LanguageModel`: a
functional ``keras.Model`` whose call is the teacher-forced forward pass,

    model(token_ids) -> logits

(``(batch, time)`` int ids, ``(batch, time, vocab_size)`` float32 next-token
logits: position ``t`` predicts the token at ``t + 1``), and which also
exposes what :mod:`keras_posenc.generation` decodes with, the decoder half of
the sequence-to-sequence contract (:mod:`keras_posenc.zoo.seq2seq`):

- ``init_cache(batch_size, max_length) -> cache``, a tuple of batch-first
  tensors of fixed shape: every layer's buffer for ``max_length`` positions;
- ``decode_step(token_ids, cache, index) -> (logits, cache)``: ``token_ids``
  is ``(batch,)``, the token at position ``index`` (a scalar int tensor);
  ``logits`` is ``(batch, vocab_size)`` float32, the prediction of the token
  at ``index + 1``. It must equal the full pass at every position.

A model whose layers take several tokens at once with a cache (``DecoderLM``)
also has, with the class attribute ``decodes_prompts`` True,

- ``decode_prompt(token_ids, cache, index) -> (logits, cache)``: ``token_ids``
  is ``(batch, T)``, the tokens at positions ``index .. index + T - 1``, all
  written in one call; ``logits`` is ``(batch, T, vocab_size)`` float32. It
  must equal ``T`` calls of ``decode_step`` (and so the full pass). The
  exported :class:`LanguageModelPrompt` graph runs it from index 0, so a
  runtime feeds a prompt in one call instead of token by token. Other models
  (``convs2s_lm``, ``music_transformer_*``) leave ``decodes_prompts`` False and
  their ``decode_prompt`` raises ``NotImplementedError``.

``step_constants()`` / ``step_scope()`` and ``reorder_cache`` work as on
:class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`; ``cache_names()`` names the
cache tensors (the exported graphs' inputs, :func:`decoding_names` and
:func:`prompt_names`).

Token ids: ``pad_id`` (0) pads prompts on the right, ``bos_id`` (1) is the
usual first token of a prompt, ``eos_id`` (2) ends a generated text.
Generation never produces ``pad_id`` or ``bos_id``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import tokenizers
from keras_posenc.layers._checks import check_int
from keras_posenc.zoo.seq2seq import (
    FunctionalModel,
    GeneratingModel,
    check_special_ids,
    check_token_array,
    step_signature,
)

__all__ = [
    "LanguageModel",
    "LanguageModelPrompt",
    "LanguageModelStep",
    "decoding_names",
    "decoding_signatures",
    "prompt_names",
    "prompt_signature",
]


class LanguageModel(GeneratingModel, FunctionalModel):
    """A decoder-only zoo model: teacher-forced call, cached decoding, ``generate``.

    Subclasses build their layers, call :meth:`_init_language_model` with the
    vocabulary, token ids and position limit, build the functional graph and
    pass it to ``keras.Model.__init__``; they implement ``init_cache`` and
    ``decode_step``, and may implement ``decode_prompt`` (see the module docstring).

    Attributes:
        is_decoder_only: a class attribute, True: how :mod:`keras_posenc.generation`
            tells a language model from an encoder-decoder.
        decodes_prompts: a class attribute, whether the model implements
            :meth:`decode_prompt` (False here; ``DecoderLM``: True).
        vocab_size: number of token ids (the logits' width).
        pad_id, bos_id, eos_id: the special token ids.
        max_length: the longest sequence the model accepts (its position
            table), or None when any length works.
        tokenizer: where a subclass calls :meth:`_init_tokenizer` (`DecoderLM`): a
            keras-hub tokenizer layer (`keras_posenc.tokenizers`), with which
            ``generate`` takes and returns text; None: token ids only.
    """

    is_decoder_only = True
    decodes_prompts = False

    def _init_language_model(
        self, vocab_size: int, pad_id: int, bos_id: int, eos_id: int, max_length: int | None
    ) -> None:
        owner = type(self).__name__
        self.vocab_size = check_int(owner, "vocab_size", vocab_size, 3)
        ids = check_special_ids(
            owner, pad_id, bos_id, eos_id, self.vocab_size, f"`vocab_size` = {self.vocab_size}"
        )
        self.pad_id, self.bos_id, self.eos_id = ids["pad_id"], ids["bos_id"], ids["eos_id"]
        self.max_length = (
            None if max_length is None else check_int(owner, "max_length", max_length, 1)
        )

    # ------------------------------------------------------------------ contract

    def init_cache(self, batch_size: Any, max_length: int) -> tuple:
        """The decoding cache for ``batch_size`` sequences of up to ``max_length`` tokens."""
        raise NotImplementedError(f"{type(self).__name__} does not implement `init_cache`.")

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        """``(logits (batch, vocab_size) float32, new_cache)`` for the token at ``index``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement `decode_step`.")

    def decode_prompt(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        """``(logits (batch, T, vocab_size) float32, new_cache)`` for the ``(batch, T)``
        tokens at ``index .. index + T - 1``, equal to ``T`` calls of ``decode_step``;
        only where ``decodes_prompts`` is True."""
        raise NotImplementedError(
            f"{type(self).__name__} does not implement `decode_prompt` (its "
            f"`decodes_prompts` is False): feed a prompt token by token with `decode_step`."
        )

    def step_constants(self) -> tuple:
        """Tensors computed from the weights alone that every decoding step reads (none)."""
        return ()

    @contextlib.contextmanager
    def step_scope(self, constants: tuple) -> Iterator[None]:
        """Within the block, ``decode_step`` reads ``constants``; the default does nothing."""
        yield

    def cache_names(self) -> tuple[str, ...]:
        """A name for each cache tensor (the step graph's input names); numbered by default."""
        return tuple(f"cache_{i}" for i in range(len(self.init_cache(1, 2))))

    @staticmethod
    def reorder_cache(cache: tuple, indices: Any) -> tuple:
        """Gathers every cache tensor along the batch axis (beam search's reordering)."""
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), cache)

    # ------------------------------------------------------------------ checks and generation

    token_input_names = ("token_ids",)

    def check_token_ids(self, token_ids: Any, argument: str) -> np.ndarray:
        """``token_ids`` as an int32 numpy array, after checking dtype, rank, range and length.

        Raises:
            TypeError: for non-integer ids.
            ValueError: for a rank other than 2, an id outside the vocabulary or
                a sequence longer than the model's position table.
        """
        return check_token_array(
            self, argument, token_ids, self.vocab_size, self.max_length, "max_length"
        )

    def _language_model_config(self) -> dict:
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        return {**ids, **self._tokenizer_config()}

    # ------------------------------------------------------------------ text

    text_start_is_bos = True

    def encode_texts(
        self, texts: list[str], caller: str, max_length: int | None = None
    ) -> np.ndarray:
        """Prompts as ids: the tokenizer's start token (where it has one) and each text's
        tokens, right-padded with ``pad_id``, as keras-hub's ``CausalLMPreprocessor`` packs
        them for ``generate``. A prompt longer than the model's ``max_length``, or one that
        leaves no room to generate within ``max_length`` (``generate``'s, when an int),
        raises a ValueError naming the text."""
        tokenizer = self._tokenizer_for(caller)
        start = getattr(tokenizer, "start_token_id", None)
        first = [] if start is None else [start]
        rows = [first + tokenizers.ids_of(tokenizer, t) for t in texts]
        counted = "with the start token" if first else "no start token"
        self._check_lengths(texts, rows, caller, counted, self.max_length, "max_length")
        if isinstance(max_length, int) and not isinstance(max_length, bool):
            self._check_lengths(texts, rows, caller, counted, max_length, "max_length", True)
        return self._pad(rows, caller)

    def decode_texts(self, ids: np.ndarray, inputs: np.ndarray) -> list:
        """The text of each generated row: its prompt and continuation up to ``eos_id``,
        without padding and special tokens (keras-hub's ``generate_postprocess``)."""
        lengths = (inputs != self.pad_id).sum(axis=1)

        def text(row: np.ndarray, length: int) -> str:
            return self._text(np.concatenate([row[:length][row[:length] != self.eos_id],
                                              row[length:]]))  # fmt: skip

        if ids.ndim == 3:  # return_n_best
            return [[text(r, n) for r in rows] for rows, n in zip(ids, lengths, strict=True)]
        return [text(row, n) for row, n in zip(ids, lengths, strict=True)]


# --------------------------------------------------------------------------- export graph


@keras.saving.register_keras_serializable(package="keras_posenc")
class LanguageModelStep(keras.Model):
    """One decoding step of a :class:`LanguageModel` as a model of its own (for export).

    ``step([token_ids, index, *cache])`` returns ``[logits, *new_cache]``, as
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqDecoderStep` does for an
    encoder-decoder: ``token_ids`` is ``(batch,)`` int32, ``index`` a ``(1,)``
    int32 tensor (the position), ``cache`` the tensors of ``model.init_cache``.

    Args:
        language_model: the :class:`LanguageModel` (its weights are shared).
        **kwargs: ``keras.Model`` arguments.
    """

    def __init__(self, language_model: LanguageModel, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.language_model = language_model

    def call(self, inputs: list) -> list:
        token_ids, index, *cache = inputs
        position = ops.reshape(ops.cast(index, "int32"), ())
        logits, new_cache = self.language_model.decode_step(token_ids, tuple(cache), position)
        return [logits, *new_cache]

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "language_model": keras.saving.serialize_keras_object(self.language_model),
        }

    @classmethod
    def from_config(cls, config: dict) -> LanguageModelStep:
        config = dict(config)
        language_model = keras.saving.deserialize_keras_object(config.pop("language_model"))
        config.pop("trainable", None)
        return cls(language_model, **config)


@keras.saving.register_keras_serializable(package="keras_posenc")
class LanguageModelPrompt(keras.Model):
    """A prompt decoded in one call by a :class:`LanguageModel` (for export).

    ``prompt([token_ids, *cache])`` returns ``[logits, *new_cache]``:
    ``token_ids`` is ``(batch, time)`` int32, the prompts' tokens written from
    position 0 (``model.decode_prompt(token_ids, cache, 0)``), ``cache`` the
    tensors of ``model.init_cache`` (zeros, as long as the whole generation)
    and ``logits`` ``(batch, time, vocab_size)`` float32. The returned cache
    feeds :class:`LanguageModelStep` at index ``time``. For a model whose
    ``decodes_prompts`` is True.

    Args:
        language_model: the :class:`LanguageModel` (its weights are shared).
        **kwargs: ``keras.Model`` arguments.

    Raises:
        TypeError: if ``language_model`` does not implement ``decode_prompt``.
    """

    def __init__(self, language_model: LanguageModel, **kwargs: Any) -> None:
        if not getattr(language_model, "decodes_prompts", False):
            raise TypeError(
                "LanguageModelPrompt: `language_model` must implement `decode_prompt` "
                f"(`decodes_prompts` True, e.g. DecoderLM); got "
                f"{type(language_model).__name__}."
            )
        super().__init__(**kwargs)
        self.language_model = language_model

    def call(self, inputs: list) -> list:
        token_ids, *cache = inputs
        logits, new_cache = self.language_model.decode_prompt(token_ids, tuple(cache), 0)
        return [logits, *new_cache]

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "language_model": keras.saving.serialize_keras_object(self.language_model),
        }

    @classmethod
    def from_config(cls, config: dict) -> LanguageModelPrompt:
        config = dict(config)
        language_model = keras.saving.deserialize_keras_object(config.pop("language_model"))
        config.pop("trainable", None)
        return cls(language_model, **config)


def decoding_names(model: LanguageModel) -> tuple[list[str], list[str]]:
    """Input and output names of the exported step graph of a :class:`LanguageModel`.

    ``token_ids``, ``index`` and the cache (``model.cache_names()``) in;
    ``logits`` and ``new_<name>`` for each cache tensor out.

    Examples:

        >>> from keras_posenc.zoo.convs2s import ConvS2SLanguageModel
        >>> model = ConvS2SLanguageModel(30, embed_dim=8, decoder_layers=[(12, 4)] * 2,
        ...                              decoder_out_embed_dim=8)
        >>> decoding_names(model)[0]
        ['token_ids', 'index', 'cache_decoder_conv_0', 'cache_decoder_conv_1']
    """
    cache = list(model.cache_names())
    return ["token_ids", "index", *cache], ["logits", *(f"new_{name}" for name in cache)]


def decoding_signatures(model: LanguageModel) -> list:
    """The input signature of :class:`LanguageModelStep`: a dynamic batch axis, and a
    dynamic cache axis wherever it follows the decoded length (:func:`step_signature`)."""
    return step_signature(decoding_names(model)[0], model.init_cache(1, 3), model.init_cache(1, 5))


def prompt_names(model: LanguageModel) -> tuple[list[str], list[str]]:
    """Input and output names of the exported prompt graph (:class:`LanguageModelPrompt`).

    As :func:`decoding_names` without ``index``: ``token_ids`` and the cache in,
    ``logits`` and ``new_<name>`` for each cache tensor out, so the prompt
    graph's outputs feed the step graph's inputs by name.

    Examples:

        >>> from keras_posenc import zoo
        >>> inputs, outputs = prompt_names(zoo.create("decoder_lm_tiny"))
        >>> inputs
        ['token_ids', 'cache_transformer_layer_0', 'cache_transformer_layer_1']
        >>> outputs[:2]
        ['logits', 'new_cache_transformer_layer_0']
    """
    (token, _, *cache), outputs = decoding_names(model)
    return [token, *cache], outputs


def prompt_signature(model: LanguageModel) -> list:
    """The input signature of :class:`LanguageModelPrompt`: ``token_ids`` with dynamic
    batch and time axes, and the cache as :func:`decoding_signatures` gives it."""
    _, _, *cache = decoding_signatures(model)
    return [keras.InputSpec(shape=(None, None), dtype="int32", name="token_ids"), *cache]
