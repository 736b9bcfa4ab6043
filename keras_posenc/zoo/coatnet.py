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
``RelPosMlp``): the same builder with the options they need (:data:`RW_CONFIGS`,
:func:`rw_config`), parameter counts equal to timm's;
``keras_posenc.convert.from_timm_coatnet`` loads their checkpoints.

The model card (zoo/coatnet/README.md in the repository) has the details.
"""

from __future__ import annotations

import inspect
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
)
from keras_posenc.layers.activations import get_activation
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.layers.relative_position_2d import grid_size
from keras_posenc.zoo.adapt import ZooFunctional
from keras_posenc.zoo.registry import register_model

_WHO = "build_coatnet"
NUM_STAGES = 5
LAYOUTS = ("C-C-C-C", "C-C-C-T", "C-C-T-T", "C-T-T-T")
POOLINGS = ("avg", "max", None)
HEADS = ("pool_norm", "norm_pool")
HEAD_NORMS = ("layer", "batch")
# Block arguments build_coatnet sets itself (not allowed in conv/transformer_options).
_SET_BY_BUILDER = frozenset(
    {"self", "kwargs", "filters", "strides", "drop_path_rate", "name", "stride_on",
     "synchronized", "head_dim", "seed", "dtype", "bias_size"}
)  # fmt: skip
REFERENCE = (
    "Dai et al. 2021, CoAtNet: Marrying Convolution and Attention for All Data Sizes "
    "(arXiv:2106.04803)"
)

CONFIGS = {
    "coatnet_0": ((2, 2, 3, 5, 2), (64, 96, 192, 384, 768), 25_000_000),
    "coatnet_1": ((2, 2, 6, 14, 2), (64, 96, 192, 384, 768), 42_000_000),
    "coatnet_2": ((2, 2, 6, 14, 2), (128, 128, 256, 512, 1024), 75_000_000),
    "coatnet_3": ((2, 2, 6, 14, 2), (192, 192, 384, 768, 1536), 168_000_000),
    "coatnet_4": ((2, 2, 12, 28, 2), (192, 192, 384, 768, 1536), 275_000_000),
}

# timm's CoAtNet variants (Wightman, timm's maxxvit.py), trained before the official code was
# out and differing from the paper in the ways its `_rw_coat_cfg` / `_rw_max_cfg` list. Each
# entry: blocks, channels, stem widths, and what differs from the shared `_rw` options below;
# the counts are timm's `sum(p.numel() for p in model.parameters())` with 1000 classes.
_RW_CONV = {
    "activation": "silu",
    "pre_activation": True,
    "pool": "avg",
    "expand_from": "input",
    "se_from": "hidden",
    "se_activation": "relu",
    "se_position": "before_norm",
    "output_bias": False,
    "padding": "symmetric",
    "norm_epsilon": 1e-5,
    "norm_momentum": 0.9,
}
_RW_TRANSFORMER = {
    "pool": "avg",
    "attention_width": "input",
    "shortcut_bias": False,
    "norm_epsilon": 1e-6,
}
# timm's RelPosMlp ("cr" mode): an MLP 2 -> 512 -> heads, dropout 0.125 after its ReLU.
_MLP_BIAS = {"position_bias": "mlp", "position_bias_dim": 512, "position_bias_dropout": 0.125}
RW_CONFIGS = {
    "coatnet_nano_rw_224": (
        (2, 3, 4, 6, 3), (64, 64, 128, 256, 512), (32, 64), 15_141_244, "pool",
        {"pre_activation": False, "se_activation": "silu", "se_position": "after_activation",
         "output_bias": True},
        {"shortcut_bias": True},
    ),
    "coatnet_0_rw_224": (
        (2, 2, 3, 7, 2), (64, 96, 192, 384, 768), (32, 64), 27_435_562, "pool", {}, {},
    ),
    "coatnet_1_rw_224": (
        (2, 2, 6, 14, 2), (64, 96, 192, 384, 768), (32, 64), 41_721_502, "depthwise", {}, {},
    ),
    "coatnet_2_rw_224": (
        (2, 2, 6, 14, 2), (128, 128, 256, 512, 1024), (64, 128), 73_868_400, "depthwise",
        {"se_activation": "silu", "se_position": "after_activation"},
        {"shortcut_bias": True},
    ),
    "coatnet_3_rw_224": (
        (2, 2, 6, 14, 2), (192, 192, 384, 768, 1536), (96, 192), 165_173_428, "depthwise",
        {"se_activation": "silu", "se_position": "after_activation"},
        {"shortcut_bias": True, "layer_scale": 1e-6},
    ),
    # timm's experimental variants (its "_rw" options plus BatchNorm in the Transformer
    # blocks, or an MLP of the log-scaled offsets as the relative bias, `_MLP_BIAS`).
    "coatnet_bn_0_rw_224": (
        (2, 2, 3, 7, 2), (64, 96, 192, 384, 768), (32, 64), 27_435_562, "depthwise", {},
        {"norm": "batch", "norm_momentum": 0.9},
    ),
    "coatnet_rmlp_nano_rw_224": (
        (2, 3, 4, 6, 3), (64, 64, 128, 256, 512), (32, 64), 15_145_116, "depthwise",
        {"pre_activation": False, "se_activation": "silu", "se_position": "after_activation",
         "output_bias": True},
        {"shortcut_bias": True, **_MLP_BIAS, "position_bias_dim": 384},
    ),
    "coatnet_rmlp_0_rw_224": (
        (2, 2, 3, 7, 2), (64, 96, 192, 384, 768), (32, 64), 27_446_074, "depthwise",
        {"se_position": "after_activation"},
        {"shortcut_bias": True, **_MLP_BIAS},
    ),
    "coatnet_rmlp_1_rw_224": (
        (2, 2, 6, 14, 2), (64, 96, 192, 384, 768), (32, 64), 41_691_982, "pool",
        # timm's pool_type="max" (3 x 3) on the shortcuts and before the attention, its
        # default 2 x 2 average pool before the MBConv's expansion.
        {"pool": "max3", "stride_pool": "avg"},
        {"pool": "max3", **_MLP_BIAS, "position_bias_dim": 384},
    ),
    "coatnet_rmlp_1_rw2_224": (
        (2, 2, 6, 14, 2), (64, 96, 192, 384, 768), (32, 64), 41_724_622, "depthwise",
        {"se_position": "after_activation"},
        {"shortcut_bias": True, **_MLP_BIAS},
    ),
    "coatnet_rmlp_2_rw_224": (
        (2, 2, 6, 14, 2), (128, 128, 256, 512, 1024), (64, 128), 73_881_264, "depthwise",
        {"se_activation": "silu", "se_position": "after_activation"},
        {"shortcut_bias": True, "layer_scale": 1e-6, **_MLP_BIAS},
    ),
    "coatnet_rmlp_2_rw_384": (
        (2, 2, 6, 14, 2), (128, 128, 256, 512, 1024), (64, 128), 73_881_264, "depthwise",
        {"se_activation": "silu", "se_position": "after_activation"},
        {"shortcut_bias": True, "layer_scale": 1e-6, **_MLP_BIAS},
    ),
    "coatnet_rmlp_3_rw_224": (
        (2, 2, 6, 14, 2), (192, 192, 384, 768, 1536), (96, 192), 165_152_788, "depthwise",
        {"se_activation": "silu", "se_position": "after_activation"},
        {"shortcut_bias": True, "layer_scale": 1e-6, **_MLP_BIAS},
    ),
}  # fmt: skip
# What else differs per variant, as build_coatnet arguments: coatnet_bn's final norm is its
# Transformer blocks' (BatchNorm), and the _384 variant is built for its 384 x 384 images.
_RW_OTHER = {
    "coatnet_bn_0_rw_224": {"head_norm": "batch"},
    "coatnet_rmlp_2_rw_384": {"input_shape": (384, 384, 3)},
}
TIMM_REFERENCE = "Wightman, timm (PyTorch Image Models), maxxvit.py, after Dai et al. 2021"


def rw_config(name: str) -> dict[str, Any]:
    """The :func:`build_coatnet` arguments of timm's CoAtNet variant ``name``.

    Raises:
        ValueError: for a name that is not one of :data:`RW_CONFIGS`.

    Examples:

        >>> from keras_posenc.zoo.coatnet import rw_config
        >>> config = rw_config("coatnet_0_rw_224")
        >>> config["blocks"], config["stem_channels"], config["stride_on"]
        ((2, 2, 3, 7, 2), (32, 64), 'pool')
    """
    if name not in RW_CONFIGS:
        raise ValueError(
            f"rw_config: unknown timm CoAtNet variant {name!r}; expected one of "
            f"{sorted(RW_CONFIGS)}"
        )
    blocks, channels, stem, _, stride_on, conv, transformer = RW_CONFIGS[name]
    return {
        "blocks": blocks,
        "channels": channels,
        "stem_channels": stem,
        "stride_on": stride_on,
        "conv_options": {**_RW_CONV, **conv},
        "transformer_options": {**_RW_TRANSFORMER, **transformer},
        "head": "norm_pool",
        "head_norm_epsilon": 1e-6,
        "name": name,
        **_RW_OTHER.get(name, {}),
    }


# --------------------------------------------------------------------------- validation


def _positive_ints(value: Any, argument: str, who: str = _WHO) -> tuple[int, ...]:
    return check_ints(who, argument, value, NUM_STAGES, what=", one per stage S0..S4")


def parse_layout(layout: Any) -> tuple[str, ...]:
    """The block type (``"C"`` or ``"T"``) of stages S1..S4 from a layout like ``"C-C-T-T"``.

    Raises:
        ValueError: for anything but four ``C``/``T`` letters joined by ``-``.
    """
    stages = tuple(layout.upper().split("-")) if isinstance(layout, str) else ()
    if len(stages) != NUM_STAGES - 1 or any(s not in ("C", "T") for s in stages):
        raise ValueError(
            f"{_WHO}: unknown `layout` {layout!r}; expected the block types of stages "
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


def _block_options(
    value: Any, argument: str, layer: type, who: str = _WHO, set_by_builder: frozenset = frozenset()
) -> dict:
    """``value`` as a dict of extra keyword arguments of ``layer``, checked by name.

    ``set_by_builder``: more arguments the builder sets itself (MaxViT's partitions).
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{who}: `{argument}` must be a dict of {layer.__name__} arguments; "
            f"received {type(value).__name__}"
        )
    allowed = set(inspect.signature(layer.__init__).parameters) - _SET_BY_BUILDER - set_by_builder
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(
            f"{who}: `{argument}` has keys that are not {layer.__name__} options: "
            f"{unknown}; expected some of {sorted(allowed)}"
        )
    return dict(value)


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
            ``norm_epsilon``).
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
        The ``keras.Model``.

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
                # Unknown sizes: the table of the map at `base`, resized at each call.
                stride = 2 ** (stage + 1)
                layer = RelativeTransformerBlock2D(
                    channels[stage],
                    head_dim=head_dim,
                    bias_size=None if base is None else (base[0] // stride, base[1] // stride),
                    **transformer_options,
                    **common,
                )
            x = layer(x)
            index += 1
        outputs.append(x)

    if features:
        return ZooFunctional(inputs, outputs, name=name)
    return ZooFunctional(inputs, classifier_head(x, channels[-1], **head_options), name=name)


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


for _name, (_blocks, _channels, _paper) in CONFIGS.items():
    register_model(
        _name,
        build_coatnet,
        family="coatnet",
        config={
            "blocks": _blocks,
            "channels": _channels,
            "pre_logits": True,
            "name": _name,
        },
        description=(
            f"CoAtNet-{_name[-1]} (C-C-T-T, {_paper // 1_000_000}M parameters in the paper), "
            "224 x 224, 1000 classes"
        ),
        paper_parameters=_paper,
        reference=REFERENCE,
    )


for _name, (*_, _timm_count, _stride_on, _conv, _transformer) in RW_CONFIGS.items():
    register_model(
        _name,
        build_coatnet,
        family="coatnet",
        config=rw_config(_name),
        description=(
            f"timm's {_name} (C-C-T-T, {_timm_count / 1e6:.1f}M parameters in timm), "
            f"{_name[-3:]} x {_name[-3:]}, 1000 classes; loads timm's weights "
            "(convert.from_timm_coatnet)"
        ),
        paper_parameters=None,
        reference=TIMM_REFERENCE,
    )
