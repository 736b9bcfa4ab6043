"""Swin Transformer from keras-hub: `convert.from_keras_hub_swin` on
``SwinTransformerBackbone`` s with random weights gives the backbone's outputs on every
backend (shifted and unshifted blocks, a stage one window wide that Swin leaves unshifted);
a task model converts too; the zoo's counts equal keras-hub's presets'."""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np
import pytest

from keras_posenc import zoo
from keras_posenc.convert import from_keras_hub, from_keras_hub_preset, from_keras_hub_swin

pytestmark = pytest.mark.contract


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def backbone(image=32, embed_dim=8, depths=(2, 2), heads=(1, 2), window=4, seed=0):
    model = keras_hub.models.SwinTransformerBackbone(
        image_shape=(image, image, 3), embed_dim=embed_dim, depths=depths, num_heads=heads,
        window_size=window,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        offset = 1.0 if weight.path.endswith("gamma") else 0.0
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.3 + offset)
    return model


def images(size=32, seed=1):
    return np.random.default_rng(seed).random((2, size, size, 3)).astype("float32")


# keras-hub passes its own mask as a call argument, which Keras takes for an input's.
pytestmark = [pytestmark, pytest.mark.filterwarnings("ignore:Layer 'attn' .* with a mask")]


@pytest.mark.parametrize(
    "options",
    [
        dict(),  # 8 x 8 then 4 x 4 cells, windows of 4: the second stage is not shifted
        dict(image=48, embed_dim=12, depths=(2, 4, 2), heads=(2, 2, 4), window=3),
    ],
)
def test_equals_keras_hubs_backbone(options):
    hub = backbone(**options)
    ours = from_keras_hub_swin(hub)
    x = images(options.get("image", 32))
    np.testing.assert_allclose(numpy(ours(x)), numpy(hub(x)), atol=2e-5, rtol=1e-5)


def test_a_task_model_converts_and_saves(tmp_path):
    hub = backbone(seed=2)
    classifier = keras_hub.models.SwinTransformerImageClassifier(
        hub, num_classes=3, preprocessor=None
    )
    # keras-hub's Dense head starts from random weights; its bias from zeros: make it count.
    classifier.output_dense.bias.assign(np.arange(3, dtype="float32") - 1.0)
    ours = from_keras_hub_swin(classifier, name="converted")
    x = images()
    logits = numpy(classifier(x))
    assert ours.output_shape == (None, 3)
    np.testing.assert_allclose(numpy(ours(x)), logits, atol=2e-5, rtol=1e-5)
    path = os.path.join(tmp_path, "swin.keras")
    ours.save(path)
    np.testing.assert_allclose(numpy(keras.saving.load_model(path)(x)), numpy(ours(x)), atol=1e-6)
    # keras-hub's generic entry points reach the same converter.
    np.testing.assert_allclose(numpy(from_keras_hub(classifier)(x)), logits, atol=2e-5)
    expected = numpy(hub(x))
    folder = os.path.join(tmp_path, "preset")
    hub.save_to_preset(folder)
    np.testing.assert_allclose(numpy(from_keras_hub_preset(folder)(x)), expected, atol=2e-5)


@pytest.mark.neutral
def test_counts_and_errors():
    # keras-hub's preset's count (its metadata); the shapes are the preset's.
    assert zoo.create("swin_tiny_patch4_window7_224").count_params() == 27_519_354
    with pytest.raises(TypeError, match="from_keras_hub_swin: `backbone` must be a"):
        from_keras_hub_swin(keras.Sequential())
    hub = keras_hub.models.SwinTransformerBackbone(
        image_shape=(32, 32, 3), embed_dim=8, depths=(2, 2), num_heads=(1, 2), window_size=4,
        mlp_ratio=2.5,
    )  # fmt: skip
    with pytest.raises(ValueError, match="from_keras_hub_swin: the zoo's Swin takes an int"):
        from_keras_hub_swin(hub)
    with pytest.raises(ValueError, match=r"multiples of partition_size=\(7, 7\)"):
        zoo.create("swin_tiny_patch4_window7_224", input_shape=(160, 160, 3))
    with pytest.raises(ValueError, match="build_swin: `depths` and `num_heads` must be"):
        zoo.create("swin_tiny_patch4_window7_224", depths=(2, 2))
    # The head: 1000 classes on the tiny config's 768 features; logits only.
    head = zoo.create("swin_tiny_patch4_window7_224", num_classes=1000)
    assert head.count_params() == 27_519_354 + 768 * 1000 + 1000
    with pytest.raises(ValueError, match="build_swin: `num_classes` must be an integer >= 1"):
        zoo.create("swin_tiny_patch4_window7_224", num_classes=0)
    softmax = keras_hub.models.SwinTransformerImageClassifier(
        backbone(), num_classes=3, activation="softmax", preprocessor=None
    )
    with pytest.raises(ValueError, match="returns logits; received a classifier with activat"):
        from_keras_hub_swin(softmax)
