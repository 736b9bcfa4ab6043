"""Numpy references for relative position indices, written from the published algorithms.

- Shaw et al. 2018: clip(r, -k, k) + k.
- T5 (Raffel et al. 2020), ``_relative_position_bucket`` as published in Mesh
  TensorFlow: evaluated directly on every element, in float32 as T5 does.
- iRPE (Wu et al. 2021), ``piecewise_index``: float32 with ``round`` half-to-even
  (``torch.round``, which iRPE uses, rounds half to even like ``numpy.round``).
- The clamped multi-scale index of keras_posenc (its own design, see its docstring).

These evaluate the formulas elementwise; they do not import keras_posenc.
"""

from __future__ import annotations

import math

import numpy as np


def relative_positions(query_length: int, key_length: int, offset: int = 0) -> np.ndarray:
    """r[i, j] = j - (i + offset): key position minus query position."""
    i = np.arange(query_length)[:, None] + offset
    j = np.arange(key_length)[None, :]
    return (j - i).astype(np.int64)


def clip_index(r: np.ndarray, k: int) -> np.ndarray:
    return np.clip(np.asarray(r, np.int64), -k, k) + k


def t5_relative_position_bucket(
    relative_position: np.ndarray,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> np.ndarray:
    """Mesh TensorFlow's ``_relative_position_bucket``, line by line, in float32.

    ``relative_position = memory_position - query_position``.
    """
    relative_position = np.asarray(relative_position, np.int64)
    ret = np.zeros_like(relative_position)
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += (n < 0).astype(np.int64) * num_buckets
        n = np.abs(n)
    else:
        n = np.maximum(n, 0)
    # now n is in the range [0, inf)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    with np.errstate(divide="ignore"):  # log(0) at n = 0 is discarded by is_small
        log_term = (
            np.log(n.astype(np.float32) / np.float32(max_exact))
            / np.float32(math.log(max_distance / max_exact))
            * np.float32(num_buckets - max_exact)
        )
    log_term = np.where(is_small, 0.0, log_term)  # avoid casting -inf to int
    val_if_large = max_exact + log_term.astype(np.int64)  # to_int32 truncates
    val_if_large = np.minimum(val_if_large, num_buckets - 1)
    ret += np.where(is_small, n, val_if_large)
    return ret


def irpe_piecewise_index(
    relative_position: np.ndarray, alpha: float, beta: float, gamma: float
) -> np.ndarray:
    """iRPE's ``piecewise_index``: g(x) (may be negative), float32 like the torch code."""
    x = np.asarray(relative_position, np.int64)
    rp_abs = np.abs(x)
    mask = rp_abs <= alpha
    out = x.copy()
    not_mask = ~mask
    rp_out = x[not_mask].astype(np.float32)
    rp_abs_out = rp_abs[not_mask].astype(np.float32)
    y = np.float32(alpha) + np.log(rp_abs_out / np.float32(alpha)) / np.float32(
        math.log(gamma / alpha)
    ) * np.float32(beta - alpha)
    y_out = np.sign(rp_out) * np.minimum(np.round(y), np.float32(beta))
    out[not_mask] = y_out.astype(np.int64)
    return out


def piecewise_index(r: np.ndarray, num_buckets: int) -> np.ndarray:
    """keras_posenc's convention: beta = num_buckets // 2, alpha:beta:gamma = 1:2:8, + beta."""
    beta = num_buckets // 2
    return irpe_piecewise_index(r, beta / 2, beta, 4 * beta) + beta


def multiscale_index(r: np.ndarray, scale: int) -> np.ndarray:
    """Bins of width h = scale // 2 (Python floor division), clamped to [-h, h], + h."""
    h = scale // 2
    bins = np.array([v // h for v in np.asarray(r).ravel().tolist()], np.int64)
    return (np.clip(bins, -h, h) + h).reshape(np.shape(r))


def toeplitz(diagonals: np.ndarray, query_length: int, key_length: int) -> np.ndarray:
    """out[..., i, j] = diagonals[..., j - i + query_length - 1], element by element."""
    out = np.empty(diagonals.shape[:-1] + (query_length, key_length), diagonals.dtype)
    for i in range(query_length):
        for j in range(key_length):
            out[..., i, j] = diagonals[..., j - i + query_length - 1]
    return out


def deberta_relative_position_row(
    relative_position: np.ndarray, position_buckets: int = 256, max_position: int = 512
) -> np.ndarray:
    """DeBERTa v2's ``make_log_bucket_position`` as published (Hugging Face's
    ``modeling_deberta_v2.py``), in float32, then the row of its ``2 * position_buckets``
    table: ``clip(bucket + position_buckets, 0, 2 * position_buckets - 1)``.

    DeBERTa's distance is query minus key, ``-relative_position`` here
    (``relative_position = key - query``).
    """
    rel = -np.asarray(relative_position, np.int64)
    sign = np.sign(rel)
    mid = position_buckets // 2
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel)).astype(np.float32)
    log_pos = (
        np.ceil(
            np.log(abs_pos / np.float32(mid))
            / np.log(np.float32((max_position - 1) / mid))
            * np.float32(mid - 1)
        )
        + mid
    )
    bucket = np.where(abs_pos <= mid, rel, log_pos * sign).astype(np.int64)
    return np.clip(bucket + position_buckets, 0, 2 * position_buckets - 1)
