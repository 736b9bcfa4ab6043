"""The relative Transformer decoder's cross-attention: keras_hub's ``CachedMultiHeadAttention``
with its attention computed by the core (keras_posenc/layers/_cross_attention.py).

Against keras_hub's own layer on copied weights: the same weights and paths, the same
numbers in float32 (masks, scores, dropout, caches), a decoder's `.keras` file saved with
keras_hub's layer loads; and what the core changed: a fully masked query row gives zeros,
and the block trains under ``mixed_float16`` on JAX on a CPU too, where Keras' computation
(``jax.nn.dot_product_attention``) asked XLA for a float16 dot algorithm it does not have.
"""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_posenc.layers import ClipPositions, _cross_attention
from keras_posenc.layers._cross_attention import CoreCachedMultiHeadAttention
from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder

pytestmark = pytest.mark.contract

# float32; the contractions may be rounded differently (the fused kernel on PyTorch).
ATOL = 1e-6
BATCH, LENGTH, SOURCE, HIDDEN, HEADS, HEAD_DIM = 2, 5, 7, 8, 2, 4


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def pair(**kwargs):
    """keras_hub's layer and the core's, built alike, the second with the first's weights."""
    kwargs = {"num_heads": HEADS, "key_dim": HEAD_DIM, "name": "cross_attention", **kwargs}
    keras_hubs = keras_hub.layers.CachedMultiHeadAttention(**kwargs)
    cores = CoreCachedMultiHeadAttention(**kwargs)
    for layer in (keras_hubs, cores):
        layer.build((BATCH, LENGTH, HIDDEN), (BATCH, SOURCE, HIDDEN))
    rng = np.random.default_rng(0)
    for weight in keras_hubs.weights:  # random biases too, so each one matters
        weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))
    cores.set_weights(keras_hubs.get_weights())
    return keras_hubs, cores


def sequences(rng):
    query = rng.standard_normal((BATCH, LENGTH, HIDDEN)).astype("float32")
    source = rng.standard_normal((BATCH, SOURCE, HIDDEN)).astype("float32")
    return query, source


def assert_close(expected, actual, what):
    expected, actual = tuple(expected), tuple(actual)
    assert len(expected) == len(actual), what
    for e, a in zip(expected, actual):
        np.testing.assert_allclose(to_numpy(a), to_numpy(e), atol=ATOL, err_msg=what)


def test_weights_are_keras_hubs():
    keras_hubs, cores = pair()
    assert [(w.path, tuple(w.shape)) for w in cores.weights] == [
        (w.path, tuple(w.shape)) for w in keras_hubs.weights
    ]


def masks(rng):
    """None, a padding mask (batch, 1, source) and a (batch, length, source) mask, every
    query row with at least one key."""
    padding = np.ones((BATCH, 1, SOURCE), bool)
    padding[1, 0, 4:] = False
    full = rng.random((BATCH, LENGTH, SOURCE)) > 0.5
    full[:, :, 0] = True
    return {"none": None, "padding": padding, "full": full}


@pytest.mark.parametrize("mask", ["none", "padding", "full"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_same_numbers_as_keras_hub(mask, dropout, rng):
    query, source = sequences(rng)
    attention_mask = masks(rng)[mask]
    # One seed: both dropout layers draw the same masks, call after call.
    keras_hubs, cores = pair(dropout=dropout, seed=3)
    for training in (False, True):
        for scores in (False, True):
            arguments = dict(
                attention_mask=attention_mask, training=training, return_attention_scores=scores
            )
            expected = keras_hubs(query, source, **arguments)
            actual = cores(query, source, **arguments)
            what = f"mask={mask}, dropout={dropout}, training={training}, scores={scores}"
            assert_close(expected if scores else [expected], actual if scores else [actual], what)


def test_same_numbers_as_keras_hub_with_a_cache(rng):
    query, source = sequences(rng)
    attention_mask = masks(rng)["padding"]
    keras_hubs, cores = pair()
    empty = np.zeros((BATCH, 2, SOURCE, HEADS, HEAD_DIM), "float32")
    # Index 0 projects the source into the cache; index None reuses the cache as it is.
    written = {}
    for name, layer in (("keras_hub", keras_hubs), ("core", cores)):
        written[name] = layer(
            query, source, attention_mask=attention_mask, cache=empty, cache_update_index=0
        )
    assert_close(written["keras_hub"], written["core"], "cache_update_index=0")
    cache = written["keras_hub"][1]
    zeros = np.zeros_like(source)
    expected = keras_hubs(query[:, :1], zeros, attention_mask=attention_mask, cache=cache)
    actual = cores(query[:, :1], zeros, attention_mask=attention_mask, cache=cache)
    assert_close(expected, actual, "cache_update_index=None")


@pytest.mark.parametrize("case", ["causal", "causal_and_mask", "per_head_mask"])
def test_compute_attention_as_keras(case, rng):
    # `_compute_attention`'s other arguments, which keras_hub's call does not pass: a causal
    # mask (the core's) and a (batch, heads, length, source) mask (Keras' computation kept).
    keras_hubs, cores = pair()
    q, k, v = (  # tensors, as the layer's projections give them
        ops.convert_to_tensor(rng.standard_normal((BATCH, n, HEADS, HEAD_DIM)), "float32")
        for n in (LENGTH, SOURCE, SOURCE)
    )
    arguments = {"use_causal_mask": case != "per_head_mask", "return_attention_scores": True}
    if case == "causal_and_mask":
        arguments["attention_mask"] = masks(rng)["full"]
    if case == "per_head_mask":
        mask = rng.random((BATCH, HEADS, LENGTH, SOURCE)) > 0.5
        mask[..., 0] = True
        arguments["attention_mask"] = mask
    expected = keras_hubs._compute_attention(q, k, v, **arguments)
    assert_close(expected, cores._compute_attention(q, k, v, **arguments), case)


def test_fully_masked_row_gives_zeros(rng):
    # Keras gives a query that may see no key uniform weights; the core a zero attention
    # output (so the layer's output is the output projection's bias) and zero scores.
    query, source = sequences(rng)
    mask = masks(rng)["full"]
    mask[1, 2] = False
    _, cores = pair()
    output, scores = cores(query, source, attention_mask=mask, return_attention_scores=True)
    bias = to_numpy(cores.output_dense.bias)
    np.testing.assert_allclose(to_numpy(output)[1, 2], bias, atol=ATOL)
    assert not to_numpy(scores)[1, :, 2].any()
    assert np.isfinite(to_numpy(output)).all()


def test_config_round_trip_and_registration(rng):
    query, source = sequences(rng)
    _, cores = pair(dropout=0.1)
    expected = cores(query, source)
    again = CoreCachedMultiHeadAttention.from_config(cores.get_config())
    again.build((BATCH, LENGTH, HIDDEN), (BATCH, SOURCE, HIDDEN))
    again.set_weights(cores.get_weights())
    assert_close([expected], [again(query, source)], "from_config")
    name = keras.saving.get_registered_name(CoreCachedMultiHeadAttention)
    assert name == "keras_posenc>CoreCachedMultiHeadAttention"
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(cores))
    assert type(restored) is CoreCachedMultiHeadAttention
    assert restored.get_config() == cores.get_config()


def decoder_model(seed=0):
    x = keras.Input((LENGTH, HIDDEN), name="x")
    encoded = keras.Input((SOURCE, HIDDEN), name="encoded")
    padding = keras.Input((SOURCE,), dtype="bool", name="padding")
    block = RelativeTransformerDecoder(12, HEADS, position=ClipPositions(3), name="decoder")
    model = keras.Model([x, encoded, padding], block(x, encoded, encoder_padding_mask=padding))
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(0.3 * rng.standard_normal(tuple(weight.shape)).astype("float32"))
    return model


def test_decoder_file_saved_with_keras_hubs_layer_loads(monkeypatch, tmp_path, rng):
    # A .keras file written while the cross-attention was keras_hub's own layer: the same
    # weights under the same paths, read into the core's layer, give the same outputs.
    query, source = sequences(rng)
    padding = np.ones((BATCH, SOURCE), bool)
    padding[1, 4:] = False
    with monkeypatch.context() as patch:
        patch.setattr(
            _cross_attention,
            "CoreCachedMultiHeadAttention",
            keras_hub.layers.CachedMultiHeadAttention,
        )
        saved = decoder_model()
        attention = saved.get_layer("decoder").cross_attention
        assert type(attention) is keras_hub.layers.CachedMultiHeadAttention
        expected = saved([query, source, padding])
        path = os.path.join(tmp_path, "decoder.keras")
        saved.save(path)
    loaded = keras.saving.load_model(path)
    attention = loaded.get_layer("decoder").cross_attention
    assert type(attention) is CoreCachedMultiHeadAttention
    assert [w.path for w in loaded.weights] == [w.path for w in saved.weights]
    assert_close([expected], [loaded([query, source, padding])], "loaded")


def test_decoder_trains_under_mixed_float16(rng):
    # No dropout: Keras' computation then called keras.ops.dot_product_attention, which
    # failed to compile on JAX on a CPU under float16 (F16_F16_F32).
    query, source = sequences(rng)
    x = keras.Input((LENGTH, HIDDEN))
    encoded = keras.Input((SOURCE, HIDDEN))
    block = RelativeTransformerDecoder(12, HEADS, position=ClipPositions(3), dtype="mixed_float16")
    logits = keras.layers.Dense(3, dtype="float32")(block(x, encoded))
    model = keras.Model([x, encoded], logits)
    model.compile(
        optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(1e-3)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    labels = rng.integers(0, 3, (BATCH, LENGTH))
    attention = block.cross_attention.trainable_variables
    before = [to_numpy(v) for v in attention]
    history = model.fit([query, source], labels, batch_size=BATCH, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for variable, value in zip(attention, before):
        after = to_numpy(variable)
        assert np.isfinite(after).all(), variable.path
        # The key bias adds one constant per query to its logits, which the softmax cancels.
        if variable.path.split("/")[-2:] != ["key", "bias"]:
            assert np.abs(after - value).max() > 0, f"{variable.path} did not move"
