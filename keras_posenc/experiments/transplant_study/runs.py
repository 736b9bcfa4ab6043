"""The study's runs: train a RoPE model at a short length, transplant, fine-tune, evaluate."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import keras

from keras_posenc.experiments._settings import merge_settings
from keras_posenc.experiments.length_evaluation import LengthEvaluation, evaluate_lengths
from keras_posenc.experiments.length_generalization.tasks import (
    TASK_SETTINGS,
    TASKS,
    task_data,
)
from keras_posenc.experiments.transplant_study.results import write_results
from keras_posenc.experiments.transplant_study.transplants import TRANSPLANTS, VOCABULARY, WHO
from keras_posenc.layers._checks import check_choice, check_int
from keras_posenc.zoo.decoder_lm import DecoderLM
from keras_posenc.zoo.transplant import transplant

#: The model trained from scratch: decoder_lm_tiny's block on the tasks' 10 tokens.
MODEL_SETTINGS = {
    "hidden_dim": 64,
    "intermediate_dim": 172,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "num_layers": 2,
}
QUICK_SETTINGS = {
    "training_length": 32,
    "factors": (1, 2, 4, 8, 16),
    "train_sequences": 4096,
    "train_epochs": 3,
    "tune_sequences": 1024,
    "batch_size": 32,
    "learning_rate": 3e-3,
    "tune_learning_rate": 1e-3,
    "windows": 16,
}
FULL_SETTINGS = {
    **QUICK_SETTINGS,
    "training_length": 64,
    "train_sequences": 8192,
    "train_epochs": 4,
    "tune_sequences": 8192,
    "windows": 32,
}


def _fit(model: keras.Model, task: str, stage: int, seed: int, settings: dict) -> None:
    """Fits ``model`` on fresh sequences of ``task`` at the training length: stage 0 trains
    from scratch, stage 1 fine-tunes a transplant (its own data and learning rate)."""
    count = settings["tune_sequences"] if stage else settings["train_sequences"]
    data_seed = (seed, TASKS.index(task), stage)
    tokens, labels, weights = task_data(
        task, count, settings["training_length"], data_seed, VOCABULARY, **TASK_SETTINGS
    )
    rate = settings["tune_learning_rate"] if stage else settings["learning_rate"]
    model.compile(
        optimizer=keras.optimizers.Adam(rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(
        tokens,
        labels,
        sample_weight=weights,
        batch_size=settings["batch_size"],
        epochs=1 if stage else settings["train_epochs"],
        verbose=0,
    )


def train_base(task: str, seed: int, settings: dict) -> DecoderLM:
    """The RoPE model every transplant starts from, trained on ``task`` at the training
    length (the data's seed and the weights' follow ``seed``)."""
    keras.utils.set_random_seed(seed)
    model = DecoderLM(vocab_size=VOCABULARY, tokenizer=None, name="rope", **settings["model"])
    _fit(model, task, 0, seed, settings)
    return model


def run_transplant(
    base: keras.Model, name: str, task: str, seed: int, settings: dict, text: str | None = None
) -> tuple[keras.Model, list[str]]:
    """The transplant ``name`` of ``base`` (fine-tuned where the study tunes it: on the task,
    or on ``text`` with the model's tokenizer), and the paths of its new weights."""
    make, tuned = TRANSPLANTS[name]
    length, factor = settings["training_length"], max(settings["factors"])
    scheme = make(length, factor)
    if scheme is None:
        return base, []
    result = transplant(base, scheme, name=name)
    if tuned:
        keras.utils.set_random_seed(seed + 1)
        if text is None:
            _fit(result.model, task, 1, seed, settings)
        else:
            result.fine_tune(
                text,
                sequence_length=length,
                train="all",
                batch_size=settings["batch_size"],
                learning_rate=settings["tune_learning_rate"],
                verbose=0,
            )
    return result.model, result.new_weights


def _user_model(model: Any, text: Any) -> tuple[keras.Model, str]:
    """A user's language model (or its ``.keras`` file) and the text (or text file) to
    fine-tune and measure it on."""
    if text is None:
        raise ValueError(
            f"{WHO}: a given `model` needs `text` (a text, or the path of a text file) to "
            "fine-tune and measure it on; got text=None."
        )
    if isinstance(model, str | os.PathLike):
        model = keras.saving.load_model(model)
    if not getattr(model, "is_decoder_only", False):
        raise TypeError(
            f"{WHO}: `model` must be a zoo language model (e.g. a DecoderLM converted with "
            f"convert.from_keras_hub_preset) or its .keras file, got {type(model).__name__}."
        )
    if isinstance(text, os.PathLike) or (isinstance(text, str) and os.path.isfile(text)):
        with open(text, encoding="utf-8") as handle:
            text = handle.read()
    return model, text


def transplant_study(
    quick: bool = True,
    out: str | os.PathLike | None = None,
    seeds: Sequence[int] | None = None,
    transplants: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    verbose: int = 1,
    model: Any = None,
    text: Any = None,
    **settings: Any,
) -> list[dict[str, Any]]:
    """Trains a RoPE model on a task at a short length, transplants its position encoding
    every way of `TRANSPLANTS`, fine-tunes the replacements, and measures each at 1x-16x the
    training length (the package's docstring says what and why). Given a ``model`` of
    one's own, that model goes through the transplants instead, fine-tuned and measured on
    ``text``.

    Args:
        quick: the quick run (``copy_recent``, one seed, training length 32: about a
            minute on 2 cores; the command line page has its measured time) instead of the
            full one (``copy_back`` and ``copy_recent``, seeds 0, 1, 2, length 64; see the
            study's page).
        out: a folder for ``transplant.csv``, ``transplant.md`` and ``transplant.png``
            (created if missing).
        seeds: seeds; default ``(0,)`` quick or with a given ``model``, ``(0, 1, 2)`` full.
        transplants: a selection of `TRANSPLANTS` (default all).
        tasks: a selection of the length study's tasks; default ``("copy_recent",)`` quick,
            ``("copy_back", "copy_recent")`` full.
        verbose: 1 prints a line per model, 0 nothing.
        model: instead of the model trained here, a zoo language model (a `DecoderLM`
            converted from a keras-hub preset, ...) or its ``.keras`` file; its
            ``training_length`` setting is the length it was trained at (the test lengths
            are its multiples), its tokenizer reads ``text``. ``tasks`` are then unused.
        text: with ``model``: the text (or a text file's path) the replacements are
            fine-tuned on (one epoch of windows of the training length) and every model is
            measured on; it must hold more tokens than the longest test length.
        **settings: overrides of `QUICK_SETTINGS` / `FULL_SETTINGS` and `MODEL_SETTINGS`.

    Returns:
        One dict per task, seed, transplant and length: `LengthEvaluation`'s row (``loss``,
        ``accuracy``, their last halves, ...) with ``task``, ``seed``, ``transplant``,
        ``factor``, ``tuned`` and ``new_weights`` (how many).

    Raises:
        ValueError: for an unknown transplant, task or setting.
    """
    model_settings, settings, _ = merge_settings(
        WHO, quick, settings, QUICK_SETTINGS, FULL_SETTINGS, MODEL_SETTINGS, {}
    )
    settings["model"] = model_settings
    names = list(TRANSPLANTS) if transplants is None else list(transplants)
    for name in names:
        check_choice(WHO, "transplants", name, tuple(TRANSPLANTS))
    tasks = list(tasks or (("copy_recent",) if quick else ("copy_back", "copy_recent")))
    for task in tasks:
        check_choice(WHO, "tasks", task, TASKS)
    default = (0,) if quick or model is not None else (0, 1, 2)  # a given model: one run
    seeds = [check_int(WHO, "seeds", s, 0) for s in (seeds or default)]
    length = settings["training_length"]
    lengths = [length * factor for factor in settings["factors"]]
    given = None
    if model is not None:
        given, text = _user_model(model, text)
        tasks = ["text"]
    rows: list[dict[str, Any]] = []
    start = time.time()
    for task in tasks:
        for seed in seeds:
            base = given if given is not None else train_base(task, seed, settings)
            for name in names:
                trained, new = run_transplant(base, name, task, seed, settings, text)
                evaluation = evaluate_lengths(
                    trained,
                    task if given is None else text,
                    lengths,
                    max_windows=settings["windows"],
                    seed=seed,
                    name=name,
                )
                rows += _rows(evaluation, task, seed, name, length, new)
                if verbose:
                    last = evaluation.rows[-1]
                    print(
                        f"{task} seed {seed} {name:<12} accuracy (last half) at "
                        f"{lengths[0]}: {evaluation.rows[0]['accuracy_last_half']:.3f}, at "
                        f"{last['length']}: {last['accuracy_last_half']:.3f}  "
                        f"({time.time() - start:.0f} s)",
                        flush=True,
                    )
    if verbose:
        print(f"seeds {seeds}; {time.time() - start:.0f} s in all")
    if out is not None:
        write_results(rows, out)
    return rows


def _rows(
    evaluation: LengthEvaluation, task: str, seed: int, name: str, length: int, new: list
) -> list[dict]:
    _, tuned = TRANSPLANTS[name]
    return [
        {
            **row,
            "task": task,
            "seed": seed,
            "transplant": name,
            "factor": row["length"] / length,
            "tuned": tuned,
            "new_weights": len(new),
        }
        for row in evaluation.rows
    ]
