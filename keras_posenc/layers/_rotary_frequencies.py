"""The frequency formulas of `RotaryPositions` (keras_posenc/layers/rotary.py), one function each.

Each returns the float32 ``theta'_k`` of the ``rotary_dim / 2`` pairs (a tensor, since dynamic
scalings read the current length, a tensor when traced) or an attention factor (a Python
float). They take the checked arguments and compute nothing else: `RotaryPositions` chooses,
checks and documents them. Kept apart so that rotary.py stays about the rotation itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from keras import ops


def base_frequencies(base: Any, rotary_dim: int) -> Any:
    """float32 ``theta_k = base ** (-2k / d)``, written as keras_hub writes it (same rounding)."""
    exponents = ops.arange(0, rotary_dim, 2, dtype="float32") / ops.cast(rotary_dim, "float32")
    return ops.power(ops.cast(base, "float32"), -exponents)


def ntk_base(base: float, s: Any, rotary_dim: int) -> Any:
    """NTK-aware base ``base * s ** (d / (d - 2))``; ``s`` a number or a float32 tensor."""
    # With d = 2 the one frequency is base ** 0 = 1 whatever the base: any exponent does.
    return base * s ** (rotary_dim / max(rotary_dim - 2, 1))


def dynamic_ntk(
    base: float, rotary_dim: int, factor: float, training_length: int, length: Any
) -> Any:
    """Dynamic NTK at the current ``length``: NTK-aware with
    ``s = max(1, factor * length / training_length - (factor - 1))`` (Hugging Face's
    ``_compute_dynamic_ntk_parameters``; ``factor = 1`` gives ``length / training_length``)."""
    ratio = ops.cast(length, "float32") / float(training_length)
    s = ops.maximum(factor * ratio - (factor - 1.0), 1.0)
    return base_frequencies(ntk_base(base, s, rotary_dim), rotary_dim)


def ramp_in_turns(theta: Any, training_length: int, low: float, high: float) -> Any:
    """``gamma_k = clip((r_k - low) / (high - low), 0, 1)``, ``r_k = training_length theta_k /
    (2 pi)`` the turns of pair ``k`` over the training length: 1 keeps ``theta_k``, 0 divides
    it by the scale (YaRN's paper, and Llama 3's smoothing, whose bounds are its frequency
    factors)."""
    turns = training_length * theta / (2.0 * math.pi)
    return ops.clip((turns - low) / (high - low), 0.0, 1.0)


def ramped(theta: Any, s: float, training_length: int, low: float, high: float) -> Any:
    """``(1 - gamma_k) theta_k / s + gamma_k theta_k`` with `ramp_in_turns`' ``gamma``: YaRN as
    the paper writes it (``low, high = alpha, beta``), and Llama 3.1's scaling (Hugging
    Face's ``_compute_llama3_parameters``: wavelengths above ``training_length / low`` divided
    by ``s``, those below ``training_length / high`` kept, the same ramp between, since
    ``training_length / wavelength`` is ``r_k``; ``low, high`` its frequency factors)."""
    gamma = ramp_in_turns(theta, training_length, low, high)
    return (1.0 - gamma) * theta / s + gamma * theta


def yarn_released_ramp(
    base: float,
    rotary_dim: int,
    training_length: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool,
) -> np.ndarray:
    """float32 ramp of the released YaRN (Hugging Face's ``_compute_yarn_parameters``): 0 keeps
    pair ``k``, 1 interpolates it; linear in the pair index ``k`` between the (fractional)
    indices where the pair turns ``beta_fast`` and ``beta_slow`` times over the training
    length, rounded outwards with ``truncate``, clamped to ``[0, rotary_dim - 1]``."""

    def index(turns: float) -> float:  # the k at which r_k = turns
        return rotary_dim * math.log(training_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = index(beta_fast), index(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    # The upper clamp is at rotary_dim - 1, not at the last pair: the released code's.
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # the released code's guard against a zero width
    pairs = np.arange(rotary_dim // 2, dtype=np.float32)
    return np.clip((pairs - np.float32(low)) / np.float32(high - low), 0, 1).astype(np.float32)


def yarn_released(
    base: float,
    rotary_dim: int,
    s: float,
    training_length: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool,
) -> Any:
    """The released YaRN's ``theta_k / s`` where the ramp is 1, ``theta_k`` where it is 0."""
    ramp = ops.convert_to_tensor(
        yarn_released_ramp(base, rotary_dim, training_length, beta_fast, beta_slow, truncate)
    )
    theta = base_frequencies(base, rotary_dim)
    return theta / s * ramp + theta * (1.0 - ramp)


def yarn_mscale(s: float, mscale: float = 1.0) -> float:
    """YaRN's ``0.1 mscale ln(s) + 1``, 1 for ``s <= 1`` (``get_mscale`` of the released code)."""
    return 1.0 if s <= 1 else 0.1 * mscale * math.log(s) + 1.0


def longrope(
    base: float,
    rotary_dim: int,
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    training_length: int,
    length: Any,
) -> Any:
    """LongRoPE (Hugging Face's ``_compute_longrope_parameters``): ``theta_k / lambda_k``, the
    per-pair ``lambda`` the long factors once ``length`` exceeds ``training_length``, else the
    short ones."""
    theta = base_frequencies(base, rotary_dim)
    short = theta / ops.convert_to_tensor(np.asarray(short_factor, np.float32))
    long = theta / ops.convert_to_tensor(np.asarray(long_factor, np.float32))
    if isinstance(length, int | np.integer):
        return long if length > training_length else short
    return ops.where(ops.cast(length, "int32") > training_length, long, short)


def longrope_attention_factor(s: float, training_length: int) -> float:
    """LongRoPE's default ``sqrt(1 + ln(s) / ln(training_length))``, 1 for ``s <= 1``."""
    if s <= 1:
        return 1.0
    return math.sqrt(1.0 + math.log(s) / math.log(training_length))
