"""NumPy reference of the ConvNeXt block (Liu et al. 2022) as timm's maxxvit.py builds it,
written from the formula with loops, independent of the layer's code."""

from __future__ import annotations

import numpy as np

from reference.coatnet import ACTIVATIONS, avg_pool_2x2, conv2d, layer_norm, max_pool_2x2


def grouped_depthwise(x, kernel, bias, stride, pad):
    """Each input channel c convolved with ``kernel[:, :, c, j]`` into output ``c * m + j``
    (``m`` = kernel.shape[-1]), after ``pad`` zeros on each side; then the bias."""
    k, _, channels, multiplier = kernel.shape
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out_h = (padded.shape[1] - k) // stride + 1
    out_w = (padded.shape[2] - k) // stride + 1
    out = np.zeros((x.shape[0], out_h, out_w, channels * multiplier))
    for c in range(channels):
        for j in range(multiplier):
            for row in range(out_h):
                for col in range(out_w):
                    window = padded[
                        :, row * stride : row * stride + k, col * stride : col * stride + k, c
                    ]
                    out[:, row, col, c * multiplier + j] = (window * kernel[:, :, c, j]).sum(
                        axis=(1, 2)
                    )
    return out if bias is None else out + bias


def _dense(x, kernel, bias):
    return x @ kernel if bias is None else x @ kernel + bias


def convnext_block(x, w, strides, stride_on="depthwise", pool="avg", activation="gelu"):
    """``Shortcut(x) + gamma * W2 act(W1 LN(DWConv(x)))``; ``w`` holds the weights by name
    (``shortcut_kernel`` None: no projection; ``gamma`` None: no layer scale)."""
    pool_2x2 = {"avg": avg_pool_2x2, "max": max_pool_2x2}[pool]
    shortcut = pool_2x2(x) if strides == 2 else x
    if w["shortcut_kernel"] is not None:
        shortcut = conv2d(shortcut, w["shortcut_kernel"], w["shortcut_bias"])
    k = w["depthwise_kernel"].shape[0]
    if stride_on == "pool" and strides == 2:
        x, conv_stride = pool_2x2(x), 1
    else:
        conv_stride = strides
    y = grouped_depthwise(
        x,
        w["depthwise_kernel"],
        w["depthwise_bias"],
        conv_stride,
        ((conv_stride - 1) + (k - 1)) // 2,
    )
    y = layer_norm(y, w["norm_gamma"], w["norm_beta"], w["epsilon"])
    y = ACTIVATIONS[activation](_dense(y, w["hidden_kernel"], w["hidden_bias"]))
    y = _dense(y, w["output_kernel"], w["output_bias"])
    if w["gamma"] is not None:
        y = y * w["gamma"]
    return shortcut + y
