"""The summary page's headlines (docs/benchmarks.md): each one a ratio against its peer,
per backend, read from the runner's JSON records in docs/data/benchmarks/.

A headline is a table (one row per case, one column per backend) with the conditions of
the runs it comes from, and a chart of the same numbers (benchmarks/charts.py draws it into
docs/img/benchmarks/NAME.svg). Both are rendered into the page between
``<!-- benchmarks:summary:NAME start -->`` and ``<!-- benchmarks:summary:NAME end -->`` by
``python -m benchmarks render`` (benchmarks/render.py), and checked by ``render --check``.
Which fields hold "ours" and the peer is each record's own (the scripts take the ratio
within one run, against the peer measured in that run): only the choice of rows is here.
Standard library only, like the runner.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Callable

from .registry import BACKEND_NAMES

# Where charts go, relative to the docs folder (and so the page's links to them).
IMAGE_FOLDER = pathlib.PurePosixPath("img", "benchmarks")

# A headline's rows: (label, {backend: value or None}), in the table's order.
Rows = list[tuple[str, dict[str, float | None]]]


@dataclasses.dataclass(frozen=True)
class Headline:
    """One question a reader asks, answered by one table and its chart.

    ``unit`` is ``"x"`` for a ratio (the peer is 1, drawn as a line on the chart) or the
    unit written after each value; ``reading`` says how to read a value (which way is
    better); ``sources`` the JSON stems it reads; ``rows`` picks its rows from them.
    """

    name: str
    title: str
    unit: str
    reading: str
    sources: tuple[str, ...]
    rows: Callable[[dict[str, dict]], Rows]
    backends: tuple[str, ...] = tuple(BACKEND_NAMES)


def _current(record: dict, backend: str) -> list[dict]:
    """The working tree's rows of ``backend`` in ``record`` (none when it has no run)."""
    result = record["backends"].get(backend)
    if result is None:
        return []
    return [row for row in result["results"]["current"] if "error" not in row]


def _pick(
    records: dict[str, dict],
    stem: str,
    cases: list[tuple[str, dict]],
    value: Callable[[dict, list[dict]], float | None],
) -> Rows:
    """For each (label, fields) of ``cases``: the row of each backend whose fields match,
    and ``value(row, that backend's rows)``."""
    rows = []
    for label, fields in cases:
        values = {}
        for backend in BACKEND_NAMES:
            found = [
                row
                for row in _current(records[stem], backend)
                if all(row.get(k) == v for k, v in fields.items())
            ]
            values[backend] = value(found[0], _current(records[stem], backend)) if found else None
        rows.append((label, values))
    return rows


def _field(name: str) -> Callable[[dict, list[dict]], float | None]:
    return lambda row, _rows: row.get(name)


def _memory_over_mha(row: dict, rows: list[dict]) -> float | None:
    """Extra peak memory over MultiHeadAttention's at the same length, in the same run."""
    base = [r for r in rows if r["implementation"] == "keras_mha" and r["length"] == row["length"]]
    if not base or not base[0].get("extra_peak_bytes"):
        return None
    return row["extra_peak_bytes"] / base[0]["extra_peak_bytes"]


_RELATIVE = {
    "rel_bias": "bias",
    "rel_keys": "keys",
    "rel_keys_values": "keys and values",
    "naive_shaw": "naive Shaw (tables materialised)",
}


def _relative_time(records: dict[str, dict]) -> Rows:
    cases = [
        (f"{label}, L = {length}", {"implementation": impl, "length": length})
        for length in (512, 2048)
        for impl, label in _RELATIVE.items()
    ]
    return _pick(records, "summary_relative_attention", cases, _field("x_mha"))


def _relative_memory(records: dict[str, dict]) -> Rows:
    cases = [(label, {"implementation": i, "length": 2048}) for i, label in _RELATIVE.items()]
    return _pick(records, "summary_relative_attention", cases, _memory_over_mha)


def _position_schemes(records: dict[str, dict]) -> Rows:
    schemes = {
        "rel_bias": "learned bias (clip 16)",
        "alibi": "ALiBi",
        "kerple": "KERPLE",
        "fire": "FIRE",
        "continuous": "continuous bias (MLP)",
        "rope": "RoPE",
        "rope_yarn": "RoPE with YaRN",
    }
    cases = [(label, {"implementation": i, "length": 2048}) for i, label in schemes.items()]
    return _pick(records, "summary_position_schemes", cases, _field("x_mha"))


def _muse(records: dict[str, dict]) -> Rows:
    kinds = {"muse_dynamic": "dynamic convolution", "muse_static": "static convolution"}
    cases = [
        (f"{label}, L = {length}", {"implementation": impl, "length": length})
        for length in (512, 1024)
        for impl, label in kinds.items()
    ]
    return _pick(records, "summary_muse", cases, _field("compiled_x_mha"))


def _generation(records: dict[str, dict]) -> Rows:
    rows = _pick(
        records,
        "summary_convs2s_generation",
        [("convs2s_iwslt_de_en, greedy", {"model": "convs2s_iwslt_de_en", "path": "cached"})],
        _field("x_recompute"),
    )
    rows += _pick(
        records,
        "generation_convs2s_lm",
        [
            (f"convs2s_lm, {search}", {"model": "convs2s_lm", "search": s, "path": "cached"})
            for s, search in (("greedy", "greedy"), ("top_k", "top-k sampling"))
        ],
        _field("x_recompute"),
    )
    rows += _pick(
        records,
        "generation",
        [
            (f"{model}, greedy", {"model": model, "search": "greedy", "path": "cached"})
            for model in ("music_transformer_base", "shaw_transformer_base")
        ],
        _field("x_recompute"),
    )
    return rows


def _export(records: dict[str, dict]) -> Rows:
    cases = [
        (case, {"case": case, "runtime": "onnxruntime"})
        for case in (
            "coatnet_0 224px b1",
            "coatnet_0 224px b8",
            "convs2s_iwslt_de_en step b1",
            "convs2s_iwslt_de_en step b8",
        )
    ]
    return _pick(records, "export", cases, _field("ort_over_keras"))


def _coatnet(records: dict[str, dict]) -> Rows:
    cases = [("eager, model(x)", {"mode": "eager"}), ("predict_on_batch", {"mode": "compiled"})]
    return _pick(records, "summary_coatnet", cases, _field("images_per_second"))


def _zoo_create(records: dict[str, dict]) -> Rows:
    models = ("coatnet_0", "shaw_transformer_base", "muse_encoder_small", "muse_tiny")
    cases = [(model, {"model": model}) for model in models]
    return _pick(records, "summary_zoo_create", cases, _field("cold_seconds"))


HEADLINES = {
    headline.name: headline
    for headline in (
        Headline(
            "relative_attention_time",
            "Relative attention: time / MultiHeadAttention's",
            "x",
            "time over `keras.layers.MultiHeadAttention`'s at the same length: below 1 is faster",
            ("summary_relative_attention",),
            _relative_time,
        ),
        Headline(
            "relative_attention_memory",
            "Relative attention at L = 2048: extra peak memory / MultiHeadAttention's",
            "x",
            "extra peak memory over MultiHeadAttention's at L = 2048: below 1 is less memory",
            ("summary_relative_attention",),
            _relative_memory,
        ),
        Headline(
            "position_schemes",
            "Position schemes at L = 2048: time / MultiHeadAttention's",
            "x",
            "time over MultiHeadAttention's at L = 2048: below 1 is faster",
            ("summary_position_schemes",),
            _position_schemes,
        ),
        Headline(
            "muse",
            "MUSE attention, compiled: time / MultiHeadAttention's",
            "x",
            "compiled time over MultiHeadAttention's at the same length: below 1 is faster",
            ("summary_muse",),
            _muse,
        ),
        Headline(
            "generation",
            "Generation, 256 tokens: cached steps, times faster than recomputing",
            "x",
            "tokens per second with the cache over recomputing the prefix at every step: "
            "above 1 is faster",
            ("summary_convs2s_generation", "generation_convs2s_lm", "generation"),
            _generation,
        ),
        Headline(
            "export",
            "Exported ONNX in ONNX Runtime: time / compiled Keras'",
            "x",
            "ONNX Runtime's time over the compiled Keras model's on the same backend: below 1 "
            "is faster",
            ("export",),
            _export,
        ),
        Headline(
            "coatnet",
            "CoAtNet-0, 224 x 224, batch 8: images per second",
            "images/s",
            "images per second: higher is faster",
            ("summary_coatnet",),
            _coatnet,
        ),
        Headline(
            "zoo_create",
            "zoo.create in a fresh process: seconds",
            "s",
            "seconds to build the model in a fresh process (imports done): lower is faster",
            ("summary_zoo_create",),
            _zoo_create,
            backends=("tensorflow", "torch"),
        ),
    )
}


def load_records(headline: Headline, data_folder: pathlib.Path) -> dict[str, dict]:
    """The JSON records ``headline`` reads, by stem."""
    records = {}
    for stem in headline.sources:
        path = data_folder / f"{stem}.json"
        if not path.is_file():
            raise ValueError(
                f"summary: the {headline.name} headline reads data/benchmarks/{stem}.json, "
                f"which does not exist in {data_folder}"
            )
        records[stem] = json.loads(path.read_text())
    return records


def headline_rows(headline: Headline, records: dict[str, dict]) -> Rows:
    """The headline's rows, its backends only."""
    return [
        (label, {b: values.get(b) for b in headline.backends})
        for label, values in headline.rows(records)
    ]


def format_value(value: float | None, unit: str) -> str:
    """A table cell: ``1.26x``, ``0.69 s``, ``18.3 images/s``; ``-`` when not measured."""
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{format_number(value)} {unit}"


def format_number(value: float) -> str:
    """A value with two decimals below 10, one below 100, none from 100 on."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _conditions(stem: str, record: dict, backends: tuple[str, ...]) -> str:
    """One line: when, at which commit, on what, and which backend ran under load."""
    tree = record["trees"]["current"]
    commit = (tree.get("commit") or "unknown")[:10]
    dirty = " with uncommitted changes" if tree.get("dirty") else ""
    host = record["machine"]
    ran = [b for b in backends if b in record["backends"]]
    versions = ", ".join(
        f"{BACKEND_NAMES[b]} {record['backends'][b]['versions'].get(b)}" for b in ran
    )
    keras = next(iter(record["backends"].values()))["versions"]["keras"]
    loaded = [BACKEND_NAMES[b] for b in ran if record["backends"][b]["under_load"]]
    load = f"; taken under load: {', '.join(loaded)}" if loaded else "; not under load"
    return (
        f"`{stem}.json`: {record['date'][:10]}, commit `{commit}`{dirty}; "
        f"{host['cpu']}, {host['cores']} cores; Keras {keras}, {versions}{load}; "
        f"`{record['command']}`."
    )


def render_summary(name: str, data_folder: pathlib.Path) -> str:
    """The block of marker ``benchmarks:summary:NAME``: the chart, the table of ratios per
    backend, how to read it and the conditions of its runs (Markdown)."""
    if name not in HEADLINES:
        raise ValueError(
            f"render: no summary headline {name!r}; the headlines are {sorted(HEADLINES)}"
        )
    headline = HEADLINES[name]
    records = load_records(headline, data_folder)
    rows = headline_rows(headline, records)
    image = IMAGE_FOLDER / f"{name}.svg"
    lines = [
        f"![{headline.title}]({image})",
        "",
        "| | " + " | ".join(BACKEND_NAMES[b] for b in headline.backends) + " |",
        "|---|" + "---:|" * len(headline.backends),
    ]
    for label, values in rows:
        cells = [format_value(values[b], headline.unit) for b in headline.backends]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"Read: {headline.reading}. Runs:", ""]
    lines += [
        f"- {_conditions(stem, records[stem], headline.backends)}" for stem in headline.sources
    ]
    return "\n".join(lines)
