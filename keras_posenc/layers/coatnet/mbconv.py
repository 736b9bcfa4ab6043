"""`MBConv`, CoAtNet's convolution block, and its `SqueezeExcite`."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc import backend
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_choice,
    check_int,
    check_rate,
)
from keras_posenc.layers.coatnet.shared import (
    POOLS,
    _block_output_shape,
    _check_feature_map,
    _downsampled,
    _PooledProjection,
    _serialize_activation,
    _strides,
    drop_path,
    make_pool,
)

STRIDE_ON = ("expand", "depthwise", "pool")
PADDINGS = ("same", "symmetric")
EXPAND_FROM = ("output", "input")
SE_FROM = ("output", "hidden")
SE_POSITIONS = ("after_activation", "before_norm")

# timm's MBConv initialisation (EfficientNet's): normal, variance 2 / fan_out, untruncated.
_CONV_INITIALIZER = {
    "class_name": "VarianceScaling",
    "config": {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"},
}


def symmetric_pad(x: Any, kernel_size: int, strides: int) -> Any:
    """Zero-pads height and width by ``((strides - 1) + (kernel_size - 1)) // 2`` on each side.

    PyTorch's (and timm's) padding for a strided convolution, which differs from
    Keras' "same" (TensorFlow's rule puts the extra cell after, none before): with
    it, a "valid" convolution samples the same pixels as the PyTorch model.
    """
    pad = ((strides - 1) + (kernel_size - 1)) // 2
    return ops.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0))) if pad else x


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
