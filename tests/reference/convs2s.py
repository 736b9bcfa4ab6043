"""Numpy references of the ConvS2S layers, written from the formulas of fairseq's ``fconv``.

Independent of keras_posenc: loops and float64, nothing shared with the layers.
Masks here use the Keras convention (True = real token), as the layers' arguments do.
"""

from __future__ import annotations

import math

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def glu(y: np.ndarray) -> np.ndarray:
    """Gated linear unit over the last axis: first half times sigmoid of the second half."""
    half = y.shape[-1] // 2
    return y[..., :half] * sigmoid(y[..., half:])


def conv_padding(kernel_size: int, causal: bool) -> tuple[int, int]:
    """(left, right) zeros, as fairseq pads its encoder (non-causal) and decoder (causal) convs."""
    if causal:
        return kernel_size - 1, 0
    if kernel_size % 2 == 1:
        return kernel_size // 2, kernel_size // 2
    return (kernel_size - 1) // 2, kernel_size // 2


def glu_conv1d(
    x: np.ndarray,
    kernel: np.ndarray,
    bias: np.ndarray,
    causal: bool = False,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """GLU(conv(x)): x (batch, time, in), kernel (k, in, 2C), bias (2C,) -> (batch, time, C).

    Padded positions (mask False) are zeroed before the convolution; output ``t``
    is ``sum_j x_padded[t + j] @ kernel[j] + bias``.
    """
    x = np.asarray(x, np.float64)
    kernel = np.asarray(kernel, np.float64)
    if mask is not None:
        x = x * np.asarray(mask, np.float64)[:, :, None]
    k = kernel.shape[0]
    left, right = conv_padding(k, causal)
    batch, time, channels = x.shape
    padded = np.zeros((batch, left + time + right, channels))
    padded[:, left : left + time] = x
    y = np.zeros((batch, time, kernel.shape[-1]))
    for t in range(time):
        for j in range(k):
            y[:, t] += padded[:, t + j] @ kernel[j]
    return glu(y + np.asarray(bias, np.float64))


def weight_norm(v: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``g * v / ||v||`` with the norm over the kernel width and input channels (axes 0, 1)."""
    v = np.asarray(v, np.float64)
    norm = np.sqrt((v**2).sum(axis=(0, 1)))
    return v * (np.asarray(g, np.float64) / norm)


def convs2s_attention(
    x: np.ndarray,
    target_embedding: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    weights: dict,
    encoder_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """fairseq's AttentionLayer, batch-major, one sequence at a time.

    ``weights``: in_kernel (conv_channels, embed), in_bias, out_kernel
    (embed, conv_channels), out_bias. ``encoder_mask`` (batch, source) True for
    real tokens. The softmax runs over the real source positions only; a
    source with no real position gets zero scores and a zero context.
    Returns (out, scores).
    """
    x = np.asarray(x, np.float64)
    g = np.asarray(target_embedding, np.float64)
    keys = np.asarray(keys, np.float64)
    values = np.asarray(values, np.float64)
    batch, target_length, _ = x.shape
    source_length = keys.shape[1]
    if encoder_mask is None:
        encoder_mask = np.ones((batch, source_length), bool)
    out = np.zeros_like(x)
    scores = np.zeros((batch, target_length, source_length))
    for b in range(batch):
        real = np.flatnonzero(encoder_mask[b])
        d = (x[b] @ weights["in_kernel"] + weights["in_bias"] + g[b]) * math.sqrt(0.5)
        context = np.zeros((target_length, keys.shape[2]))
        if real.size:
            logits = d @ keys[b, real].T  # (target, real source)
            logits = logits - logits.max(axis=1, keepdims=True)
            a = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
            scores[b][:, real] = a
            s = real.size
            context = (a @ values[b, real]) * (s * math.sqrt(1.0 / s))
        out[b] = (context @ weights["out_kernel"] + weights["out_bias"] + x[b]) * math.sqrt(0.5)
    return out, scores
