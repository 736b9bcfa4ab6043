"""MaxViT's partitions of a feature map: windows of adjacent cells, or a dilated grid.

`RelativeTransformerBlock2D` (``transformer``) with ``partition="block"`` or
``"grid"`` attends within the windows these functions cut (Tu et al. 2022).
"""

from __future__ import annotations

from typing import Any

from keras import ops

from keras_posenc.layers._checks import check_choice, grid_size

#: MaxViT's partitions of `RelativeTransformerBlock2D`: adjacent cells, or a dilated grid.
PARTITIONS = ("block", "grid")


def _partition(who: str, partition: Any, size: Any) -> tuple[str | None, tuple | None]:
    """The checked ``(partition, partition_size)`` of `RelativeTransformerBlock2D`."""
    if partition is None:
        if size is not None:
            raise ValueError(
                f"{who}: `partition_size` is used with partition='block' or 'grid' only; "
                f"received partition_size={size!r} with partition=None"
            )
        return None, None
    partition = check_choice(who, "partition", partition, PARTITIONS)
    if size is None:
        raise ValueError(
            f"{who}: partition={partition!r} needs `partition_size`, the windows' "
            "(height, width); received None"
        )
    return partition, grid_size(size, who, "partition_size")


def _check_partition(who: str, shape: tuple, size: tuple[int, int], filters: int) -> None:
    """A map that partitioned attention can cut into whole windows, at the block's width.

    Sides unknown (None) are checked when the block is called with a known size.
    """
    height, width, channels = shape[1], shape[2], shape[3]
    if (height is not None and height % size[0]) or (width is not None and width % size[1]):
        raise ValueError(
            f"{who}: the map's height and width must be multiples of "
            f"partition_size={size}; received input shape {shape}"
        )
    if int(channels) != filters:
        raise ValueError(
            f"{who}: partitioned attention keeps the width: the input channels must equal "
            f"filters={filters}; received input shape {shape}"
        )


def _spatial_size(x: Any) -> tuple[Any, Any]:
    """A map's ``(height, width)``: Python ints where the shape is known, else scalar
    tensors (a model built for images of any size, traced with unknown sides)."""
    height, width = x.shape[1], x.shape[2]
    if height is None or width is None:
        dynamic = ops.shape(x)
        height = dynamic[1] if height is None else height
        width = dynamic[2] if width is None else width
    return height, width


def partition_windows(x: Any, partition: str, size: tuple[int, int]) -> Any:
    """A ``(batch, H, W, C)`` map as ``(batch * windows, size[0], size[1], C)`` windows.

    ``"block"``: each window is ``size`` adjacent cells (MaxViT's block attention);
    ``"grid"``: window ``(p, q)`` holds the cells ``(a * H / size[0] + p, b * W / size[1]
    + q)``, a ``size`` grid spread over the whole map (its grid attention). Windows are
    ordered row-major over the map, as timm's ``window_partition`` / ``grid_partition``.
    ``H`` and ``W`` may be unknown until the call.
    """
    (height, width), channels = _spatial_size(x), x.shape[3]
    rows, cols = size
    if partition == "block":
        x = ops.reshape(x, (-1, height // rows, rows, width // cols, cols, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    else:
        x = ops.reshape(x, (-1, rows, height // rows, cols, width // cols, channels))
        x = ops.transpose(x, (0, 2, 4, 1, 3, 5))
    return ops.reshape(x, (-1, rows, cols, channels))


def merge_windows(windows: Any, partition: str, size: tuple[int, int], grid: tuple) -> Any:
    """The inverse of :func:`partition_windows`: windows back to the ``grid`` map."""
    (height, width), (rows, cols) = grid, size
    channels = windows.shape[-1]
    if partition == "block":
        x = ops.reshape(windows, (-1, height // rows, width // cols, rows, cols, channels))
        x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    else:
        x = ops.reshape(windows, (-1, height // rows, width // cols, rows, cols, channels))
        x = ops.transpose(x, (0, 3, 1, 4, 2, 5))
    return ops.reshape(x, (-1, height, width, channels))
