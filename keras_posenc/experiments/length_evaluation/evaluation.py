"""`LengthEvaluation`: the numbers of `evaluate_lengths`, one model's or several, as a markdown
table, a CSV and a figure."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from keras_posenc.experiments._figures import write_csv

# The CSV's columns: one row per model and context length...
LENGTH_COLUMNS = (
    "model",
    "data",
    "length",
    "windows",
    "tokens",
    "loss",
    "accuracy",
    "loss_last_half",
    "accuracy_last_half",
    "perplexity",
    "note",
)
# ... and, with ``positions=True``, one per model, length and bucket of positions.
POSITION_COLUMNS = (
    "model",
    "data",
    "length",
    "bucket",
    "position_start",
    "position_end",
    "tokens",
    "loss",
    "accuracy",
)


@dataclasses.dataclass
class LengthEvaluation:
    """Next-token loss and accuracy against context length and position, of one model or
    several (`compare`): what `evaluate_lengths` returns.

    Attributes:
        rows: one dict per model and context length, with the keys of `LENGTH_COLUMNS`:
            ``length`` (``L``), ``windows`` and ``tokens`` (the targets scored), ``loss``
            (mean next-token cross-entropy in nats), ``accuracy`` (top-1), the same over
            the last half of the positions (``loss_last_half``, ``accuracy_last_half``:
            positions ``L // 2 .. L - 1``), ``perplexity`` (``exp(loss)``) and ``note`` (why
            a length was not run; its numbers are None).
        positions: one dict per model, length and bucket of positions, with the keys of
            `POSITION_COLUMNS` (``bucket`` is ``"start-end"``, both included).

    Examples:

        >>> rows = [{"model": "m", "data": "text", "length": n, "windows": 4, "tokens": 4 * n,
        ...          "loss": loss, "accuracy": 0.5, "loss_last_half": loss,
        ...          "accuracy_last_half": 0.5, "perplexity": 2.0, "note": ""}
        ...         for n, loss in ((8, 0.7), (16, 0.9))]
        >>> evaluation = LengthEvaluation(rows, positions=[])
        >>> print(evaluation.markdown().splitlines()[4])
        | 8 | 4 | 32 | 0.700 | 2.00 | 0.500 | 0.700 | 0.500 |  |
        >>> both = LengthEvaluation.compare({"a": evaluation, "b": evaluation})
        >>> both.models, len(both.rows)
        (['a', 'b'], 4)
    """

    rows: list[dict[str, Any]]
    positions: list[dict[str, Any]]

    @property
    def models(self) -> list[str]:
        """The models' names, in the rows' order."""
        return list(dict.fromkeys(row["model"] for row in self.rows))

    @classmethod
    def compare(cls, evaluations: Mapping[str, LengthEvaluation]) -> LengthEvaluation:
        """Several evaluations as one: each one's rows under its key as ``model`` (one
        table, one CSV with a ``model`` column, one figure with a line per model).

        Raises:
            TypeError: if ``evaluations`` is not a mapping of names to `LengthEvaluation`.
        """
        if not isinstance(evaluations, Mapping) or not all(
            isinstance(e, LengthEvaluation) for e in evaluations.values()
        ):
            raise TypeError(
                "LengthEvaluation.compare: `evaluations` must map names to LengthEvaluation "
                f"objects (what evaluate_lengths returns), got {type(evaluations).__name__}."
            )
        rows, positions = [], []
        for name, evaluation in evaluations.items():
            rows += [{**row, "model": str(name)} for row in evaluation.rows]
            positions += [{**row, "model": str(name)} for row in evaluation.positions]
        return cls(rows, positions)

    def markdown(self, positions: bool = False) -> str:
        """A markdown table: a row per model and length, or with ``positions=True`` a row
        per bucket of positions and a column per length (``loss / accuracy``).

        A ``model`` column appears when several models are compared.
        """
        several = len(self.models) > 1
        data = ", ".join(dict.fromkeys(row["data"] for row in self.rows))
        if positions:
            head, body = _position_table(self.positions, several)
            caption = f"Next-token loss (nats) / top-1 accuracy by position; data: {data}."
        else:
            head, body = _length_table(self.rows, several)
            caption = f"Next-token loss (nats) and top-1 accuracy by context length; data: {data}."
        return caption + "\n\n" + _render(head, body)

    def to_csv(self, path: str | os.PathLike, positions: bool = False) -> str:
        """Writes the rows (with ``positions=True``: the buckets of positions) as a CSV at
        ``path`` (written whole or not at all) and returns the path."""
        if positions:
            return write_csv(path, self.positions, POSITION_COLUMNS)
        return write_csv(path, self.rows, LENGTH_COLUMNS)

    def figure(self) -> Any:
        """Loss against position (a line per length, or per model at its longest length)
        and loss and accuracy against length, as a matplotlib figure (Agg canvas).

        Raises:
            ImportError: without matplotlib (the ``experiments`` extra).
        """
        from keras_posenc.experiments.length_evaluation.figure import plot

        return plot(self.rows, self.positions)


def _number(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _length_table(rows: list[dict], several: bool) -> tuple[list[str], list[list[str]]]:
    head = ["L", "windows", "tokens", "loss", "perplexity", "accuracy"]
    head += ["loss, last half", "accuracy, last half", "note"]
    body = [
        [
            str(row["length"]),
            str(row["windows"]),
            str(row["tokens"]),
            _number(row["loss"]),
            _number(row["perplexity"], 2),
            _number(row["accuracy"]),
            _number(row["loss_last_half"]),
            _number(row["accuracy_last_half"]),
            row["note"],
        ]
        for row in rows
    ]
    if several:
        return ["model", *head], [[row["model"], *line] for row, line in zip(rows, body)]
    return head, body


def _position_table(positions: list[dict], several: bool) -> tuple[list[str], list[list[str]]]:
    lengths = sorted({row["length"] for row in positions})
    cells = {(r["model"], r["bucket"], r["length"]): r for r in positions}
    buckets = sorted({(r["position_start"], r["bucket"]) for r in positions})
    head = [*(["model"] if several else []), "positions", *(f"L = {n}" for n in lengths)]
    body = []
    for model in dict.fromkeys(row["model"] for row in positions):
        for _, bucket in buckets:
            found = [cells.get((model, bucket, n)) for n in lengths]
            if not any(found):
                continue
            line = [
                "" if r is None else f"{_number(r['loss'])} / {_number(r['accuracy'])}"
                for r in found
            ]
            body.append([*([model] if several else []), bucket, *line])
    return head, body


def _render(head: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"
