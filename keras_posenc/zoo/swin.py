"""Swin Transformer v1 (Liu et al. 2021): a hierarchical vision Transformer whose attention
runs within windows, shifted from one block to the next.

Image ``(batch, H, W, 3)`` -> patch embedding (a ``patch_size`` x ``patch_size``
convolution of stride ``patch_size`` to ``embed_dim``, LayerNorm) -> four stages; stage ``i`` is
``depths[i]`` `keras_posenc.layers.coatnet.RelativeTransformerBlock2D` blocks of width
``embed_dim * 2**i`` (pre-norm, ``num_heads[i]`` heads, attention within
``window_size`` x ``window_size`` windows with the window's learned 2D relative bias,
``partition="block"``; every second block's windows shifted by ``window_size // 2``,
``shift="half"``, except where the stage's map is no larger than one window), followed, but
for the last stage, by patch merging (each 2 x 2 cells concatenated, LayerNorm, a linear
map to twice the width without bias) -> LayerNorm -> ``(batch, tokens, 8 * embed_dim)``,
the last map's cells row-major. With ``num_classes``, the image classifier of keras-hub's
``SwinTransformerImageClassifier``: the mean of those cells, dropout, a ``Dense(num_classes)``
named ``predictions``.

The layout is keras-hub's ``SwinTransformerBackbone`` (its input, its output and the order
of the 2 x 2 cells in the patch merging), so `keras_posenc.convert.from_keras_hub_swin`
copies its weights one to one. The map's sides must be multiples of the patch and of the
window at every stage (keras-hub pads them instead).

Registered configurations (keras-hub's presets' names and shapes; parameters counted by the
tests, equal to keras-hub's presets' counts):

    name                             C    depths         heads            window  image  parameters
    swin_tiny_patch4_window7_224     96   2, 2, 6, 2     3, 6, 12, 24     7       224    27,519,354
    swin_small_patch4_window7_224    96   2, 2, 18, 2    3, 6, 12, 24     7       224    48,837,258
    swin_base_patch4_window7_224     128  2, 2, 18, 2    4, 8, 16, 32     7       224    86,743,224
    swin_base_patch4_window12_384    128  2, 2, 18, 2    4, 8, 16, 32     12      384    86,878,584
    swin_large_patch4_window7_224    192  2, 2, 18, 2    6, 12, 24, 48    7       224    194,995,476
    swin_large_patch4_window12_384   192  2, 2, 18, 2    6, 12, 24, 48    12      384    195,198,516
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._checks import check_bool, check_int, check_rate
from keras_posenc.layers.coatnet import RelativeTransformerBlock2D
from keras_posenc.zoo.adapt import ZooFunctional
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.registry import register_model

__all__ = ["CONFIGS", "PatchMerging", "SwinConfig", "build_swin", "swin_head"]

REFERENCE = (
    "Liu, Lin, Cao, Hu, Wei, Zhang, Lin, Guo 2021, Swin Transformer: Hierarchical Vision "
    "Transformer using Shifted Windows (ICCV); keras-hub's SwinTransformerBackbone"
)


@keras.saving.register_keras_serializable(package="keras_posenc")
class PatchMerging(keras.layers.Layer):
    """Swin's downsampling: each 2 x 2 cells of a map concatenated, LayerNorm, a linear map.

    ``(batch, H, W, C)`` -> ``(batch, H / 2, W / 2, 2 C)``; the four cells of each 2 x 2
    patch are concatenated in the order (0, 0), (1, 0), (0, 1), (1, 1) (row, column), as
    Swin's and keras-hub's ``PatchMerging``. ``H`` and ``W`` must be even.

    Examples:

        >>> import numpy as np
        >>> tuple(PatchMerging()(np.ones((2, 4, 6, 8), "float32")).shape)
        (2, 2, 3, 16)
    """

    def __init__(self, norm_epsilon: float = 1e-5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.norm_epsilon = norm_epsilon
        self.norm = keras.layers.LayerNormalization(
            epsilon=norm_epsilon, dtype=self.dtype_policy, name="norm"
        )
        self.reduction = None

    def build(self, input_shape: Any) -> None:
        height, width, channels = input_shape[1], input_shape[2], int(input_shape[3])
        if (height is not None and height % 2) or (width is not None and width % 2):
            raise ValueError(
                f"PatchMerging '{self.name}': the map's height and width must be even "
                f"(keras-hub's pads them with zeros); received input shape {tuple(input_shape)}"
            )
        self.norm.build((None, None, None, 4 * channels))
        self.reduction = keras.layers.Dense(
            2 * channels, use_bias=False, dtype=self.dtype_policy, name="reduction"
        )
        self.reduction.build((None, None, None, 4 * channels))

    def call(self, x: Any) -> Any:
        cells = [x[:, row::2, col::2, :] for col in (0, 1) for row in (0, 1)]
        return self.reduction(self.norm(ops.concatenate(cells, axis=-1)))

    def compute_output_shape(self, input_shape: Any) -> tuple:
        batch, height, width, channels = input_shape
        half = [None if side is None else side // 2 for side in (height, width)]
        return (batch, *half, 2 * channels)

    def get_config(self) -> dict:
        return {**super().get_config(), "norm_epsilon": self.norm_epsilon}


def build_swin(
    input_shape: tuple = (224, 224, 3),
    embed_dim: int = 96,
    depths: tuple = (2, 2, 6, 2),
    num_heads: tuple = (3, 6, 12, 24),
    window_size: int = 7,
    patch_size: int = 4,
    mlp_ratio: int = 4,
    dropout_rate: float = 0.0,
    drop_path: float = 0.1,
    patch_norm: bool = True,
    num_classes: int | None = None,
    head_dropout: float = 0.0,
    remat: bool = False,
    name: str = "swin",
) -> keras.Model:
    """A Swin Transformer v1 backbone or image classifier (the layout in this module's docstring).

    ``model(images)`` returns the last stage's normalised cells ``(batch, tokens,
    embed_dim * 2 ** (stages - 1))``, as keras-hub's ``SwinTransformerBackbone``; with
    ``num_classes``, ``(batch, num_classes)`` logits, as its ``SwinTransformerImageClassifier``.

    Args:
        input_shape: ``(height, width, channels)`` of the images; divided by
            ``patch_size``, then halved at each patch merging, the sides must hold a
            whole number of windows at every stage (224 with windows of 7, 384 with 12).
        embed_dim: the first stage's width (doubled at each patch merging).
        depths: blocks per stage.
        num_heads: heads per stage.
        window_size: the attention windows' side.
        patch_size: the patch embedding's kernel and stride.
        mlp_ratio: the feed-forward width as a multiple of the block's (an int).
        dropout_rate: dropout after the patch embedding.
        drop_path: stochastic depth, rising linearly from 0 to it over the blocks.
        remat: recompute every Transformer block in the backward pass of training
            (Keras' remat: ``RelativeTransformerBlock2D(remat=True)``): less memory, more
            time. Default False.
        patch_norm: a LayerNorm after the patch embedding.
        num_classes: None (the backbone), or the classes of a head on the mean of the
            last map's cells.
        head_dropout: the dropout before that head.
        name: the model's name.

    Returns:
        The ``keras.Model``.

    Examples:

        >>> import numpy as np
        >>> model = build_swin((32, 32, 3), embed_dim=8, depths=(2, 2), num_heads=(1, 2),
        ...                    window_size=4)
        >>> tuple(model(np.zeros((1, 32, 32, 3), "float32")).shape)
        (1, 16, 16)
        >>> classifier = build_swin((32, 32, 3), embed_dim=8, depths=(2, 2), num_heads=(1, 2),
        ...                         window_size=4, num_classes=5)
        >>> tuple(classifier(np.zeros((1, 32, 32, 3), "float32")).shape)
        (1, 5)
    """
    owner = "build_swin"
    if num_classes is not None:
        num_classes = check_int(owner, "num_classes", num_classes, 1)
    head_dropout = check_rate(owner, "head_dropout", head_dropout)
    embed_dim = check_int(owner, "embed_dim", embed_dim, 1)
    window_size = check_int(owner, "window_size", window_size, 1)
    patch_size = check_int(owner, "patch_size", patch_size, 1)
    mlp_ratio = check_int(owner, "mlp_ratio", mlp_ratio, 1)
    drop_path = check_rate(owner, "drop_path", drop_path)
    remat = check_bool(owner, "remat", remat)
    depths, num_heads = tuple(depths), tuple(num_heads)
    if not depths or len(depths) != len(num_heads):
        raise ValueError(
            f"{owner}: `depths` and `num_heads` must be non-empty and as long as each other "
            f"(one entry per stage); received depths={depths}, num_heads={num_heads}"
        )
    height, width = input_shape[0], input_shape[1]
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"{owner}: the image's sides must be multiples of patch_size={patch_size}; "
            f"received input_shape={tuple(input_shape)}"
        )
    images = keras.Input(input_shape, name="images")
    x = keras.layers.Conv2D(embed_dim, patch_size, strides=patch_size, name="patch_embedding")(
        images
    )
    if patch_norm:
        x = keras.layers.LayerNormalization(epsilon=1e-5, name="patch_norm")(x)
    x = keras.layers.Dropout(dropout_rate, name="patch_dropout")(x)
    height, width = height // patch_size, width // patch_size
    rates = [drop_path * i / max(sum(depths) - 1, 1) for i in range(sum(depths))]
    for stage, (depth, heads) in enumerate(zip(depths, num_heads, strict=True)):
        channels = embed_dim * 2**stage
        if channels % heads:
            raise ValueError(
                f"{owner}: stage {stage}'s width {channels} must be a multiple of its "
                f"num_heads={heads}; received num_heads={num_heads}"
            )
        # Swin shifts no window where the map is one window (or less) wide.
        shiftable = min(height, width) > window_size
        for index in range(depth):
            x = RelativeTransformerBlock2D(
                channels,
                head_dim=channels // heads,
                expansion_rate=mlp_ratio,
                drop_path_rate=rates[sum(depths[:stage]) + index],
                partition="block",
                partition_size=window_size,
                shift="half" if index % 2 and shiftable else None,
                remat=remat,
                name=f"stage_{stage}_block_{index}",
            )(x)
        if stage < len(depths) - 1:
            x = PatchMerging(name=f"stage_{stage}_merging")(x)
            height, width = height // 2, width // 2
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")(x)
    x = keras.layers.Reshape((-1, embed_dim * 2 ** (len(depths) - 1)), name="sequence_output")(x)
    if num_classes is not None:
        x = swin_head(x, num_classes, head_dropout)
    return ZooFunctional(images, x, name=name)


def swin_head(x: Any, num_classes: int, head_dropout: float = 0.0) -> Any:
    """The classifier on the last map's cells ``(batch, tokens, channels)``: their mean,
    dropout, ``Dense(num_classes)`` named ``predictions`` (keras-hub's
    ``SwinTransformerImageClassifier``'s head; ``models.SwinImageClassifier``'s too)."""
    num_classes = check_int("swin_head", "num_classes", num_classes, 1)
    head_dropout = check_rate("swin_head", "head_dropout", head_dropout)
    x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    x = keras.layers.Dropout(head_dropout, name="head_dropout")(x)
    return keras.layers.Dense(num_classes, name="predictions")(x)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class SwinConfig(ZooConfig):
    """A named Swin Transformer: :func:`build_swin`'s arguments, with its defaults."""

    input_shape: tuple = (224, 224, 3)
    embed_dim: int = 96
    depths: tuple = (2, 2, 6, 2)
    num_heads: tuple = (3, 6, 12, 24)
    window_size: int = 7
    patch_size: int = 4
    mlp_ratio: int = 4
    dropout_rate: float = 0.0
    drop_path: float = 0.1
    patch_norm: bool = True
    num_classes: int | None = None
    head_dropout: float = 0.0
    remat: bool = False
    name: str = "swin"

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        for field in ("embed_dim", "window_size", "patch_size", "mlp_ratio"):
            check_int(who, field, getattr(self, field), 1)


_DEEP = (2, 2, 18, 2)

#: Every registered Swin: zoo name -> :class:`SwinConfig` (keras-hub's presets).
CONFIGS: dict[str, SwinConfig] = by_name([
    SwinConfig(zoo_name="swin_tiny_patch4_window7_224", name="swin_tiny_patch4_window7_224"),
    SwinConfig(zoo_name="swin_small_patch4_window7_224", name="swin_small_patch4_window7_224",
               depths=_DEEP),
    SwinConfig(zoo_name="swin_base_patch4_window7_224", name="swin_base_patch4_window7_224",
               embed_dim=128, depths=_DEEP, num_heads=(4, 8, 16, 32)),
    SwinConfig(zoo_name="swin_base_patch4_window12_384", name="swin_base_patch4_window12_384",
               input_shape=(384, 384, 3), embed_dim=128, depths=_DEEP,
               num_heads=(4, 8, 16, 32), window_size=12),
    SwinConfig(zoo_name="swin_large_patch4_window7_224", name="swin_large_patch4_window7_224",
               embed_dim=192, depths=_DEEP, num_heads=(6, 12, 24, 48)),
    SwinConfig(zoo_name="swin_large_patch4_window12_384", name="swin_large_patch4_window12_384",
               input_shape=(384, 384, 3), embed_dim=192, depths=_DEEP,
               num_heads=(6, 12, 24, 48), window_size=12),
])  # fmt: skip

for _name, _config in CONFIGS.items():
    register_model(
        _name,
        build_swin,
        family="swin",
        config=_config,
        description=(
            f"Swin Transformer v1 backbone, C {_config.embed_dim}, depths "
            f"{'-'.join(map(str, _config.depths))}, window {_config.window_size}, "
            f"{_config.input_shape[0]} x {_config.input_shape[1]} images"
        ),
        reference=REFERENCE,
    )
