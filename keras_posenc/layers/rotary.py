"""Rotary position embeddings (RoPE) and their scaled variants, as one description.

`RotaryPositions` says how queries and keys are rotated by their absolute
positions (Su et al.'s RoPE), how the rotation is stretched for sequences
longer than the training length (position interpolation, NTK-aware and
dynamic NTK base scaling, YaRN), and whether xPos' decay is applied on top. It
holds no weights and is not a layer: an attention layer takes one (as
``rotary=``) and calls `RotaryPositions.rotate` on its projected queries and
keys.

Examples:

    >>> import numpy as np
    >>> from keras_posenc.layers.rotary import RotaryPositions
    >>> rope = RotaryPositions(scaling="yarn", scaling_factor=4.0, training_length=2048)
    >>> rope
    RotaryPositions(scaling='yarn', scaling_factor=4.0, training_length=2048)
    >>> x = np.ones((1, 3, 2, 8), "float32")  # (batch, sequence, heads, head_dim)
    >>> tuple(rope.rotate(x, 5, role="key").shape)
    (1, 3, 2, 8)
    >>> rope.dynamic, rope.causal_only
    (False, False)
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.layers._checks import (
    check_choice,
    check_int,
    check_number_at_least,
    check_positive_number,
    shape_of,
)
from keras_posenc.layers._description import Description

__all__ = ["RotaryPositions"]

#: The values of ``scaling`` besides None (plain RoPE).
SCALINGS = ("linear", "ntk", "dynamic_ntk", "yarn")

# Computed by keras_hub's RotaryEmbedding with the same numbers (`_keras_hub_rotation`);
# the other scalings rotate by frequencies keras_hub cannot express (`_rotate_half`).
_DELEGATED = (None, "linear", "ntk")

# The arguments only some scalings read; with any other scaling they must keep their
# defaults, so that a value that would be ignored is an error instead.
_READ_BY = {
    "scaling_factor": ("linear", "ntk", "yarn"),
    "training_length": ("dynamic_ntk", "yarn"),
    "yarn_alpha": ("yarn",),
    "yarn_beta": ("yarn",),
}

# The constructor's defaults (`__repr__` leaves them out).
_DEFAULTS = {
    "max_wavelength": 10000.0,
    "scaling": None,
    "scaling_factor": 1.0,
    "training_length": None,
    "yarn_alpha": 1.0,
    "yarn_beta": 32.0,
    "xpos_scale_base": None,
}

# xPos' gamma (torchscale's ``XPOS``: ``scale = (arange(0, d, 2) + 0.4 d) / (1.4 d)``).
_XPOS_GAMMA = 0.4


@keras.saving.register_keras_serializable(package="keras_posenc")
class RotaryPositions(Description):
    """Rotary position embeddings (RoPE) with optional scaling and xPos decay.

    The query and key at position ``m`` are rotated pair by pair: pair ``k``
    (of ``d / 2``, ``d`` the head size) is turned by the angle ``m * theta_k``,
    ``theta_k = max_wavelength ** (-2k / d)``, so the dot product of a query
    at ``m`` and a key at ``n`` depends on ``m - n`` only. Pairs follow
    keras_hub's ``RotaryEmbedding`` ("rotate half": pair ``k`` is dimensions
    ``k`` and ``k + d / 2``), not RoFormer's interleaved ``(2k, 2k + 1)``, so
    models saved with keras_hub's rotation keep their numbers. The
    ``scaling`` stretches the rotation for sequences longer than those seen
    in training (``s`` is ``scaling_factor`` unless said otherwise):

    - ``None``: plain RoPE.
    - ``"linear"`` (position interpolation, Chen et al.): positions ``m / s``.
    - ``"ntk"`` (NTK-aware, bloc97): the base becomes
      ``max_wavelength * s ** (d / (d - 2))``, positions unchanged: the
      highest frequency stays, the lowest is divided by ``s``.
    - ``"dynamic_ntk"``: ``"ntk"`` with ``s = max(1, length / training_length)``,
      recomputed at every call from its ``length`` (the current sequence
      length), so up to ``training_length`` it is plain RoPE. Keys rotated for
      one ``s`` are wrong for another: `dynamic` is True, and an attention
      layer keeps its cache of keys *before* the rotation and rotates all of
      them at every step.
    - ``"yarn"`` (YaRN, Peng et al., "NTK-by-parts" with an attention
      temperature): per pair, the wavelength ``lambda_k = 2 pi / theta_k``
      fits ``r_k = training_length / lambda_k`` times into the training
      length; ``gamma_k = clip((r_k - alpha) / (beta - alpha), 0, 1)``
      (``alpha = yarn_alpha``, ``beta = yarn_beta``) and
      ``theta'_k = (1 - gamma_k) theta_k / s + gamma_k theta_k``: pairs that
      turn many times keep their frequency, those that turn less than once
      are interpolated. Queries and keys are each multiplied by
      ``0.1 ln(s) + 1``, the logits by its square.

    xPos (Sun et al.; ``xpos_scale_base``, 512 in the paper) multiplies the
    rotated pair ``k`` of a query at position ``n`` by
    ``zeta_k ** (n / scale_base)`` and of a key at ``m`` by
    ``zeta_k ** (-m / scale_base)``, ``zeta_k = (2k / d + 0.4) / 1.4 < 1``, so
    the logit of pair ``k`` decays as ``zeta_k ** ((n - m) / scale_base)``.
    That is a decay only for ``n >= m``: use it under a causal mask
    (`causal_only`). It combines with every scaling (it acts after the
    rotation). Unlike torchscale, positions are not centred on the sequence
    length, so a cached key stays valid; the price is range: the key factor
    grows as about ``exp(1.25 m / scale_base)`` (``zeta_0 = 2 / 7``), which
    overflows float32 (and bfloat16) beyond ``m`` of about
    ``70 * scale_base`` (36,000 positions at 512) and float16 (to which the
    result is cast back) beyond about ``8.8 * scale_base`` (4,500 at 512).

    All computation is in float32; `rotate` returns its input's dtype.

    Against keras_hub's ``RotaryEmbedding`` (0.32): ``None``, ``"linear"`` and
    ``"ntk"`` are computed by it (``"ntk"`` as plain RoPE with the scaled
    base), always in float32. Its ``rope_type="dynamic"`` is not this
    ``"dynamic_ntk"`` (nor NTK-aware): it divides *every* frequency by the
    fixed ``scaling_factor ** (d / (d - 2))``, i.e. position interpolation by
    that factor, where NTK-aware scaling divides ``theta_k`` by
    ``s ** (2k / (d - 2))`` (pair 0 unchanged), and it never reads the
    sequence length. Its ``rope_type="yarn"`` follows the YaRN reference code,
    not the paper's formula used here: its ramp is linear in the pair index
    ``k`` (so in ``log r_k``), from the ``k`` where ``r_k = beta_fast`` (32)
    rounded down (and clamped at 0) to the ``k`` where ``r_k = beta_slow`` (1)
    rounded up (with its default ``truncate=True``), where ours is linear in
    ``r_k`` between ``alpha`` and ``beta``: the two give the same frequency
    only for pairs where both ramps are at 0 or both at 1. Its temperature
    ``0.1 ln(s) + 1`` on queries and keys is the same. So ``"dynamic_ntk"``
    and ``"yarn"`` are computed here.

    Args:
        max_wavelength: the base of the frequencies (10000 in RoFormer), a
            positive number.
        scaling: ``None`` (default), ``"linear"``, ``"ntk"``,
            ``"dynamic_ntk"`` or ``"yarn"``, as above.
        scaling_factor: ``s`` of ``"linear"``, ``"ntk"`` and ``"yarn"``
            (usually the target length over the training length), a finite
            number ``>= 1``; ``1.0`` (default) leaves the rotation unscaled.
        training_length: the sequence length the model was trained at, an
            integer ``>= 1``; needed by ``"dynamic_ntk"`` and ``"yarn"``.
        yarn_alpha: ``"yarn"``'s ``alpha`` (default 1), a positive number.
        yarn_beta: ``"yarn"``'s ``beta`` (default 32), larger than ``alpha``.
        xpos_scale_base: ``None`` (default) for no decay, else xPos'
            ``scale_base`` (512 in the paper), a positive number.

    An argument that the chosen ``scaling`` does not read (``scaling_factor``
    with ``None`` or ``"dynamic_ntk"``, ``training_length`` with ``None``,
    ``"linear"`` or ``"ntk"``, ``yarn_alpha`` and ``yarn_beta`` without
    ``"yarn"``) must keep its default: a value that would be ignored raises a
    ``ValueError``, as do the values out of range; a wrong ``scaling`` too.

    Examples:

        Plain RoPE turns pair 0 (dimensions 0 and ``d / 2``) by one radian per
        position:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers.rotary import RotaryPositions
        >>> x = np.array([1.0, 0.0], "float32").reshape(1, 1, 1, 2)
        >>> print(np.round(ops.convert_to_numpy(RotaryPositions().rotate(x, 1))[0, 0, 0], 4))
        [0.5403 0.8415]

        The logit of a query at ``m`` and a key at ``n`` depends on ``m - n``:

        >>> rope = RotaryPositions(scaling="ntk", scaling_factor=4.0)
        >>> q, k = np.ones((1, 1, 1, 8), "float32"), np.ones((1, 1, 1, 8), "float32")
        >>> def logit(m, n):
        ...     rotated_q = ops.convert_to_numpy(rope.rotate(q, m))
        ...     rotated_k = ops.convert_to_numpy(rope.rotate(k, n, role="key"))
        ...     return float(np.sum(rotated_q * rotated_k))
        >>> bool(np.isclose(logit(7, 3), logit(104, 100), atol=1e-4))
        True
        >>> RotaryPositions(scaling="dynamic_ntk", training_length=512).dynamic
        True
        >>> RotaryPositions(xpos_scale_base=512).causal_only
        True

    References:
        - [Su et al., 2021. RoFormer: Enhanced Transformer with Rotary Position
          Embedding](https://arxiv.org/abs/2104.09864)
        - [Chen et al., 2023. Extending Context Window of Large Language Models
          via Positional Interpolation](https://arxiv.org/abs/2306.15595)
        - bloc97, 2023. "NTK-Aware Scaled RoPE" (a Reddit post, no paper) and
          its dynamic variant.
        - [Peng et al., 2023. YaRN: Efficient Context Window Extension of Large
          Language Models](https://arxiv.org/abs/2309.00071)
        - [Sun et al., 2022. A Length-Extrapolatable
          Transformer](https://arxiv.org/abs/2212.10554) (xPos; reference code:
          microsoft/torchscale)
    """

    def __init__(
        self,
        max_wavelength: float = 10000.0,
        scaling: str | None = None,
        scaling_factor: float = 1.0,
        training_length: int | None = None,
        yarn_alpha: float = 1.0,
        yarn_beta: float = 32.0,
        xpos_scale_base: float | None = None,
    ) -> None:
        self._arguments = _check_arguments(
            type(self).__name__,
            max_wavelength=max_wavelength,
            scaling=scaling,
            scaling_factor=scaling_factor,
            training_length=training_length,
            yarn_alpha=yarn_alpha,
            yarn_beta=yarn_beta,
            xpos_scale_base=xpos_scale_base,
        )
        for name, value in self._arguments.items():
            setattr(self, name, value)
        # keras_hub layers by head size (they hold no weights; kept to not rebuild one
        # per call in an eager decoding loop).
        self._keras_hub_layers: dict[int, Any] = {}

    @property
    def dynamic(self) -> bool:
        """Whether the rotation depends on the current length (``"dynamic_ntk"``):
        a cache must then hold keys before the rotation."""
        return self.scaling == "dynamic_ntk"

    @property
    def causal_only(self) -> bool:
        """Whether xPos is on: its factors decay only for keys at or before the query."""
        return self.xpos_scale_base is not None

    def check_head_dim(self, caller: str, head_dim: int) -> None:
        """Raises (naming ``caller``) unless ``head_dim`` can be rotated: an even int >= 2."""
        check_int(caller, "key_dim", head_dim, 1)
        if head_dim % 2:
            raise ValueError(f"{caller}: rotary embeddings need an even `key_dim`, got {head_dim}.")

    def rotate(self, x: Any, positions: Any, role: str = "query", length: Any = None) -> Any:
        """``x`` rotated by its rows' positions (and scaled, for YaRN and xPos).

        Args:
            x: ``(batch, sequence, heads, head_dim)``, any float dtype,
                ``head_dim`` even and known; the sequence length may be
                unknown.
            positions: the absolute position of each row of ``x`` along axis
                1: an int or int scalar tensor ``start`` (rows at ``start ..
                start + sequence - 1``; the cache index when decoding), or a
                1-D int tensor of ``sequence`` positions.
            role: ``"query"`` or ``"key"`` (only xPos treats them differently).
            length: the current sequence length (an int or int scalar
                tensor): the number of keys attended to, cached ones included.
                Read by ``"dynamic_ntk"`` only, which needs it.

        Returns:
            A tensor of ``x``'s shape and dtype, computed in float32.
        """
        caller = f"{type(self).__name__}.rotate"
        check_choice(caller, "role", role, ("query", "key"))
        shape = shape_of(x)
        if len(shape) != 4 or shape[-1] is None:
            raise ValueError(
                f"{caller}: `x` must have rank 4 (batch, sequence, heads, head_dim) with a "
                f"known head_dim, got shape {shape}."
            )
        head_dim = int(shape[-1])
        self.check_head_dim(caller, head_dim)
        if self.dynamic and length is None:
            raise ValueError(
                f"{caller}: scaling='dynamic_ntk' needs `length` (the current sequence "
                "length, an int or int scalar tensor)."
            )
        start, given_positions = _start_or_positions(caller, positions, shape[1])
        dtype = keras.backend.standardize_dtype(x.dtype)
        x = ops.cast(x, "float32")
        if given_positions is None:
            row_positions = ops.arange(ops.shape(x)[1], dtype="float32") + ops.cast(
                start, "float32"
            )
        else:
            row_positions = ops.cast(given_positions, "float32")
        if self.scaling not in _DELEGATED:
            rotated = _rotate_half(x, row_positions, self._frequencies(head_dim, length))
        elif given_positions is None:
            rotated = self._keras_hub_rotation(head_dim)(x, start_index=start)
        else:
            rotated = self._keras_hub_rotation(head_dim)(x, positions=given_positions)
        if self.scaling == "yarn":
            rotated = rotated * (0.1 * math.log(self.scaling_factor) + 1.0)
        if self.xpos_scale_base is not None:
            rotated = rotated * self._xpos_factors(row_positions, head_dim, role)
        return ops.cast(rotated, dtype)

    def _keras_hub_rotation(self, head_dim: int) -> Any:
        """keras_hub's ``RotaryEmbedding`` computing this scaling (None, linear, ntk)."""
        layer = self._keras_hub_layers.get(head_dim)
        if layer is None:
            keras_hub = quiet_import("keras_hub")  # imports TensorFlow: only when needed

            base, factor = self.max_wavelength, 1.0
            if self.scaling == "linear":
                factor = self.scaling_factor
            elif self.scaling == "ntk":
                base = _ntk_base(self.max_wavelength, self.scaling_factor, head_dim)
            layer = keras_hub.layers.RotaryEmbedding(
                max_wavelength=base, scaling_factor=factor, dtype="float32"
            )
            self._keras_hub_layers[head_dim] = layer
        return layer

    def _frequencies(self, head_dim: int, length: Any) -> Any:
        """float32 ``theta'_k``, ``(head_dim // 2,)``, of the scalings keras_hub lacks."""
        if self.scaling == "dynamic_ntk":
            s = ops.maximum(ops.cast(length, "float32") / float(self.training_length), 1.0)
            return _base_frequencies(_ntk_base(self.max_wavelength, s, head_dim), head_dim)
        theta = _base_frequencies(self.max_wavelength, head_dim)  # "yarn"
        turns = self.training_length * theta / (2.0 * math.pi)  # r_k
        gamma = ops.clip((turns - self.yarn_alpha) / (self.yarn_beta - self.yarn_alpha), 0.0, 1.0)
        return (1.0 - gamma) * theta / self.scaling_factor + gamma * theta

    def _xpos_factors(self, row_positions: Any, head_dim: int, role: str) -> Any:
        """``zeta_k ** (±position / scale_base)``, ``(1, sequence, 1, head_dim)``."""
        zeta = (ops.arange(0, head_dim, 2, dtype="float32") / head_dim + _XPOS_GAMMA) / (
            1.0 + _XPOS_GAMMA
        )
        sign = 1.0 if role == "query" else -1.0
        exponent = ops.expand_dims(row_positions * (sign / self.xpos_scale_base), -1)
        factors = ops.exp(exponent * ops.expand_dims(ops.log(zeta), 0))  # (sequence, d / 2)
        factors = ops.concatenate([factors, factors], axis=-1)  # pair k: dims k and k + d/2
        return ops.expand_dims(ops.expand_dims(factors, 0), 2)

    def __getstate__(self) -> dict:
        # A copy or pickle is rebuilt from the arguments; the keras_hub layers are a cache.
        state = dict(self.__dict__)
        state["_keras_hub_layers"] = {}
        return state

    def __repr__(self) -> str:
        # The arguments that differ from the defaults: enough to rebuild it, and short.
        arguments = ", ".join(
            f"{name}={value!r}"
            for name, value in self._arguments.items()
            if value != _DEFAULTS[name]
        )
        return f"{type(self).__name__}({arguments})"


def _check_arguments(
    caller: str,
    max_wavelength: Any,
    scaling: Any,
    scaling_factor: Any,
    training_length: Any,
    yarn_alpha: Any,
    yarn_beta: Any,
    xpos_scale_base: Any,
) -> dict:
    """The arguments of `RotaryPositions`, checked and normalised (floats, ints)."""
    if scaling is not None and (not isinstance(scaling, str) or scaling not in SCALINGS):
        raise ValueError(
            f"{caller}: `scaling` must be None or one of {', '.join(map(repr, SCALINGS))}, "
            f"got {scaling!r}."
        )
    arguments = {
        "max_wavelength": check_positive_number(caller, "max_wavelength", max_wavelength),
        "scaling": scaling,
        "scaling_factor": check_number_at_least(caller, "scaling_factor", scaling_factor, 1),
        "training_length": None
        if training_length is None
        else check_int(caller, "training_length", training_length, 1),
        "yarn_alpha": check_positive_number(caller, "yarn_alpha", yarn_alpha),
        "yarn_beta": check_positive_number(caller, "yarn_beta", yarn_beta),
        "xpos_scale_base": None
        if xpos_scale_base is None
        else check_positive_number(caller, "xpos_scale_base", xpos_scale_base),
    }
    if arguments["yarn_alpha"] >= arguments["yarn_beta"]:
        raise ValueError(
            f"{caller}: `yarn_alpha` must be smaller than `yarn_beta`, got "
            f"yarn_alpha={yarn_alpha!r}, yarn_beta={yarn_beta!r}."
        )
    if scaling in ("dynamic_ntk", "yarn") and training_length is None:
        raise ValueError(
            f"{caller}: scaling={scaling!r} needs `training_length` (the sequence length "
            "the model was trained at, an integer >= 1)."
        )
    for name, readers in _READ_BY.items():
        if scaling not in readers and arguments[name] != _DEFAULTS[name]:
            raise ValueError(
                f"{caller}: `{name}` is read only by scaling="
                f"{' or '.join(map(repr, readers))}; with scaling={scaling!r} leave it at "
                f"{_DEFAULTS[name]!r}, got {name}={arguments[name]!r}."
            )
    return arguments


def _start_or_positions(caller: str, positions: Any, sequence: int | None) -> tuple[Any, Any]:
    """``(start, None)`` for an int or int scalar tensor, ``(0, positions)`` for a 1-D one."""
    if isinstance(positions, int | np.integer) and not isinstance(positions, bool | np.bool_):
        return check_int(caller, "positions", positions, 0), None
    dtype = getattr(positions, "dtype", None)
    if dtype is None or "int" not in keras.backend.standardize_dtype(dtype):
        raise TypeError(
            f"{caller}: `positions` must be an int, an int scalar tensor or a 1-D int tensor, "
            f"got {positions!r}."
        )
    shape = shape_of(positions)
    if len(shape) == 0:
        return positions, None
    if len(shape) == 1 and (shape[0] is None or sequence is None or shape[0] == sequence):
        return 0, positions
    raise ValueError(
        f"{caller}: `positions` must be a scalar (the first row's position) or 1-D with one "
        f"position per row of `x` ({sequence}), got shape {shape}."
    )


def _ntk_base(base: float, s: Any, head_dim: int) -> Any:
    """NTK-aware base ``base * s ** (d / (d - 2))``; ``s`` a number or a float32 tensor."""
    # With d = 2 the one frequency is base ** 0 = 1 whatever the base: any exponent does.
    return base * s ** (head_dim / max(head_dim - 2, 1))


def _base_frequencies(base: Any, head_dim: int) -> Any:
    """float32 ``theta_k = base ** (-2k / d)``, written as keras_hub writes it (same rounding)."""
    exponents = ops.arange(0, head_dim, 2, dtype="float32") / ops.cast(head_dim, "float32")
    return ops.power(ops.cast(base, "float32"), -exponents)


def _rotate_half(x: Any, row_positions: Any, frequencies: Any) -> Any:
    """float32 ``x`` turned pair by pair (dims ``k`` and ``k + d/2``) by ``position * theta_k``."""
    angles = ops.expand_dims(row_positions, -1) * ops.expand_dims(frequencies, 0)
    cos = ops.expand_dims(ops.expand_dims(ops.cos(angles), 0), 2)  # (1, sequence, 1, d / 2)
    sin = ops.expand_dims(ops.expand_dims(ops.sin(angles), 0), 2)
    x1, x2 = ops.split(x, 2, axis=-1)
    return ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
