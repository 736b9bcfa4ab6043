"""The study's files: the CSV of its rows, and the tables and figure written (again) from it."""

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
from keras_posenc.experiments.length_generalization.figure import plot
from keras_posenc.experiments.length_generalization.tables import claims_table, markdown_table

# The columns of the CSV, the keys of each row the study returns.
COLUMNS = (
    "task",
    "encoding",
    "test_length",
    "accuracy",
    "accuracy_std",
    "accuracy_min",
    "accuracy_max",
    "seeds",
    "params",
    "num_layers",
    "train_steps",
    "note",
)


CSV_NAME = "length_generalization.csv"
CLAIMS_NAME = "length_generalization_claims.md"
FIGURE_NAME = "length_generalization.png"
_INT_COLUMNS = ("test_length", "seeds", "params", "num_layers", "train_steps")
_FLOAT_COLUMNS = ("accuracy", "accuracy_std", "accuracy_min", "accuracy_max")


def write_results(
    rows: Sequence[dict[str, Any]], out: str | os.PathLike, vocabulary_size: int = 10
) -> list[str]:
    """Writes ``length_generalization.csv``, ``.md`` and ``.png`` into ``out``.

    The CSV is the data behind the figure: `redraw` draws the PNG again from it.

    Returns:
        The paths written.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra), before anything is written.
    """
    require_matplotlib("length_generalization.write_results")
    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, CSV_NAME)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: "" if row[key] is None else row[key] for key in COLUMNS})
    return [csv_path, *_write_tables_and_figure(rows, out, vocabulary_size)]


def _write_tables_and_figure(
    rows: Sequence[dict[str, Any]], out: str | os.PathLike, vocabulary_size: int
) -> list[str]:
    md_path = os.path.join(out, "length_generalization.md")
    with open(md_path, "w") as handle:
        handle.write(markdown_table(rows, vocabulary_size))
    claims_path = os.path.join(out, CLAIMS_NAME)
    with open(claims_path, "w") as handle:
        handle.write(claims_table(rows, vocabulary_size))
    png_path = save_figure(plot(rows, chance=1 / vocabulary_size), os.path.join(out, FIGURE_NAME))
    return [md_path, claims_path, png_path]


def render(
    folder: str | os.PathLike, out: str | os.PathLike | None = None, vocabulary_size: int = 10
) -> list[str]:
    """Writes the markdown tables, the claims table and the PNG again from the CSV in ``folder``.

    No training: everything `write_results` writes besides the CSV is made
    from the CSV's rows, so a change to how they are shown needs no new run.

    Args:
        folder: the folder holding ``length_generalization.csv``.
        out: the folder to write into; default ``folder``.
        vocabulary_size: the run's number of token types (chance; the CSV does
            not record it; default `MODEL_SETTINGS`'s).

    Returns:
        The paths written.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    rows, out = results_to_redraw("length_generalization.render", read_results, folder, out)
    return _write_tables_and_figure(rows, out, vocabulary_size)


def read_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``length_generalization.csv`` (or of the folder holding one).

    Numbers come back as ints and floats, an empty cell (a length the model
    cannot run) as ``None``: the rows `length_generalization_experiment`
    returned, ready for `plot` or `markdown_table`.

    Raises:
        ValueError: when the CSV lacks a column of `COLUMNS`.

    Examples:

        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with open(os.path.join(folder, "length_generalization.csv"), "w") as f:
        ...     _ = f.write(",".join(COLUMNS) + "\\n"
        ...                 "copy_back,rope,128,0.5,0.1,0.4,0.6,3,17806,2,1000,\\n")
        >>> row = read_results(folder)[0]
        >>> row["encoding"], row["test_length"], row["accuracy"]
        ('rope', 128, 0.5)
    """
    rows = []
    for raw in read_csv_rows(path, CSV_NAME, COLUMNS):
        row: dict[str, Any] = {key: raw[key] for key in COLUMNS}
        for key in _INT_COLUMNS:
            row[key] = int(raw[key])
        for key in _FLOAT_COLUMNS:
            row[key] = float(raw[key]) if raw[key] != "" else None
        rows.append(row)
    return rows


def redraw(
    folder: str | os.PathLike, out: str | os.PathLike | None = None, vocabulary_size: int = 10
) -> str:
    """Draws ``length_generalization.png`` again from the ``length_generalization.csv`` beside it.

    No training: the CSV that `write_results` wrote holds everything the figure shows.

    Args:
        folder: the folder holding the CSV.
        out: the folder for the PNG; default ``folder``.
        vocabulary_size: the run's number of token types (chance is its inverse;
            the CSV does not record it; default `MODEL_SETTINGS`'s).

    Returns:
        The path of the PNG.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    rows, out = results_to_redraw("length_generalization.redraw", read_results, folder, out)
    return save_figure(plot(rows, chance=1 / vocabulary_size), os.path.join(out, FIGURE_NAME))
