"""Numpy references for CoAtNet's blocks (Dai et al. 2021), independent of keras_posenc.

Written from the paper's formulas with explicit loops over kernel offsets, in float64:

- MBConv: x <- Shortcut(x) + Conv1x1(SE(GELU(BN(DWConv(GELU(BN(Conv1x1(BN(x))))))))),
  Shortcut = Proj(Pool(x)) when downsampling / changing width, else identity;
  BatchNorm in inference mode (moving statistics). Keyword options describe timm's
  ``coatnet_*_rw`` variant: SiLU, an activation after the pre-norm, the stride on a
  2 x 2 pool before the expansion, average pooling, SE (with its own activation)
  between the depthwise conv and its BatchNorm, no output bias, PyTorch's padding.
- Transformer: x <- Shortcut(x) + g1 * Attention(Pool(LN(x))); x <- x + g2 * FFN(LN(x)),
  with Attention = softmax(Q K^T / sqrt(d) + bias) V per head, the 2D relative bias of
  reference.relative_position_2d and optional per-channel layer scales g1, g2.
- "same" padding and pooling follow TensorFlow's convention (output ceil(n / stride),
  padding split with the extra cell after), which is what Keras uses on every backend;
  an average pool divides by the number of real (unpadded) cells in its window.
- "symmetric" padding is PyTorch's: p = (k - 1) // 2 zeros on each side, output
  floor((n + 2p - k) / stride) + 1; for an even n at stride 2 it samples other pixels.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf

from reference.relative_position_2d import relative_position_bias_2d


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU: x * Phi(x)."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def tanh_gelu(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation (the official MaxViT code's)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU (swish): x * sigmoid(x)."""
    return x * sigmoid(x)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


ACTIVATIONS = {"gelu": gelu, "silu": silu, "relu": relu}


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def _pad(x: np.ndarray, kernel: int, stride: int, value: float) -> tuple[np.ndarray, int, int]:
    """x (B, H, W, C) padded for a "same" window of ``kernel`` at ``stride``."""
    out_h, top, bottom = _same_padding(x.shape[1], kernel, stride)
    out_w, left, right = _same_padding(x.shape[2], kernel, stride)
    padded = np.pad(
        x, ((0, 0), (top, bottom), (left, right), (0, 0)), mode="constant", constant_values=value
    )
    return padded, out_h, out_w


def conv2d(x, kernel, bias=None, stride=1):
    """Dense 2D convolution, "same" padding; kernel (k, k, C_in, C_out)."""
    k = kernel.shape[0]
    padded, out_h, out_w = _pad(x, k, stride, 0.0)
    out = np.zeros((x.shape[0], out_h, out_w, kernel.shape[-1]))
    for i in range(k):
        for j in range(k):
            window = padded[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride]
            out += window @ kernel[i, j]
    return out if bias is None else out + bias


def _symmetric_pad(x: np.ndarray, kernel: int, stride: int) -> tuple[np.ndarray, int, int]:
    """x (B, H, W, C) zero-padded as PyTorch's Conv2d(padding=(k - 1) // 2) for odd k."""
    assert kernel % 2 == 1, kernel
    p = (kernel - 1) // 2
    out_h = (x.shape[1] + 2 * p - kernel) // stride + 1
    out_w = (x.shape[2] + 2 * p - kernel) // stride + 1
    return np.pad(x, ((0, 0), (p, p), (p, p), (0, 0))), out_h, out_w


def depthwise_conv2d(x, kernel, stride=1, padding="same"):
    """Depthwise 2D convolution, "same" or "symmetric" padding; kernel (k, k, C, 1), no bias."""
    k = kernel.shape[0]
    if padding == "symmetric":
        padded, out_h, out_w = _symmetric_pad(x, k, stride)
    else:
        padded, out_h, out_w = _pad(x, k, stride, 0.0)
    out = np.zeros((x.shape[0], out_h, out_w, x.shape[-1]))
    for i in range(k):
        for j in range(k):
            window = padded[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride]
            out += window * kernel[i, j, :, 0]
    return out


def max_pool_2x2(x):
    """2 x 2 max pool with stride 2, "same" padding (padded cells never win)."""
    padded, out_h, out_w = _pad(x, 2, 2, -np.inf)
    out = np.full((x.shape[0], out_h, out_w, x.shape[-1]), -np.inf)
    for i in range(2):
        for j in range(2):
            out = np.maximum(out, padded[:, i : i + 2 * out_h : 2, j : j + 2 * out_w : 2])
    return out


def avg_pool_2x2(x):
    """2 x 2 average pool with stride 2, "same" padding: padded cells do not count."""
    padded, out_h, out_w = _pad(x, 2, 2, 0.0)
    real, _, _ = _pad(np.ones_like(x[..., :1]), 2, 2, 0.0)
    total = np.zeros((x.shape[0], out_h, out_w, x.shape[-1]))
    count = np.zeros((x.shape[0], out_h, out_w, 1))
    for i in range(2):
        for j in range(2):
            total += padded[:, i : i + 2 * out_h : 2, j : j + 2 * out_w : 2]
            count += real[:, i : i + 2 * out_h : 2, j : j + 2 * out_w : 2]
    return total / count


def pool_2x2(x, pool="max"):
    return {"max": max_pool_2x2, "avg": avg_pool_2x2}[pool](x)


def batch_norm(x, gamma, beta, mean, variance, epsilon):
    return gamma * (x - mean) / np.sqrt(variance + epsilon) + beta


def layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(variance + epsilon) + beta


def squeeze_excite(x, w1, b1, w2, b2, activation="gelu"):
    """x * sigmoid(W2 act(W1 mean_hw(x) + b1) + b2), one gate per sample and channel."""
    context = x.mean(axis=(1, 2))
    gate = sigmoid(ACTIVATIONS[activation](context @ w1 + b1) @ w2 + b2)
    return x * gate[:, None, None, :]


def pooled_projection(x, strides, kernel=None, bias=None, pool="max"):
    """The shortcut Proj(Pool(x)): pool when strides is 2, project when a kernel is given
    (``bias`` None: a projection without bias)."""
    if strides == 2:
        x = pool_2x2(x, pool)
    if kernel is not None:
        x = conv2d(x, kernel, bias)
    return x


def mbconv(
    x,
    w,
    strides=1,
    stride_on="expand",
    epsilon=1e-3,
    *,
    activation="gelu",
    pre_activation=False,
    pool="max",
    se_activation="gelu",
    se_position="after_activation",
    padding="same",
):
    """MBConv in inference mode; ``w`` maps names to float arrays (see the test's extraction).

    Keys: pre_norm, expand_norm, depthwise_norm (each a tuple gamma, beta, mean,
    variance), expand_kernel, depthwise_kernel, se (w1, b1, w2, b2) or None,
    project_kernel, project_bias (or None), shortcut_kernel / shortcut_bias (or None).
    The widths (hidden, SE bottleneck) are those of the kernels given. ``stride_on``:
    "expand", "depthwise" or "pool" (a 2 x 2 ``pool`` of the normalised, activated
    input before the expansion); ``se_position``: "after_activation" (SE after the
    depthwise BatchNorm and activation) or "before_norm" (between the depthwise conv
    and its BatchNorm); ``padding`` of the depthwise conv: "same" or "symmetric".
    """
    act = ACTIVATIONS[activation]
    se = w["se"]
    shortcut = pooled_projection(x, strides, w["shortcut_kernel"], w["shortcut_bias"], pool)
    y = batch_norm(x, *w["pre_norm"], epsilon)
    if pre_activation:
        y = act(y)
    if stride_on == "pool" and strides == 2:
        y = pool_2x2(y, pool)
    y = conv2d(y, w["expand_kernel"], stride=strides if stride_on == "expand" else 1)
    y = act(batch_norm(y, *w["expand_norm"], epsilon))
    depthwise_stride = strides if stride_on == "depthwise" else 1
    y = depthwise_conv2d(y, w["depthwise_kernel"], stride=depthwise_stride, padding=padding)
    if se is not None and se_position == "before_norm":
        y = squeeze_excite(y, *se, activation=se_activation)
    y = act(batch_norm(y, *w["depthwise_norm"], epsilon))
    if se is not None and se_position == "after_activation":
        y = squeeze_excite(y, *se, activation=se_activation)
    y = conv2d(y, w["project_kernel"], w["project_bias"])
    return shortcut + y


def relative_attention_2d(x, w, num_heads, table, rotate=None):
    """Multi-head self-attention over the positions of x (B, h, w, C) with a 2D relative bias.

    ``w["qkv"]`` = (kernel (C, 3 * D), bias) with columns laid out [q | k | v], each
    (heads, head_dim); ``table`` (heads, 2h - 1, 2w - 1). The output projection
    ``w["attention_output"]`` maps D to its own width (D, or another when the
    attention runs at the input width). ``table`` None: no bias. ``rotate(x, head, (h, w))``
    turns one head's queries or keys (N, head_dim) by their cells' positions (2D rotary).
    """
    batch, height, width, _ = x.shape
    positions = height * width
    kernel, bias = w["qkv"]
    model_dim = kernel.shape[1] // 3
    head_dim = model_dim // num_heads
    qkv = x.reshape(batch, positions, -1) @ kernel + bias
    qkv = qkv.reshape(batch, positions, 3, num_heads, head_dim)
    if table is None:
        relative = np.zeros((num_heads, positions, positions))
    else:
        relative = relative_position_bias_2d(table, height, width)[0]  # (heads, N, N)
    out = np.zeros((batch, positions, num_heads, head_dim))
    for b in range(batch):
        for h in range(num_heads):
            q, k, v = qkv[b, :, 0, h], qkv[b, :, 1, h], qkv[b, :, 2, h]
            if rotate is not None:
                q, k = rotate(q, h, (height, width)), rotate(k, h, (height, width))
            logits = q @ k.T / math.sqrt(head_dim) + relative[h]
            logits = logits - logits.max(axis=-1, keepdims=True)
            weights = np.exp(logits)
            weights /= weights.sum(axis=-1, keepdims=True)
            out[b, :, h] = weights @ v
    out_kernel, out_bias = w["attention_output"]
    return (out.reshape(batch, positions, model_dim) @ out_kernel + out_bias).reshape(
        batch, height, width, out_kernel.shape[-1]
    )


def window_cells(partition, size, height, width):
    """The (row, column) map cells of each MaxViT window, row-major within the window.

    ``"block"``: window (i, j) is the ``size`` cells from (i * size[0], j * size[1]);
    ``"grid"``: window (p, q) holds cell (a * height / size[0] + p, b * width / size[1] + q)
    at its position (a, b), the paper's dilated grid (Tu et al. 2022, section 3.2).
    """
    rows, cols = size
    windows = []
    if partition == "block":
        for i in range(height // rows):
            for j in range(width // cols):
                windows.append([(i * rows + a, j * cols + b)
                                for a in range(rows) for b in range(cols)])  # fmt: skip
    else:
        step_rows, step_cols = height // rows, width // cols
        for p in range(step_rows):
            for q in range(step_cols):
                windows.append([(a * step_rows + p, b * step_cols + q)
                                for a in range(rows) for b in range(cols)])  # fmt: skip
    return windows


def partitioned_attention_2d(x, w, num_heads, table, partition, size, rotate=None):
    """`relative_attention_2d` within each window of ``partition`` (MaxViT)."""
    batch, height, width, _ = x.shape
    out = None
    for cells in window_cells(partition, size, height, width):
        rows, cols = zip(*cells)
        window = x[:, list(rows), list(cols)].reshape(batch, size[0], size[1], -1)
        attended = relative_attention_2d(window, w, num_heads, table, rotate)
        if out is None:
            out = np.zeros((batch, height, width, attended.shape[-1]))
        out[:, list(rows), list(cols)] = attended.reshape(batch, len(cells), -1)
    return out


def relative_transformer_block(
    x, w, num_heads, strides=1, epsilon=1e-5, *, pool="max", partition=None, partition_size=None,
    activation=gelu, rotate=None,
):  # fmt: skip
    """The pre-norm Transformer block; ``w`` keys: attention_norm, ffn_norm (gamma, beta),
    qkv, attention_output, ffn_hidden, ffn_output (kernel, bias), table,
    shortcut_kernel / shortcut_bias (or None), and optionally attention_scale /
    ffn_scale (per-channel layer scales, or None). ``num_heads`` splits the width of
    the qkv projection (the output or the input width). ``partition`` (``"block"`` /
    ``"grid"``) with ``partition_size``: MaxViT's attention within windows. ``rotate``: 2D
    rotary of queries and keys (see `relative_attention_2d`); ``w["table"]`` None: no bias."""
    shortcut = pooled_projection(x, strides, w["shortcut_kernel"], w["shortcut_bias"], pool)
    y = layer_norm(x, *w["attention_norm"], epsilon)
    if strides == 2:
        y = pool_2x2(y, pool)
    if partition is None:
        y = relative_attention_2d(y, w, num_heads, w["table"], rotate)
    else:
        y = partitioned_attention_2d(y, w, num_heads, w["table"], partition, partition_size, rotate)
    if w.get("attention_scale") is not None:
        y = y * w["attention_scale"]
    x = shortcut + y
    hidden_kernel, hidden_bias = w["ffn_hidden"]
    output_kernel, output_bias = w["ffn_output"]
    y = layer_norm(x, *w["ffn_norm"], epsilon)
    y = activation(y @ hidden_kernel + hidden_bias) @ output_kernel + output_bias
    if w.get("ffn_scale") is not None:
        y = y * w["ffn_scale"]
    return x + y
