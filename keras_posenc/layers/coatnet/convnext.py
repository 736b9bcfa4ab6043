"""`ConvNeXtBlock`: the ConvNeXt block (Liu et al. 2022) as timm's MaxxViT and CoAtNeXt
models use it in place of MBConv."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc.layers._checks import (
    check_activation,
    check_choice,
    check_int,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers.coatnet.shared import (
    POOLS,
    _block_output_shape,
    _check_feature_map,
    _PooledProjection,
    _serialize_activation,
    _strides,
    drop_path,
    make_pool,
)

#: Where a ConvNeXt block strides: on its depthwise conv or on a pool before it.
CONVNEXT_STRIDE_ON = ("depthwise", "pool")

# timm's _init_conv (EfficientNet's): normal, variance 2 / fan_out, untruncated. As a
# config, so that each sublayer deserialises its own instance (its own seed).
_INITIALIZER = {
    "class_name": "VarianceScaling",
    "config": {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"},
}


@keras.saving.register_keras_serializable(package="keras_posenc")
class ConvNeXtBlock(keras.layers.Layer):
    """The ConvNeXt block: depthwise conv, LayerNorm, MLP, layer scale, residual.

    ``x <- Shortcut(x) + DropPath(gamma * W2 act(W1 LN(DWConv_kxk(x))))``: a ``k x k``
    depthwise convolution (PyTorch's symmetric zero padding, ``(k - 1) // 2`` cells a
    side, with a bias), a LayerNorm over the channels, an MLP of two dense layers
    (``expansion_rate * filters`` wide in between) and a learned per-channel scale
    ``gamma`` (``layer_scale``). A block that halves the map strides its depthwise
    conv (or pools first, ``stride_on="pool"``) and its shortcut is ``Proj(Pool(x))``
    (a 2 x 2 stride-2 pool, then a 1 x 1 conv when the width changes), as timm's
    ``ConvNeXtBlock`` in ``maxxvit.py``. A wider output than input multiplies the
    depthwise conv's channels (``filters`` must then be a multiple of the input's).

    Args:
        filters: output channels, a positive int.
        strides: 1, or 2 to halve height and width (``ceil(size / 2)``).
        kernel_size: the depthwise kernel, a positive odd int (default 7).
        expansion_rate: the MLP's hidden width over ``filters`` (default 4).
        layer_scale: the initial value of ``gamma`` (default 1e-6), or None for none.
        norm_epsilon: the LayerNorm's epsilon (default 1e-6).
        activation: the MLP's activation, a name or callable (default ``"gelu"``,
            exact).
        stride_on: ``"depthwise"`` (default: the depthwise conv strides) or
            ``"pool"`` (a pool before a stride-1 depthwise conv).
        pool: the 2 x 2 pool of the shortcut and of ``stride_on="pool"``:
            ``"avg"`` (default), ``"max"`` or ``"max3"``.
        output_bias: biases on the depthwise conv, the MLP and a stride-1 shortcut
            projection (default True; a strided shortcut's projection always has one).
        drop_path_rate: stochastic depth, the probability of dropping the residual
            branch of a sample during training; in [0, 1).
        seed: optional int seed of the stochastic depth noise.
        **kwargs: base layer arguments (``name``, ``dtype``, ``trainable``).

    Call arguments:
        inputs: a feature map ``(batch, height, width, channels)``.
        training: bool; stochastic depth is active only when true.

    Returns:
        ``(batch, ceil(height / strides), ceil(width / strides), filters)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.coatnet import ConvNeXtBlock
        >>> images = np.ones((2, 8, 8, 16), "float32")
        >>> tuple(ConvNeXtBlock(16)(images).shape)
        (2, 8, 8, 16)
        >>> block = ConvNeXtBlock(32, strides=2)
        >>> tuple(block(images).shape), tuple(block.depthwise_conv.kernel.shape)
        ((2, 4, 4, 32), (7, 7, 16, 2))

    Reference:
        - [Liu et al., 2022. A ConvNet for the 2020s](https://arxiv.org/abs/2201.03545)
    """

    def __init__(
        self,
        filters: int,
        strides: int = 1,
        kernel_size: int = 7,
        expansion_rate: int = 4,
        layer_scale: float | None = 1e-6,
        norm_epsilon: float = 1e-6,
        activation: str | Any = "gelu",
        stride_on: str = "depthwise",
        pool: str = "avg",
        output_bias: bool = True,
        drop_path_rate: float = 0.0,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = self._who()
        self.filters = check_int(who, "filters", filters, 1)
        self.strides = _strides(strides, who)
        self.kernel_size = check_int(who, "kernel_size", kernel_size, 1)
        if self.kernel_size % 2 == 0:
            raise ValueError(
                f"{who}: `kernel_size` must be odd (PyTorch's symmetric padding); "
                f"received kernel_size={kernel_size}"
            )
        self.expansion_rate = check_int(who, "expansion_rate", expansion_rate, 1)
        if layer_scale is not None:
            layer_scale = check_positive_number(who, "layer_scale", layer_scale)
        self.layer_scale = layer_scale
        self.norm_epsilon = check_positive_number(who, "norm_epsilon", norm_epsilon)
        self.activation = activation
        self._activation_fn = check_activation(who, activation)
        self.stride_on = check_choice(who, "stride_on", stride_on, CONVNEXT_STRIDE_ON)
        self.pool = check_choice(who, "pool", pool, POOLS)
        if not isinstance(output_bias, bool):
            raise TypeError(f"{who}: `output_bias` must be True or False, got {output_bias!r}.")
        self.output_bias = output_bias
        self.drop_path_rate = check_rate(who, "drop_path_rate", drop_path_rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.drop_path_rate > 0 else None
        policy = self.dtype_policy
        self.down_pool = (
            make_pool(self.pool, policy, "down_pool")
            if self.stride_on == "pool" and self.strides == 2
            else None
        )
        self.norm = keras.layers.LayerNormalization(
            epsilon=self.norm_epsilon, dtype=policy, name="norm"
        )
        self.mlp_hidden = keras.layers.Dense(
            self.expansion_rate * self.filters,
            use_bias=output_bias,
            kernel_initializer=_INITIALIZER,
            dtype=policy,
            name="mlp_hidden",
        )
        self.mlp_output = keras.layers.Dense(
            self.filters,
            use_bias=output_bias,
            kernel_initializer=_INITIALIZER,
            dtype=policy,
            name="mlp_output",
        )
        self.depthwise_conv = None
        self.gamma = None
        self.shortcut_pool = None
        self.shortcut_projection = None

    def _who(self) -> str:
        return f"ConvNeXtBlock '{self.name}'"

    def _pad(self) -> int:
        """PyTorch's padding of the depthwise conv: ``((s - 1) + (k - 1)) // 2`` a side."""
        strides = self.strides if self.stride_on == "depthwise" else 1
        return ((strides - 1) + (self.kernel_size - 1)) // 2

    def build(self, input_shape: Any) -> None:
        shape = _check_feature_map(input_shape, self._who())
        channels = int(shape[-1])
        if self.filters % channels:
            raise ValueError(
                f"{self._who()}: `filters` must be a multiple of the input's channels "
                f"(the depthwise conv multiplies them); received filters={self.filters} "
                f"for {channels} input channels"
            )
        # timm's strided shortcut (Downsample2d) always has a bias; a stride-1 one
        # follows output_bias.
        _PooledProjection.make(
            self, channels, self.filters, self.pool, self.strides == 2 or self.output_bias
        )
        _PooledProjection.build(self, shape)
        if self.down_pool is not None:
            self.down_pool.build(shape)
        self.depthwise_conv = keras.layers.DepthwiseConv2D(
            self.kernel_size,
            strides=self.strides if self.stride_on == "depthwise" else 1,
            padding="valid",
            depth_multiplier=self.filters // channels,
            use_bias=self.output_bias,
            depthwise_initializer=_INITIALIZER,
            dtype=self.dtype_policy,
            name="depthwise_conv",
        )
        # It convolves the zero-padded map ("valid"): built for that shape.
        pad = self._pad()
        batch, height, width, _ = shape
        self.depthwise_conv.build(
            (batch, *(None if side is None else side + 2 * pad for side in (height, width)),
             channels)
        )  # fmt: skip
        batch, height, width, _ = _block_output_shape(
            shape, self._who(), self.strides, self.filters
        )
        out = (batch, height, width, self.filters)
        self.norm.build(out)
        self.mlp_hidden.build(out)
        self.mlp_output.build((batch, height, width, self.expansion_rate * self.filters))
        if self.layer_scale is not None:
            self.gamma = self.add_weight(
                shape=(self.filters,),
                initializer=keras.initializers.Constant(self.layer_scale),
                name="gamma",
            )

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        shortcut = _PooledProjection.call(self, inputs)
        x = inputs
        if self.down_pool is not None:
            x = self.down_pool(x)
        pad = self._pad()
        x = ops.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        x = self.depthwise_conv(x)
        x = self.mlp_output(self._activation_fn(self.mlp_hidden(self.norm(x))))
        if self.gamma is not None:
            x = x * ops.cast(self.gamma, x.dtype)
        return shortcut + drop_path(x, self.drop_path_rate, self.seed_generator, training)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return _block_output_shape(input_shape, self._who(), self.strides, self.filters)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            filters=self.filters,
            strides=self.strides,
            kernel_size=self.kernel_size,
            expansion_rate=self.expansion_rate,
            layer_scale=self.layer_scale,
            norm_epsilon=self.norm_epsilon,
            activation=_serialize_activation(self.activation),
            stride_on=self.stride_on,
            pool=self.pool,
            output_bias=self.output_bias,
            drop_path_rate=self.drop_path_rate,
            seed=self.seed,
        )
        return config
