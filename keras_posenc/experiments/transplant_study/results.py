"""The study's tables, CSV and figure."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from keras_posenc.experiments._figures import (
    new_figure,
    read_csv_rows,
    require_matplotlib,
    save_figure,
    write_csv,
)
from keras_posenc.experiments.length_evaluation import LENGTH_COLUMNS
from keras_posenc.experiments.transplant_study.transplants import DESCRIPTIONS, VOCABULARY, mean_by

CSV_NAME = "transplant.csv"
MARKDOWN_NAME = "transplant.md"
FIGURE_NAME = "transplant.png"
COLUMNS = ("task", "seed", "transplant", "factor", "tuned", "new_weights", *LENGTH_COLUMNS)


def _spread(rows: Sequence[dict], key: str) -> dict[tuple, tuple[float, float]]:
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        if row[key] is not None:
            group = (row["task"], row["transplant"], row["length"])
            groups.setdefault(group, []).append(float(row[key]))
    return {group: (min(values), max(values)) for group, values in groups.items()}


def markdown_table(rows: Sequence[dict[str, Any]], key: str = "accuracy_last_half") -> str:
    """One table per task: a row per transplant, a column per test length, the mean of
    ``key`` over seeds (and its range where there are several).

    Examples:

        >>> rows = [{"task": "copy_recent", "seed": 0, "transplant": "rope", "length": n,
        ...          "factor": n / 32, "tuned": False, "new_weights": 0,
        ...          "accuracy_last_half": a} for n, a in ((32, 1.0), (64, 0.5))]
        >>> print(markdown_table(rows).splitlines()[4])
        | rope | 1.000 | 0.500 | 0 | no | RoPE as trained |
    """
    means, spread = mean_by(rows, key), _spread(rows, key)
    several = len({row["seed"] for row in rows}) > 1
    lines = []
    for task in dict.fromkeys(row["task"] for row in rows):
        lengths = sorted({row["length"] for row in rows if row["task"] == task})
        guess = (
            f" (chance {1 / VOCABULARY:.2f})"
            if key.startswith("accuracy")
            else f" (a uniform guess: ln {VOCABULARY} = {math.log(VOCABULARY):.2f} nats)"
        )
        lines += [
            f"Task {task}: {key.replace('_', ' ')} by test length"
            f"{guess if task != 'text' else ''}"
            f"{'; mean and range over seeds' if several else ''}.",
            "",
            "| transplant | "
            + " | ".join(f"L = {n}" for n in lengths)
            + " | new weights | fine-tuned | what |",
            "|---|" + "---|" * (len(lengths) + 3),
        ]
        names = dict.fromkeys(row["transplant"] for row in rows if row["task"] == task)
        for name in names:
            first = next(r for r in rows if r["task"] == task and r["transplant"] == name)
            cells = []
            for n in lengths:
                if (task, name, n) not in means:
                    cells.append("n/a")
                    continue
                low, high = spread[(task, name, n)]
                value = f"{means[(task, name, n)]:.3f}"
                cells.append(f"{value} ({low:.2f}-{high:.2f})" if several else value)
            tuned = "yes" if first["tuned"] else "no"
            lines.append(
                f"| {name} | " + " | ".join(cells) + f" | {first['new_weights']} | {tuned} | "
                f"{DESCRIPTIONS.get(name, '')} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(rows: Sequence[dict[str, Any]]) -> Any:
    """Accuracy over the last half of positions against test length: a panel per task, a
    line per transplant (dashed: fine-tuned), the mean over seeds."""
    means = mean_by(rows, "accuracy_last_half")
    tasks = list(dict.fromkeys(row["task"] for row in rows))
    figure = new_figure("transplant_study.plot", height=4.5)
    axes = figure.subplots(1, len(tasks), squeeze=False)[0]
    # A colour of its own for each of up to 20 transplants (the default cycle has 10).
    colors = require_matplotlib("transplant_study.plot").colormaps["tab20"].colors
    for axis, task in zip(axes, tasks, strict=True):
        names = dict.fromkeys(row["transplant"] for row in rows if row["task"] == task)
        axis.set_prop_cycle(color=colors)
        for name in names:
            points = sorted((n, v) for (t, m, n), v in means.items() if t == task and m == name)
            tuned = next(r["tuned"] for r in rows if r["transplant"] == name)
            axis.plot(
                [n for n, _ in points],
                [v for _, v in points],
                marker="o",
                linestyle="--" if tuned else "-",
                label=name,
            )
        if task != "text":  # the tasks' chance level
            axis.axhline(1 / VOCABULARY, color="grey", linewidth=0.8, linestyle=":")
        axis.set_xscale("log", base=2)
        axis.set_xlabel("test length")
        axis.set_ylabel("accuracy, last half of positions")
        axis.set_ylim(0, 1.02)
        axis.set_title(task)
    handles, labels = axes[-1].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize="small", loc="outside right upper")
    return figure


def write_results(rows: Sequence[dict[str, Any]], out: str | os.PathLike) -> list[str]:
    """Writes ``transplant.csv``, ``transplant.md`` (accuracy and loss tables) and
    ``transplant.png`` into ``out``; returns their paths.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra), before anything is written.
    """
    require_matplotlib("transplant_study.write_results")
    os.makedirs(out, exist_ok=True)
    paths = [write_csv(os.path.join(out, CSV_NAME), rows, COLUMNS)]
    markdown = os.path.join(out, MARKDOWN_NAME)
    with open(markdown + ".part", "w") as handle:
        handle.write(markdown_table(rows) + "\n" + markdown_table(rows, "loss_last_half"))
    os.replace(markdown + ".part", markdown)
    paths += [markdown, save_figure(plot(rows), os.path.join(out, FIGURE_NAME))]
    return paths


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``transplant.csv`` (a file, or the folder holding it), with numbers as
    numbers (empty cells: None), as `transplant_study` returned them.

    Raises:
        ValueError: for a CSV without the study's columns.
    """
    kinds = {"seed": int, "length": int, "windows": int, "tokens": int, "new_weights": int}
    rows = []
    for text in read_csv_rows(path, CSV_NAME, COLUMNS):
        row: dict[str, Any] = dict(text)
        for key, value in text.items():
            if key in ("task", "transplant", "model", "data", "note"):
                continue
            if key == "tuned":
                row[key] = value == "True"
            elif value == "":
                row[key] = None
            else:
                row[key] = kinds.get(key, float)(value)
        rows.append(row)
    return rows


def redraw(path: str | os.PathLike, out: str | os.PathLike | None = None) -> list[str]:
    """Writes the tables and the figure again from a ``transplant.csv`` (into ``out``,
    default the CSV's folder); returns the paths."""
    rows = read_results(path)
    folder = out or (path if os.path.isdir(path) else os.path.dirname(os.fspath(path)) or ".")
    return write_results(rows, folder)
