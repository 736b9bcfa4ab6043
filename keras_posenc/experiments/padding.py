"""Where does position information come from? Padding modes, content-free inputs, PosENet.

A frozen network sees inputs with no content (uniform noise, constant grey,
constant white); a PosENet readout with 'valid' support then tries to decode
the position maps from its features. With circular padding (or none) the
network is shift-equivariant and nothing is decoded; with zero padding the
border marks every position (Islam et al. 2020; Kayhan and van Gemert 2020).

The study has parts (``studies``), each a set of rows of one long table:

- ``"padding"``: the small VGG-like :func:`~keras_posenc.probe.probe_backbone`
  with random frozen weights, every padding mode, a least-squares readout
  (:class:`~keras_posenc.probe.LinearReadout`: PosENet's one k x k 'valid'
  convolution fitted in closed form; fast and deterministic);
- ``"trained_readout"``: the same networks read by PosENet's own readout
  trained with Adam on pixel-wise MSE (:class:`~keras_posenc.probe.TrainedReadout`);
- ``"trained_backbone"``: the same networks trained from scratch on a task
  that needs no position (:func:`~keras_posenc.probe.pretrain_backbone`), then
  frozen and read both ways;
- ``"applications"``: keras.applications VGG16 and ResNet50 with
  ``weights=None`` (random, zero 'same' padding), one seed, trained readout;
- ``"readout_alone"``: the paper's Table 4, "PosENet alone" on the image
  with readout padding 0, 1 and 2;
- ``"readout_shape"``: the paper's Table 2, readout depth and kernel size
  (zero-padded probe network and VGG16, trained readout);
- ``"stages"``: the paper's Table 3, which stage's features (zero-padded
  probe network, VGG16, ResNet50).

Frozen features are computed once per network and input set and every readout
is fitted on them; one compiled trained readout serves every network with the
same feature shape.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.experiments._figures import (
    FIGURE_WIDTH,
    new_figure,
    require_matplotlib,
    save_figure,
)
from keras_posenc.layers.relative_position_2d import bilinear_matrix
from keras_posenc.probe.backbone import BACKBONE_PADDINGS, probe_backbone
from keras_posenc.probe.inputs import INPUT_KINDS, content_free_images
from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns
from keras_posenc.probe.posenet import PosENet
from keras_posenc.probe.pretrain import pretrain_backbone
from keras_posenc.probe.readout import LinearReadout, TrainedReadout

__all__ = [
    "APPLICATIONS",
    "COLUMNS",
    "FULL_SETTINGS",
    "QUICK_SETTINGS",
    "READOUT_PADDINGS",
    "READOUT_SHAPES",
    "STUDIES",
    "markdown_table",
    "padding_experiment",
    "plot_maps",
    "probe_padding_mode",
    "read_figure_data",
    "redraw",
    "summary_markdown",
    "write_figure_data",
    "write_results",
]

COLUMNS = (
    "padding",
    "input",
    "target",
    "spc",
    "spc_std",
    "mae",
    "constant",
    "seeds",
    "table",
    "network",
    "weights",
    "readout",
    "readout_layers",
    "kernel_size",
    "readout_padding",
    "taps",
    "task_accuracy",
)
STUDIES = (
    "padding",
    "trained_readout",
    "trained_backbone",
    "applications",
    "readout_alone",
    "readout_shape",
    "stages",
)
TABLES = ("padding", "readout_alone", "readout_shape", "stages")
APPLICATIONS = ("vgg16", "resnet50")
# Table 2 of the paper: (readout layers, kernel size).
READOUT_SHAPES = ((1, 1), (1, 3), (1, 7), (2, 3), (3, 3))
# Table 4 of the paper: zeros around the readout's input.
READOUT_PADDINGS = (0, 1, 2)

# Quick: a tiny network on 32 px (measured times in docs/data/cli_timings.csv).
# Full: the 64-112 px range, 3 seeds; the recorded run (673 s of CPU time, peak
# memory 6.6 GB) is on docs/experiments/position-information.md. Hidden readout layers
# (Table 2) are 16 wide to keep VGG16's deeper readouts affordable; the learning rate None
# scales with the fan-in.
QUICK_SETTINGS = {
    "image_size": 32,
    "stages": 3,
    "width": 8,
    "feature_size": 16,
    "train_images": 32,
    "test_images": 16,
    "kernel_size": 3,
    "application_size": 32,
    "readout_steps": 40,
    "readout_batch_size": 8,
    "readout_learning_rate": None,
    "readout_filters": 16,
    "pretrain_size": 32,
    "pretrain_images": 512,
    "pretrain_epochs": 1,
}
FULL_SETTINGS = {
    **QUICK_SETTINGS,
    "image_size": 96,
    "stages": 4,
    "width": 16,
    "feature_size": 28,
    "application_size": 112,
    "readout_steps": 150,
    # 'valid' padding needs 68 px for four stages; all modes pretrain at the same size.
    "pretrain_size": 72,
    "pretrain_images": 1024,
    "pretrain_epochs": 3,
}
_PROBE_SETTINGS = (
    "image_size",
    "stages",
    "width",
    "feature_size",
    "kernel_size",
    "train_images",
    "test_images",
)


# --------------------------------------------------------------------------- features


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


# --------------------------------------------------------------------------- readouts


def _patches(features: np.ndarray, kernel_size: int) -> np.ndarray:
    """``(n, h, w, c)`` -> ``(n, h-k+1, w-k+1, k*k*c)``: the inputs of a 'valid' k x k conv."""
    windows = np.lib.stride_tricks.sliding_window_view(
        features, (kernel_size, kernel_size), axis=(1, 2)
    )
    count, rows, cols = windows.shape[:3]
    return windows.reshape(count, rows, cols, -1)


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


# --------------------------------------------------------------------------- rows


def _rows(
    per_seed: list[dict[str, tuple[dict, np.ndarray]]],
    inputs: Sequence[str],
    targets: Sequence[str],
    task_accuracy: float | None = None,
    **key: Any,
) -> list[dict[str, Any]]:
    """One row per input and target: the mean and spread over the seeds' results."""
    rows = []
    for kind in inputs:
        scores = [result[kind][0] for result in per_seed]
        for target in targets:
            values = np.array([s[target][0] for s in scores])
            rows.append(
                {
                    "padding": key["padding"],
                    "input": kind,
                    "target": target,
                    "spc": float(values.mean()),
                    "spc_std": float(values.std()),
                    "mae": float(np.mean([s[target][1] for s in scores])),
                    "constant": any(s[target][2] for s in scores),
                    "seeds": len(per_seed),
                    "table": key.get("table", "padding"),
                    "network": key.get("network", "probe"),
                    "weights": key.get("weights", "random"),
                    "readout": key.get("readout", "least_squares"),
                    "readout_layers": key.get("readout_layers", 1),
                    "kernel_size": key.get("kernel_size", 3),
                    "readout_padding": key.get("readout_padding", 0),
                    "taps": key.get("taps", "all"),
                    "task_accuracy": task_accuracy,
                }
            )
    return rows


def _figure_map(result: dict[str, tuple[dict, np.ndarray]], inputs: Sequence[str]) -> np.ndarray:
    """The maps of the first test image of the first noise set (else the first input)."""
    kind = "noise" if "noise" in inputs else inputs[0]
    return result[kind][1][0]


def probe_padding_mode(
    padding: str,
    seed: int = 0,
    inputs: Sequence[str] = INPUT_KINDS,
    targets: Sequence[str] = PATTERN_NAMES,
    image_size: int = 32,
    stages: int = 3,
    width: int = 8,
    feature_size: int = 16,
    kernel_size: int = 3,
    train_images: int = 32,
    test_images: int = 16,
) -> dict[str, tuple[dict[str, tuple[float, float, bool]], np.ndarray]]:
    """One padding mode and seed: a frozen random probe backbone, a least-squares readout.

    The backbone's stage outputs are resized to ``feature_size`` and
    concatenated exactly as :class:`~keras_posenc.probe.PosENet` does, and
    computed once for every input kind. For noise the readout is fitted on
    ``train_images`` images and scored on ``test_images`` others; a constant
    input (grey, white) has only one image, so the readout is fitted and scored
    on it.

    Returns:
        ``{input kind: ({target: (spc, mae, constant)}, predicted maps (images,
        size, size, targets))}``.
    """
    grid = feature_size - kernel_size + 1
    if grid < 3:
        raise ValueError(
            f"probe_padding_mode: feature_size {feature_size} with kernel {kernel_size} leaves "
            f"a {grid} x {grid} readout; the targets need at least 3 x 3"
        )
    backbone = probe_backbone(
        padding, input_shape=(image_size, image_size, 3), stages=stages, width=width, seed=seed
    )
    features = _features(
        backbone, inputs, seed, image_size, feature_size, train_images, test_images
    )
    return _read(features, _Readout(kernel_size=kernel_size), targets, feature_size)


# --------------------------------------------------------------------------- the study


def _selection(name: str, values: Any, allowed: Sequence[str]) -> list[str]:
    values = [values] if isinstance(values, str) else list(values)
    if name == "studies" and values == ["all"]:
        values = list(allowed)
    wrong = [v for v in values if v not in allowed]
    if wrong or not values:
        raise ValueError(
            f"padding_experiment: `{name}` must be a non-empty selection of {list(allowed)}"
            + (" or 'all'" if name == "studies" else "")
            + f"; received {values!r}"
        )
    return values


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


class _Study:
    """Runs the selected studies, collecting rows per table and maps for the figures."""

    def __init__(
        self,
        studies: list[str],
        seeds: tuple[int, ...],
        paddings: list[str],
        inputs: list[str],
        targets: list[str],
        settings: dict[str, Any],
        applications: list[str],
        verbose: bool,
    ) -> None:
        self.studies, self.seeds, self.networks = studies, seeds, applications
        self.paddings, self.inputs, self.targets = paddings, inputs, targets
        self.settings, self.verbose = settings, verbose
        self.start = time.perf_counter()
        self.trainers = _Trainers(settings, targets)
        self.tables: dict[str, list[dict[str, Any]]] = {table: [] for table in TABLES}
        self.figures: dict[str, dict[str, np.ndarray]] = {}
        # The readout-shape and stage studies read noise (the one input with test images).
        self.noise = ["noise"] if "noise" in inputs else inputs[:1]

    def log(self, message: str) -> None:
        if self.verbose:
            elapsed = time.perf_counter() - self.start
            print(f"[padding_experiment {elapsed:7.1f} s] {message}", flush=True)

    def figure(self, name: str, label: str, maps: np.ndarray) -> None:
        self.figures.setdefault(name, {})[label] = maps

    def read(self, features: _Features, readout: _Readout, seed: int) -> dict:
        return _read(
            features,
            readout,
            self.targets,
            self.settings["feature_size"],
            self.trainers,
            seed,
        )

    # ----------------------------------------------------------------- probe networks

    def probe_networks(self) -> None:
        wanted = set(self.studies)
        plans = []  # (weights, padding, readouts for the padding table, shape/stage studies)
        random_readouts = [
            kind
            for kind, study in (("least_squares", "padding"), ("trained", "trained_readout"))
            if study in wanted
        ]
        zero_studies = wanted & {"readout_shape", "stages"}
        paddings = list(self.paddings)
        if zero_studies and "zeros" not in paddings:
            paddings.append("zeros")
        for padding in paddings:
            readouts = random_readouts if padding in self.paddings else []
            if readouts or (padding == "zeros" and zero_studies):
                plans.append(("random", padding, readouts, padding == "zeros"))
        if "trained_backbone" in wanted:
            for padding in self.paddings:
                plans.append(("trained", padding, ["least_squares", "trained"], False))
        for weights, padding, readouts, zero_extras in plans:
            self.probe_network(weights, padding, readouts, zero_extras)

    def probe_network(
        self, weights: str, padding: str, readouts: list[str], zero_extras: bool
    ) -> None:
        s = self.settings
        per_seed: dict[Any, list] = {}
        accuracies = []
        for seed in self.seeds:
            self.log(f"probe network, {weights} weights, {padding} padding, seed {seed}")
            backbone = probe_backbone(
                padding,
                input_shape=(s["image_size"], s["image_size"], 3),
                stages=s["stages"],
                width=s["width"],
                seed=seed,
            )
            if weights == "trained":
                accuracies.append(self.pretrained(backbone, padding, seed))
            features = _features(
                backbone,
                self.inputs,
                seed,
                s["image_size"],
                s["feature_size"],
                s["train_images"],
                s["test_images"],
            )
            for kind in readouts:
                readout = _Readout(kind, kernel_size=s["kernel_size"])
                per_seed.setdefault(kind, []).append(self.read(features, readout, seed))
            if zero_extras:
                self.probe_extras(features, seed, per_seed)
            del features
        accuracy = float(np.mean(accuracies)) if accuracies else None
        for kind in readouts:
            self.tables["padding"] += _rows(
                per_seed[kind],
                self.inputs,
                self.targets,
                accuracy,
                padding=padding,
                weights=weights,
                readout=kind,
                kernel_size=s["kernel_size"],
            )
            figure = "padding_maps" if kind == "least_squares" else "padding_maps_trained_readout"
            if weights == "trained":
                figure = f"padding_maps_trained_backbone_{kind}"
            self.figure(figure, padding, _figure_map(per_seed[kind][0], self.inputs))
        if zero_extras:
            self.extra_rows("probe", per_seed)

    def pretrained(self, backbone: keras.Model, padding: str, seed: int) -> float:
        """Trains a same-architecture network at ``pretrain_size`` and copies its weights in."""
        s = self.settings
        network = probe_backbone(
            padding,
            input_shape=(s["pretrain_size"], s["pretrain_size"], 3),
            stages=s["stages"],
            width=s["width"],
            seed=seed,
        )
        accuracy = pretrain_backbone(
            network, images=s["pretrain_images"], epochs=s["pretrain_epochs"], seed=seed
        )
        # Convolutions do not depend on the image size: the trained kernels fit any input.
        backbone.set_weights(network.get_weights())
        self.log(f"  trained from scratch: held-out accuracy {accuracy:.3f} (chance 0.25)")
        return accuracy

    def probe_extras(self, features: _Features, seed: int, per_seed: dict) -> None:
        """Table 2 and 3 analogues on the zero-padded probe network (noise only)."""
        noise = _Features(
            {k: v for k, v in features.kinds.items() if k in self.noise},
            features.taps,
            features.image_size,
        )
        if "readout_shape" in self.studies:
            for layers, kernel in READOUT_SHAPES:
                readout = _Readout("trained", layers, kernel)
                per_seed.setdefault(("shape", layers, kernel), []).append(
                    self.read(noise, readout, seed)
                )
        if "stages" in self.studies:
            for kind in ("least_squares", "trained"):
                for index, (tap, _, _) in enumerate(noise.taps, start=1):
                    readout = _Readout(kind, kernel_size=self.settings["kernel_size"])
                    per_seed.setdefault(("stage", kind, f"f{index}"), []).append(
                        self.read(noise.select(tap), readout, seed)
                    )
                readout = _Readout(kind, kernel_size=self.settings["kernel_size"])
                per_seed.setdefault(("stage", kind, "all"), []).append(
                    self.read(noise, readout, seed)
                )

    def extra_rows(self, network: str, per_seed: dict, weights: str = "random") -> None:
        for key, results in per_seed.items():
            if not isinstance(key, tuple):
                continue
            if key[0] == "shape":
                self.tables["readout_shape"] += _rows(
                    results,
                    self.noise,
                    self.targets,
                    table="readout_shape",
                    network=network,
                    padding="zeros",
                    readout="trained",
                    readout_layers=key[1],
                    kernel_size=key[2],
                )
                if network == "vgg16":
                    label = f"{key[1]} layer(s) of {key[2]} x {key[2]}"
                    self.figure("readout_shape_maps", label, _figure_map(results[0], self.noise))
            else:
                self.tables["stages"] += _rows(
                    results,
                    self.noise,
                    self.targets,
                    table="stages",
                    network=network,
                    padding="zeros",
                    readout=key[1],
                    kernel_size=self.settings["kernel_size"],
                    taps=key[2],
                )
                if network == "vgg16" and key[1] == "trained":
                    self.figure("stages_maps", key[2], _figure_map(results[0], self.noise))

    # ----------------------------------------------------------------- applications

    def applications(self) -> None:
        wanted = set(self.studies)
        s, seed = self.settings, self.seeds[0]
        for name in self.networks:
            table = "applications" in wanted
            shape = "readout_shape" in wanted and name == "vgg16"
            stages = "stages" in wanted
            if not (table or shape or stages):
                continue
            self.log(f"{name}, weights=None, seed {seed}, {s['application_size']} px")
            backbone, preprocess = _application(name, s["application_size"], seed)
            features = _features(
                backbone,
                self.inputs if table else self.noise,
                seed,
                s["application_size"],
                s["feature_size"],
                s["train_images"],
                s["test_images"],
                scale=255.0,
                preprocess=preprocess,
                compiled=True,
            )
            del backbone  # then minutes of readouts: one line each, so progress shows
            self.log(f"  {name}: features read; the readout of every stage")
            readout = _Readout("trained", kernel_size=s["kernel_size"])
            all_taps = self.read(features, readout, seed)
            if table:
                self.tables["padding"] += _rows(
                    [all_taps],
                    self.inputs,
                    self.targets,
                    network=name,
                    padding="zeros",
                    readout="trained",
                    kernel_size=s["kernel_size"],
                )
                self.figure("applications_maps", name, _figure_map(all_taps, self.inputs))
            noise = _Features(
                {k: v for k, v in features.kinds.items() if k in self.noise},
                features.taps,
                features.image_size,
            )
            del features
            per_seed: dict[Any, list] = {}
            if shape:
                for layers, kernel in READOUT_SHAPES:
                    if (layers, kernel) == (1, s["kernel_size"]):
                        result = {k: all_taps[k] for k in self.noise}
                    else:
                        self.log(f"  {name}: a readout of {layers} layer(s) of {kernel} x {kernel}")
                        result = self.read(noise, _Readout("trained", layers, kernel), seed)
                    per_seed[("shape", layers, kernel)] = [result]
            if stages:
                for index, (tap, _, _) in enumerate(noise.taps, start=1):
                    self.log(f"  {name}: the readout of stage f{index} alone")
                    per_seed[("stage", "trained", f"f{index}")] = [
                        self.read(noise.select(tap), readout, seed)
                    ]
                per_seed[("stage", "trained", "all")] = [{k: all_taps[k] for k in self.noise}]
            self.extra_rows(name, per_seed)
            del noise, all_taps
            gc.collect()

    # ----------------------------------------------------------------- readout alone

    def readout_alone(self) -> None:
        s = self.settings
        per_seed: dict[Any, list] = {}
        for seed in self.seeds:
            self.log(f"readout alone (no backbone), seed {seed}")
            features = _features(
                None,
                self.inputs,
                seed,
                s["image_size"],
                s["feature_size"],
                s["train_images"],
                s["test_images"],
            )
            for kind in ("least_squares", "trained"):
                for padding in READOUT_PADDINGS:
                    readout = _Readout(kind, kernel_size=s["kernel_size"], padding=padding)
                    per_seed.setdefault((kind, padding), []).append(
                        self.read(features, readout, seed)
                    )
        for (kind, padding), results in per_seed.items():
            self.tables["readout_alone"] += _rows(
                results,
                self.inputs,
                self.targets,
                table="readout_alone",
                network="none",
                padding="none",
                readout=kind,
                kernel_size=s["kernel_size"],
                readout_padding=padding,
            )
            if kind == "trained":
                for kind_name in self.inputs:
                    self.figure(
                        "readout_alone_maps",
                        f"{kind_name} input, readout padding {padding}",
                        results[0][kind_name][1][0],
                    )

    def run(self) -> list[dict[str, Any]]:
        if set(self.studies) & {
            "padding",
            "trained_readout",
            "trained_backbone",
            "readout_shape",
            "stages",
        }:
            self.probe_networks()
        if self.networks and set(self.studies) & {"applications", "readout_shape", "stages"}:
            self.applications()
        if "readout_alone" in self.studies:
            self.readout_alone()
        self.log("done")
        return [row for table in TABLES for row in self.tables[table]]


def padding_experiment(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    paddings: Sequence[str] = BACKBONE_PADDINGS,
    inputs: Sequence[str] = INPUT_KINDS,
    targets: Sequence[str] = PATTERN_NAMES,
    studies: str | Sequence[str] = ("padding",),
    applications: Sequence[str] = APPLICATIONS,
    verbose: bool = False,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Runs the padding study and returns its table; writes it to ``out`` if given.

    By default only the ``"padding"`` part runs: for every padding mode, input
    kind and seed, a frozen random :func:`~keras_posenc.probe.probe_backbone`
    probed with a least-squares PosENet readout (:func:`probe_padding_mode`).
    ``studies="all"`` adds trained readouts, networks trained from scratch,
    VGG16 and ResNet50 (``weights=None``, first seed) and the analogues of the
    paper's Tables 4, 2 and 3 (see the module docstring); that is what
    ``posenc probe padding`` runs. SPC and MAE are averaged over the seeds.

    Args:
        quick: the tiny setting (32 px, 3 stages of width 8, one seed; about a
            minute of CPU time for everything, see the command line page)
            instead of the full one (96 px probe network, 112 px VGG16/ResNet50,
            4 stages of width 16, seeds 0, 1, 2; 673 s of CPU time for everything
            in the run on the experiment's page).
        out: a folder to write ``padding.csv`` (every row), ``padding.md`` (the
            padding table), ``summary.md`` (every table in the paper's layout),
            ``figures.md`` and the PNG figures into (predicted maps next to
            their targets, drawn with matplotlib, the ``experiments`` extra),
            each with the NPZ file of its maps (`redraw` draws the figures
            again from them); created if missing.
        seeds: network seeds; default ``(0,)`` quick, ``(0, 1, 2)`` full.
        paddings: padding modes of the probe network (``BACKBONE_PADDINGS``).
        inputs: input kinds (``INPUT_KINDS``).
        targets: target names (``PATTERN_NAMES``).
        studies: parts to run, from ``STUDIES``, or ``"all"``.
        applications: the keras.applications networks of the ``"applications"``,
            ``"readout_shape"`` (VGG16 only) and ``"stages"`` parts, from
            ``APPLICATIONS``; empty to probe only the small network.
        verbose: print progress.
        **settings: overrides of ``QUICK_SETTINGS`` / ``FULL_SETTINGS``
            (``image_size``, ``stages``, ``width``, ``feature_size``,
            ``train_images``, ``test_images``, ``kernel_size``,
            ``application_size``, ``readout_steps``, ``readout_batch_size``,
            ``readout_learning_rate`` (None: :class:`~keras_posenc.probe.TrainedReadout`'s
            fan-in rule), ``readout_filters``, ``pretrain_size``, ``pretrain_images``,
            ``pretrain_epochs``).

    Returns:
        One dict per row with the keys of ``COLUMNS``: the row's ``table``
        (``"padding"``, ``"readout_alone"``, ``"readout_shape"``, ``"stages"``),
        what was probed (``network``, ``weights``, ``padding``, ``readout``,
        ``readout_layers``, ``kernel_size``, ``readout_padding``, ``taps``,
        ``input``, ``target``), mean ``spc`` and its standard deviation over
        seeds ``spc_std``, mean ``mae``, ``constant`` (some prediction was
        constant and scored 0), the number of ``seeds`` and, for networks
        trained from scratch, their mean held-out ``task_accuracy``.

    Raises:
        ValueError: for an empty or unknown selection or an unknown setting.
        ImportError: with ``out`` but without matplotlib, before anything runs.

    Examples:

        >>> from keras_posenc.experiments import padding_experiment
        >>> rows = padding_experiment(paddings=["zeros"], inputs=["grey"], targets=["H"])
        >>> [(r["padding"], r["input"], r["target"], r["spc"] > 0.5) for r in rows]
        [('zeros', 'grey', 'H', True)]
    """
    if out is not None:  # fail before the study, not after it
        require_matplotlib("padding_experiment")
    unknown = sorted(set(settings) - set(FULL_SETTINGS))
    if unknown:
        raise ValueError(
            f"padding_experiment: unknown setting(s) {unknown}; known: {sorted(FULL_SETTINGS)}"
        )
    chosen = {**(QUICK_SETTINGS if quick else FULL_SETTINGS), **settings}
    paddings = _selection("paddings", paddings, BACKBONE_PADDINGS)
    inputs = _selection("inputs", inputs, INPUT_KINDS)
    targets = _selection("targets", targets, PATTERN_NAMES)
    studies = _selection("studies", studies, STUDIES)
    applications = (
        [] if not applications else _selection("applications", applications, APPLICATIONS)
    )
    seeds = tuple(seeds if seeds is not None else ((0,) if quick else (0, 1, 2)))
    if not seeds:
        raise ValueError("padding_experiment: `seeds` must not be empty")
    grid = chosen["feature_size"] - chosen["kernel_size"] + 1
    if grid < 3:
        raise ValueError(
            f"padding_experiment: feature_size {chosen['feature_size']} with kernel "
            f"{chosen['kernel_size']} leaves a {grid} x {grid} readout; the targets need at "
            "least 3 x 3"
        )
    study = _Study(studies, seeds, paddings, inputs, targets, chosen, applications, verbose)
    rows = study.run()
    if out is not None:
        write_results(rows, out, study.figures, targets)
    return rows


# --------------------------------------------------------------------------- tables


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as one long markdown table (constant predictions marked with *)."""
    lines = [
        "| padding | input | target | SPC | SPC std | MAE | seeds | network | weights | readout |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        mark = "*" if row["constant"] else ""
        lines.append(
            f"| {row['padding']} | {row['input']} | {row['target']} | {row['spc']:.3f}{mark} | "
            f"{row['spc_std']:.3f} | {row['mae']:.3f} | {row['seeds']} | "
            f"{row.get('network', 'probe')} | {row.get('weights', 'random')} | "
            f"{row.get('readout', 'least_squares')} |"
        )
    lines.append("")
    lines.append("\\* a prediction was constant: SPC is undefined and counted as 0.")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    """The paper's style: ``.742``, ``-.011``."""
    text = f"{value:.3f}"
    return text.replace("0.", ".", 1) if abs(value) < 1 else text


def _cell(row: dict[str, Any]) -> str:
    spread = f"±{_number(row['spc_std'])}" if row["seeds"] > 1 else ""
    mark = "*" if row["constant"] else ""
    return f"{_number(row['spc'])}{spread}{mark} / {_number(row['mae'])}"


def _pivot(rows: Sequence[dict[str, Any]], keys: Sequence[str], headers: Sequence[str]) -> str:
    """Targets as columns, SPC / MAE cells; one line per distinct value of ``keys``."""
    targets = list(dict.fromkeys(row["target"] for row in rows))
    lines = [
        "| " + " | ".join([*headers, *targets]) + " |",
        "|" + "---|" * (len(headers) + len(targets)),
    ]
    grouped: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[k] for k in keys), {})[row["target"]] = row
    for key, cells in grouped.items():
        values = [str(v) for v in key]
        values += [_cell(cells[t]) if t in cells else "" for t in targets]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Every table of the study in the paper's layout: targets as columns, SPC / MAE cells.

    A cell reads ``SPC±std / MAE`` (the spread over seeds when there are
    several); ``*`` marks a constant prediction (SPC undefined, counted as 0).
    """
    parts = []
    padding_rows = [r for r in rows if r["table"] == "padding"]
    for kind in dict.fromkeys(r["input"] for r in padding_rows):
        selected = [r for r in padding_rows if r["input"] == kind]
        parts.append(f"### Padding, {kind} input\n")
        parts.append(
            _pivot(
                selected,
                ("network", "weights", "readout", "padding"),
                ("network", "weights", "readout", "padding"),
            )
        )
    trained = [r for r in padding_rows if r["task_accuracy"] is not None]
    if trained:
        parts.append("### Networks trained from scratch (grating orientation, 4 classes)\n")
        lines = ["| padding | held-out accuracy (chance .25) |", "|---|---|"]
        for padding in dict.fromkeys(r["padding"] for r in trained):
            accuracy = next(r["task_accuracy"] for r in trained if r["padding"] == padding)
            lines.append(f"| {padding} | {accuracy:.3f} |")
        parts.append("\n".join(lines) + "\n")
    alone = [r for r in rows if r["table"] == "readout_alone"]
    if alone:
        parts.append("### Readout alone (Table 4)\n")
        parts.append(
            _pivot(
                alone,
                ("input", "readout", "readout_padding"),
                ("input", "readout", "readout padding"),
            )
        )
    shape = [r for r in rows if r["table"] == "readout_shape"]
    if shape:
        parts.append("### Readout depth and kernel size (Table 2), noise input\n")
        parts.append(
            _pivot(
                shape,
                ("network", "readout_layers", "kernel_size"),
                ("network", "layers", "kernel"),
            )
        )
    stages = [r for r in rows if r["table"] == "stages"]
    if stages:
        parts.append("### Which stage's features (Table 3), noise input\n")
        parts.append(
            _pivot(stages, ("network", "readout", "taps"), ("network", "readout", "features"))
        )
    parts.append(
        "Cells: SPC±std over seeds / MAE. \\* a prediction was constant: SPC is undefined "
        "and counted as 0.\n"
    )
    return "\n".join(parts)


# The figures in the order a full run writes them (`redraw` keeps it).
_FIGURE_ROWS = {
    "padding_maps": "the probe network (random weights, least-squares readout), one padding "
    "mode per row",
    "padding_maps_trained_readout": "the probe network (random weights, trained readout), one "
    "padding mode per row",
    "padding_maps_trained_backbone_least_squares": "the probe network trained from scratch, "
    "least-squares readout, one padding mode per row",
    "padding_maps_trained_backbone_trained": "the probe network trained from scratch, trained "
    "readout, one padding mode per row",
    "applications_maps": "keras.applications networks with weights=None, trained readout",
    "readout_shape_maps": "VGG16 (weights=None), trained readout of `layers x kernel`",
    "stages_maps": "VGG16 (weights=None), trained readout of one stage (f1..f5) or all",
    "readout_alone_maps": "PosENet alone (no backbone, trained readout), per input and readout "
    "padding",
}


def write_results(
    rows: Sequence[dict[str, Any]],
    out: str | os.PathLike,
    figures: dict[str, dict[str, np.ndarray]] | None = None,
    targets: Sequence[str] = PATTERN_NAMES,
) -> list[str]:
    """Writes ``padding.csv``, ``padding.md``, ``summary.md`` and the figures with ``figures.md``.

    Each figure is two files: ``{stem}.npz``, the maps it shows
    (`write_figure_data`), and ``{stem}.png``, drawn from them (`plot_maps`);
    `redraw` draws the PNGs again from the NPZ files.

    Args:
        rows: the experiment's rows.
        out: the folder (created if missing).
        figures: ``{file stem: {row label: maps (size, size, targets)}}``; each
            becomes ``{stem}.png`` with one row of target / prediction pairs per label.
        targets: the targets in the maps' channel order.

    Returns:
        The paths written.

    Raises:
        ImportError: with ``figures`` but without matplotlib (the ``experiments``
            extra), before anything is written.
    """
    if figures:
        require_matplotlib("padding.write_results")
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, "padding.csv")
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row[key] for key in COLUMNS})
    md_path = os.path.join(out, "padding.md")
    with open(md_path, "w") as handle:
        handle.write(markdown_table([r for r in rows if r["table"] == "padding"]))
    summary_path = os.path.join(out, "summary.md")
    with open(summary_path, "w") as handle:
        handle.write(summary_markdown(rows))
    paths = [csv_path, md_path, summary_path]
    for stem, maps_by_label in (figures or {}).items():
        data_path = os.path.join(out, f"{stem}.npz")
        paths.append(write_figure_data(data_path, maps_by_label, targets))
        figure = plot_maps(maps_by_label, targets, title=_figure_title(stem))
        paths.append(save_figure(figure, os.path.join(out, f"{stem}.png")))
    if figures:
        described = {
            stem: (list(maps), list(targets), _map_size(maps)) for stem, maps in figures.items()
        }
        paths.append(_write_listing(out, described))
    return paths


def _figure_title(stem: str) -> str:
    # The listing's markdown backticks would show as such in the figure.
    return "Predicted position maps: " + _FIGURE_ROWS.get(stem, stem).replace("`", "")


def _map_size(maps_by_label: dict[str, np.ndarray]) -> tuple[int, int]:
    return next(iter(maps_by_label.values())).shape[:2]


def _write_listing(
    out: str | os.PathLike, figures: dict[str, tuple[list[str], list[str], tuple[int, int]]]
) -> str:
    """``figures.md``: what each figure's rows are; ``{stem: (labels, targets, (h, w))}``."""
    targets = next(iter(figures.values()))[1]
    lines = [
        "# Figures\n",
        "Each PNG has one row per setting, named on its left; in a row, for each target ("
        + ", ".join(targets)
        + "), the target map and then the predicted map (the first test image of the first "
        "seed; noise input unless named), in grey from 0 (black) to 1 (white), predictions "
        "outside [0, 1] shown as 0 or 1. The maps behind each PNG are in the NPZ file of the "
        "same name (`maps`: rows x height x width x targets, `labels`, `targets`); "
        "`keras_posenc.experiments.padding.redraw(folder)` draws the PNGs again from them.\n",
    ]
    for stem, (labels, _, (height, width)) in figures.items():
        lines.append(
            f"- `{stem}.png`: {_FIGURE_ROWS.get(stem, stem)}. Rows, top to bottom: "
            + "; ".join(labels)
            + f" ({height} x {width} px per map)."
        )
    path = os.path.join(out, "figures.md")
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def _check_maps(
    caller: str, maps_by_label: dict[str, np.ndarray], targets: Sequence[str]
) -> tuple[int, int]:
    """The maps' (height, width); a ValueError unless all are (h, w, len(targets))."""
    if not maps_by_label:
        raise ValueError(f"{caller}: `maps_by_label` must hold at least one row; got none.")
    shapes = {label: np.shape(maps) for label, maps in maps_by_label.items()}
    height, width = next(iter(shapes.values()))[:2]
    wrong = {
        label: shape for label, shape in shapes.items() if shape != (height, width, len(targets))
    }
    if wrong:
        raise ValueError(
            f"{caller}: every map in `maps_by_label` must have shape (height, width, "
            f"{len(targets)}) (one channel per target of {list(targets)}), the same for every "
            f"row; got {shapes}."
        )
    return height, width


def write_figure_data(
    path: str | os.PathLike,
    maps_by_label: dict[str, np.ndarray],
    targets: Sequence[str] = PATTERN_NAMES,
) -> str:
    """Saves the maps behind a figure as an NPZ file that `read_figure_data` reads.

    The file holds ``maps`` (float32, ``(rows, height, width, targets)``, the
    predictions as the readout gave them, not clipped), ``labels`` (one per
    row) and ``targets``; no pickled objects.

    Returns:
        The path written.

    Examples:

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "maps.npz")
        >>> _ = write_figure_data(path, {"zeros": np.zeros((4, 4, 1))}, targets=["H"])
        >>> maps, targets = read_figure_data(path)
        >>> list(maps), maps["zeros"].shape, targets
        (['zeros'], (4, 4, 1), ['H'])
    """
    _check_maps("write_figure_data", maps_by_label, targets)
    np.savez_compressed(
        path,
        maps=np.stack([np.asarray(m, np.float32) for m in maps_by_label.values()]),
        labels=np.array(list(maps_by_label), dtype=str),
        targets=np.array(list(targets), dtype=str),
    )
    return os.fspath(path)


def read_figure_data(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], list[str]]:
    """The maps behind a figure, from the NPZ file `write_figure_data` wrote.

    ``maps`` stored as uint8 (an 8-bit grey image of the maps clipped to
    [0, 1], as for the figures of docs/experiments/position-information/, whose
    maps were recovered from earlier 8-bit figures) are read as ``value / 255``.

    Returns:
        ``({row label: maps (height, width, targets)}, targets)``.

    Raises:
        ValueError: when the file lacks ``maps``, ``labels`` or ``targets`` or their
            sizes disagree.
    """
    with np.load(path, allow_pickle=False) as data:
        missing = [key for key in ("maps", "labels", "targets") if key not in data.files]
        if missing:
            raise ValueError(
                f"read_figure_data: {os.fspath(path)!r} lacks {missing}; expected the arrays "
                "maps, labels and targets that write_figure_data writes."
            )
        maps, labels, targets = data["maps"], list(data["labels"]), list(data["targets"])
    if maps.dtype == np.uint8:
        maps = maps.astype(np.float32) / 255.0
    if maps.ndim != 4 or maps.shape[0] != len(labels) or maps.shape[3] != len(targets):
        raise ValueError(
            f"read_figure_data: {os.fspath(path)!r} holds maps of shape {maps.shape} for "
            f"{len(labels)} label(s) and {len(targets)} target(s); expected (labels, height, "
            "width, targets)."
        )
    return {str(label): maps[i] for i, label in enumerate(labels)}, [str(t) for t in targets]


def plot_maps(
    maps_by_label: dict[str, np.ndarray],
    targets: Sequence[str] = PATTERN_NAMES,
    title: str | None = None,
) -> Any:
    """Predicted position maps next to their targets, as a matplotlib figure.

    One row per label (named on the left); in a row, for each target, the
    target map (`~keras_posenc.probe.position_patterns`) and then the
    prediction, in grey from 0 (black) to 1 (white), with one colour bar.

    Args:
        maps_by_label: ``{row label: maps (height, width, targets)}``.
        targets: the targets in the maps' channel order.
        title: the figure's title.

    Returns:
        A ``matplotlib.figure.Figure`` (Agg canvas) 1200 px wide at
        `keras_posenc.experiments._figures.DPI`; save it with its ``savefig``.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
        ValueError: for no rows, or maps whose shapes differ or do not fit ``targets``.

    Examples:

        >>> maps = position_patterns(8, 8)
        >>> figure = plot_maps({"exact": np.stack([maps["H"], maps["G"]], -1)}, ["H", "G"])
        >>> int(figure.get_size_inches()[0] * figure.dpi)
        1200
    """
    height, width = _check_maps("plot_maps", maps_by_label, targets)
    expected = position_patterns(height, width)
    rows, columns = len(maps_by_label), 2 * len(targets)
    # Inches per map: the width left after the row labels and the colour bar, shared
    # by the columns (at most 1.6, so that a figure of few maps is not mostly map).
    tile = min(1.6, (FIGURE_WIDTH - 2.4) / columns)
    figure = new_figure("plot_maps", height=1.5 + tile * height / width * rows)
    axes = figure.subplots(rows, columns, squeeze=False)
    image = None
    for r, (label, maps) in enumerate(maps_by_label.items()):
        for t, name in enumerate(targets):
            for k, (kind, values) in enumerate(
                (("target", expected[name]), ("prediction", np.asarray(maps)[..., t]))
            ):
                axis = axes[r, 2 * t + k]
                image = axis.imshow(
                    values, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest"
                )
                axis.set_xticks([])
                axis.set_yticks([])
                if r == 0:
                    axis.set_title(f"{name}\n{kind}", fontsize=9)
        axes[r, 0].set_ylabel(
            label.replace(", ", ",\n"), rotation=0, ha="right", va="center", fontsize=9
        )
    colorbar = figure.colorbar(image, ax=axes, fraction=0.02, aspect=30)
    colorbar.set_label("map value")
    figure.supxlabel(
        f"each map: {width} x {height} px (x: image column, y: image row); grey from 0 "
        "(black) to 1 (white), predictions outside [0, 1] shown as 0 or 1",
        fontsize=10,
    )
    if title:
        figure.suptitle(title)
    return figure


def redraw(folder: str | os.PathLike, out: str | os.PathLike | None = None) -> list[str]:
    """Draws every figure again from the NPZ files beside it, and its ``figures.md``.

    No probing or training: each ``{stem}.npz`` that `write_results` wrote
    holds everything ``{stem}.png`` shows.

    Args:
        folder: the folder holding the NPZ files.
        out: the folder for the PNGs and ``figures.md``; default ``folder``.

    Returns:
        The paths written: the PNGs, then ``figures.md``.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
        FileNotFoundError: when ``folder`` holds no NPZ file.
    """
    require_matplotlib("padding.redraw")
    stems = sorted(
        (name[: -len(".npz")] for name in os.listdir(folder) if name.endswith(".npz")),
        key=lambda stem: (
            list(_FIGURE_ROWS).index(stem) if stem in _FIGURE_ROWS else len(_FIGURE_ROWS),
            stem,
        ),
    )
    if not stems:
        raise FileNotFoundError(
            f"padding.redraw: no figure data (*.npz) in {os.fspath(folder)!r}; expected the "
            "files padding_experiment(out=...) writes next to its figures."
        )
    out = folder if out is None else out
    os.makedirs(out, exist_ok=True)
    paths, described = [], {}
    for stem in stems:
        maps_by_label, targets = read_figure_data(os.path.join(folder, f"{stem}.npz"))
        figure = plot_maps(maps_by_label, targets, title=_figure_title(stem))
        paths.append(save_figure(figure, os.path.join(out, f"{stem}.png")))
        described[stem] = (list(maps_by_label), targets, _map_size(maps_by_label))
    paths.append(_write_listing(out, described))
    return paths
