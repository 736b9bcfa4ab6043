"""Computed position biases in numpy, written from the papers, one (query, key) pair at a time.

- ALiBi (Press et al. 2022): ``b_h(i, j) = -m_h |i - j|``; slopes for ``n`` heads, ``n`` a
  power of two, the geometric sequence starting at ``2^(-8/n)`` with that ratio; otherwise
  the ``n = 2^floor(log2 H)`` slopes followed by every other slope of ``2n`` heads.
- KERPLE (Chi et al. 2022): ``-r1 log(1 + r2 |i - j|)`` and ``-r1 |i - j|^r2``, parameters
  clamped as the authors' code does (>= 1e-2; the power's r2 <= 2).
- FIRE (Li et al. 2023): ``f(psi(i - j) / psi(max(L, i)))``, ``psi(x) = log(c x + 1)``, f a
  ReLU MLP with one hidden layer.
- Continuous bias (Swin v2's CPB in 1D, and timm's "cr" log coordinates): an MLP of the
  log-scaled signed distance ``j - i``.

Each returns ``(heads, q_len, k_len)`` for queries at positions ``offset .. offset + q_len - 1``
and keys at ``0 .. k_len - 1``. Does not import keras_posenc.
"""

from __future__ import annotations

import math

import numpy as np

KERPLE_EPSILON = 1e-2


def alibi_slopes(num_heads: int) -> np.ndarray:
    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if math.log2(num_heads).is_integer():
        return np.array(geometric(num_heads))
    n = 2 ** math.floor(math.log2(num_heads))
    return np.array(geometric(n) + alibi_slopes(2 * n)[0::2][: num_heads - n].tolist())


def _pairs(query_length: int, key_length: int, offset: int):
    for i in range(query_length):
        for j in range(key_length):
            yield i, j, i + offset  # row, column, the query's absolute position


def alibi(num_heads: int, query_length: int, key_length: int, offset: int = 0) -> np.ndarray:
    slopes = alibi_slopes(num_heads)
    out = np.zeros((num_heads, query_length, key_length))
    for i, j, position in _pairs(query_length, key_length, offset):
        out[:, i, j] = -slopes * abs(position - j)
    return out


def kerple(
    r1: np.ndarray, r2: np.ndarray, kernel: str, query_length: int, key_length: int, offset: int = 0
) -> np.ndarray:
    r1 = np.maximum(np.asarray(r1, np.float64), KERPLE_EPSILON)
    r2 = np.maximum(np.asarray(r2, np.float64), KERPLE_EPSILON)
    if kernel == "power":
        r2 = np.minimum(r2, 2.0)
    out = np.zeros((len(r1), query_length, key_length))
    for i, j, position in _pairs(query_length, key_length, offset):
        distance = abs(position - j)
        if kernel == "log":
            out[:, i, j] = -r1 * np.log(1.0 + r2 * distance)
        else:
            out[:, i, j] = -r1 * float(distance) ** r2
    return out


def mlp(x: np.ndarray, hidden_kernel, hidden_bias, output_kernel, output_bias=None) -> np.ndarray:
    """A ReLU MLP with one hidden layer, on the last axis."""
    hidden = np.maximum(x @ np.asarray(hidden_kernel, np.float64) + hidden_bias, 0.0)
    out = hidden @ np.asarray(output_kernel, np.float64)
    return out if output_bias is None else out + output_bias


def fire(weights: dict, query_length: int, key_length: int, offset: int = 0) -> np.ndarray:
    """``weights``: c, threshold, and the MLP's hidden/output kernels and biases.

    Keys after the query (masked under FIRE's causal use) get distance 0."""
    c = max(float(weights["c"]), 1e-6)
    threshold = max(float(weights["threshold"]), 1.0)
    heads = np.asarray(weights["output_kernel"]).shape[1]
    out = np.zeros((heads, query_length, key_length))
    for i, j, position in _pairs(query_length, key_length, offset):
        distance = max(position - j, 0)
        normalised = math.log(c * distance + 1.0) / math.log(c * max(threshold, position) + 1.0)
        out[:, i, j] = mlp(
            np.array([normalised]),
            weights["hidden_kernel"],
            weights["hidden_bias"],
            weights["output_kernel"],
            weights["output_bias"],
        )
    return out


def log_coordinate(x: float, mode: str, window: int | None = None) -> float:
    if mode == "swin":
        x = x / (window - 1) * 8.0
        return math.copysign(1.0, x) * math.log2(1.0 + abs(x)) / math.log2(8.0) if x else 0.0
    return math.copysign(1.0, x) * math.log(1.0 + abs(x)) if x else 0.0


def continuous(
    weights: dict,
    mode: str,
    query_length: int,
    key_length: int,
    offset: int = 0,
    window: int | None = None,
) -> np.ndarray:
    heads = np.asarray(weights["output_kernel"]).shape[1]
    out = np.zeros((heads, query_length, key_length))
    for i, j, position in _pairs(query_length, key_length, offset):
        x = np.array([log_coordinate(float(j - position), mode, window)])
        value = mlp(
            x,
            weights["hidden_kernel"],
            weights["hidden_bias"],
            weights["output_kernel"],
            weights.get("output_bias"),
        )
        out[:, i, j] = 16.0 / (1.0 + np.exp(-value)) if mode == "swin" else value
    return out


def scheme_bias(
    scheme_name: str,
    config: dict,
    weights: dict,
    num_heads: int,
    query_length: int,
    key_length: int,
    offset: int = 0,
) -> np.ndarray:
    """The bias of a scheme given by its class name and config, with its weights by name."""
    if scheme_name == "ALiBi":
        return alibi(num_heads, query_length, key_length, offset)
    if scheme_name == "KERPLE":
        return kerple(
            weights["r1"], weights["r2"], config["kernel"], query_length, key_length, offset
        )
    if scheme_name == "FIRE":
        return fire(weights, query_length, key_length, offset)
    if scheme_name == "ContinuousBias":
        return continuous(
            weights, config["mode"], query_length, key_length, offset, window=config["window"]
        )
    raise ValueError(scheme_name)


def continuous_2d(
    weights: dict, mode: str, height: int, width: int, pretrained: tuple | None = None
) -> np.ndarray:
    """timm's ``RelPosMlp`` / Swin v2's CPB over an ``height x width`` grid, cell pair by cell
    pair: query ``(a, b)``, key ``(c, d)`` (row-major), input ``(a - c, b - d)`` per axis on the
    log scale (Swin: normalised by ``pretrained - 1``, default the grid). ``(1, heads, N, N)``."""
    window = pretrained or (height, width)
    heads = np.asarray(weights["output_kernel"]).shape[1]
    cells = [(a, b) for a in range(height) for b in range(width)]
    out = np.zeros((1, heads, len(cells), len(cells)))
    for q, (a, b) in enumerate(cells):
        for k, (c, d) in enumerate(cells):
            x = np.array(
                [
                    log_coordinate(float(a - c), mode, window[0]),
                    log_coordinate(float(b - d), mode, window[1]),
                ]
            )
            value = mlp(
                x,
                weights["hidden_kernel"],
                weights["hidden_bias"],
                weights["output_kernel"],
                weights.get("output_bias"),
            )
            out[0, :, q, k] = 16.0 / (1.0 + np.exp(-value)) if mode == "swin" else value
    return out
