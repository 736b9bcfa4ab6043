"""Which timm tensor each variable of a model is, and how its layout changes.

A ``_Plan`` walks a CoAtNet's or MaxViT's layers and lists, for every variable, timm's
key, the transform from timm's layout to ours and its inverse: convolutions, 1 x 1
convolutions and ``Linear`` layers as Keras kernels, the qkv rows reordered, the relative
position tables flipped or resized. The converters read a checkpoint through it and
:func:`~keras_posenc.convert.to_timm_state_dict` writes one back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from keras_posenc.layers.coatnet import ConvNeXtBlock, MBConv, RelativeTransformerBlock2D
from keras_posenc.layers.position_biases import ContinuousPositionBias2D
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D


def _same(weight: np.ndarray) -> np.ndarray:
    return weight


def _conv(weight: np.ndarray) -> np.ndarray:
    return weight.transpose(2, 3, 1, 0)


def _conv_back(kernel: np.ndarray) -> np.ndarray:
    return kernel.transpose(3, 2, 0, 1)


def _depthwise(weight: np.ndarray) -> np.ndarray:
    """``(C, 1, kh, kw)`` <-> ``(kh, kw, C, 1)``: the same permutation both ways."""
    return weight.transpose(2, 3, 0, 1)


def _grouped_back(kernel: np.ndarray) -> np.ndarray:
    """A Keras depthwise kernel ``(kh, kw, C, m)`` (``m`` outputs per input) as PyTorch's
    grouped conv weight ``(C * m, 1, kh, kw)``: PyTorch's output ``c * m + j`` is ``[c, j]``."""
    height, width, channels, multiplier = kernel.shape
    return kernel.transpose(2, 3, 0, 1).reshape(channels * multiplier, 1, height, width)


def _dense(weight: np.ndarray) -> np.ndarray:
    """A Linear ``(out, in)`` or 1 x 1 conv ``(out, in, 1, 1)`` weight as a Keras kernel."""
    return weight.reshape(weight.shape[0], -1).T


def _dense_back(kernel: np.ndarray) -> np.ndarray:
    """A Keras kernel as timm's 1 x 1 conv weight ``(out, in, 1, 1)``."""
    return kernel.T[:, :, None, None]


def _linear_back(kernel: np.ndarray) -> np.ndarray:
    return kernel.T


def _head_first_order(heads: int, head_dim: int) -> np.ndarray:
    """For each of our qkv columns (q, k, v of all heads), timm's head-first row."""
    part, head, dim = np.meshgrid(
        np.arange(3), np.arange(heads), np.arange(head_dim), indexing="ij"
    )
    return (head * 3 * head_dim + part * head_dim + dim).reshape(-1)


class _Plan:
    """The (variable, timm key, transform, inverse) entries of a model, built by walking
    its layers: ``transform`` turns timm's tensor into the variable's value, ``inverse``
    the variable's value back into timm's tensor."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, str, Callable, Callable]] = []
        # Keys whose tensors may have another shape: the relative position tables, resized
        # to the model's grid. Every other tensor must have the exact shape of timm's layout.
        self.resizable: set[str] = set()

    def add(
        self, variable: Any, key: str, transform: Callable = _same, inverse: Callable = _same
    ) -> None:
        self.entries.append((variable, key, transform, inverse))

    def conv(
        self, layer: Any, prefix: str, transform: Callable = _conv, inverse: Callable = _conv_back
    ) -> None:
        self.add(layer.kernel, f"{prefix}.weight", transform, inverse)
        if layer.use_bias:
            self.add(layer.bias, f"{prefix}.bias")

    def dense(self, layer: Any, prefix: str, linear: bool = False) -> None:
        """A Keras Dense layer that is a 1 x 1 conv in timm, or a Linear (``linear``)."""
        self.conv(layer, prefix, _dense, _linear_back if linear else _dense_back)

    def batch_norm(self, layer: Any, prefix: str) -> None:
        for variable, name in (
            (layer.gamma, "weight"),
            (layer.beta, "bias"),
            (layer.moving_mean, "running_mean"),
            (layer.moving_variance, "running_var"),
        ):
            self.add(variable, f"{prefix}.{name}")

    def layer_norm(self, layer: Any, prefix: str) -> None:
        self.add(layer.gamma, f"{prefix}.weight")
        self.add(layer.beta, f"{prefix}.bias")

    def norm(self, layer: Any, prefix: str) -> None:
        """A LayerNorm, or a BatchNorm (timm's coatnet_bn Transformer blocks and head)."""
        if isinstance(layer, keras.layers.BatchNormalization):
            self.batch_norm(layer, prefix)
        else:
            self.layer_norm(layer, prefix)

    def shortcut(self, block: Any, prefix: str) -> None:
        if block.shortcut_projection is not None:
            self.conv(block.shortcut_projection, f"{prefix}.shortcut.expand")

    def mbconv(self, block: MBConv, prefix: str) -> None:
        self.shortcut(block, prefix)
        self.batch_norm(block.pre_norm, f"{prefix}.pre_norm")
        self.conv(block.expand_conv, f"{prefix}.conv1_1x1")
        self.batch_norm(block.expand_norm, f"{prefix}.norm1")
        self.conv(block.depthwise_conv, f"{prefix}.conv2_kxk", _depthwise, _depthwise)
        self.batch_norm(block.depthwise_norm, f"{prefix}.norm2")
        if block.squeeze_excite is not None:
            se = "se_early" if block.se_position == "before_norm" else "se"
            self.dense(block.squeeze_excite.squeeze, f"{prefix}.{se}.fc1")
            self.dense(block.squeeze_excite.excite, f"{prefix}.{se}.fc2")
        self.conv(block.project_conv, f"{prefix}.conv3_1x1")

    def convnext(self, block: ConvNeXtBlock, prefix: str) -> None:
        """timm's ``ConvNeXtBlock`` (``maxxvit.py``, its ``conv_mlp`` form: 1 x 1 convs)."""
        if block.shortcut_projection is not None:
            # A strided shortcut is timm's Downsample2d (pool, then `expand`), a stride-1
            # one a plain 1 x 1 conv.
            where = "shortcut.expand" if block.strides == 2 else "shortcut"
            self.conv(block.shortcut_projection, f"{prefix}.{where}")
        _, _, channels, multiplier = block.depthwise_conv.kernel.shape

        def grouped(weight: np.ndarray) -> np.ndarray:
            return weight.reshape(channels, multiplier, *weight.shape[2:]).transpose(2, 3, 0, 1)

        self.conv(block.depthwise_conv, f"{prefix}.conv_dw", grouped, _grouped_back)
        self.layer_norm(block.norm, f"{prefix}.norm")
        self.dense(block.mlp_hidden, f"{prefix}.mlp.fc1")
        self.dense(block.mlp_output, f"{prefix}.mlp.fc2")
        if block.gamma is not None:
            self.add(block.gamma, f"{prefix}.ls.gamma")

    def transformer(
        self, block: RelativeTransformerBlock2D, prefix: str, layout: str = "rw"
    ) -> None:
        """A Transformer block: CoAtNet's (1 x 1 convs in timm) or, with ``partition``,
        one of MaxViT's attention layers (``Linear`` layers in timm). ``layout``: ``"rw"``
        (timm's head-first qkv, its ``RelPosBias`` table) or ``"tf"`` (the official
        code's interleaved qkv, which is ours, and ``RelPosBiasTf`` tables)."""
        linear = block.partition is not None
        self.shortcut(block, prefix)
        norm = f"{prefix}.norm1.norm" if block.strides == 2 else f"{prefix}.norm1"
        self.norm(block.attention_norm, norm)
        columns = 3 * block.attention_dim
        order = (
            np.arange(columns)
            if layout == "tf"
            else _head_first_order(block.num_heads, block.head_dim)
        )
        back = np.argsort(order)  # our column of each of timm's rows
        kernel_back = _linear_back if linear else _dense_back
        self.add(
            block.qkv_dense.kernel,
            f"{prefix}.attn.qkv.weight",
            lambda w: _dense(w)[:, order],
            lambda kernel: kernel_back(kernel[:, back]),
        )
        self.add(
            block.qkv_dense.bias,
            f"{prefix}.attn.qkv.bias",
            lambda b: b[order],
            lambda b: b[back],
        )
        self.relative_bias(block.relative_bias, f"{prefix}.attn.rel_pos", layout)
        self.dense(block.output_dense, f"{prefix}.attn.proj", linear)
        if block.layer_scale is not None:
            self.add(block.attention_scale, f"{prefix}.ls1.gamma")
            self.add(block.ffn_scale, f"{prefix}.ls2.gamma")
        self.norm(block.ffn_norm, f"{prefix}.norm2")
        self.dense(block.ffn_hidden, f"{prefix}.mlp.fc1", linear)
        self.dense(block.ffn_output, f"{prefix}.mlp.fc2", linear)

    def relative_bias(self, bias: Any, prefix: str, layout: str) -> None:
        if isinstance(bias, ContinuousPositionBias2D):
            # timm's RelPosMlp: Linear 2 -> hidden -> heads of the (rows, columns) offsets.
            weights = bias.mlp_weights
            for ours, theirs in (("hidden", "fc1"), ("output", "fc2")):
                self.add(
                    weights[f"mlp_{ours}_kernel"],
                    f"{prefix}.mlp.{theirs}.weight",
                    _dense,
                    _linear_back,
                )
                self.add(weights[f"mlp_{ours}_bias"], f"{prefix}.mlp.{theirs}.bias")
            return
        key = f"{prefix}.relative_position_bias_table"
        self.resizable.add(key)
        if layout == "tf":
            # (heads, 2h - 1, 2w - 1) indexed by key minus query: ours, flipped.
            self.add(
                bias.table,
                key,
                lambda table: _relative_table_tf(table, bias, prefix),
                lambda table: table[:, ::-1, ::-1],
            )
        else:
            self.add(
                bias.table,
                key,
                lambda table: _relative_table(table, bias, prefix),
                lambda table: table.reshape(table.shape[0], -1).T,
            )


def _relative_table(table: np.ndarray, layer: RelativePositionBias2D, where: str) -> np.ndarray:
    """timm's ``((2h-1)(2w-1), heads)`` table as ours, resized to the layer's grid.

    Its errors start with the key: the converter adds where the tensor comes from.
    """
    if table.ndim != 2 or table.shape[1] != layer.num_heads:
        raise ValueError(
            f"{where}.relative_position_bias_table must have shape "
            f"(positions, {layer.num_heads}), got {table.shape}."
        )
    rows, cols = 2 * layer.size[0] - 1, 2 * layer.size[1] - 1
    if table.shape[0] == rows * cols:
        return table.T.reshape(layer.num_heads, rows, cols)
    side = int(round(np.sqrt(table.shape[0])))
    if side * side != table.shape[0] or side % 2 == 0:
        raise ValueError(
            f"{where}.relative_position_bias_table has {table.shape[0]} offsets; "
            f"the model needs {rows} x {cols} for its {layer.size} grid, and a table of "
            "another grid can only be resized when it is square."
        )
    stored = table.T.reshape(layer.num_heads, side, side)
    return RelativePositionBias2D.resize_table(stored, layer.size)


def _relative_table_tf(table: np.ndarray, layer: RelativePositionBias2D, where: str) -> np.ndarray:
    """timm's ``RelPosBiasTf`` table ``(heads, 2h-1, 2w-1)``, indexed by key minus query,
    as ours (query minus key: both axes flipped), resized to the layer's grid."""
    if table.ndim != 3 or table.shape[0] != layer.num_heads:
        raise ValueError(
            f"{where}.relative_position_bias_table must have shape "
            f"({layer.num_heads}, rows, columns), got {table.shape}."
        )
    flipped = np.ascontiguousarray(table[:, ::-1, ::-1])
    try:
        return RelativePositionBias2D.resize_table(flipped, layer.size)
    except ValueError as error:
        raise ValueError(f"{where}.relative_position_bias_table: {error}") from error


_MAXVIT_PARTS = {
    "mbconv": "conv",
    "convnext": "conv",
    "block_attention": "attn_block",
    "grid_attention": "attn_grid",
}


def _layout(model: keras.Model) -> str:
    """``"tf"`` for a model with the official MaxViT code's TensorFlow padding (timm's
    ``_tf`` ports: interleaved qkv, ``RelPosBiasTf`` tables), else ``"rw"``."""
    for layer in model.layers:
        if isinstance(layer, MBConv):
            return "tf" if layer.padding == "same" else "rw"
    return "rw"


def _plan(model: keras.Model, stem_convs: int) -> _Plan:
    plan = _Plan()
    layout = _layout(model)
    for index in range(1, stem_convs + 1):
        plan.conv(model.get_layer(f"stem_conv{index}"), f"stem.conv{index}")
        if index < stem_convs:
            # BatchNorm, or LayerNorm in the ConvNeXt models' stems.
            plan.norm(model.get_layer(f"stem_norm{index}"), f"stem.norm{index}")
    for layer in model.layers:
        if isinstance(layer, MBConv | ConvNeXtBlock | RelativeTransformerBlock2D):
            stage, rest = layer.name[len("stage") :].split("_block", 1)
            block, _, part = rest.partition("_")
            prefix = f"stages.{int(stage) - 1}.blocks.{int(block) - 1}"
            if part:  # a MaxViT block's layer
                prefix = f"{prefix}.{_MAXVIT_PARTS[part]}"
            if isinstance(layer, MBConv):
                plan.mbconv(layer, prefix)
            elif isinstance(layer, ConvNeXtBlock):
                plan.convnext(layer, prefix)
            else:
                plan.transformer(layer, prefix, layout)
    names = {layer.name for layer in model.layers}
    if "pre_logits" in names:  # timm's NormMlpClassifierHead (its paper configurations)
        plan.layer_norm(model.get_layer("head_norm"), "head.norm")
        plan.dense(model.get_layer("pre_logits"), "head.pre_logits.fc", linear=True)
    elif "head_norm" in names:
        plan.norm(model.get_layer("head_norm"), "norm")
    if "predictions" in names:
        plan.dense(model.get_layer("predictions"), "head.fc", linear=True)
    return plan
