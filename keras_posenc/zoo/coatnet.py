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

The model card (zoo/coatnet/README.md in the repository) has the details.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.layers.activations import exact_gelu
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.zoo.registry import register_model

_WHO = "build_coatnet"
NUM_STAGES = 5
LAYOUTS = ("C-C-C-C", "C-C-C-T", "C-C-T-T", "C-T-T-T")
POOLINGS = ("avg", "max", None)
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


# --------------------------------------------------------------------------- validation


def _positive_ints(value: Any, argument: str) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        items = None
    valid = items is not None and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in items
    )
    if not valid:
        raise ValueError(
            f"{_WHO}: `{argument}` must be a sequence of {NUM_STAGES} positive ints "
            f"(stages S0..S4); received {argument}={value!r}"
        )
    if len(items) != NUM_STAGES:
        raise ValueError(
            f"{_WHO}: `{argument}` must have {NUM_STAGES} entries, one per stage S0..S4; "
            f"received {len(items)}: {argument}={value!r}"
        )
    return tuple(int(v) for v in items)


def _positive_int(value: Any, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{_WHO}: `{argument}` must be a positive int; received {value!r}")
    return int(value)


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


def _input_shape(value: Any) -> tuple[int, int, int]:
    try:
        shape = tuple(value)
    except TypeError:
        shape = ()
    ints = len(shape) == 3 and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in shape
    )
    if not ints:
        raise ValueError(
            f"{_WHO}: `input_shape` must be (height, width, channels) of positive ints "
            f"(the relative position tables are sized from it); received {value!r}"
        )
    height, width, _ = shape
    if height % 32 or width % 32:
        raise ValueError(
            f"{_WHO}: the input height and width must be divisible by 32 (the total "
            f"downsampling of S0..S4); received input_shape={value!r}"
        )
    return tuple(int(v) for v in shape)


# --------------------------------------------------------------------------- the model


def _stem(x: Any, blocks: int, filters: int, synchronized: bool) -> Any:
    """S0: ``blocks`` 3 x 3 convs, the first with stride 2, BatchNorm + GELU between them."""
    for index in range(blocks):
        if index:
            x = keras.layers.BatchNormalization(
                synchronized=synchronized, name=f"stem_norm{index}"
            )(x)
            x = keras.layers.Activation(exact_gelu, name=f"stem_gelu{index}")(x)
        x = keras.layers.Conv2D(
            filters,
            3,
            strides=2 if index == 0 else 1,
            padding="same",
            use_bias=False,
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
            CoAtNet expects pixels scaled to [-1, 1]).
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
    """
    blocks = _positive_ints(blocks, "blocks")
    channels = _positive_ints(channels, "channels")
    stages = parse_layout(layout)
    shape = _input_shape(input_shape)
    if pooling not in POOLINGS:
        raise ValueError(
            f"{_WHO}: `pooling` must be one of {POOLINGS}; received pooling={pooling!r}"
        )
    for flag_name, flag in (
        ("include_top", include_top),
        ("features", features),
        ("synchronized", synchronized),
        ("pre_logits", pre_logits),
    ):
        if not isinstance(flag, bool):
            raise TypeError(f"{_WHO}: `{flag_name}` must be a bool; received {type(flag).__name__}")
    if synchronized and keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"{_WHO}: `synchronized=True` needs the TensorFlow backend (Keras' "
            "BatchNormalization synchronises replicas only there); received "
            f"synchronized=True on the {keras.backend.backend()} backend"
        )
    head_dim = _positive_int(head_dim, "head_dim")
    if include_top and not features:
        num_classes = _positive_int(num_classes, "num_classes")
        if pooling is None:
            raise ValueError(
                f"{_WHO}: `pooling` must be 'avg' or 'max' when include_top=True; "
                "received pooling=None"
            )
    if (
        isinstance(drop_path_rate, bool)
        or not isinstance(drop_path_rate, int | float)
        or not (0 <= drop_path_rate < 1)
    ):
        raise ValueError(
            f"{_WHO}: `drop_path_rate` must be a float in [0, 1); received {drop_path_rate!r}"
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
    x = _stem(inputs, blocks[0], channels[0], synchronized)
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
                    channels[stage], stride_on=stride_on, synchronized=synchronized, **common
                )
            else:
                layer = RelativeTransformerBlock2D(channels[stage], head_dim=head_dim, **common)
            x = layer(x)
            index += 1
        outputs.append(x)

    if features:
        return keras.Model(inputs, outputs, name=name)
    if pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="pool")(x)
    if include_top:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="head_norm")(x)
        if pre_logits:
            x = keras.layers.Dense(channels[-1], activation="tanh", name="pre_logits")(x)
        x = keras.layers.Dense(num_classes, activation=classifier_activation, name="predictions")(x)
    return keras.Model(inputs, x, name=name)


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
