"""Numpy reference of next-token scoring: per-position loss and top-1 hits from logits, in
float64, and their means over a length's positions and over buckets of positions.

The loss at a position is the cross-entropy of its target under the softmax of its logits,
``logsumexp(z) - z[target]`` in nats; a hit is the target being the first largest logit.
Positions are pooled over windows, weighted (a synthetic task's positions without an
answer weigh 0). Log2 buckets: ``0-1``, then ``2^k .. 2^(k+1) - 1``, cut at the length.

Nothing here imports keras_posenc.
"""

from __future__ import annotations

import math

import numpy as np


def next_token_scores(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(loss, hit)``, each ``(batch, time)``, for logits ``(batch, time, vocab)``."""
    z = np.asarray(logits, np.float64)
    top = z.max(-1, keepdims=True)
    log_norm = top[..., 0] + np.log(np.exp(z - top).sum(-1))
    picked = np.take_along_axis(z, targets[..., None].astype(np.int64), -1)[..., 0]
    return log_norm - picked, (z.argmax(-1) == targets).astype(np.float64)


def log2_buckets(length: int) -> list[tuple[int, int]]:
    """``(first, last)`` positions of each log2 bucket of a window of ``length``."""
    buckets, start = [], 0
    while start < length:
        end = 1 if start == 0 else 2 * start - 1
        buckets.append((start, min(end, length - 1)))
        start = end + 1
    return buckets


def summary(
    loss: np.ndarray, hit: np.ndarray, weights: np.ndarray | None = None
) -> dict[str, object]:
    """Weighted means of ``(windows, length)`` scores: over all positions, the last half
    (``length // 2 ..``) and each log2 bucket (``{(first, last): (loss, accuracy, count)}``)."""
    weights = np.ones(loss.shape) if weights is None else np.asarray(weights, np.float64)
    length = loss.shape[1]

    def mean(first: int, last: int) -> tuple[float | None, float | None, int]:
        w = weights[:, first : last + 1]
        total = w.sum()
        if total == 0:  # no position with an answer (a task's first positions)
            return None, None, 0
        return (
            float((loss[:, first : last + 1] * w).sum() / total),
            float((hit[:, first : last + 1] * w).sum() / total),
            int(total),
        )

    every = mean(0, length - 1)
    half = mean(length // 2, length - 1)
    return {
        "loss": every[0],
        "accuracy": every[1],
        "tokens": every[2],
        "perplexity": None if every[0] is None else math.exp(every[0]),
        "loss_last_half": half[0],
        "accuracy_last_half": half[1],
        "buckets": {bucket: mean(*bucket) for bucket in log2_buckets(length)},
    }
