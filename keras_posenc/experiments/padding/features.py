"""What a readout reads: content-free images, the networks, and their frozen features.

The images are the study's task data (`keras_posenc.probe.content_free_images`);
a network's features are computed once per network and input set, resized
and concatenated as :class:`~keras_posenc.probe.PosENet` does, and every
readout of `keras_posenc.experiments.padding.readouts` is fitted on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import keras
import numpy as np
from keras import ops

from keras_posenc.probe.inputs import content_free_images
from keras_posenc.probe.posenet import PosENet


@dataclasses.dataclass
class _Features:
    """Frozen features of one network: per input kind (train, test or None), channels per tap."""

    kinds: dict[str, tuple[np.ndarray, np.ndarray | None]]
    taps: list[tuple[str, int, int]]
    image_size: int

    @property
    def channels(self) -> int:
        return self.taps[-1][2]

    def select(self, tap: str) -> _Features:
        """Only the channels of one tap."""
        name, start, stop = next(t for t in self.taps if t[0] == tap)
        kinds = {
            kind: (train[..., start:stop], None if test is None else test[..., start:stop])
            for kind, (train, test) in self.kinds.items()
        }
        return _Features(kinds, [(name, 0, stop - start)], self.image_size)


def _images(
    inputs: Sequence[str],
    seed: int,
    size: int,
    train_images: int,
    test_images: int,
    scale: float = 1.0,
) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Noise: train and test images of different seeds; a constant input: one image."""
    batches = {}
    for kind in inputs:
        if kind == "noise":
            train = content_free_images("noise", train_images, size, size, seed=seed, scale=scale)
            test = content_free_images(
                "noise", test_images, size, size, seed=seed + 1000, scale=scale
            )
            batches[kind] = (train, test)
        else:
            batches[kind] = (content_free_images(kind, 1, size, size, scale=scale), None)
    return batches


def _features(
    backbone: keras.Model | None,
    inputs: Sequence[str],
    seed: int,
    image_size: int,
    feature_size: int,
    train_images: int,
    test_images: int,
    scale: float = 1.0,
    preprocess: Callable[[np.ndarray], np.ndarray] | None = None,
    compiled: bool = False,
) -> _Features:
    """PosENet's resized, concatenated taps of ``backbone`` for every input kind, computed once."""
    if backbone is None:  # "PosENet alone": the image itself, resized to the feature grid
        posenet = PosENet(None, image_shape=(image_size, image_size, 3), feature_size=feature_size)
        taps = [("image", 0, 3)]
    else:
        posenet = PosENet(backbone, feature_size=feature_size)
        taps, start = [], 0
        for name in posenet.tap_layers:
            stop = start + int(backbone.get_layer(name).output.shape[-1])
            taps.append((name, start, stop))
            start = stop
    batches = _images(inputs, seed, image_size, train_images, test_images, scale)
    everything = np.concatenate([x for pair in batches.values() for x in pair if x is not None])
    if preprocess is not None:
        everything = preprocess(everything.copy())  # keras.applications' work in place
    model = posenet.feature_model()
    if compiled:  # a large network: one compiled predict
        features = np.asarray(model.predict(everything, batch_size=8, verbose=0), np.float32)
    else:  # a tiny network: eager calls cost less than compiling each of many models
        features = np.concatenate(
            [
                ops.convert_to_numpy(model(everything[i : i + 16], training=False))
                for i in range(0, len(everything), 16)
            ]
        ).astype(np.float32)
    kinds, start = {}, 0
    for kind, (train, test) in batches.items():
        train_features = features[start : start + len(train)]
        start += len(train)
        test_features = None
        if test is not None:
            test_features = features[start : start + len(test)]
            start += len(test)
        kinds[kind] = (train_features, test_features)
    return _Features(kinds, taps, image_size)


def _application(
    name: str, size: int, seed: int
) -> tuple[keras.Model, Callable[[np.ndarray], np.ndarray]]:
    """keras.applications VGG16 / ResNet50 without weights.

    Their initialisers take no seed, so this sets Keras' global seed (and Python's
    and numpy's, as ``keras.utils.set_random_seed`` does) to make them reproducible.
    """
    keras.utils.set_random_seed(seed)
    if name == "vgg16":
        model = keras.applications.VGG16(
            include_top=False, weights=None, input_shape=(size, size, 3)
        )
        return model, keras.applications.vgg16.preprocess_input
    model = keras.applications.ResNet50(
        include_top=False, weights=None, input_shape=(size, size, 3)
    )
    return model, keras.applications.resnet50.preprocess_input
