"""The marked tables of the benchmark pages, rendered from the runner's JSON records.

``render_document`` rewrites every block of a page between
``<!-- benchmarks:STEM:BACKEND start -->`` and ``<!-- benchmarks:STEM:BACKEND end -->``
from ``docs/data/benchmarks/STEM.json``: the conditions (date, commit, versions, machine,
load, command), then the table. ``STEM`` ``summary`` names a table of the summary page
instead (``<!-- benchmarks:summary:NAME start -->``, benchmarks/summary.py). Standard library
only, like the runner.
"""

from __future__ import annotations

import json
import pathlib
import re

from .registry import BACKEND_NAMES, BENCHMARKS, Benchmark, Column
from .summary import HEADLINES, render_summary

# The stem of the summary page's blocks (``benchmarks:summary:NAME``): no JSON file has it.
SUMMARY = "summary"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _format(value: object, style: str) -> str:
    if value is None:
        return "-"
    if style == "bool":
        return "yes" if value else "no"
    if style == "text" or not _is_number(value):
        return str(value).replace("|", "\\|")
    if style == "ms":
        value = value * 1000
    elif style == "mb":
        return f"{value / 2**20:.0f}"
    elif style == "ratio":
        return f"{value:.2f}"
    elif style == "sci":
        return f"{value:.1e}"
    magnitude = abs(value)
    return (
        f"{value:.0f}"
        if magnitude >= 100
        else f"{value:.1f}"
        if magnitude >= 10
        else f"{value:.2f}"
    )


def _compared(value: object) -> str:
    """A compared value: two decimals (ratios), whole numbers from 100 on."""
    return _format(value, "ratio" if _is_number(value) and abs(value) < 100 else "num")


def _right(column: Column) -> bool:
    """Numbers are right-aligned, and so are sequence lengths (written as text)."""
    return column.style != "text" or column.field == "length"


def _table(header: list[str], right: list[bool], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _tree_text(tree: dict) -> str:
    if tree.get("commit") is None:
        return f"{tree['name']} (not a git checkout)"
    state = ", with uncommitted changes" if tree.get("dirty") else ""
    return f"{tree['name']} at commit {tree['commit'][:10]}{state}"


def render_across(record: dict, baseline: str, benchmark: Benchmark | None = None) -> str:
    """One table of the working tree's ``benchmark.across`` fields on every backend of
    ``record``, with each backend's value over ``baseline``'s (Markdown).

    The block of marker ``<!-- benchmarks:STEM:across_BASELINE start -->``: numbers of
    different backends side by side, taken in one run of the runner (their conditions are
    in each backend's own block).
    """
    benchmark = benchmark or BENCHMARKS[record["benchmark"]]
    backends = [b for b in BACKEND_NAMES if b in record["backends"]]
    if baseline not in backends or not benchmark.across:
        raise ValueError(
            f"render: across_{baseline} needs a {baseline} run and fields to compare; the "
            f"{record['benchmark']} record has {backends}, across fields {benchmark.across}"
        )
    rows_by_backend = {
        backend: {
            tuple(row.get(k) for k in benchmark.keys): row
            for row in record["backends"][backend]["results"]["current"]
            if "error" not in row
        }
        for backend in backends
    }
    others = [b for b in backends if b != baseline]
    key_columns = [c for c in benchmark.columns if c.field in benchmark.keys]
    headers = {c.field: c.header for c in benchmark.columns}
    # Values are written in their column's style (seconds as ms for an "ms" column).
    styles = {
        c.field: c.style if c.style in ("ms", "mb", "sci") else "num" for c in benchmark.columns
    }
    header = [c.header for c in key_columns] + ["field"]
    header += [BACKEND_NAMES[b] for b in backends]
    header += [f"{BACKEND_NAMES[b]} / {BACKEND_NAMES[baseline]}" for b in others]
    rows = []
    for key, base_row in rows_by_backend[baseline].items():
        for field in benchmark.across:
            values = [rows_by_backend[b].get(key, {}).get(field) for b in backends]
            base = base_row.get(field)
            ratios = []
            for b in others:
                value = rows_by_backend[b].get(key, {}).get(field)
                ok = _is_number(value) and _is_number(base) and base != 0
                ratios.append(f"{value / base:.2f}x" if ok else "-")
            rows.append(
                [_format(k, "text") for k in key]
                + [headers.get(field, field)]
                + [_format(v, styles.get(field, "num")) for v in values]
                + ratios
            )
    right = [_right(c) for c in key_columns] + [False] + [True] * (len(backends) + len(others))
    date = record["date"].replace("T", " ")[:16] + " UTC"
    lines = [
        f"- Run: {date}, {_tree_text(record['trees']['current'])}; every backend in one "
        "run of the runner, one after the other (conditions in each backend's block).",
        "",
        *_table(header, right, rows),
    ]
    return "\n".join(lines)


def render_block(record: dict, backend: str, benchmark: Benchmark | None = None) -> str:
    """The conditions and the table of one backend's results in ``record`` (Markdown)."""
    benchmark = benchmark or BENCHMARKS[record["benchmark"]]
    if backend.startswith("across_"):
        return render_across(record, backend[len("across_") :], benchmark)
    if backend not in record["backends"]:
        raise ValueError(
            f"render: the {record['benchmark']} record has no {backend} run; it has "
            f"{sorted(record['backends'])}"
        )
    result = record["backends"][backend]
    host, limits = record["machine"], record["load_limits"]
    versions = result["versions"]
    avx = {True: "yes", False: "no", None: "unknown"}[host["avx512"]]
    date = record["date"].replace("T", " ")[:16] + " UTC"
    if result["under_load"]:
        verdict = "**taken under load** (the numbers may be off)"
    else:
        verdict = "not under load"
    trees = record["trees"]
    rounds = record["rounds"]
    environment = record.get("environment", {})
    compared = f", against {_tree_text(trees['ref'])}" if "ref" in trees else ""
    lines = [
        f"- Run: {date}, {_tree_text(trees['current'])}{compared}; "
        + ("one round per case." if rounds == 1 else f"{rounds} rounds per case, medians."),
        f"- Software: {BACKEND_NAMES[backend]} {versions.get(backend)}, Keras "
        f"{versions['keras']}, Python {host['python']}.",
        f"- Machine: {host['cpu']}, {host['cores']} cores, AVX-512 {avx}, "
        f"{host['memory_gib']} GiB.",
        *(
            ["- Environment: " + ", ".join(f"`{k}={v}`" for k, v in environment.items()) + "."]
            if environment
            else []
        ),
        f"- Load average (1 minute): {result['load_before']} before, at most "
        f"{result['load_max']} during and after (limits {limits['before']:g} and "
        f"{limits['during']:g}): {verdict}.",
        f"- Command: `{record['command']}`" if record["command"] else "- Command: not recorded.",
    ]
    if result.get("failed"):
        lines.append("- **Some runs failed** (their rows say so, or are missing).")
    lines.append("")
    if "ref" in trees:
        key_columns = [c for c in benchmark.columns if c.field in benchmark.keys]
        headers = [c.header for c in key_columns]
        name, short = trees["ref"]["name"], (trees["ref"].get("commit") or "")[:7]
        # A ref given as a commit is named once ("f7f10c3", not "f7f10c3 f7f10c3").
        label = name if short and name.startswith(short) else f"{name} {short}".strip()
        header = [*headers, "field", label, "working tree"]
        rows = [
            [_format(v, "text") for v in item["key"].values()]
            + [item["field"], _compared(item["ref"]), _compared(item["current"])]
            + ["-" if item["change"] is None else f"{item['change']:+.1%}"]
            for item in result["comparison"]
        ]
        right = [_right(c) for c in key_columns] + [False, True, True, True]
        lines += _table([*header, "change"], right, rows)
    else:
        rows = []
        for row in result["results"]["current"]:
            if "error" in row:
                keys = [c for c in benchmark.columns if c.field in benchmark.keys]
                cells = [_format(row.get(c.field), "text") for c in keys]
                cells.append("failed: " + _format(row["error"], "text"))
                cells += [""] * (len(benchmark.columns) - len(cells))
            else:
                cells = [_format(row.get(c.field), c.style) for c in benchmark.columns]
            rows.append(cells)
        right = [_right(c) for c in benchmark.columns]
        lines += _table([c.header for c in benchmark.columns], right, rows)
    return "\n".join(lines)


# A marker is a line of its own, so the page's prose can quote one.
_MARKER = re.compile(
    r"^<!-- benchmarks:(?P<stem>[\w.-]+):(?P<backend>\w+) (?P<edge>start|end) -->[ \t]*$",
    re.MULTILINE,
)


def _note(stem: str) -> str:
    return (
        f"<!-- rendered from data/benchmarks/{stem}.json by `python -m benchmarks render`: "
        "edit the run, not these lines -->"
    )


def render_document(text: str, data_folder: pathlib.Path) -> str:
    """``text`` with every block between ``<!-- benchmarks:STEM:BACKEND start -->`` and
    ``<!-- benchmarks:STEM:BACKEND end -->`` rendered from ``data_folder/STEM.json``, and
    every ``benchmarks:summary:NAME`` block from the JSON its headline reads
    (benchmarks/summary.py)."""
    pieces, position, opened = [], 0, None
    records: dict[str, dict] = {}
    for match in _MARKER.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        name = f"{match['stem']}:{match['backend']}"
        if match["edge"] == "start":
            if opened is not None:
                raise ValueError(f"render: line {line}: {name} starts inside {opened[0]}")
            opened = (name, match)
            continue
        if opened is None or opened[0] != name:
            raise ValueError(f"render: line {line}: end of {name} without its start")
        start = opened[1]
        stem = match["stem"]
        if stem == SUMMARY:
            block = render_summary(match["backend"], data_folder)
            sources = HEADLINES[match["backend"]].sources
            note = _note(sources[0] if len(sources) == 1 else "{" + ",".join(sources) + "}")
        else:
            if stem not in records:
                path = data_folder / f"{stem}.json"
                if not path.is_file():
                    raise ValueError(f"render: line {line}: no data/benchmarks/{stem}.json")
                records[stem] = json.loads(path.read_text())
            block, note = render_block(records[stem], match["backend"]), _note(stem)
        pieces += [text[position : start.end()], f"\n{note}\n\n{block}\n\n"]
        position, opened = match.start(), None
    if opened is not None:
        line = text.count("\n", 0, opened[1].start()) + 1
        raise ValueError(f"render: line {line}: {opened[0]} is never ended")
    return "".join(pieces) + text[position:]


def stale_blocks(text: str, data_folder: pathlib.Path) -> list[str]:
    """The names (``STEM:BACKEND``) of the blocks whose text differs from their rendering."""
    rendered = render_document(text, data_folder)

    def blocks(document: str) -> dict[str, str]:
        found, starts = {}, {}
        for match in _MARKER.finditer(document):
            name = f"{match['stem']}:{match['backend']}"
            if match["edge"] == "start":
                starts[name] = match.end()
            else:
                found[name] = document[starts[name] : match.start()]
        return found

    old, new = blocks(text), blocks(rendered)
    return [name for name in new if old.get(name) != new[name]]
