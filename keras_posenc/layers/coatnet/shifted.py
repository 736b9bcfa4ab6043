"""Swin's shifted windows: a cyclic shift of the map and the mask between its regions.

`RelativeTransformerBlock2D` (``transformer``) with ``partition="block"`` and ``shift``
attends within windows displaced by ``shift`` cells (Liu et al. 2021, section 3.2):
the map is rolled up and left by ``shift``, cut into the usual block windows, and the
windows that the roll assembled from cells of distant parts of the map (the last row
and column of windows) attend within each part only, by the mask of
:func:`shifted_window_mask`; the output is rolled back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

from keras_posenc.layers.coatnet.partitions import partition_windows

#: The value of ``shift`` for Swin's displacement: half the window, ``partition_size // 2``.
HALF = "half"


def _shift(who: str, shift: Any, partition: str | None, size: tuple | None) -> tuple | None:
    """The checked ``shift`` of `RelativeTransformerBlock2D`: None (no shift) or a pair."""
    if shift is None:
        return None
    if isinstance(shift, str) and shift == HALF:
        if partition != "block":
            raise ValueError(
                f"{who}: shift={shift!r} needs partition='block' (Swin's windows of adjacent "
                f"cells); received partition={partition!r}"
            )
        shift = (size[0] // 2, size[1] // 2)
    pair = (shift, shift) if isinstance(shift, int | np.integer) else shift
    try:
        pair = tuple(pair)
    except TypeError:
        pair = (pair,)
    valid = len(pair) == 2 and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) for v in pair
    )
    if not valid or min(pair) < 0:
        raise ValueError(
            f"{who}: `shift` must be None, 'half', a non-negative int or a pair (rows, "
            f"columns) of them; received shift={shift!r}"
        )
    if pair == (0, 0):
        return None
    if partition != "block":
        raise ValueError(
            f"{who}: shifted windows need partition='block' (Swin's windows of adjacent "
            f"cells); received shift={shift!r} with partition={partition!r}"
        )
    if pair[0] >= size[0] or pair[1] >= size[1]:
        raise ValueError(
            f"{who}: `shift` must be smaller than the window, partition_size={size}, "
            f"on both sides; received shift={shift!r}"
        )
    return int(pair[0]), int(pair[1])


def check_shifted_map(who: str, shape: tuple, size: tuple, shift: tuple) -> None:
    """A map that shifted windows can cut: whole windows, more than one along a shifted side.

    Sides unknown (None) are checked when the block is called with a known size.
    """
    for side, window, displacement in zip(shape[1:3], size, shift, strict=True):
        if side is None:
            continue
        if side % window:
            # keras-hub's SwinTransformerBlock pads the rolled map with zeros at the bottom
            # and right instead (window_partition in its swin_transformer_layers.py), and
            # the padded cells are keys like any other: no such padding here.
            raise ValueError(
                f"{who}: with shifted windows the map's height and width must be multiples "
                f"of partition_size={size} (pad the map first; keras-hub's Swin pads it "
                f"with zeros that the attention sees); received input shape {shape}"
            )
        if displacement and side == window:
            raise ValueError(
                f"{who}: a side one window long cannot be shifted (Swin uses shift 0 "
                f"where the map is no larger than the window); received shift={shift} "
                f"with partition_size={size} and input shape {shape}"
            )


def roll_map(x: Any, shift: tuple, back: bool = False) -> Any:
    """``x`` (batch, H, W, C) rolled up and left by ``shift`` (down and right with ``back``).

    Two slices and a concatenation per side rather than ``ops.roll``: LiteRT has no
    builtin roll (its converter falls back to a TensorFlow op that its interpreter
    refuses), and the slices need no side's length, so unknown sizes roll too.
    """
    rows, cols = shift
    if back:
        if rows:
            x = ops.concatenate([x[:, -rows:], x[:, :-rows]], axis=1)
        if cols:
            x = ops.concatenate([x[:, :, -cols:], x[:, :, :-cols]], axis=2)
        return x
    if rows:
        x = ops.concatenate([x[:, rows:], x[:, :rows]], axis=1)
    if cols:
        x = ops.concatenate([x[:, :, cols:], x[:, :, :cols]], axis=2)
    return x


def _regions(length: Any, window: int, shift: int) -> Any:
    """Each cell's part along one side of the rolled map: 0 for the cells that stay in
    place, 1 and 2 for the last window's cells from the end and from the start of the
    side (``shift`` of them, the cells the roll brought round)."""
    index = ops.arange(length)
    return ops.cast(ops.greater_equal(index, length - window), "int32") + ops.cast(
        ops.greater_equal(index, length - shift), "int32"
    )


def shifted_window_mask(height: Any, width: Any, size: tuple, shift: tuple) -> Any:
    """Which cells of each window of the rolled map may attend to each other.

    The map ``(height, width)`` rolled by ``shift`` (see `roll_map`) and cut into block
    windows of ``size``: a pair of cells may attend when they come from the same part
    of the map, the parts being split at ``length - window`` and ``length - shift`` on
    each side (Swin's nine regions). ``height`` and ``width`` may be scalar tensors
    (a size known at run time only).

    Returns:
        bool, ``(windows, size[0] * size[1], size[0] * size[1])``, the windows in the
        order of `partition_windows`.

    Examples:

        >>> from keras import ops
        >>> mask = shifted_window_mask(4, 4, (2, 2), (1, 1))
        >>> tuple(mask.shape)
        (4, 4, 4)
        >>> print(ops.convert_to_numpy(mask[3]).astype(int))  # the corner window
        [[1 0 0 0]
         [0 1 0 0]
         [0 0 1 0]
         [0 0 0 1]]
        >>> print(ops.convert_to_numpy(mask[0]).astype(int))  # a window left in place
        [[1 1 1 1]
         [1 1 1 1]
         [1 1 1 1]
         [1 1 1 1]]
    """
    rows = _regions(height, size[0], shift[0])
    cols = _regions(width, size[1], shift[1])
    labels = ops.expand_dims(rows, 1) * 3 + ops.expand_dims(cols, 0)  # (height, width)
    labels = partition_windows(labels[None, :, :, None], "block", size)
    labels = ops.reshape(labels, (-1, size[0] * size[1]))
    return ops.equal(ops.expand_dims(labels, 2), ops.expand_dims(labels, 1))
