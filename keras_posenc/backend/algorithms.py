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

# Rows of one strip in `toeplitz_by_strips`.
TOEPLITZ_STRIP_ROWS = 64

# Keys of one window in `toeplitz_by_windows`.
TOEPLITZ_WINDOW_KEYS = 16

# Keys summed by one matrix product in `blocked_cumulative_sum`.
CUMSUM_BLOCK = 32


def toeplitz_by_strips(diagonals: Any, query_length: int, key_length: int) -> Any:
    """`common.toeplitz` by strips of ``s = TOEPLITZ_STRIP_ROWS`` rows.

    Every strip is a window of one (s, q_len + k_len - s) strip gathered from
    ``diagonals`` (strip ``g`` starts ``g * s`` columns further left), so the gather
    reads O(s L) indices and the rest is copying contiguous rows.
    """
    rows = min(TOEPLITZ_STRIP_ROWS, query_length)
    strips = -(-query_length // rows)
    padded = strips * rows
    if padded > query_length:
        # The padded rows read diagonals below the first; they are cut off below.
        extra = ops.zeros(tuple(diagonals.shape[:-1]) + (padded - query_length,), diagonals.dtype)
        diagonals = ops.concatenate([extra, diagonals], axis=-1)
    # strip[r, x] = diagonals[x - r + rows - 1]: row g * rows + r of the result is
    # strip[r, (strips - 1 - g) * rows + j].
    width = padded + key_length - rows
    index = np.arange(width)[None, :] - np.arange(rows)[:, None] + rows - 1
    strip = ops.take(diagonals, ops.convert_to_tensor(index.astype("int32")), axis=-1)
    if strips == 1:
        return strip[..., :query_length, :key_length]
    windows = [
        strip[..., (strips - 1 - g) * rows : (strips - 1 - g) * rows + key_length]
        for g in range(strips)
    ]
    out = ops.stack(windows, axis=-3)  # (..., strips, rows, k_len)
    out = ops.reshape(out, tuple(out.shape[:-3]) + (padded, key_length))
    return out if padded == query_length else out[..., :query_length, :]


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


def gather_rows_then_transpose(table: Any, index: Any) -> Any:
    """`common.gather_heads_first` as rows of ``heads`` values, then one transposed copy."""
    return ops.transpose(ops.take(table, index, axis=0), (2, 0, 1))


def relative_key_logits_by_rows(q: Any, table: Any, index: Any) -> Any:
    """`common.relative_key_logits` by gathering rows of the transposed products.

    The products are laid out (q_len * rows, batch * heads), so each gathered row is
    ``batch * heads`` floats, then transposed to (batch, heads, q_len, k_len).
    """
    batch, heads = ops.shape(q)[0], ops.shape(q)[2]
    query_length, key_length = ops.shape(index)[0], ops.shape(index)[1]
    rows = ops.shape(table)[0]
    flat_index = ops.arange(query_length, dtype="int32")[:, None] * rows + index
    per_row = ops.cast(ops.einsum("bqhd,rd->qrbh", q, ops.cast(table, q.dtype)), "float32")
    per_row = ops.reshape(per_row, (-1, batch * heads))
    gathered = ops.take(per_row, flat_index, axis=0)  # (q_len, k_len, batch * heads)
    gathered = ops.reshape(gathered, (query_length, key_length, batch, heads))
    return ops.transpose(gathered, (2, 3, 0, 1))


def blocked_cumulative_sum(values: Any) -> Any:
    """`common.cumulative_sum` over a static last axis by blocks of ``CUMSUM_BLOCK`` keys.

    The sums inside each block are one matrix product with a triangular matrix of
    ones; the totals of the blocks before it (a cumsum over L / 32 values per row)
    are added. The sums differ from a sequential scan only by rounding.
    """
    values = ops.cast(values, "float32")
    length = values.shape[-1]
    block = CUMSUM_BLOCK
    blocks = -(-length // block)
    lead = tuple(ops.shape(values)[:-1])
    if blocks * block != length:
        values = ops.pad(values, [(0, 0)] * len(lead) + [(0, blocks * block - length)])
    values = ops.reshape(values, lead + (blocks, block))
    triangle = ops.convert_to_tensor(np.triu(np.ones((block, block), "float32")))
    within = ops.matmul(values, triangle)  # inclusive sums inside each block
    totals = within[..., -1]
    before = ops.cumsum(totals, axis=-1) - totals  # the sum of the blocks before
    sums = ops.reshape(within + ops.expand_dims(before, -1), lead + (blocks * block,))
    return sums[..., :length]


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


def pointwise_by_matmul(x: Any, kernel: Any, bias: Any) -> Any:
    """`common.pointwise_conv2d` as one matrix product over the channels."""
    kernel = ops.cast(kernel, x.dtype)
    y = ops.matmul(x, ops.reshape(kernel, tuple(kernel.shape[2:])))
    return y if bias is None else y + ops.cast(bias, x.dtype)
