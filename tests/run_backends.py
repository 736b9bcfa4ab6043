#!/usr/bin/env python3
"""Run the whole pytest suite once per Keras backend, each in its own process.

Usage:
    python tests/run_backends.py                       # tensorflow, jax, torch
    python tests/run_backends.py --backends jax,torch  # a subset
    python tests/run_backends.py -- -k zoo -x          # after --: arguments for pytest
    python tests/run_backends.py --backends tensorflow -- -m large
    python tests/run_backends.py --workers 1           # one pytest process per backend

Keras fixes its backend at first import, so every backend needs a fresh
interpreter with KERAS_BACKEND set. pytest runs with this folder as its working
directory, so `keras_posenc` is imported from the installed package, never from
a source tree next to it. Prints one line per backend and a closing total;
exits non-zero if any backend fails.

Each backend's tests are spread over --workers processes (pytest-xdist, from the
`test` extra; default: the usable CPUs, at most 4). Most of a backend's time is
one CPU compiling (XLA on JAX) or in Python, so two workers on two cores took
the JAX suite from about 590 s to 335 s. Tests share no files or ports.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

BACKENDS = ("tensorflow", "jax", "torch")
HERE = os.path.dirname(os.path.abspath(__file__))
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")
# pytest's closing line, with or without its "=" frame (-q drops it): "3 passed in 1.2s".
CLOSING = re.compile(r"^=*\s*((?:\d+ \w+,? ?)+.*|no tests ran) in [\d.]+s")


def default_workers() -> int:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, usable or 1))


def run_backend(
    backend: str, pytest_args: list[str], workers: int = 1
) -> tuple[int, str, dict[str, int]]:
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spread = ["-n", str(workers), "--dist", "worksteal"] if workers > 1 else []
    command = [sys.executable, "-m", "pytest", HERE, *spread, *pytest_args]
    print(f"==== {backend}: {' '.join(command)}", flush=True)
    process = subprocess.Popen(
        command, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    summary = ""
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(line)
        if CLOSING.match(line):
            summary = line.strip("= \n")
    counts: dict[str, int] = {}
    for number, kind in COUNT.findall(summary):
        kind = "errors" if kind.startswith("error") else kind
        counts[kind] = counts.get(kind, 0) + int(number)
    return process.wait(), summary or "no summary line", counts


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, pytest_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated backends")
    parser.add_argument(
        "--allow-no-tests",
        action="store_true",
        help="treat pytest's 'no tests collected' (exit 5) as success, for selections that "
        "may legitimately be empty",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        help="pytest processes per backend (pytest-xdist); 1 runs pytest alone "
        "(default: the usable CPUs, at most 4)",
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers: expected a number >= 1, got {args.workers}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"--backends: unknown {unknown}; expected some of {', '.join(BACKENDS)}")

    results = []
    totals: dict[str, int] = {}
    for backend in backends:
        start = time.monotonic()
        code, summary, counts = run_backend(backend, pytest_args, args.workers)
        if code == 5 and args.allow_no_tests:
            code = 0
        for kind, number in counts.items():
            totals[kind] = totals.get(kind, 0) + number
        results.append((backend, code, summary, time.monotonic() - start))

    print("\n==== results per backend")
    for backend, code, summary, seconds in results:
        status = "PASS" if code == 0 else f"FAIL (exit {code})"
        print(f"{backend:<11} {status:<14} {summary} [{seconds:.0f}s]")
    failed = totals.get("failed", 0) + totals.get("errors", 0)
    print(
        f"total: {totals.get('passed', 0)} passed, {failed} failed, "
        f"{totals.get('skipped', 0)} skipped"
    )
    return 0 if all(code == 0 for _, code, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
