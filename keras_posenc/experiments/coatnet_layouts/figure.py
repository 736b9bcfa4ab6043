"""The figure: test and training accuracy per layout and position encoding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments._figures import new_figure
from keras_posenc.experiments.coatnet_layouts.settings import CLASSES


def plot(rows: Sequence[dict[str, Any]]) -> Any:
    """Test and training accuracy per layout and position encoding, as a matplotlib figure.

    For each row (a layout and its Transformer stages' position encoding): the
    mean test accuracy with an error bar from the lowest to the highest seed,
    and the mean training accuracy with one standard deviation; lines at
    chance (0.25) and at 0.50, the best a model that sees the layout but not
    the textures can do. Each row's label gives its layout, its position
    encoding (where the rows differ in it) and its trainable parameters; the
    legend sits below the axes.

    Args:
        rows: the rows of `layout_experiment` (or `read_results`).

    Returns:
        A ``matplotlib.figure.Figure`` (Agg canvas) 1000 px wide (125 px a row
        from 9 rows on) at
        `keras_posenc.experiments._figures.DPI`; save it with its ``savefig``.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).

    Examples:

        >>> rows = [{"layout": "C-C-C-T", "positions": "table", "params": 156936,
        ...          "test_accuracy": 0.99,
        ...          "test_accuracy_min": 0.98, "test_accuracy_max": 1.0,
        ...          "train_accuracy": 1.0, "train_accuracy_std": 0.0, "seeds": 3,
        ...          "train_images": 2048, "epochs": 8}]
        >>> figure = plot(rows)
        >>> [int(v) for v in figure.get_size_inches() * figure.dpi]
        [1000, 500]
    """
    figure = new_figure("coatnet_layouts.plot", height=5.0, width=max(10.0, 1.25 * len(rows)))
    axis = figure.subplots()
    x = np.arange(len(rows))
    test = np.array([row["test_accuracy"] for row in rows])
    low = test - np.array([row["test_accuracy_min"] for row in rows])
    high = np.array([row["test_accuracy_max"] for row in rows]) - test
    train = np.array([row["train_accuracy"] for row in rows])
    train_std = np.array([row["train_accuracy_std"] for row in rows])
    seeds = rows[0]["seeds"]
    axis.errorbar(
        x - 0.08,
        test,
        yerr=np.maximum([low, high], 0),
        fmt="o",
        color="tab:blue",
        markersize=8,
        capsize=4,
        label=f"test accuracy: mean of {seeds} seed(s), bar from lowest to highest seed",
    )
    axis.errorbar(
        x + 0.08,
        train,
        yerr=train_std,
        fmt="s",
        color="tab:orange",
        markerfacecolor="white",
        markersize=8,
        capsize=4,
        label="training accuracy: mean, bar ± 1 standard deviation",
    )
    axis.axhline(1 / len(CLASSES), color="0.4", linestyle="--", linewidth=1, label="chance: 0.25")
    axis.axhline(
        0.5,
        color="0.4",
        linestyle=":",
        linewidth=1.2,
        label="best possible from layout without texture: 0.50",
    )
    named = any(row.get("positions", "table") != "table" for row in rows)
    axis.set_xticks(x, [_label(row, named) for row in rows], fontsize=9 if len(rows) > 6 else None)
    axis.set_xlim(-0.5, len(rows) - 0.5)
    axis.set_ylim(0, 1.05)
    axis.grid(True, axis="y", color="0.9")
    axis.set_xlabel(
        "layout of stages S1..S4 (C: MBConv convolution, T: relative-attention Transformer) "
        "and the T stages' position encoding"
    )
    axis.set_ylabel("accuracy (fraction correct)")
    figure.legend(loc="outside lower center", ncols=2, fontsize=9, frameon=False)
    first = rows[0]
    axis.set_title(
        f"CoAtNet layouts and positions on the texture-layout task: "
        f"{first['train_images']} training images, {first['epochs']} epoch(s)"
    )
    return figure


def _label(row: dict[str, Any], named: bool) -> str:
    """A row's tick label: its layout, its position encoding (``named``: rows differ in
    it), its size."""
    positions = row.get("positions", "table")
    encoding = f"\n{positions.replace('_', ' ')}" if named else ""
    return f"{row['layout']}{encoding}\n{row['params']:,} params"
