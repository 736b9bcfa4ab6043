"""The padding study's rows as markdown: one long table, and every table in the paper's layout."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows as one long markdown table (constant predictions marked with *)."""
    lines = [
        "| padding | input | target | SPC | SPC std | MAE | seeds | network | weights | readout |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        mark = "*" if row["constant"] else ""
        lines.append(
            f"| {row['padding']} | {row['input']} | {row['target']} | {row['spc']:.3f}{mark} | "
            f"{row['spc_std']:.3f} | {row['mae']:.3f} | {row['seeds']} | "
            f"{row.get('network', 'probe')} | {row.get('weights', 'random')} | "
            f"{row.get('readout', 'least_squares')} |"
        )
    lines.append("")
    lines.append("\\* a prediction was constant: SPC is undefined and counted as 0.")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    """The paper's style: ``.742``, ``-.011``."""
    text = f"{value:.3f}"
    return text.replace("0.", ".", 1) if abs(value) < 1 else text


def _cell(row: dict[str, Any]) -> str:
    spread = f"±{_number(row['spc_std'])}" if row["seeds"] > 1 else ""
    mark = "*" if row["constant"] else ""
    return f"{_number(row['spc'])}{spread}{mark} / {_number(row['mae'])}"


def _pivot(rows: Sequence[dict[str, Any]], keys: Sequence[str], headers: Sequence[str]) -> str:
    """Targets as columns, SPC / MAE cells; one line per distinct value of ``keys``."""
    targets = list(dict.fromkeys(row["target"] for row in rows))
    lines = [
        "| " + " | ".join([*headers, *targets]) + " |",
        "|" + "---|" * (len(headers) + len(targets)),
    ]
    grouped: dict[tuple, dict[str, dict]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[k] for k in keys), {})[row["target"]] = row
    for key, cells in grouped.items():
        values = [str(v) for v in key]
        values += [_cell(cells[t]) if t in cells else "" for t in targets]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Every table of the study in the paper's layout: targets as columns, SPC / MAE cells.

    A cell reads ``SPC±std / MAE`` (the spread over seeds when there are
    several); ``*`` marks a constant prediction (SPC undefined, counted as 0).
    """
    parts = []
    padding_rows = [r for r in rows if r["table"] == "padding"]
    for kind in dict.fromkeys(r["input"] for r in padding_rows):
        selected = [r for r in padding_rows if r["input"] == kind]
        parts.append(f"### Padding, {kind} input\n")
        parts.append(
            _pivot(
                selected,
                ("network", "weights", "readout", "padding"),
                ("network", "weights", "readout", "padding"),
            )
        )
    trained = [r for r in padding_rows if r["task_accuracy"] is not None]
    if trained:
        parts.append("### Networks trained from scratch (grating orientation, 4 classes)\n")
        lines = ["| padding | held-out accuracy (chance .25) |", "|---|---|"]
        for padding in dict.fromkeys(r["padding"] for r in trained):
            accuracy = next(r["task_accuracy"] for r in trained if r["padding"] == padding)
            lines.append(f"| {padding} | {accuracy:.3f} |")
        parts.append("\n".join(lines) + "\n")
    alone = [r for r in rows if r["table"] == "readout_alone"]
    if alone:
        parts.append("### Readout alone (Table 4)\n")
        parts.append(
            _pivot(
                alone,
                ("input", "readout", "readout_padding"),
                ("input", "readout", "readout padding"),
            )
        )
    shape = [r for r in rows if r["table"] == "readout_shape"]
    if shape:
        parts.append("### Readout depth and kernel size (Table 2), noise input\n")
        parts.append(
            _pivot(
                shape,
                ("network", "readout_layers", "kernel_size"),
                ("network", "layers", "kernel"),
            )
        )
    stages = [r for r in rows if r["table"] == "stages"]
    if stages:
        parts.append("### Which stage's features (Table 3), noise input\n")
        parts.append(
            _pivot(stages, ("network", "readout", "taps"), ("network", "readout", "features"))
        )
    parts.append(
        "Cells: SPC±std over seeds / MAE. \\* a prediction was constant: SPC is undefined "
        "and counted as 0.\n"
    )
    return "\n".join(parts)
