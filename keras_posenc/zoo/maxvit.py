"""MaxViT (Tu et al. 2022): MBConv, block attention and grid attention in every block.

Five stages: S0, a stem of two 3 x 3 convolutions (the first with stride 2); S1..S4,
each a stack of MaxViT blocks whose first block halves the resolution. A MaxViT block
is three pre-normalised residual layers of CoAtNet's library blocks
(``keras_posenc.layers.coatnet``): an :class:`MBConv` (which downsamples), then a
:class:`RelativeTransformerBlock2D` with ``partition="block"`` (attention within
non-overlapping windows of adjacent cells: local) and one with ``partition="grid"``
(attention within a grid of cells spread over the whole map: dilated, global), both
with a learned relative position bias over a window. Windows and grids are
``input / 32`` cells a side (7 x 7 at 224), as the paper's. The head is a global
pool, LayerNorm, a ``tanh`` pre-logits layer as wide as S4 and the classifier.

Registered configurations at 224 x 224 with 1000 classes, the paper's MaxViT-T/S/B/L
(Table 1: blocks and channels of S0..S4) with the official code's choices (GELU's tanh
approximation, TF's padding, BatchNorm epsilon 1e-3, biases on the stem convs), so the
official weights' timm port loads into them. Parameters are trainable ones:

    name          blocks S0..S4     channels S0..S4            ours          paper
    maxvit_t      2, 2, 2, 5, 2     64, 64, 128, 256, 512      30,916,528    31M
    maxvit_s      2, 2, 2, 5, 2     64, 96, 192, 384, 768      68,927,956    69M
    maxvit_b      2, 2, 6, 14, 2    64, 96, 192, 384, 768      119,467,708   120M
    maxvit_l      2, 2, 6, 14, 2    128, 128, 256, 512, 1024   211,785,560   212M

timm's MaxViTs are registered too: ``maxvit_tiny_tf_224`` .. ``maxvit_xlarge_tf_512`` (the
official weights' port at 224, 384 and 512: the paper's models with PyTorch's BatchNorm
momentum), timm's own ``maxvit_nano_rw_256`` and ``maxvit_tiny_rw_224`` and its
``maxvit_rmlp_*`` (an MLP relative bias), with timm's parameter counts;
``keras_posenc.convert.from_timm_maxvit`` loads their checkpoints.

Every named configuration is a :class:`MaxViTConfig` (:func:`build_maxvit`'s arguments,
the block options nested as CoAtNet's): :data:`CONFIGS` maps every registered name to
its configuration, :data:`TIMM_CONFIGS` timm's names::

    >>> from keras_posenc.zoo.maxvit import CONFIGS, TIMM_CONFIGS
    >>> config = TIMM_CONFIGS["maxvit_tiny_tf_224"]  # the paper's maxvit_t, timm's momentum
    >>> config.channels == CONFIGS["maxvit_t"].channels, config.conv_options.norm_momentum
    (True, 0.9)

The model card (zoo/maxvit/README.md in the repository) has the details.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers._checks import check_bool, check_int, grid_size
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.zoo.coatnet import (
    ConvBlockConfig,
    TransformerBlockConfig,
    _block_options,
    _input_shape,
    _positive_ints,
    _stem_widths,
    base_image_size,
    block_shift,
    check_head,
    check_stages,
    classifier_head,
    stem,
    transformer_arguments,
)
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.features import stage_pyramid
from keras_posenc.zoo.registry import register_model

_WHO = "build_maxvit"
# Arguments of the attention blocks that build_maxvit sets itself, per layer.
_PARTITIONING = frozenset({"partition", "partition_size"})
REFERENCE = "Tu et al. 2022, MaxViT: Multi-Axis Vision Transformer (arXiv:2204.01697)"
TIMM_REFERENCE = "Wightman, timm (PyTorch Image Models), maxxvit.py, after Tu et al. 2022"

#: The official code's block options (google-research/maxvit, as timm's ``_tf_cfg`` ports
#: them): MBConv expanded 4x from and squeezed to 1/4 of its output width with a SiLU
#: squeeze-excitation, the stride on the depthwise conv, average-pooled shortcuts,
#: TF's "same" padding; LayerNorm epsilon 1e-5 in the attention blocks.
OFFICIAL_CONV = ConvBlockConfig(
    activation="gelu_tanh", se_activation="silu", pool="avg", norm_epsilon=1e-3,
    norm_momentum=0.99,
)  # fmt: skip
OFFICIAL_TRANSFORMER = TransformerBlockConfig(activation="gelu_tanh", norm_epsilon=1e-5, pool="avg")


@keras.saving.register_keras_serializable(package="keras_posenc")
class ImagesToMultiple(keras.layers.Layer):
    """Checks that images fit a model's windows, or zero-pads them to fit.

    The first layer of a MaxViT built for images of any size: its height and width
    must be multiples of ``multiple`` (the stride 32 times the window). With
    ``pad=False`` an image of another size raises a ``ValueError`` (when its size
    is known: eager calls, ``jax.jit``, PyTorch; a graph traced with unknown sizes,
    as exported artifacts are, fails in its reshapes instead); with ``pad=True`` it
    is zero-padded at the bottom and right to the next multiple.

    Args:
        multiple: ``(height, width)`` the sides must be multiples of.
        pad: zero-pad instead of raising.
        owner: who to name in errors (the builder).

    Example:

    >>> import numpy as np
    >>> layer = ImagesToMultiple((32, 32), pad=True)
    >>> tuple(layer(np.ones((1, 40, 64, 3), "float32")).shape)
    (1, 64, 64, 3)
    """

    def __init__(self, multiple: Any, pad: bool = False, owner: str = _WHO, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.multiple = grid_size(multiple, f"ImagesToMultiple '{self.name}'", "multiple")
        self.pad = check_bool(f"ImagesToMultiple '{self.name}'", "pad", pad)
        self.owner = owner

    def call(self, images: Any) -> Any:
        sides = images.shape[1:3]
        if not self.pad:
            for axis, (side, multiple) in enumerate(zip(sides, self.multiple)):
                if side is not None and side % multiple:
                    raise ValueError(
                        f"{self.owner}: the images' {('height', 'width')[axis]} must be a "
                        f"multiple of {multiple} (the stride 32 times partition_size); "
                        f"received images of shape {tuple(images.shape)}. Build the model "
                        "with pad_to_multiple=True to zero-pad them instead."
                    )
            return images
        dynamic = ops.shape(images)
        padding = [(0, 0)]
        for axis, multiple in zip((1, 2), self.multiple):
            side = images.shape[axis] if images.shape[axis] is not None else dynamic[axis]
            padding.append((0, (multiple - side % multiple) % multiple))
        return ops.pad(images, padding + [(0, 0)])

    def compute_output_shape(self, input_shape: Any) -> tuple:
        batch, height, width, channels = input_shape
        if self.pad:
            height, width = (
                None if side is None else -(-side // multiple) * multiple
                for side, multiple in zip((height, width), self.multiple)
            )
        return (batch, height, width, channels)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(multiple=list(self.multiple), pad=self.pad, owner=self.owner)
        return config


def _partition_size(value: Any, shape: tuple, base: tuple[int, int] | None) -> tuple[int, int]:
    """The windows' size: ``value``, or the paper's input / 32, checked against S1..S4.

    ``base``: the image size standing in for unknown sides (``base_image_size``).
    """
    height, width = base or shape[:2]
    shape = (height, width, shape[2])
    if value is None:
        size = (height // 32, width // 32)
    else:
        size = grid_size(value, _WHO, "partition_size")
    for stage in range(1, 5):
        stride = 2 ** (stage + 1)
        grid = (height // stride, width // stride)
        if grid[0] % size[0] or grid[1] % size[1]:
            raise ValueError(
                f"{_WHO}: the S{stage} map, {grid[0]} x {grid[1]} for input_shape={shape}, "
                f"cannot be cut into windows of partition_size={size}; each side must be a "
                "multiple of the window's"
            )
    return size


def build_maxvit(
    blocks: Sequence[int],
    channels: Sequence[int],
    input_shape: Sequence[int] = (224, 224, 3),
    include_top: bool = True,
    num_classes: int = 1000,
    pooling: str | None = "avg",
    drop_path_rate: float = 0.0,
    features: bool = False,
    head_dim: int = 32,
    partition_size: int | tuple[int, int] | None = None,
    pre_logits: bool = True,
    stride_on: str = "depthwise",
    synchronized: bool = False,
    classifier_activation: str | None = None,
    name: str = "maxvit",
    stem_channels: Sequence[int] | None = None,
    stem_bias: bool = True,
    conv_options: Mapping[str, Any] | None = None,
    transformer_options: Mapping[str, Any] | None = None,
    head: str = "pool_norm",
    head_norm_epsilon: float = 1e-5,
    base_size: int | tuple[int, int] | None = None,
    pad_to_multiple: bool = False,
    remat: bool = False,
) -> keras.Model:
    """Builds a MaxViT as a functional ``keras.Model``.

    Args:
        blocks: blocks per stage S0..S4 (five positive ints; S0's are the stem convs,
            S1..S4's MaxViT blocks).
        channels: output channels per stage S0..S4 (five positive ints; S1..S4's
            must be multiples of ``head_dim``).
        input_shape: ``(height, width, channels)``; height and width divisible by 32
            (and by 32 times the window size). Inputs are used as given (the official
            models and timm's ``_tf`` ports expect pixels normalised with ImageNet's
            mean and standard deviation; timm's ``_rw`` models too). Height and
            width may be None: the model then takes images whose sides are
            multiples of 32 times the window (``pad_to_multiple``); the windows
            and their tables stay those of ``base_size``.
        include_top: end with the classification head.
        num_classes: classifier width when ``include_top``.
        pooling: ``"avg"`` or ``"max"`` global pooling before the head; without the
            top, ``None`` returns the S4 feature map.
        drop_path_rate: stochastic depth rate of the last block, rising linearly from
            0 over the blocks of S1..S4 (the three layers of a block share it).
        remat: recompute every Transformer block in the backward pass of training
            (Keras' remat: ``RelativeTransformerBlock2D(remat=True)``): less memory, more
            time. Default False.
        features: return the five stage outputs S0..S4 (strides 2, 4, 8, 16, 32)
            instead of the head's output.
        head_dim: channels per attention head (32 in the paper).
        partition_size: the windows of block attention and the grid of grid
            attention, ``(height, width)`` or one int; default the paper's
            ``input / 32`` (7 x 7 at 224, 8 x 8 at 256).
        pre_logits: a ``tanh`` dense layer as wide as S4 before the classifier (the
            official code's head; timm's ``_rw`` models have none).
        stride_on: where the first MBConv of a stage strides: ``"depthwise"`` (the
            official code's), ``"expand"`` or ``"pool"``; see :class:`MBConv`.
        synchronized: synchronised BatchNorm across replicas (TensorFlow backend).
        classifier_activation: activation of the classifier, None for logits.
        name: the model's name.
        stem_channels: widths of the S0 convs, the last equal to ``channels[0]``;
            default all ``channels[0]`` (timm's ``_rw`` stems are ``(32, 64)``).
        stem_bias: biases on the stem convs (the official code's; not timm's ``_rw``).
        conv_options: keyword arguments of every :class:`MBConv` over the official
            code's (:data:`OFFICIAL_CONV`); the stem uses the same activation,
            BatchNorm epsilon/momentum and padding.
        transformer_options: keyword arguments of every attention layer, a
            :class:`RelativeTransformerBlock2D`, over :data:`OFFICIAL_TRANSFORMER`
            (e.g. ``activation``, ``norm_epsilon``, ``position_bias="mlp"``), as
            CoAtNet's: also ``rotary`` with ``position_bias="none"`` or a bias, and
            Swin's ``shift`` (``"half"``) on the block attention of every second
            block of a stage, where the map is longer than a window.
        head: ``"pool_norm"`` (default: pool, then LayerNorm) or ``"norm_pool"``
            (LayerNorm at every position, then the pool: timm's ``_rw`` models).
        head_norm_epsilon: the head LayerNorm's epsilon (default 1e-5).
        base_size: only when ``input_shape`` leaves the height or width None: the
            image ``(height, width)`` (or one int) whose ``/ 32`` is the default
            window (default 224 x 224, 7 x 7 windows; a known side is taken from
            ``input_shape``). Not used when both sides are known.
        pad_to_multiple: zero-pad images at the bottom and right to the next
            multiple of 32 times the window instead of raising a ``ValueError``
            for them (the padded cells then take part in the attention, as in a
            model given the padded image).

    Returns:
        A ``zoo.FeaturePyramidModel`` (a functional model): its levels P1..P5 are S0..S4.

    Raises:
        ValueError: for a height or width not divisible by 32 or by the windows,
            ``blocks``/``channels`` without five positive ints, channels not
            divisible by ``head_dim``, block options the builder sets itself, or
            other bad arguments.

    Examples:

        >>> from keras_posenc.zoo.maxvit import build_maxvit
        >>> model = build_maxvit(
        ...     blocks=(2, 1, 1, 1, 1), channels=(8, 8, 16, 16, 32), head_dim=8,
        ...     input_shape=(64, 96, 3), num_classes=10)
        >>> model.output_shape
        (None, 10)
        >>> model.get_layer("stage1_block1_grid_attention").partition_size
        (2, 3)
        >>> any_size = build_maxvit(
        ...     blocks=(2, 1, 1, 1, 1), channels=(8, 8, 16, 16, 32), head_dim=8,
        ...     input_shape=(None, None, 3), base_size=64, num_classes=10)
        >>> any_size.get_layer("stage1_block1_grid_attention").partition_size
        (2, 2)
    """
    blocks = _positive_ints(blocks, "blocks", _WHO)
    channels = _positive_ints(channels, "channels", _WHO)
    shape = _input_shape(input_shape, _WHO)
    base = base_image_size(shape, base_size, _WHO)
    head_dim = check_int(_WHO, "head_dim", head_dim, 1)
    window = _partition_size(partition_size, shape, base)
    check_bool(_WHO, "pad_to_multiple", pad_to_multiple)
    widths = _stem_widths(stem_channels, blocks[0], channels[0], _WHO)
    conv_options = {
        **OFFICIAL_CONV,
        **_block_options(conv_options, "conv_options", MBConv, _WHO),
    }
    transformer_options = {
        **OFFICIAL_TRANSFORMER,
        **_block_options(
            transformer_options,
            "transformer_options",
            RelativeTransformerBlock2D,
            _WHO,
            set_by_builder=_PARTITIONING,
        ),
    }
    transformer_options["remat"] = check_bool(_WHO, "remat", remat)
    _, shift = transformer_arguments(transformer_options, _WHO)
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
        head_norm="layer",
        head_norm_epsilon=head_norm_epsilon,
        classifier_activation=classifier_activation,
        norm_momentum=0.99,
    )
    if not isinstance(stem_bias, bool):
        raise TypeError(f"{_WHO}: `stem_bias` must be True or False, got {stem_bias!r}.")
    for stage, width in enumerate(channels[1:], start=1):
        if width % head_dim:
            raise ValueError(
                f"{_WHO}: channels of stage S{stage} must be a multiple of "
                f"head_dim={head_dim}; received channels[{stage}]={width}"
            )

    rates = np.linspace(0.0, float(drop_path_rate), sum(blocks[1:])).tolist()
    inputs = keras.Input(shape, name="images")
    x = inputs
    if base is not None or pad_to_multiple:
        # S1..S4 cut their maps into windows: the images' sides must be multiples of
        # the stride of S4 times the window (a known size was checked above).
        multiple = (32 * window[0], 32 * window[1])
        x = ImagesToMultiple(multiple, pad=pad_to_multiple, name="images_to_multiple")(x)
    x = stem(x, widths, synchronized, conv_options, bias=stem_bias)
    outputs = [x]
    index = 0
    for stage in range(1, 5):
        for block in range(blocks[stage]):
            prefix = f"stage{stage}_block{block + 1}"
            x = MBConv(
                channels[stage],
                strides=2 if block == 0 else 1,
                stride_on=stride_on,
                synchronized=synchronized,
                drop_path_rate=rates[index],
                name=f"{prefix}_mbconv",
                **conv_options,
            )(x)
            # Swin's shift on the block attention of every second block (coatnet_options).
            stride = 2 ** (stage + 1)
            grid = tuple(None if side is None else side // stride for side in base or shape[:2])
            shifts = {"block": block_shift(_WHO, shift, "block", window, grid, block)}
            for partition in ("block", "grid"):
                arguments = transformer_arguments(transformer_options, _WHO)[0]
                if shifts.get(partition) is not None:
                    arguments["shift"] = shifts[partition]
                x = RelativeTransformerBlock2D(
                    channels[stage],
                    head_dim=head_dim,
                    partition=partition,
                    partition_size=window,
                    drop_path_rate=rates[index],
                    name=f"{prefix}_{partition}_attention",
                    **arguments,
                )(x)
            index += 1
        outputs.append(x)

    # Levels P1..P5 (zoo/features.py): the last stem conv and each stage's last block.
    taps = [f"stem_conv{len(widths)}"]
    taps += [f"stage{s}_block{blocks[s]}_grid_attention" for s in range(1, 5)]
    head = outputs if features else classifier_head(x, channels[-1], **head_options)
    return stage_pyramid(inputs, head, taps, channels, name)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaxViTConfig(ZooConfig):
    """A named MaxViT configuration: :func:`build_maxvit`'s arguments (its docstring says
    what each does), with its defaults.

    Checked when made (``blocks``, ``channels``, ``input_shape``, ``head_dim`` and the
    block options' names), the rest when built.
    """

    # Architecture: blocks and widths per stage S0..S4, the windows of the attention.
    blocks: tuple[int, ...]
    channels: tuple[int, ...]
    stem_channels: tuple[int, ...] | None = None
    stem_bias: bool = True
    head_dim: int = 32
    partition_size: int | tuple[int, int] | None = None
    stride_on: str = "depthwise"
    # Options of every MBConv and attention block, over the official code's.
    conv_options: ConvBlockConfig = ConvBlockConfig()
    transformer_options: TransformerBlockConfig = TransformerBlockConfig()
    # Inputs: the image size (None sides: any size, windows of `base_size`).
    input_shape: tuple[int | None, int | None, int] = (224, 224, 3)
    base_size: int | tuple[int, int] | None = None
    pad_to_multiple: bool = False
    # The head.
    include_top: bool = True
    num_classes: int = 1000
    pooling: str | None = "avg"
    features: bool = False
    pre_logits: bool = True
    head: str = "pool_norm"
    head_norm_epsilon: float = 1e-5
    classifier_activation: str | None = None
    # Training and the model.
    drop_path_rate: float = 0.0
    remat: bool = False
    synchronized: bool = False
    name: str = "maxvit"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_stages(self)


_PAPER = [
    MaxViTConfig(zoo_name="maxvit_t", name="maxvit_t",
                 blocks=(2, 2, 2, 5, 2), channels=(64, 64, 128, 256, 512)),
    MaxViTConfig(zoo_name="maxvit_s", name="maxvit_s",
                 blocks=(2, 2, 2, 5, 2), channels=(64, 96, 192, 384, 768)),
    MaxViTConfig(zoo_name="maxvit_b", name="maxvit_b",
                 blocks=(2, 2, 6, 14, 2), channels=(64, 96, 192, 384, 768)),
    MaxViTConfig(zoo_name="maxvit_l", name="maxvit_l",
                 blocks=(2, 2, 6, 14, 2), channels=(128, 128, 256, 512, 1024)),
]  # fmt: skip
PAPER_PARAMETERS = {
    "maxvit_t": 31_000_000, "maxvit_s": 69_000_000, "maxvit_b": 120_000_000,
    "maxvit_l": 212_000_000,
}  # fmt: skip
_PAPER_CONFIGS = by_name(_PAPER)


def _tf(name: str, paper: str, side: int = 224) -> MaxViTConfig:
    """timm's port of the official weights of the paper's ``paper`` for ``side`` x ``side``
    images: PyTorch's BatchNorm momentum 0.1 (what timm trains with), 0.9 in Keras'
    convention."""
    return dataclasses.replace(
        _PAPER_CONFIGS[paper],
        zoo_name=name,
        name=name,
        conv_options=ConvBlockConfig(norm_momentum=0.9),
        input_shape=(side, side, 3),
    )


# timm's own MaxViTs (`_rw_max_cfg`): its options, each model's stages and image size.
_RW_CONFIG = MaxViTConfig(
    blocks=(2, 2, 2, 5, 2), channels=(64, 64, 128, 256, 512), stem_channels=(32, 64),
    stem_bias=False, pre_logits=False, head="norm_pool", head_norm_epsilon=1e-6,
    conv_options=ConvBlockConfig(
        activation="silu", se_activation="silu", pool="avg", expand_from="input",
        se_from="hidden", se_ratio=1 / 16, output_bias=False, padding="symmetric",
        norm_epsilon=1e-5, norm_momentum=0.9,
    ),
    transformer_options=TransformerBlockConfig(activation="gelu", norm_epsilon=1e-6, pool="avg"),
)  # fmt: skip


def _rmlp(
    name: str, side: int = 256, layer_scale: float | None = None, **fields: Any
) -> MaxViTConfig:
    """timm's ``maxvit_rmlp_*``: `_RW_CONFIG` with RelPosMlp (512 hidden units, its dropout
    0.125) as the relative bias, ``layer_scale`` and ``fields``, for ``side`` x ``side``."""
    transformer = dataclasses.replace(
        _RW_CONFIG.transformer_options, position_bias="mlp", position_bias_dim=512,
        position_bias_dropout=0.125, layer_scale=layer_scale,
    )  # fmt: skip
    return dataclasses.replace(
        _RW_CONFIG, zoo_name=name, name=name, input_shape=(side, side, 3),
        transformer_options=transformer, **fields,
    )  # fmt: skip


_TIMM = [
    _tf("maxvit_tiny_tf_224", "maxvit_t"),
    _tf("maxvit_small_tf_224", "maxvit_s"),
    _tf("maxvit_base_tf_224", "maxvit_b"),
    _tf("maxvit_large_tf_224", "maxvit_l"),
    # Built for images of any size, the windows stay those of its training size.
    dataclasses.replace(
        _RW_CONFIG, zoo_name="maxvit_nano_rw_256", name="maxvit_nano_rw_256",
        blocks=(2, 1, 2, 3, 1), input_shape=(256, 256, 3), base_size=(256, 256),
    ),
    dataclasses.replace(_RW_CONFIG, zoo_name="maxvit_tiny_rw_224", name="maxvit_tiny_rw_224"),
    # The official weights' ports at 384 and 512 (windows 12 x 12, 16 x 16) and MaxViT-XL.
    *(_tf(f"maxvit_{size}_tf_{side}", paper, side)
      for size, paper in (("tiny", "maxvit_t"), ("small", "maxvit_s"), ("base", "maxvit_b"),
                          ("large", "maxvit_l"))
      for side in (384, 512)),
    *(dataclasses.replace(_tf(f"maxvit_xlarge_tf_{side}", "maxvit_l", side),
                          channels=(192, 192, 384, 768, 1536))
      for side in (224, 384, 512)),
    # timm's MaxViTs with an MLP of the offsets as the relative bias (RelPosMlp).
    _rmlp("maxvit_rmlp_pico_rw_256", blocks=(2, 2, 2, 5, 2), channels=(32, 32, 64, 128, 256),
          stem_channels=(24, 32)),
    _rmlp("maxvit_rmlp_nano_rw_256", blocks=(2, 1, 2, 3, 1)),
    _rmlp("maxvit_rmlp_tiny_rw_256"),
    *(_rmlp(f"maxvit_rmlp_small_rw_{side}", side, channels=(64, 96, 192, 384, 768),
            layer_scale=1e-6) for side in (224, 256)),
    *(_rmlp(f"maxvit_rmlp_base_rw_{side}", side, blocks=(2, 2, 6, 14, 2),
            channels=(64, 96, 192, 384, 768), pre_logits=True, head="pool_norm")
      for side in (224, 384)),
]  # fmt: skip
# timm's sum(p.numel() for p in model.parameters()) with 1000 classes (timm 1.0.31).
TIMM_PARAMETERS = {
    "maxvit_tiny_tf_224": 30_916_528, "maxvit_small_tf_224": 68_927_956,
    "maxvit_base_tf_224": 119_467_708, "maxvit_large_tf_224": 211_785_560,
    "maxvit_nano_rw_256": 15_451_148, "maxvit_tiny_rw_224": 29_057_312,
    "maxvit_tiny_tf_384": 30_977_008, "maxvit_tiny_tf_512": 31_049_584,
    "maxvit_small_tf_384": 69_018_676, "maxvit_small_tf_512": 69_127_540,
    "maxvit_base_tf_384": 119_653_468, "maxvit_base_tf_512": 119_876_380,
    "maxvit_large_tf_384": 212_033_240, "maxvit_large_tf_512": 212_330_456,
    "maxvit_xlarge_tf_224": 474_951_952, "maxvit_xlarge_tf_384": 475_323_472,
    "maxvit_xlarge_tf_512": 475_769_296,
    "maxvit_rmlp_pico_rw_256": 7_515_980, "maxvit_rmlp_nano_rw_256": 15_501_452,
    "maxvit_rmlp_tiny_rw_256": 29_148_896, "maxvit_rmlp_small_rw_224": 64_895_044,
    "maxvit_rmlp_small_rw_256": 64_895_044, "maxvit_rmlp_base_rw_224": 116_135_788,
    "maxvit_rmlp_base_rw_384": 116_135_788,
}  # fmt: skip

#: Every registered MaxViT: zoo name -> :class:`MaxViTConfig`.
CONFIGS: dict[str, MaxViTConfig] = by_name([*_PAPER, *_TIMM])
#: timm's names (its ``maxxvit.py`` model names) -> our configuration of that model.
TIMM_CONFIGS: dict[str, MaxViTConfig] = by_name(_TIMM)


for _config in _PAPER:
    _paper = PAPER_PARAMETERS[_config.zoo_name]
    register_model(
        _config.zoo_name,
        build_maxvit,
        family="maxvit",
        config=_config,
        description=(
            f"MaxViT-{_config.zoo_name[-1].upper()} ({_paper // 1_000_000}M parameters in the "
            "paper), 224 x 224, 1000 classes"
        ),
        paper_parameters=_paper,
        reference=REFERENCE,
    )
for _name, _config in TIMM_CONFIGS.items():
    _size = _config.input_shape[0]
    _what = ", the official weights' port (" if "_tf_" in _name else " ("
    register_model(
        _name,
        build_maxvit,
        family="maxvit",
        config=_config,
        description=(
            f"timm's {_name}{_what}{TIMM_PARAMETERS[_name] / 1e6:.1f}M parameters in timm), "
            f"{_size} x {_size}, 1000 classes; loads timm's weights (convert.from_timm_maxvit)"
        ),
        paper_parameters=None,
        reference=TIMM_REFERENCE,
    )
