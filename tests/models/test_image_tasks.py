"""keras_posenc.models' image classes through keras-hub's API: CoAtNet, MaxViT, MaxxViT, Swin.

For one tiny model per family: ``Classifier.from_zoo(name, weights=file)`` gives
``zoo.create``'s outputs; ``save_to_preset`` then keras-hub's own ``from_preset``
(``ImageClassifier``, ``Backbone``, ``ImageConverter``) rebuilds our classes with equal
outputs; ``to_zoo`` gives the zoo's model back. ``ImageClassifier.predict`` runs on an
image file through the preprocessor; the shipped digits preset, converted to keras-hub's
format, predicts the classes ``zoo.create(..., weights="digits")`` does; a converted timm
preset, served by the local hub stand-in (tests/hub_server.py), loads with keras-hub's
``from_preset("hf://...")``.
"""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np
import pytest
from hub_server import HubServer
from keras import ops

from keras_posenc import hub, models, zoo

pytestmark = pytest.mark.contract

PIL = pytest.importorskip("PIL.Image", reason="images are decoded by Pillow")

TINY_STAGES = {"blocks": (1, 1, 1, 1, 1), "channels": (8, 8, 16, 32, 32), "head_dim": 16,
               "input_shape": (32, 32, 3), "num_classes": 3}  # fmt: skip
SMALL_SWIN = {"input_shape": (32, 32, 3), "embed_dim": 8, "depths": (2, 2), "num_heads": (1, 2),
              "window_size": 4}  # fmt: skip
# One registered name per family, made tiny (the structure kept: every stage, shifted windows).
FAMILIES = {
    "coatnet": ("coatnet_0", TINY_STAGES),
    "maxvit": ("maxvit_t", {**TINY_STAGES, "blocks": (2, 1, 1, 1, 1),
                            "channels": (16, 16, 16, 32, 32), "partition_size": 1}),
    "maxxvit": ("maxxvit_rmlp_nano_rw_256", {**TINY_STAGES, "stem_channels": (16,),
                                             "channels": (16, 16, 16, 32, 32),
                                             "partition_size": 1}),
    "swin": ("swin_tiny_patch4_window7_224", {**SMALL_SWIN, "num_classes": 3}),
}  # fmt: skip


def numpy(model, inputs):
    return ops.convert_to_numpy(model(inputs, training=False))


def batch(shape, seed=0):
    return np.random.default_rng(seed).standard_normal((2, *shape)).astype("float32")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_save_to_preset_then_keras_hub_from_preset(family, tmp_path):
    name, tiny = FAMILIES[family]
    classifier_cls = models.image.CLASSIFIERS[family]
    task = classifier_cls.from_zoo(name, **tiny)
    images = batch(tiny["input_shape"])
    expected = numpy(task, images)
    # The zoo's model of the same configuration (its builder), with the task's weights.
    zoo_model = task.to_zoo()
    assert zoo_model.count_params() == task.count_params()
    np.testing.assert_allclose(numpy(zoo_model, images), expected, atol=1e-5, rtol=0)

    converter_cls = classifier_cls.preprocessor_cls.image_converter_cls
    converter = converter_cls(image_size=tiny["input_shape"][:2], scale=1 / 127.5, offset=-1.0)
    task.preprocessor = classifier_cls.preprocessor_cls(image_converter=converter)
    folder = str(tmp_path / "preset")
    task.save_to_preset(folder)

    loaded = keras_hub.models.ImageClassifier.from_preset(folder)
    assert type(loaded) is classifier_cls
    assert type(loaded.preprocessor.image_converter) is converter_cls
    np.testing.assert_allclose(numpy(loaded, images), expected, atol=1e-5, rtol=0)
    assert type(keras_hub.layers.ImageConverter.from_preset(folder)) is converter_cls
    backbone = keras_hub.models.Backbone.from_preset(folder)
    assert type(backbone) is classifier_cls.backbone_cls
    for mine, theirs in zip(backbone.weights, task.backbone.weights, strict=True):
        np.testing.assert_array_equal(ops.convert_to_numpy(mine), ops.convert_to_numpy(theirs))
    levels = backbone.pyramid_outputs
    assert list(levels) == list(task.backbone.pyramid_outputs) and levels
    for level, tensor in levels.items():  # level k: the image's sides over 2 ** k
        assert tuple(tensor.shape[1:3]) == (32 // 2 ** int(level[1:]),) * 2


def test_image_classifier_predict_on_an_image_file(tmp_path):
    """keras.utils.load_img -> array -> predict: the converter resizes, crops and scales
    (timm's center crop of an ImagePreprocessor, crop_pct 0.875, as our presets have)."""
    name, tiny = FAMILIES["coatnet"]
    task = models.CoAtNetImageClassifier.from_zoo(name, **tiny)
    preprocessor = hub.ImagePreprocessor(32, crop_pct=0.875, interpolation="bilinear",
                                         mean=(0.5,) * 3, std=(0.5,) * 3)  # fmt: skip
    converter = models.CoAtNetImageConverter.from_image_preprocessor(preprocessor)
    task.preprocessor = models.CoAtNetImageClassifierPreprocessor(image_converter=converter)
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:48, 0:64] / 64
    smooth = np.stack([np.sin(5 * x), np.cos(4 * y), np.sin(3 * (x + y))], -1)
    pixels = np.clip(127.5 * (1 + 0.8 * smooth + 0.1 * rng.standard_normal((48, 64, 3))), 0, 255)
    path = tmp_path / "image.png"
    PIL.fromarray(pixels.astype("uint8")).save(path)

    image = keras.utils.img_to_array(keras.utils.load_img(str(path)))
    predicted = task.predict(image[None], verbose=0)
    assert predicted.shape == (1, 3)
    # The converter by hand: the center 0.875 of the 48 x 48 square, resized, scaled.
    crop = image[3:45, 11:53]
    resized = ops.convert_to_numpy(ops.image.resize(crop[None], (32, 32), antialias=True))
    np.testing.assert_allclose(
        ops.convert_to_numpy(converter(image[None])), resized / 127.5 - 1, atol=1e-4, rtol=0
    )
    np.testing.assert_allclose(predicted, numpy(task, resized / 127.5 - 1), atol=1e-4, rtol=0)
    # timm's order (resize, then crop: ImagePreprocessor) sees nearly the same pixels.
    timm_order = ops.convert_to_numpy(preprocessor(image))
    assert np.abs(timm_order - resized / 127.5 + 1).mean() < 0.05

    # A .keras file keeps the classifier, its converter's crop and its weights.
    task.save(tmp_path / "task.keras")
    reloaded = keras.saving.load_model(tmp_path / "task.keras", compile=False)
    assert type(reloaded) is models.CoAtNetImageClassifier
    assert reloaded.preprocessor.image_converter.crop_pct == 0.875
    np.testing.assert_allclose(reloaded.predict(image[None], verbose=0), predicted, atol=1e-5)
    # keras-hub's dtype reaches the backbone and, as keras-hub's heads do, the head.
    task.save_to_preset(tmp_path / "preset")
    half = keras_hub.models.ImageClassifier.from_preset(str(tmp_path / "preset"), dtype="float16")
    assert {layer.dtype_policy.name for layer in half.layers} == {"float16"}


@pytest.mark.large
def test_the_shipped_digits_preset_through_keras_hub(tmp_path, monkeypatch):
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn")
    from keras_posenc.experiments.digits import load_digits, to_inputs

    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "cache"))
    folder = models.to_keras_hub_preset("coatnet_0/digits", tmp_path / "digits")
    digits, _ = load_digits()
    digits = digits[::90]  # 20 of them, every class
    logits = numpy(zoo.create("coatnet_0", weights="digits"), to_inputs(digits))
    expected = np.argmax(logits, -1)
    paths = []
    for index, digit in enumerate(digits):  # 8 x 8 PNGs, 0-16 as 0-255
        paths.append(str(tmp_path / f"digit{index}.png"))
        PIL.fromarray(np.round(digit * 255.0 / 16).astype("uint8")).save(paths[-1])

    classifier = keras_hub.models.ImageClassifier.from_preset(folder)
    assert type(classifier) is models.CoAtNetImageClassifier
    # Written by from_zoo(weights="digits"): zoo.create's weights, so its outputs.
    np.testing.assert_allclose(numpy(classifier, to_inputs(digits)), logits, atol=1e-5, rtol=0)
    files = [keras.utils.load_img(p, color_mode="grayscale") for p in paths]
    arrays = np.stack([keras.utils.img_to_array(f) for f in files])
    np.testing.assert_array_equal(np.argmax(classifier.predict(arrays, verbose=0), -1), expected)

    preset = hub.load_preset(folder)  # ours: the zoo's model, the converter, class names
    assert isinstance(preset.model, zoo.FeaturePyramidModel)
    assert [int(top[0][0]) for top in preset.classify(paths, top=1)] == list(expected)
    shipped = zoo.shipped_presets()["coatnet_0/digits"]["overrides"]
    model = zoo.create("coatnet_0", weights=folder, **shipped)
    np.testing.assert_array_equal(np.argmax(numpy(model, to_inputs(digits)), -1), expected)

    # A preset folder of ours (hub.save_preset's) records no zoo name: name= says it.
    ours = hub.save_preset(model, tmp_path / "ours", class_names=[str(d) for d in range(10)])
    with pytest.raises(ValueError, match="to_keras_hub_preset: .* records no zoo name"):
        models.to_keras_hub_preset(ours, tmp_path / "refused")
    again = models.to_keras_hub_preset(ours, tmp_path / "again", name="coatnet_0", **shipped)
    assert hub.load_preset(again).class_names == [str(d) for d in range(10)]
    reloaded = keras_hub.models.ImageClassifier.from_preset(again)
    np.testing.assert_allclose(numpy(reloaded, to_inputs(digits)), logits, atol=1e-5, rtol=0)


@pytest.mark.large
def test_a_converted_timm_preset_over_the_local_hub(tmp_path, monkeypatch):
    """Our preset of a timm repository (hub.load_preset's), in keras-hub's format, served
    over hf:// and loaded with keras-hub's from_preset."""
    pytest.importorskip("huggingface_hub", reason="hf:// sources download with huggingface_hub")
    import huggingface_hub.constants
    from test_convert_timm import fixture
    from test_presets import FIXTURE, LABELS, REPO, timm_repo

    from keras_posenc.convert import config_from_timm
    from keras_posenc.zoo.coatnet import build_coatnet

    _, described, _, _ = fixture(FIXTURE)
    config = config_from_timm(described["cfg"], img_size=tuple(described["img_size"]))
    zoo.register_model(FIXTURE, build_coatnet, family="coatnet", config=config)
    try:
        with HubServer({REPO: timm_repo(FIXTURE, LABELS)}) as server:
            monkeypatch.setenv("HF_ENDPOINT", server.url)
            monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
            monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
            monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
            ours = hub.load_preset("hf://" + REPO, progress=False)
            folder = models.to_keras_hub_preset("hf://" + REPO, tmp_path / "keras_hub")
            files = {}
            for root, _, names in os.walk(folder):
                for file_name in names:
                    path = os.path.join(root, file_name)
                    with open(path, "rb") as handle:
                        files[os.path.relpath(path, folder).replace(os.sep, "/")] = handle.read()
            server.repos["posenc/coatnet_nano_keras_hub"] = files
            # keras-hub downloads with huggingface_hub's defaults, read when it was imported.
            monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", server.url)
            template = server.url + "/{repo_id}/resolve/{revision}/{filename}"
            monkeypatch.setattr(huggingface_hub.constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
            monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
            classifier = keras_hub.models.ImageClassifier.from_preset(
                "hf://posenc/coatnet_nano_keras_hub"
            )
    finally:
        zoo.unregister_model(FIXTURE)
    assert type(classifier) is models.CoAtNetImageClassifier
    images = batch(ours.model.input_shape[1:])
    np.testing.assert_allclose(
        numpy(classifier, images), numpy(ours.model, images), atol=1e-5, rtol=0
    )
    converter = classifier.preprocessor.image_converter
    assert converter.crop_pct == ours.preprocessor.crop_pct
    assert converter.image_size == tuple(ours.preprocessor.image_size)
    assert hub.load_preset(folder).class_names == LABELS


def test_bad_arguments_name_the_class():
    with pytest.raises(TypeError, match="CoAtNetImageClassifier: `backbone` must be a "):
        models.CoAtNetImageClassifier(keras.Sequential(), num_classes=2)
    backbone = models.SwinBackbone.from_zoo("swin_tiny_patch4_window7_224", **SMALL_SWIN)
    with pytest.raises(ValueError, match="SwinImageClassifier: unknown argument.*'pre_logits'"):
        models.SwinImageClassifier(backbone, num_classes=2, pre_logits=True)
    with pytest.raises(ValueError, match="is a 'swin' model"):
        models.CoAtNetImageClassifier.from_zoo("swin_tiny_patch4_window7_224")
    with pytest.raises(ValueError, match="SwinImageClassifier.from_zoo.*num_classes"):
        models.SwinImageClassifier.from_zoo("swin_tiny_patch4_window7_224")
    with pytest.raises(ValueError, match="CoAtNetImageClassifier.from_zoo.*no classifier"):
        models.CoAtNetImageClassifier.from_zoo("coatnet_0", include_top=False)
    with pytest.raises(ValueError, match="CoAtNetBackbone: 'num_classes' belong to the task"):
        models.CoAtNetBackbone(blocks=(1,) * 5, channels=(8, 8, 16, 32, 32), num_classes=3)
    with pytest.raises(ValueError, match=r"ZooImageConverter: `crop_pct` must be in \(0, 1\]"):
        models.ZooImageConverter(image_size=(8, 8), crop_pct=1.5)
    with pytest.raises(FileExistsError, match="to_keras_hub_preset: .* exists"):
        models.to_keras_hub_preset("coatnet_0/digits", os.path.dirname(__file__))
