"""PosENet through keras-hub's API: PosENetBackbone, PosENetDepthEstimator.

The task of a named PosENet gives ``zoo.create``'s maps with the same weights and
``to_zoo`` gives the zoo's model back; ``save_to_preset`` then keras-hub's own
``DepthEstimator.from_preset`` and ``Backbone.from_preset`` rebuild our classes with equal
outputs, and ``hub.load_preset`` reads the folder as the zoo's PosENet; ``predict`` runs
on an image file through the preprocessor; ``fit`` trains the readout only (keras-hub's
default loss: mean squared error, PosENet's); a ``.keras`` file keeps the task.
"""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_posenc import hub, models, probe, zoo

pytestmark = pytest.mark.contract

PIL = pytest.importorskip("PIL.Image", reason="images are decoded by Pillow")

# "PosENet alone" (the readout on the image): the tiny case with every layer of the readout.
ALONE = {"backbone": None, "input_shape": (16, 16, 3), "feature_size": 8}
READOUT = {"readout_layers": 2, "readout_filters": 4, "readout_padding": 1, "targets": ("H", "G")}


def maps(model, inputs):
    outputs = model(inputs, training=False)
    return ops.convert_to_numpy(outputs["depths"] if isinstance(outputs, dict) else outputs)


def images(shape, seed=0):
    return np.random.default_rng(seed).uniform(size=(2, *shape)).astype("float32")


def randomize(model, seed=1):
    """Random values in every weight (the statistics too), so a copy that misses one shows."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.uniform(0.5, 1.5, tuple(variable.shape)).astype("float32"))


def test_save_to_preset_then_keras_hub_from_preset(tmp_path):
    task = models.PosENetDepthEstimator(models.PosENetBackbone(**ALONE), **READOUT)
    randomize(task)
    x = images(ALONE["input_shape"])
    expected = maps(task, x)
    assert expected.shape == (2, 16, 16, 2)
    # The zoo's PosENet of the same configuration, with the task's weights.
    posenet = task.to_zoo()
    assert isinstance(posenet, probe.PosENet) and posenet.backbone is None
    assert posenet.target_names == ("H", "G") and posenet.readout_padding == 1
    np.testing.assert_allclose(maps(posenet, x), expected, atol=1e-6, rtol=0)

    converter = models.PosENetImageConverter(image_size=(16, 16), scale=1 / 255.0)
    task.preprocessor = models.PosENetDepthEstimatorPreprocessor(image_converter=converter)
    folder = str(tmp_path / "preset")
    task.save_to_preset(folder)
    loaded = keras_hub.models.DepthEstimator.from_preset(folder)
    assert type(loaded) is models.PosENetDepthEstimator
    assert type(loaded.preprocessor.image_converter) is models.PosENetImageConverter
    assert loaded.head_config == task.head_config
    np.testing.assert_allclose(maps(loaded, x), expected, atol=1e-6, rtol=0)
    assert type(keras_hub.layers.ImageConverter.from_preset(folder)) is models.PosENetImageConverter
    preprocessor = keras_hub.models.DepthEstimatorPreprocessor.from_preset(folder)
    assert type(preprocessor) is models.PosENetDepthEstimatorPreprocessor
    # Ours reads the folder too: the zoo's PosENet (to_zoo) and the converter.
    preset = hub.load_preset(folder)
    assert isinstance(preset.model, probe.PosENet)
    assert type(preset.preprocessor) is models.PosENetImageConverter
    np.testing.assert_allclose(maps(preset.model, x), expected, atol=1e-6, rtol=0)
    backbone = keras_hub.models.Backbone.from_preset(folder)
    assert type(backbone) is models.PosENetBackbone
    np.testing.assert_allclose(
        ops.convert_to_numpy(backbone(x)), ops.convert_to_numpy(task.backbone(x)), atol=1e-6
    )
    # keras-hub's DepthEstimator contract: only the readout trains, against MSE.
    assert [w.path for w in loaded.trainable_weights] == [
        "readout_conv_0/kernel", "readout_conv_0/bias", "readout_conv_1/kernel",
        "readout_conv_1/bias"]  # fmt: skip
    assert isinstance(loaded.loss["depths"], keras.losses.MeanSquaredError)


@pytest.mark.large
def test_from_zoo_gives_the_zoo_models_maps(tmp_path):
    """A named PosENet (VGG16's 14.7 M frozen weights in a file: the large tier)."""
    overrides = {"input_shape": (32, 32, 3), "feature_size": 6, "targets": ("V", "HS")}
    model = zoo.create("posenet_vgg16", **overrides)
    randomize(model)
    model.save_weights(tmp_path / "posenet.weights.h5")
    task = models.PosENetDepthEstimator.from_zoo(
        "posenet_vgg16", weights=str(tmp_path / "posenet.weights.h5"), **overrides
    )
    x = images((32, 32, 3))
    np.testing.assert_allclose(maps(task, x), maps(model, x), atol=1e-5, rtol=1e-5)
    assert task.backbone.trainable_weights == []  # frozen, as the zoo's
    assert task.backbone.get_config()["backbone_weights"] is None
    back = task.to_zoo()
    assert back.tap_layers == model.tap_layers
    np.testing.assert_allclose(maps(back, x), maps(model, x), atol=1e-5, rtol=1e-5)


def test_predict_and_fit_on_an_image_file(tmp_path):
    task = models.PosENetDepthEstimator(models.PosENetBackbone(**ALONE), targets=("H", "V"))
    converter = models.PosENetImageConverter(image_size=(16, 16), scale=1 / 255.0)
    task.preprocessor = models.PosENetDepthEstimatorPreprocessor(image_converter=converter)
    y, x = np.mgrid[0:24, 0:24] / 24
    pixels = 255 * np.stack([x, y, (x + y) / 2], -1)
    path = tmp_path / "image.png"
    PIL.fromarray(pixels.astype("uint8")).save(path)
    image = keras.utils.img_to_array(keras.utils.load_img(str(path)))
    predicted = task.predict(image[None], verbose=0)["depths"]
    resized = ops.convert_to_numpy(ops.image.resize(image[None], (16, 16), antialias=False))
    np.testing.assert_allclose(predicted, maps(task, resized / 255.0), atol=1e-5, rtol=0)
    # The position maps as targets, through the preprocessor unchanged.
    patterns = probe.position_patterns(16, 16)
    targets = np.stack([patterns["H"], patterns["V"]], -1)[None]
    before = [ops.convert_to_numpy(w) for w in task.backbone.weights]
    task.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = task.fit(image[None], targets, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    for old, new in zip(before, task.backbone.weights, strict=True):
        np.testing.assert_array_equal(old, ops.convert_to_numpy(new))
    # A .keras file keeps the task, its converter and its weights.
    task.save(tmp_path / "task.keras")
    reloaded = keras.saving.load_model(tmp_path / "task.keras", compile=False)
    assert type(reloaded) is models.PosENetDepthEstimator
    np.testing.assert_allclose(
        reloaded.predict(image[None], verbose=0)["depths"],
        task.predict(image[None], verbose=0)["depths"],
        atol=1e-6,
    )


def test_bad_arguments_name_the_class():
    backbone = models.PosENetBackbone(**ALONE)
    with pytest.raises(TypeError, match="PosENetDepthEstimator: `backbone` must be a Pos"):
        models.PosENetDepthEstimator(keras.Sequential([keras.Input((4,))]))
    with pytest.raises(ValueError, match="PosENetDepthEstimator: `targets` must be"):
        models.PosENetDepthEstimator(backbone, targets=("X",))
    with pytest.raises(ValueError, match="PosENetDepthEstimator: unknown argument.*'num_cl"):
        models.PosENetDepthEstimator(backbone, num_classes=3)
    with pytest.raises(ValueError, match="PosENetBackbone: 'targets' belong to the task"):
        models.PosENetBackbone(**ALONE, targets=("H",))
    with pytest.raises(ValueError, match="build_posenet_features: `backbone` must be one"):
        models.PosENetBackbone(backbone="vgg19")
    with pytest.raises(ValueError, match="build_posenet_features: `feature_size`"):
        models.PosENetBackbone(**{**ALONE, "feature_size": 0})
    with pytest.raises(ValueError, match="is a 'coatnet' model"):
        models.PosENetDepthEstimator.from_zoo("coatnet_0")
