"""The runs of the padding study: every selected part, its rows and its figures' maps.

`_Study` probes the small network (random, or trained from scratch), the
keras.applications networks and PosENet alone, and collects one list of rows
per table (`_rows`: the mean and spread over seeds) and the maps each figure
shows; `keras_posenc.experiments.padding.experiment.padding_experiment` checks
the arguments and runs it.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.experiments.padding.features import _application, _Features, _features
from keras_posenc.experiments.padding.readouts import _read, _Readout, _Trainers
from keras_posenc.experiments.padding.settings import READOUT_PADDINGS, READOUT_SHAPES, TABLES
from keras_posenc.probe.backbone import probe_backbone
from keras_posenc.probe.pretrain import pretrain_backbone


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
