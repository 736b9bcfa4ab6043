"""Timing shared by the benchmark scripts (run as ``python benchmarks/NAME.py``, so this
module is importable as ``_timing`` from the scripts' folder)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``run``, after one warm-up call.

    The warm-up takes tracing, compilation and first allocations out of the figure.
    """
    return first_and_median_seconds(run, repeats)[1]


def first_and_median_seconds(run: Callable[[], object], repeats: int) -> tuple[float, float]:
    """The wall time of the first call of ``run`` (tracing and compilation included) and
    the median of the ``repeats`` calls after it."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def finish(rows: list[dict], json_path: str | None) -> int:
    """Writes ``rows`` to ``json_path`` (the runner reads it) if given; the exit status:
    0, or 1 if a row records an error."""
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0 if all("error" not in row for row in rows) else 1
