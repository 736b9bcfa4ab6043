"""Exports registered zoo models to ONNX, SavedModel and LiteRT and records the results.

For every registered zoo model (or the names given), on the active Keras
backend: creates the model, exports it with keras_posenc.export (export_seq2seq
for sequence-to-sequence models: an encoder and a one-step decoder graph, the
larger difference of the two is recorded), verifies the artifact against Keras,
and writes one row per model and format to docs/data/zoo_export.csv:

    name,variant,format,backend,max_abs_difference,export_seconds,date,machine

variant is "small" (the overrides of tests/test_export_zoo.py's SMALL_VARIANTS,
about 5M parameters or fewer) or "full" (the registered configuration; ConvS2S
models get 1k vocabularies, which they need). export_seconds is the wall time
of the export call including its verification run. Rows of the same name,
variant, format and backend are replaced; others are kept. A failed export is
recorded with max_abs_difference "failed: <error>" and the run continues.

The documentation's zoo page reads this CSV for its export column; keep the
columns as they are. After each run the table between the markers
``<!-- zoo-export-table -->`` and ``<!-- /zoo-export-table -->`` in
docs/guides/export.md is regenerated from the whole CSV (``--docs-only`` does
just that), so the guide shows what the CSV holds.

Usage:
    KERAS_BACKEND=tensorflow python benchmarks/export_zoo.py              # every small variant
    KERAS_BACKEND=tensorflow nice -n 10 python benchmarks/export_zoo.py --full coatnet_0
    python benchmarks/export_zoo.py --full coatnet_3 --formats tf_saved_model

Full-size ONNX export needs about 0.3 GB of memory per million parameters
(tf2onnx; see docs/guides/export.md): run one at a time, and use
--formats tf_saved_model for the large ones.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "..", "docs", "data", "zoo_export.csv")
GUIDE_PATH = os.path.join(HERE, "..", "docs", "guides", "export.md")
TABLE_START, TABLE_END = "<!-- zoo-export-table -->", "<!-- /zoo-export-table -->"
FORMAT_NAMES = {"onnx": "ONNX", "tf_saved_model": "SavedModel", "litert": "LiteRT"}
# The artifacts' names (posenc's, cli.SUFFIXES); a SavedModel is a folder.
SUFFIXES = {"onnx": ".onnx", "litert": ".tflite"}
COLUMNS = (
    "name",
    "variant",
    "format",
    "backend",
    "max_abs_difference",
    "export_seconds",
    "date",
    "machine",
)
# ConvS2S configurations leave the vocabularies to the user; full size uses 1k (as
# docs/zoo.md counts their parameters).
FULL_OVERRIDES = {
    "convs2s": {"src_vocab_size": 1000, "tgt_vocab_size": 1000},
    "convs2s_lm": {"vocab_size": 1000},
}


def machine() -> str:
    """A short description of this machine, e.g. ``2 CPU cores, 23.5 GiB``."""
    total = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
    except OSError:
        pass
    if total is None:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{os.cpu_count()} CPU cores, {total / 2**30:.1f} GiB"


def small_variants() -> dict:
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    from test_export_zoo import SMALL_VARIANTS

    return SMALL_VARIANTS


def full_overrides(name: str) -> dict:
    if name == "convs2s_lm":
        return FULL_OVERRIDES["convs2s_lm"]
    if name.startswith("convs2s"):
        return FULL_OVERRIDES["convs2s"]
    return {}


def read_rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def write_rows(path: str, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    order = {"small": 0, "full": 1}
    rows = sorted(
        rows, key=lambda r: (r["name"], order.get(r["variant"], 2), r["format"], r["backend"])
    )
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _cell(rows: list[dict]) -> str:
    if not rows:
        return "-"
    parts = []
    for row in sorted(rows, key=lambda r: r["backend"]):
        value = row["max_abs_difference"]
        seconds = row["export_seconds"]
        suffix = f", {seconds} s" if row["variant"] == "full" and seconds else ""
        parts.append(f"{value} ({row['backend']}{suffix})")
    return "<br>".join(parts)


def markdown_table(rows: list[dict]) -> str:
    """The guide's table: the largest difference per model, variant and format, then
    where and when each group of rows was measured."""
    # LiteRT has been run on the small variants only: no full-size column for it yet.
    columns = [(v, f) for v in ("small", "full") for f in ("onnx", "tf_saved_model")]
    columns.insert(2, ("small", "litert"))
    header = ["model"] + [
        f"{'small' if v == 'small' else 'full size'}: {FORMAT_NAMES[f]}" for v, f in columns
    ]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name in sorted({r["name"] for r in rows}):
        cells = [
            _cell([r for r in rows if (r["name"], r["variant"], r["format"]) == (name, v, f)])
            for v, f in columns
        ]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines.append("")
    groups = sorted({(r["variant"], r["backend"], r["machine"], r["date"]) for r in rows})
    for variant, backend, machine_name, date in groups:
        names = sorted(
            {
                r["name"]
                for r in rows
                if (r["variant"], r["backend"], r["machine"], r["date"])
                == (variant, backend, machine_name, date)
            }
        )
        which = f"{len(names)} models" if variant == "small" else ", ".join(names)
        lines.append(f"- {variant}: {which}, from {backend} on {machine_name}, {date}.")
    return "\n".join(lines)


def update_guide(csv_path: str, guide_path: str) -> bool:
    """Rewrites the table between the markers in the guide; False if the markers are absent."""
    with open(guide_path) as handle:
        text = handle.read()
    if TABLE_START not in text or TABLE_END not in text:
        return False
    before, rest = text.split(TABLE_START, 1)
    after = rest.split(TABLE_END, 1)[1]
    table = markdown_table(read_rows(csv_path))
    with open(guide_path, "w") as handle:
        handle.write(f"{before}{TABLE_START}\n{table}\n{TABLE_END}{after}")
    return True


def export_one(name: str, overrides: dict, format_name: str, folder: str) -> tuple[str, float]:
    """Exports one model in one format; returns (max |difference| as text, seconds)."""
    import keras

    from keras_posenc import zoo
    from keras_posenc.export import export_model, export_seq2seq
    from keras_posenc.zoo.seq2seq import Seq2SeqModel

    keras.utils.set_random_seed(0)
    model = zoo.create(name, **overrides)
    target = os.path.join(folder, f"{name}_{format_name}")
    start = time.perf_counter()
    if isinstance(model, Seq2SeqModel):
        reports = list(export_seq2seq(model, target, format=format_name).values())
    else:
        reports = [export_model(model, target + SUFFIXES.get(format_name, ""), format=format_name)]
    seconds = time.perf_counter() - start
    worst = max(r.max_abs_difference for r in reports)
    print(
        f"  {name} {format_name}: {model.count_params():,} parameters, "
        f"max |difference| {worst:.2g}, {seconds:.1f} s",
        flush=True,
    )
    return f"{worst:.2g}", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="small variants of these names (default: all)")
    parser.add_argument("--full", nargs="+", metavar="NAME", help="full-size models instead")
    parser.add_argument("--formats", nargs="+", default=["onnx", "tf_saved_model", "litert"])
    parser.add_argument("--csv", default=CSV_PATH, help="the CSV to update")
    parser.add_argument("--dry-run", action="store_true", help="print, do not write the CSV")
    parser.add_argument("--guide", default=GUIDE_PATH, help="the guide whose table to update")
    parser.add_argument(
        "--docs-only", action="store_true", help="only regenerate the guide's table from the CSV"
    )
    args = parser.parse_args(argv)
    if args.docs_only:
        return 0 if update_guide(args.csv, args.guide) else 1

    import keras

    from keras_posenc import zoo

    backend = keras.backend.backend()
    if args.full:
        jobs = [(name, "full", full_overrides(name)) for name in args.full]
    else:
        variants = small_variants()
        names = args.names or zoo.list_models()
        jobs = [(name, "small", variants[name]) for name in names]
    description = machine()
    print(f"backend {backend}, {description}, {len(jobs)} models x {args.formats}", flush=True)
    today = datetime.date.today().isoformat()
    failures = 0
    for name, variant, overrides in jobs:
        for format_name in args.formats:
            with tempfile.TemporaryDirectory() as folder:
                try:
                    difference, seconds = export_one(name, overrides, format_name, folder)
                except Exception as error:  # recorded, and the other models still run
                    failures += 1
                    message = " ".join(str(error).split())[:160]
                    print(f"  {name} {format_name}: FAILED {type(error).__name__}: {message}")
                    difference, seconds = f"failed: {type(error).__name__}", float("nan")
            row = {
                "name": name,
                "variant": variant,
                "format": format_name,
                "backend": backend,
                "max_abs_difference": difference,
                "export_seconds": f"{seconds:.0f}" if seconds == seconds else "",
                "date": today,
                "machine": description,
            }
            if not args.dry_run:
                # Rewritten after every model so an interrupted run keeps what it measured.
                key = (name, variant, format_name, backend)
                rows = [
                    r
                    for r in read_rows(args.csv)
                    if (r["name"], r["variant"], r["format"], r["backend"]) != key
                ]
                write_rows(args.csv, rows + [row])
    if not args.dry_run:
        update_guide(args.csv, args.guide)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
