"""Contextual position encoding (`ContextualPositionAttention`, CoPE): against a numpy
reference written from the paper (tests/reference/contextual_position.py), cached decoding
equal to the full pass, the gates' positions, `.keras` round trip, gradients to the table,
and the errors."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from reference import contextual_position as reference

pytestmark = pytest.mark.contract


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def random_layer(seed=0, **options):
    rng = np.random.default_rng(seed)
    layer = layers.ContextualPositionAttention(3, 4, **options)
    layer.build((None, None, 10))
    for weight in layer.weights:
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.7)
    return layer


def weights_of(layer):
    def pair(dense):
        return numpy(dense.kernel), numpy(dense.bias)

    names = ("query", "key", "value")
    weights = {name: pair(getattr(layer, f"{name}_dense")) for name in names}
    weights["output"] = pair(layer.output_dense)
    return weights


@pytest.mark.parametrize("max_positions", [4, 40])  # clipped positions, and none clipped
def test_equals_the_numpy_reference(max_positions):
    layer = random_layer(max_positions=max_positions)
    x = np.random.default_rng(1).standard_normal((2, 13, 10)).astype("float32")
    padding = np.ones((2, 13), bool)
    padding[1, [0, 5, 6]] = False  # padding anywhere: its gates count nothing
    expected = reference.cope_attention(
        x, weights_of(layer), numpy(layer.position_embeddings), padding
    )
    got = numpy(layer(x, padding_mask=padding))
    valid = np.ones_like(padding)
    valid[1, 0] = False  # a query with no key: zeros here, nothing in the reference
    np.testing.assert_allclose(got[valid], expected[valid], atol=2e-5, rtol=1e-5)


def test_positions_count_the_gates():
    layer = random_layer()
    logits = np.full((1, 1, 3, 3), 50.0, "float32")  # gates of 1: positions are counts
    allowed = np.tril(np.ones((3, 3), bool))[None]
    positions = numpy(layer.contextual_positions(logits, allowed))[0, 0]
    np.testing.assert_allclose(positions, [[1, 0, 0], [2, 1, 0], [3, 2, 1]], atol=1e-6)


def test_cached_decoding_equals_the_full_pass():
    layer = random_layer(seed=2, max_positions=6)
    x = np.random.default_rng(3).standard_normal((2, 9, 10)).astype("float32")
    full = numpy(layer(x))
    cache = np.zeros((2, 2, 9, 3, 4), "float32")
    out, cache = layer(x[:, :4], cache=cache, cache_update_index=0)  # a prompt, then steps
    outputs = [numpy(out)]
    for index in range(4, 9):
        out, cache = layer(x[:, index : index + 1], cache=cache, cache_update_index=index)
        outputs.append(numpy(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=2e-5, rtol=1e-5)


@pytest.mark.neutral
def test_round_trip_keras_mask_and_training(tmp_path):
    inputs = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(30, 10, mask_zero=True)(inputs)
    x = layers.ContextualPositionAttention(2, 5, max_positions=8, name="cope")(x)
    model = keras.Model(inputs, keras.layers.Dense(3)(x))
    ids = np.array([[3, 4, 5, 6, 0], [7, 8, 9, 10, 11]], "int32")
    before = numpy(model(ids))
    path = os.path.join(tmp_path, "cope.keras")
    model.save(path)
    np.testing.assert_allclose(numpy(keras.saving.load_model(path)(ids)), before, atol=1e-6)
    table = model.get_layer("cope").position_embeddings
    start = numpy(table).copy()
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(ids, np.ones((2, 5, 3), "float32"), epochs=2, verbose=0)
    assert not np.allclose(numpy(table), start)  # the zero-initialised table learns


@pytest.mark.neutral
def test_errors():
    layer = layers.ContextualPositionAttention(2, 4)
    x = np.zeros((1, 3, 8), "float32")
    with pytest.raises(ValueError, match=r"`max_positions` must be"):
        layers.ContextualPositionAttention(2, 4, max_positions=1)
    with pytest.raises(ValueError, match="`cache` needs `cache_update_index`"):
        layer(x, cache=np.zeros((1, 2, 3, 2, 4), "float32"))
    with pytest.raises(ValueError, match=r"`cache` must have shape \(batch, 2, max_len, 2, 4\)"):
        layer(x, cache=np.zeros((1, 2, 3, 2, 5), "float32"), cache_update_index=0)
    with pytest.raises(TypeError, match="`padding_mask` must be boolean or integer"):
        layer(x, padding_mask=np.ones((1, 3), "float32"))
