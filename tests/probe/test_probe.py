"""PosENet's metrics, inputs, probe backbone and readout model (Islam et al. 2020)."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
from keras import ops
from scipy import stats

from keras_posenc import probe
from keras_posenc.layers.padding import SpatialPadding2D

pytestmark = pytest.mark.contract

# --------------------------------------------------------------------------- metrics


def scipy_spc(prediction, target):
    return float(
        np.mean(
            [stats.spearmanr(p.ravel(), t.ravel()).statistic for p, t in zip(prediction, target)]
        )
    )


def test_spc_matches_scipy_per_image_average(rng):
    prediction = rng.random((3, 6, 7))
    target = rng.random((3, 6, 7))
    assert probe.spc(prediction, target) == pytest.approx(scipy_spc(prediction, target), abs=1e-12)
    # Per image, then averaged: not one correlation over the pooled pixels.
    pooled = stats.spearmanr(prediction.ravel(), target.ravel()).statistic
    assert probe.spc(prediction, target) != pytest.approx(pooled, abs=1e-6)


def test_spc_handles_ties_like_scipy(rng):
    prediction = np.round(rng.random((2, 5, 5)) * 3)  # many ties
    target = probe.position_patterns(5, 5)["G"]
    expected = scipy_spc(prediction, np.broadcast_to(target, prediction.shape))
    assert probe.spc(prediction, target) == pytest.approx(expected, abs=1e-12)


def test_spc_known_values_and_shapes():
    target = probe.position_patterns(6, 6)["H"]
    assert probe.spc(np.exp(target), target) == pytest.approx(1.0)
    assert probe.spc(-target, target) == pytest.approx(-1.0)
    assert probe.spc(target.T, target) == pytest.approx(0.0, abs=1e-12)  # V against H
    batch = np.stack([target, -target])[..., None]  # (images, h, w, 1)
    assert probe.spc(batch, target) == pytest.approx(0.0, abs=1e-12)
    assert probe.spc(ops.convert_to_tensor(np.exp(target)), target) == pytest.approx(1.0)


def test_spc_constant_prediction_is_zero_and_flagged():
    target = probe.position_patterns(5, 5)["H"]
    assert probe.spc(np.full((5, 5), 0.3), target) == 0.0
    assert probe.spc(np.full((5, 5), 0.3), target, return_flag=True) == (0.0, True)
    mixed = np.stack([np.full((5, 5), 0.3), target])  # one constant, one perfect image
    value, flagged = probe.spc(mixed, target, return_flag=True)
    assert value == pytest.approx(0.5) and flagged
    value, flagged = probe.spc(target, target, return_flag=True)
    assert value == pytest.approx(1.0) and not flagged


def test_spc_near_constant_prediction_is_guarded(rng):
    target = probe.position_patterns(5, 5)["H"]
    rounding = 0.5 + 1e-9 * rng.standard_normal((5, 5))  # float noise, not signal
    assert probe.spc(rounding, target, return_flag=True) == (0.0, True)
    signal = 0.5 + 1e-5 * target
    assert probe.spc(signal, target, return_flag=True) == (pytest.approx(1.0), False)
    assert probe.spc(signal, target, return_flag=True, tolerance=1e-4) == (0.0, True)


def test_spc_rejects_bad_input():
    target = probe.position_patterns(5, 5)["H"]
    with pytest.raises(ValueError, match=r"probe.spc: `target` is constant"):
        probe.spc(target, np.ones((5, 5)))
    with pytest.raises(ValueError, match=r"`prediction` holds NaN"):
        probe.spc(np.where(target > 0.5, np.nan, target), target)
    with pytest.raises(ValueError, match=r"one map of the prediction's size"):
        probe.spc(np.ones((2, 5, 4)), target)
    with pytest.raises(ValueError, match=r"`prediction` must be a map"):
        probe.spc(np.ones(5), target)


def test_mae_known_values():
    target = probe.position_patterns(4, 5)["H"]  # columns 0, .25, .5, .75, 1
    assert probe.mae(target, target) == 0.0
    assert probe.mae(np.full((3, 4, 5, 1), 0.5), target) == pytest.approx(0.3)
    assert probe.mae(1.0 - target, target) == pytest.approx(np.mean(np.abs(1 - 2 * target)))
    with pytest.raises(ValueError, match=r"probe.mae: `target` must be one map"):
        probe.mae(np.ones((4, 4)), target)


# --------------------------------------------------------------------------- inputs


def test_content_free_images():
    noise = probe.content_free_images("noise", 3, 8, 9, channels=2, seed=5)
    assert noise.shape == (3, 8, 9, 2) and noise.dtype == np.float32
    assert 0.0 <= noise.min() and noise.max() < 1.0 and noise.std() > 0.2
    np.testing.assert_array_equal(noise, probe.content_free_images("noise", 3, 8, 9, 2, seed=5))
    assert not np.array_equal(noise, probe.content_free_images("noise", 3, 8, 9, 2, seed=6))
    assert np.all(probe.content_free_images("grey", 2, 4, 4) == 0.5)
    assert np.all(probe.content_free_images("white", 2, 4, 4, scale=255.0) == 255.0)
    with pytest.raises(ValueError, match=r"`kind` must be one of 'noise', 'grey', 'white'"):
        probe.content_free_images("black", 1, 4, 4)
    with pytest.raises(ValueError, match=r"`count` must be an integer >= 1"):
        probe.content_free_images("grey", 0, 4, 4)


# --------------------------------------------------------------------------- probe backbone


@pytest.mark.parametrize("padding", probe.BACKBONE_PADDINGS)
def test_probe_backbone_uses_its_padding_mode_only(padding):
    net = probe.probe_backbone(padding, input_shape=(24, 24, 3), stages=2, width=4)
    pads = [layer for layer in net.layers if isinstance(layer, SpatialPadding2D)]
    convs = [layer for layer in net.layers if isinstance(layer, keras.layers.Conv2D)]
    assert all(conv.padding == "valid" for conv in convs) and len(convs) == 4
    if padding == "valid":
        assert not pads
        assert tuple(net.output.shape) == (None, 6, 6, 8)  # 24-2-2=20, /2=10, -2-2=6
    else:
        assert len(pads) == 4 and {p.mode for p in pads} == {padding}
        assert tuple(net.output.shape) == (None, 12, 12, 8)
    assert probe.default_tap_layers(net) == ["stage1_conv2", "stage2_conv2"]


def test_probe_backbone_weights_come_from_the_seed():
    net = probe.probe_backbone("zeros", input_shape=(8, 8, 3), stages=1, width=4, seed=7)
    kernel = ops.convert_to_numpy(net.get_layer("stage1_conv1").kernel)
    expected = np.random.default_rng(7).standard_normal((3, 3, 3, 4)) * np.sqrt(2.0 / 27)
    np.testing.assert_allclose(kernel, expected.astype("float32"), rtol=1e-6)
    assert not np.any(ops.convert_to_numpy(net.get_layer("stage1_conv1").bias))
    again = probe.probe_backbone("zeros", input_shape=(8, 8, 3), stages=1, width=4, seed=7)
    for a, b in zip(net.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_circular_backbone_is_shift_equivariant_and_zero_padding_is_not():
    images = probe.content_free_images("noise", 1, 16, 16, seed=3)
    shifted = np.roll(images, (3, 5), axis=(1, 2))
    for padding, equivariant in (("circular", True), ("zeros", False), ("replicate", False)):
        net = probe.probe_backbone(padding, input_shape=(16, 16, 3), stages=1, width=4)
        out = ops.convert_to_numpy(net(images))
        out_shifted = ops.convert_to_numpy(net(shifted))
        difference = np.max(np.abs(np.roll(out, (3, 5), axis=(1, 2)) - out_shifted))
        assert (difference < 1e-5) == equivariant, (padding, difference)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"padding": "same"}, r"`padding` must be one of 'zeros', 'circular'"),
        ({"kernel_size": 4}, r"`kernel_size` must be odd"),
        ({"width": 0}, r"`width` must be an integer >= 1"),
        ({"input_shape": (16, 16)}, r"`input_shape` must be \(height, width, channels\)"),
        ({"padding": "valid", "input_shape": (12, 12, 3)}, r"would shrink .* to nothing"),
    ],
)
def test_probe_backbone_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        probe.probe_backbone(**{"input_shape": (16, 16, 3), **kwargs})


# --------------------------------------------------------------------------- PosENet


def weights_of(layers):
    return [ops.convert_to_numpy(w).copy() for layer in layers for w in layer.weights]


def assert_frozen_and_readout_trains(posenet, backbone, images):
    readout = [layer for layer in posenet.layers if layer.name.startswith("readout_conv")]
    assert backbone.trainable_weights == []
    assert {id(w) for w in posenet.trainable_weights} == {
        id(w) for layer in readout for w in layer.weights
    }
    backbone_before, readout_before = weights_of([backbone]), weights_of(readout)
    history = probe.train(posenet, images, epochs=1, batch_size=len(images), verbose=0)
    assert len(history.history["loss"]) == 1
    for before, after in zip(backbone_before, weights_of([backbone])):
        np.testing.assert_array_equal(before, after)
    changed = [not np.array_equal(b, a) for b, a in zip(readout_before, weights_of(readout))]
    assert all(changed), "the readout did not learn"


def assert_standardised_from(posenet, images):
    """probe.train set the readout's standardisation from these images' features."""
    features = np.asarray(posenet.feature_model().predict(images, verbose=0), np.float64)
    layer = posenet.get_layer("feature_standardization")
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer.mean), features.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-6
    )
    spread = features.std(axis=(0, 1, 2))
    varies = spread > 1e-3
    assert varies.any()
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer.inverse_scale)[varies], 1.0 / spread[varies], rtol=1e-3
    )


def test_posenet_on_the_probe_backbone():
    backbone = probe.probe_backbone("zeros", input_shape=(32, 32, 3), width=4)
    posenet = probe.PosENet(backbone, feature_size=12, readout_layers=2, readout_filters=8)
    assert posenet.tap_layers == ["stage1_conv2", "stage2_conv2", "stage3_conv2"]
    assert posenet.output_shape == (None, 32, 32, 5)
    features = posenet.get_layer("features").output
    assert tuple(features.shape) == (None, 12, 12, 4 + 8 + 16)
    assert tuple(posenet.get_layer("readout_conv_1").output.shape) == (None, 8, 8, 5)
    images = probe.content_free_images("noise", 2, 32, 32)
    assert_frozen_and_readout_trains(posenet, backbone, images)
    assert_standardised_from(posenet, images)
    results = probe.evaluate(posenet, images, verbose=0)
    maps = posenet.predict(images, verbose=0)
    assert maps.shape == (2, 32, 32, 5) and 0.0 <= maps.min() and maps.max() <= 1.0
    assert list(results) == list(probe.PATTERN_NAMES)
    for name, scores in results.items():
        assert set(scores) == {"spc", "mae", "constant"}
        assert -1.0 <= scores["spc"] <= 1.0 and 0.0 <= scores["mae"] <= 1.0, name


@pytest.mark.full
def test_posenet_on_vgg16():
    """Large: JAX compiles VGG16's forward pass for ~20 s on 2 cores (posenet_vgg16 is built
    at a small size in the default suite by tests/zoo/test_posenet_models.py)."""
    vgg = keras.applications.VGG16(weights=None, include_top=False, input_shape=(64, 64, 3))
    posenet = probe.PosENet(vgg, feature_size=14, targets=["H", "G"])
    assert posenet.tap_layers == probe.KNOWN_TAP_LAYERS["vgg16"]
    assert posenet.output_shape == (None, 64, 64, 2)
    assert tuple(posenet.get_layer("features").output.shape) == (None, 14, 14, 1472)
    images = probe.content_free_images("noise", 2, 64, 64)
    assert_frozen_and_readout_trains(posenet, vgg, images)
    assert_standardised_from(posenet, images)


@pytest.mark.full
def test_posenet_on_resnet50():
    """Large: building ResNet50 and compiling its step takes 10-20 s on JAX on 2 cores."""
    resnet = keras.applications.ResNet50(weights=None, include_top=False, input_shape=(64, 64, 3))
    posenet = probe.PosENet(resnet, feature_size=14, targets=["V"])
    assert posenet.tap_layers == probe.KNOWN_TAP_LAYERS["resnet50"]
    assert posenet.output_shape == (None, 64, 64, 1)
    assert tuple(posenet.get_layer("features").output.shape) == (None, 14, 14, 3840)
    images = probe.content_free_images("noise", 2, 64, 64)
    assert_frozen_and_readout_trains(posenet, resnet, images)


def user_model():
    inputs = keras.Input((None, None, 1))
    x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="first")(inputs)
    x = keras.layers.MaxPooling2D(name="pool")(x)
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="second")(x)
    return keras.Model(inputs, x, name="mine")


def test_posenet_on_a_user_functional_model():
    backbone = user_model()
    with pytest.raises(ValueError, match=r"no default tap layers for backbone 'mine'"):
        probe.PosENet(backbone, image_shape=(16, 16, 1))
    with pytest.raises(ValueError, match=r"pass `image_shape=\(height, width, channels\)`"):
        probe.PosENet(backbone, tap_layers=["first", "second"])
    with pytest.raises(ValueError, match=r"has no layer 'secnd'. Did you mean 'second'"):
        probe.PosENet(backbone, tap_layers=["secnd"], image_shape=(16, 16, 1))
    posenet = probe.PosENet(
        backbone, tap_layers=["first", "second"], image_shape=(16, 16, 1), feature_size=8
    )
    assert posenet.output_shape == (None, 16, 16, 5)
    images = probe.content_free_images("noise", 2, 16, 16, channels=1)
    assert_frozen_and_readout_trains(posenet, backbone, images)


def test_posenet_on_a_sequential_model():
    backbone = keras.Sequential(
        [keras.Input((12, 12, 3)), keras.layers.Conv2D(4, 3, padding="same", name="conv")]
    )
    posenet = probe.PosENet(backbone, tap_layers=["conv"], feature_size=6, targets="G")
    assert posenet.output_shape == (None, 12, 12, 1) and posenet.target_names == ("G",)


def test_readout_alone_on_a_constant_input_carries_no_position():
    """The paper's "PosENet alone" with a 'valid' readout: nothing to decode, even after training.

    The control shows the test can fail: a zero-padded readout sees the border.
    """
    grey = probe.content_free_images("grey", 2, 16, 16)
    results = {}
    for readout_padding in (0, 1):
        alone = probe.PosENet(
            None, image_shape=(16, 16, 3), feature_size=16, readout_padding=readout_padding
        )
        assert alone.tap_layers == [] and alone.backbone is None
        probe.train(alone, grey, epochs=20, learning_rate=0.1, verbose=0)
        results[readout_padding] = probe.evaluate(alone, grey, verbose=0)
    for name in probe.PATTERN_NAMES:
        assert results[0][name]["constant"] and results[0][name]["spc"] == 0.0, name
    assert not results[1]["H"]["constant"] and results[1]["H"]["spc"] > 0.3, results[1]["H"]


def as_json(config):
    return json.loads(json.dumps(config))


def test_posenet_saves_and_loads(tmp_path):
    backbone = probe.probe_backbone("reflect", input_shape=(16, 16, 3), stages=2, width=4)
    posenet = probe.PosENet(backbone, feature_size=8, targets=["H", "VS"], readout_layers=2)
    images = probe.content_free_images("noise", 2, 16, 16)
    expected = ops.convert_to_numpy(posenet(images))
    path = os.path.join(tmp_path, "posenet.keras")
    posenet.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, probe.PosENet)
    # JSON turns the backbone's tuples into lists; compare what a .keras file holds.
    assert as_json(loaded.get_config()) == as_json(posenet.get_config())
    np.testing.assert_allclose(ops.convert_to_numpy(loaded(images)), expected, atol=1e-6)
    assert loaded.backbone.trainable_weights == [] and len(loaded.trainable_weights) == 4


def test_posenet_config_round_trip():
    posenet = probe.PosENet(None, image_shape=(12, 12, 1), feature_size=10, kernel_size=5)
    restored = probe.PosENet.from_config(posenet.get_config())
    assert restored.get_config() == posenet.get_config()
    assert restored.output_shape == (None, 12, 12, 5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"targets": ["H", "X"]}, r"`targets` must be distinct names"),
        ({"targets": ["H", "H"]}, r"`targets` must be distinct names"),
        ({"kernel_size": 0}, r"`kernel_size` must be an integer >= 1"),
        ({"feature_size": 4, "readout_layers": 2}, r"leave no output of a 4 x 4 feature grid"),
        ({"image_shape": (8, 8)}, r"`image_shape` \(8, 8\) must be"),
        ({"readout_padding": -1}, r"PosENet: `readout_padding` must be an integer >= 0, got -1"),
    ],
)
def test_posenet_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        probe.PosENet(None, **{"image_shape": (8, 8, 1), "feature_size": 6, **kwargs})


def test_posenet_image_shape_must_match_the_backbone():
    backbone = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=1, width=2)
    with pytest.raises(ValueError, match=r"agree with the backbone's input \(16, 16, 3\)"):
        probe.PosENet(backbone, image_shape=(32, 32, 3))
    with pytest.raises(ValueError, match=r"must have shape \(count, 16, 16, 3\)"):
        probe.evaluate(probe.PosENet(backbone, feature_size=8), np.zeros((1, 8, 8, 3)))
