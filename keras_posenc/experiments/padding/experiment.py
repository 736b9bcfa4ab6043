"""The padding study's entry points: one padding mode probed, and the whole study.

`probe_padding_mode` is one padding mode and seed with a least-squares readout;
`padding_experiment` checks its selection and settings, runs the parts
(`keras_posenc.experiments.padding.study`) and writes what they found
(`keras_posenc.experiments.padding.results`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments._figures import require_matplotlib
from keras_posenc.experiments.padding.features import _features
from keras_posenc.experiments.padding.readouts import _read, _Readout
from keras_posenc.experiments.padding.results import write_results
from keras_posenc.experiments.padding.settings import (
    APPLICATIONS,
    FULL_SETTINGS,
    QUICK_SETTINGS,
    STUDIES,
)
from keras_posenc.experiments.padding.study import _Study
from keras_posenc.probe.backbone import BACKBONE_PADDINGS, probe_backbone
from keras_posenc.probe.inputs import INPUT_KINDS
from keras_posenc.probe.patterns import PATTERN_NAMES


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
    paper's Tables 4, 2 and 3 (see the package's docstring); that is what
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
