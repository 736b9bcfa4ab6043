"""RelativePositionBias2D against the numpy reference, resizing on load, and the shared checks."""

from __future__ import annotations

import os
import re

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D
from reference.relative_position_2d import (
    bilinear_resize,
    relative_position_bias_2d,
    resize_table_for_grid,
)

pytestmark = pytest.mark.contract

TEST_PACKAGE = "keras_posenc_tests"


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class AddRelativeBias2D(keras.layers.Layer):
    """Test adapter: adds the 2D bias to attention logits, so the tensor-based checks apply."""

    def __init__(self, num_heads, size, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.size = tuple(size)
        self.relative_bias = RelativePositionBias2D(num_heads, size, dtype=self.dtype_policy)

    def call(self, logits):
        return logits + ops.cast(self.relative_bias(), logits.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "size": list(self.size)}


def random_table(rng, heads, height, width):
    return rng.standard_normal((heads, 2 * height - 1, 2 * width - 1)).astype("float32")


def as_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def adapter_model(num_heads, size):
    positions = size[0] * size[1]
    inputs = keras.Input((num_heads, positions, positions))
    return keras.Model(inputs, AddRelativeBias2D(num_heads, size, name="add_bias")(inputs))


def model_table(model):
    return model.get_layer("add_bias").relative_bias.table


# --------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("size", [(3, 3), (2, 5), (4, 3), (1, 1), (1, 4)])
def test_matches_reference(rng, size):
    layer = RelativePositionBias2D(num_heads=3, size=size)
    table = random_table(rng, 3, *size)
    layer.table.assign(table)
    expected = relative_position_bias_2d(table, *size)
    actual = as_numpy(layer())
    assert actual.shape == expected.shape == layer.compute_output_shape()
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


def test_int_size_means_square_grid(rng):
    layer = RelativePositionBias2D(num_heads=2, size=3)
    assert layer.size == (3, 3)
    table = random_table(rng, 2, 3, 3)
    layer.table.assign(table)
    np.testing.assert_allclose(
        as_numpy(layer()), relative_position_bias_2d(table, 3, 3), atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("override", [(5, 2), (3, 4), (1, 1)])
def test_size_override_resizes_in_call(rng, override):
    layer = RelativePositionBias2D(num_heads=2, size=(3, 4))
    table = random_table(rng, 2, 3, 4)
    layer.table.assign(table)
    expected = relative_position_bias_2d(resize_table_for_grid(table, *override), *override)
    actual = as_numpy(layer(size=override))
    assert actual.shape == layer.compute_output_shape(size=override)
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "table_size, grid", [((7, 7), (12, 12)), ((12, 12), (7, 7)), ((3, 5), (4, 2)), ((1, 1), (3, 2))]
)
def test_resize_table_matches_reference(rng, table_size, grid):
    table = random_table(rng, 3, *table_size)
    resized = RelativePositionBias2D.resize_table(table, grid)
    assert resized.dtype == np.float32
    np.testing.assert_allclose(resized, resize_table_for_grid(table, *grid), atol=1e-5, rtol=0)


def test_resize_table_same_size_is_identity(rng):
    table = random_table(rng, 2, 4, 3)
    assert np.array_equal(RelativePositionBias2D.resize_table(table, (4, 3)), table)


def test_reference_resize_is_torch_bilinear_without_align_corners(rng):
    # Pins the documented semantics to timm's: F.interpolate(bilinear, align_corners=False).
    # Cross-checks the numpy reference against torch's own bilinear resize (what timm
    # uses); torch is an optional extra, installed by CI through `keras-posenc[all]`.
    torch = pytest.importorskip("torch", reason="needs the 'torch' extra for F.interpolate")
    F = torch.nn.functional

    for shape, out in [((2, 13, 13), (23, 23)), ((1, 5, 9), (3, 17)), ((2, 23, 23), (13, 9))]:
        table = rng.standard_normal(shape).astype("float32")
        expected = F.interpolate(
            torch.from_numpy(table)[None], size=out, mode="bilinear", align_corners=False
        )[0].numpy()
        np.testing.assert_allclose(bilinear_resize(table, *out), expected, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- loading resized


@pytest.mark.parametrize("extension", [".weights.h5", ".keras"])
@pytest.mark.parametrize("target", [(12, 12), (7, 7), (3, 5)])
def test_load_weights_saved_at_another_size(rng, tmp_path, extension, target):
    trained = adapter_model(2, (7, 7))
    table = random_table(rng, 2, 7, 7)
    model_table(trained).assign(table)
    path = os.path.join(tmp_path, "model" + extension)
    if extension == ".keras":
        trained.save(path)
    else:
        trained.save_weights(path)

    model = adapter_model(2, target)
    model.load_weights(path)
    loaded = ops.convert_to_numpy(model_table(model))
    if target == (7, 7):
        assert np.array_equal(loaded, table), "same-size load must be exact"
    else:
        expected = resize_table_for_grid(table, *target)
        np.testing.assert_allclose(loaded, expected, atol=1e-5, rtol=0)

    positions = target[0] * target[1]
    logits = rng.standard_normal((1, 2, positions, positions)).astype("float32")
    expected_out = logits + relative_position_bias_2d(
        resize_table_for_grid(table, *target), *target
    )
    np.testing.assert_allclose(as_numpy(model(logits)), expected_out, atol=1e-5, rtol=0)


def test_load_with_other_num_heads_raises(rng, tmp_path):
    trained = adapter_model(4, (3, 3))
    path = os.path.join(tmp_path, "model.weights.h5")
    trained.save_weights(path)
    model = adapter_model(2, (3, 3))
    with pytest.raises(ValueError, match=r"RelativePositionBias2D.*num_heads=2.*\(4, 5, 5\)"):
        model.load_weights(path)


# --------------------------------------------------------------------------- shared layer checks


def adapter_and_logits(rng):
    logits = rng.standard_normal((2, 3, 12, 12)).astype("float32")
    return AddRelativeBias2D(3, (3, 4)), logits


def test_layer_config_roundtrip(rng):
    layer = RelativePositionBias2D(num_heads=3, size=(2, 5), name="rpb")
    restored = layer_checks.check_config_roundtrip(layer)
    assert restored.size == (2, 5) and restored.num_heads == 3
    restored.set_weights(layer.get_weights())
    layer_checks.assert_outputs_close(layer(), restored(), "RelativePositionBias2D from_config")


def test_initializer_in_config():
    layer = RelativePositionBias2D(num_heads=1, size=2, embeddings_initializer="ones")
    restored = RelativePositionBias2D.from_config(layer.get_config())
    np.testing.assert_array_equal(ops.convert_to_numpy(restored.table), np.ones((1, 3, 3)))


def test_default_initializer_is_small_truncated_normal():
    values = ops.convert_to_numpy(RelativePositionBias2D(num_heads=8, size=(7, 7)).table)
    assert 0.01 < values.std() < 0.03 and np.abs(values).max() <= 0.04 + 1e-6


def test_adapter_config_roundtrip(rng):
    layer, logits = adapter_and_logits(rng)
    layer_checks.check_config_roundtrip(layer, logits)


def test_save_load(rng, tmp_path):
    layer, logits = adapter_and_logits(rng)
    layer_checks.check_save_load(layer, logits, directory=tmp_path)


def test_training_step(rng):
    layer, logits = adapter_and_logits(rng)
    layer_checks.check_training_step(layer, logits)


def test_mixed_precision(rng):
    layer, logits = adapter_and_logits(rng)
    layer_checks.check_mixed_precision(layer, logits)

    # Against the reference at a bfloat16 tolerance, with a table of unit scale.
    low = RelativePositionBias2D(num_heads=3, size=(3, 4), dtype="mixed_bfloat16")
    table = random_table(rng, 3, 3, 4)
    low.table.assign(table)
    assert low.table.dtype == "float32"
    for size in [None, (4, 2)]:
        output = low(size=size)
        assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
        grid = (3, 4) if size is None else size
        expected = relative_position_bias_2d(resize_table_for_grid(table, *grid), *grid)
        np.testing.assert_allclose(as_numpy(output), expected, atol=2e-2, rtol=0)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("num_heads", [0, -2, 2.0, "2", True])
def test_bad_num_heads(num_heads):
    with pytest.raises(ValueError, match=rf"RelativePositionBias2D.*`num_heads`.*{num_heads!r}"):
        RelativePositionBias2D(num_heads=num_heads, size=(3, 3))


@pytest.mark.parametrize("size", [(0, 3), (3,), (2, 3, 4), -1, "7", (2.0, 3), None])
def test_bad_size(size):
    with pytest.raises(ValueError, match=r"RelativePositionBias2D.*`size`.*pair.*received size="):
        RelativePositionBias2D(num_heads=2, size=size)


def test_bad_size_in_call():
    layer = RelativePositionBias2D(num_heads=2, size=(3, 3), name="rpb")
    with pytest.raises(ValueError, match=r"RelativePositionBias2D 'rpb'.*`size`.*\(0, 2\)"):
        layer(size=(0, 2))


@pytest.mark.parametrize("shape", [(5, 5), (2, 4, 5), (2, 5, 0), (0, 5, 5), (1, 2, 5, 5)])
def test_resize_table_rejects_bad_table(shape):
    with pytest.raises(ValueError, match=r"resize_table.*`table`.*odd.*" + re.escape(repr(shape))):
        RelativePositionBias2D.resize_table(np.zeros(shape, "float32"), (3, 3))


@pytest.mark.parametrize("size", [(0, 4), (-1, 2), (3,)])
def test_resize_table_rejects_bad_size(size):
    with pytest.raises(ValueError, match=r"RelativePositionBias2D.resize_table.*`size`"):
        RelativePositionBias2D.resize_table(np.zeros((1, 5, 5), "float32"), size)
