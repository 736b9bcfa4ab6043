"""SpatialPadding2D against numpy's np.pad, in eager calls and in models, and the shared checks.

The layer has no weights, so the training-step check does not apply; masks do
not apply to images either. Every other shared check runs.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.padding import PADDING_MODES, SpatialPadding2D, normalize_padding

pytestmark = pytest.mark.contract

NUMPY_MODE = {"zeros": "constant", "circular": "wrap", "reflect": "reflect", "replicate": "edge"}


def numpy_padded(images, padding, mode, data_format="channels_last"):
    (top, bottom), (left, right) = padding
    widths = [(0, 0), (top, bottom), (left, right), (0, 0)]
    if data_format == "channels_first":
        widths = [(0, 0), (0, 0), (top, bottom), (left, right)]
    return np.pad(images, widths, mode=NUMPY_MODE[mode])


def random_images(rng, shape):
    return rng.standard_normal(shape).astype("float32")


PADDINGS = [
    (1, ((1, 1), (1, 1))),
    (0, ((0, 0), (0, 0))),
    ((2, 1), ((2, 2), (1, 1))),
    (((2, 0), (1, 3)), ((2, 0), (1, 3))),
    (((0, 4), (4, 0)), ((0, 4), (4, 0))),  # reflect's largest allowed padding on a 5 x 6 image
]


@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize("padding,pairs", PADDINGS)
def test_matches_numpy_pad(rng, mode, padding, pairs):
    images = random_images(rng, (2, 5, 6, 3))
    layer = SpatialPadding2D(padding, mode=mode)
    assert layer.padding == pairs
    padded = ops.convert_to_numpy(layer(images))
    np.testing.assert_array_equal(padded, numpy_padded(images, pairs, mode))
    assert layer.compute_output_shape(images.shape) == padded.shape


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_channels_first_matches_numpy_pad(rng, mode):
    images = random_images(rng, (2, 3, 4, 5))
    padding = ((1, 3), (2, 0))
    layer = SpatialPadding2D(padding, mode=mode, data_format="channels_first")
    padded = ops.convert_to_numpy(layer(images))
    np.testing.assert_array_equal(padded, numpy_padded(images, padding, mode, "channels_first"))
    assert layer.compute_output_shape(images.shape) == padded.shape == (2, 3, 8, 7)


def test_circular_padding_may_equal_the_size(rng):
    images = random_images(rng, (1, 3, 4, 2))
    padded = ops.convert_to_numpy(SpatialPadding2D(((3, 3), (4, 4)), mode="circular")(images))
    np.testing.assert_array_equal(padded, np.pad(images, [(0, 0), (3, 3), (4, 4), (0, 0)], "wrap"))


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_in_a_model_with_unknown_spatial_size(rng, mode):
    inputs = keras.Input((None, None, 2))
    layer = SpatialPadding2D(((1, 2), (2, 1)), mode=mode)
    outputs = layer(inputs)
    assert tuple(outputs.shape) == (None, None, None, 2)
    model = keras.Model(inputs, outputs)
    for shape in [(2, 4, 5, 2), (1, 7, 3, 2)]:
        images = random_images(rng, shape)
        expected = numpy_padded(images, layer.padding, mode)
        np.testing.assert_array_equal(ops.convert_to_numpy(model(images)), expected)
        np.testing.assert_array_equal(model.predict(images, verbose=0), expected)


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_gradient_reaches_the_pixels_copied_into_the_border(rng, mode):
    """A loss on the border alone trains a layer before the padding, except for zeros."""
    images = np.abs(random_images(rng, (2, 4, 4, 1))) + 0.5
    inputs = keras.Input((4, 4, 1))
    scale = keras.layers.Conv2D(1, 1, use_bias=False, kernel_initializer="ones", name="scale")
    outputs = SpatialPadding2D(1, mode=mode)(scale(inputs))
    model = keras.Model(inputs, outputs)
    border = np.ones((1, 6, 6, 1), "float32")
    border[:, 1:-1, 1:-1] = 0.0

    def border_loss(_, prediction):
        return ops.mean(prediction * ops.convert_to_tensor(border))

    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=border_loss)
    model.train_on_batch(images, np.zeros((2, 6, 6, 1), "float32"))
    kernel = float(ops.convert_to_numpy(model.get_layer("scale").kernel).reshape(()))
    if mode == "zeros":
        assert kernel == 1.0  # the border is constant zero: nothing to learn from it
    else:
        assert kernel < 1.0


def test_output_has_the_layer_compute_dtype():
    images = np.ones((1, 3, 3, 1), "float32")
    for mode in PADDING_MODES:
        out = SpatialPadding2D(1, mode=mode, dtype="bfloat16")(images)
        assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"


@pytest.mark.parametrize("mode", PADDING_MODES)
def test_standard_checks(rng, mode):
    images = random_images(rng, (2, 5, 4, 3))

    def make_layer():
        return SpatialPadding2D(((2, 1), (0, 3)), mode=mode, data_format="channels_last")

    restored = layer_checks.check_config_roundtrip(make_layer(), images)
    assert restored.padding == ((2, 1), (0, 3)) and restored.mode == mode
    layer_checks.check_save_load(make_layer(), images)
    outputs = layer_checks.check_mixed_precision(make_layer(), images)
    expected = numpy_padded(images, ((2, 1), (0, 3)), mode)
    # bfloat16 keeps 8 bits of mantissa; the copied values are rounded, not changed.
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.cast(outputs, "float32")), expected, rtol=1e-2, atol=1e-2
    )
    assert not make_layer().weights  # nothing to train, so the training check does not apply


def test_config_defaults():
    config = SpatialPadding2D(2).get_config()
    assert config["padding"] == [[2, 2], [2, 2]]
    assert config["mode"] == "zeros"
    assert config["data_format"] == keras.config.image_data_format()


@pytest.mark.parametrize("mode", ["zero", "constant", "wrap", "edge", "symmetric", None])
def test_unknown_mode_raises(mode):
    with pytest.raises(ValueError, match=r"SpatialPadding2D '.*': `mode` must be one of"):
        SpatialPadding2D(1, mode=mode)


@pytest.mark.parametrize(
    "padding", [-1, 1.5, True, "1", (1,), (1, 2, 3), ((1, 2), (3,)), ((1, -2), (0, 0)), None]
)
def test_bad_padding_raises(padding):
    with pytest.raises(ValueError, match=r"`padding` must be a non-negative int"):
        SpatialPadding2D(padding)
    with pytest.raises(ValueError, match=r"received padding="):
        normalize_padding(padding)


def test_bad_data_format_raises():
    with pytest.raises(ValueError, match=r"`data_format` must be 'channels_last'"):
        SpatialPadding2D(1, data_format="NHWC")


def test_reflect_needs_padding_smaller_than_the_size():
    images = np.zeros((1, 3, 8, 1), "float32")
    with pytest.raises(ValueError, match=r"mode='reflect' needs padding < the input height"):
        SpatialPadding2D(((3, 0), (1, 1)), mode="reflect")(images)
    with pytest.raises(ValueError, match=r"received padding 3 for height 3"):
        SpatialPadding2D(((0, 3), (1, 1)), mode="reflect")(keras.Input((3, 8, 1)))
    SpatialPadding2D(((2, 2), (7, 7)), mode="reflect")(images)  # the largest allowed


def test_circular_needs_padding_at_most_the_size():
    with pytest.raises(ValueError, match=r"mode='circular' needs padding <= the input width"):
        SpatialPadding2D(((0, 0), (5, 1)), mode="circular")(np.zeros((1, 3, 4, 1), "float32"))
    # zeros and replicate take any padding
    for mode in ("zeros", "replicate"):
        out = SpatialPadding2D(((0, 0), (5, 1)), mode=mode)(np.ones((1, 3, 4, 1), "float32"))
        assert tuple(out.shape) == (1, 3, 10, 1)


def test_rank_must_be_four():
    with pytest.raises(ValueError):
        SpatialPadding2D(1)(np.zeros((3, 4, 1), "float32"))
    with pytest.raises(ValueError, match=r"expected a rank-4 input shape"):
        SpatialPadding2D(1).compute_output_shape((3, 4, 1))
