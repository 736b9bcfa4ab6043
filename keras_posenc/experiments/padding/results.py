"""Writing the padding study's results: the rows as CSV and markdown, and the figures."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments._figures import require_matplotlib, save_figure
from keras_posenc.experiments.padding.figures import (
    _figure_title,
    _map_size,
    _write_listing,
    plot_maps,
    write_figure_data,
)
from keras_posenc.experiments.padding.settings import COLUMNS
from keras_posenc.experiments.padding.tables import markdown_table, summary_markdown
from keras_posenc.probe.patterns import PATTERN_NAMES


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
