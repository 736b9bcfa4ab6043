"""CoAtNet (Dai et al. 2021): convolution stages, then relative-attention stages.

Five stages: S0, a stem of 3 x 3 convolutions (the first with stride 2); S1..S4,
each a stack of MBConv (``"C"``) or relative-attention Transformer (``"T"``)
blocks whose first block halves the resolution. The paper's layout is C-C-T-T,
so a 224 x 224 image is seen at 112, 56, 28, 14 and 7 pixels per side. The head
is a global pool, LayerNorm, a ``tanh`` pre-logits dense layer as wide as S4
(the official TF code's head, which timm's paper configurations copy; with it
the counts equal timm's and come closer to the paper's) and the classifier.

Registered configurations, C-C-T-T at 224 x 224 with 1000 classes; parameters are
trainable ones (what the paper and timm count; Keras' ``count_params`` adds
BatchNorm's moving statistics), against timm's ``coatnet_N_224`` and the paper:

    name       blocks S0..S4    channels S0..S4           ours          timm     paper
    coatnet_0  2, 2, 3, 5, 2    64, 96, 192, 384, 768     25,036,820    25.04M   25M
    coatnet_1  2, 2, 6, 14, 2   64, 96, 192, 384, 768     42,225,776    42.23M   42M
    coatnet_2  2, 2, 6, 14, 2   128, 128, 256, 512, 1024  74,684,744    74.68M   75M
    coatnet_3  2, 2, 6, 14, 2   192, 192, 384, 768, 1536  166,966,264   166.97M  168M
    coatnet_4  2, 2, 12, 28, 2  192, 192, 384, 768, 1536  275,425,288   275.43M  275M

timm's own variants, the only CoAtNets with public trained weights, are registered too
(``coatnet_nano_rw_224``, ``coatnet_0_rw_224`` .. ``coatnet_3_rw_224``, and the
experimental ``coatnet_bn_0_rw_224`` with BatchNorm in its Transformer blocks and
``coatnet_rmlp_*`` whose relative bias is an MLP of the log-scaled offsets, timm's
``RelPosMlp``): the same builder with the options they need, parameter counts equal to
timm's; ``keras_posenc.convert.from_timm_coatnet`` loads their checkpoints.

Every named configuration is a :class:`CoAtNetConfig` (its fields are
:func:`build_coatnet`'s arguments; the options of the MBConv and Transformer blocks are a
nested :class:`ConvBlockConfig` and :class:`TransformerBlockConfig`, as timm nests its
``MaxxVitConvCfg`` and ``MaxxVitTransformerCfg``): :data:`CONFIGS` maps every registered
name to its configuration, :data:`TIMM_CONFIGS` timm's names::

    >>> from keras_posenc.zoo.coatnet import TIMM_CONFIGS
    >>> config = TIMM_CONFIGS["coatnet_0_rw_224"]
    >>> config.blocks, config.stem_channels, config.conv_options.activation
    ((2, 2, 3, 7, 2), (32, 64), 'silu')

The model card (zoo/coatnet/README.md in the repository) has the details.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc import backend
from keras_posenc.layers._checks import (
    check_bool,
    check_int,
    check_ints,
    check_positive_number,
    check_rate,
    grid_size,
)
from keras_posenc.layers.activations import get_activation
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.zoo.coatnet_options import (  # noqa: F401 (re-exported: maxvit, tests)
    _SET_BY_BUILDER,
    ConvBlockConfig,
    TransformerBlockConfig,
    _block_options,
    block_shift,
    transformer_arguments,
)
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.features import stage_pyramid
from keras_posenc.zoo.registry import register_model

_WHO = "build_coatnet"
NUM_STAGES = 5
LAYOUTS = ("C-C-C-C", "C-C-C-T", "C-C-T-T", "C-T-T-T")
POOLINGS = ("avg", "max", None)
HEADS = ("pool_norm", "norm_pool")
HEAD_NORMS = ("layer", "batch")
REFERENCE = (
    "Dai et al. 2021, CoAtNet: Marrying Convolution and Attention for All Data Sizes "
    "(arXiv:2106.04803)"
)
TIMM_REFERENCE = "Wightman, timm (PyTorch Image Models), maxxvit.py, after Dai et al. 2021"


# --------------------------------------------------------------------------- validation


def _positive_ints(value: Any, argument: str, who: str = _WHO) -> tuple[int, ...]:
    return check_ints(who, argument, value, NUM_STAGES, what=", one per stage S0..S4")


def parse_layout(layout: Any, who: str = _WHO) -> tuple[str, ...]:
    """The block type (``"C"`` or ``"T"``) of stages S1..S4 from a layout like ``"C-C-T-T"``.

    Raises:
        ValueError: for anything but four ``C``/``T`` letters joined by ``-``.
    """
    stages = tuple(layout.upper().split("-")) if isinstance(layout, str) else ()
    if len(stages) != NUM_STAGES - 1 or any(s not in ("C", "T") for s in stages):
        raise ValueError(
            f"{who}: unknown `layout` {layout!r}; expected the block types of stages "
            f"S1..S4 as four of 'C' (MBConv) or 'T' (Transformer) joined by '-', such as "
            f"the paper's {', '.join(repr(x) for x in LAYOUTS)}"
        )
    return stages


#: The image size the relative tables of a model built for images of any size are sized
#: for, unless ``base_size`` says otherwise: the registered models' 224 x 224.
DEFAULT_BASE_SIZE = (224, 224)


def _input_shape(value: Any, who: str = _WHO) -> tuple[int | None, int | None, int]:
    """``(height, width, channels)``: positive ints, height and width possibly None."""
    try:
        shape = tuple(value)
    except TypeError:
        shape = ()

    def positive(v: Any) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0

    valid = (
        len(shape) == 3 and all(v is None or positive(v) for v in shape[:2]) and positive(shape[2])
    )
    if not valid:
        raise ValueError(
            f"{who}: `input_shape` must be (height, width, channels) of positive ints, "
            f"height and width possibly None (images of any size); received {value!r}"
        )
    height, width, _ = shape
    if (height is not None and height % 32) or (width is not None and width % 32):
        raise ValueError(
            f"{who}: the input height and width must be divisible by 32 (the total "
            f"downsampling of S0..S4); received input_shape={value!r}"
        )
    return tuple(None if v is None else int(v) for v in shape)


def base_image_size(shape: tuple, base_size: Any, who: str = _WHO) -> tuple[int, int] | None:
    """The image size relative tables are sized for when ``shape`` leaves a side unknown.

    None when height and width are both known (the tables are sized for them);
    otherwise ``base_size`` (default :data:`DEFAULT_BASE_SIZE`) with the known side
    taken from ``shape``, checked to be divisible by 32.
    """
    if shape[0] is not None and shape[1] is not None:
        return None
    base = DEFAULT_BASE_SIZE if base_size is None else grid_size(base_size, who, "base_size")
    base = tuple(b if s is None else s for s, b in zip(shape[:2], base))
    if base[0] % 32 or base[1] % 32:
        raise ValueError(
            f"{who}: `base_size` (the image size the relative tables are sized for when "
            f"the input size is unknown) must be divisible by 32; received "
            f"base_size={base_size!r}"
        )
    return base


def _stem_widths(value: Any, blocks: int, last: int, who: str = _WHO) -> tuple[int, ...]:
    if value is None:
        return (last,) * blocks
    widths = check_ints(who, "stem_channels", value, blocks)
    if widths[-1] != last:
        raise ValueError(
            f"{who}: the last of `stem_channels` is the stem's output and must equal "
            f"channels[0]={last}; received stem_channels={value!r}"
        )
    return widths


# --------------------------------------------------------------------------- the model


def stem(
    x: Any, widths: Sequence[int], synchronized: bool, conv_options: Mapping, bias: bool = False
) -> Any:
    """S0: 3 x 3 convs of ``widths``, the first with stride 2, BatchNorm + activation between.

    The BatchNorm epsilon/momentum, the activation and the padding are the MBConv
    blocks' (``conv_options``), as in timm; ``bias``: the convs have biases (MaxViT's).
    Shared by :func:`build_coatnet` and ``zoo.maxvit.build_maxvit``.
    """
    activation = get_activation(conv_options.get("activation", "gelu"))
    symmetric = conv_options.get("padding", "same") == "symmetric"
    norm = {
        key: conv_options[option]
        for key, option in (("epsilon", "norm_epsilon"), ("momentum", "norm_momentum"))
        if option in conv_options
    }
    for index, filters in enumerate(widths):
        if index:
            x = keras.layers.BatchNormalization(
                synchronized=synchronized, name=f"stem_norm{index}", **norm
            )(x)
            x = keras.layers.Activation(activation, name=f"stem_activation{index}")(x)
        strided_symmetric = symmetric and index == 0
        if strided_symmetric:
            # PyTorch's padding of the strided conv (see layers.coatnet.symmetric_pad).
            x = keras.layers.ZeroPadding2D(1, name="stem_pad1")(x)
        x = keras.layers.Conv2D(
            filters,
            3,
            strides=2 if index == 0 else 1,
            padding="valid" if strided_symmetric else "same",
            use_bias=bias,
            kernel_initializer={
                "class_name": "VarianceScaling",
                "config": {"scale": 2.0, "mode": "fan_out", "distribution": "untruncated_normal"},
            },
            name=f"stem_conv{index + 1}",
        )(x)
    return x


def build_coatnet(
    blocks: Sequence[int],
    channels: Sequence[int],
    layout: str = "C-C-T-T",
    input_shape: Sequence[int] = (224, 224, 3),
    include_top: bool = True,
    num_classes: int = 1000,
    pooling: str | None = "avg",
    drop_path_rate: float = 0.0,
    features: bool = False,
    head_dim: int = 32,
    pre_logits: bool = False,
    stride_on: str = "expand",
    synchronized: bool = False,
    classifier_activation: str | None = None,
    name: str = "coatnet",
    stem_channels: Sequence[int] | None = None,
    conv_options: Mapping[str, Any] | None = None,
    transformer_options: Mapping[str, Any] | None = None,
    head: str = "pool_norm",
    head_norm_epsilon: float = 1e-5,
    head_norm: str = "layer",
    base_size: int | tuple[int, int] | None = None,
    remat: bool = False,
) -> keras.Model:
    """Builds a CoAtNet as a functional ``keras.Model``.

    Args:
        blocks: blocks per stage S0..S4 (five positive ints; S0's are the stem convs).
        channels: output channels per stage S0..S4 (five positive ints; those of
            Transformer stages must be multiples of ``head_dim``).
        layout: block types of S1..S4, four of ``"C"`` (MBConv) / ``"T"``
            (relative-attention Transformer) joined by ``"-"``; the paper compares
            ``"C-C-C-C"``, ``"C-C-C-T"``, ``"C-C-T-T"`` (its choice) and ``"C-T-T-T"``.
        input_shape: ``(height, width, channels)``; height and width must be
            divisible by 32, square or not. Inputs are used as given (timm's
            CoAtNet expects pixels scaled to [-1, 1]). Height and width may be
            None: the model then takes images of any size (see ``base_size``),
            giving the logits of a model built for that size whose tables were
            resized from ``base_size`` (docs/guides/coatnet.md, "Images of any size").
        include_top: end with the classification head.
        num_classes: classifier width when ``include_top``.
        pooling: ``"avg"`` or ``"max"`` global pooling before the head; without
            the top, ``None`` returns the S4 feature map.
        drop_path_rate: stochastic depth rate of the last block, rising linearly
            from 0 over the blocks of S1..S4 (the paper: 0.2 for CoAtNet-0 up to
            0.7 for CoAtNet-3 on ImageNet-1K).
        remat: recompute every Transformer block in the backward pass of training
            (Keras' remat: ``RelativeTransformerBlock2D(remat=True)``): less memory, more
            time. Default False.
        features: return the five stage outputs S0..S4 (strides 2, 4, 8, 16, 32)
            instead of the head's output; ``include_top`` and ``pooling`` are then
            not used.
        head_dim: channels per attention head (32 in the paper).
        pre_logits: put a ``tanh`` dense layer as wide as S4 between the pooled,
            normalised features and the classifier. The named configurations
            have it, as the official TF code and timm's paper configurations do.
        stride_on: where MBConv's stride sits, ``"expand"`` (the paper's default)
            or ``"depthwise"`` (its variant); see :class:`MBConv`.
        synchronized: synchronised BatchNorm across replicas (TensorFlow backend).
        classifier_activation: activation of the classifier, None for logits.
        name: the model's name.
        stem_channels: widths of the S0 convs, one per S0 block, the last equal to
            ``channels[0]``; default all ``channels[0]`` (timm's ``_rw`` stems
            are ``(32, 64)`` and the like).
        conv_options: more keyword arguments of every :class:`MBConv` (e.g.
            ``activation``, ``pre_activation``, ``pool``, ``expand_from``,
            ``se_from``, ``se_activation``, ``se_position``, ``output_bias``,
            ``padding``, ``norm_epsilon``). The stem uses the same activation,
            BatchNorm epsilon/momentum and padding.
        transformer_options: more keyword arguments of every
            :class:`RelativeTransformerBlock2D` (e.g. ``pool``,
            ``attention_width``, ``shortcut_bias``, ``layer_scale``,
            ``norm_epsilon``), a :class:`TransformerBlockConfig`. Also
            ``rotary`` (2D rotary: ``"axial"``, ``"mixed"``, a
            ``RotaryPositions2D`` or its config), ``position_bias="none"``
            (rotary alone), and windows: ``partition="block"`` with
            ``partition_size`` (the first block of a stage, which downsamples,
            still attends over its whole map) and Swin's ``shift`` (``"half"``;
            every second block of a stage, where the map is longer than a window).
        head: ``"pool_norm"`` (default: global pool, then LayerNorm, the
            official code's head) or ``"norm_pool"`` (LayerNorm at every
            position of the S4 map, then the global pool: timm's ``_rw`` models).
        head_norm_epsilon: the head norm's epsilon (default 1e-5).
        head_norm: the head's norm, ``"layer"`` (LayerNorm, default) or ``"batch"``
            (BatchNorm, with the momentum of ``transformer_options["norm_momentum"]``:
            timm's ``coatnet_bn_*``, whose final norm is its Transformer blocks').
        base_size: only when ``input_shape`` leaves the height or width None: the
            image ``(height, width)`` (or one int) the relative tables are sized for,
            so the weights are those of the model built with
            ``input_shape=(*base_size, 3)`` (default 224 x 224; a known side is
            taken from ``input_shape``). Each call resizes the tables bilinearly
            to the maps it sees, as timm resizes a checkpoint's tables for a new
            image size; an MLP bias (``position_bias="mlp"``) is evaluated for
            them. Not used when both sides are known.

    Returns:
        A ``zoo.FeaturePyramidModel`` (a functional model): its levels P1..P5 are S0..S4.

    Raises:
        ValueError: for a height or width not divisible by 32, an unknown layout,
            ``blocks``/``channels`` without five positive ints, Transformer
            channels not divisible by ``head_dim``, or other bad arguments.

    Examples:

        >>> from keras_posenc.zoo.coatnet import build_coatnet
        >>> model = build_coatnet(
        ...     blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16,
        ...     input_shape=(64, 96, 3), num_classes=10)
        >>> model.output_shape
        (None, 10)
        >>> maps = build_coatnet(
        ...     blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16,
        ...     input_shape=(64, 96, 3), features=True)
        >>> [shape[1:3] for shape in maps.output_shape]
        [(32, 48), (16, 24), (8, 12), (4, 6), (2, 3)]
        >>> any_size = build_coatnet(
        ...     blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16,
        ...     input_shape=(None, None, 3), base_size=64, num_classes=10)
        >>> any_size.get_layer("stage4_block1").relative_bias.size  # tables for 64 x 64
        (2, 2)
    """
    blocks = _positive_ints(blocks, "blocks")
    channels = _positive_ints(channels, "channels")
    stages = parse_layout(layout)
    shape = _input_shape(input_shape)
    base = base_image_size(shape, base_size)
    head_dim = check_int(_WHO, "head_dim", head_dim, 1)
    widths = _stem_widths(stem_channels, blocks[0], channels[0])
    conv_options = _block_options(conv_options, "conv_options", MBConv)
    transformer_options = _block_options(
        transformer_options, "transformer_options", RelativeTransformerBlock2D
    )
    transformer_options["remat"] = check_bool(_WHO, "remat", remat)
    # Checked before building: the translated options, and a shift as an odd block's.
    shift = transformer_arguments(transformer_options, _WHO)[1]
    size = transformer_options.get("partition_size")
    block_shift(_WHO, shift, transformer_options.get("partition"), size, (None, None), 1)
    head_options = check_head(
        _WHO,
        include_top=include_top,
        features=features,
        synchronized=synchronized,
        pooling=pooling,
        num_classes=num_classes,
        drop_path_rate=drop_path_rate,
        pre_logits=pre_logits,
        head=head,
        head_norm=head_norm,
        head_norm_epsilon=head_norm_epsilon,
        classifier_activation=classifier_activation,
        norm_momentum=transformer_options.get("norm_momentum", 0.99),
    )
    for stage, (kind, width) in enumerate(zip(stages, channels[1:]), start=1):
        if kind == "T" and width % head_dim:
            raise ValueError(
                f"{_WHO}: channels of Transformer stage S{stage} must be a multiple of "
                f"head_dim={head_dim}; received channels[{stage}]={width}"
            )

    total_blocks = sum(blocks[1:])
    rates = np.linspace(0.0, float(drop_path_rate), total_blocks).tolist()
    inputs = keras.Input(shape, name="images")
    x = stem(inputs, widths, synchronized, conv_options)
    outputs = [x]
    index = 0
    for stage, kind in enumerate(stages, start=1):
        for block in range(blocks[stage]):
            common = dict(
                strides=2 if block == 0 else 1,
                drop_path_rate=rates[index],
                name=f"stage{stage}_block{block + 1}",
            )
            if kind == "C":
                layer = MBConv(
                    channels[stage],
                    stride_on=stride_on,
                    synchronized=synchronized,
                    **conv_options,
                    **common,
                )
            else:
                layer = _transformer_block(
                    channels[stage], head_dim, transformer_options, stage, block, shape, base,
                    common,
                )  # fmt: skip
            x = layer(x)
            index += 1
        outputs.append(x)

    # Levels P1..P5 (zoo/features.py): the last stem conv and each stage's last block.
    taps = [f"stem_conv{len(widths)}", *(f"stage{s}_block{blocks[s]}" for s in range(1, 5))]
    head = outputs if features else classifier_head(x, channels[-1], **head_options)
    return stage_pyramid(inputs, head, taps, channels, name)


def _transformer_block(
    filters: int,
    head_dim: int,
    options: Mapping,
    stage: int,
    block: int,
    shape: tuple,
    base: tuple | None,
    common: dict,
) -> RelativeTransformerBlock2D:
    """Block ``block`` (from 0) of Transformer stage ``stage``, its options translated
    (``coatnet_options.transformer_arguments``). With ``partition``, the stage's first
    block, which downsamples, attends over its whole map (the layer's windows keep the
    resolution); Swin's ``shift`` goes on every second block (``block_shift``)."""
    arguments, shift = transformer_arguments(options, _WHO)
    stride = 2 ** (stage + 1)
    known = base or shape[:2]
    grid = tuple(None if side is None else side // stride for side in known)
    partition, size = arguments.get("partition"), arguments.get("partition_size")
    shift = block_shift(_WHO, shift, partition, size, grid, block)
    windowed = partition is not None and common["strides"] == 1
    if not windowed:
        arguments.pop("partition", None)
        arguments.pop("partition_size", None)
    if shift is not None:
        arguments["shift"] = shift
    sized = base is not None and not windowed and arguments.get("position_bias", "table")
    # Unknown sizes: the table of the map at `base`, resized at each call.
    return RelativeTransformerBlock2D(
        filters, head_dim=head_dim, bias_size=grid if sized else None, **arguments, **common
    )


def check_head(
    who: str,
    *,
    include_top: Any,
    features: Any,
    synchronized: Any,
    pooling: Any,
    num_classes: Any,
    drop_path_rate: Any,
    pre_logits: Any,
    head: Any,
    head_norm: Any,
    head_norm_epsilon: Any,
    classifier_activation: Any,
    norm_momentum: float,
) -> dict[str, Any]:
    """The checked arguments of :func:`classifier_head` (and the flags every builder of
    this family has), shared by :func:`build_coatnet` and ``zoo.maxvit.build_maxvit``."""
    if pooling not in POOLINGS:
        raise ValueError(
            f"{who}: `pooling` must be one of {POOLINGS}; received pooling={pooling!r}"
        )
    for flag_name, flag in (
        ("include_top", include_top),
        ("features", features),
        ("synchronized", synchronized),
        ("pre_logits", pre_logits),
    ):
        check_bool(who, flag_name, flag)
    backend.check_synchronized_batch_norm(who, synchronized)
    if include_top and not features:
        num_classes = check_int(who, "num_classes", num_classes, 1)
        if pooling is None:
            raise ValueError(
                f"{who}: `pooling` must be 'avg' or 'max' when include_top=True; "
                "received pooling=None"
            )
    check_rate(who, "drop_path_rate", drop_path_rate)
    if head not in HEADS:
        raise ValueError(f"{who}: `head` must be one of {HEADS}; received head={head!r}")
    if head_norm not in HEAD_NORMS:
        raise ValueError(
            f"{who}: `head_norm` must be one of {HEAD_NORMS}; received head_norm={head_norm!r}"
        )
    return {
        "include_top": include_top,
        "pooling": pooling,
        "num_classes": num_classes,
        "pre_logits": pre_logits,
        "head": head,
        "head_norm": head_norm,
        "head_norm_epsilon": check_positive_number(who, "head_norm_epsilon", head_norm_epsilon),
        "head_norm_momentum": norm_momentum,
        "classifier_activation": classifier_activation,
    }


def classifier_head(
    x: Any,
    width: int,
    *,
    include_top: bool,
    pooling: str | None,
    num_classes: int,
    pre_logits: bool,
    head: str,
    head_norm: str,
    head_norm_epsilon: float,
    head_norm_momentum: float,
    classifier_activation: str | None,
) -> Any:
    """The global pool, the norm (before the pool with ``head="norm_pool"``), an optional
    ``tanh`` pre-logits layer ``width`` wide and the classifier (with ``include_top``)."""
    if head_norm == "batch":  # timm's coatnet_bn: the Transformer blocks' norm
        norm = keras.layers.BatchNormalization(
            epsilon=head_norm_epsilon, momentum=head_norm_momentum, name="head_norm"
        )
    else:
        norm = keras.layers.LayerNormalization(epsilon=head_norm_epsilon, name="head_norm")
    norm_first = include_top and head == "norm_pool"
    if norm_first:
        x = norm(x)
    if pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="pool")(x)
    if include_top:
        if not norm_first:
            x = norm(x)
        if pre_logits:
            x = keras.layers.Dense(width, activation="tanh", name="pre_logits")(x)
        x = keras.layers.Dense(num_classes, activation=classifier_activation, name="predictions")(x)
    return x


# --------------------------------------------------------------------------- configurations


def check_stages(config: Any) -> None:
    """The checks a CoAtNet or MaxViT configuration makes alone: five-stage ``blocks`` and
    ``channels``, ``input_shape``, ``head_dim`` and the block options (stored normalised)."""
    who = type(config).__name__
    values = {
        "blocks": _positive_ints(config.blocks, "blocks", who),
        "channels": _positive_ints(config.channels, "channels", who),
        "input_shape": _input_shape(config.input_shape, who),
        "head_dim": check_int(who, "head_dim", config.head_dim, 1),
        "conv_options": ConvBlockConfig.of(config.conv_options, who, "conv_options"),
        "transformer_options": TransformerBlockConfig.of(
            config.transformer_options, who, "transformer_options"
        ),
    }
    for field, value in values.items():
        object.__setattr__(config, field, value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CoAtNetConfig(ZooConfig):
    """A named CoAtNet configuration: :func:`build_coatnet`'s arguments (its docstring
    says what each does), with its defaults.

    Checked when made (``blocks``, ``channels``, ``input_shape``, ``head_dim``, ``layout``
    and the block options' names), the rest when built.
    """

    # Architecture: blocks and widths per stage S0..S4, the block types of S1..S4.
    blocks: tuple[int, ...]
    channels: tuple[int, ...]
    layout: str = "C-C-T-T"
    stem_channels: tuple[int, ...] | None = None
    head_dim: int = 32
    stride_on: str = "expand"
    # Options of every MBConv and every Transformer block.
    conv_options: ConvBlockConfig = ConvBlockConfig()
    transformer_options: TransformerBlockConfig = TransformerBlockConfig()
    # Inputs: the image size (None sides: any size, tables sized for `base_size`).
    input_shape: tuple[int | None, int | None, int] = (224, 224, 3)
    base_size: int | tuple[int, int] | None = None
    # The head.
    include_top: bool = True
    num_classes: int = 1000
    pooling: str | None = "avg"
    features: bool = False
    pre_logits: bool = False
    head: str = "pool_norm"
    head_norm_epsilon: float = 1e-5
    head_norm: str = "layer"
    classifier_activation: str | None = None
    # Training and the model.
    drop_path_rate: float = 0.0
    remat: bool = False
    synchronized: bool = False
    name: str = "coatnet"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_stages(self)
        parse_layout(self.layout, type(self).__name__)


_PAPER = [
    CoAtNetConfig(zoo_name="coatnet_0", name="coatnet_0", pre_logits=True,
                  blocks=(2, 2, 3, 5, 2), channels=(64, 96, 192, 384, 768)),
    CoAtNetConfig(zoo_name="coatnet_1", name="coatnet_1", pre_logits=True,
                  blocks=(2, 2, 6, 14, 2), channels=(64, 96, 192, 384, 768)),
    CoAtNetConfig(zoo_name="coatnet_2", name="coatnet_2", pre_logits=True,
                  blocks=(2, 2, 6, 14, 2), channels=(128, 128, 256, 512, 1024)),
    CoAtNetConfig(zoo_name="coatnet_3", name="coatnet_3", pre_logits=True,
                  blocks=(2, 2, 6, 14, 2), channels=(192, 192, 384, 768, 1536)),
    CoAtNetConfig(zoo_name="coatnet_4", name="coatnet_4", pre_logits=True,
                  blocks=(2, 2, 12, 28, 2), channels=(192, 192, 384, 768, 1536)),
]  # fmt: skip
PAPER_PARAMETERS = {"coatnet_0": 25_000_000, "coatnet_1": 42_000_000, "coatnet_2": 75_000_000,
                    "coatnet_3": 168_000_000, "coatnet_4": 275_000_000}  # fmt: skip

# timm's CoAtNet variants (Wightman, timm's maxxvit.py), trained before the official code was
# out and differing from the paper in the ways its `_rw_coat_cfg` / `_rw_max_cfg` list: the
# options shared by all (`_RW_CONV`, `_RW_TRANSFORMER`, `_rw`), then what each changes.
_RW_CONV = ConvBlockConfig(
    activation="silu", pre_activation=True, pool="avg", expand_from="input", se_from="hidden",
    se_activation="relu", se_position="before_norm", output_bias=False, padding="symmetric",
    norm_epsilon=1e-5, norm_momentum=0.9,
)  # fmt: skip
_RW_TRANSFORMER = TransformerBlockConfig(
    pool="avg", attention_width="input", shortcut_bias=False, norm_epsilon=1e-6
)
_SE_AFTER = dataclasses.replace(_RW_CONV, se_activation="silu", se_position="after_activation")
_NANO_CONV = dataclasses.replace(_SE_AFTER, pre_activation=False, output_bias=True)
_SHORTCUT_BIAS = dataclasses.replace(_RW_TRANSFORMER, shortcut_bias=True)
_LAYER_SCALE = dataclasses.replace(_SHORTCUT_BIAS, layer_scale=1e-6)
# timm's RelPosMlp ("cr" mode): an MLP 2 -> 512 -> heads, dropout 0.125 after its ReLU.
_MLP = {"position_bias": "mlp", "position_bias_dim": 512, "position_bias_dropout": 0.125}
_MLP_384 = {**_MLP, "position_bias_dim": 384}
_RW_CONFIG = CoAtNetConfig(
    blocks=(2, 2, 6, 14, 2), channels=(64, 96, 192, 384, 768), stem_channels=(32, 64),
    stride_on="depthwise", conv_options=_RW_CONV, transformer_options=_RW_TRANSFORMER,
    head="norm_pool", head_norm_epsilon=1e-6,
)  # fmt: skip
_NANO = {"blocks": (2, 3, 4, 6, 3), "channels": (64, 64, 128, 256, 512)}
_SIZE_0 = {"blocks": (2, 2, 3, 7, 2)}
_SIZE_2 = {"channels": (128, 128, 256, 512, 1024), "stem_channels": (64, 128)}
_SIZE_3 = {"channels": (192, 192, 384, 768, 1536), "stem_channels": (96, 192)}


def _rw(name: str, **fields: Any) -> CoAtNetConfig:
    """timm's variant ``name``: the shared `_RW_CONFIG` with ``fields``."""
    return dataclasses.replace(_RW_CONFIG, zoo_name=name, name=name, **fields)


_TIMM = [
    _rw("coatnet_nano_rw_224", **_NANO, stride_on="pool", conv_options=_NANO_CONV,
        transformer_options=_SHORTCUT_BIAS),
    _rw("coatnet_0_rw_224", **_SIZE_0, stride_on="pool"),
    _rw("coatnet_1_rw_224"),
    _rw("coatnet_2_rw_224", **_SIZE_2, conv_options=_SE_AFTER,
        transformer_options=_SHORTCUT_BIAS),
    _rw("coatnet_3_rw_224", **_SIZE_3, conv_options=_SE_AFTER, transformer_options=_LAYER_SCALE),
    # timm's experimental variants: BatchNorm in the Transformer blocks (and as the final
    # norm), or an MLP of the log-scaled offsets as the relative bias (`_MLP`).
    _rw("coatnet_bn_0_rw_224", **_SIZE_0, head_norm="batch",
        transformer_options=dataclasses.replace(_RW_TRANSFORMER, norm="batch",
                                                norm_momentum=0.9)),
    _rw("coatnet_rmlp_nano_rw_224", **_NANO, conv_options=_NANO_CONV,
        transformer_options=dataclasses.replace(_SHORTCUT_BIAS, **_MLP_384)),
    _rw("coatnet_rmlp_0_rw_224", **_SIZE_0,
        conv_options=dataclasses.replace(_RW_CONV, se_position="after_activation"),
        transformer_options=dataclasses.replace(_SHORTCUT_BIAS, **_MLP)),
    # timm's pool_type="max" (3 x 3) on the shortcuts and before the attention, its
    # default 2 x 2 average pool before the MBConv's expansion.
    _rw("coatnet_rmlp_1_rw_224", stride_on="pool",
        conv_options=dataclasses.replace(_RW_CONV, pool="max3", stride_pool="avg"),
        transformer_options=dataclasses.replace(_RW_TRANSFORMER, pool="max3", **_MLP_384)),
    _rw("coatnet_rmlp_1_rw2_224",
        conv_options=dataclasses.replace(_RW_CONV, se_position="after_activation"),
        transformer_options=dataclasses.replace(_SHORTCUT_BIAS, **_MLP)),
    _rw("coatnet_rmlp_2_rw_224", **_SIZE_2, conv_options=_SE_AFTER,
        transformer_options=dataclasses.replace(_LAYER_SCALE, **_MLP)),
    _rw("coatnet_rmlp_2_rw_384", **_SIZE_2, conv_options=_SE_AFTER, input_shape=(384, 384, 3),
        transformer_options=dataclasses.replace(_LAYER_SCALE, **_MLP)),
    _rw("coatnet_rmlp_3_rw_224", **_SIZE_3, conv_options=_SE_AFTER,
        transformer_options=dataclasses.replace(_LAYER_SCALE, **_MLP)),
]  # fmt: skip
# timm's `sum(p.numel() for p in model.parameters())` with 1000 classes.
TIMM_PARAMETERS = {
    "coatnet_nano_rw_224": 15_141_244, "coatnet_0_rw_224": 27_435_562,
    "coatnet_1_rw_224": 41_721_502, "coatnet_2_rw_224": 73_868_400,
    "coatnet_3_rw_224": 165_173_428, "coatnet_bn_0_rw_224": 27_435_562,
    "coatnet_rmlp_nano_rw_224": 15_145_116, "coatnet_rmlp_0_rw_224": 27_446_074,
    "coatnet_rmlp_1_rw_224": 41_691_982, "coatnet_rmlp_1_rw2_224": 41_724_622,
    "coatnet_rmlp_2_rw_224": 73_881_264, "coatnet_rmlp_2_rw_384": 73_881_264,
    "coatnet_rmlp_3_rw_224": 165_152_788,
}  # fmt: skip

#: Every registered CoAtNet: zoo name -> :class:`CoAtNetConfig`.
CONFIGS: dict[str, CoAtNetConfig] = by_name([*_PAPER, *_TIMM])
#: timm's names (its ``maxxvit.py`` model names) -> our configuration of that model.
TIMM_CONFIGS: dict[str, CoAtNetConfig] = by_name(_TIMM)


for _config in _PAPER:
    _paper = PAPER_PARAMETERS[_config.zoo_name]
    register_model(
        _config.zoo_name,
        build_coatnet,
        family="coatnet",
        config=_config,
        description=(
            f"CoAtNet-{_config.zoo_name[-1]} (C-C-T-T, {_paper // 1_000_000}M parameters in "
            "the paper), 224 x 224, 1000 classes"
        ),
        paper_parameters=_paper,
        reference=REFERENCE,
    )
for _name, _config in TIMM_CONFIGS.items():
    register_model(
        _name,
        build_coatnet,
        family="coatnet",
        config=_config,
        description=(
            f"timm's {_name} (C-C-T-T, {TIMM_PARAMETERS[_name] / 1e6:.1f}M parameters in "
            f"timm), {_name[-3:]} x {_name[-3:]}, 1000 classes; loads timm's weights "
            "(convert.from_timm_coatnet)"
        ),
        paper_parameters=None,
        reference=TIMM_REFERENCE,
    )
