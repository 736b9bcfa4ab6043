"""Numpy references for the learned relative position tables (T5 bias, Shaw embeddings).

Each takes the table(s) copied out of a layer and an index function from
``reference.relative_index``; nothing here imports keras_posenc.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from reference.relative_index import multiscale_index, relative_positions

IndexFn = Callable[[np.ndarray], np.ndarray]


def relative_position_bias(
    table: np.ndarray, index_fn: IndexFn, query_length: int, key_length: int, offset: int = 0
) -> np.ndarray:
    """T5: bias[0, h, i, j] = table[bucket(j - (i + offset)), h]; table is (buckets, heads)."""
    r = relative_positions(query_length, key_length, offset)
    bias = np.empty((table.shape[1], query_length, key_length), np.float32)
    buckets = index_fn(r)
    for h in range(table.shape[1]):
        bias[h] = table[:, h][buckets]
    return bias[None]


def relative_position_embedding(
    table: np.ndarray, index_fn: IndexFn, query_length: int, key_length: int, offset: int = 0
) -> np.ndarray:
    """Shaw: a[i, j] = w[idx(j - (i + offset))]; table is (rows, dim)."""
    r = relative_positions(query_length, key_length, offset)
    return table[index_fn(r)].astype(np.float32)


def multiscale_relative_position_embedding(
    tables: Sequence[np.ndarray],
    scales: Sequence[int],
    combine: str,
    query_length: int,
    key_length: int,
    offset: int = 0,
) -> np.ndarray:
    r = relative_positions(query_length, key_length, offset)
    parts = [table[multiscale_index(r, s)] for table, s in zip(tables, scales)]
    if combine == "concat":
        return np.concatenate(parts, axis=-1)
    total = np.sum(parts, axis=0)
    return total / len(parts) if combine == "mean" else total
