"""Numpy reference for rotary position embeddings and their scaled variants, in float64.

Written pair by pair from the formulas:

- RoPE (Su et al. 2021, RoFormer): pair ``k`` of ``d / 2`` is turned by the angle
  ``m * theta_k`` at position ``m``, ``theta_k = base ** (-2k / d)``. The pairs are
  keras_hub's "rotate half" layout: pair ``k`` is dimensions ``k`` and ``k + d / 2``
  (RoFormer's paper pairs ``2k`` and ``2k + 1``).
- Position interpolation (Chen et al. 2023): the angle of ``m / s``.
- NTK-aware scaling (bloc97 2023, no paper): ``base' = base * s ** (d / (d - 2))``;
  dynamic NTK: the same with ``s = max(1, length / training_length)``.
- YaRN (Peng et al. 2023): ``r_k = training_length / lambda_k``,
  ``lambda_k = 2 pi / theta_k``; ``gamma_k = 0`` if ``r_k < alpha``, ``1`` if
  ``r_k > beta``, else ``(r_k - alpha) / (beta - alpha)``;
  ``theta'_k = (1 - gamma_k) theta_k / s + gamma_k theta_k``; queries and keys each
  times ``0.1 ln s + 1``.
- xPos (Sun et al. 2022, reference code microsoft/torchscale):
  ``zeta_k = (2k / d + 0.4) / 1.4``, the rotated query at position ``n`` times
  ``zeta_k ** (n / scale_base)``, the key at ``m`` times ``zeta_k ** (-m / scale_base)``,
  positions not centred.

Nothing here imports keras_posenc.
"""

from __future__ import annotations

import math

import numpy as np


def rope_frequencies(head_dim: int, base: float = 10000.0) -> np.ndarray:
    """theta_k = base ** (-2k / d), k = 0 .. d/2 - 1."""
    return np.array([base ** (-2.0 * k / head_dim) for k in range(head_dim // 2)])


def yarn_ramp(
    head_dim: int, base: float, training_length: int, alpha: float = 1.0, beta: float = 32.0
) -> np.ndarray:
    """gamma_k of YaRN's "NTK-by-parts": 1 keeps theta_k, 0 interpolates it."""
    gamma = []
    for theta in rope_frequencies(head_dim, base):
        wavelength = 2.0 * math.pi / theta
        r = training_length / wavelength
        if r < alpha:
            gamma.append(0.0)
        elif r > beta:
            gamma.append(1.0)
        else:
            gamma.append((r - alpha) / (beta - alpha))
    return np.array(gamma)


def scaled_frequencies(
    head_dim: int,
    max_wavelength: float = 10000.0,
    scaling: str | None = None,
    scaling_factor: float = 1.0,
    training_length: int | None = None,
    length: int | None = None,
    yarn_alpha: float = 1.0,
    yarn_beta: float = 32.0,
) -> tuple[np.ndarray, float, float]:
    """``(theta', position_divisor, factor)``: the angle at position ``m`` is
    ``m / position_divisor * theta'_k``, and the rotated vector is multiplied by ``factor``."""
    s, d = scaling_factor, head_dim
    if scaling is None:
        return rope_frequencies(d, max_wavelength), 1.0, 1.0
    if scaling == "linear":
        return rope_frequencies(d, max_wavelength), s, 1.0
    if scaling == "dynamic_ntk":
        s = max(1.0, length / training_length)
        scaling = "ntk"
    if scaling == "ntk":
        return rope_frequencies(d, max_wavelength * s ** (d / (d - 2))), 1.0, 1.0
    if scaling == "yarn":
        theta = rope_frequencies(d, max_wavelength)
        gamma = yarn_ramp(d, max_wavelength, training_length, yarn_alpha, yarn_beta)
        return (1 - gamma) * theta / s + gamma * theta, 1.0, 0.1 * math.log(s) + 1.0
    raise ValueError(scaling)


def xpos_zeta(head_dim: int) -> np.ndarray:
    """zeta_k = (2k / d + 0.4) / 1.4, torchscale's ``(arange(0, d, 2) + 0.4 d) / (1.4 d)``."""
    return np.array([(2.0 * k / head_dim + 0.4) / 1.4 for k in range(head_dim // 2)])


def rotate(
    x: np.ndarray,
    positions: np.ndarray,
    frequencies: np.ndarray,
    position_divisor: float = 1.0,
    factor: float = 1.0,
    role: str = "query",
    xpos_scale_base: float | None = None,
) -> np.ndarray:
    """``x`` (batch, sequence, heads, d) turned pair by pair; ``positions`` (sequence,)."""
    x = np.asarray(x, np.float64)
    positions = np.asarray(positions, np.float64)
    half = x.shape[-1] // 2
    zeta = xpos_zeta(x.shape[-1])
    out = np.empty_like(x)
    for k in range(half):
        angle = positions / position_divisor * frequencies[k]
        cos, sin = np.cos(angle)[None, :, None], np.sin(angle)[None, :, None]
        a, b = x[..., k], x[..., k + half]
        first, second = a * cos - b * sin, a * sin + b * cos
        if xpos_scale_base is not None:
            sign = 1.0 if role == "query" else -1.0
            scale = (zeta[k] ** (sign * positions / xpos_scale_base))[None, :, None]
            first, second = first * scale, second * scale
        out[..., k], out[..., k + half] = first, second
    return out * factor


def rotary(
    x: np.ndarray,
    positions: np.ndarray,
    role: str = "query",
    length: int | None = None,
    xpos_scale_base: float | None = None,
    **scaling: object,
) -> np.ndarray:
    """The whole rotation of a query or key: ``scaling`` holds `scaled_frequencies`'
    arguments (``max_wavelength``, ``scaling``, ``scaling_factor``, ...)."""
    frequencies, divisor, factor = scaled_frequencies(np.shape(x)[-1], length=length, **scaling)
    return rotate(x, positions, frequencies, divisor, factor, role, xpos_scale_base)


def pair_logits(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per pair ``j`` the term of ``q . k`` from dimensions ``j`` and ``j + d / 2``:
    ``(..., d / 2)`` for ``q``, ``k`` of shape ``(..., d)``."""
    half = q.shape[-1] // 2
    products = np.asarray(q, np.float64) * np.asarray(k, np.float64)
    return products[..., :half] + products[..., half:]
