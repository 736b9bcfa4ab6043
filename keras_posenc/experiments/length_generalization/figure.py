"""The study's figure: accuracy against test length, one panel per encoding."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments._figures import new_figure
from keras_posenc.experiments.length_generalization.models import MODEL_SETTINGS
from keras_posenc.experiments.length_generalization.tasks import TASK_SETTINGS

# One colour and marker per task (the relative task first), from matplotlib's default cycle.
_TASK_STYLES = {
    "copy_back": {"color": "tab:blue", "marker": "o"},
    "copy_position": {"color": "tab:orange", "marker": "s"},
    "copy_recent": {"color": "tab:green", "marker": "^"},
}
_COLUMNS = 5
# The tasks in the legend, shorter than `TASK_DESCRIPTIONS`.
_LEGEND = {
    "copy_back": "the token {shift} back",
    "copy_position": "the token at {position}",
    "copy_recent": "the latest marked token",
}


def plot(rows: Sequence[dict[str, Any]], chance: float | None = None) -> Any:
    """Accuracy against test length, one panel per encoding, as a matplotlib figure.

    Each panel has one line per task: the mean over seeds, with an error bar
    from the lowest to the highest seed; "n/a" marks a length the model
    cannot run. The x axis is the test length in tokens on a log scale; a
    dashed line marks chance. The legend sits above the panels.

    Args:
        rows: the rows of `length_generalization_experiment` (or `read_results`).
        chance: accuracy of guessing, drawn as a dashed line; ``None`` for none.

    Returns:
        A ``matplotlib.figure.Figure`` (Agg canvas) of 1200 px width at
        `keras_posenc.experiments._figures.DPI`; save it with its ``savefig``.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).

    Examples:

        >>> rows = [
        ...     {"task": "copy_back", "encoding": "rope", "test_length": n, "accuracy": a,
        ...      "accuracy_min": a - 0.1, "accuracy_max": a, "seeds": 3}
        ...     for n, a in ((64, 1.0), (128, 0.8))]
        >>> figure = plot(rows, chance=0.1)
        >>> [int(v) for v in figure.get_size_inches() * figure.dpi]
        [1200, 500]
    """
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    lengths = sorted({r["test_length"] for r in rows})
    columns = min(_COLUMNS, len(encodings))
    grid_rows = math.ceil(len(encodings) / columns)
    # At least 5 inches: the y label spans the grid's height, even of one row of panels.
    # The legend: a line per task, chance, and copy_recent's floor; three to a row.
    legend_entries = len(tasks) + (chance is not None) + ("copy_recent" in tasks)
    legend_columns = min(3, legend_entries)
    legend_rows = math.ceil(legend_entries / legend_columns)
    height = max(5.0, 1.8 + 2.6 * grid_rows) + 0.3 * (legend_rows - 1)
    figure = new_figure("length_generalization.plot", height=height)
    # The legend gets a row of its own above the panels: constrained layout places a
    # figure legend "outside" without regard to the suptitle or supxlabel (they overlap).
    grid = figure.add_gridspec(
        grid_rows + 1, columns, height_ratios=[0.12 * legend_rows] + [1] * grid_rows
    )
    legend_axis = figure.add_subplot(grid[0, :])
    legend_axis.set_axis_off()
    axes = grid[1:, :].subgridspec(grid_rows, columns).subplots(sharex=True, sharey=True)
    axes = np.asarray(axes).ravel()
    handles = {}
    for axis, encoding in zip(axes, encodings):
        axis.set_title(encoding, fontsize=11)
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, [str(n) for n in lengths])
        axis.minorticks_off()
        axis.set_ylim(-0.02, 1.05)
        axis.grid(True, color="0.9")
        if chance is not None:
            handles["chance"] = axis.axhline(chance, color="0.45", linestyle="--", linewidth=1)
        if "copy_recent" in tasks:  # its answer is one of the marked tokens: a higher floor
            handles["marked"] = axis.axhline(
                1 / TASK_SETTINGS["marked"], color="tab:green", linestyle=":", linewidth=1
            )
        for index, task in enumerate(tasks):
            series = [r for r in rows if r["encoding"] == encoding and r["task"] == task]
            style = _TASK_STYLES.get(task, {"marker": "o"})
            measured = [r for r in series if r["accuracy"] is not None]
            if measured:
                x = np.array([r["test_length"] for r in measured], float)
                y = np.array([r["accuracy"] for r in measured])
                low = y - np.array([r["accuracy_min"] for r in measured])
                high = np.array([r["accuracy_max"] for r in measured]) - y
                # The tasks' bars side by side, not on top of each other (a log axis: a factor).
                dodge = 2 ** (0.04 * (2 * index - (len(tasks) - 1)))
                handles[task] = axis.errorbar(
                    x * dodge,
                    y,
                    yerr=np.maximum([low, high], 0),
                    capsize=2,
                    linewidth=1.5,
                    markersize=5,
                    **style,
                )
            for row in series:
                if row["accuracy"] is None:
                    axis.text(
                        row["test_length"],
                        0.55 - 0.12 * index,
                        "n/a",
                        ha="center",
                        va="center",
                        fontsize=9,
                        color=style.get("color", "black"),
                    )
    for index in range(len(encodings), len(axes)):
        axes[index].set_axis_off()
        if index >= columns:  # the panel above an empty cell shows the test lengths
            axes[index - columns].xaxis.set_tick_params(labelbottom=True)
    labels = {task: f"{task} ({_LEGEND[task].format(**TASK_SETTINGS)})" for task in tasks}
    labels["chance"] = f"chance ({chance:.2f})" if chance is not None else ""
    labels["marked"] = f"copy_recent's chance ({1 / TASK_SETTINGS['marked']:.2f})"
    entries = [key for key in labels if key in handles]
    seeds = max(r["seeds"] for r in rows)
    legend_axis.legend(
        [handles[key] for key in entries],
        [labels[key] for key in entries],
        loc="center",
        ncols=legend_columns,
        fontsize=10,
        frameon=False,
    )
    figure.suptitle(
        "Length generalisation: accuracy beyond the training length, per position encoding\n"
        f"(line: mean of {seeds} seed(s); bar: lowest to highest seed)"
    )
    train_length = MODEL_SETTINGS["train_length"]
    figure.supxlabel(f"test length L (tokens, log scale; trained at L = {train_length})")
    figure.supylabel("accuracy on positions L/2 .. L-1 (fraction correct)")
    return figure
