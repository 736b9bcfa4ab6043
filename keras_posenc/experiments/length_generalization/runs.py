"""The study's runs: training, testing at each length, and the grid of encodings, tasks and seeds.

The grid's trainings are independent: ``workers`` runs them in parallel
processes (`_workers.run_jobs`, which imports `train_and_evaluate` from this
module by name), with one progress bar over them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.experiments._figures import require_matplotlib
from keras_posenc.experiments._scaled_rope import SCALED_ROPE
from keras_posenc.experiments._settings import merge_settings
from keras_posenc.experiments._workers import run_jobs
from keras_posenc.experiments.length_generalization.models import (
    ENCODINGS,
    MODEL_SETTINGS,
    TRAINED_ENCODINGS,
    LengthGeneralizationModel,
    build_model,
    scaled_rope,
)
from keras_posenc.experiments.length_generalization.results import write_results
from keras_posenc.experiments.length_generalization.tables import _cell
from keras_posenc.experiments.length_generalization.tasks import TASK_SETTINGS, TASKS, task_data
from keras_posenc.layers._checks import check_choice, check_int

# The training and evaluation budget. Full: 171 trainings (19 trained encodings,
# 3 tasks, 3 seeds); the recorded run's times are on docs/experiments/length-generalization.md.
FULL_SETTINGS = {
    "train_steps": 1000,
    "batch_size": 32,
    "learning_rate": 3e-3,
    "test_lengths": (64, 128, 256, 512, 1024),
    "eval_positions": 4096,
}
# Quick: every encoding on the relative task, one seed, one block instead of
# two, a short training at a higher learning rate (much of its time is compiling
# the 19 models; measured times in docs/data/cli_timings.csv). A smoke test:
# its numbers are not the study's.
QUICK_SETTINGS = {
    "num_layers": 1,
    "train_steps": 200,
    "batch_size": 32,
    "learning_rate": 1e-2,
    "test_lengths": (64, 128, 256, 512, 1024),
    "eval_positions": 256,
}
QUICK_TASKS = ("copy_back",)

# Tokens per evaluation batch: 8 sequences at L = 1024, whose attention
# logits (8, 2, 1024, 1024) in float32 take 64 MiB.
_EVAL_TOKENS_PER_BATCH = 8192


def evaluate(
    model: LengthGeneralizationModel,
    task: str,
    length: int,
    num_positions: int = 4096,
    seed: int = 0,
    **task_settings: Any,
) -> float:
    """Token accuracy on positions ``length // 2 .. length - 1`` of fresh sequences.

    Enough sequences are drawn to cover at least ``num_positions`` measured
    positions; they are run eagerly in batches of about 8192 tokens.

    Args:
        model: a trained `LengthGeneralizationModel`.
        task: one of `TASKS`.
        length: the test length.
        num_positions: at least this many scored positions are measured.
        seed: seed of the test sequences.
        **task_settings: ``shift`` and ``position`` of `task_data`.

    Returns:
        The fraction of scored positions whose most likely token is the answer.

    Raises:
        ValueError: the model cannot run ``length`` (learned absolute
            positions beyond their table), before anything is computed.
    """
    model.check_length(length)
    half = length // 2
    count = max(1, math.ceil(num_positions / (length - half)))
    tokens, labels, weights = task_data(
        task, count, length, seed=seed, vocabulary_size=model.classifier.units, **task_settings
    )
    batch = max(1, _EVAL_TOKENS_PER_BATCH // length)
    correct = total = 0.0
    for start in range(0, count, batch):
        # An eager call, not predict: no compilation for each new length.
        logits = ops.convert_to_numpy(model(tokens[start : start + batch], training=False))
        hits = logits.argmax(-1) == labels[start : start + batch]
        w = weights[start : start + batch, half:]
        correct += float((hits[:, half:] * w).sum())
        total += float(w.sum())
    return correct / total


def train_and_evaluate(
    encoding: str,
    task: str,
    seed: int = 0,
    train_steps: int = 1000,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    test_lengths: Sequence[int] = (64, 128, 256, 512, 1024),
    eval_positions: int = 4096,
    verbose: int = 0,
    model_settings: dict[str, Any] | None = None,
    task_settings: dict[str, Any] | None = None,
    scaled: Sequence[str] = (),
) -> dict[str, Any]:
    """Trains one model (one encoding, task and seed) and tests it at each length.

    Training: ``train_steps`` Adam steps (gradient norm clipped at 1; the
    learning rate warms up linearly to ``learning_rate`` over the first tenth,
    then decays to zero along a cosine) on batches of ``batch_size`` fresh
    length-``train_length`` sequences (``seed`` sets the initial weights and
    the training data), compiled once. Testing: `evaluate` on data that is the
    same for every seed and encoding.

    Args:
        encoding: one of `TRAINED_ENCODINGS`.
        scaled: for ``"rope"``, the `SCALED_ROPE` encodings to test too, from
            the same trained weights (`scaled_rope`).

    Returns:
        ``{"accuracy": {encoding: {length: accuracy or None}}, "params": int,
        "seconds": float}``, with one entry per encoding (``encoding`` and
        those of ``scaled``); ``None`` where the model cannot run the length.
    """
    check_choice("train_and_evaluate", "encoding", encoding, TRAINED_ENCODINGS)
    if scaled and encoding != "rope":
        raise ValueError(
            f"train_and_evaluate: `scaled` rotations are tested on 'rope' models only; "
            f"got encoding={encoding!r}, scaled={list(scaled)!r}."
        )
    model_settings = {**MODEL_SETTINGS, **(model_settings or {})}
    task_settings = {**TASK_SETTINGS, **(task_settings or {})}
    keras.backend.clear_session()  # no graph or name build-up across 153 models
    start = time.perf_counter()
    model = build_model(encoding, seed=seed, **model_settings)
    # Linear warm-up over the first tenth, then cosine decay to zero: the end of
    # training settles, so the seeds differ less than with a constant rate.
    warmup = max(1, train_steps // 10)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, max(1, train_steps - warmup), warmup_target=learning_rate, warmup_steps=warmup
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    tokens, labels, weights = task_data(
        task,
        train_steps * batch_size,
        model_settings["train_length"],
        seed=[seed, TASKS.index(task)],
        vocabulary_size=model_settings["vocabulary_size"],
        **task_settings,
    )
    model.fit(
        tokens,
        labels,
        sample_weight=weights,
        batch_size=batch_size,
        epochs=1,
        shuffle=False,
        verbose=verbose,
    )
    accuracy: dict[str, dict[int, float | None]] = {name: {} for name in (encoding, *scaled)}
    for length in test_lengths:
        if model.max_length is not None and length > model.max_length:
            accuracy[encoding][length] = None  # it cannot run: reported as n/a, never guessed
            continue
        test = {"task": task, "length": length, "num_positions": eval_positions}
        test.update(seed=10_000 + length, **task_settings)
        accuracy[encoding][length] = evaluate(model, **test)
        for name in scaled:
            accuracy[name][length] = evaluate(scaled_rope(model, name, length), **test)
    return {
        "accuracy": accuracy,
        "params": model.count_params(),
        "seconds": time.perf_counter() - start,
    }


def length_generalization_experiment(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    encodings: Sequence[str] = ENCODINGS,
    tasks: Sequence[str] | None = None,
    verbose: int = 1,
    workers: int = 1,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Trains every encoding on every task and seed, tests it at every length.

    Args:
        quick: the quick run (the relative task only, one seed, models of
            one block, 200 training steps at learning rate 1e-2, 256 measured
            positions per length; about a minute on 2 cores with 2 workers,
            see the command line page) instead of the full one (the three
            tasks, seeds 0, 1, 2, two blocks, 1000 steps at 3e-3, 4096
            positions; see the experiment's page for its time).
        out: a folder to write ``length_generalization.csv``, ``.md`` and
            ``.png`` (accuracy against test length, drawn with matplotlib, the
            ``experiments`` extra; `redraw` draws it again from the CSV) into;
            created if missing.
        seeds: seeds; default ``(0,)`` quick, ``(0, 1, 2)`` full.
        encodings: a selection of `ENCODINGS`. A `SCALED_ROPE` encoding trains
            the `rope` models it is computed from (reported only if selected).
        tasks: a selection of `TASKS`; default ``("copy_back",)`` quick, all full.
        verbose: 1 prints a progress bar over the trainings and then a summary
            line per encoding, 2 also Keras' one line per training (with one
            worker; its progress bar is not used: the first step's estimate
            includes compiling and was off by minutes); 0 prints nothing.
        workers: trainings run at once, each in its own process (1: all in
            this one). The results do not depend on it: every training seeds
            its own weights and data.
        **settings: overrides of `QUICK_SETTINGS` / `FULL_SETTINGS`
            (``train_steps``, ``batch_size``, ``learning_rate``,
            ``test_lengths``, ``eval_positions``), `MODEL_SETTINGS` and
            `TASK_SETTINGS`.

    Returns:
        One dict per (task, encoding, test length), in the order of ``tasks``
        and ``encodings``, with the keys of ``COLUMNS``: the mean accuracy over
        seeds, its standard deviation, minimum and maximum (all ``None`` with
        the note ``"n/a"`` where the model cannot run the length), the number
        of seeds, parameters, blocks and training steps.

    Raises:
        ImportError: with ``out`` but without matplotlib, before any training.
    """
    caller = "length_generalization_experiment"
    if out is not None:  # fail before the training, not after it
        require_matplotlib(caller)
    model_settings, budget, task_settings = merge_settings(
        caller, quick, settings, QUICK_SETTINGS, FULL_SETTINGS, MODEL_SETTINGS, TASK_SETTINGS
    )
    encodings = [encodings] if isinstance(encodings, str) else list(encodings)
    if tasks is None:
        tasks = QUICK_TASKS if quick else TASKS
    tasks = [tasks] if isinstance(tasks, str) else list(tasks)
    for name, values, allowed in (("encodings", encodings, ENCODINGS), ("tasks", tasks, TASKS)):
        wrong = [v for v in values if v not in allowed]
        if wrong or not values:
            raise ValueError(
                f"{caller}: `{name}` must be a non-empty selection of {list(allowed)}; "
                f"received {values!r}."
            )
    workers = check_int(caller, "workers", workers, 1)
    seeds = tuple(seeds if seeds is not None else ((0,) if quick else (0, 1, 2)))
    if not seeds:
        raise ValueError(f"{caller}: `seeds` must not be empty.")
    budget["test_lengths"] = tuple(budget["test_lengths"])
    scaled = [name for name in encodings if name in SCALED_ROPE]
    trained = [
        name for name in TRAINED_ENCODINGS if name in encodings or (scaled and name == "rope")
    ]
    jobs = [
        {
            "encoding": encoding,
            "task": task,
            "seed": seed,
            "verbose": 2 if verbose >= 2 and workers == 1 else 0,
            "model_settings": model_settings,
            "task_settings": task_settings,
            "scaled": tuple(scaled) if encoding == "rope" else (),
            **budget,
        }
        for encoding in trained
        for task in tasks
        for seed in seeds
    ]
    start = time.perf_counter()
    results = run_jobs(
        train_and_evaluate, jobs, workers=workers, progress=verbose >= 1, quiet=verbose < 2
    )
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for job, result in zip(jobs, results):
        for name, accuracy in result["accuracy"].items():
            runs.setdefault((name, job["task"]), []).append(
                {"accuracy": accuracy, "params": result["params"]}
            )

    rows = []
    for task in tasks:
        for encoding in encodings:
            rows.extend(_rows(task, encoding, runs[encoding, task], budget, model_settings))
    if verbose:
        elapsed = time.perf_counter() - start
        for encoding in encodings:
            cells = [
                f"{task} "
                + ", ".join(
                    f"{r['test_length']}: {_cell(r)}"
                    for r in rows
                    if r["encoding"] == encoding and r["task"] == task
                )
                for task in tasks
            ]
            params = next(r["params"] for r in rows if r["encoding"] == encoding)
            print(f"{encoding}: " + " | ".join(cells) + f" ({params:,} params)", flush=True)
        print(
            f"{len(jobs)} trainings ({len(seeds)} seed(s)) in {elapsed:.0f} s with "
            f"{workers} worker(s)",
            flush=True,
        )
    if out is not None:
        write_results(rows, out, vocabulary_size=model_settings["vocabulary_size"])
    return rows


def _rows(
    task: str,
    encoding: str,
    runs: Sequence[dict[str, Any]],
    budget: dict[str, Any],
    model_settings: dict[str, Any],
) -> list[dict[str, Any]]:
    """The result rows of one encoding on one task: the seeds' mean, spread and range."""
    rows = []
    for length in budget["test_lengths"]:
        values = [run["accuracy"][length] for run in runs]
        row = {
            "task": task,
            "encoding": encoding,
            "test_length": length,
            "seeds": len(runs),
            "params": runs[0]["params"],
            "num_layers": model_settings["num_layers"],
            "train_steps": budget["train_steps"],
        }
        if any(v is None for v in values):
            row.update(accuracy=None, accuracy_std=None, accuracy_min=None)
            row.update(accuracy_max=None, note="n/a")
        else:
            values = np.array(values)
            row.update(
                accuracy=float(values.mean()),
                accuracy_std=float(values.std()),
                accuracy_min=float(values.min()),
                accuracy_max=float(values.max()),
                note="",
            )
        rows.append(row)
    return rows
