"""`evaluate_lengths`: a language model's next-token loss and accuracy at each context length.

The data becomes a stream of token ids (a text through a tokenizer, a file's text, ids given)
or, for a synthetic task of the length study, generated sequences with their answers. Each
context length ``L`` cuts the stream into windows of ``L + 1`` ids, every ``L`` ids (no
overlap: every token is scored once per length, as `keras_posenc.tokenizers.next_token_windows`
cuts them for training); the model runs teacher-forced on each window's first ``L`` ids, a
batch at a time, and only the per-position losses and hits of a batch leave the compiled
function, never its ``(batch, L, vocab)`` logits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import tokenizers
from keras_posenc.backend import compile_function
from keras_posenc.experiments.length_evaluation.evaluation import LengthEvaluation
from keras_posenc.experiments.length_generalization.models import MODEL_SETTINGS
from keras_posenc.experiments.length_generalization.tasks import TASK_SETTINGS, TASKS, task_data
from keras_posenc.layers._checks import check_int, check_ints

WHO = "evaluate_lengths"
# Sequences generated per length for a synthetic task when `max_windows` is None.
TASK_WINDOWS = 32


def evaluate_lengths(
    model: Any,
    data: Any,
    lengths: Sequence[int] | int,
    tokenizer: Any = None,
    batch_size: int = 8,
    max_windows: int | None = None,
    bins: str | Sequence[int] = "log2",
    seed: int = 0,
    name: str | None = None,
) -> LengthEvaluation:
    """Next-token loss (nats) and top-1 accuracy of ``model`` at each context length.

    Every length ``L`` in ``lengths`` is measured on windows of ``L`` input tokens, each
    position ``t`` scored on the token at ``t + 1`` (log-softmax of the logits in float32):
    the mean over every position, over the last half (``L // 2 .. L - 1``: the positions a
    context of half the length never reaches) and per bucket of positions (``bins``), so
    that loss against position can be drawn for each ``L``. A model whose ``max_length``
    (its position table) is shorter than ``L`` is not run there: the row says why.

    Args:
        model: a zoo language model (`keras_posenc.zoo.language_model.LanguageModel`:
            ``decoder_lm_*``, ``music_transformer_base``, ``convs2s_lm``), or any callable
            ``model(token_ids) -> logits`` of shape ``(batch, time, vocab)`` (its
            ``variables``, where it has them, are what the compiled scoring reads).
        data: what to score on:
            a ``str``, a text, tokenized with ``tokenizer`` (or the model's), after the
            tokenizer's start token; but a string that is the name of one of the length
            study's tasks (``"copy_back"``, ``"copy_position"``, ``"copy_recent"``,
            `keras_posenc.experiments.length_generalization.task_data`, its settings and
            10 token ids) is that task: ``max_windows`` (default 32) random sequences per
            length, each position ``t`` scored on the task's answer at ``t`` (the study's
            convention) where it has one;
            an ``os.PathLike`` (e.g. ``pathlib.Path``): a UTF-8 text file, read as a text;
            a 1-D array (or list) of integer token ids, scored as they are.
        lengths: the context lengths ``L`` (each >= 1), e.g. 1x to 16x the training length.
        tokenizer: for text: a keras-hub tokenizer, ``"byte"``
            (`keras_posenc.tokenizers.ByteTokenizer`) or None (the model's ``tokenizer``).
        batch_size: windows per call of the model.
        max_windows: at most this many windows per length, spread evenly over the data
            (None: every window).
        bins: the position buckets: ``"log2"`` (``0-1, 2-3, 4-7, 8-15, ...``) or the first
            position of each bucket (increasing, from 0).
        seed: the synthetic task's sequences (each length draws from ``(seed, L)``).
        name: the model's name in tables and figures (default ``model.name``).

    Returns:
        A `LengthEvaluation` (``.rows``, ``.positions``, ``.markdown()``, ``.to_csv(path)``,
        ``.figure()``).

    Raises:
        ValueError: for a length below 1, text data without a tokenizer, data shorter than
            ``L + 1`` tokens, ids outside the model's vocabulary, a task whose tokens the
            model does not have, or ``bins`` that are no buckets.
        TypeError: for data of another type.

    Examples:

        >>> from keras_posenc import zoo
        >>> model = zoo.create("decoder_lm_tiny", num_layers=1)  # the byte tokenizer
        >>> result = evaluate_lengths(model, "The quick brown fox. " * 8, lengths=(8, 32))
        >>> [(row["length"], row["windows"], row["tokens"]) for row in result.rows]
        [(8, 21, 168), (32, 5, 160)]
        >>> [p["bucket"] for p in result.positions if p["length"] == 32]
        ['0-1', '2-3', '4-7', '8-15', '16-31']
        >>> 5.0 < result.rows[0]["loss"] < 6.0  # untrained: about ln(259) = 5.56
        True
    """
    lengths = _check_lengths(lengths)
    batch_size = check_int(WHO, "batch_size", batch_size, 1)
    if max_windows is not None:
        max_windows = check_int(WHO, "max_windows", max_windows, 1)
    seed = check_int(WHO, "seed", seed, 0)
    starts = _bucket_starts(bins, max(lengths))
    if not callable(model):
        raise TypeError(
            f"{WHO}: `model` must be a language model (called as model(token_ids) -> logits), "
            f"got {type(model).__name__}."
        )
    limit = getattr(model, "max_length", None)
    measured = [n for n in lengths if limit is None or n <= limit]
    source = _source(model, data, tokenizer, measured, max_windows, seed)
    # Not traced on PyTorch (eager under torch.no_grad): a window's call is large enough
    # that tracing saves little, and torch.export would be tried once per shape.
    variables = list(getattr(model, "variables", ()))
    score = compile_function(_scorer(model), variables, traceable=False)
    label = getattr(model, "name", type(model).__name__) if name is None else str(name)
    first = {"model": label, "data": source.description}
    rows, positions = [], []
    for length in lengths:
        if length not in measured:
            note = f"not run: L = {length} is beyond the model's max_length ({limit})"
            rows.append({**first, **_skipped_row(length, note)})
            continue
        inputs, targets, weights = source(length)
        sums = _position_sums(score, inputs, targets, weights, batch_size)
        rows.append({**first, **_length_row(length, len(inputs), *sums)})
        positions.extend({**first, **row} for row in _bucket_rows(length, starts, *sums))
    return LengthEvaluation(rows, positions)


def _check_lengths(lengths: Any) -> tuple[int, ...]:
    if isinstance(lengths, int | np.integer) and not isinstance(lengths, bool):
        lengths = (lengths,)
    values = check_ints(WHO, "lengths", lengths, minimum=1, what=" (context lengths)")
    if not values:
        raise ValueError(f"{WHO}: `lengths` must name at least one length, got {lengths!r}.")
    return tuple(sorted(set(values)))


def _bucket_starts(bins: Any, longest: int) -> tuple[int, ...]:
    """The first position of each bucket below ``longest``."""
    if isinstance(bins, str) and bins == "log2":
        return (0, *(2**k for k in range(1, max(1, math.ceil(math.log2(longest))))))
    starts = None if isinstance(bins, str) else check_ints(WHO, "bins", bins, minimum=0)
    if not starts or starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:])):
        raise ValueError(
            f"{WHO}: `bins` must be 'log2' or the first position of each bucket, increasing "
            f"from 0 (e.g. (0, 16, 64)), got {bins!r}."
        )
    return starts


class _Source:
    """``source(L) -> (inputs, targets, weights)``, the windows of one length, and what
    the data was (``description``)."""

    def __init__(self, description: str, windows: Any) -> None:
        self.description = description
        self._windows = windows

    def __call__(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._windows(length)


def _source(
    model: Any, data: Any, tokenizer: Any, lengths: list[int], max_windows: int | None, seed: int
) -> _Source:
    vocab = getattr(model, "vocab_size", None)
    if isinstance(data, str) and data in TASKS:
        return _task_source(data, vocab, max_windows, seed)
    if isinstance(data, os.PathLike):
        with open(data, encoding="utf-8") as handle:
            text = handle.read()
        ids = _tokenize(model, text, tokenizer, f"data={os.fspath(data)!r}")
        description = f"file {os.path.basename(os.fspath(data))}"
    elif isinstance(data, str):
        ids = _tokenize(model, data, tokenizer, "text `data`")
        description = "text"
    elif isinstance(data, np.ndarray | list | tuple):
        ids = _token_array(data, vocab)
        description = "token ids"
    else:
        raise TypeError(
            f"{WHO}: `data` must be a text (str), a text file's path (os.PathLike), a 1-D "
            f"array of token ids or one of the tasks {list(TASKS)}, got {type(data).__name__}."
        )
    for length in lengths:
        if ids.size < length + 1:
            raise ValueError(
                f"{WHO}: `data` must give at least L + 1 = {length + 1} tokens for the "
                f"length L = {length}, got {ids.size} tokens."
            )

    def windows(length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = tokenizers.windows(ids, length + 1, length)
        if max_windows is not None and len(rows) > max_windows:
            rows = rows[np.unique(np.linspace(0, len(rows) - 1, max_windows).round().astype(int))]
        return rows[:, :-1], rows[:, 1:], np.ones(rows[:, 1:].shape, "float32")

    return _Source(f"{description}, {ids.size} tokens", windows)


def _tokenize(model: Any, text: str, tokenizer: Any, what: str) -> np.ndarray:
    chosen = tokenizers.get(tokenizer, WHO)
    chosen = getattr(model, "tokenizer", None) if chosen is None else chosen
    if chosen is None:
        raise ValueError(
            f"{WHO}: `tokenizer` must be given for {what}, as the model has none "
            "(tokenizer='byte' or a keras_hub tokenizer), or pass token ids; got None."
        )
    ids = tokenizers.text_ids(chosen, text)
    _check_vocabulary(ids, getattr(model, "vocab_size", None), "the tokenizer's ids")
    return ids


def _token_array(data: Any, vocab: int | None) -> np.ndarray:
    ids = np.asarray(data)
    if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
        raise ValueError(
            f"{WHO}: token ids in `data` must be a 1-D array of integers, got shape "
            f"{ids.shape} of {ids.dtype}."
        )
    _check_vocabulary(ids, vocab, "`data`")
    return ids.astype("int32")


def _check_vocabulary(ids: np.ndarray, vocab: int | None, what: str) -> None:
    if vocab is not None and ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(
            f"{WHO}: {what} must be token ids in [0, {vocab}) (the model's vocab_size), got "
            f"ids from {ids.min()} to {ids.max()}."
        )


def _task_source(task: str, vocab: int | None, max_windows: int | None, seed: int) -> _Source:
    task_vocab = MODEL_SETTINGS["vocabulary_size"]
    if vocab is not None and vocab < task_vocab:
        raise ValueError(
            f"{WHO}: `model` must predict the {task_vocab} token ids of the task "
            f"data={task!r} (vocab_size >= {task_vocab}), got vocab_size {vocab}."
        )
    count = TASK_WINDOWS if max_windows is None else max_windows

    def windows(length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return task_data(task, count, length, (seed, length), task_vocab, **TASK_SETTINGS)

    return _Source(f"task {task}, seed {seed}", windows)


def _scorer(model: Any) -> Any:
    """``score(inputs, targets) -> (loss, hit)``, each ``(batch, L)``: what leaves the
    compiled function instead of the logits."""

    def score(inputs: Any, targets: Any) -> tuple[Any, Any]:
        logits = ops.cast(model(inputs, training=False), "float32")
        picked = ops.take_along_axis(
            ops.log_softmax(logits, axis=-1), ops.expand_dims(targets, -1), axis=-1
        )
        hit = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), targets)
        return -picked[..., 0], hit

    return score


def _position_sums(
    score: Any, inputs: np.ndarray, targets: np.ndarray, weights: np.ndarray, batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position: the weighted sums of loss and hits, and the weights' sum."""
    length = inputs.shape[1]
    loss, hits, count = (np.zeros(length) for _ in range(3))
    for start in range(0, len(inputs), batch_size):
        batch = slice(start, start + batch_size)
        rows = len(inputs[batch])
        # The last batch is padded to the others' size, so that one compiled shape serves
        # every batch of a length (jax.jit and tf.function trace once per shape).
        pad = ((0, batch_size - rows), (0, 0))
        padded = [np.pad(a[batch], pad).astype("int32") for a in (inputs, targets)]
        batch_loss, batch_hit = score(*(ops.convert_to_tensor(a) for a in padded))
        weight = weights[batch].astype("float64")
        loss += (keras.ops.convert_to_numpy(batch_loss)[:rows] * weight).sum(0)
        hits += (keras.ops.convert_to_numpy(batch_hit)[:rows] * weight).sum(0)
        count += weight.sum(0)
    return loss, hits, count


def _means(loss: np.ndarray, hits: np.ndarray, count: np.ndarray) -> tuple[Any, Any]:
    total = count.sum()
    if total == 0:
        return None, None
    return float(loss.sum() / total), float(hits.sum() / total)


def _length_row(
    length: int, windows: int, loss: np.ndarray, hits: np.ndarray, count: np.ndarray
) -> dict:
    mean_loss, accuracy = _means(loss, hits, count)
    half = slice(length // 2, length)
    last_loss, last_accuracy = _means(loss[half], hits[half], count[half])
    return {
        "length": length,
        "windows": windows,
        "tokens": int(count.sum()),
        "loss": mean_loss,
        "accuracy": accuracy,
        "loss_last_half": last_loss,
        "accuracy_last_half": last_accuracy,
        "perplexity": None if mean_loss is None else math.exp(mean_loss),
        "note": "",
    }


def _skipped_row(length: int, note: str) -> dict:
    row = _length_row(length, 0, *(np.zeros(length) for _ in range(3)))
    return {**row, "note": note}


def _bucket_rows(
    length: int, starts: Sequence[int], loss: np.ndarray, hits: np.ndarray, count: np.ndarray
) -> list[dict]:
    rows = []
    for index, start in enumerate(s for s in starts if s < length):
        end = min(starts[index + 1] if index + 1 < len(starts) else length, length) - 1
        part = slice(start, end + 1)
        mean_loss, accuracy = _means(loss[part], hits[part], count[part])
        rows.append({
            "length": length,
            "bucket": f"{start}-{end}" if end > start else str(start),
            "position_start": start,
            "position_end": end,
            "tokens": int(count[part].sum()),
            "loss": mean_loss,
            "accuracy": accuracy,
        })  # fmt: skip
    return rows
