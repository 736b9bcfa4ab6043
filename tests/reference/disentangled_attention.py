"""DeBERTa's disentangled self-attention in numpy, written from He et al. (2021, 2023).

For content queries, keys and values ``Q = X W_q + b_q``, ``K = X W_k + b_k``,
``V = X W_v + b_v`` (per head), a relative embedding table ``P`` and its position
queries and keys ``Q^P = P W_q^P + b_q^P``, ``K^P = P W_k^P + b_k^P`` (DeBERTa v3: the
content projections), the logit of query ``i`` and key ``j`` is::

    e_ij = (q_i . k_j + q_i . K^P[δ(i, j)] + k_j . Q^P[δ(i, j)]) / sqrt(3 d)

with ``δ(i, j)`` the table row of the pair (DeBERTa's log buckets of ``i - j``, shifted by
``position_buckets``: `relative_index.deberta_relative_position_row`; the released
checkpoints read the same row in both relative terms). ``z_i = sum_j softmax_j(e_ij) v_j``
over the keys a mask allows (a query with none gets zeros), then the output projection.
Every pair is computed by an explicit loop. Does not import keras_posenc.
"""

from __future__ import annotations

import numpy as np

from reference.relative_index import deberta_relative_position_row


def disentangled_self_attention(
    x: np.ndarray,
    weights: dict,
    table: np.ndarray,
    position_buckets: int,
    max_position: int,
    terms: tuple = ("c2p", "p2c"),
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """``x`` (batch, L, features); ``weights``: ``query``, ``key``, ``value``,
    ``position_query``, ``position_key`` as ``(kernel (features, heads, d), bias (heads,
    d))`` and ``output`` as ``(kernel (heads, d, out), bias (out,))``; ``table`` (rows,
    features); ``mask`` (batch, L, L) bool or None."""

    def project(inputs, name):
        kernel, bias = weights[name]
        return np.einsum("...c,chd->...hd", inputs, kernel) + bias

    q, k, v = (project(x, name) for name in ("query", "key", "value"))
    position_q = project(table, "position_query")  # (rows, heads, d)
    position_k = project(table, "position_key")
    batch, length, heads, d = q.shape
    scale = 1.0 / np.sqrt((1 + len(terms)) * d)
    logits = np.zeros((batch, heads, length, length))
    for i in range(length):
        for j in range(length):
            row = int(deberta_relative_position_row(j - i, position_buckets, max_position))
            e = np.einsum("bhd,bhd->bh", q[:, i], k[:, j])
            if "c2p" in terms:
                e = e + np.einsum("bhd,hd->bh", q[:, i], position_k[row])
            if "p2c" in terms:
                e = e + np.einsum("bhd,hd->bh", k[:, j], position_q[row])
            logits[:, :, i, j] = e * scale
    if mask is None:
        mask = np.ones((batch, length, length), bool)
    allowed = mask[:, None]
    logits = np.where(allowed, logits, -np.inf)
    top = np.max(np.where(allowed, logits, -1e30), axis=-1, keepdims=True)
    exp = np.where(allowed, np.exp(logits - top), 0.0)
    total = exp.sum(-1, keepdims=True)
    probabilities = np.where(total > 0, exp / np.where(total > 0, total, 1.0), 0.0)
    z = np.einsum("bhij,bjhd->bihd", probabilities, v)
    kernel, bias = weights["output"]
    return np.einsum("bihd,hdo->bio", z, kernel) + bias
