"""The outputs: the markdown table, the CSV (written, read, merged) and the figure's files."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import Any

from keras_posenc.experiments._figures import (
    read_csv_rows,
    require_matplotlib,
    results_to_redraw,
    save_figure,
)
from keras_posenc.experiments.coatnet_layouts.figure import plot
from keras_posenc.experiments.coatnet_layouts.settings import CLASSES, COLUMNS


def _pair(row: dict[str, Any], key: str) -> str:
    return f"{row[key]:.3f} ± {row[key + '_std']:.3f}"


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The results as a markdown table: one row per layout and position encoding of its
    Transformer stages (`POSITIONS`), mean ± std over seeds."""
    first = rows[0]
    lines = [
        f"Accuracy, mean ± std over {first['seeds']} seed(s) (lowest .. highest test seed); "
        f"{first['train_images']} training images, {first['epochs']} epoch(s); chance "
        f"{1 / len(CLASSES):.2f}, layout without texture at most 0.50",
        "",
        "| layout | positions | params | test accuracy | lowest .. highest | train accuracy "
        "| train - test |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        gap = row["train_accuracy"] - row["test_accuracy"]
        lines.append(
            f"| {row['layout']} | {row['positions']} | {row['params']:,} | "
            f"{_pair(row, 'test_accuracy')} | "
            f"{row['test_accuracy_min']:.3f} .. {row['test_accuracy_max']:.3f} | "
            f"{_pair(row, 'train_accuracy')} | {gap:+.3f} |"
        )
    return "\n".join(lines) + "\n"


def write_results(rows: Sequence[dict[str, Any]], out: str | os.PathLike) -> list[str]:
    """Writes ``coatnet_layouts.csv``, ``.md`` and ``.png`` into ``out``.

    The CSV is the data behind the figure: `redraw` draws the PNG again from it.

    Returns:
        The paths written.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra), before anything is written.
    """
    require_matplotlib("coatnet_layouts.write_results")
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, CSV_NAME)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: row[key] for key in COLUMNS})
    md_path = os.path.join(out, "coatnet_layouts.md")
    with open(md_path, "w") as handle:
        handle.write(markdown_table(rows))
    png_path = save_figure(plot(rows), os.path.join(out, FIGURE_NAME))
    return [csv_path, md_path, png_path]


CSV_NAME = "coatnet_layouts.csv"
FIGURE_NAME = "coatnet_layouts.png"
_INT_COLUMNS = ("params", "seeds", "train_images", "epochs")


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``coatnet_layouts.csv`` (or of the folder holding one).

    Numbers come back as ints and floats: the rows `layout_experiment`
    returned, ready for `plot` or `markdown_table`.

    Raises:
        ValueError: when the CSV lacks a column of `COLUMNS`.

    Examples:

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "coatnet_layouts.csv"), "w") as f:
        ...     _ = f.write(",".join(COLUMNS) + "\\n"
        ...                 "C-C-T-T,table,169840,0.8,0.04,0.74,0.84,0.99,0.003,3,2048,8,200.0\\n")
        >>> row = read_results(folder)[0]
        >>> row["layout"], row["positions"], row["params"], row["test_accuracy"]
        ('C-C-T-T', 'table', 169840, 0.8)
    """
    rows = []
    for raw in read_csv_rows(path, CSV_NAME, COLUMNS):
        row: dict[str, Any] = {"layout": raw["layout"], "positions": raw["positions"]}
        for key in COLUMNS[2:]:
            row[key] = int(raw[key]) if key in _INT_COLUMNS else float(raw[key])
        rows.append(row)
    return rows


def merge_results(path: str | os.PathLike, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of the ``coatnet_layouts.csv`` at ``path`` (if there is one) with ``rows``:
    a row of the same layout and positions replaced in place, new ones after the others.

    Examples:

        >>> import tempfile
        >>> merge_results(tempfile.mkdtemp(), [{"layout": "C-C-T-T", "positions": "swin"}])
        [{'layout': 'C-C-T-T', 'positions': 'swin'}]
    """
    if os.path.isdir(path):
        path = os.path.join(path, CSV_NAME)
    merged = read_results(path) if os.path.exists(path) else []
    index = {(row["layout"], row["positions"]): n for n, row in enumerate(merged)}
    for row in rows:
        key = (row["layout"], row["positions"])
        if key in index:
            merged[index[key]] = dict(row)
        else:
            index[key] = len(merged)
            merged.append(dict(row))
    return merged


def redraw(folder: str | os.PathLike, out: str | os.PathLike | None = None) -> str:
    """Draws ``coatnet_layouts.png`` again from the ``coatnet_layouts.csv`` beside it.

    No training: the CSV that `write_results` wrote holds everything the figure shows.

    Args:
        folder: the folder holding the CSV.
        out: the folder for the PNG; default ``folder``.

    Returns:
        The path of the PNG.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    rows, out = results_to_redraw("coatnet_layouts.redraw", read_results, folder, out)
    return save_figure(plot(rows), os.path.join(out, FIGURE_NAME))
