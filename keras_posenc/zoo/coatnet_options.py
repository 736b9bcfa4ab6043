"""The block options of CoAtNet and MaxViT: their MBConv and Transformer blocks' options.

Each is a `BlockOptions` (``keras_posenc.zoo.config``): one field per option of the
block, None for the block's default, read as a mapping of the options set. The
builders (``zoo.coatnet.build_coatnet``, ``zoo.maxvit.build_maxvit``) take either
class or a plain dict and turn it into each block's keyword arguments here
(:func:`transformer_arguments`, :func:`block_shift`), so the named options that do
not map one to one on the layer's arguments are translated in one place:

- ``position_bias="none"``: no relative bias (the layer's ``position_bias=None``,
  which would read as "unset" in the options), so ``rotary`` alone positions the
  attention;
- ``rotary``: a ``RotaryPositions2D``, its config dict or a kind name (``"axial"``,
  ``"mixed"``); every Transformer block gets its own (RoPE-Mixed's frequencies are
  the block's weights);
- ``shift``: Swin's shifted windows, on every second block of a stage (Swin's
  W-MSA / SW-MSA alternation), on the sides where the stage's map is longer than
  one window, and with ``partition="block"`` only.

Examples:

    >>> from keras_posenc.zoo.coatnet_options import TransformerBlockConfig
    >>> options = TransformerBlockConfig(rotary="mixed", position_bias="none")
    >>> dict(options)
    {'position_bias': 'none', 'rotary': 'mixed'}
    >>> arguments, shift = transformer_arguments(options, "build_coatnet")
    >>> arguments["position_bias"], arguments["rotary"], shift
    (None, RotaryPositions2D(kind='mixed'), None)
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import keras

from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.layers.coatnet.shifted import HALF
from keras_posenc.layers.rotary_2d import KINDS, RotaryPositions2D
from keras_posenc.zoo.config import BlockOptions

__all__ = ["NO_BIAS", "ConvBlockConfig", "TransformerBlockConfig", "block_shift"]

#: ``transformer_options["position_bias"]`` for no relative bias (rotary alone).
NO_BIAS = "none"

# Block arguments the builders set themselves (not allowed in conv/transformer_options).
_SET_BY_BUILDER = frozenset(
    {"self", "kwargs", "filters", "strides", "drop_path_rate", "name", "stride_on",
     "synchronized", "head_dim", "seed", "dtype", "bias_size", "remat"}
)  # fmt: skip


def _block_options(
    value: Any,
    argument: str,
    layer: type,
    who: str = "build_coatnet",
    set_by_builder: frozenset = frozenset(),
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


def _rotary(who: str, value: Any) -> RotaryPositions2D | None:
    """``transformer_options["rotary"]`` as a fresh `RotaryPositions2D` (or None)."""
    if value is None:
        return None
    if isinstance(value, str):
        if value not in KINDS:
            raise ValueError(
                f"{who}: `transformer_options['rotary']` must be a RotaryPositions2D, its "
                f"config or a kind in {KINDS}; received rotary={value!r}"
            )
        return RotaryPositions2D(kind=value)
    if isinstance(value, RotaryPositions2D):
        value = keras.saving.serialize_keras_object(value)
    if isinstance(value, Mapping):
        try:
            rotary = keras.saving.deserialize_keras_object(dict(value))
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{who}: `transformer_options['rotary']` is not a RotaryPositions2D config: {error}"
            ) from None
        if isinstance(rotary, RotaryPositions2D):
            return rotary
    raise TypeError(
        f"{who}: `transformer_options['rotary']` must be a RotaryPositions2D, its config or "
        f"a kind in {KINDS}; received {value!r}"
    )


def transformer_arguments(options: Mapping, who: str) -> tuple[dict, Any]:
    """The keyword arguments of every `RelativeTransformerBlock2D` from checked options,
    and the ``shift`` that :func:`block_shift` spreads over the blocks.

    ``position_bias="none"`` becomes the layer's None, ``rotary`` a fresh
    `RotaryPositions2D` (call again for each block).

    Raises:
        ValueError: ``position_bias="none"`` without ``rotary``, or a bad ``rotary``.
    """
    arguments = dict(options)
    shift = arguments.pop("shift", None)
    if arguments.get("position_bias") == NO_BIAS:
        if arguments.get("rotary") is None:
            raise ValueError(
                f"{who}: transformer_options position_bias='none' leaves the attention "
                f"without positions: give `rotary` too ('axial', 'mixed' or a "
                f"RotaryPositions2D)"
            )
        arguments["position_bias"] = None
    if "rotary" in arguments:
        arguments["rotary"] = _rotary(who, arguments["rotary"])
    return arguments, shift


def block_shift(
    who: str, shift: Any, partition: Any, size: Any, grid: tuple, index: int
) -> tuple[int, int] | None:
    """The ``shift`` of the block ``index`` (from 0) of a stage whose map is ``grid``.

    Swin's alternation: even blocks unshifted, odd ones shifted by ``shift`` (``"half"``:
    half the window), on each side only where the map is longer than one window of
    ``size`` (a side of None, unknown, counts as longer; the layer checks it at the call).

    Raises:
        ValueError: a ``shift`` without ``partition="block"``.
    """
    if shift is None:
        return None
    if partition != "block" or size is None:
        raise ValueError(
            f"{who}: transformer_options shift={shift!r} needs partition='block' and a "
            f"partition_size (Swin's windows); received partition={partition!r}"
        )
    if index % 2 == 0:
        return None
    size = (size, size) if isinstance(size, int) else tuple(size)
    if isinstance(shift, str) and shift == HALF:
        pair = (size[0] // 2, size[1] // 2)
    elif isinstance(shift, int) and not isinstance(shift, bool):
        pair = (shift, shift)
    else:
        pair = tuple(shift) if isinstance(shift, tuple | list) else shift
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise ValueError(
            f"{who}: transformer_options `shift` must be None, 'half', an int or a pair "
            f"(rows, columns); received shift={shift!r}"
        )
    pair = tuple(
        0 if side is not None and side <= window else value
        for value, side, window in zip(pair, grid, size)
    )
    return None if pair == (0, 0) else pair


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvBlockConfig(BlockOptions):
    """Options of every :class:`MBConv` of a CoAtNet or MaxViT (timm's ``MaxxVitConvCfg``).

    Each field is the MBConv argument of that name; None leaves MBConv's default (in a
    MaxViT, the official code's, ``zoo.maxvit.OFFICIAL_CONV``). The stem uses the same
    activation, BatchNorm epsilon and momentum, and padding. As a mapping: the options set.
    """

    layer = MBConv

    # The block's widths and kernel.
    expansion_rate: int | None = None
    se_ratio: float | None = None
    kernel_size: int | None = None
    # Activations, the squeeze-excitation and the shortcut's pool (timm's variants).
    activation: str | None = None
    pre_activation: bool | None = None
    pool: str | None = None
    stride_pool: str | None = None
    expand_from: str | None = None
    se_from: str | None = None
    se_activation: str | None = None
    se_position: str | None = None
    output_bias: bool | None = None
    # Padding and BatchNorm (PyTorch's: "symmetric", momentum 0.9).
    padding: str | None = None
    norm_epsilon: float | None = None
    norm_momentum: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransformerBlockConfig(BlockOptions):
    """Options of every :class:`RelativeTransformerBlock2D` of a CoAtNet or MaxViT (timm's
    ``MaxxVitTransformerCfg``); None leaves the block's default (in a MaxViT, the official
    code's, ``zoo.maxvit.OFFICIAL_TRANSFORMER``). As a mapping: the options set.

    Three options differ from the layer's argument of that name (the module docstring):
    ``position_bias="none"`` (no bias: ``rotary`` alone), ``rotary`` (also a kind name,
    ``"axial"`` or ``"mixed"``; stored as the kind or as a config dict) and ``shift``
    (Swin's, on every second block of a stage, where the map is longer than a window).
    """

    layer = RelativeTransformerBlock2D

    # The MLP, the norms and the shortcut.
    expansion_rate: int | None = None
    activation: str | None = None
    norm: str | None = None
    norm_epsilon: float | None = None
    norm_momentum: float | None = None
    pool: str | None = None
    attention_width: str | None = None
    shortcut_bias: bool | None = None
    layer_scale: float | None = None
    # The relative position bias: a table, timm's RelPosMlp ("mlp") or "none" (rotary alone).
    position_bias: str | None = None
    position_bias_dim: int | None = None
    position_bias_dropout: float | None = None
    # 2D rotary: a kind name or a RotaryPositions2D's config.
    rotary: str | Mapping[str, Any] | None = None
    # Window or grid attention (set by build_maxvit itself), Swin's shift of the windows.
    partition: str | None = None
    partition_size: int | tuple[int, int] | None = None
    shift: str | int | tuple[int, int] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        if isinstance(self.rotary, RotaryPositions2D | Mapping):
            # Stored as JSON-ready data: the configuration goes to JSON and back.
            rotary = keras.saving.serialize_keras_object(_rotary(who, self.rotary))
            object.__setattr__(self, "rotary", rotary)
        elif self.rotary is not None:
            _rotary(who, self.rotary)
