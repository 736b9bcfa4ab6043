"""The padding study's figures: predicted maps next to their targets, their data, redrawn.

Each figure is an NPZ file of the maps it shows (`write_figure_data`,
`read_figure_data`) and the PNG drawn from it (`plot_maps`); ``figures.md``
lists what each figure's rows are, and `redraw` draws the PNGs again from the
NPZ files alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments._figures import (
    FIGURE_WIDTH,
    new_figure,
    require_matplotlib,
    save_figure,
)
from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns

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
