"""The search loops: greedy search and sampling in one compiled loop, beam search's
bookkeeping between compiled steps (beam candidates, finished hypotheses) in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

from keras_posenc.generation.compiled import _compiled
from keras_posenc.generation.rules import _banned_ngrams_numpy
from keras_posenc.generation.tasks import _owner, _Task


def _check_finite(model: Any, function: str, finite: np.ndarray) -> None:
    """Raises for rows whose logits hold NaN or Inf: they have no most likely token,
    and searching on would return padding (beam search: with the score -inf)."""
    if not finite.all():
        rows = np.flatnonzero(~finite)
        raise ValueError(
            f"{function}: the model's logits are not finite (NaN or Inf) for {len(rows)} of "
            f"{finite.size} sequences (e.g. row {rows[0]}): {_owner(model)}'s weights or the "
            "encoder state hold NaN or Inf, or the computation overflowed."
        )


def _run_loop(task: _Task, sampler: Any = None, seeds: tuple = ()) -> tuple:
    """Greedy search or sampling over ``task``: ``(chosen tokens, final random state)``."""
    model = task.model
    output = np.full((task.batch, task.steps), model.pad_id, dtype="int32")
    if task.batch == 0:  # nothing to decode (and an empty batch breaks some backends' kernels)
        return output, seeds
    loop = _compiled(model, "loop", task.use_cache, sampler, task.no_repeat_ngram_size)
    result = loop(
        ops.convert_to_tensor(0, "int32"),  # the position
        ops.convert_to_tensor(task.first, "int32"),
        task.cache(),
        ops.convert_to_tensor(output, "int32"),
        ops.convert_to_tensor(np.zeros(task.batch, bool)),  # finished
        ops.convert_to_tensor(np.ones(task.batch, bool)),  # finite logits so far
        (
            ops.convert_to_tensor(task.first, "int32"),
            ops.convert_to_tensor(task.forced, "int32"),
            ops.convert_to_tensor(task.forced_mask),
            ops.convert_to_tensor(task.min_index, "int32"),
        ),
        seeds,
        _compiled(model, "constants")(),
    )
    output, finite, seeds = result[3], result[5], result[7]
    _check_finite(model, task.function, np.asarray(ops.convert_to_numpy(finite)))
    return np.asarray(ops.convert_to_numpy(output), dtype="int32"), tuple(seeds)


def _beams(task: _Task, beam: int, length_penalty: float) -> list[list[tuple[float, np.ndarray]]]:
    """Every sentence's finished hypotheses ``(score, tokens)``, in the order they finished."""
    model, function = task.model, task.function
    batch, steps = task.batch, task.steps
    finished: list[list[tuple[float, np.ndarray]]] = [[] for _ in range(batch)]
    if batch == 0:  # nothing to decode (and an empty batch breaks some backends' kernels)
        return finished
    rows = batch * beam
    # Every hypothesis gets its own copy of its sentence's cache (encoder state included).
    cache = task.cache(repeat=beam)
    constants = _compiled(model, "constants")()
    step = _compiled(model, "reordering_step", task.use_cache)
    first = np.repeat(task.first, beam)
    scores = np.zeros((batch, beam))
    scores[:, 1:] = -np.inf  # at the start all beams are the same: keep one
    history = np.full((rows, steps), model.pad_id, dtype="int32")
    tokens = first.copy()
    order = np.arange(rows, dtype="int32")
    done = np.zeros(batch, bool)
    for index in range(steps):
        log_probs, cache = step(
            ops.convert_to_tensor(tokens, "int32"),
            cache,
            ops.convert_to_tensor(index, "int32"),
            ops.convert_to_tensor(order, "int32"),
            constants,
        )
        log_probs = np.asarray(ops.convert_to_numpy(log_probs), dtype="float64")
        _check_finite(model, function, np.isfinite(log_probs).all(axis=-1))
        vocab = log_probs.shape[-1]
        raw = log_probs.copy()
        log_probs[:, model.pad_id] = -np.inf
        log_probs[:, model.bos_id] = -np.inf
        if index < task.min_index:
            log_probs[:, model.eos_id] = -np.inf
        if task.no_repeat_ngram_size:
            for row in range(rows):
                sequence = np.concatenate([first[row : row + 1], history[row, :index]])
                log_probs[row, _banned_ngrams_numpy(sequence, task.no_repeat_ngram_size)] = -np.inf
        log_probs = log_probs.reshape(batch, beam, vocab)
        raw = raw.reshape(batch, beam, vocab)
        for b in np.flatnonzero(task.forced_mask[:, index]):
            token = task.forced[b, index]
            log_probs[b] = -np.inf
            log_probs[b, :, token] = raw[b, :, token]
        if index == steps - 1:  # out of room: every live hypothesis ends here
            eos = log_probs[..., model.eos_id].copy()
            log_probs[...] = -np.inf
            log_probs[..., model.eos_id] = eos
        candidates = (scores[..., None] + log_probs).reshape(batch, beam * vocab)
        top = np.argsort(-candidates, axis=-1, kind="stable")[:, : 2 * beam]
        new_order = np.zeros((batch, beam), dtype="int64")
        new_tokens = np.full((batch, beam), model.eos_id, dtype="int32")
        new_scores = np.full((batch, beam), -np.inf)
        for b in range(batch):
            if done[b]:
                new_order[b] = b * beam
                continue
            live = 0
            for rank, flat in enumerate(top[b]):
                score = candidates[b, flat]
                if not np.isfinite(score):
                    break
                source_beam, token = divmod(int(flat), vocab)
                if token == model.eos_id:
                    if rank < beam:
                        sequence = history[b * beam + source_beam, :index].tolist()
                        length = index + 1
                        finished[b].append(
                            (score / length**length_penalty, np.array(sequence + [token]))
                        )
                    continue
                new_order[b, live] = b * beam + source_beam
                new_tokens[b, live] = token
                new_scores[b, live] = score
                live += 1
                if live == beam:
                    break
            if len(finished[b]) >= beam or live == 0:
                done[b] = True
            # Empty live slots copy a real row, with score -inf, so they never win.
            new_order[b, live:] = new_order[b, 0] if live else b * beam
        if done.all():
            break
        order = new_order.reshape(rows).astype("int32")
        tokens = new_tokens.reshape(rows)
        scores = new_scores
        history = history[order]
        history[:, index] = tokens
    return finished
