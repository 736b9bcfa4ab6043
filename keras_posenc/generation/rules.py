"""The rules every search shares, as masks of forbidden tokens.

``pad_id`` and ``bos_id`` never come next, ``eos_id`` not before ``min_length``, and
no token that would repeat an n-gram (``no_repeat_ngram_size``): with ``keras.ops``
inside the compiled loop of greedy search and sampling, with numpy between beam
search's steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

# Logit of a token that may not come next inside the compiled loops.
_FORBIDDEN = -1e9


def _banned_ngrams(history: Any, index: Any, size: int, vocab: Any) -> Any:
    """``(batch, vocab)`` True for tokens that would repeat an n-gram of ``history``.

    ``history``: ``(batch, length)`` ids, real up to position ``index``; the token
    at ``index + 1`` is being chosen. An n-gram starting at ``s`` is repeated if its
    first ``size - 1`` tokens equal the last ``size - 1`` of the history; its last
    token (at ``s + size - 1 <= index``) is then banned.
    """
    batch, length = ops.shape(history)[0], ops.shape(history)[1]
    starts = length - size + 1  # every n-gram that fits in the buffer
    if isinstance(starts, int) and starts <= 0:
        return ops.zeros((batch, vocab), "bool")
    tail = index + 1 - (size - 1) + ops.arange(size - 1, dtype="int32")
    last = ops.take(history, ops.clip(tail, 0, length - 1), axis=1)  # (batch, size - 1)
    match = ops.ones((batch, starts), "bool")
    for k in range(size - 1):
        match = match & (history[:, k : k + starts] == last[:, k : k + 1])
    offset = ops.arange(starts, dtype="int32")
    valid = (offset + size - 1 <= index) & (index + 1 >= size - 1)
    match = match & valid[None, :]
    banned = history[:, size - 1 : size - 1 + starts]
    rows = ops.broadcast_to(ops.arange(batch, dtype="int32")[:, None], ops.shape(banned))
    indices = ops.reshape(ops.stack([rows, ops.cast(banned, "int32")], axis=-1), (-1, 2))
    counts = ops.scatter(indices, ops.reshape(ops.cast(match, "float32"), (-1,)), (batch, vocab))
    return counts > 0


def _masked_logits(task_rules: tuple, logits: Any, index: Any, history: Any) -> Any:
    """Logits with forbidden tokens set to -1e9 (pad, bos, early eos, repeated n-grams)."""
    model, min_index, ngram = task_rules
    vocab = ops.shape(logits)[-1]
    ids = ops.arange(vocab, dtype="int32")
    banned = (ids == model.pad_id) | (ids == model.bos_id)
    banned = banned | ((ids == model.eos_id) & (index < min_index))
    logits = ops.where(banned[None, :], _FORBIDDEN, logits)
    if ngram:
        logits = ops.where(_banned_ngrams(history, index, ngram, vocab), _FORBIDDEN, logits)
    return logits


def _banned_ngrams_numpy(sequence: np.ndarray, size: int) -> list[int]:
    """Tokens that would repeat an n-gram of ``sequence`` if they came next (beam search)."""
    if size == 0 or len(sequence) < size - 1:
        return []
    last = tuple(sequence[len(sequence) - size + 1 :]) if size > 1 else ()
    banned = []
    for start in range(len(sequence) - size + 1):
        if tuple(sequence[start : start + size - 1]) == last:
            banned.append(int(sequence[start + size - 1]))
    return banned
