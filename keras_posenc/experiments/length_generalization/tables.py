"""The study's results as markdown: the accuracy tables, the ranking and the published claims."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments._scaled_rope import SCALED_CLAIMS, SCALED_ROPE
from keras_posenc.experiments.length_generalization.models import MODEL_SETTINGS
from keras_posenc.experiments.length_generalization.tasks import (
    TASK_DESCRIPTIONS,
    TASK_SETTINGS,
    TASKS,
    chance,
)


def _cell(row: dict[str, Any]) -> str:
    """The mean over seeds and, with several seeds, the lowest and highest in brackets."""
    if row["accuracy"] is None:
        return "n/a"
    if row["seeds"] == 1:
        return f"{row['accuracy']:.2f}"
    return f"{row['accuracy']:.2f} ({row['accuracy_min']:.2f}-{row['accuracy_max']:.2f})"


def markdown_table(rows: Sequence[dict[str, Any]], vocabulary_size: int = 10) -> str:
    """One markdown table per task: encodings down, test lengths across, mean (range)."""
    lines = []
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for task in tasks:
        task_rows = [r for r in rows if r["task"] == task]
        lengths = list(dict.fromkeys(r["test_length"] for r in task_rows))
        encodings = list(dict.fromkeys(r["encoding"] for r in task_rows))
        cells = {(r["encoding"], r["test_length"]): r for r in task_rows}
        first = task_rows[0]
        description = TASK_DESCRIPTIONS[task].format(**TASK_SETTINGS)
        lines.append(
            f"**{task}** ({description}): accuracy on positions L/2..L-1, mean "
            f"(lowest-highest) over {first['seeds']} seed(s); {first['num_layers']} block(s), "
            f"{first['train_steps']} training steps at length {MODEL_SETTINGS['train_length']}; "
            f"chance {chance(task, vocabulary_size, TASK_SETTINGS['marked']):.2f}"
        )
        lines.append("")
        lines.append("| encoding | params | " + " | ".join(f"L={n}" for n in lengths) + " |")
        lines.append("|---|---:|" + "---:|" * len(lengths))
        for encoding in encodings:
            row_cells = [_cell(cells[encoding, n]) for n in lengths]
            params = cells[encoding, lengths[0]]["params"]
            lines.append(f"| {encoding} | {params:,} | " + " | ".join(row_cells) + " |")
        lines.append("")
    ranking = ranking_table(rows)
    if ranking:
        lines.extend([ranking, ""])
    scaled = [name for name in SCALED_ROPE if any(r["encoding"] == name for r in rows)]
    if scaled:
        lines.append(
            f"{', '.join(scaled)}: the trained rope models with "
            "the rotation scaled at test time (s = L / 64), not retrained."
        )
        lines.append("")
    if any(r["accuracy"] is None for r in rows):
        lines.append(
            "n/a: the model cannot run that length (learned absolute positions have no "
            "table row beyond the training length)."
        )
    return "\n".join(lines).rstrip("\n") + "\n"


# The tasks whose answer lies at a distance from the query (not at a fixed position):
# where a relative encoding is expected to carry over to longer sequences.
RANKED_TASKS = ("copy_back", "copy_recent")


def ranking_table(rows: Sequence[dict[str, Any]]) -> str:
    """The encodings ranked by their mean accuracy at the longest length on `RANKED_TASKS`.

    Only the ranked tasks present count, and only encodings measured on all
    of them at that length (not n/a); an empty string when none is.

    Examples:

        >>> rows = [{"task": "copy_back", "encoding": e, "test_length": 128, "accuracy": a,
        ...          "seeds": 3} for e, a in (("rope", 0.4), ("alibi", 0.9))]
        >>> print(ranking_table(rows))
        **Ranking** at L = 128: mean accuracy over copy_back, 3 seed(s)
        <BLANKLINE>
        | rank | encoding | mean | copy_back |
        |---:|---|---:|---:|
        | 1 | alibi | 0.90 | 0.90 |
        | 2 | rope | 0.40 | 0.40 |
    """
    tasks = [t for t in RANKED_TASKS if any(r["task"] == t for r in rows)]
    if not tasks:
        return ""
    longest = max(r["test_length"] for r in rows)
    cells = {
        (r["encoding"], r["task"]): r["accuracy"]
        for r in rows
        if r["test_length"] == longest and r["task"] in tasks
    }
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    scored = []
    for encoding in encodings:
        values = [cells.get((encoding, task)) for task in tasks]
        if all(v is not None for v in values):
            scored.append((-float(np.mean(values)), encodings.index(encoding), encoding, values))
    if not scored:
        return ""
    scored.sort()
    seeds = max(r["seeds"] for r in rows)
    lines = [
        f"**Ranking** at L = {longest}: mean accuracy over {', '.join(tasks)}, {seeds} seed(s)",
        "",
        "| rank | encoding | mean | " + " | ".join(tasks) + " |",
        "|---:|---|---:|" + "---:|" * len(tasks),
    ]
    for rank, (negative_mean, _, encoding, values) in enumerate(scored, start=1):
        shown = " | ".join(f"{v:.2f}" for v in values)
        lines.append(f"| {rank} | {encoding} | {-negative_mean:.2f} | {shown} |")
    return "\n".join(lines)


# What the papers (or, without a paper, their authors) claim about length, in short; the
# papers page (docs/papers.md) sets these next to the study's numbers.
CLAIMS = {
    "none": "NoPE (Kazemnejad et al. 2023): a causal model without positions generalises "
    "better than RoPE, ALiBi and T5's bias on small reasoning tasks",
    "learned_absolute": "cannot represent positions past its table",
    "sinusoidal": "Vaswani et al. 2017 hoped it extrapolates; known to degrade",
    "rope": "Su et al. 2021; degrades past the training length unless scaled",
    "xpos": "Sun et al. 2022: extrapolates better than RoPE",
    "alibi": "Press et al. 2022: trained at 1024, matches sinusoidal trained at 2048 (tested at "
    "2048)",
    "alibi_scheme": "the same paper (the library's ALiBi)",
    "kerple_log": "Chi et al. 2022: the best of its kernels; better than ALiBi at 4x-16x",
    "kerple_power": "Chi et al. 2022: extrapolates, behind the log kernel",
    "fire": "Li et al. 2023: beats NoPE, RoPE, ALiBi, KERPLE and T5's bias",
    "continuous_bias": "Liu et al. 2022 (Swin v2): transfers to larger windows than trained",
    "relative_bias_clip": "Shaw et al. 2018: defined for any length",
    "relative_bias_log": "Raffel et al. 2020: defined for any length",
    "relative_bias_piecewise": "Wu et al. 2021: defined for any length",
    "relative_bias_multiscale": "the seed lecture: defined for any length",
    "shaw_keys_values": "Shaw et al. 2018: defined for any length",
    "deberta": "He et al. 2021: log buckets, as T5's, defined for any length",
    "cope": "Golovneva et al. 2024: counts what matters; generalises to longer contexts "
    "than absolute and relative positions",
    **SCALED_CLAIMS,
}
# A model has learned a task when it is this far above chance at the training length
# (a fraction of the way from chance to 1), and holds a length while it keeps its
# accuracy at the training length within HOLD_MARGIN.
LEARNED_FRACTION = 0.5
HOLD_MARGIN = 0.05


def verdict(series: Sequence[dict[str, Any]], chance_level: float) -> str:
    """One encoding on one task, in words: up to which length it keeps its accuracy.

    ``"not learned"`` when the mean accuracy at the shortest length is less
    than `LEARNED_FRACTION` of the way from chance to 1; ``"cannot run
    past L"`` when a length is n/a; otherwise ``"holds to L"`` for the
    longest ``L`` up to which every mean stays within `HOLD_MARGIN` of the
    shortest length's, or ``"falls at L"`` for the first length below that.

    Args:
        series: the rows of one encoding and task, at increasing test lengths.
        chance_level: the task's chance accuracy (`chance`).

    Examples:

        >>> rows = [{"test_length": n, "accuracy": a} for n, a in ((64, 1.0), (128, 0.98),
        ...     (256, 0.7))]
        >>> verdict(rows, 0.1)
        'holds to 128'
        >>> verdict(rows[:1] + [{"test_length": 128, "accuracy": None}], 0.1)
        'cannot run past 64'
        >>> verdict([{"test_length": 64, "accuracy": 0.3}], 0.1)
        'not learned'
    """
    series = sorted(series, key=lambda row: row["test_length"])
    first = series[0]["accuracy"]
    if first is None or first < chance_level + LEARNED_FRACTION * (1 - chance_level):
        return "not learned"
    held = series[0]["test_length"]
    for row in series[1:]:
        if row["accuracy"] is None:
            return f"cannot run past {held}"
        if row["accuracy"] < first - HOLD_MARGIN:
            return (
                f"holds to {held}"
                if held > series[0]["test_length"]
                else (f"falls at {row['test_length']}")
            )
        held = row["test_length"]
    return f"holds to {held}"


def claims_table(rows: Sequence[dict[str, Any]], vocabulary_size: int = 10) -> str:
    """The published claim of each encoding next to what the study measured, as markdown.

    One line per encoding that `CLAIMS` names; per task, the mean accuracy at
    the shortest and the longest test length and the `verdict`.
    """
    tasks = [task for task in TASKS if any(r["task"] == task for r in rows)]
    lengths = sorted({r["test_length"] for r in rows})
    first, last = lengths[0], lengths[-1]
    header = "| encoding | claim | " + " | ".join(f"{task}: L={first} -> {last}" for task in tasks)
    lines = [
        f"Mean accuracy over {max(r['seeds'] for r in rows)} seed(s) at L = {first} and "
        f"L = {last}; *learned*: at least {LEARNED_FRACTION:.0%} of the way from chance to 1 "
        f"at L = {first}; *holds to L*: every mean up to L within {HOLD_MARGIN} of the one at "
        f"L = {first}.",
        "",
        header + " |",
        "|---|---|" + "---|" * len(tasks),
    ]
    encodings = list(dict.fromkeys(r["encoding"] for r in rows))
    for encoding in encodings:
        if encoding not in CLAIMS:
            continue
        cells = []
        for task in tasks:
            series = [r for r in rows if r["encoding"] == encoding and r["task"] == task]
            if not series:
                cells.append("")
                continue
            by_length = {r["test_length"]: r for r in series}
            shown = [
                "n/a" if by_length[n]["accuracy"] is None else f"{by_length[n]['accuracy']:.2f}"
                for n in (first, last)
                if n in by_length
            ]
            level = chance(task, vocabulary_size, TASK_SETTINGS["marked"])
            cells.append(" -> ".join(shown) + f": {verdict(series, level)}")
        lines.append(f"| {encoding} | {CLAIMS[encoding]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
