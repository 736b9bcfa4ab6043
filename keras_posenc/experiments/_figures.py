"""What every experiment's figure shares: matplotlib, imported lazily, and one way to save.

matplotlib is an optional dependency (the ``experiments`` extra): the studies
run and return their numbers without it, and only drawing a figure needs it.
Figures are plain ``matplotlib.figure.Figure`` objects drawn on the Agg canvas,
never through ``pyplot``, so drawing one neither needs a display nor changes the
backend of a user's session (a notebook keeps its own).

Every figure is at least `MIN_WIDTH_PX` pixels wide when saved (its width in
inches times `DPI`), so that it stays readable at the documentation's content
width; the docs' browser check (.ci/check_site.py) and tests/experiments/test_figures.py
hold the committed figures to the same width.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Sequence
from typing import Any

# Pixels per inch of every saved figure; a figure of FIGURE_WIDTH inches is
# FIGURE_WIDTH * DPI pixels wide.
DPI = 100
FIGURE_WIDTH = 12.0
MIN_WIDTH_PX = 800
EXTRA = "experiments"
INSTALL = f'pip install "keras-posenc[{EXTRA}]"'


def require_matplotlib(caller: str) -> Any:
    """Returns the ``matplotlib`` module, or raises an ImportError naming the extra.

    Args:
        caller: the function that needs it, named in the message.

    Raises:
        ImportError: when matplotlib is not installed.

    Examples:

        >>> require_matplotlib("plot").__name__
        'matplotlib'
    """
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            f"{caller}: drawing the experiments' figures needs matplotlib, an optional "
            f"dependency of keras-posenc; install it with `{INSTALL}`."
        ) from error
    return matplotlib


def new_figure(caller: str, height: float, width: float = FIGURE_WIDTH) -> Any:
    """A ``matplotlib.figure.Figure`` of ``width`` x ``height`` inches on an Agg canvas.

    Constrained layout keeps titles, tick labels and legends from overlapping.

    Raises:
        ImportError: when matplotlib is not installed (naming ``caller`` and the extra).
        ValueError: when ``width`` would save narrower than `MIN_WIDTH_PX`.
    """
    require_matplotlib(caller)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if width * DPI < MIN_WIDTH_PX:
        raise ValueError(
            f"{caller}: a figure must be at least {MIN_WIDTH_PX} px wide; got width={width} "
            f"inches at {DPI} dpi ({width * DPI:.0f} px)."
        )
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Any, path: str | os.PathLike) -> str:
    """Saves ``figure`` as a PNG at `DPI` and returns the path.

    The size is the figure's own (no ``bbox_inches="tight"``, which would crop
    it below its width). The metadata leave out matplotlib's version string, so
    redrawing unchanged data with another patch release of matplotlib does not
    change a committed file for that alone.
    """
    figure.savefig(path, dpi=DPI, format="png", metadata={"Software": None})
    return os.fspath(path)


def write_csv(
    path: str | os.PathLike, rows: Sequence[dict[str, Any]], columns: Sequence[str]
) -> str:
    """Writes ``rows`` (their ``columns``; None as an empty cell) as a CSV at ``path`` and
    returns the path.

    Atomic: the rows go to ``path + ".part"``, which then replaces
    ``path`` (``os.replace``, as keras_posenc/hub/archives.py keeps a download), so a
    reader never sees half a file and a failed write leaves the old one.

    Examples:

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "rows.csv")
        >>> _ = write_csv(path, [{"a": 1, "b": None}], ("a", "b"))
        >>> open(path).read().splitlines()
        ['a,b', '1,']
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = f"{os.fspath(path)}.part"
    try:
        with open(partial, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(columns))
            writer.writeheader()
            for row in rows:
                writer.writerow({key: "" if row[key] is None else row[key] for key in columns})
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return os.fspath(path)


def read_csv_rows(
    path: str | os.PathLike, csv_name: str, columns: tuple[str, ...]
) -> list[dict[str, str]]:
    """The rows (as text) of the results CSV at ``path``, or of ``csv_name`` in that folder.

    The one reader behind each experiment's ``read_results``, which converts the cells.

    Raises:
        ValueError: when the CSV lacks one of ``columns``.
    """
    if os.path.isdir(path):
        path = os.path.join(path, csv_name)
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(
                f"read_results: {os.fspath(path)!r} lacks the column(s) {missing}; expected "
                f"the columns {list(columns)} that write_results writes."
            )
        return list(reader)


def results_to_redraw(
    caller: str,
    read_results: Callable[[Any], list[dict[str, Any]]],
    folder: str | os.PathLike,
    out: str | os.PathLike | None,
) -> tuple[list[dict[str, Any]], str | os.PathLike]:
    """What an experiment's ``redraw`` starts from: its CSV's rows and the output folder.

    Checks for matplotlib first (before anything is read), reads the rows with
    the experiment's ``read_results``, and makes ``out`` (default ``folder``).

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).
    """
    require_matplotlib(caller)
    rows = read_results(folder)
    out = folder if out is None else out
    os.makedirs(out, exist_ok=True)
    return rows, out
