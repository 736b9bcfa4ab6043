"""MaxxViT and CoAtNeXt: timm's CoAtNet and MaxViT with ConvNeXt blocks for MBConv.

timm's ``maxxvit.py`` (Wightman) names its experimental models after the MaxViT and
CoAtNet they change: the convolution of each block is a ConvNeXt block
(:class:`~keras_posenc.layers.ConvNeXtBlock`: 7 x 7 depthwise conv, LayerNorm, MLP,
layer scale) instead of an MBConv, and the stem normalises with LayerNorm. Four kinds of
stage (``layout``, one letter per stage S1..S4):

- ``"M"``: MaxxViT blocks, a ConvNeXt block then block and grid attention
  (:class:`~keras_posenc.layers.RelativeTransformerBlock2D` with ``partition``), as a
  MaxViT block (``maxxvit_rmlp_*``);
- ``"G"``: the same without the block attention: ConvNeXt, then grid attention only
  (timm's ``no_block_attn``, its ``maxxvitv2_*``);
- ``"C"`` and ``"T"``: a CoAtNet's stages, ConvNeXt blocks and relative-attention
  Transformer blocks over the whole map (``coatnext_nano_rw_224``: ``"C-C-T-T"``).

Every named configuration is a :class:`MaxxViTConfig` (:func:`build_maxxvit`'s
arguments); :data:`TIMM_CONFIGS` maps timm's names to them, and
``keras_posenc.convert.from_timm_maxxvit`` loads timm's checkpoints::

    >>> from keras_posenc.zoo.maxxvit import TIMM_CONFIGS
    >>> config = TIMM_CONFIGS["maxxvitv2_nano_rw_256"]
    >>> config.layout, config.channels
    ('G-G-G-G', (96, 96, 192, 384, 768))

The model card (zoo/maxxvit/README.md in the repository) has the details.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.layers._checks import check_bool, check_int, check_positive_number
from keras_posenc.layers.activations import get_activation
from keras_posenc.layers.coatnet import ConvNeXtBlock, RelativeTransformerBlock2D
from keras_posenc.zoo.coatnet import (
    TransformerBlockConfig,
    _block_options,
    _input_shape,
    _positive_ints,
    _stem_widths,
    check_head,
    classifier_head,
    transformer_arguments,
)
from keras_posenc.zoo.config import BlockOptions, ZooConfig, by_name
from keras_posenc.zoo.features import stage_pyramid
from keras_posenc.zoo.maxvit import _partition_size
from keras_posenc.zoo.registry import register_model

_WHO = "build_maxxvit"
#: The kinds of stage: ConvNeXt alone, Transformer, MaxxViT (block + grid), grid only.
STAGE_KINDS = ("C", "T", "M", "G")
_PARTITIONING = frozenset({"partition", "partition_size"})
TIMM_REFERENCE = (
    "Wightman, timm (PyTorch Image Models), maxxvit.py, after Tu et al. 2022 and "
    "Liu et al. 2022 (ConvNeXt)"
)
# timm's _init_conv for the stem convs: normal, variance 2 / fan_out.
_STEM_INITIALIZER = {
    "class_name": "VarianceScaling",
    "config": {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"},
}


def parse_stage_kinds(layout: Any, who: str = _WHO) -> tuple[str, ...]:
    """``layout`` (``"M-M-M-M"`` or a sequence of four letters) as a tuple of
    :data:`STAGE_KINDS`."""
    kinds = tuple(layout.split("-")) if isinstance(layout, str) else tuple(layout or ())
    if len(kinds) != 4 or any(kind not in STAGE_KINDS for kind in kinds):
        raise ValueError(
            f"{who}: `layout` must name four stages S1..S4, each one of {STAGE_KINDS} "
            f"(e.g. 'M-M-M-M'); received layout={layout!r}"
        )
    return kinds


def convnext_stem(
    x: Any, widths: Sequence[int], activation: Any, epsilon: float, bias: bool = False
) -> Any:
    """S0 of timm's ConvNeXt models: 3 x 3 convs of ``widths`` (the first with stride 2
    and PyTorch's padding), LayerNorm and the activation between them."""
    for index, filters in enumerate(widths):
        if index:
            x = keras.layers.LayerNormalization(epsilon=epsilon, name=f"stem_norm{index}")(x)
            x = keras.layers.Activation(activation, name=f"stem_activation{index}")(x)
        if index == 0:
            x = keras.layers.ZeroPadding2D(1, name="stem_pad1")(x)
        x = keras.layers.Conv2D(
            filters,
            3,
            strides=2 if index == 0 else 1,
            padding="valid" if index == 0 else "same",
            use_bias=bias,
            kernel_initializer=_STEM_INITIALIZER,
            name=f"stem_conv{index + 1}",
        )(x)
    return x


def build_maxxvit(
    blocks: Sequence[int],
    channels: Sequence[int],
    layout: str | Sequence[str] = "M-M-M-M",
    input_shape: Sequence[int] = (224, 224, 3),
    include_top: bool = True,
    num_classes: int = 1000,
    pooling: str | None = "avg",
    drop_path_rate: float = 0.0,
    features: bool = False,
    head_dim: int = 32,
    partition_size: int | tuple[int, int] | None = None,
    pre_logits: bool = False,
    stride_on: str = "depthwise",
    classifier_activation: str | None = None,
    name: str = "maxxvit",
    stem_channels: Sequence[int] | None = None,
    stem_bias: bool = False,
    conv_options: Mapping[str, Any] | None = None,
    transformer_options: Mapping[str, Any] | None = None,
    head: str = "norm_pool",
    head_norm_epsilon: float = 1e-6,
    remat: bool = False,
) -> keras.Model:
    """Builds a MaxxViT or CoAtNeXt (ConvNeXt blocks in a MaxViT or CoAtNet) as a
    functional ``keras.Model``.

    Args:
        blocks: blocks per stage S0..S4 (five positive ints; S0's are the stem convs).
        channels: output channels per stage S0..S4 (five positive ints; those of
            attention stages must be multiples of ``head_dim``, and each stage's a
            multiple of the previous one's: the ConvNeXt blocks' depthwise convs widen).
        layout: the kind of each stage S1..S4, ``"M"`` (ConvNeXt, block and grid
            attention), ``"G"`` (ConvNeXt, grid attention), ``"C"`` (ConvNeXt) or
            ``"T"`` (Transformer over the whole map), as ``"M-M-M-M"`` or a sequence.
        input_shape: ``(height, width, channels)``, height and width divisible by 32
            (and by 32 times the window with ``"M"`` or ``"G"`` stages).
        include_top: end with the classification head.
        num_classes: classifier width when ``include_top``.
        pooling: ``"avg"`` or ``"max"`` global pooling before the head; without the
            top, ``None`` returns the S4 feature map.
        drop_path_rate: stochastic depth rate of the last block, rising linearly from
            0 over the blocks of S1..S4.
        remat: recompute every Transformer block in the backward pass of training
            (Keras' remat: ``RelativeTransformerBlock2D(remat=True)``): less memory, more
            time. Default False.
        features: return the five stage outputs S0..S4 instead of the head's output.
        head_dim: channels per attention head.
        partition_size: the windows and grid of the ``"M"`` / ``"G"`` stages,
            ``(height, width)`` or one int; default ``input / 32``.
        pre_logits: a ``tanh`` dense layer as wide as S4 before the classifier
            (timm's ``head_hidden_size``).
        stride_on: where the first ConvNeXt block of a stage strides:
            ``"depthwise"`` (timm's models) or ``"pool"``; see :class:`ConvNeXtBlock`.
        classifier_activation: activation of the classifier, None for logits.
        name: the model's name.
        stem_channels: widths of the S0 convs, the last equal to ``channels[0]``.
        stem_bias: biases on the stem convs.
        conv_options: keyword arguments of every :class:`ConvNeXtBlock` (its
            ``activation`` and ``norm_epsilon`` are the stem's too).
        transformer_options: keyword arguments of every
            :class:`RelativeTransformerBlock2D` (``rotary`` and ``position_bias="none"`` as
            in `build_coatnet`; no ``shift``).
        head: ``"norm_pool"`` (default: LayerNorm at every position, then the pool)
            or ``"pool_norm"``.
        head_norm_epsilon: the head LayerNorm's epsilon (default 1e-6).

    Returns:
        The ``keras.Model``.

    Raises:
        ValueError: for a height or width not divisible by 32 or by the windows, an
            unknown layout, ``blocks``/``channels`` without five positive ints,
            channels not divisible by ``head_dim``, or other bad arguments.

    Examples:

        >>> from keras_posenc.zoo.maxxvit import build_maxxvit
        >>> model = build_maxxvit(
        ...     blocks=(2, 1, 1, 1, 1), channels=(8, 8, 16, 16, 32), head_dim=8,
        ...     layout="M-M-G-G", input_shape=(64, 64, 3), num_classes=10)
        >>> model.output_shape
        (None, 10)
        >>> [layer.name for layer in model.layers if layer.name.startswith("stage3")]
        ['stage3_block1_convnext', 'stage3_block1_grid_attention']
    """
    blocks = _positive_ints(blocks, "blocks", _WHO)
    channels = _positive_ints(channels, "channels", _WHO)
    kinds = parse_stage_kinds(layout)
    shape = _input_shape(input_shape, _WHO)
    if shape[0] is None or shape[1] is None:
        raise ValueError(
            f"{_WHO}: `input_shape` must give the height and width (the windows and "
            f"tables are sized for them); received input_shape={tuple(input_shape)}"
        )
    head_dim = check_int(_WHO, "head_dim", head_dim, 1)
    partitioned = any(kind in "MG" for kind in kinds)
    window = _partition_size(partition_size, shape, None) if partitioned else None
    widths = _stem_widths(stem_channels, blocks[0], channels[0], _WHO)
    conv_options = _block_options(conv_options, "conv_options", ConvNeXtBlock, _WHO)
    transformer_options = _block_options(
        transformer_options,
        "transformer_options",
        RelativeTransformerBlock2D,
        _WHO,
        set_by_builder=_PARTITIONING,
    )
    # "rotary" and position_bias="none" as CoAtNet's and MaxViT's; Swin's shift is theirs only.
    transformer_options["remat"] = check_bool(_WHO, "remat", remat)
    transformer_options, shift = transformer_arguments(transformer_options, _WHO)
    if shift is not None:
        raise ValueError(
            f"{_WHO}: transformer_options `shift` (Swin's shifted windows) is CoAtNet's and "
            f"MaxViT's option, not MaxxViT's; received shift={shift!r}"
        )
    head_options = check_head(
        _WHO,
        include_top=include_top,
        features=features,
        synchronized=False,
        pooling=pooling,
        num_classes=num_classes,
        drop_path_rate=drop_path_rate,
        pre_logits=pre_logits,
        head=head,
        head_norm="layer",
        head_norm_epsilon=head_norm_epsilon,
        classifier_activation=classifier_activation,
        norm_momentum=0.99,
    )
    check_bool(_WHO, "stem_bias", stem_bias)
    for stage, (kind, width) in enumerate(zip(kinds, channels[1:]), start=1):
        if kind != "C" and width % head_dim:
            raise ValueError(
                f"{_WHO}: channels of attention stage S{stage} must be a multiple of "
                f"head_dim={head_dim}; received channels[{stage}]={width}"
            )
        if kind != "T" and width % channels[stage - 1]:
            raise ValueError(
                f"{_WHO}: channels of ConvNeXt stage S{stage} must be a multiple of the "
                f"previous stage's (the depthwise conv widens); received "
                f"channels={channels}"
            )

    activation = get_activation(conv_options.get("activation", "gelu"))
    epsilon = check_positive_number(_WHO, "norm_epsilon", conv_options.get("norm_epsilon", 1e-6))
    rates = np.linspace(0.0, float(drop_path_rate), sum(blocks[1:])).tolist()
    inputs = keras.Input(shape, name="images")
    x = convnext_stem(inputs, widths, activation, epsilon, bias=stem_bias)
    outputs = [x]
    index = 0
    for stage, kind in enumerate(kinds, start=1):
        for block in range(blocks[stage]):
            prefix = f"stage{stage}_block{block + 1}"
            strides = 2 if block == 0 else 1
            if kind == "T":
                x = RelativeTransformerBlock2D(
                    channels[stage],
                    head_dim=head_dim,
                    strides=strides,
                    drop_path_rate=rates[index],
                    name=prefix,
                    **transformer_options,
                )(x)
                index += 1
                continue
            x = ConvNeXtBlock(
                channels[stage],
                strides=strides,
                stride_on=stride_on,
                drop_path_rate=rates[index],
                name=prefix if kind == "C" else f"{prefix}_convnext",
                **conv_options,
            )(x)
            for partition in {"C": (), "M": ("block", "grid"), "G": ("grid",)}[kind]:
                x = RelativeTransformerBlock2D(
                    channels[stage],
                    head_dim=head_dim,
                    partition=partition,
                    partition_size=window,
                    drop_path_rate=rates[index],
                    name=f"{prefix}_{partition}_attention",
                    **transformer_options,
                )(x)
            index += 1
        outputs.append(x)

    # The feature pyramid's levels: the layer that ends the stem and each stage (P1..P5).
    taps = [tensor._keras_history[0].name for tensor in outputs]
    head = outputs if features else classifier_head(x, channels[-1], **head_options)
    return stage_pyramid(inputs, head, taps, channels, name)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvNeXtBlockConfig(BlockOptions):
    """Options of every :class:`ConvNeXtBlock` of a MaxxViT (timm's ``MaxxVitConvCfg``
    with ``block_type="convnext"``); None leaves the block's default. The stem uses the
    same activation and LayerNorm epsilon. As a mapping: the options set.
    """

    layer = ConvNeXtBlock

    # The block's widths, kernel and layer scale.
    kernel_size: int | None = None
    expansion_rate: int | None = None
    layer_scale: float | None = None
    # The norm, the activation, the shortcut's pool and the biases.
    norm_epsilon: float | None = None
    activation: str | None = None
    pool: str | None = None
    output_bias: bool | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaxxViTConfig(ZooConfig):
    """A named MaxxViT or CoAtNeXt configuration: :func:`build_maxxvit`'s arguments (its
    docstring says what each does), with its defaults.

    Checked when made (``blocks``, ``channels``, ``layout``, ``input_shape``,
    ``head_dim`` and the block options' names), the rest when built.
    """

    # Architecture: blocks and widths per stage S0..S4, the kinds of S1..S4, the windows.
    blocks: tuple[int, ...]
    channels: tuple[int, ...]
    layout: str = "M-M-M-M"
    stem_channels: tuple[int, ...] | None = None
    stem_bias: bool = False
    head_dim: int = 32
    partition_size: int | tuple[int, int] | None = None
    stride_on: str = "depthwise"
    # Options of every ConvNeXt and attention block.
    conv_options: ConvNeXtBlockConfig = ConvNeXtBlockConfig()
    transformer_options: TransformerBlockConfig = TransformerBlockConfig()
    # Inputs: the image size.
    input_shape: tuple[int, int, int] = (224, 224, 3)
    # The head.
    include_top: bool = True
    num_classes: int = 1000
    pooling: str | None = "avg"
    features: bool = False
    pre_logits: bool = False
    head: str = "norm_pool"
    head_norm_epsilon: float = 1e-6
    classifier_activation: str | None = None
    # Training and the model.
    drop_path_rate: float = 0.0
    remat: bool = False
    name: str = "maxxvit"

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        values = {
            "blocks": _positive_ints(self.blocks, "blocks", who),
            "channels": _positive_ints(self.channels, "channels", who),
            "input_shape": _input_shape(self.input_shape, who),
            "head_dim": check_int(who, "head_dim", self.head_dim, 1),
            "conv_options": ConvNeXtBlockConfig.of(self.conv_options, who, "conv_options"),
            "transformer_options": TransformerBlockConfig.of(
                self.transformer_options, who, "transformer_options"
            ),
        }
        for field, value in values.items():
            object.__setattr__(self, field, value)
        parse_stage_kinds(self.layout, who)


# timm's `_next_cfg`: ConvNeXt blocks with layer scale 1e-6, attention at the input width
# with layer scale 1e-6, an MLP relative bias (RelPosMlp, 512 hidden units, dropout 0.125),
# LayerNorm (epsilon 1e-6) everywhere, average-pooled shortcuts, the norm before the pool.
_CONVNEXT = ConvNeXtBlockConfig(layer_scale=1e-6, norm_epsilon=1e-6, pool="avg")
_ATTENTION = TransformerBlockConfig(
    activation="gelu", norm_epsilon=1e-6, pool="avg", attention_width="input",
    shortcut_bias=True, layer_scale=1e-6, position_bias="mlp", position_bias_dim=512,
    position_bias_dropout=0.125,
)  # fmt: skip
# The same with a table of biases (timm's rel_pos_type="bias").
_TABLE = dataclasses.replace(
    _ATTENTION, position_bias=None, position_bias_dim=None, position_bias_dropout=None
)
_NEXT = MaxxViTConfig(
    blocks=(2, 1, 2, 3, 1), channels=(64, 64, 128, 256, 512), stem_channels=(32, 64),
    conv_options=_CONVNEXT, transformer_options=_ATTENTION,
)  # fmt: skip
_SIZE_256 = {"input_shape": (256, 256, 3)}


def _next(name: str, **fields: Any) -> MaxxViTConfig:
    """timm's ``name``: `_NEXT` with ``fields``."""
    return dataclasses.replace(_NEXT, zoo_name=name, name=name, **fields)


_TIMM = [
    # ConvNeXt in a CoAtNet: layer scale 1e-5 in the ConvNeXt blocks, none in the
    # Transformer blocks, a table of biases.
    _next("coatnext_nano_rw_224", layout="C-C-T-T", blocks=(2, 3, 4, 6, 3),
          conv_options=dataclasses.replace(_CONVNEXT, layer_scale=1e-5),
          transformer_options=dataclasses.replace(_TABLE, layer_scale=None)),
    _next("maxxvit_rmlp_nano_rw_256", **_SIZE_256),
    _next("maxxvit_rmlp_tiny_rw_256", **_SIZE_256, blocks=(2, 2, 2, 5, 2)),
    _next("maxxvit_rmlp_small_rw_256", **_SIZE_256, blocks=(2, 2, 2, 5, 2),
          channels=(96, 96, 192, 384, 768), stem_channels=(48, 96)),
    # MaxxViT v2: grid attention only.
    _next("maxxvitv2_nano_rw_256", **_SIZE_256, layout="G-G-G-G",
          channels=(96, 96, 192, 384, 768), stem_channels=(48, 96), transformer_options=_TABLE),
    _next("maxxvitv2_rmlp_base_rw_224", layout="G-G-G-G", blocks=(2, 2, 6, 12, 2),
          channels=(128, 128, 256, 512, 1024), stem_channels=(64, 128)),
    _next("maxxvitv2_rmlp_base_rw_384", layout="G-G-G-G", blocks=(2, 2, 6, 12, 2),
          channels=(128, 128, 256, 512, 1024), stem_channels=(64, 128),
          input_shape=(384, 384, 3)),
    _next("maxxvitv2_rmlp_large_rw_224", layout="G-G-G-G", blocks=(2, 2, 6, 16, 2),
          channels=(160, 160, 320, 640, 1280), stem_channels=(80, 160), pre_logits=True,
          head="pool_norm"),
]  # fmt: skip
# timm's sum(p.numel() for p in model.parameters()) with 1000 classes (timm 1.0.31; written
# by tests/fixtures/timm_maxxvit/full_size.py).
TIMM_PARAMETERS = {
    "coatnext_nano_rw_224": 14_701_244, "maxxvit_rmlp_nano_rw_256": 16_779_628,
    "maxxvit_rmlp_tiny_rw_256": 29_636_528, "maxxvit_rmlp_small_rw_256": 66_010_516,
    "maxxvitv2_nano_rw_256": 23_696_611, "maxxvitv2_rmlp_base_rw_224": 116_092_512,
    "maxxvitv2_rmlp_base_rw_384": 116_092_512, "maxxvitv2_rmlp_large_rw_224": 215_417_166,
}  # fmt: skip

#: Every registered MaxxViT and CoAtNeXt: zoo name -> :class:`MaxxViTConfig`.
CONFIGS: dict[str, MaxxViTConfig] = by_name(_TIMM)
#: timm's names (its ``maxxvit.py`` model names) -> our configuration of that model.
TIMM_CONFIGS: dict[str, MaxxViTConfig] = CONFIGS


for _name, _config in TIMM_CONFIGS.items():
    _size = _config.input_shape[0]
    _kind = "CoAtNeXt, C-C-T-T" if _name.startswith("coatnext") else "MaxxViT"
    register_model(
        _name,
        build_maxxvit,
        family="maxxvit",
        config=_config,
        description=(
            f"timm's {_name} ({_kind}, {TIMM_PARAMETERS[_name] / 1e6:.1f}M parameters "
            f"in timm), {_size} x {_size}, 1000 classes; loads timm's weights "
            "(convert.from_timm_maxxvit)"
        ),
        paper_parameters=None,
        reference=TIMM_REFERENCE,
    )
