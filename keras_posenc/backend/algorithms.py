"""Other ways to compute a kernel of `keras_posenc.backend.common`, in ``keras.ops`` only.

Each gives its kernel's numbers (to rounding) by another algorithm that was faster on
some backend; that backend's module registers it as its override, with the measurement
(``tensorflow.py``, ``jax.py``, ``torch.py``). Written with ``keras.ops``, they run on
every backend, so ``benchmarks/`` can time each against the reference anywhere.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

# Keys of one window in `toeplitz_by_windows`.
TOEPLITZ_WINDOW_KEYS = 16


def toeplitz_by_windows(diagonals: Any, query_length: int, key_length: int) -> Any:
    """`common.toeplitz` by runs of ``w = TOEPLITZ_WINDOW_KEYS`` keys.

    The run of row ``i`` that starts at key ``g * w`` is ``w`` consecutive diagonals
    from entry ``q_len - 1 - i + g * w``, so the ``(q_len + k_len - w)`` runs of ``w``
    consecutive diagonals are gathered once (a small tensor), and the result is one
    gather of whole runs at a (q_len, k_len / w) index, already in (..., q_len, k_len)
    order.
    """
    width = TOEPLITZ_WINDOW_KEYS
    runs = -(-key_length // width)
    padded = runs * width  # keys, rounded up to whole runs (the extra keys are cut off)
    lead = tuple(diagonals.shape[:-1])
    # Row 0's last run ends at entry query_length - 1 + padded - 1.
    needed = query_length - 1 + padded
    count = query_length + key_length - 1
    if needed > count:
        extra = ops.zeros(lead + (needed - count,), diagonals.dtype)
        diagonals = ops.concatenate([diagonals, extra], axis=-1)
    # window[..., s, c] = diagonals[..., s + c]: every run of `width` consecutive entries.
    starts = np.arange(needed - width + 1)[:, None] + np.arange(width)[None, :]
    window = ops.take(diagonals, ops.convert_to_tensor(starts.astype("int32")), axis=-1)
    # Row i, keys g * width + c: entry (query_length - 1 - i) + g * width + c.
    first = (query_length - 1 - np.arange(query_length))[:, None] + width * np.arange(runs)
    out = ops.take(window, ops.convert_to_tensor(first.astype("int32")), axis=-2)
    out = ops.reshape(out, lead + (query_length, padded))  # (..., q_len, runs, width) flattened
    return out if padded == key_length else out[..., :key_length]


def depthwise_by_shifts(x: Any, kernel: Any, strides: int, pad: int) -> Any:
    """`common.depthwise_conv2d` as ``k * k`` shifted multiply-adds (static height, width)."""
    size = kernel.shape[0]
    if pad:
        x = ops.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    height = (x.shape[1] - size) // strides + 1
    width = (x.shape[2] - size) // strides + 1
    kernel = ops.cast(kernel[..., 0], x.dtype)  # (k, k, channels)
    total = None
    for dy in range(size):
        for dx in range(size):
            rows = x[:, dy : dy + (height - 1) * strides + 1 : strides]
            window = rows[:, :, dx : dx + (width - 1) * strides + 1 : strides]
            term = window * kernel[dy, dx]
            total = term if total is None else total + term
    return total
