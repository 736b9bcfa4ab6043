"""Independent training runs of a study, in this process or in parallel worker processes.

A study's grid (encodings x tasks x seeds) is a list of independent jobs,
each a call of one top-level function with keyword arguments that returns a
picklable result. `run_jobs` runs them in order in this process, or in
``workers`` fresh processes (``spawn``: no state of this process is shared;
each worker imports Keras with this process's backend), and shows one
progress bar (Keras' ``Progbar``) over the jobs.

Every job seeds its own model and data, so a result does not depend on the
worker that computed it or on the order of completion; only the wall-clock
time does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

import keras

from keras_posenc._quiet import stderr_captured
from keras_posenc.layers._checks import check_int


def run_jobs(
    function: Callable[..., Any],
    jobs: Sequence[dict[str, Any]],
    workers: int = 1,
    progress: bool = True,
    unit: str = "model",
    quiet: bool = True,
) -> list[Any]:
    """``[function(**job) for job in jobs]``, possibly in parallel, with a progress bar.

    Args:
        function: a module-level function (a worker process imports it by name).
        jobs: the keyword arguments of each call (picklable).
        workers: 1 runs the jobs here, one after the other; more runs them in
            that many ``spawn`` processes (at most one per job).
        progress: show a Keras progress bar over the jobs (done / total and
            the estimated time left), updated as each job ends.
        unit: what a job is, in the progress bar.
        quiet: with workers, their standard error (file descriptor 2, which
            they inherit) and this process's go to a temporary file while the
            pool runs, printed only if it fails: what TensorFlow writes while
            each worker imports it is hidden, as the command line hides it in
            its own process without ``--verbose``.

    Returns:
        The results, in the order of ``jobs`` whatever the order of completion.

    Raises:
        Whatever a job raised (the first in completion order); the jobs not
        yet started are cancelled.
    """
    workers = check_int("run_jobs", "workers", workers, 1)
    bar = keras.utils.Progbar(len(jobs), unit_name=unit) if progress and jobs else None
    results: list[Any] = [None] * len(jobs)
    if workers == 1 or len(jobs) <= 1:
        for index, job in enumerate(jobs):
            results[index] = function(**job)
            if bar is not None:
                bar.update(index + 1)
        return results
    context = multiprocessing.get_context("spawn")
    # The workers inherit the environment (KERAS_BACKEND) and read the same
    # keras.json, so they run this process's backend.
    with contextlib.ExitStack() as stack:
        if quiet:
            stack.enter_context(stderr_captured())
        pool = stack.enter_context(ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context))
        futures = {pool.submit(function, **job): index for index, job in enumerate(jobs)}
        try:
            for done, future in enumerate(as_completed(futures), start=1):
                results[futures[future]] = future.result()
                if bar is not None:
                    bar.update(done)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return results
