"""What both CoAtNet blocks share: feature-map checks, pools, the shortcut, stochastic depth.

`MBConv` (``mbconv``) and `RelativeTransformerBlock2D` (``transformer``) are
pre-normalised residual blocks that can downsample by 2; this module holds the
downsampling pools, the ``Proj(Pool(x))`` shortcut they build when they do (or
when they change the width), their output shape and the stochastic depth of
their residual branches.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

#: The downsampling pools: 2 x 2 stride-2 max or average, or ``"max3"``, a 3 x 3 stride-2
#: max pool with one cell of padding on each side (PyTorch's ``MaxPool2d(3, 2, 1)``,
#: timm's ``pool_type="max"``, which its ``coatnet_rmlp_1_rw`` uses).
POOLS = ("max", "avg", "max3")


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
