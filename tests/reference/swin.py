"""Numpy reference of Swin's shifted-window attention (Liu et al. 2021), independent of
keras_posenc, in float64.

Written from the paper's description (section 3.2), not from its efficient batch
computation: the map is partitioned into windows of ``M = (Mh, Mw)`` cells whose
boundaries are displaced by ``shift = (sh, sw)`` from the regular partition, so along the
rows the windows are ``[0, sh)``, ``[sh, sh + Mh)``, ..., ``[H - Mh + sh, H)`` (the first
and last ones smaller than ``M`` when ``sh > 0``), and likewise along the columns. Each
query attends to the keys of its own window only, with logits ``q . k / sqrt(d)`` plus the
window's relative bias ``B[i - i' + Mh - 1, j - j' + Mw - 1]`` (a ``(2Mh - 1, 2Mw - 1)``
table per head) for the query ``(i, j)`` and key ``(i', j')``. The cyclic shift and the
mask of the paper's implementation (Figure 4) compute the same thing: no roll and no mask
here, one window at a time and one query at a time.

The block is pre-norm: ``x <- x + Proj(Attention(LN(x)))``, ``x <- x + FFN(LN(x))`` with
``FFN = Dense(GELU(Dense(.)))``, as in reference.coatnet.
"""

from __future__ import annotations

import math

import numpy as np

from reference.coatnet import gelu, layer_norm


def displaced_windows(length: int, window: int, shift: int) -> np.ndarray:
    """Each cell's window along one side: windows ``[0, shift)``, then ``window`` cells
    each starting at ``shift + k * window``, the last one cut at ``length``."""
    cells = np.arange(length)
    return (cells - shift + window) // window if shift else cells // window


def shifted_window_attention(x, w, num_heads, table, window, shift):
    """Multi-head attention within the displaced windows of x (B, H, W, C).

    ``w["qkv"]`` = (kernel (C, 3 * D), bias) with columns laid out [q | k | v], each
    (heads, head_dim); ``w["attention_output"]`` = (kernel (D, C'), bias); ``table``
    (heads, 2 * window[0] - 1, 2 * window[1] - 1).
    """
    batch, height, width, _ = x.shape
    kernel, bias = w["qkv"]
    model_dim = kernel.shape[1] // 3
    head_dim = model_dim // num_heads
    qkv = (x @ kernel + bias).reshape(batch, height, width, 3, num_heads, head_dim)
    row_window = displaced_windows(height, window[0], shift[0])
    col_window = displaced_windows(width, window[1], shift[1])
    out = np.zeros((batch, height, width, num_heads, head_dim))
    for i in range(height):
        for j in range(width):
            rows = [a for a in range(height) if row_window[a] == row_window[i]]
            cols = [b for b in range(width) if col_window[b] == col_window[j]]
            keys = [(a, b) for a in rows for b in cols]
            rows, cols = (list(v) for v in zip(*keys, strict=True))
            for h in range(num_heads):
                q = qkv[:, i, j, 0, h]  # (batch, head_dim)
                k, v = qkv[:, rows, cols, 1, h], qkv[:, rows, cols, 2, h]
                relative = np.array(
                    [table[h, i - a + window[0] - 1, j - b + window[1] - 1] for a, b in keys]
                )
                logits = np.einsum("bd,bkd->bk", q, k) / math.sqrt(head_dim) + relative
                logits -= logits.max(axis=-1, keepdims=True)
                weights = np.exp(logits)
                weights /= weights.sum(axis=-1, keepdims=True)
                out[:, i, j, h] = np.einsum("bk,bkd->bd", weights, v)
    out_kernel, out_bias = w["attention_output"]
    return out.reshape(batch, height, width, model_dim) @ out_kernel + out_bias


def swin_block(x, w, num_heads, window, shift, epsilon=1e-5, activation=gelu):
    """Swin's pre-norm block on x (B, H, W, C); ``w`` keys as reference.coatnet's
    relative_transformer_block: attention_norm, ffn_norm (gamma, beta), qkv,
    attention_output, ffn_hidden, ffn_output (kernel, bias) and table."""
    y = layer_norm(x, *w["attention_norm"], epsilon)
    x = x + shifted_window_attention(y, w, num_heads, w["table"], window, shift)
    hidden_kernel, hidden_bias = w["ffn_hidden"]
    output_kernel, output_bias = w["ffn_output"]
    y = layer_norm(x, *w["ffn_norm"], epsilon)
    return x + activation(y @ hidden_kernel + hidden_bias) @ output_kernel + output_bias
