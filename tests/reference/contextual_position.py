"""Contextual position encoding (CoPE) in numpy, written from Golovneva et al. (2024).

For one head, queries ``q_i`` and keys ``k_j`` (projected), the causal logits
``l_ij = q_i . k_j / sqrt(d)`` (j <= i), gates ``g_ij = sigmoid(l_ij)``, positions
``p_ij = min(sum_{t=j}^{i} g_it, P - 1)``, the interpolated embedding
``e[p] = (p - floor p) E[:, ceil p] + (1 - (p - floor p)) E[:, floor p]`` of a table ``E``
(d, P) shared by the heads, and ``a_ij = softmax_j(l_ij + q_i . e[p_ij])`` over the allowed
keys. Every pair and every sum by explicit loops. Does not import keras_posenc.
"""

from __future__ import annotations

import numpy as np


def cope_attention(
    x: np.ndarray, weights: dict, table: np.ndarray, padding: np.ndarray | None = None
) -> np.ndarray:
    """``x`` (batch, L, features); ``weights``: ``query``, ``key``, ``value`` as ``(kernel
    (features, heads, d), bias (heads, d))``, ``output`` as ``(kernel (heads, d, out), bias
    (out,))``; ``table`` (d, P); ``padding`` (batch, L) bool (True: a real key) or None."""

    def project(name):
        kernel, bias = weights[name]
        return np.einsum("blc,chd->blhd", x, kernel) + bias

    q, k, v = project("query"), project("key"), project("value")
    batch, length, heads, d = q.shape
    rows = table.shape[1]
    if padding is None:
        padding = np.ones((batch, length), bool)
    z = np.zeros((batch, length, heads, d))
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                keys = [j for j in range(i + 1) if padding[b, j]]
                if not keys:
                    continue
                logits = {j: q[b, i, h] @ k[b, j, h] / np.sqrt(d) for j in keys}
                gates = {j: 1.0 / (1.0 + np.exp(-logits[j])) for j in keys}
                scores = {}
                for j in keys:
                    p = min(sum(gates[t] for t in keys if j <= t <= i), rows - 1)
                    low, high = int(np.floor(p)), int(np.ceil(p))
                    w = p - low
                    embedding = w * table[:, high] + (1 - w) * table[:, low]
                    scores[j] = logits[j] + q[b, i, h] @ embedding
                top = max(scores.values())
                exp = {j: np.exp(s - top) for j, s in scores.items()}
                total = sum(exp.values())
                z[b, i, h] = sum(exp[j] / total * v[b, j, h] for j in keys)
    kernel, bias = weights["output"]
    return np.einsum("blhd,hdo->blo", z, kernel) + bias
