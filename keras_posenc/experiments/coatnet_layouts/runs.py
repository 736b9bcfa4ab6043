"""Training and testing: one layout's seeds (`train_and_evaluate`), the whole grid
(`layout_experiment`)."""

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
from keras_posenc.experiments._settings import merge_settings
from keras_posenc.experiments.coatnet_layouts.models import (
    build_model,
    check_positions,
    trainable_parameters,
)
from keras_posenc.experiments.coatnet_layouts.results import _pair, merge_results, write_results
from keras_posenc.experiments.coatnet_layouts.settings import (
    FULL_SETTINGS,
    LAYOUTS,
    MODEL_SETTINGS,
    QUICK_SETTINGS,
    TASK_SETTINGS,
)
from keras_posenc.experiments.coatnet_layouts.task import texture_layout_data
from keras_posenc.zoo.coatnet import parse_layout


def _accuracy(model: keras.Model, images: np.ndarray, labels: np.ndarray, batch: int) -> float:
    logits = model.predict(images, batch_size=batch, verbose=0)
    return float((np.asarray(logits).argmax(-1) == labels).mean())


def _reset_optimizer(optimizer: keras.optimizers.Optimizer) -> None:
    """Zeroes every optimizer variable (moments and the step count): a fresh optimizer."""
    for variable in optimizer.variables:
        variable.assign(ops.zeros(variable.shape, variable.dtype))


def train_and_evaluate(
    layout: str,
    seeds: Sequence[int] = (0,),
    train_images: int = 2048,
    test_images: int = 1024,
    epochs: int = 8,
    batch_size: int = 32,
    learning_rate: float = 2e-3,
    verbose: int = 0,
    model_settings: dict[str, Any] | None = None,
    task_settings: dict[str, Any] | None = None,
    positions: str = "table",
) -> list[dict[str, Any]]:
    """Trains one layout from scratch once per seed and measures its accuracy.

    ``positions``: the Transformer stages' position encoding, one of `POSITIONS`.

    Training: AdamW (weight decay 0.05, gradient norm clipped at 1; the
    learning rate warms up linearly to ``learning_rate`` over the first
    tenth of the steps, then decays to zero along a cosine) for ``epochs``
    epochs over ``train_images`` images drawn with the seed, shuffled each
    epoch in an order set by the seed, from initial weights set by the seed.
    Testing: ``test_images`` images that are the same for every seed and
    layout. The seeds share one compiled model (compiling takes longer than
    training a seed): before each seed its weights are set to those of a
    model freshly built with that seed and the optimizer's variables are
    zeroed, which is training from scratch.

    Returns:
        One ``{"seed": int, "loss": float, "test_accuracy": float,
        "train_accuracy": float, "params": int, "seconds": float}`` per seed
        (``loss``: the last epoch's mean training loss); the training accuracy is
        measured after training, in inference mode, on the training images;
        the first seed's seconds include compiling.
    """
    check_positions("train_and_evaluate", layout, positions)
    model_settings = {**MODEL_SETTINGS, **(model_settings or {})}
    task_settings = {**TASK_SETTINGS, **(task_settings or {})}
    keras.backend.clear_session()  # no graph or name build-up across the layouts
    size = model_settings["image_size"]
    # The test images: one seed for every run, far from the training seeds.
    test, test_labels = texture_layout_data(test_images, size, seed=[10_000, 2], **task_settings)
    steps = epochs * math.ceil(train_images / batch_size)
    warmup = max(1, steps // 10)
    # Predictions in batches of up to 256 images of one shape: a single compilation.
    evaluation_batch = min(256, test_images, train_images)
    model = None
    runs = []
    for seed in seeds:
        start = time.perf_counter()
        images, labels = texture_layout_data(train_images, size, seed=[seed, 1], **task_settings)
        initial = build_model(layout, seed=seed, positions=positions, **model_settings)
        if model is None:
            model = initial
            schedule = keras.optimizers.schedules.CosineDecay(
                0.0, max(1, steps - warmup), warmup_target=learning_rate, warmup_steps=warmup
            )
            model.compile(
                optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05, clipnorm=1.0),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
        else:
            model.set_weights(initial.get_weights())
            _reset_optimizer(model.optimizer)
        keras.utils.set_random_seed(seed)  # the order of the training images
        history = model.fit(images, labels, batch_size=batch_size, epochs=epochs, verbose=verbose)
        runs.append(
            {
                "seed": seed,
                "loss": float(history.history["loss"][-1]),
                "test_accuracy": _accuracy(model, test, test_labels, evaluation_batch),
                "train_accuracy": _accuracy(model, images, labels, evaluation_batch),
                "params": trainable_parameters(model),
                "seconds": time.perf_counter() - start,
            }
        )
    return runs


def layout_experiment(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    layouts: Sequence[str] = LAYOUTS,
    verbose: int = 1,
    positions: Sequence[str] = ("table",),
    merge: bool = False,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Trains the study's CoAtNet in every layout, position encoding and seed and tests it.

    Args:
        quick: the quick run (one seed, one block per stage, 128 training
            images, one epoch; about a minute of CPU time, see the command
            line page; a smoke test whose numbers are not the study's)
            instead of the full one (seeds 0, 1, 2, 2048 training images,
            8 epochs, 1024 test images).
        out: a folder to write ``coatnet_layouts.csv``, ``.md`` and ``.png``
            (accuracy per layout, drawn with matplotlib, the ``experiments``
            extra; `redraw` draws it again from the CSV) into; created if missing.
        seeds: seeds; default ``(0,)`` quick, ``(0, 1, 2)`` full.
        layouts: a selection of layouts (default the paper's four, `LAYOUTS`).
        positions: the Transformer stages' position encodings, some of
            `POSITIONS` (default ``("table",)``, CoAtNet's relative bias table);
            each layout is trained with each (a layout without a Transformer
            stage takes ``"table"`` only).
        merge: with ``out``, merge the rows into the ``coatnet_layouts.csv``
            already there (`merge_results`: a row of the same layout and
            positions is replaced, the others kept) and write the table and
            the figure of all of them.
        verbose: 1 prints a summary line per layout, 2 also Keras' one line
            per training (its progress bar is not used: the first step's
            estimate includes compiling and was off by minutes); 0 prints nothing.
        **settings: overrides of `QUICK_SETTINGS` / `FULL_SETTINGS`
            (``train_images``, ``test_images``, ``epochs``, ``batch_size``,
            ``learning_rate``), `MODEL_SETTINGS` and `TASK_SETTINGS`.

    Returns:
        One dict per layout and position encoding (of this run, not the
        merged file) with the keys of ``COLUMNS``: the mean test
        accuracy over seeds, its standard deviation, minimum and maximum,
        the mean training accuracy and its standard deviation, the number of
        seeds, trainable parameters, training images, epochs and the
        seconds of all the layout's runs (compiling included).

    Raises:
        ImportError: with ``out`` but without matplotlib, before any training.
    """
    caller = "layout_experiment"
    if out is not None:  # fail before the training, not after it
        require_matplotlib(caller)
    model_settings, budget, task_settings = merge_settings(
        caller, quick, settings, QUICK_SETTINGS, FULL_SETTINGS, MODEL_SETTINGS, TASK_SETTINGS
    )
    layouts = [layouts] if isinstance(layouts, str) else list(layouts)
    for layout in layouts:
        try:
            parse_layout(layout)
        except ValueError:
            raise ValueError(
                f"{caller}: `layouts` must be layouts of stages S1..S4 such as "
                f"{', '.join(map(repr, LAYOUTS))} (four of C/T joined by '-'); got {layout!r}."
            ) from None
    if not layouts:
        raise ValueError(f"{caller}: `layouts` must not be empty.")
    seeds = tuple(seeds if seeds is not None else ((0,) if quick else (0, 1, 2)))
    if not seeds:
        raise ValueError(f"{caller}: `seeds` must not be empty.")
    positions = [positions] if isinstance(positions, str) else list(positions)
    if not positions:
        raise ValueError(f"{caller}: `positions` must not be empty.")
    grid = [(layout, position) for layout in layouts for position in positions]
    for layout, position in grid:
        check_positions(caller, layout, position)

    rows = []
    for layout, position in grid:
        runs = train_and_evaluate(
            layout,
            seeds,
            verbose=2 if verbose >= 2 else 0,
            model_settings=model_settings,
            task_settings=task_settings,
            positions=position,
            **budget,
        )
        test = np.array([run["test_accuracy"] for run in runs])
        train = np.array([run["train_accuracy"] for run in runs])
        row = {
            "layout": layout,
            "positions": position,
            "params": runs[0]["params"],
            "test_accuracy": float(test.mean()),
            "test_accuracy_std": float(test.std()),
            "test_accuracy_min": float(test.min()),
            "test_accuracy_max": float(test.max()),
            "train_accuracy": float(train.mean()),
            "train_accuracy_std": float(train.std()),
            "seeds": len(seeds),
            "train_images": budget["train_images"],
            "epochs": budget["epochs"],
            "seconds": float(sum(run["seconds"] for run in runs)),
        }
        rows.append(row)
        if verbose:
            print(
                f"{layout} {position}: test accuracy {_pair(row, 'test_accuracy')}, train accuracy "
                f"{_pair(row, 'train_accuracy')} ({row['params']:,} params, {len(seeds)} "
                f"seed(s), {row['seconds']:.0f} s)",
                flush=True,
            )
    if out is not None:
        write_results(merge_results(out, rows) if merge else rows, out)
    return rows
