"""Reading position maps from frozen features: least squares or a trained PosENet readout.

A readout (`_Readout`: its kind and shape) is fitted per input kind and scored
with SPC and MAE against `keras_posenc.probe.position_patterns`; one compiled
:class:`~keras_posenc.probe.TrainedReadout` serves every network with the same
feature shape (`_Trainers`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments.padding.features import _Features
from keras_posenc.layers.relative_position_2d import bilinear_matrix
from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import position_patterns
from keras_posenc.probe.readout import LinearReadout, TrainedReadout


def _resize_maps(maps: np.ndarray, height: int, width: int) -> np.ndarray:
    """Bilinear resize (half-pixel centres) of ``(n, h, w, t)`` maps."""
    rows = bilinear_matrix(maps.shape[1], height)
    cols = bilinear_matrix(maps.shape[2], width)
    return np.einsum("ah,nhwt,bw->nabt", rows, maps, cols)


def _score(
    predictions: np.ndarray, targets: dict[str, np.ndarray], names: Sequence[str]
) -> dict[str, tuple[float, float, bool]]:
    scores = {}
    for channel, name in enumerate(names):
        predicted = predictions[..., channel]
        value, flagged = spc(predicted, targets[name], return_flag=True)
        # A least-squares readout is linear, not a sigmoid: clip to the targets' range for MAE.
        scores[name] = (value, mae(np.clip(predicted, 0.0, 1.0), targets[name]), flagged)
    return scores


@dataclasses.dataclass(frozen=True)
class _Readout:
    """How the features are read: least squares or trained, and the readout's shape."""

    kind: str = "least_squares"
    layers: int = 1
    kernel_size: int = 3
    padding: int = 0


class _Trainers:
    """One compiled :class:`TrainedReadout` per feature shape and readout shape, reused."""

    def __init__(self, settings: dict[str, Any], targets: Sequence[str]) -> None:
        self.settings, self.targets = settings, tuple(targets)
        self.cache: dict[tuple, TrainedReadout] = {}

    def get(self, channels: int, image_size: int, readout: _Readout) -> TrainedReadout:
        key = (channels, image_size, readout)
        if key not in self.cache:
            self.cache[key] = TrainedReadout(
                channels,
                (image_size, image_size),
                self.settings["feature_size"],
                targets=self.targets,
                readout_layers=readout.layers,
                kernel_size=readout.kernel_size,
                readout_filters=self.settings["readout_filters"],
                readout_padding=readout.padding,
                steps=self.settings["readout_steps"],
                batch_size=self.settings["readout_batch_size"],
                learning_rate=self.settings["readout_learning_rate"],
            )
        return self.cache[key]


def _read(
    features: _Features,
    readout: _Readout,
    targets: Sequence[str],
    feature_size: int,
    trainers: _Trainers | None = None,
    seed: int = 0,
) -> dict[str, tuple[dict[str, tuple[float, float, bool]], np.ndarray]]:
    """Fits ``readout`` per input kind and scores it: ``{kind: (scores, predicted maps)}``.

    Noise: fitted on the training images, scored on the test images; a constant
    input: fitted and scored on its one image.
    """
    size = features.image_size
    full = position_patterns(size, size)
    grid = feature_size + 2 * readout.padding - readout.kernel_size + 1
    if grid < 3:
        raise ValueError(
            f"padding_experiment: feature_size {feature_size} with kernel "
            f"{readout.kernel_size} leaves a {grid} x {grid} readout; the targets need at "
            "least 3 x 3"
        )
    results = {}
    for kind, (train, test) in features.kinds.items():
        test = train if test is None else test
        if readout.kind == "least_squares":
            small = position_patterns(grid, grid)
            wanted = np.stack([small[name] for name in targets], axis=-1)[None]
            goal = np.broadcast_to(wanted, (len(train), *wanted.shape[1:]))
            fitted = LinearReadout(readout.kernel_size, padding=readout.padding).fit(train, goal)
            maps = _resize_maps(fitted.predict(test), size, size)
        else:
            trainer = trainers.get(features.channels, size, readout)
            maps = trainer.fit(train, seed=seed).predict(test)
        results[kind] = (_score(maps, full, targets), maps)
    return results
