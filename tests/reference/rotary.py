"""Numpy reference for rotary position embeddings and their scaled variants, in float64.

Written pair by pair from the formulas (``d`` the rotary dimension, ``int(head_dim *
partial_rotary_factor)``; the dimensions after it pass through unchanged):

- RoPE (Su et al. 2021, RoFormer): pair ``k`` of ``d / 2`` is turned by the angle
  ``m * theta_k`` at position ``m``, ``theta_k = base ** (-2k / d)``. Pairs are keras_hub's
  and Llama's "rotate half" layout (dimensions ``k`` and ``k + d / 2``) or, interleaved,
  RoFormer's paper and GPT-J's (``2k`` and ``2k + 1``).
- Position interpolation (Chen et al. 2023): the angle of ``m / s``.
- NTK-aware scaling (bloc97 2023, no paper): ``base' = base * s ** (d / (d - 2))``;
  dynamic NTK as Hugging Face's ``_compute_dynamic_ntk_parameters``: the same with
  ``s = factor * length / L - (factor - 1)`` once ``length > L``, plain RoPE before.
- YaRN (Peng et al. 2023), the paper's: ``r_k = L / lambda_k``, ``lambda_k = 2 pi /
  theta_k``; ``gamma_k = 0`` if ``r_k < alpha``, ``1`` if ``r_k > beta``, else
  ``(r_k - alpha) / (beta - alpha)``; ``theta'_k = (1 - gamma_k) theta_k / s + gamma_k
  theta_k``. The released one, as Hugging Face's ``_compute_yarn_parameters``
  (``find_correction_dim``, ``find_correction_range`` with ``truncate``,
  ``linear_ramp_factor``): the ramp is linear in ``k`` between the dimension indices where
  ``r = beta_fast`` and ``r = beta_slow``. Both times ``attention_factor`` (default
  ``get_mscale``: ``0.1 ln s + 1``, or the ratio of two with ``mscale`` / ``mscale_all_dim``).
- Llama 3.1, as ``_compute_llama3_parameters``: by wavelength, ``> L / low`` divided by ``s``,
  ``< L / high`` kept, between ``(1 - f) theta / s + f theta``, ``f = (L / wavelength - low) /
  (high - low)``.
- LongRoPE, as ``_compute_longrope_parameters``: ``theta_k / lambda_k`` with the long factors
  once the length exceeds ``L``, the short ones before; times ``sqrt(1 + ln s / ln L)``.
- xPos (Sun et al. 2022, reference code microsoft/torchscale):
  ``zeta_k = (2k / d + 0.4) / 1.4``, the rotated query at position ``n`` times
  ``zeta_k ** ((n - c) / scale_base)``, the key at ``m`` times
  ``zeta_k ** ((c - m) / scale_base)``, for a centre ``c`` (0 unless given: the logits do
  not depend on it).

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
    """gamma_k of YaRN's "NTK-by-parts" (the paper): 1 keeps theta_k, 0 interpolates it."""
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


def yarn_released_ramp(
    head_dim: int,
    base: float,
    training_length: int,
    beta_slow: float = 1.0,
    beta_fast: float = 32.0,
    truncate: bool = True,
) -> np.ndarray:
    """gamma_k of the released YaRN (1 keeps theta_k): one minus ``linear_ramp_factor``
    between ``find_correction_range``'s bounds."""

    def correction_dim(rotations: float) -> float:  # the dimension index where r = rotations
        return (
            head_dim * math.log(training_length / (rotations * 2 * math.pi)) / (2 * math.log(base))
        )

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = [min(max((k - low) / (high - low), 0.0), 1.0) for k in range(head_dim // 2)]
    return 1.0 - np.array(ramp)


def get_mscale(s: float, mscale: float = 1.0) -> float:
    """``get_mscale``: 1 for s <= 1, else 0.1 mscale ln s + 1."""
    return 1.0 if s <= 1 else 0.1 * mscale * math.log(s) + 1.0


def llama3_frequencies(
    head_dim: int, base: float, s: float, training_length: int, low: float, high: float
) -> np.ndarray:
    """Llama 3.1's frequencies, branch by branch on the wavelength."""
    out = []
    for theta in rope_frequencies(head_dim, base):
        wavelength = 2 * math.pi / theta
        if wavelength < training_length / high:
            out.append(theta)
        elif wavelength > training_length / low:
            out.append(theta / s)
        else:
            smooth = (training_length / wavelength - low) / (high - low)
            out.append((1 - smooth) * theta / s + smooth * theta)
    return np.array(out)


def scaled_frequencies(
    head_dim: int,
    max_wavelength: float = 10000.0,
    scaling: str | None = None,
    scaling_factor: float = 1.0,
    training_length: int | None = None,
    length: int | None = None,
    yarn_convention: str = "released",
    yarn_alpha: float = 1.0,
    yarn_beta: float = 32.0,
    yarn_truncate: bool = True,
    yarn_mscale: float | None = None,
    yarn_mscale_all_dim: float | None = None,
    attention_factor: float | None = None,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    short_factor: tuple | None = None,
    long_factor: tuple | None = None,
) -> tuple[np.ndarray, float, float]:
    """``(theta', position_divisor, factor)`` for a rotary dimension ``head_dim``: the angle
    at position ``m`` is ``m / position_divisor * theta'_k``, and the turned vector is
    multiplied by ``factor``."""
    s, d, base = scaling_factor, head_dim, max_wavelength
    theta = rope_frequencies(d, base)
    if scaling is None:
        return theta, 1.0, 1.0
    if scaling == "linear":
        return theta, s, 1.0
    if scaling == "dynamic_ntk":
        current = length if length > training_length else training_length
        s = s * current / training_length - (s - 1)
        scaling = "ntk"
    if scaling == "ntk":
        return rope_frequencies(d, base * s ** (d / (d - 2))), 1.0, 1.0
    if scaling == "yarn":
        if yarn_convention == "paper":
            gamma = yarn_ramp(d, base, training_length, yarn_alpha, yarn_beta)
        else:
            gamma = yarn_released_ramp(
                d, base, training_length, yarn_alpha, yarn_beta, yarn_truncate
            )
        if attention_factor is None:
            attention_factor = get_mscale(s)
            if yarn_mscale and yarn_mscale_all_dim:
                attention_factor = get_mscale(s, yarn_mscale) / get_mscale(s, yarn_mscale_all_dim)
        return (1 - gamma) * theta / s + gamma * theta, 1.0, attention_factor
    if scaling == "llama3":
        frequencies = llama3_frequencies(
            d, base, s, training_length, low_freq_factor, high_freq_factor
        )
        return frequencies, 1.0, 1.0
    if scaling == "longrope":
        factors = long_factor if length is not None and length > training_length else short_factor
        if attention_factor is None:
            attention_factor = 1.0
            if s > 1:
                attention_factor = math.sqrt(1 + math.log(s) / math.log(training_length))
        return theta / np.asarray(factors, np.float64), 1.0, attention_factor
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
    interleaved: bool = False,
    xpos_centre: float = 0.0,
) -> np.ndarray:
    """``x`` (batch, sequence, heads, d) turned pair by pair; ``positions`` (sequence,). Only
    the first ``2 len(frequencies)`` dimensions turn; the rest pass through."""
    x = np.asarray(x, np.float64)
    positions = np.asarray(positions, np.float64)
    half = len(frequencies)
    zeta = xpos_zeta(2 * half)
    out = x.copy()
    for k in range(half):
        i, j = (2 * k, 2 * k + 1) if interleaved else (k, k + half)
        angle = positions / position_divisor * frequencies[k]
        cos, sin = np.cos(angle)[None, :, None], np.sin(angle)[None, :, None]
        a, b = x[..., i], x[..., j]
        first, second = a * cos - b * sin, a * sin + b * cos
        if xpos_scale_base is not None:
            sign = 1.0 if role == "query" else -1.0
            power = sign * (positions - xpos_centre) / xpos_scale_base
            scale = (zeta[k] ** power)[None, :, None]
            first, second = first * scale, second * scale
        out[..., i], out[..., j] = first * factor, second * factor
    return out


def rotary(
    x: np.ndarray,
    positions: np.ndarray,
    role: str = "query",
    length: int | None = None,
    xpos_scale_base: float | None = None,
    partial_rotary_factor: float = 1.0,
    interleaved: bool = False,
    xpos_centre: float = 0.0,
    **scaling: object,
) -> np.ndarray:
    """The whole rotation of a query or key: ``scaling`` holds `scaled_frequencies`'
    arguments (``max_wavelength``, ``scaling``, ``scaling_factor``, ...): a
    `RotaryPositions`' config is accepted as it is."""
    rotary_dim = int(np.shape(x)[-1] * partial_rotary_factor)
    frequencies, divisor, factor = scaled_frequencies(rotary_dim, length=length, **scaling)
    return rotate(
        x,
        positions,
        frequencies,
        divisor,
        factor,
        role,
        xpos_scale_base,
        interleaved,
        xpos_centre,
    )


def pair_logits(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per pair ``j`` the term of ``q . k`` from dimensions ``j`` and ``j + d / 2``:
    ``(..., d / 2)`` for ``q``, ``k`` of shape ``(..., d)``."""
    half = q.shape[-1] // 2
    products = np.asarray(q, np.float64) * np.asarray(k, np.float64)
    return products[..., :half] + products[..., half:]
