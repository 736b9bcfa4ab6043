"""How long the README's commands take: ``posenc --help``, ``info``, ``demo``, ``export``
and every ``--quick`` run, each in a fresh process, as a user runs them.

For each command it records wall-clock seconds, CPU seconds (user + system, the command's
process and the processes it waited for, from ``os.wait4``), peak resident memory, the
1-minute load average at the start and the highest seen while it ran (sampled every 2 s),
the number of lines on standard output and standard error, and the exit status. It prints
one row per command and writes them to ``docs/data/cli_timings.csv`` (rows of the same
command and backend are replaced, others kept), which the CLI's ``--help``
(``keras_posenc.cli.MEASURED``), the README and ``docs/api/cli.md`` quote.

The commands run in one temporary folder, in the README's order: ``export`` exports the
``.keras`` file ``demo`` wrote. The machine's load is not controlled: read each row with its
load. On a machine shared with other jobs, rerun on an idle one for the idle figure.

Run from the repository root (``keras_posenc`` importable, e.g. installed)::

    python benchmarks/cli_quick.py                      # TensorFlow, every command
    python benchmarks/cli_quick.py --backend jax --commands demo export
    python benchmarks/cli_quick.py --no-write           # print only
    python benchmarks/cli_quick.py --markdown           # the CSV as docs/api/cli.md's table
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import threading
import time

# label -> posenc arguments, in the README's order.
COMMANDS = {
    "help": ["--help"],
    "info": ["info"],
    "demo": ["demo", "--out", "demo"],
    "export": ["export", "demo/convs2s_small.keras", "--format", "onnx", "--out", "exported"],
    "probe padding --quick": ["probe", "padding", "--quick"],
    "experiment length --quick": ["experiment", "length", "--quick"],
    "experiment layouts --quick": ["experiment", "layouts", "--quick"],
}
COLUMNS = (
    "command",
    "backend",
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
        rows = list(csv.DictReader(handle))
    lines = [
        "| command | backend | wall clock | CPU (user + system) | peak memory "
        "| load average (start, highest) | measured |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['argv']}` | {r['backend']} | {r['wall_s']} s | {r['cpu_s']} s "
            f"| {r['peak_rss_mb']} MB | {r['load_start']}, {r['load_max']} | {r['date']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="tensorflow", choices=sorted(_BACKEND_PACKAGE))
    parser.add_argument("--commands", nargs="+", choices=list(COMMANDS), default=list(COMMANDS))
    parser.add_argument("--csv", default=DEFAULT_CSV, help="where to write the rows")
    parser.add_argument("--no-write", action="store_true", help="print the rows only")
    parser.add_argument(
        "--markdown", action="store_true", help="print the CSV as a markdown table, run nothing"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(args.csv))
        return 0
    if "export" in args.commands and "demo" not in args.commands:
        parser.error("export exports the .keras file that demo writes: measure demo too")
    rows = []
    with tempfile.TemporaryDirectory(prefix="posenc-cli-") as folder:
        print(" | ".join(COLUMNS[:14]), flush=True)
        for label in args.commands:
            row = measure(label, COMMANDS[label], args.backend, folder)
            rows.append(row)
            print(" | ".join(str(row[c]) for c in COLUMNS[:14]), flush=True)
    if not args.no_write:
        write(rows, args.csv)
        print(f"wrote {len(rows)} rows to {os.path.relpath(args.csv, ROOT)}")
    return 1 if any(row["exit_status"] != 0 for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
