"""Feature pyramids (keras_posenc/zoo/features.py): levels, strides and channels against the
models' stages, the features equal to the classifier's stage outputs on the same weights,
.keras round trips, images of any size, PosENet's backbones and errors, on tiny models."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import probe, zoo
from keras_posenc.zoo.features import FeaturePyramidModel, feature_pyramid

pytestmark = pytest.mark.contract

# The stages S0..S4 of each tiny model, and the layers ending them written out by hand from
# the builders' naming (stem_conv{n}, stage{s}_block{n}[ _grid_attention]), not read from
# feature_info: S0 at stride 2, each later stage halves the map once more.
COATNET = {"blocks": (2, 1, 1, 2, 1), "channels": (8, 8, 16, 32, 32), "head_dim": 16}
MAXVIT = {"blocks": (2, 1, 1, 1, 1), "channels": (8, 8, 16, 16, 32), "head_dim": 8}
STAGE_LAYERS = {
    "coatnet_0": ["stem_conv2", "stage1_block1", "stage2_block1", "stage3_block2",
                  "stage4_block1"],
    "maxvit_t": ["stem_conv2", *(f"stage{s}_block1_grid_attention" for s in range(1, 5))],
    "maxxvit_rmlp_nano_rw_256": ["stem_conv2",
                                 *(f"stage{s}_block1_grid_attention" for s in range(1, 5))],
    "coatnext_nano_rw_224": ["stem_conv2", *(f"stage{s}_block1" for s in range(1, 5))],
}  # fmt: skip
# MaxxViT and CoAtNeXt: ConvNeXt stages widen through their depthwise convolutions, so each
# stage's width is a multiple of the last.
MAXXVIT = {"blocks": (2, 1, 1, 1, 1), "channels": (8, 8, 16, 32, 64), "stem_channels": (8, 8),
           "head_dim": 8}  # fmt: skip
TINY = {"coatnet_0": COATNET, "maxvit_t": MAXVIT, "maxxvit_rmlp_nano_rw_256": MAXXVIT,
        "coatnext_nano_rw_224": MAXXVIT}  # fmt: skip
# Not square: 64 x 96 (MaxViT's windows are then 2 x 3 cells).
SIZE = (64, 96)


def numpy(tensor):
    return ops.convert_to_numpy(tensor)


def images(count=2, size=SIZE, seed=0):
    return np.random.default_rng(seed).standard_normal((count, *size, 3)).astype("float32")


@pytest.mark.parametrize("name", sorted(TINY))
def test_levels_are_the_stages(name):
    model = zoo.create(name, input_shape=(*SIZE, 3), num_classes=3, **TINY[name])
    assert isinstance(model, FeaturePyramidModel) and model.output_shape == (None, 3)
    channels = TINY[name]["channels"]
    assert model.feature_info == [
        {"level": f"P{s + 1}", "stride": 2 ** (s + 1), "channels": channels[s], "name": layer}
        for s, layer in enumerate(STAGE_LAYERS[name])
    ]
    # keras-hub's convention: the pyramid's tensors are the stages' outputs in the graph.
    assert list(model.pyramid_outputs) == ["P1", "P2", "P3", "P4", "P5"]
    for stage, (level, tensor) in enumerate(model.pyramid_outputs.items()):
        stride = 2 ** (stage + 1)
        assert tensor is model.get_layer(STAGE_LAYERS[name][stage]).output, level
        assert tuple(tensor.shape) == (None, SIZE[0] // stride, SIZE[1] // stride, channels[stage])
    # features=True: the same levels, its outputs the list of the five maps.
    features = zoo.create(name, input_shape=(*SIZE, 3), features=True, **TINY[name])
    assert features.feature_info == model.feature_info
    assert [tuple(t.shape) for t in features.outputs] == [
        tuple(t.shape) for t in model.pyramid_outputs.values()
    ]


@pytest.mark.parametrize("name", ["coatnet_0", "maxvit_t"])
def test_features_equal_the_classifier_stages_and_round_trip(name, tmp_path):
    keras.utils.set_random_seed(0)
    classifier = zoo.create(name, input_shape=(*SIZE, 3), num_classes=3, **TINY[name])
    weights = os.path.join(tmp_path, "classifier.weights.h5")
    classifier.save_weights(weights)
    # Another build (fresh layers), the classifier's weights loaded by zoo.create.
    levels = ("P2", "P4", "P5")
    backbone = zoo.create_features(
        name, levels=levels, weights=weights, input_shape=(*SIZE, 3), num_classes=3, **TINY[name]
    )
    assert backbone.name == f"{name}_features"
    assert [entry["level"] for entry in backbone.feature_info] == list(levels)
    assert not any(layer.name in ("predictions", "head_norm") for layer in backbone.layers)
    x = images()
    stages = keras.Model(
        classifier.inputs, [classifier.get_layer(layer).output for layer in STAGE_LAYERS[name]]
    )
    expected = [numpy(t) for t in stages.predict_on_batch(x)]
    got = {level: numpy(t) for level, t in backbone.predict_on_batch(x).items()}
    assert list(got) == list(levels)
    for level in levels:
        stage = int(level[1:]) - 1
        stride, width = 2 ** (stage + 1), TINY[name]["channels"][stage]
        assert got[level].shape == (2, SIZE[0] // stride, SIZE[1] // stride, width), level
        np.testing.assert_allclose(got[level], expected[stage], rtol=1e-5, atol=1e-5)

    if name == "coatnet_0":  # once: MaxViT's models are the same class and configuration
        check_round_trips(classifier, backbone, x, got, tmp_path)


def check_round_trips(classifier, backbone, x, got, folder):
    path = os.path.join(folder, "features.keras")
    backbone.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is FeaturePyramidModel
    assert loaded.feature_info == backbone.feature_info
    assert list(loaded.pyramid_outputs) == list(got)
    again = loaded.predict_on_batch(x)
    for level, expected in got.items():
        np.testing.assert_allclose(numpy(again[level]), expected, rtol=1e-6, atol=1e-6)
    # A classifier's file keeps its pyramid (its outputs stay the logits).
    classifier.save(os.path.join(folder, "classifier.keras"))
    reloaded = keras.saving.load_model(os.path.join(folder, "classifier.keras"))
    assert reloaded.feature_info == classifier.feature_info
    assert [tuple(t.shape) for t in reloaded.pyramid_outputs.values()] == [
        tuple(t.shape) for t in classifier.pyramid_outputs.values()
    ]


def test_images_of_any_size():
    backbone = zoo.create_features(
        "coatnet_0", levels=["P3", "P5"], input_shape=(None, None, 3), base_size=64, **COATNET
    )
    assert [(e["stride"], e["channels"]) for e in backbone.feature_info] == [(8, 16), (32, 32)]
    assert [tuple(t.shape) for t in backbone.pyramid_outputs.values()] == [
        (None, None, None, 16),
        (None, None, None, 32),
    ]
    maps = backbone.predict_on_batch(images(1, (96, 64)))  # neither square nor base_size
    assert tuple(maps["P3"].shape) == (1, 12, 8, 16)
    assert tuple(maps["P5"].shape) == (1, 3, 2, 32)


def test_posenet_reads_a_pyramid():
    backbone = zoo.create_features(
        "coatnet_0", levels=["P2", "P3"], input_shape=(32, 32, 3), **COATNET
    )
    posenet = probe.PosENet(backbone, feature_size=4, targets=["H"])
    assert posenet.tap_layers == ["stage1_block1", "stage2_block1"]


# keras.applications' full-size models (VGG16's 15M and ResNet50's 24M weights to initialise).
@pytest.mark.large
def test_posenet_backbones():
    # VGG16's blocks at strides 1..16 (its first block keeps the size) and ResNet50's stages
    # at 4..32, channels from the architectures (VGG's configuration D; ResNet's bottleneck
    # outputs, 4 x 64..512), not from the models.
    vgg = zoo.create_features("vgg16", input_shape=(32, 64, 3))
    assert [(e["level"], e["stride"], e["channels"]) for e in vgg.feature_info] == [
        ("P0", 1, 64), ("P1", 2, 128), ("P2", 4, 256), ("P3", 8, 512), ("P4", 16, 512)
    ]  # fmt: skip
    for entry, tensor in zip(vgg.feature_info, vgg.pyramid_outputs.values()):
        assert tuple(tensor.shape)[1:3] == (32 // entry["stride"], 64 // entry["stride"])
    resnet = zoo.create_features("resnet50", input_shape=(64, 64, 3), levels=["P3", "P5"])
    assert [(e["name"], e["stride"], e["channels"]) for e in resnet.feature_info] == [
        ("conv3_block4_out", 8, 512),
        ("conv5_block3_out", 32, 2048),
    ]


def small_cnn():
    images_in = keras.Input((16, 24, 3))
    x = keras.layers.Conv2D(4, 3, strides=2, padding="same", name="down1")(images_in)
    y = keras.layers.Conv2D(6, 3, strides=2, padding="same", name="down2")(x)
    return images_in, y


def test_feature_pyramid_of_any_model():
    inputs, outputs = small_cnn()
    model = keras.Model(inputs, outputs, name="mine")
    pyramid = feature_pyramid(model, ["down2", "down1"])
    assert [(e["level"], e["name"], e["channels"]) for e in pyramid.feature_info] == [
        ("P1", "down1", 4),
        ("P2", "down2", 6),
    ]
    assert pyramid.name == "mine_features"
    assert feature_pyramid(pyramid, levels=["P2"]).feature_info == pyramid.feature_info[1:]


def test_errors():
    inputs, outputs = small_cnn()
    with pytest.raises(ValueError, match=r"level 'P2' has stride 2; .*'P1' for stride 2"):
        FeaturePyramidModel(
            inputs, outputs, feature_info=[{"level": "P2", "stride": 2, "channels": 4,
                                            "name": "down1"}])  # fmt: skip
    with pytest.raises(ValueError, match=r"says stride 2 and 6 channels, but layer 'down1'"):
        FeaturePyramidModel(
            inputs, outputs, feature_info=[{"stride": 2, "channels": 6, "name": "down1"}]
        )
    with pytest.raises(ValueError, match=r"says stride 4 .* gives \(None, 8, 12, 4\)"):
        FeaturePyramidModel(
            inputs, outputs, feature_info=[{"stride": 4, "channels": 4, "name": "down1"}]
        )
    with pytest.raises(ValueError, match=r"names layer 'down3', which the model does not"):
        FeaturePyramidModel(
            inputs, outputs, feature_info=[{"stride": 2, "channels": 4, "name": "down3"}]
        )
    with pytest.raises(ValueError, match=r"by increasing stride, each once; .*\[4, 2\]"):
        FeaturePyramidModel(inputs, outputs, feature_info=[
            {"stride": 4, "channels": 6, "name": "down2"},
            {"stride": 2, "channels": 4, "name": "down1"}])  # fmt: skip
    with pytest.raises(TypeError, match=r"`feature_info` must be a list of dicts"):
        FeaturePyramidModel(inputs, outputs)
    model = keras.Model(inputs, outputs, name="mine")
    with pytest.raises(ValueError, match=r"model 'mine' has no layer 'down3'"):
        feature_pyramid(model, ["down3"])
    with pytest.raises(ValueError, match=r"`levels` must be distinct names .*\['P1', 'P2'\]"):
        feature_pyramid(model, ["down1", "down2"], levels=["P3"])
    any_size = keras.Input((None, None, 3))
    conv = keras.layers.Conv2D(4, 3, strides=2, name="down")(any_size)
    with pytest.raises(ValueError, match=r"must be known: images \(None, None, None, 3\)"):
        feature_pyramid(keras.Model(any_size, conv), ["down"])
    with pytest.raises(ValueError, match=r"take `input_shape` and `weights` only; .*'blocks'"):
        zoo.create_features("vgg16", blocks=(1, 1))


def test_a_zoo_model_without_a_pyramid():
    def build_dense(width=4):
        inputs = keras.Input((8, 8, 3))
        return keras.Model(inputs, keras.layers.Dense(width)(inputs))

    zoo.register_model("test_dense_features", build_dense, family="test", config={"width": 4})
    try:
        with pytest.raises(ValueError, match=r"'test_dense_features' \(family 'test'\) has no"):
            zoo.create_features("test_dense_features")
    finally:
        zoo.unregister_model("test_dense_features")
