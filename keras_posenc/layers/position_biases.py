"""Position biases computed from distances: ALiBi, KERPLE, FIRE and a continuous MLP bias.

The table schemes (`position_schemes`) map a distance ``r = j - i`` to a learned
row, so a distance beyond the table shares its last row. The schemes here are
position schemes too, but compute the bias of each head from the distance with a
formula and a few learned parameters (none for ALiBi), so no table limits the
length. They serve ``relative="bias"``: pass one as ``position=`` to
`MultiHeadRelativeAttention`, the relative Transformer blocks or
`RelativePositionBias`, which owns their weights.

A scheme declares what the attention layer needs to know: ``toeplitz`` (the bias
depends on ``j - i`` only, so PyTorch's fused kernel can take it as a strided
view of its diagonals) and ``causal_only`` (FIRE is defined for keys at or before
the query only; the attention layer refuses it without ``use_causal_mask``). The
formulas are written once here and checked against numpy references in
``tests/reference/position_biases.py``. See "Architecture" in docs/development.md.

Examples:

    >>> import numpy as np
    >>> from keras_posenc import layers
    >>> layers.ALiBi.slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> attention = layers.MultiHeadRelativeAttention(
    ...     num_heads=4, key_dim=8, relative="bias", position=layers.ALiBi()
    ... )
    >>> x = np.zeros((2, 6, 16), "float32")
    >>> tuple(attention(x, x, use_causal_mask=True).shape)
    (2, 6, 16)
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers._checks import (
    check_choice,
    check_int,
    check_positive_number,
    check_rate,
    grid_size,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers.position_schemes import PositionScheme, register_scheme
from keras_posenc.layers.relative_index import relative_index_2d, relative_index_2d_tensor
from keras_posenc.layers.relative_position_2d import call_size, is_static_size

__all__ = [
    "ALiBi",
    "ContinuousBias",
    "ContinuousPositionBias2D",
    "FIRE",
    "KERPLE",
    "PositionBias",
    "log_coordinates",
]

# KERPLE's reference code keeps its parameters at or above this (and p <= 2 for the power
# kernel) by clamping them before every use; we clamp the same way and, so that a parameter
# pushed below it by an update still gets gradients, project it back after each update.
_KERPLE_EPSILON = 1e-2


@keras.saving.register_keras_serializable(package="keras_posenc")
class ClipValues(keras.constraints.Constraint):
    """Keeps a weight within ``[minimum, maximum]`` after each optimizer update.

    Args:
        minimum: the smallest value kept.
        maximum: the largest value kept, or None for no upper bound.
    """

    def __init__(self, minimum: float, maximum: float | None = None) -> None:
        self.minimum = float(minimum)
        self.maximum = None if maximum is None else float(maximum)

    def __call__(self, w: Any) -> Any:
        w = ops.maximum(w, ops.cast(self.minimum, w.dtype))
        if self.maximum is not None:
            w = ops.minimum(w, ops.cast(self.maximum, w.dtype))
        return w

    def get_config(self) -> dict:
        return {"minimum": self.minimum, "maximum": self.maximum}


class PositionBias(PositionScheme):
    """Base class: a position scheme whose bias is computed, not read from a table.

    A subclass implements ``_check`` (as every scheme), `build_weights` (adds its
    weights to the layer that owns them) and `bias`, and sets ``toeplitz`` /
    ``causal_only`` where they differ from the defaults. It supports
    ``relative="bias"`` only.
    """

    modes = ("bias",)
    computed = True

    def build_weights(self, layer: keras.layers.Layer, num_heads: int) -> dict:
        """Adds this scheme's weights to ``layer``; returns them by name."""
        return {}

    def bias(self, weights: dict, num_heads: int, r: Any, query_positions: Any = None) -> Any:
        """The float32 bias ``(num_heads,) + r.shape`` of the integer distances ``r = j - i``.

        ``query_positions`` (broadcastable to ``r``) is the absolute position
        ``i`` of each entry's query; only schemes that are not ``toeplitz`` use it.
        """
        raise NotImplementedError

    def _no_table(self) -> TypeError:
        return TypeError(f"{self!r} computes its bias: it has no table rows to index.")

    def index(self, r: Any) -> Any:
        raise self._no_table()

    @property
    def table_size(self) -> int:
        raise self._no_table()

    def _saturation(self) -> int:
        raise self._no_table()


def _log1p(x: Any) -> Any:
    """``log(1 + x)``. Not ``ops.log1p``: tf2onnx writes it as an ONNX ``Log1p`` node,
    which ONNX does not define; for the non-negative inputs here the two agree to float32
    rounding."""
    return ops.log(1.0 + x)


def _heads_first(values: Any, num_heads: int, rank: int) -> Any:
    """``values`` of shape ``(num_heads,)`` reshaped to broadcast over ``rank`` more axes."""
    return ops.reshape(values, (num_heads,) + (1,) * rank)


def _mlp_weights(
    layer: keras.layers.Layer,
    prefix: str,
    sizes: tuple[int, int, int],
    output_bias: bool = True,
) -> dict:
    """The weights of a two-layer ReLU MLP ``sizes[0] -> sizes[1] -> sizes[2]`` on ``layer``."""
    inputs, hidden, outputs = sizes
    shapes = {
        f"{prefix}_hidden_kernel": (inputs, hidden),
        f"{prefix}_hidden_bias": (hidden,),
        f"{prefix}_output_kernel": (hidden, outputs),
    }
    if output_bias:
        shapes[f"{prefix}_output_bias"] = (outputs,)
    weights = {}
    for name, shape in shapes.items():
        initializer = "zeros" if name.endswith("bias") else keras.initializers.GlorotUniform()
        weights[name] = layer.add_weight(
            name=name,
            shape=shape,
            initializer=sublayer_initializer(keras.initializers.get(initializer), name),
        )
    return weights


def _mlp_hidden(weights: dict, prefix: str, x: Any) -> Any:
    """``relu(x W1 + b1)`` on the last axis of float32 ``x``."""
    hidden = ops.matmul(x, ops.cast(weights[f"{prefix}_hidden_kernel"], "float32"))
    return ops.relu(hidden + ops.cast(weights[f"{prefix}_hidden_bias"], "float32"))


def _mlp_output(weights: dict, prefix: str, hidden: Any) -> Any:
    """``hidden W2 (+ b2)``."""
    output = ops.matmul(hidden, ops.cast(weights[f"{prefix}_output_kernel"], "float32"))
    if f"{prefix}_output_bias" in weights:
        output = output + ops.cast(weights[f"{prefix}_output_bias"], "float32")
    return output


def _mlp(weights: dict, prefix: str, x: Any) -> Any:
    """``relu(x W1 + b1) W2 (+ b2)`` on the last axis of float32 ``x``."""
    return _mlp_output(weights, prefix, _mlp_hidden(weights, prefix, x))


def log_coordinates(offsets: Any, mode: str, window: Any = None) -> Any:
    """Relative coordinates on a log scale, the inputs of a continuous position bias.

    - ``mode="cr"`` (timm's ``RelPosMlp`` default): ``sign(x) log(1 + |x|)``.
    - ``mode="swin"`` (Swin Transformer v2): ``x`` divided by ``window - 1``
      (per axis, a sequence of ints for several axes), times 8, then
      ``sign(x) log2(1 + |x|) / log2(8)``.

    Args:
        offsets: float relative coordinates, the last axis one per dimension.
        mode: ``"cr"`` or ``"swin"``.
        window: ``"swin"``: the window (or training length) per axis.

    Returns:
        float32 of the shape of ``offsets``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.position_biases import log_coordinates
        >>> np.round(np.asarray(log_coordinates(np.array([[-3.0], [0.0], [1.0]]), "cr")), 4)
        array([[-1.3863],
               [ 0.    ],
               [ 0.6931]], dtype=float32)
    """
    x = ops.cast(offsets, "float32")
    if mode == "swin":
        if is_static_size(window):
            scale = ops.convert_to_tensor(np.asarray(window, "float32") - 1.0)
        else:  # a window known at run time only (a grid of unknown size)
            scale = ops.stack([ops.cast(side, "float32") for side in window]) - 1.0
        x = x / scale * 8.0
        return ops.sign(x) * ops.log2(1.0 + ops.abs(x)) / math.log2(8.0)
    return ops.sign(x) * _log1p(ops.abs(x))


@keras.saving.register_keras_serializable(package="keras_posenc")
class ALiBi(PositionBias):
    """Attention with Linear Biases: ``b_h(i, j) = -m_h |i - j|``, no learned weights.

    Under a causal mask this is the paper's ``-m_h (i - j)`` for ``j <= i``.
    Without one it is the symmetric bidirectional form ``-m_h |i - j|``, which
    is not in the paper but is the common choice for encoders (a distance
    costs the same in both directions). The slopes form a geometric sequence
    (`slopes`): for ``H`` a power of two, ``m_h = 2^(-8 h / H)``, ``h = 1..H``;
    otherwise the ``n = 2^floor(log2 H)`` slopes of ``n`` heads followed by the
    first ``H - n`` of the slopes of ``2n`` heads at even indices (0, 2, 4, ...).

    Unlike ``keras_hub.layers.AlibiBias``, which adds ``m_h (j - (L - 1))`` (a
    per-row shift of the causal bias that the softmax cancels, valid only
    under a causal mask), this is the bias itself, so it also serves
    bidirectional attention, cached decoding and cross-attention.

    Examples:

        >>> from keras_posenc import layers
        >>> bias = layers.RelativePositionBias(num_heads=2, position=layers.ALiBi())
        >>> print(keras.ops.convert_to_numpy(bias(2, 3))[0])
        [[[ 0.         -0.0625     -0.125     ]
          [-0.0625      0.         -0.0625    ]]
        <BLANKLINE>
         [[ 0.         -0.00390625 -0.0078125 ]
          [-0.00390625  0.         -0.00390625]]]

    Reference:
        Press, Smith, Lewis, "Train Short, Test Long: Attention with Linear
        Biases Enables Input Length Extrapolation", ICLR 2022.
    """

    def __init__(self) -> None:
        super().__init__()

    @classmethod
    def _check(cls, caller: str) -> dict:
        return {}

    @staticmethod
    def slopes(num_heads: int) -> np.ndarray:
        """The ``num_heads`` slopes ``m_h``, float32, the paper's rule for any head count."""
        check_int("ALiBi.slopes", "num_heads", num_heads, minimum=1)

        def power_of_two(n: int) -> list[float]:
            return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

        n = 2 ** int(math.floor(math.log2(num_heads)))
        slopes = power_of_two(n)
        if n < num_heads:
            slopes += power_of_two(2 * n)[0::2][: num_heads - n]
        return np.asarray(slopes, "float32")

    def bias(self, weights: dict, num_heads: int, r: Any, query_positions: Any = None) -> Any:
        distance = ops.abs(ops.cast(r, "float32"))
        slopes = ops.convert_to_tensor(self.slopes(num_heads))
        # 0 - d, not -d: the diagonal is +0, not -0.
        return _heads_first(slopes, num_heads, len(distance.shape)) * (0.0 - distance)[None]


_KERPLE_KERNELS = ("log", "power")


@keras.saving.register_keras_serializable(package="keras_posenc")
class KERPLE(PositionBias):
    """Kernelized relative positional embedding: a learned kernel of ``|i - j|`` per head.

    With learned per-head ``r1, r2 > 0``:

    - ``kernel="log"``: ``b_h = -r1 log(1 + r2 |i - j|)`` (the paper's best extrapolator);
    - ``kernel="power"``: ``b_h = -r1 |i - j|^r2`` with ``0 < r2 <= 2``.

    As in the authors' code, the parameters are clamped at ``1e-2`` (and ``r2``
    of the power kernel at 2) before use, and projected back into that range
    after every optimizer update (`ClipValues`); they start uniform in
    ``(0, 2)`` (``r1`` log, ``r2`` power) and ``(0, 1)`` (the other). The kernel
    is symmetric, so it serves causal (the paper) and bidirectional attention.

    Args:
        kernel: ``"log"`` (default) or ``"power"``.

    Examples:

        >>> from keras_posenc import layers
        >>> bias = layers.RelativePositionBias(num_heads=2, position=layers.KERPLE("power"))
        >>> tuple(bias(3, 5).shape), [w.name for w in bias.weights]
        ((1, 2, 3, 5), ['r1', 'r2'])

    Reference:
        Chi, Fan, Ramadge, Rudnicky, "KERPLE: Kernelized Relative Positional
        Embedding for Length Extrapolation", NeurIPS 2022.
    """

    def __init__(self, kernel: str = "log") -> None:
        super().__init__(kernel=kernel)

    @classmethod
    def _check(cls, caller: str, kernel: Any = "log") -> dict:
        return {"kernel": check_choice(caller, "kernel", kernel, _KERPLE_KERNELS)}

    def build_weights(self, layer: keras.layers.Layer, num_heads: int) -> dict:
        # (upper bound of the initial uniform draw, upper clamp) of r1 and r2.
        ranges = {"log": ((2.0, None), (1.0, None)), "power": ((1.0, None), (2.0, 2.0))}
        weights = {}
        for name, (high, maximum) in zip(("r1", "r2"), ranges[self.kernel]):
            initializer = keras.initializers.RandomUniform(0.0, high)
            weights[name] = layer.add_weight(
                name=name,
                shape=(num_heads,),
                initializer=sublayer_initializer(initializer, name),
                constraint=ClipValues(_KERPLE_EPSILON, maximum),
            )
        return weights

    def bias(self, weights: dict, num_heads: int, r: Any, query_positions: Any = None) -> Any:
        distance = ops.abs(ops.cast(r, "float32"))
        rank = len(distance.shape)
        r1 = ops.maximum(ops.cast(weights["r1"], "float32"), _KERPLE_EPSILON)
        r2 = ops.maximum(ops.cast(weights["r2"], "float32"), _KERPLE_EPSILON)
        r1, r2 = _heads_first(r1, num_heads, rank), _heads_first(r2, num_heads, rank)
        if self.kernel == "log":
            return -r1 * _log1p(r2 * distance[None])
        r2 = ops.minimum(r2, 2.0)
        # |r|^r2 as exp(r2 log |r|) on distances >= 1 and 0 at r = 0: pow(0, r2)
        # has an infinite log in its gradient with respect to r2 (0 * -inf = NaN).
        positive = ops.greater(distance, 0.0)[None]
        powered = ops.exp(r2 * ops.log(ops.maximum(distance, 1.0))[None])
        return -r1 * ops.where(positive, powered, 0.0)


@keras.saving.register_keras_serializable(package="keras_posenc")
class FIRE(PositionBias):
    """Functional interpolation for relative positions: a small MLP of normalised distances.

    ``b(i, j) = f(psi(i - j) / psi(max(L, i)))`` with ``psi(x) = log(c x + 1)``,
    ``c > 0`` and the threshold ``L`` learned (scalars), and ``f`` an MLP with
    one hidden ReLU layer of ``hidden_dim`` units and an output per head. The
    normalisation by the query's position makes the input lie in ``[0, 1]``
    at every length (progressive interpolation); ``L`` keeps short contexts from
    being stretched. FIRE is causal: keys after the query have no defined bias,
    so the attention layer requires ``use_causal_mask=True`` (a standalone
    `RelativePositionBias` gives them the bias of distance 0). It depends on
    ``i`` as well as ``j - i`` (not ``toeplitz``).

    ``c`` and ``L`` are used as ``max(c, 1e-6)`` and ``max(L, 1)`` so ``psi``
    stays defined whatever an update does.

    Args:
        hidden_dim: units of the MLP's hidden layer (32 in the paper).
        initial_c: starting value of ``c`` (ours: 0.1; set the value of the
            setup you reproduce).
        initial_threshold: starting value of ``L`` (ours: 512, a typical training
            length).

    Examples:

        >>> from keras_posenc import layers
        >>> bias = layers.RelativePositionBias(num_heads=4, position=layers.FIRE())
        >>> tuple(bias(1, 7, offset=6).shape)  # one decoding step at position 6
        (1, 4, 1, 7)

    Reference:
        Li et al., "Functional Interpolation for Relative Positions Improves
        Long Context Transformers", ICLR 2024.
    """

    toeplitz = False
    causal_only = True

    def __init__(
        self, hidden_dim: int = 32, initial_c: float = 0.1, initial_threshold: float = 512.0
    ) -> None:
        super().__init__(
            hidden_dim=hidden_dim, initial_c=initial_c, initial_threshold=initial_threshold
        )

    @classmethod
    def _check(
        cls,
        caller: str,
        hidden_dim: Any = 32,
        initial_c: Any = 0.1,
        initial_threshold: Any = 512.0,
    ) -> dict:
        return {
            "hidden_dim": check_int(caller, "hidden_dim", hidden_dim, minimum=1),
            "initial_c": check_positive_number(caller, "initial_c", initial_c),
            "initial_threshold": check_positive_number(
                caller, "initial_threshold", initial_threshold
            ),
        }

    def build_weights(self, layer: keras.layers.Layer, num_heads: int) -> dict:
        weights = {
            "c": layer.add_weight(
                name="c", shape=(), initializer=keras.initializers.Constant(self.initial_c)
            ),
            "threshold": layer.add_weight(
                name="threshold",
                shape=(),
                initializer=keras.initializers.Constant(self.initial_threshold),
            ),
        }
        weights.update(_mlp_weights(layer, "mlp", (1, self.hidden_dim, num_heads)))
        return weights

    def bias(self, weights: dict, num_heads: int, r: Any, query_positions: Any = None) -> Any:
        if query_positions is None:
            raise ValueError(f"{self!r}: the bias depends on the query positions; pass them.")
        distance = ops.maximum(-ops.cast(r, "float32"), 0.0)
        position = ops.cast(query_positions, "float32")
        c = ops.maximum(ops.cast(weights["c"], "float32"), 1e-6)
        threshold = ops.maximum(ops.cast(weights["threshold"], "float32"), 1.0)
        normalised = _log1p(c * distance) / _log1p(c * ops.maximum(threshold, position))
        output = _mlp(weights, "mlp", normalised[..., None])  # (..., heads)
        return ops.moveaxis(output, -1, 0)


_CONTINUOUS_MODES = ("cr", "swin")


@keras.saving.register_keras_serializable(package="keras_posenc")
class ContinuousBias(PositionBias):
    """A continuous relative bias: an MLP of the log-scaled distance, an output per head.

    ``b_h(r) = MLP(log_coordinates(r))_h``, the MLP ``1 -> hidden_dim -> heads``
    with a ReLU, so any distance gets a bias and no table limits the length
    (the 1D form of Swin Transformer v2's continuous position bias):

    - ``mode="cr"`` (default; timm's ``RelPosMlp`` default): input
      ``sign(r) log(1 + |r|)``, output used as it is;
    - ``mode="swin"`` (Swin v2): input ``r / (window - 1) * 8`` on a
      ``log2(1 + |x|) / log2(8)`` scale, an output layer without bias, and the
      bias ``16 sigmoid(output)``. ``window`` is the length the inputs are
      normalised by (Swin's window; in 1D, e.g. the training length).

    Signed distances: keys before and after the query differ, so it serves
    bidirectional and causal attention.

    Args:
        hidden_dim: units of the hidden layer (512 in Swin v2).
        mode: ``"cr"`` or ``"swin"``.
        window: ``"swin"`` only: an int >= 2.

    Examples:

        >>> from keras_posenc import layers
        >>> bias = layers.RelativePositionBias(
        ...     num_heads=2, position=layers.ContinuousBias(hidden_dim=16)
        ... )
        >>> tuple(bias(3, 1000).shape)
        (1, 2, 3, 1000)

    Reference:
        Liu et al., "Swin Transformer V2: Scaling Up Capacity and Resolution",
        CVPR 2022 (continuous position bias, log-spaced coordinates).
    """

    def __init__(self, hidden_dim: int = 512, mode: str = "cr", window: int | None = None) -> None:
        super().__init__(hidden_dim=hidden_dim, mode=mode, window=window)

    @classmethod
    def _check(
        cls, caller: str, hidden_dim: Any = 512, mode: Any = "cr", window: Any = None
    ) -> dict:
        hidden_dim = check_int(caller, "hidden_dim", hidden_dim, minimum=1)
        mode = check_choice(caller, "mode", mode, _CONTINUOUS_MODES)
        if mode == "swin":
            if window is None:
                raise ValueError(
                    f"{caller}: mode='swin' normalises distances by `window` - 1: pass "
                    f"`window` (an int >= 2), got None."
                )
            window = check_int(caller, "window", window, minimum=2)
        elif window is not None:
            raise ValueError(
                f"{caller}: `window` is used by mode='swin' only, got window={window!r} "
                f"with mode={mode!r}."
            )
        return {"hidden_dim": hidden_dim, "mode": mode, "window": window}

    def build_weights(self, layer: keras.layers.Layer, num_heads: int) -> dict:
        return _mlp_weights(
            layer, "mlp", (1, self.hidden_dim, num_heads), output_bias=self.mode != "swin"
        )

    def bias(self, weights: dict, num_heads: int, r: Any, query_positions: Any = None) -> Any:
        window = None if self.window is None else (self.window,)
        inputs = log_coordinates(ops.cast(r, "float32")[..., None], self.mode, window)
        output = ops.moveaxis(_mlp(weights, "mlp", inputs), -1, 0)
        if self.mode == "swin":
            output = 16.0 * ops.sigmoid(output)
        return output


# Their names for ``position=`` (keras_posenc/layers/position_schemes.py, `get`).
register_scheme("alibi", ALiBi)
register_scheme("kerple", KERPLE)
register_scheme("fire", FIRE)
register_scheme("continuous", ContinuousBias)


@keras.saving.register_keras_serializable(package="keras_posenc")
class ContinuousPositionBias2D(keras.layers.Layer):
    """A continuous 2D relative position bias: an MLP of log-scaled grid offsets.

    The bias of query cell ``(i, j)`` and key cell ``(i', j')`` of an ``H x W``
    grid (both flattened row-major) is ``MLP(log_coordinates((i - i', j - j')))``,
    an output per head, computed once for each of the ``(2H - 1)(2W - 1)``
    offsets and gathered (as `RelativePositionBias2D` gathers its table). The
    MLP is ``2 -> hidden_dim -> num_heads`` with a ReLU (and dropout after it):

    - ``mode="cr"`` (default): inputs ``sign(x) log(1 + |x|)``, the output as it is
      (timm's ``RelPosMlp`` default, used by its ``coatnet_rmlp_*`` and MaxViT models);
    - ``mode="swin"`` (Swin Transformer v2): offsets divided by ``size - 1``
      (or ``pretrained_size - 1``), times 8, on a ``log2(1 + |x|) / log2(8)``
      scale; an output layer without bias; the bias ``16 sigmoid(output)``.

    The weights do not depend on the grid, so one layer serves any image size
    (``call(size=...)``) with no table to resize. The offset order ``(rows,
    columns)`` and the query-minus-key sign follow timm, so its ``mlp.fc1`` /
    ``mlp.fc2`` weights load transposed into ``mlp_hidden_*`` / ``mlp_output_*``.

    Args:
        num_heads: number of attention heads (an output of the MLP each).
        size: the grid ``(height, width)`` (or one int) the bias is made for by default.
        hidden_dim: units of the MLP's hidden layer (timm's ``rel_pos_dim``:
            512 in MaxViT, 384 in some CoAtNets; Swin v2 uses 512).
        mode: ``"cr"`` or ``"swin"``.
        pretrained_size: ``"swin"`` only: the grid whose ``size - 1`` normalises
            the offsets (Swin v2's pretrained window), default ``size``.
        dropout: dropout rate after the hidden layer's ReLU (timm: 0.125).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        size: optional grid ``(height, width)`` instead of the constructor's
            ``size``: Python ints, or scalar tensors for a size known at run time
            only (the offsets and the index are then computed in the graph).
        training: whether dropout is active.

    Returns:
        The bias ``(1, num_heads, height * width, height * width)`` in the
        layer's compute dtype.

    Examples:

        >>> from keras_posenc import layers
        >>> bias = layers.ContinuousPositionBias2D(num_heads=4, size=(3, 5), hidden_dim=16)
        >>> tuple(bias().shape), tuple(bias(size=(6, 10)).shape)
        ((1, 4, 15, 15), (1, 4, 60, 60))

    Reference:
        Liu et al., "Swin Transformer V2: Scaling Up Capacity and Resolution",
        CVPR 2022; timm's ``RelPosMlp`` (``layers/pos_embed_rel.py``).
    """

    def __init__(
        self,
        num_heads: int,
        size: int | tuple[int, int] = (7, 7),
        hidden_dim: int = 512,
        mode: str = "cr",
        pretrained_size: int | tuple[int, int] | None = None,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = self._who()
        self.num_heads = check_int(who, "num_heads", num_heads, minimum=1)
        self.size = grid_size(size, who, "size")
        self.hidden_dim = check_int(who, "hidden_dim", hidden_dim, minimum=1)
        self.mode = check_choice(who, "mode", mode, _CONTINUOUS_MODES)
        if pretrained_size is not None:
            if self.mode != "swin":
                raise ValueError(
                    f"{who}: `pretrained_size` is used by mode='swin' only, got "
                    f"pretrained_size={pretrained_size!r} with mode={self.mode!r}."
                )
            pretrained_size = grid_size(pretrained_size, who, "pretrained_size")
        self.pretrained_size = pretrained_size
        self.dropout = check_rate(who, "dropout", dropout)
        self._window(*self.size)  # checks the sides now, not at the first call
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self._allow_non_tensor_positional_args = True
        # No tensor input will ever trigger build(), so create the weights now.
        self.build()

    def _who(self) -> str:
        return f"{type(self).__name__} '{self.name}'"

    def _window(self, height: Any, width: Any) -> tuple | None:
        """``"swin"``: the grid whose ``size - 1`` normalises the offsets; else None."""
        if self.mode != "swin":
            return None
        window = self.pretrained_size or (height, width)
        if is_static_size(window) and 1 in window:
            raise ValueError(
                f"{self._who()}: mode='swin' divides the offsets by size - 1, so every side "
                f"must be >= 2; got size={(height, width)}, "
                f"pretrained_size={self.pretrained_size}."
            )
        return window

    def build(self, input_shape: Any = None) -> None:
        self.mlp_weights = _mlp_weights(
            self, "mlp", (2, self.hidden_dim, self.num_heads), output_bias=self.mode != "swin"
        )

    def offsets_table(self, height: Any, width: Any) -> Any:
        """The ``((2H - 1) * (2W - 1), 2)`` offsets ``(rows, columns)``, row-major.

        A numpy array for int sides; for sides known at run time only (tensors),
        the same values computed in the graph.
        """
        if is_static_size((height, width)):
            rows = np.arange(-(height - 1), height, dtype="float32")
            cols = np.arange(-(width - 1), width, dtype="float32")
            grid = np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1)
            return grid.reshape(-1, 2)
        rows = ops.cast(ops.arange(2 * height - 1) - (height - 1), "float32")
        cols = ops.cast(ops.arange(2 * width - 1) - (width - 1), "float32")
        grid = ops.stack(ops.meshgrid(rows, cols, indexing="ij"), axis=-1)
        return ops.reshape(grid, (-1, 2))

    def call(self, size: Any = None, training: Any = None) -> Any:
        height, width = call_size(size, self.size, self._who())
        window = self._window(height, width)
        inputs = log_coordinates(self.offsets_table(height, width), self.mode, window)
        hidden = _mlp_hidden(self.mlp_weights, "mlp", inputs)
        hidden = self.dropout_layer(hidden, training=training)
        table = _mlp_output(self.mlp_weights, "mlp", hidden)  # (offsets, heads)
        if self.mode == "swin":
            table = 16.0 * ops.sigmoid(table)
        if is_static_size((height, width)):
            index = ops.convert_to_tensor(relative_index_2d(height, width).reshape(-1), "int32")
        else:
            index = relative_index_2d_tensor(height, width)
        bias = ops.take(ops.transpose(table), index, axis=1)
        positions = height * width
        bias = ops.reshape(bias, (1, self.num_heads, positions, positions))
        return ops.cast(bias, self.compute_dtype)

    def compute_output_shape(self, size: Any = None) -> tuple:
        height, width = self.size if size is None else grid_size(size, self._who(), "size")
        return (1, self.num_heads, height * width, height * width)

    def compute_output_spec(self, size: Any = None, training: Any = None) -> Any:
        return keras.KerasTensor(self.compute_output_shape(size), dtype=self.compute_dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            size=list(self.size),
            hidden_dim=self.hidden_dim,
            mode=self.mode,
            pretrained_size=None if self.pretrained_size is None else list(self.pretrained_size),
            dropout=self.dropout,
        )
        return config
