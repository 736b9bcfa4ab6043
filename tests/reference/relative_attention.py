"""Relative multi-head attention in numpy, written from Shaw et al. (2018) and T5.

Shaw et al., eq. (3)-(4), with ``a^{K,V}_ij = w^{K,V}[clip(j - i, -k, k) + k]``::

    e_ij = q_i . (k_j + a^K_ij) / sqrt(d)
    z_i  = sum_j softmax_j(e_ij) (v_j + a^V_ij)

T5 (bias mode): ``e_ij = q_i . k_j / sqrt(d) + b[idx(j - i), h]``.

Everything is materialised naively, including the ``(q_len, k_len, d)``
tensors ``a^K`` and ``a^V``, built by an explicit loop over (i, j), so the
reference shares nothing with the layer's gather / segment-sum implementation.
Masks: True = may attend; a fully masked query row gives zero attention
weights. Does not import keras_posenc.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def clip_index_matrix(query_length: int, key_length: int, k: int, offset: int = 0) -> np.ndarray:
    """``idx[i, j] = clip(j - (i + offset), -k, k) + k``, by explicit loops."""
    index = np.zeros((query_length, key_length), dtype=np.int64)
    for i in range(query_length):
        for j in range(key_length):
            r = j - (i + offset)
            index[i, j] = min(max(r, -k), k) + k
    return index


def relative_vectors(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Shaw's ``a_ij = w[idx(i, j)]``, materialised as (q_len, k_len, d) by a loop."""
    query_length, key_length = index.shape
    out = np.zeros((query_length, key_length, table.shape[1]), dtype=np.float64)
    for i in range(query_length):
        for j in range(key_length):
            out[i, j] = table[index[i, j]]
    return out


def project(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """(batch, length, in) x (in, heads, d) -> (batch, length, heads, d)."""
    out = np.einsum("blc,chd->blhd", x.astype(np.float64), kernel.astype(np.float64))
    return out if bias is None else out + bias


def masked_softmax(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis; masked entries 0; fully masked rows all 0."""
    if mask is None:
        mask = np.ones(logits.shape, dtype=bool)
    mask = np.broadcast_to(mask, logits.shape)
    shifted = np.where(mask, logits, -np.inf)
    row_max = np.max(shifted, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    weights = np.where(mask, np.exp(shifted - row_max), 0.0)
    total = weights.sum(axis=-1, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)


def relative_attention(
    query: np.ndarray,
    value: np.ndarray,
    key: np.ndarray | None,
    weights: dict,
    relative: str,
    index: np.ndarray,
    mask: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    rotate: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The full layer: projections, relative attention, output projection.

    Args:
        query: (batch, q_len, query_dim). value: (batch, k_len, value_in).
        key: (batch, k_len, key_in), or None for ``value``.
        weights: ``query_kernel`` (query_dim, heads, dk), ``query_bias`` (heads, dk),
            likewise ``key_*`` and ``value_*``; ``output_kernel`` (heads, dv, out),
            ``output_bias`` (out,) (biases may be None); ``relative_keys`` (rows, dk),
            ``relative_values`` (rows, dv), ``relative_bias`` (rows, heads).
        relative: "keys_values", "keys", "bias" or None (content logits only).
        index: (q_len, k_len) table row of every (query, key) pair (unused by None).
        mask: bool, broadcastable to (batch, q_len, k_len); True = may attend.
        attention_bias: float, broadcastable to (batch, heads, q_len, k_len).
        rotate: None, or a function ``(q, k) -> (q, k)`` applied to the projected
            (batch, length, heads, d) queries and keys (a rotary embedding), or
            ``(q, k) -> (q, k, q_relative)`` where the relative key term reads another
            query (xPos: the turned query without its factor).

    Returns:
        (output (batch, q_len, out), attention probabilities (batch, heads, q_len, k_len)).
    """
    key = value if key is None else key
    q = project(query, weights["query_kernel"], weights.get("query_bias"))
    k = project(key, weights["key_kernel"], weights.get("key_bias"))
    v = project(value, weights["value_kernel"], weights.get("value_bias"))
    head_dim = q.shape[-1]
    q_relative = None
    if rotate is not None:
        rotated = rotate(q, k)
        q, k = rotated[:2]
        q_relative = rotated[2] if len(rotated) > 2 else None  # xPos: without its factor
    q_relative = q if q_relative is None else q_relative

    if relative in ("keys", "keys_values"):
        a_key = relative_vectors(weights["relative_keys"].astype(np.float64), index)
        # e[b, h, i, j] = q_i . (k_j + a^K_ij) / sqrt(d)
        content = np.einsum("bihd,bjhd->bhij", q, k)
        logits = (content + np.einsum("bihd,ijd->bhij", q_relative, a_key)) / np.sqrt(head_dim)
    elif relative is None:
        logits = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(head_dim)
    elif relative == "bias":
        logits = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(head_dim)
        table = weights["relative_bias"].astype(np.float64)
        logits = logits + np.transpose(table[index], (2, 0, 1))[None]
    else:
        raise ValueError(relative)
    if attention_bias is not None:
        logits = logits + attention_bias
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)[:, None]  # same for every head
    probabilities = masked_softmax(logits, mask)

    if relative == "keys_values":
        a_value = relative_vectors(weights["relative_values"].astype(np.float64), index)
        values_plus = v[:, None, :, :, :] + a_value[None, :, :, None, :]  # (b, i, j, h, d)
        z = np.einsum("bhij,bijhd->bihd", probabilities, values_plus)
    else:
        z = np.einsum("bhij,bjhd->bihd", probabilities, v)
    output = np.einsum("bihd,hde->bie", z, weights["output_kernel"].astype(np.float64))
    if weights.get("output_bias") is not None:
        output = output + weights["output_bias"]
    return output, probabilities


def causal_mask(query_length: int, key_length: int, offset: int = 0) -> np.ndarray:
    """(1, q_len, k_len): query i (at position i + offset) may see keys j <= i + offset."""
    mask = np.zeros((1, query_length, key_length), dtype=bool)
    for i in range(query_length):
        mask[0, i, : i + offset + 1] = True
    return mask
