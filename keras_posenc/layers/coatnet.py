"""CoAtNet's blocks (Dai et al. 2021): MBConv with squeeze-excitation, and the
relative-attention Transformer block over a 2D feature map.

Both blocks are pre-normalised residual blocks, ``x <- x + Module(Norm(x))``,
that can downsample by 2 in their first block of a stage. When they do (or when
they change the width) the shortcut becomes ``Proj(Pool(x))``: a 2 x 2, stride-2
max pool followed by a 1 x 1 projection (with bias), each only where needed.
Feature maps are channels-last, ``(batch, height, width, channels)``.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_choice,
    check_int,
    check_positive_number,
    check_rate,
    grid_size,
)
from keras_posenc.layers.position_biases import ContinuousPositionBias2D
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D, is_static_size

STRIDE_ON = ("expand", "depthwise", "pool")
#: The downsampling pools: 2 x 2 stride-2 max or average, or ``"max3"``, a 3 x 3 stride-2
#: max pool with one cell of padding on each side (PyTorch's ``MaxPool2d(3, 2, 1)``,
#: timm's ``pool_type="max"``, which its ``coatnet_rmlp_1_rw`` uses).
POOLS = ("max", "avg", "max3")
PADDINGS = ("same", "symmetric")
EXPAND_FROM = ("output", "input")
SE_FROM = ("output", "hidden")
SE_POSITIONS = ("after_activation", "before_norm")
ATTENTION_WIDTHS = ("output", "input")

#: The 2D position biases of `RelativeTransformerBlock2D`: a learned table per head, or
#: an MLP of the offsets (`ContinuousPositionBias2D`).
POSITION_BIASES = ("table", "mlp")
#: The norms of `RelativeTransformerBlock2D`.
NORMS = ("layer", "batch")
#: MaxViT's partitions of `RelativeTransformerBlock2D`: adjacent cells, or a dilated grid.
PARTITIONS = ("block", "grid")

# timm's MBConv initialisation (EfficientNet's): normal, variance 2 / fan_out, untruncated.
_CONV_INITIALIZER = {
    "class_name": "VarianceScaling",
    "config": {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"},
}


# --------------------------------------------------------------------------- validation


def _strides(value: Any, who: str) -> int:
    if isinstance(value, bool) or value not in (1, 2):
        raise ValueError(f"{who}: `strides` must be 1 or 2; received strides={value!r}")
    return int(value)


def _check_feature_map(input_shape: Any, who: str) -> tuple:
    shape = tuple(input_shape)
    if len(shape) != 4:
        raise ValueError(
            f"{who}: expected a feature map of rank 4 (batch, height, width, channels); "
            f"received input of shape {shape}"
        )
    if shape[-1] is None:
        raise ValueError(f"{who}: the channel axis must be known; received input shape {shape}")
    return shape


def _serialize_activation(value: Any) -> Any:
    return value if isinstance(value, str) else keras.activations.serialize(value)


class _OverlappingMaxPool(keras.layers.Layer):
    """A 3 x 3, stride-2 max pool after one cell of ``-inf`` padding on each side.

    PyTorch's ``MaxPool2d(3, 2, padding=1)``: Keras' "same" pads one cell after, none
    before, and would pool other windows. Every window holds a real cell, so the
    padding never reaches the output. ``ceil(size / 2)`` per side, like the 2 x 2 pools.
    Built by the blocks that use it (their configs rebuild it; it has no weights).
    """

    def call(self, inputs: Any) -> Any:
        padded = ops.pad(inputs, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=float("-inf"))
        return ops.max_pool(padded, 3, strides=2, padding="valid")

    def compute_output_shape(self, input_shape: Any) -> tuple:
        batch, height, width, channels = input_shape
        return (batch, _downsampled(height, 2), _downsampled(width, 2), channels)


def make_pool(kind: str, policy: Any, name: str) -> keras.layers.Layer:
    """A 2 x 2, stride-2 ``"max"`` or ``"avg"`` pool, "same" padding (ceil for odd sizes),
    or ``"max3"`` (:data:`POOLS`)."""
    if kind == "max3":
        return _OverlappingMaxPool(dtype=policy, name=name)
    pool = keras.layers.MaxPooling2D if kind == "max" else keras.layers.AveragePooling2D
    return pool(2, 2, padding="same", dtype=policy, name=name)


def symmetric_pad(x: Any, kernel_size: int, strides: int) -> Any:
    """Zero-pads height and width by ``((strides - 1) + (kernel_size - 1)) // 2`` on each side.

    PyTorch's (and timm's) padding for a strided convolution, which differs from
    Keras' "same" (TensorFlow's rule puts the extra cell after, none before): with
    it, a "valid" convolution samples the same pixels as the PyTorch model.
    """
    pad = ((strides - 1) + (kernel_size - 1)) // 2
    return ops.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x


def _partition(who: str, partition: Any, size: Any) -> tuple[str | None, tuple | None]:
    """The checked ``(partition, partition_size)`` of `RelativeTransformerBlock2D`."""
    if partition is None:
        if size is not None:
            raise ValueError(
                f"{who}: `partition_size` is used with partition='block' or 'grid' only; "
                f"received partition_size={size!r} with partition=None"
            )
        return None, None
    partition = check_choice(who, "partition", partition, PARTITIONS)
    if size is None:
        raise ValueError(
            f"{who}: partition={partition!r} needs `partition_size`, the windows' "
            "(height, width); received None"
        )
    return partition, grid_size(size, who, "partition_size")


def _check_partition(who: str, shape: tuple, size: tuple[int, int], filters: int) -> None:
    """A map that partitioned attention can cut into whole windows, at the block's width.

    Sides unknown (None) are checked when the block is called with a known size.
    """
    height, width, channels = shape[1], shape[2], shape[3]
    if (height is not None and height % size[0]) or (width is not None and width % size[1]):
        raise ValueError(
            f"{who}: the map's height and width must be multiples of "
            f"partition_size={size}; received input shape {shape}"
        )
    if int(channels) != filters:
        raise ValueError(
            f"{who}: partitioned attention keeps the width: the input channels must equal "
            f"filters={filters}; received input shape {shape}"
        )


def _spatial_size(x: Any) -> tuple[Any, Any]:
    """A map's ``(height, width)``: Python ints where the shape is known, else scalar
    tensors (a model built for images of any size, traced with unknown sides)."""
    height, width = x.shape[1], x.shape[2]
    if height is None or width is None:
        dynamic = ops.shape(x)
        height = dynamic[1] if height is None else height
        width = dynamic[2] if width is None else width
    return height, width


def partition_windows(x: Any, partition: str, size: tuple[int, int]) -> Any:
    """A ``(batch, H, W, C)`` map as ``(batch * windows, size[0], size[1], C)`` windows.

    ``"block"``: each window is ``size`` adjacent cells (MaxViT's block attention);
    ``"grid"``: window ``(p, q)`` holds the cells ``(a * H / size[0] + p, b * W / size[1]
    + q)``, a ``size`` grid spread over the whole map (its grid attention). Windows are
    ordered row-major over the map, as timm's ``window_partition`` / ``grid_partition``.
    ``H`` and ``W`` may be unknown until the call.
    """
    (height, width), channels = _spatial_size(x), x.shape[3]
    rows, cols = size
    if partition == "block":
        x = ops.reshape(x, (-1, height // rows, rows, width // cols, cols, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    else:
        x = ops.reshape(x, (-1, rows, height // rows, cols, width // cols, channels))
        x = ops.transpose(x, (0, 2, 4, 1, 3, 5))
    return ops.reshape(x, (-1, rows, cols, channels))


def merge_windows(windows: Any, partition: str, size: tuple[int, int], grid: tuple) -> Any:
    """The inverse of :func:`partition_windows`: windows back to the ``grid`` map."""
    (height, width), (rows, cols) = grid, size
    channels = windows.shape[-1]
    if partition == "block":
        x = ops.reshape(windows, (-1, height // rows, width // cols, rows, cols, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    else:
        x = ops.reshape(windows, (-1, height // rows, width // cols, rows, cols, channels))
        x = ops.transpose(x, (0, 3, 1, 4, 2, 5))
    return ops.reshape(x, (-1, height, width, channels))


def _downsampled(size: int | None, strides: int) -> int | None:
    return None if size is None else -(-size // strides)


def _block_output_shape(input_shape: Any, who: str, strides: int, filters: int) -> tuple:
    """(batch, H / strides, W / strides, filters), rounding up, for either block type."""
    batch, height, width, _ = _check_feature_map(input_shape, who)
    return (batch, _downsampled(height, strides), _downsampled(width, strides), filters)


# --------------------------------------------------------------------------- shared pieces


def drop_path(x: Any, rate: float, seed_generator: Any, training: bool | None) -> Any:
    """Stochastic depth: drops the whole residual branch for a random subset of samples.

    Each sample keeps ``x`` with probability ``1 - rate`` (scaled by ``1 / (1 - rate)``
    so the expectation is unchanged) or gets zeros; only when ``training`` is true.
    """
    if not training or rate == 0.0:
        return x
    keep = 1.0 - rate
    shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
    noise = keras.random.uniform(shape, seed=seed_generator, dtype=x.dtype)
    return x * ops.floor(keep + noise) / keep


class _PooledProjection:
    """Builds the ``Proj(Pool(x))`` shortcut: each part only where needed."""

    @staticmethod
    def make(
        layer: keras.layers.Layer, channels: int, filters: int, pool: str, use_bias: bool
    ) -> None:
        policy = layer.dtype_policy
        layer.shortcut_pool = (
            make_pool(pool, policy, "shortcut_pool") if layer.strides == 2 else None
        )
        layer.shortcut_projection = (
            keras.layers.Conv2D(
                filters, 1, use_bias=use_bias, dtype=policy, name="shortcut_projection"
            )
            if channels != filters
            else None
        )

    @staticmethod
    def build(layer: keras.layers.Layer, shape: tuple) -> None:
        if layer.shortcut_pool is not None:
            layer.shortcut_pool.build(shape)
            shape = layer.shortcut_pool.compute_output_shape(shape)
        if layer.shortcut_projection is not None:
            layer.shortcut_projection.build(shape)

    @staticmethod
    def call(layer: keras.layers.Layer, x: Any) -> Any:
        if layer.shortcut_pool is not None:
            x = layer.shortcut_pool(x)
        if layer.shortcut_projection is not None:
            x = layer.shortcut_projection(x)
        return x


# --------------------------------------------------------------------------- SqueezeExcite


@keras.saving.register_keras_serializable(package="keras_posenc")
class SqueezeExcite(keras.layers.Layer):
    """Squeeze-and-excitation: rescales each channel by a gate computed from global context.

    ``x * sigmoid(W2 act(W1 mean_hw(x) + b1) + b2)``: the feature map is averaged
    over its spatial axes, squeezed to ``squeeze_filters`` channels, expanded back
    and turned into one gate in (0, 1) per sample and channel.

    Args:
        squeeze_filters: width of the bottleneck, a positive int. MBConv passes
            ``se_ratio * filters`` (the block's output width, as timm does).
        activation: activation of the bottleneck, a name or callable; default
            ``"gelu"`` (exact), the paper's "GELU everywhere" (timm uses SiLU
            here; without released weights the choice is not observable).
        **kwargs: base layer arguments (``name``, ``dtype``, ``trainable``).

    Call arguments:
        inputs: a feature map ``(batch, height, width, channels)``.

    Returns:
        A tensor of the input's shape.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.coatnet import SqueezeExcite
        >>> layer = SqueezeExcite(squeeze_filters=4)
        >>> tuple(layer(np.ones((2, 5, 5, 16), "float32")).shape)
        (2, 5, 5, 16)

    Reference:
        - [Hu et al., 2018. Squeeze-and-Excitation Networks](https://arxiv.org/abs/1709.01507)
        - [Dai et al., 2021. CoAtNet: Marrying Convolution and Attention for All
          Data Sizes](https://arxiv.org/abs/2106.04803)
    """

    def __init__(self, squeeze_filters: int, activation: str | Any = "gelu", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        who = f"SqueezeExcite '{self.name}'"
        self.squeeze_filters = check_int(who, "squeeze_filters", squeeze_filters, 1)
        self.activation = activation
        squeeze_activation = check_activation(who, activation)
        self.squeeze = keras.layers.Dense(
            self.squeeze_filters,
            activation=squeeze_activation,
            dtype=self.dtype_policy,
            name="squeeze",
        )
        self.excite = None

    def build(self, input_shape: Any) -> None:
        shape = _check_feature_map(input_shape, f"SqueezeExcite '{self.name}'")
        channels = int(shape[-1])
        self.excite = keras.layers.Dense(
            channels, activation="sigmoid", dtype=self.dtype_policy, name="excite"
        )
        self.squeeze.build((shape[0], channels))
        self.excite.build((shape[0], self.squeeze_filters))

    def call(self, inputs: Any) -> Any:
        context = ops.mean(inputs, axis=(1, 2))
        gate = self.excite(self.squeeze(context))
        return inputs * gate[:, None, None, :]

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            squeeze_filters=self.squeeze_filters,
            activation=_serialize_activation(self.activation),
        )
        return config


# --------------------------------------------------------------------------- MBConv


@keras.saving.register_keras_serializable(package="keras_posenc")
class MBConv(keras.layers.Layer):
    """Pre-activation inverted-bottleneck block with squeeze-excitation (CoAtNet's C block).

    ``x <- Shortcut(x) + DropPath(Conv1x1(SE(DWConv3x3(Conv1x1(BN(x))))))``, where the
    expansion 1 x 1 conv and the depthwise conv are each followed by BatchNorm and
    the activation (GELU), the expansion width is ``expansion_rate * filters`` (from
    the output width, as the paper's tables), the final 1 x 1 conv has a bias and
    the two inner convs do not. ``Shortcut`` is the identity, or ``Proj(Pool(x))``
    (2 x 2 stride-2 pool, then a 1 x 1 conv) when the block downsamples or changes
    the width, each part only where needed.

    The defaults are the paper's block. The other options describe the variants of
    timm's ``coatnet_*_rw`` models (``keras_posenc.convert.from_timm_coatnet`` loads
    their weights): an activation after the pre-norm, SiLU, average pooling, the
    stride on a pool before the expansion, the expansion sized from the input, the
    squeeze-excitation sized from the hidden width and placed before the depthwise
    BatchNorm, no output bias, and PyTorch's padding for the strided conv.

    Args:
        filters: output channels, a positive int.
        strides: 1, or 2 to halve height and width (``ceil(size / 2)``).
        expansion_rate: the hidden width is ``expansion_rate`` times the output
            width (``expand_from="output"``) or the input width (``"input"``).
        se_ratio: squeeze-excitation bottleneck as a fraction of the output width
            (``se_from="output"``) or the hidden width (``"hidden"``), rounded
            down, at least 1; 0 disables squeeze-excitation.
        stride_on: where a stride of 2 sits: ``"expand"`` (the first 1 x 1 conv,
            the paper's default), ``"depthwise"`` (the 3 x 3 depthwise conv, the
            paper's variant: slightly better, slower) or ``"pool"`` (a 2 x 2 pool
            of the normalised input before the expansion, timm's ``coatnet_0_rw``).
        drop_path_rate: stochastic depth, the probability of dropping the residual
            branch of a sample during training; in [0, 1).
        synchronized: BatchNorm statistics synchronised across replicas
            (``keras.layers.BatchNormalization(synchronized=...)``). Keras
            supports it on the TensorFlow backend only; elsewhere ``True`` raises
            a ``ValueError`` rather than training with per-replica statistics.
        kernel_size: depthwise kernel size, a positive int (default 3).
        norm_epsilon: BatchNorm epsilon (default 1e-3, as the official TF code).
        norm_momentum: BatchNorm moving-average momentum (default 0.99).
        seed: optional int seed of the stochastic depth noise.
        activation: activation after the BatchNorms, a name or callable (default
            ``"gelu"``, exact; timm's ``_rw`` models use ``"silu"``).
        pre_activation: apply ``activation`` after the pre-norm too (timm ``_rw``).
        pool: the 2 x 2 pool of the shortcut (and of ``stride_on="pool"``):
            ``"max"`` (default), ``"avg"`` or ``"max3"`` (:data:`POOLS`).
        stride_pool: the pool of ``stride_on="pool"`` when it differs from the
            shortcut's: None (default: ``pool``), ``"max"`` or ``"avg"`` (timm's
            ``downsample_pool_type``: ``coatnet_rmlp_1_rw`` max-pools its
            shortcut and average-pools the branch).
        expand_from: ``"output"`` (default) or ``"input"``; see ``expansion_rate``.
        se_from: ``"output"`` (default) or ``"hidden"``; see ``se_ratio``.
        se_activation: the squeeze-excitation bottleneck's activation (default
            ``"gelu"``).
        se_position: ``"after_activation"`` (default: SE after the depthwise
            BatchNorm and activation) or ``"before_norm"`` (between the depthwise
            conv and its BatchNorm).
        output_bias: biases on the final 1 x 1 conv and the shortcut projection
            (default True).
        padding: ``"same"`` (Keras/TensorFlow's, default) or ``"symmetric"``
            (PyTorch's: ``(kernel_size - 1) // 2`` zeros on each side, which
            samples other pixels when the depthwise conv is strided; needs an odd
            ``kernel_size``).
        **kwargs: base layer arguments (``name``, ``dtype``, ``trainable``).

    Call arguments:
        inputs: a feature map ``(batch, height, width, channels)``.
        training: bool; BatchNorm uses batch statistics and stochastic depth is
            active only when true.

    Returns:
        ``(batch, ceil(height / strides), ceil(width / strides), filters)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.coatnet import MBConv
        >>> images = np.ones((2, 8, 8, 16), "float32")
        >>> tuple(MBConv(16)(images).shape)
        (2, 8, 8, 16)
        >>> tuple(MBConv(32, strides=2, stride_on="depthwise")(images).shape)
        (2, 4, 4, 32)
        >>> rw = MBConv(32, strides=2, stride_on="pool", pool="avg", activation="silu",
        ...             pre_activation=True, expand_from="input", se_from="hidden",
        ...             se_activation="relu", se_position="before_norm", output_bias=False)
        >>> tuple(rw(images).shape), rw.hidden_filters, rw.squeeze_filters
        ((2, 4, 4, 32), 64, 16)

    Reference:
        - [Dai et al., 2021. CoAtNet: Marrying Convolution and Attention for All
          Data Sizes](https://arxiv.org/abs/2106.04803)
        - [Sandler et al., 2018. MobileNetV2: Inverted Residuals and Linear
          Bottlenecks](https://arxiv.org/abs/1801.04381)
    """

    def __init__(
        self,
        filters: int,
        strides: int = 1,
        expansion_rate: int = 4,
        se_ratio: float = 0.25,
        stride_on: str = "expand",
        drop_path_rate: float = 0.0,
        synchronized: bool = False,
        kernel_size: int = 3,
        norm_epsilon: float = 1e-3,
        norm_momentum: float = 0.99,
        seed: int | None = None,
        activation: str | Any = "gelu",
        pre_activation: bool = False,
        pool: str = "max",
        expand_from: str = "output",
        se_from: str = "output",
        se_activation: str | Any = "gelu",
        se_position: str = "after_activation",
        output_bias: bool = True,
        padding: str = "same",
        stride_pool: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = self._who()
        self.filters = check_int(who, "filters", filters, 1)
        self.strides = _strides(strides, who)
        self.expansion_rate = check_int(who, "expansion_rate", expansion_rate, 1)
        self.se_ratio = check_rate(who, "se_ratio", se_ratio, allow_one=True)
        self.stride_on = check_choice(who, "stride_on", stride_on, STRIDE_ON)
        self.drop_path_rate = check_rate(who, "drop_path_rate", drop_path_rate)
        self.synchronized = check_bool(who, "synchronized", synchronized)
        backend.check_synchronized_batch_norm(who, synchronized)
        self.kernel_size = check_int(who, "kernel_size", kernel_size, 1)
        self.norm_epsilon = check_rate(who, "norm_epsilon", norm_epsilon)
        self.norm_momentum = check_rate(who, "norm_momentum", norm_momentum)
        self.seed = seed
        self.activation = activation
        self._activation_fn = check_activation(who, activation)
        self.pre_activation = check_bool(who, "pre_activation", pre_activation)
        self.pool = check_choice(who, "pool", pool, POOLS)
        if stride_pool is not None:
            stride_pool = check_choice(who, "stride_pool", stride_pool, POOLS)
        self.stride_pool = stride_pool
        self.expand_from = check_choice(who, "expand_from", expand_from, EXPAND_FROM)
        self.se_from = check_choice(who, "se_from", se_from, SE_FROM)
        self.se_activation = se_activation
        check_activation(who, se_activation, "se_activation")
        self.se_position = check_choice(who, "se_position", se_position, SE_POSITIONS)
        self.output_bias = check_bool(who, "output_bias", output_bias)
        self.padding = check_choice(who, "padding", padding, PADDINGS)
        if self.padding == "symmetric" and self.kernel_size % 2 == 0:
            raise ValueError(
                f"{who}: `padding='symmetric'` needs an odd `kernel_size` (PyTorch pads "
                f"odd kernels evenly); received kernel_size={kernel_size}"
            )
        self.seed_generator = keras.random.SeedGenerator(seed) if self.drop_path_rate > 0 else None
        # The widths that depend on the input are set in build().
        self.hidden_filters = None
        self.squeeze_filters = None
        self.pre_norm = self._batch_norm("pre_norm")
        self.down_pool = (
            make_pool(self.stride_pool or self.pool, self.dtype_policy, "down_pool")
            if self.stride_on == "pool" and self.strides == 2
            else None
        )
        self.expand_norm = self._batch_norm("expand_norm")
        self.depthwise_norm = self._batch_norm("depthwise_norm")
        self.expand_conv = None
        self.depthwise_conv = None
        self.squeeze_excite = None
        self.project_conv = None
        self.shortcut_pool = None
        self.shortcut_projection = None

    def _who(self) -> str:
        return f"MBConv '{self.name}'"

    def _batch_norm(self, name: str) -> keras.layers.BatchNormalization:
        return keras.layers.BatchNormalization(
            epsilon=self.norm_epsilon,
            momentum=self.norm_momentum,
            synchronized=self.synchronized,
            dtype=self.dtype_policy,
            name=name,
        )

    def _make_convs(self, channels: int) -> None:
        policy = self.dtype_policy
        width = self.filters if self.expand_from == "output" else channels
        self.hidden_filters = self.expansion_rate * width
        se_width = self.filters if self.se_from == "output" else self.hidden_filters
        self.squeeze_filters = max(1, int(self.se_ratio * se_width)) if self.se_ratio else 0
        self.expand_conv = keras.layers.Conv2D(
            self.hidden_filters,
            1,
            strides=self.strides if self.stride_on == "expand" else 1,
            padding="same",
            use_bias=False,
            kernel_initializer=_CONV_INITIALIZER,
            dtype=policy,
            name="expand_conv",
        )
        depthwise_strides = self.strides if self.stride_on == "depthwise" else 1
        self.depthwise_conv = keras.layers.DepthwiseConv2D(
            self.kernel_size,
            strides=depthwise_strides,
            padding="valid" if self.padding == "symmetric" else "same",
            use_bias=False,
            depthwise_initializer=_CONV_INITIALIZER,
            dtype=policy,
            name="depthwise_conv",
        )
        self.squeeze_excite = (
            SqueezeExcite(
                self.squeeze_filters,
                activation=self.se_activation,
                dtype=policy,
                name="squeeze_excite",
            )
            if self.squeeze_filters
            else None
        )
        self.project_conv = keras.layers.Conv2D(
            self.filters,
            1,
            use_bias=self.output_bias,
            kernel_initializer=_CONV_INITIALIZER,
            dtype=policy,
            name="project_conv",
        )

    def build(self, input_shape: Any) -> None:
        shape = _check_feature_map(input_shape, self._who())
        channels = int(shape[-1])
        self._make_convs(channels)
        _PooledProjection.make(self, channels, self.filters, self.pool, self.output_bias)
        _PooledProjection.build(self, shape)
        self.pre_norm.build(shape)
        if self.down_pool is not None:
            self.down_pool.build(shape)
            shape = self.down_pool.compute_output_shape(shape)
        self.expand_conv.build(shape)
        shape = self.expand_conv.compute_output_shape(shape)
        self.expand_norm.build(shape)
        self.depthwise_conv.build(shape)
        # ceil(size / strides) for either padding (the conv's own shape rule would read
        # the unpadded input of padding="symmetric" as "valid").
        batch, height, width, _ = shape
        depthwise_strides = self.depthwise_conv.strides[0]
        shape = (
            batch,
            _downsampled(height, depthwise_strides),
            _downsampled(width, depthwise_strides),
            self.hidden_filters,
        )
        self.depthwise_norm.build(shape)
        if self.squeeze_excite is not None:
            self.squeeze_excite.build(shape)
        self.project_conv.build(shape)

    def _depthwise(self, x: Any) -> Any:
        strides = self.depthwise_conv.strides[0]
        # The padding as one number per side: "symmetric" always, "same" when the
        # kernel is odd and the stride 1 (Keras' rule then pads (k - 1) / 2 per side).
        pad = None
        if self.padding == "symmetric":
            pad = ((strides - 1) + (self.kernel_size - 1)) // 2
        elif strides == 1 and self.kernel_size % 2:
            pad = (self.kernel_size - 1) // 2
        if pad is not None:  # the kernel `backend.depthwise_conv2d` (shifts on JAX's CPU)
            return backend.depthwise_conv2d(x, self.depthwise_conv.kernel, strides, pad)
        if self.padding == "symmetric":
            x = symmetric_pad(x, self.kernel_size, strides)
        return self.depthwise_conv(x)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        activation = self._activation_fn
        shortcut = _PooledProjection.call(self, inputs)
        x = self.pre_norm(inputs, training=training)
        if self.pre_activation:
            x = activation(x)
        if self.down_pool is not None:
            x = self.down_pool(x)
        x = activation(self.expand_norm(self.expand_conv(x), training=training))
        x = self._depthwise(x)
        if self.squeeze_excite is not None and self.se_position == "before_norm":
            x = self.squeeze_excite(x)
        x = activation(self.depthwise_norm(x, training=training))
        if self.squeeze_excite is not None and self.se_position == "after_activation":
            x = self.squeeze_excite(x)
        x = self.project_conv(x)
        return shortcut + drop_path(x, self.drop_path_rate, self.seed_generator, training)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return _block_output_shape(input_shape, self._who(), self.strides, self.filters)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            filters=self.filters,
            strides=self.strides,
            expansion_rate=self.expansion_rate,
            se_ratio=self.se_ratio,
            stride_on=self.stride_on,
            drop_path_rate=self.drop_path_rate,
            synchronized=self.synchronized,
            kernel_size=self.kernel_size,
            norm_epsilon=self.norm_epsilon,
            norm_momentum=self.norm_momentum,
            seed=self.seed,
            activation=_serialize_activation(self.activation),
            pre_activation=self.pre_activation,
            pool=self.pool,
            expand_from=self.expand_from,
            se_from=self.se_from,
            se_activation=_serialize_activation(self.se_activation),
            se_position=self.se_position,
            output_bias=self.output_bias,
            padding=self.padding,
            stride_pool=self.stride_pool,
        )
        return config


# --------------------------------------------------------------------------- Transformer


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativeTransformerBlock2D(keras.layers.Layer):
    """Pre-norm Transformer block with 2D relative attention over a feature map (CoAtNet's T).

    ``x <- Shortcut(x) + DropPath(Attention(Pool(LayerNorm(x))))`` then
    ``x <- x + DropPath(FFN(LayerNorm(x)))``. The attention is multi-head
    self-attention over all ``h * w`` positions of the (pooled) map,
    ``softmax(Q K^T / sqrt(head_dim) + B) V``, where ``B`` is a learned relative
    position bias, one scalar per head and 2D offset
    (:class:`RelativePositionBias2D`), added before the softmax; the softmax runs
    in float32. The heads are ``filters // head_dim``; queries, keys and values
    come from one dense projection to ``3 * filters`` (laid out ``[q | k | v]``,
    each ``(heads, head_dim)``), followed by an output projection. The FFN is
    ``Dense(expansion_rate * filters)``, exact GELU (``activation``), ``Dense(filters)``.

    With ``partition`` the same block is MaxViT's block or grid attention: the
    attention runs within windows of the map (see ``partition``), the FFN and the
    residuals as above.

    With ``strides=2`` both branches are downsampled by a 2 x 2 stride-2 pool
    (max by default): ``Shortcut = Proj(Pool(x))`` (1 x 1 projection only when the
    width changes) and the attention sees ``Pool(LayerNorm(x))``.

    The defaults are the paper's block. timm's ``coatnet_*_rw`` models differ in
    options described here as configuration: average pooling, the attention at
    the input width (the output projection then widens it), no bias on the
    shortcut projection, LayerNorm epsilon 1e-6 and, for ``coatnet_3_rw``, layer
    scale (a learned per-channel factor on each residual branch).

    The bias table is sized at build time for the (pooled) map,
    ``(heads, 2h - 1, 2w - 1)``; weights saved from a block built at another size
    load with the table resized bilinearly (CoAtNet's fine-tuning at a higher
    resolution). Called on a map of another size than it was built for, the block
    resizes the table inside the call. To build it for maps of any size (height
    and width None), give ``bias_size``, the grid the table is sized for: each
    call then resizes the table to the map it sees (in the graph, when the size
    is known at run time only). With ``partition`` the table covers one window,
    whatever the map's size.

    Args:
        filters: output channels, a positive multiple of ``head_dim``.
        head_dim: channels per attention head (default 32, the paper's).
        strides: 1, or 2 to halve height and width (``ceil(size / 2)``).
        expansion_rate: FFN hidden width as a multiple of ``filters`` (default 4).
        drop_path_rate: stochastic depth on both residual branches; in [0, 1).
        norm_epsilon: LayerNorm epsilon (default 1e-5, as the official TF code).
        seed: optional int seed of the stochastic depth noise.
        pool: the downsampling pool, ``"max"`` (default: 2 x 2), ``"avg"`` or ``"max3"``
            (3 x 3, timm's ``"max"``; :data:`POOLS`).
        attention_width: ``"output"`` (default: queries, keys and values are
            ``filters`` wide) or ``"input"`` (as wide as the input, so
            ``input channels // head_dim`` heads, and the output projection maps
            to ``filters``: timm's ``_rw`` models).
        shortcut_bias: a bias on the shortcut projection (default True).
        layer_scale: None (default), or the initial value of the layer-scale
            factors, one per channel and branch, multiplying each residual
            branch before it is added (timm's ``init_values``).
        position_bias: ``"table"`` (default): the learned table
            `RelativePositionBias2D`; ``"mlp"``: `ContinuousPositionBias2D`, an
            MLP of the log-scaled offsets (timm's ``rmlp`` models, mode
            ``"cr"``), whose weights do not depend on the map's size.
        position_bias_dim: ``"mlp"`` only: the MLP's hidden units (default 512).
        position_bias_dropout: ``"mlp"`` only: dropout after the MLP's hidden
            layer during training (default 0; timm's ``RelPosMlp`` uses 0.125).
        activation: the FFN's activation (default ``"gelu"``, exact;
            ``"gelu_tanh"`` is the tanh approximation of the official MaxViT code).
        norm: ``"layer"`` (default: LayerNorm) or ``"batch"`` (BatchNorm over the
            map, with ``norm_epsilon`` and ``norm_momentum``: timm's
            ``coatnet_bn_*`` models). BatchNorm uses batch statistics when
            ``training`` is true.
        norm_momentum: ``norm="batch"`` only: the moving statistics' momentum
            (default 0.99; PyTorch's 0.1 is 0.9 here).
        partition: None (default: attention over the whole map), ``"block"`` or
            ``"grid"``: MaxViT's partitioned attention (Tu et al. 2022). The map
            is cut into windows of ``partition_size`` cells, ``"block"`` taking
            adjacent cells (local attention) and ``"grid"`` cells
            ``height / partition_size`` apart (a dilated, global grid); each
            window attends within itself, with the relative bias of its
            ``partition_size`` grid, and the FFN runs on every position.
            Needs ``strides=1``, ``filters`` equal to the input width and a map
            whose sides are multiples of ``partition_size``.
        partition_size: the windows' ``(height, width)`` (or one int) with
            ``partition``; must be None without it.
        bias_size: the (pooled) grid ``(height, width)`` (or one int) the
            relative bias is sized for, without ``partition``; default None: the
            map's size at build, which must then be known. Maps of other sizes
            resize the table bilinearly in the call (an MLP bias is evaluated
            for them).
        **kwargs: base layer arguments (``name``, ``dtype``, ``trainable``).

    Call arguments:
        inputs: a feature map ``(batch, height, width, channels)``.
        training: bool; stochastic depth is active only when true.

    Returns:
        ``(batch, ceil(height / strides), ceil(width / strides), filters)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.coatnet import RelativeTransformerBlock2D
        >>> block = RelativeTransformerBlock2D(64, head_dim=16, strides=2)
        >>> tuple(block(np.ones((2, 8, 6, 32), "float32")).shape)
        (2, 4, 3, 64)
        >>> block.num_heads, tuple(block.relative_bias.table.shape)
        (4, (4, 7, 5))
        >>> grid = RelativeTransformerBlock2D(32, head_dim=16, partition="grid",
        ...                                   partition_size=2)
        >>> tuple(grid(np.ones((2, 8, 6, 32), "float32")).shape)
        (2, 8, 6, 32)
        >>> tuple(grid.relative_bias.table.shape)  # one 2 x 2 window's offsets
        (2, 3, 3)

    Reference:
        - [Dai et al., 2021. CoAtNet: Marrying Convolution and Attention for All
          Data Sizes](https://arxiv.org/abs/2106.04803)
        - [Tu et al., 2022. MaxViT: Multi-Axis Vision
          Transformer](https://arxiv.org/abs/2204.01697)
    """

    def __init__(
        self,
        filters: int,
        head_dim: int = 32,
        strides: int = 1,
        expansion_rate: int = 4,
        drop_path_rate: float = 0.0,
        norm_epsilon: float = 1e-5,
        seed: int | None = None,
        pool: str = "max",
        attention_width: str = "output",
        shortcut_bias: bool = True,
        layer_scale: float | None = None,
        position_bias: str = "table",
        position_bias_dim: int = 512,
        position_bias_dropout: float = 0.0,
        activation: str | Any = "gelu",
        norm: str = "layer",
        norm_momentum: float = 0.99,
        partition: str | None = None,
        partition_size: int | tuple[int, int] | None = None,
        bias_size: int | tuple[int, int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = self._who()
        if bias_size is not None:
            if partition is not None:
                raise ValueError(
                    f"{who}: `bias_size` is for attention over the whole map; with "
                    f"partition={partition!r} the bias covers one window of partition_size. "
                    f"Received bias_size={bias_size!r}"
                )
            bias_size = grid_size(bias_size, who, "bias_size")
        self.bias_size = bias_size
        self.position_bias = check_choice(who, "position_bias", position_bias, POSITION_BIASES)
        self.position_bias_dim = check_int(who, "position_bias_dim", position_bias_dim, 1)
        self.position_bias_dropout = check_rate(who, "position_bias_dropout", position_bias_dropout)
        self.activation = activation
        self._activation_fn = check_activation(who, activation)
        self.norm = check_choice(who, "norm", norm, NORMS)
        self.norm_momentum = check_rate(who, "norm_momentum", norm_momentum)
        self.partition, self.partition_size = _partition(who, partition, partition_size)
        self.filters = check_int(who, "filters", filters, 1)
        self.head_dim = check_int(who, "head_dim", head_dim, 1)
        if self.filters % self.head_dim:
            raise ValueError(
                f"{who}: `filters` must be a multiple of `head_dim`; received "
                f"filters={filters}, head_dim={head_dim}"
            )
        self.pool = check_choice(who, "pool", pool, POOLS)
        self.attention_width = check_choice(
            who, "attention_width", attention_width, ATTENTION_WIDTHS
        )
        self.shortcut_bias = check_bool(who, "shortcut_bias", shortcut_bias)
        if layer_scale is not None:
            layer_scale = check_positive_number(who, "layer_scale", layer_scale)
        self.layer_scale = layer_scale
        # With attention_width="input" the heads follow the input width (set in build).
        self.num_heads = self.filters // self.head_dim
        self.attention_dim = self.filters
        self.strides = _strides(strides, who)
        if self.partition is not None and self.strides != 1:
            raise ValueError(
                f"{who}: partitioned attention (partition={self.partition!r}) keeps the "
                f"resolution: `strides` must be 1; received strides={strides!r}"
            )
        self.expansion_rate = check_int(who, "expansion_rate", expansion_rate, 1)
        self.drop_path_rate = check_rate(who, "drop_path_rate", drop_path_rate)
        self.norm_epsilon = check_rate(who, "norm_epsilon", norm_epsilon)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.drop_path_rate > 0 else None

        policy = self.dtype_policy
        self.attention_norm = self._make_norm("attention_norm")
        self.attention_pool = (
            make_pool(self.pool, policy, "attention_pool") if self.strides == 2 else None
        )
        self.qkv_dense = None
        self.output_dense = keras.layers.Dense(self.filters, dtype=policy, name="attention_output")
        self.ffn_norm = self._make_norm("ffn_norm")
        self.ffn_hidden = keras.layers.Dense(
            self.expansion_rate * self.filters, dtype=policy, name="ffn_hidden"
        )
        self.ffn_output = keras.layers.Dense(self.filters, dtype=policy, name="ffn_output")
        self.relative_bias = None
        self.shortcut_pool = None
        self.shortcut_projection = None
        self.attention_scale = None
        self.ffn_scale = None

    def _who(self) -> str:
        return f"RelativeTransformerBlock2D '{self.name}'"

    def _make_norm(self, name: str) -> keras.layers.Layer:
        if self.norm == "batch":
            return keras.layers.BatchNormalization(
                epsilon=self.norm_epsilon,
                momentum=self.norm_momentum,
                dtype=self.dtype_policy,
                name=name,
            )
        return keras.layers.LayerNormalization(
            epsilon=self.norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def build(self, input_shape: Any) -> None:
        shape = _check_feature_map(input_shape, self._who())
        batch, height, width, channels = shape
        if (height is None or width is None) and self.partition is None and not self.bias_size:
            raise ValueError(
                f"{self._who()}: the spatial size must be known when the block is built "
                f"(it sizes the relative position table), or `bias_size` given (the grid "
                f"the table is sized for, resized at each call); received input shape {shape}"
            )
        channels = int(channels)
        if self.partition is not None:
            _check_partition(self._who(), shape, self.partition_size, self.filters)
        if self.attention_width == "input":
            if channels % self.head_dim:
                raise ValueError(
                    f"{self._who()}: with attention_width='input' the input channels must "
                    f"be a multiple of head_dim={self.head_dim}; received input shape {shape}"
                )
            self.attention_dim = channels
            self.num_heads = channels // self.head_dim
        self.qkv_dense = keras.layers.Dense(
            3 * self.attention_dim, dtype=self.dtype_policy, name="qkv"
        )
        _PooledProjection.make(self, channels, self.filters, self.pool, self.shortcut_bias)
        _PooledProjection.build(self, shape)
        self.attention_norm.build(shape)
        if self.attention_pool is not None:
            self.attention_pool.build(shape)
        grid = (_downsampled(height, self.strides), _downsampled(width, self.strides))
        # The positions that attend to each other: the map, or one window of it.
        window = self.partition_size or self.bias_size or grid
        if self.position_bias == "mlp":
            self.relative_bias = ContinuousPositionBias2D(
                self.num_heads,
                size=window,
                hidden_dim=self.position_bias_dim,
                dropout=self.position_bias_dropout,
                dtype=self.dtype_policy,
                name="relative_bias",
            )
        else:
            self.relative_bias = RelativePositionBias2D(
                self.num_heads, size=window, dtype=self.dtype_policy, name="relative_bias"
            )
        self.qkv_dense.build((batch, None, channels))
        self.output_dense.build((batch, None, self.attention_dim))
        if self.layer_scale is not None:
            for branch in ("attention_scale", "ffn_scale"):
                setattr(
                    self,
                    branch,
                    self.add_weight(
                        shape=(self.filters,),
                        initializer=keras.initializers.Constant(self.layer_scale),
                        name=branch,
                    ),
                )
        self.ffn_norm.build((batch, *grid, self.filters))
        self.ffn_hidden.build((batch, *grid, self.filters))
        self.ffn_output.build((batch, *grid, self.expansion_rate * self.filters))

    def _attention(self, x: Any, training: bool | None = None) -> Any:
        height, width = _spatial_size(x)
        positions = height * width
        qkv = self.qkv_dense(ops.reshape(x, (-1, positions, x.shape[-1])))
        qkv = ops.reshape(qkv, (-1, positions, 3, self.num_heads, self.head_dim))
        query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if not is_static_size((height, width)):
            # Both sides as tensors: Keras refuses a call argument mixing the two.
            size = tuple(ops.convert_to_tensor(side, "int32") for side in (height, width))
        else:
            size = None if (height, width) == self.relative_bias.size else (height, width)
        if self.position_bias == "mlp":
            bias = self.relative_bias(size=size, training=training)
        else:
            bias = self.relative_bias(size=size)
        # The core's attention: float32 logits and softmax whatever the compute
        # dtype ("Architecture" in docs/development.md: precision).
        attended, _ = _attention.attend(
            _attention.scale_queries(query, self.head_dim),
            key,
            value,
            bias=ops.cast(bias, "float32"),
        )
        attended = ops.reshape(attended, (-1, height, width, self.attention_dim))
        return self.output_dense(attended)

    def _partitioned_attention(self, x: Any, training: bool | None = None) -> Any:
        """Attention within the windows of ``self.partition`` (or over the whole map)."""
        if self.partition is None:
            return self._attention(x, training)
        # A map of unknown size at build is checked here, once its size is known.
        _check_partition(self._who(), tuple(x.shape), self.partition_size, self.filters)
        height, width = _spatial_size(x)
        windows = partition_windows(x, self.partition, self.partition_size)
        windows = self._attention(windows, training)
        return merge_windows(windows, self.partition, self.partition_size, (height, width))

    def _scaled(self, x: Any, scale: Any) -> Any:
        return x if scale is None else x * ops.cast(scale, x.dtype)

    def _normalised(self, norm: keras.layers.Layer, x: Any, training: bool | None) -> Any:
        # BatchNorm takes `training` (batch statistics); LayerNorm has no such argument.
        return norm(x, training=training) if self.norm == "batch" else norm(x)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        shortcut = _PooledProjection.call(self, inputs)
        x = self._normalised(self.attention_norm, inputs, training)
        if self.attention_pool is not None:
            x = self.attention_pool(x)
        x = self._scaled(self._partitioned_attention(x, training), self.attention_scale)
        x = shortcut + drop_path(x, self.drop_path_rate, self.seed_generator, training)
        hidden = self.ffn_hidden(self._normalised(self.ffn_norm, x, training))
        y = self.ffn_output(self._activation_fn(hidden))
        y = self._scaled(y, self.ffn_scale)
        return x + drop_path(y, self.drop_path_rate, self.seed_generator, training)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return _block_output_shape(input_shape, self._who(), self.strides, self.filters)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            filters=self.filters,
            head_dim=self.head_dim,
            strides=self.strides,
            expansion_rate=self.expansion_rate,
            drop_path_rate=self.drop_path_rate,
            norm_epsilon=self.norm_epsilon,
            seed=self.seed,
            pool=self.pool,
            attention_width=self.attention_width,
            shortcut_bias=self.shortcut_bias,
            layer_scale=self.layer_scale,
            position_bias=self.position_bias,
            position_bias_dim=self.position_bias_dim,
            position_bias_dropout=self.position_bias_dropout,
            activation=_serialize_activation(self.activation),
            norm=self.norm,
            norm_momentum=self.norm_momentum,
            partition=self.partition,
            partition_size=None if self.partition_size is None else list(self.partition_size),
            bias_size=None if self.bias_size is None else list(self.bias_size),
        )
        return config
