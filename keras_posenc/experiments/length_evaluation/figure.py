"""The length evaluation's figure: loss against position, and loss and accuracy against
context length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keras_posenc.experiments._figures import new_figure


def plot(rows: Sequence[dict[str, Any]], positions: Sequence[dict[str, Any]]) -> Any:
    """Three panels: loss against position (log scale), and loss and accuracy against L.

    One model: a line per context length in the first panel. Several (`LengthEvaluation.
    compare`): a line per model, at the longest length that model ran, and a colour per
    model in the others. The second and third panels draw all positions (solid) and the
    last half (dashed); "n/a" marks a length a model did not run.

    Returns:
        A ``matplotlib.figure.Figure`` (Agg canvas) 1200 px wide.

    Raises:
        ImportError: without matplotlib (the ``experiments`` extra).

    Examples:

        >>> rows = [{"model": "m", "length": n, "loss": 1.0, "accuracy": 0.5,
        ...          "loss_last_half": 1.1, "accuracy_last_half": 0.4} for n in (8, 16)]
        >>> positions = [{"model": "m", "length": 16, "position_start": s,
        ...               "position_end": e, "bucket": f"{s}-{e}", "loss": 1.0}
        ...              for s, e in ((0, 7), (8, 15))]
        >>> figure = plot(rows, positions)
        >>> [int(v) for v in figure.get_size_inches() * figure.dpi], len(figure.axes)
        ([1200, 450], 3)
    """
    figure = new_figure("LengthEvaluation.figure", height=4.5)  # checks for matplotlib first
    import matplotlib

    models = list(dict.fromkeys(row["model"] for row in rows))
    by_position, by_loss, by_accuracy = figure.subplots(1, 3)
    if len(models) == 1:
        lengths = sorted({p["length"] for p in positions})
        colours = matplotlib.colormaps["viridis"]
        series = [
            (f"L = {n}", colours(0.85 * i / max(1, len(lengths) - 1)), n, models[0])
            for i, n in enumerate(lengths)
        ]
    else:
        series = []
        for i, model in enumerate(models):
            ran = [p["length"] for p in positions if p["model"] == model]
            if ran:
                series.append((f"{model} (L = {max(ran)})", f"C{i % 10}", max(ran), model))
    ticks = {}
    for label, colour, length, model in series:
        points = sorted(
            (p for p in positions if p["model"] == model and p["length"] == length),
            key=lambda p: p["position_start"],
        )
        points = [p for p in points if p["loss"] is not None]
        # A bucket at its middle, (start + end + 1) / 2: the bucket of position 0 alone
        # (bins from 0) sits at 0.5, not at 0, which a log axis cannot show.
        x = [(p["position_start"] + p["position_end"] + 1) / 2 for p in points]
        by_position.plot(x, [p["loss"] for p in points], "o-", color=colour, label=label, ms=4)
        ticks.update(zip(x, (p["bucket"] for p in points)))
    by_position.set_xscale("log", base=2)
    by_position.set_xticks(sorted(ticks), [ticks[x] for x in sorted(ticks)], rotation=45)
    by_position.minorticks_off()
    by_position.set_xlabel("position t in the window (log scale)")
    by_position.set_ylabel("next-token loss (nats)")
    by_position.set_title("loss by position")
    by_position.grid(True, color="0.9")
    if series:
        by_position.legend(fontsize=8)
    for axis, key, title in (
        (by_loss, "loss", "next-token loss (nats)"),
        (by_accuracy, "accuracy", "top-1 accuracy"),
    ):
        _against_length(axis, rows, models, key)
        axis.set_title(f"{title} by context length")
        axis.set_ylabel(title)
    by_loss.legend(fontsize=8)
    figure.suptitle("Next-token loss and accuracy across context lengths")
    return figure


def _against_length(axis: Any, rows: Sequence[dict], models: list[str], key: str) -> None:
    lengths = sorted({row["length"] for row in rows})
    for i, model in enumerate(models):
        ran = [r for r in rows if r["model"] == model and r[key] is not None]
        colour = f"C{i % 10}"
        name = "" if len(models) == 1 else f"{model}, "
        x = [r["length"] for r in ran]
        axis.plot(x, [r[key] for r in ran], "o-", color=colour, label=f"{name}all positions")
        half = [r for r in ran if r[f"{key}_last_half"] is not None]
        axis.plot(
            [r["length"] for r in half],
            [r[f"{key}_last_half"] for r in half],
            "s--",
            color=colour,
            label=f"{name}last half",
            ms=4,
        )
        for row in rows:
            if row["model"] == model and row[key] is None:
                axis.text(
                    row["length"],
                    0.05 + 0.06 * i,
                    "n/a",
                    transform=axis.get_xaxis_transform(),
                    ha="center",
                    color=colour,
                    fontsize=9,
                )
    axis.set_xscale("log", base=2)
    axis.set_xticks(lengths, [str(n) for n in lengths])
    axis.minorticks_off()
    axis.set_xlabel("context length L (tokens, log scale)")
    axis.grid(True, color="0.9")
