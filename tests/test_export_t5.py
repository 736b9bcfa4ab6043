"""T5's exported encoder graph takes its padding mask (issue 52, item 4): the names and specs
of the two graphs, `Seq2SeqEncoder` with the mask (and its `.keras` round trip), the
verification inputs (a left-padded row whose padding only the mask marks), and greedy decoding
of a left-padded batch through the ONNX graphs (onnxruntime) and the SavedModels (their
signatures on TensorFlow), token for token `model.generate`'s, an all-ones mask changing them.

The exports are `large`: the small T5 of tests/test_export_zoo.py took 10 s to ONNX and 4 s
to SavedModel on TensorFlow (2 cores), tf2onnx's process at 1 GB."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops
from test_export_zoo import SMALL_VARIANTS, assert_graph_follows_guide

from keras_posenc.export import export_seq2seq
from keras_posenc.zoo.convs2s import ConvS2S
from keras_posenc.zoo.muse import MUSE
from keras_posenc.zoo.relative_transformers import ShawTransformer
from keras_posenc.zoo.seq2seq import (
    Seq2SeqEncoder,
    decoding_names,
    decoding_signatures,
    encoder_input_names,
)
from keras_posenc.zoo.t5 import T5

pytestmark = pytest.mark.contract

ENCODER_INPUTS = ["encoder_token_ids", "encoder_padding_mask"]


def small_t5():
    """The export tests' small T5 (tests/test_export_zoo.py), without dropout."""
    keras.utils.set_random_seed(0)
    return T5(**{**SMALL_VARIANTS["t5_small"], "dropout": 0.0})


def left_padded(model, lengths, time):
    """Sources of ``lengths`` tokens (the last one eos) padded on the left to ``time``
    with ``pad_id``, their int32 masks, and the same sources padded on the right."""
    rng = np.random.default_rng(3)
    left = np.full((len(lengths), time), model.pad_id, "int32")
    right = left.copy()
    for i, length in enumerate(lengths):
        row = rng.integers(model.eos_id + 1, model.source_vocab_size, length)
        row[-1] = model.eos_id
        left[i, time - length :], right[i, :length] = row, row
    return left, (left != model.pad_id).astype("int32"), right


def to_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


def test_only_a_model_with_padding_mask_inputs_gets_the_mask_input():
    model = small_t5()
    names = decoding_names(model)
    assert names["encoder"][0] == ENCODER_INPUTS
    encoder, _ = decoding_signatures(model)
    assert [(spec.name, tuple(spec.shape), spec.dtype) for spec in encoder] == [
        (name, (None, None), "int32") for name in ENCODER_INPUTS
    ]
    assert_graph_follows_guide(
        "t5_small",
        "encoder",
        [(spec.name, spec.shape, spec.dtype) for spec in encoder],
        [(name, None, None) for name in names["encoder"][1]],
    )
    # The models without the mask input keep their one-input encoder graph.
    for cls in (ConvS2S, MUSE, ShawTransformer):
        assert encoder_input_names(cls) == ["encoder_token_ids"], cls.__name__


def test_the_encoder_takes_the_mask_and_saves(tmp_path):
    model = small_t5()
    ids, mask, right = left_padded(model, [6, 3], 6)
    encoder = Seq2SeqEncoder(model, name="encoder")
    expected = model.encode(ids, encoder_padding_mask=mask)
    states = encoder([ids, mask])
    for got, want in zip(states, expected, strict=True):
        np.testing.assert_array_equal(to_numpy(got), to_numpy(want))
    # The ids alone (the mask found from them), as the one-input graph took them.
    for got, want in zip(encoder(right), model.encode(right), strict=True):
        np.testing.assert_array_equal(to_numpy(got), to_numpy(want))
    # Left padding: the real positions' states are those of the right-padded source.
    real = mask.astype(bool)
    np.testing.assert_allclose(
        to_numpy(states[0])[real],
        to_numpy(encoder(right)[0])[(right != model.pad_id)],
        atol=1e-5,
    )
    path = os.path.join(tmp_path, "encoder.keras")
    encoder.save(path)
    loaded = keras.saving.load_model(path)
    for got, want in zip(loaded([ids, mask]), states, strict=True):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-6)
    with pytest.raises(ValueError, match=r"Seq2SeqEncoder\('encoder'\).*got a list of 3"):
        encoder([ids, mask, mask])


def test_a_model_without_the_mask_input_refuses_a_mask():
    keras.utils.set_random_seed(0)
    model = ConvS2S(
        20,
        20,
        embed_dim=8,
        encoder_layers=[(8, 3)],
        decoder_layers=[(8, 3)],
        decoder_out_embed_dim=8,
    )
    encoder = Seq2SeqEncoder(model, name="encoder")
    ids = np.array([[5, 6, 2]], "int32")
    assert len(encoder([ids])) == len(encoder(ids))
    with pytest.raises(ValueError, match=r"\['encoder_token_ids'\], got a list of 2"):
        encoder([ids, np.ones_like(ids)])


def test_verification_inputs_hold_a_row_only_the_mask_marks(tmp_path, monkeypatch):
    """The encoder graph is verified on a left-padded row whose padding holds real ids, so a
    graph that dropped the mask would fail; export_model is replaced by a recorder."""
    from keras_posenc import export
    from keras_posenc.export import decoding

    recorded = {}

    def record(graph, path, **kwargs):
        recorded[graph.name] = (kwargs["verify_inputs"], kwargs["input_names"])
        open(path, "wb").close()
        return export.ExportReport(kwargs["format"], path, "recorded", [], [])

    monkeypatch.setattr(decoding, "export_model", record)
    model = small_t5()
    export_seq2seq(model, tmp_path, format="onnx")
    runs, names = recorded["encoder"]
    assert names == ENCODER_INPUTS
    steps, _ = recorded["decoder_step"]
    for (source, mask), (_, _, *cache) in zip(runs, steps, strict=True):
        time = source.shape[1]
        assert source.dtype == mask.dtype == np.int32 and source.shape == mask.shape == (2, time)
        # Row 0: three positions of padding that hold real ids; row 1: right padding.
        assert mask[0].tolist() == [0] * 3 + [1] * (time - 3)
        assert (source[0] != model.pad_id).all()
        np.testing.assert_array_equal(mask[1], source[1] != model.pad_id)
        assert mask[1, -1] == 0
        # The step's cache comes from the masked encoding; ignoring the mask differs.
        masked = to_numpy(model.encode(source, encoder_padding_mask=mask)[0])
        np.testing.assert_allclose(cache[0], masked, atol=1e-6)
        assert np.abs(to_numpy(model.encode(source)[0])[0] - masked[0]).max() > 1e-3


# --------------------------------------------------------------------------- runtimes


def runner(path, format):
    """``run(output_names, feed) -> arrays`` for an exported graph, fed by name."""
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run
    import tensorflow as tf

    function = tf.saved_model.load(str(path)).signatures["serving_default"]

    def run(outputs, feed):
        results = function(**{name: tf.constant(value) for name, value in feed.items()})
        return [results[name].numpy() for name in outputs]

    return run


def runtime_greedy(model, graphs, source, mask, max_length):
    """Greedy decoding with the two exported graphs alone, as a runtime would do it: the
    encoder once, zero self-attention buffers, then the step from the start token on."""
    encoder, step = graphs
    names = decoding_names(model)
    state_names, (step_inputs, step_outputs) = names["encoder"][1], names["decoder_step"]
    cache = dict(
        zip(
            state_names,
            encoder(state_names, {"encoder_token_ids": source, "encoder_padding_mask": mask}),
        )
    )
    batch = len(source)
    for name in step_inputs[2 + len(state_names) :]:  # cache_decoder_block_<i>_self_attention
        cache[name] = np.zeros(
            (batch, 2, max_length, model.num_heads, model.key_value_dim), "float32"
        )
    tokens = np.full(batch, model.bos_id, "int32")
    output = np.full((batch, max_length), model.pad_id, "int32")
    finished = np.zeros(batch, bool)
    first_logits = None
    for index in range(max_length):
        feed = {"token_ids": tokens, "index": np.array([index], "int32"), **cache}
        logits, *updated = step(step_outputs, feed)
        cache = dict(zip(step_inputs[2:], updated, strict=True))
        logits = np.array(logits)  # a copy: the runtime's array may be read-only
        first_logits = logits.copy() if first_logits is None else first_logits
        logits[:, [model.pad_id, model.bos_id]] = -np.inf  # generation never gives them
        tokens = np.argmax(logits, axis=-1).astype("int32")
        output[:, index] = np.where(finished, model.pad_id, tokens)
        finished |= tokens == model.eos_id
    return output, first_logits


@pytest.mark.large
@pytest.mark.parametrize("format", ["onnx", "tf_saved_model"])
def test_runtime_decodes_a_left_padded_batch_as_generate(format, tmp_path):
    model = small_t5()
    reports = export_seq2seq(model, tmp_path, format=format)
    assert max(report.max_abs_difference for report in reports.values()) <= 1e-4
    assert [name for name, _, _ in reports["encoder"].inputs] == ENCODER_INPUTS
    graphs = [runner(reports[graph].path, format) for graph in ("encoder", "decoder_step")]
    source, mask, right = left_padded(model, [7, 4, 2], 7)  # mixed lengths, padded on the left
    max_length = 8
    inputs = {"encoder_token_ids": source, "encoder_padding_mask": mask}
    expected = model.generate(inputs, max_length=max_length)
    tokens, logits = runtime_greedy(model, graphs, source, mask, max_length)
    np.testing.assert_array_equal(tokens, expected)
    # Padded on the right with the mask of its ids: the same tokens.
    right_mask = (right != model.pad_id).astype("int32")
    np.testing.assert_array_equal(
        runtime_greedy(model, graphs, right, right_mask, max_length)[0], expected
    )
    # The mask is read: all ones makes the left padding real tokens, and the padded rows'
    # outputs change (the full row, without padding, does not).
    ones, ones_logits = runtime_greedy(model, graphs, source, np.ones_like(mask), max_length)
    np.testing.assert_array_equal(ones[0], expected[0])
    assert np.abs(ones_logits[1:] - logits[1:]).max(axis=-1).min() > 1e-3
    assert (ones[1:] != expected[1:]).any(), (ones, expected)
