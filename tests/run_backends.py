#!/usr/bin/env python3
"""Run a tier of the pytest suite once per Keras backend, each in its own process.

Usage:
    python tests/run_backends.py                       # default tier: CI's and the README's
    python tests/run_backends.py --tier large          # the large CI stage (TensorFlow)
    python tests/run_backends.py --tier full           # everything, on every backend it needs
    python tests/run_backends.py --backends jax,torch  # a subset of backends
    python tests/run_backends.py -- -k zoo -x          # after --: arguments for pytest
    python tests/run_backends.py --workers 1           # one pytest process per backend

Tiers (tests/tiers.py, docs/development.md "Test tiers"): `default` runs the backend-neutral
tests once, on the first backend, and the per-backend contract tests on every backend;
`large` runs the budgeted heavy cases on TensorFlow; `full` runs all of these, the heavy
cases beyond the budget, and every case of the shape matrices on every backend.

Keras fixes its backend at first import, so every backend needs a fresh interpreter with
KERAS_BACKEND set. pytest runs with this folder as its working directory, so `keras_posenc`
is imported from the installed package, never from a source tree next to it. Each backend's
tests are spread over --workers processes (pytest-xdist, from the `test` extra); cases
marked `memory` then run in one process, so two of them never share the machine's memory.
Prints each backend's line, the slowest cases of each step, and a closing total; exits
non-zero if any backend fails.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

from tiers import LARGE_BACKEND, SELECTIONS, selected_tiers

BACKENDS = ("tensorflow", "jax", "torch")
HERE = os.path.dirname(os.path.abspath(__file__))
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")
# pytest's closing line, with or without its "=" frame (-q drops it): "3 passed in 1.2s".
CLOSING = re.compile(r"^=*\s*((?:\d+ \w+,? ?)+.*|no tests ran) in [\d.]+s")
# How many of each step's slowest cases pytest lists (--durations), so the next change to a
# stage's time starts from them.
SLOWEST = 25


def default_workers() -> int:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, usable or 1))


def run_pytest(
    backend: str, tiers: tuple[str, ...], pytest_args: list[str], workers: int, env: dict
) -> tuple[int, str, dict[str, int]]:
    env = dict(env, KERAS_BACKEND=backend, PYTHONUNBUFFERED="1")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spread = ["-n", str(workers), "--dist", "worksteal"] if workers > 1 else []
    command = [
        sys.executable, "-m", "pytest", HERE, "--tiers", ",".join(tiers),
        f"--durations={SLOWEST}", *spread, *pytest_args,
    ]  # fmt: skip
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


def run_backend(
    backend: str, tiers: tuple[str, ...], pytest_args: list[str], workers: int, env: dict
) -> tuple[int, str, dict[str, int]]:
    """One backend's tiers; in the heavy tiers, the cases marked `memory` after, in one process."""
    if not tiers:
        return 0, "nothing in this tier", {}
    steps = [([], workers)]
    if {"large", "full"} & set(tiers) and "-m" not in pytest_args:
        steps = [(["-m", "not memory"], workers), (["-m", "memory"], 1)]
    code, summaries, counts = 0, [], {}
    for marks, step_workers in steps:
        step_code, summary, step_counts = run_pytest(
            backend, tiers, [*marks, *pytest_args], step_workers, env
        )
        if step_code == 5:  # pytest's "no tests collected": a step may be empty
            continue
        code = code or step_code
        summaries.append(summary)
        for kind, number in step_counts.items():
            if kind != "deselected":
                counts[kind] = counts.get(kind, 0) + number
    if not summaries:
        return 5, "no tests ran", counts
    return code, " + ".join(summaries), counts


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, pytest_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tier",
        default="default",
        choices=sorted(SELECTIONS),
        help="default: neutral tests once and contract tests on every backend; large: the CI "
        "stage of heavy cases (TensorFlow); full: everything (default: default)",
    )
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated backends; the first also runs the backend-neutral tests "
        f"(default: {','.join(BACKENDS)}; {LARGE_BACKEND} for --tier large)",
    )
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
    chosen = args.backends or (LARGE_BACKEND if args.tier == "large" else ",".join(BACKENDS))
    backends = [b.strip() for b in chosen.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"--backends: unknown {unknown}; expected some of {', '.join(BACKENDS)}")

    results = []
    totals: dict[str, int] = {}
    for index, backend in enumerate(backends):
        start = time.monotonic()
        tiers = selected_tiers(args.tier, first=index == 0)
        code, summary, counts = run_backend(backend, tiers, pytest_args, args.workers, os.environ)
        if code == 5 and args.allow_no_tests:
            code = 0
        for kind, number in counts.items():
            totals[kind] = totals.get(kind, 0) + number
        results.append((backend, code, summary, time.monotonic() - start))

    print(f"\n==== results per backend (tier {args.tier})")
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
