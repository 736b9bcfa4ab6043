"""Numpy reference of MUSE's parallel multi-scale attention, written from the formulas.

Independent of keras_posenc: explicit loops over positions and taps, float64.
Masks use the Keras convention (True = real token).

Weights (``C = heads * head_dim``; channel ``h * head_dim + d`` is head ``h``):
``wq, wk, wv`` (C, heads, head_dim) and ``bq, bk, bv`` (heads, head_dim) or None;
static: ``depthwise[i]`` (k, C) (None for k = 1), ``pointwise[i] = (W (C, C), b (C,) or None)``;
dynamic: ``predictor[i] = (W (C, heads, k), b (heads, k) or None)``;
``gamma`` (branches,); ``wo`` (2C, C), ``bo`` (C,) or None.
"""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = np.einsum("btc,chd->bthd", x, w)
    return y if b is None else y + b


def _tap_offset(k: int, j: int, causal: bool) -> int:
    """Tap j of a k-tap convolution at output t reads input t + offset."""
    return j - (k - 1) if causal else j - k // 2


def muse_attention(
    x: np.ndarray,
    weights: dict,
    num_heads: int,
    conv: str,
    kernel_sizes: tuple[int, ...],
    causal: bool = False,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """MUSE attention of ``x`` (batch, time, C): concat[attention ; gated convs] W_O + b_O."""
    x = np.asarray(x, np.float64)
    batch, length, channels = x.shape
    head_dim = channels // num_heads
    real = np.ones((batch, length), bool) if mask is None else np.asarray(mask, bool)
    q = _project(x, weights["wq"], weights.get("bq")) / np.sqrt(head_dim)
    k = _project(x, weights["wk"], weights.get("bk"))
    v = _project(x, weights["wv"], weights.get("bv"))

    attended = np.zeros((batch, length, num_heads, head_dim))
    for b in range(batch):
        for h in range(num_heads):
            for t in range(length):
                keys = [s for s in range(length) if real[b, s] and (not causal or s <= t)]
                if not keys:
                    continue  # no key to attend to: zeros
                logits = np.array([q[b, t, h] @ k[b, s, h] for s in keys])
                p = softmax(logits)
                attended[b, t, h] = sum(p[i] * v[b, s, h] for i, s in enumerate(keys))

    masked_v = v * real[:, :, None, None]  # padded positions zeroed before every conv
    flat_v = masked_v.reshape(batch, length, channels)

    def read(b: int, position: int) -> np.ndarray:
        if 0 <= position < length:
            return flat_v[b, position]
        return np.zeros(channels)

    gate = softmax(np.asarray(weights["gamma"], np.float64))
    combined = np.zeros((batch, length, channels))
    for index, size in enumerate(kernel_sizes):
        branch = np.zeros((batch, length, channels))
        for b in range(batch):
            for t in range(length):
                if conv == "static":
                    depthwise = weights["depthwise"][index]
                    if size == 1:
                        filtered = flat_v[b, t]
                    else:
                        filtered = sum(
                            depthwise[j] * read(b, t + _tap_offset(size, j, causal))
                            for j in range(size)
                        )
                    w, bias = weights["pointwise"][index]
                    branch[b, t] = filtered @ w + (0.0 if bias is None else bias)
                else:
                    w, bias = weights["predictor"][index]
                    logits = np.einsum("c,chk->hk", flat_v[b, t], w)
                    if bias is not None:
                        logits = logits + bias
                    taps = softmax(logits, axis=-1)  # (heads, k): shared by a head's channels
                    out = np.zeros((num_heads, head_dim))
                    for j in range(size):
                        neighbour = read(b, t + _tap_offset(size, j, causal))
                        out += taps[:, j : j + 1] * neighbour.reshape(num_heads, head_dim)
                    branch[b, t] = out.reshape(channels)
        combined += gate[index] * branch

    concatenated = np.concatenate([attended.reshape(batch, length, channels), combined], -1)
    output = concatenated @ weights["wo"]
    if weights.get("bo") is not None:
        output = output + weights["bo"]
    return output


# --------------------------------------------------------------------------- blocks
#
# Block weights: ``attention`` (the MUSEAttention dict above), ``fc1 = (W (C, F), b)``,
# ``fc2 = (W (F, C), b)``, ``norm = (gamma (C,), beta (C,))``; the decoder adds
# ``cross``: ``wq, wk, wv`` (C, heads, head_dim), ``bq, bk, bv`` (heads, head_dim),
# ``wo`` (heads, head_dim, C), ``bo`` (C,) (biases may be None).


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * gamma + beta


def feed_forward(x: np.ndarray, fc1: tuple, fc2: tuple) -> np.ndarray:
    """``fc2(relu(fc1(x)))``."""
    (w1, b1), (w2, b2) = fc1, fc2
    hidden = x @ w1 + (0.0 if b1 is None else b1)
    return np.maximum(hidden, 0.0) @ w2 + (0.0 if b2 is None else b2)


def cross_attention(
    x: np.ndarray, source: np.ndarray, weights: dict, source_mask: np.ndarray | None
) -> np.ndarray:
    """Multi-head attention of ``x``'s queries over ``source``; no real key gives zeros."""
    x, source = np.asarray(x, np.float64), np.asarray(source, np.float64)
    batch, length, _ = x.shape
    num_heads, head_dim = weights["wq"].shape[1:]
    real = np.ones(source.shape[:2], bool) if source_mask is None else np.asarray(source_mask, bool)
    q = _project(x, weights["wq"], weights.get("bq")) / np.sqrt(head_dim)
    k = _project(source, weights["wk"], weights.get("bk"))
    v = _project(source, weights["wv"], weights.get("bv"))
    attended = np.zeros((batch, length, num_heads, head_dim))
    for b in range(batch):
        keys = [s for s in range(source.shape[1]) if real[b, s]]
        if not keys:
            continue
        for h in range(num_heads):
            for t in range(length):
                p = softmax(np.array([q[b, t, h] @ k[b, s, h] for s in keys]))
                attended[b, t, h] = sum(p[i] * v[b, s, h] for i, s in enumerate(keys))
    output = np.einsum("bthd,hdc->btc", attended, weights["wo"])
    return output if weights.get("bo") is None else output + weights["bo"]


def muse_encoder_layer(
    x: np.ndarray,
    weights: dict,
    num_heads: int,
    conv: str,
    kernel_sizes: tuple[int, ...],
    mask: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """``LayerNorm(x + MUSEAttention(x) + FFN(x))`` (dropout inactive)."""
    x = np.asarray(x, np.float64)
    attended = muse_attention(x, weights["attention"], num_heads, conv, kernel_sizes, False, mask)
    total = x + attended + feed_forward(x, weights["fc1"], weights["fc2"])
    return layer_norm(total, *weights["norm"], eps)


def muse_decoder_layer(
    x: np.ndarray,
    source: np.ndarray,
    weights: dict,
    num_heads: int,
    conv: str,
    kernel_sizes: tuple[int, ...],
    mask: np.ndarray | None = None,
    source_mask: np.ndarray | None = None,
    eps: float = 1e-5,
) -> np.ndarray:
    """``LayerNorm(x + causal MUSEAttention(x) + CrossAttention(x, source) + FFN(x))``."""
    x = np.asarray(x, np.float64)
    attended = muse_attention(x, weights["attention"], num_heads, conv, kernel_sizes, True, mask)
    crossed = cross_attention(x, source, weights["cross"], source_mask)
    total = x + attended + crossed + feed_forward(x, weights["fc1"], weights["fc2"])
    return layer_norm(total, *weights["norm"], eps)
