"""Timing shared by the benchmark scripts (run as ``python benchmarks/NAME.py``, so this
module is importable as ``_timing`` from the scripts' folder)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
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


def write_json(path: str | None, rows: list[dict]) -> None:
    """Writes a script's ``rows`` to ``path`` (its ``--json``, which the runner reads), if given."""
    if path:
        with open(path, "w") as handle:
            json.dump(rows, handle, indent=1)


def finish(rows: list[dict], json_path: str | None) -> int:
    """Writes ``rows`` to ``json_path`` if given; the exit status: 0, or 1 if a row
    records an error."""
    write_json(json_path, rows)
    return 0 if all("error" not in row for row in rows) else 1


def inference() -> contextlib.AbstractContextManager:
    """A context in which eager calls record no gradients, as in Keras' ``predict``.

    PyTorch records the autograd graph of every eager call unless told not to
    (``torch.no_grad``), which changes both the time and which kernels run; the
    other backends record nothing outside a gradient tape or ``jax.grad``.
    """
    import keras

    if keras.backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


def library_compile_function() -> Callable:
    """The measured library's ``compile_function`` (keras_posenc/backend/__init__.py).

    The runner's ``--against REF`` runs this tree's script on REF's library
    (benchmarks/README.md), and commits from before the backend package call the same
    function ``keras_posenc._compile.compile_inference``: this keeps those commits
    measurable.
    """
    try:
        from keras_posenc.backend import compile_function
    except ImportError:
        from keras_posenc._compile import compile_inference as compile_function
    return compile_function


def torch_trace_after() -> int:
    """How many eager calls PyTorch's compiled decoding step makes before it traces, in the
    measured library (keras_posenc/backend/torch_trace.py; ``keras_posenc._compile`` before
    the backend package), as `library_compile_function` finds it."""
    try:
        from keras_posenc.backend.torch_trace import TORCH_TRACE_AFTER
    except ImportError:
        from keras_posenc._compile import TORCH_TRACE_AFTER
    return TORCH_TRACE_AFTER


def case_in_subprocess(script: str, implementation: str, length: int, repeats: int) -> dict:
    """The row ``script --case IMPLEMENTATION LENGTH --repeats N`` prints last, run in a fresh
    process (so its peak memory is the case's alone), or a row with the error's last lines.

    The memory benchmarks' one way to run a case (relative_attention.py, training_step.py).
    """
    command = [sys.executable, os.path.abspath(script), "--case", implementation, str(length)]
    command += ["--repeats", str(repeats)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-3:]
        return {"implementation": implementation, "length": length, "error": " | ".join(tail)}
    return json.loads(result.stdout.strip().splitlines()[-1])
