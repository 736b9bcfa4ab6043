"""The relative-position arguments of `MultiHeadRelativeAttention` and of the blocks
built on it (keras_posenc/layers/relative_attention.py, relative_transformer.py,
relative_transformer_decoder.py): ``relative``, ``position``, ``relative_logits`` and
``rotary``, checked at construction with the messages of keras_posenc/layers/_checks.py.
Private: kept apart so that each layer's module is about what the layer computes."""

from __future__ import annotations

from typing import Any

import keras

from keras_posenc.layers import position_schemes
from keras_posenc.layers.rotary import RotaryPositions

_RELATIVE_LOGITS = ("auto", "gather", "skew")


def check_relative_arguments(
    caller: str, relative: Any, position: Any
) -> position_schemes.PositionScheme | None:
    """Validates ``relative`` and ``position`` at construction, naming ``caller``.

    Shared by `MultiHeadRelativeAttention` and the blocks built on it, so a bad
    argument fails when the outermost layer is created, with that layer's name.
    Returns the position scheme (`position_schemes.get` of ``position``; None gives
    the default, Shaw's ``ClipPositions(max_distance=16)``), checked to support
    ``relative``. ``relative=None`` (no relative term) takes no ``position`` and
    returns None.
    """
    if relative is not None and relative not in position_schemes.RELATIVE_MODES:
        modes = (*position_schemes.RELATIVE_MODES, None)
        raise ValueError(
            f"{caller}: `relative` must be one of {', '.join(map(repr, modes))}, got {relative!r}."
        )
    if relative is None:
        if position is not None:
            raise ValueError(
                f"{caller}: relative=None adds no relative term, so it takes no `position`; "
                f"got position={position!r}. Pass relative='bias' (or 'keys', 'keys_values') "
                f"to use it."
            )
        return None
    scheme = position_schemes.get("shaw" if position is None else position, caller)
    scheme.check_mode(caller, relative)
    return scheme


def check_relative_logits(
    caller: str,
    relative_logits: Any,
    relative: Any,
    scheme: position_schemes.PositionScheme | None,
) -> str:
    """Validates ``relative_logits`` (``"auto"``, ``"gather"`` or ``"skew"``) at construction,
    naming ``caller``: the skew needs a relative key term and a table row per distance.

    Shared by `MultiHeadRelativeAttention` and the blocks that pass the argument on.
    """
    if relative_logits not in _RELATIVE_LOGITS:
        raise ValueError(
            f"{caller}: `relative_logits` must be one of "
            f"{', '.join(map(repr, _RELATIVE_LOGITS))}, got {relative_logits!r}."
        )
    has_key_term = relative in ("keys", "keys_values")
    if relative_logits == "skew" and (not has_key_term or not scheme.skewable):
        raise ValueError(
            f"{caller}: relative_logits='skew' needs relative='keys' or 'keys_values' "
            f"and a table row per distance (position=ClipPositions(...) or 'shaw'), got "
            f"relative={relative!r}, position={scheme!r}."
        )
    return relative_logits


def check_rotary(caller: str, rotary: Any) -> RotaryPositions | None:
    """The rotary embedding of ``rotary``: a `RotaryPositions`, its config, or None."""
    if isinstance(rotary, dict):
        rotary = keras.saving.deserialize_keras_object(rotary)
    if rotary is not None and not isinstance(rotary, RotaryPositions):
        raise TypeError(
            f"{caller}: `rotary` must be None or a RotaryPositions (e.g. "
            f"RotaryPositions(scaling='yarn', scaling_factor=4, training_length=512)), "
            f"got {rotary!r}."
        )
    return rotary
