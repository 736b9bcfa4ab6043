"""How long the README's commands take: ``posenc --help``, ``info``, ``demo``, ``export``
and every ``--quick`` run, each in a fresh process, as a user runs them.

For each command it records the CPU model, wall-clock seconds, CPU seconds (user + system,
the command's process and the processes it waited for, from ``os.wait4``), peak memory, the
1-minute load average at the start and the highest seen while it ran (sampled every 2 s),
the number of lines on standard output and standard error, and the exit status. It prints
one row per command and writes them to ``docs/data/cli_timings.csv`` (rows of the same
command and backend are replaced, others kept), then rewrites every time quoted from it:
the blocks between ``<!-- cli_timings KIND ARGS -->`` and ``<!-- /cli_timings -->`` in
README.md and docs/ (KIND ``summary``: the README's table; ``table``: every row;
``sentence COMMAND BACKEND...``: one sentence) and ``keras_posenc.cli.MEASURED``, between
``# cli_timings measured`` and ``# /cli_timings`` (what ``--help`` quotes).
``tests/test_first_contact.py`` fails when a block differs from the CSV.

The commands run in one temporary folder, in the README's order: ``export`` exports the
``.keras`` file ``demo`` wrote; ``generate`` runs a ``.keras`` file written before it, untimed
(:data:`SETUP`). The machine's load is not controlled: read each row with its
load. On a machine shared with other jobs, rerun on an idle one for the idle figure.

Run from the repository root (``keras_posenc`` importable, e.g. installed)::

    python benchmarks/cli_quick.py                      # TensorFlow, every command
    python benchmarks/cli_quick.py --backend tensorflow jax torch   # the three backends
    python benchmarks/cli_quick.py --backend jax --commands demo export
    python benchmarks/cli_quick.py --update-docs        # the docs from the CSV, run nothing
    python benchmarks/cli_quick.py --no-write           # print only
    python benchmarks/cli_quick.py --markdown           # the CSV as docs/api/cli.md's table
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

# label -> posenc arguments, in the README's order.
COMMANDS = {
    "help": ["--help"],
    "info": ["info"],
    "demo": ["demo", "--out", "demo"],
    "export": ["export", "demo/coatnet_0_digits.keras", "--format", "onnx", "--out", "exported"],
    "probe padding --quick": ["probe", "padding", "--quick"],
    "experiment length --quick": ["experiment", "length", "--quick"],
    "experiment layouts --quick": ["experiment", "layouts", "--quick"],
    "experiment transplant --quick": ["experiment", "transplant", "--quick"],
    "generate": ["generate", "--model", "lm.keras", "The quick brown fox", "--max-length", "64"],
}
# Files a command reads, written (untimed) before it runs: label -> Python code run in the
# folder. `posenc generate` needs a model with a tokenizer: decoder_lm_tiny (byte tokenizer).
SETUP = {
    "generate": "import keras\n"
    "from keras_posenc import zoo\n"
    "keras.utils.set_random_seed(0)\n"
    "zoo.create('decoder_lm_tiny').save('lm.keras')\n",
}
COLUMNS = (
    "command",
    "backend",
    "cpu_model",
    "wall_s",
    "cpu_s",
    "user_s",
    "sys_s",
    "peak_rss_mb",
    "load_start",
    "load_max",
    "cores",
    "nice",
    "stdout_lines",
    "stderr_lines",
    "exit_status",
    "date",
    "keras_posenc",
    "keras",
    "backend_version",
    "argv",
)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CSV = os.path.join(ROOT, "docs", "data", "cli_timings.csv")
_BACKEND_PACKAGE = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "source tree"


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo, else platform.processor())."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure(label: str, argv: list[str], backend: str, folder: str) -> dict:
    """Runs ``posenc *argv`` in ``folder`` on ``backend``; returns its CSV row."""
    env = {**os.environ, "KERAS_BACKEND": backend}
    loads = [os.getloadavg()[0]]
    finished = threading.Event()

    def sample() -> None:
        while not finished.wait(2.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "keras_posenc.cli", *argv],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=err,
        )
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)  # the child's own rusage
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        finished.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if process.returncode != 0:
        print(stderr[-3000:], file=sys.stderr)
    return {
        "command": label,
        "backend": backend,
        "cpu_model": cpu_model(),
        "wall_s": f"{wall:.1f}",
        "cpu_s": f"{usage.ru_utime + usage.ru_stime:.1f}",
        "user_s": f"{usage.ru_utime:.1f}",
        "sys_s": f"{usage.ru_stime:.1f}",
        "peak_rss_mb": f"{usage.ru_maxrss / 1024:.0f}",
        "load_start": f"{loads[0]:.2f}",
        "load_max": f"{max(loads):.2f}",
        "cores": os.cpu_count(),
        "nice": os.nice(0),
        "stdout_lines": len(stdout.splitlines()),
        "stderr_lines": len(stderr.splitlines()),
        "exit_status": process.returncode,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "keras_posenc": _version("keras-posenc"),
        "keras": _version("keras"),
        "backend_version": _version(_BACKEND_PACKAGE[backend]),
        "argv": "posenc " + " ".join(argv),
    }


def write(rows: list[dict], path: str) -> None:
    """Replaces the rows of the same command and backend in ``path``; keeps the others."""
    kept = []
    if os.path.exists(path):
        with open(path, newline="") as handle:
            new = {(row["command"], row["backend"]) for row in rows}
            kept = [r for r in csv.DictReader(handle) if (r["command"], r["backend"]) not in new]
    order = list(COMMANDS)
    merged = sorted(
        kept + rows,
        key=lambda r: (r["backend"], order.index(r["command"]) if r["command"] in order else 99),
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(merged)


def markdown(path: str) -> str:
    """The rows of ``path`` as the table of ``docs/api/cli.md``."""
    with open(path, newline="") as handle:
        return markdown_rows(list(csv.DictReader(handle)))


def markdown_rows(rows: list[dict]) -> str:
    """CSV rows as a markdown table, one line per command and backend."""
    lines = [
        "| command | backend | wall clock | CPU (user + system) | peak memory "
        "| load average (start, highest) | CPU model, cores, nice | measured |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['argv']}` | {r['backend']} | {r['wall_s']} s | {r['cpu_s']} s "
            f"| {r['peak_rss_mb']} MB | {r['load_start']}, {r['load_max']} "
            f"| {r.get('cpu_model') or 'not recorded'}, {r['cores']}, {r['nice']} | {r['date']} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- quoted times

# <!-- cli_timings KIND ARGS -->TEXT<!-- /cli_timings --> in markdown; in cli.py, the
# MEASURED dict between "# cli_timings measured" and "# /cli_timings".
BLOCK = re.compile(r"(<!-- cli_timings ([^>]*?) -->)(.*?)(<!-- /cli_timings -->)", re.S)
PYTHON_BLOCK = re.compile(r"(# cli_timings (\w+)\n)(.*?)(\s*# /cli_timings)", re.S)
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
# What --help quotes (keras_posenc.cli.MEASURED): TensorFlow's rows of these commands.
HELP_COMMANDS = ("demo", "probe padding --quick", "experiment length --quick",
                 "experiment layouts --quick", "experiment transplant --quick",
                 "generate")  # fmt: skip


def _read(path: str) -> dict[tuple[str, str], dict]:
    with open(path, newline="") as handle:
        return {(r["command"], r["backend"]): r for r in csv.DictReader(handle)}


def _seconds(text: str) -> str:
    value = float(text)
    return f"{value:.1f} s" if value < 10 else f"{value:,.0f} s"


def _conditions(rows: list[dict]) -> str:
    """Where and how the rows were measured, in words."""
    models = sorted({r.get("cpu_model") or "unrecorded" for r in rows})
    cores = sorted({r["cores"] for r in rows})
    nices = sorted({r["nice"] for r in rows})
    starts = [float(r["load_start"]) for r in rows]
    highs = [float(r["load_max"]) for r in rows]
    dates = sorted(r["date"][:10] for r in rows)
    model = " / ".join(m for m in models if m != "unrecorded") or "CPU model not recorded"
    if "unrecorded" in models and model != "CPU model not recorded":
        model += " (some rows: CPU model not recorded)"
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return (
        f"{model}, {' or '.join(cores)} cores, load average {min(starts):.1f} to "
        f"{max(highs):.1f}, nice {' or '.join(nices)}, {span}"
    )


def render(kind: str, arguments: list[str], rows: dict) -> str:
    """The text of one block, from the CSV's rows."""
    if kind == "table":
        return "\n" + markdown_rows(list(rows.values())) + "\n"
    if kind == "sentence":
        command, backends = arguments[0].replace("_", " "), arguments[1:]
        found = [rows[command, b] for b in backends if (command, b) in rows]
        parts = [
            f"{_seconds(r['wall_s'])} wall clock ({_seconds(r['cpu_s'])} CPU) on "
            f"{BACKEND_NAMES[r['backend']]}"
            for r in found
        ]
        return "; ".join(parts) + f" ({_conditions(found)})"
    if kind == "summary":
        order = [c for c in COMMANDS if any(k[0] == c for k in rows)]
        backends = [b for b in BACKEND_NAMES if any(k[1] == b for k in rows)]
        lines = [
            "| command | " + " | ".join(BACKEND_NAMES[b] for b in backends) + " |",
            "|---|" + "---:|" * len(backends),
        ]
        for command in order:
            cells = [
                _seconds(rows[command, b]["wall_s"]) if (command, b) in rows else "not measured"
                for b in backends
            ]
            label = "--help" if command == "help" else command
            lines.append(f"| `posenc {label}` | " + " | ".join(cells) + " |")
        note = (
            f"Wall clock of one run each, in a fresh process ({_conditions(list(rows.values()))}; "
            "CPU seconds, memory and load per run in `docs/data/cli_timings.csv`, written by "
            "`benchmarks/cli_quick.py`: rerun it to measure your machine)."
        )
        lines += ["", *textwrap.wrap(note, 92, break_on_hyphens=False)]
        return "\n" + "\n".join(lines) + "\n"
    if kind == "measured":
        items = []
        for command in HELP_COMMANDS:
            if (command, "tensorflow") not in rows:  # not measured yet: --help quotes no time
                continue
            r = rows[command, "tensorflow"]
            items.append(
                f'    "{command}": ({float(r["wall_s"])}, {float(r["cpu_s"])}, '
                f"{float(r['load_start'])}),"
            )
        return "MEASURED = {\n" + "\n".join(items) + "\n}"
    raise ValueError(f"cli_quick: unknown block kind {kind!r}")


def _rewrite(text: str, pattern: re.Pattern, rows: dict) -> str:
    def one(match: re.Match) -> str:
        kind, *arguments = match.group(2).split()
        return match.group(1) + render(kind, arguments, rows) + match.group(4)

    return pattern.sub(one, text)


def quoting_files(root: str = ROOT) -> list[str]:
    """README.md, every page under docs/ and keras_posenc/cli.py: where times are quoted."""
    files = [os.path.join(root, "README.md"), os.path.join(root, "keras_posenc", "cli.py")]
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def stale(path: str, csv_path: str = DEFAULT_CSV) -> tuple[str, str, int]:
    """(the file's text, as the CSV would have it, the number of blocks in it)."""
    rows = _read(csv_path)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    pattern = PYTHON_BLOCK if path.endswith(".py") else BLOCK
    return text, _rewrite(text, pattern, rows), len(pattern.findall(text))


def update_docs(csv_path: str = DEFAULT_CSV, root: str = ROOT) -> list[str]:
    """Rewrites every quoted time from the CSV; returns the files changed."""
    changed = []
    for path in quoting_files(root):
        text, wanted, _ = stale(path, csv_path)
        if text != wanted:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(wanted)
            changed.append(os.path.relpath(path, root))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", nargs="+", default=["tensorflow"], choices=sorted(_BACKEND_PACKAGE)
    )
    parser.add_argument("--commands", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    parser.add_argument("--csv", default=DEFAULT_CSV, help="where to write the rows")
    parser.add_argument("--no-write", action="store_true", help="print the rows only")
    parser.add_argument(
        "--update-docs", action="store_true", help="rewrite the docs' times from the CSV only"
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the CSV as a markdown table, run nothing"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(args.csv))
        return 0
    if args.update_docs:
        changed = update_docs(args.csv)
        print("\n".join(f"updated {path}" for path in changed) or "the docs match the CSV")
        return 0
    if "export" in args.commands and "demo" not in args.commands:
        parser.error("export exports the .keras file that demo writes: measure demo too")
    rows = []
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores")
    for backend in args.backend:
        with tempfile.TemporaryDirectory(prefix="posenc-cli-") as folder:
            print(" | ".join(COLUMNS[:15]), flush=True)
            for label in args.commands:
                if label in SETUP:
                    env = {**os.environ, "KERAS_BACKEND": backend}
                    subprocess.run([sys.executable, "-c", SETUP[label]], cwd=folder, env=env,
                                   check=True, capture_output=True)  # fmt: skip
                row = measure(label, COMMANDS[label], backend, folder)
                rows.append(row)
                print(" | ".join(str(row[c]) for c in COLUMNS[:15]), flush=True)
    if not args.no_write:
        write(rows, args.csv)
        print(f"wrote {len(rows)} rows to {os.path.relpath(args.csv, ROOT)}")
        for path in update_docs(args.csv):
            print(f"updated {path}")
    return 1 if any(row["exit_status"] != 0 for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
