"""The PosENet zoo: registered configurations, frozen backbones, readout parameter counts by
hand, a forward pass, save/load and weights, on small inputs."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import probe, zoo
from keras_posenc.zoo.posenet import (
    FeatureStandardization,
    PosENet,
    PosENetConfig,
    build_posenet,
)

pytestmark = pytest.mark.contract

NAMES = ["posenet_coatnet_0", "posenet_resnet50", "posenet_vgg16"]

# Channels of the tapped stages, from the architectures (not from the models):
# VGG16 block1..5 (Islam et al.'s relu1_2 ... relu5_3); ResNet50 conv2..conv5 (bottleneck
# outputs, 4 x the stage width 64..512); CoAtNet-0 S0..S4 (Dai et al., Table 3).
STAGE_CHANNELS = {
    "posenet_vgg16": (64, 128, 256, 512, 512),
    "posenet_resnet50": (256, 512, 1024, 2048),
    "posenet_coatnet_0": (64, 96, 192, 384, 768),
}
SMALL = {"input_shape": (32, 32, 3), "feature_size": 8}


def count(weights):
    return sum(int(np.prod(w.shape)) for w in weights)


def readout_parameters(channels, layers=1, kernel=3, filters=64, targets=5):
    """k x k convolutions: (k * k * in + 1) * out per layer; hidden layers have `filters`."""
    widths = [channels] + [filters] * (layers - 1) + [targets]
    return sum(kernel * kernel * a * b + b for a, b in zip(widths[:-1], widths[1:]))


def test_registered_configurations():
    assert zoo.list_models(family="posenet") == NAMES
    for name in NAMES:
        spec = zoo.get_spec(name)
        assert spec.builder is build_posenet
        assert spec.config == PosENetConfig(zoo_name=name, backbone=name.removeprefix("posenet_"))
        assert "Islam" in spec.reference and spec.paper_parameters is None


def test_readout_parameters_by_hand():
    # The named configurations: one 3 x 3 convolution, five targets, all stages.
    assert readout_parameters(1472) == 9 * 1472 * 5 + 5 == 66_245
    assert readout_parameters(3840) == 172_805
    assert readout_parameters(1504) == 67_685
    assert readout_parameters(1472, layers=2) == (9 * 1472 * 64 + 64) + (9 * 64 * 5 + 5)


@pytest.mark.parametrize(
    "name",
    [
        "posenet_coatnet_0",
        # Large: on JAX, initialising ResNet50's 23M weights takes seconds on 2 cores, and
        # test_probe.py already builds PosENet on keras.applications' ResNet50 (large too).
        pytest.param("posenet_resnet50", marks=pytest.mark.full),
        "posenet_vgg16",
    ],
)
def test_builds_with_a_frozen_backbone(name):
    posenet = zoo.create(name, **SMALL)
    assert isinstance(posenet, PosENet) and posenet.name == name
    channels = STAGE_CHANNELS[name]
    assert len(posenet.tap_layers) == len(channels)
    if name == "posenet_coatnet_0":  # the five stage outputs of the zoo's features mode
        assert posenet.backbone.name == "coatnet_0" and len(posenet.backbone.outputs) == 5
        assert posenet.tap_layers == [
            "stem_conv2",
            "stage1_block2",
            "stage2_block3",
            "stage3_block5",
            "stage4_block2",
        ]
    assert tuple(posenet.get_layer("features").output.shape) == (None, 8, 8, sum(channels))
    assert posenet.output_shape == (None, 32, 32, 5)
    # Frozen: the backbone has no trainable weights and the readout holds all of them.
    assert posenet.backbone.trainable_weights == []
    readout = [w for layer in posenet.layers if "readout" in layer.name for w in layer.weights]
    assert {id(w) for w in posenet.trainable_weights} == {id(w) for w in readout}
    assert count(posenet.trainable_weights) == readout_parameters(sum(channels))
    # Non-trainable: the backbone, and the readout's input standardisation (mean, inverse scale).
    standardisation = posenet.get_layer("feature_standardization").count_params()
    assert standardisation == 2 * sum(channels)
    assert count(posenet.non_trainable_weights) == posenet.backbone.count_params() + standardisation


@pytest.mark.parametrize(
    "overrides,layers,kernel,filters,targets",
    [
        ({"readout_layers": 2, "readout_filters": 16}, 2, 3, 16, 5),
        ({"kernel_size": 5, "readout_layers": 3, "readout_filters": 8, "targets": "G"}, 3, 5, 8, 1),
    ],
)
def test_readout_overrides_count_by_hand(overrides, layers, kernel, filters, targets):
    posenet = zoo.create("posenet_vgg16", input_shape=(32, 32, 3), feature_size=16, **overrides)
    expected = readout_parameters(1472, layers, kernel, filters, targets)
    assert count(posenet.trainable_weights) == expected
    assert posenet.output_shape == (None, 32, 32, targets)


def test_forward_pass_and_save_load(tmp_path):
    posenet = zoo.create("posenet_vgg16", **SMALL, targets=["H", "G"])
    images = keras.applications.vgg16.preprocess_input(
        probe.content_free_images("noise", 2, 32, 32, scale=255.0)
    )
    # Statistics as probe.train sets them must survive saving too.
    rng = np.random.default_rng(0)
    posenet.get_layer("feature_standardization").set_statistics(
        rng.uniform(0, 1, 1472), rng.uniform(0, 2, 1472)
    )
    maps = ops.convert_to_numpy(posenet.predict_on_batch(images))
    assert maps.shape == (2, 32, 32, 2) and 0.0 <= maps.min() and maps.max() <= 1.0
    path = os.path.join(tmp_path, "posenet.keras")
    posenet.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, PosENet) and loaded.target_names == ("H", "G")
    assert loaded.backbone.trainable_weights == []
    assert count(loaded.trainable_weights) == readout_parameters(1472, targets=2)
    np.testing.assert_allclose(
        ops.convert_to_numpy(loaded.predict_on_batch(images)), maps, atol=1e-6
    )
    # zoo.create(weights=...) loads a whole saved PosENet of the same configuration.
    again = zoo.create("posenet_vgg16", weights=path, **SMALL, targets=["H", "G"])
    for a, b in zip(posenet.get_weights(), again.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.full
@pytest.mark.parametrize("name", ["posenet_resnet50", "posenet_coatnet_0"])
def test_save_load_round_trip_large(name, tmp_path):
    """Large: ResNet50 and CoAtNet-0 hold 24-25M weights; writing and compiling them is slow."""
    posenet = zoo.create(name, **SMALL)
    images = probe.content_free_images("noise", 2, 32, 32)
    expected = ops.convert_to_numpy(posenet.predict_on_batch(images))
    path = os.path.join(tmp_path, f"{name}.keras")
    posenet.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.tap_layers == posenet.tap_layers and loaded.backbone.trainable_weights == []
    np.testing.assert_allclose(
        ops.convert_to_numpy(loaded.predict_on_batch(images)), expected, atol=1e-5
    )


@pytest.mark.full
def test_probe_train_decodes_position_from_a_random_vgg16():
    """probe.train on posenet_vgg16 (weights=None) learns the maps instead of saturating.

    Raw random-VGG16 features are all positive and ~50 x apart in scale between stages;
    before the readout standardised them, Adam drove the sigmoid into its tails and every
    predicted map was constant (SPC 0). Large: JAX compiles VGG16 for 20 s on 2 cores.
    """
    keras.utils.set_random_seed(0)
    posenet = zoo.create("posenet_vgg16", input_shape=(64, 64, 3), feature_size=14, targets="H")
    train = probe.content_free_images("noise", 16, 64, 64)
    test = probe.content_free_images("noise", 8, 64, 64)
    probe.train(posenet, train, epochs=10, batch_size=8, verbose=0)
    scores = probe.evaluate(posenet, test, verbose=0)["H"]
    assert not scores["constant"] and scores["spc"] > 0.5, scores


@pytest.mark.full
def test_backbone_weights_are_loaded(tmp_path):
    """Large: writes VGG16's 14.7M weights. A user's backbone weights go in by path."""
    source = keras.applications.VGG16(include_top=False, weights=None, input_shape=(32, 32, 3))
    path = os.path.join(tmp_path, "vgg16.weights.h5")
    source.save_weights(path)
    posenet = zoo.create("posenet_vgg16", backbone_weights=path, **SMALL)
    for a, b in zip(source.get_weights(), posenet.backbone.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_feature_standardization_against_numpy_and_its_errors(rng):
    layer = FeatureStandardization()
    x = rng.normal(size=(2, 3, 4, 5)).astype("float32")
    layer(x)
    np.testing.assert_array_equal(ops.convert_to_numpy(layer(x)), x)  # identity until set
    mean, inverse = rng.normal(size=5), np.array([1.0, 0.5, 0.0, 2.0, 3.0])
    layer.set_statistics(mean, inverse)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x)), (x - mean) * inverse, rtol=1e-6, atol=1e-6
    )
    assert layer.trainable_weights == [] and layer.count_params() == 10
    with pytest.raises(ValueError, match=r"`mean` must have shape \(5,\); received \(4,\)"):
        layer.set_statistics(np.zeros(4), np.ones(5))
    with pytest.raises(ValueError, match="call or build it first"):
        FeatureStandardization().set_statistics(np.zeros(5), np.ones(5))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"build_posenet: `backbone` must be one of 'vgg16'"):
        build_posenet("vgg19")
    with pytest.raises(ValueError, match=r"build_posenet: `input_shape` must be"):
        build_posenet("vgg16", input_shape=(32, 32))
    with pytest.raises(ValueError, match=r"unknown override 'feature_sise'"):
        zoo.create("posenet_vgg16", feature_sise=8)
    with pytest.raises(ValueError, match=r"divisible by 32"):
        zoo.create("posenet_coatnet_0", input_shape=(48, 48, 3))
