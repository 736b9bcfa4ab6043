"""The task: images of two textured patches whose class is where one lies relative to the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.experiments.coatnet_layouts.settings import CLASSES
from keras_posenc.layers._checks import check_int, check_non_negative_number


def layout_label(first: Any, second: Any) -> np.ndarray:
    """The class of images whose ``A`` patch is at ``first`` and ``B`` patch at ``second``.

    The relation is read along the axis of the larger offset between the two
    patches (a tie counts as vertical; `texture_layout_data` never draws one):
    0 ``A`` left of ``B``, 1 right of, 2 above, 3 below (`CLASSES`).

    Args:
        first: ``(n, 2)`` (row, column) positions of the ``A`` patches (their
            top-left corners, or any point at the same place in the patch).
        second: the same for the ``B`` patches.

    Returns:
        ``(n,)`` int32 class ids.

    Examples:

        >>> layout_label([[10, 2], [10, 40]], [[12, 30], [12, 8]]).tolist()
        [0, 1]
        >>> layout_label([[2, 10], [40, 10]], [[30, 12], [8, 12]]).tolist()
        [2, 3]
    """
    first, second = np.asarray(first), np.asarray(second)
    if first.ndim != 2 or first.shape[1:] != (2,) or second.shape != first.shape:
        raise ValueError(
            "layout_label: `first` and `second` must both have shape (n, 2) (row, column); "
            f"got {first.shape} and {second.shape}."
        )
    rows, cols = (second - first).T
    horizontal = np.abs(cols) > np.abs(rows)
    labels = np.where(horizontal, np.where(cols > 0, 0, 1), np.where(rows > 0, 2, 3))
    return labels.astype("int32")


def _stripes(size: int, horizontal: bool, phase: int) -> np.ndarray:
    """A ``size x size`` pattern of +1/-1 stripes of period 2 (mean 0 over any 2 x 2 block)."""
    line = (np.arange(size) + phase) % 2 * 2.0 - 1.0
    return np.tile(
        line[:, None] if horizontal else line[None, :], (1, size) if horizontal else (size, 1)
    )


def texture_layout_data(
    num_images: int,
    image_size: int = 64,
    patch_size: int = 12,
    noise: float = 0.5,
    seed: int | Sequence[int] = 0,
    return_positions: bool = False,
) -> tuple[np.ndarray, ...]:
    """Images of two textured patches whose class is where one lies relative to the other.

    Each image: Gaussian noise (standard deviation ``noise``) plus two
    ``patch_size`` squares of stripes of period 2 pixels (random phase,
    amplitude uniform in [0.7, 1.0]), horizontal stripes (``A``) in one and
    vertical stripes (``B``) in the other, times one random colour per image
    (each channel uniform in [0.5, 1.0], the same for both patches). The
    class (uniform over `CLASSES`) is ``A``'s place relative to ``B``:
    `layout_label` of the patches' corners. The patches never overlap: their
    offset along the class's axis is at least ``patch_size`` and across it
    at most half of that offset, so the class is unambiguous. See the
    module's docstring for why neither texture nor layout alone suffices.

    Args:
        num_images: number of images.
        image_size: height and width in pixels (at least ``2 * patch_size``).
        patch_size: side of each patch in pixels (at least 2).
        noise: standard deviation of the background noise (>= 0).
        seed: seed of everything random (anything ``numpy.random.default_rng`` takes).
        return_positions: also return the patches' top-left corners.

    Returns:
        ``(images, labels)``: float32 ``(num_images, image_size, image_size, 3)``
        and int32 ``(num_images,)``; with ``return_positions`` also ``first``
        and ``second``, int32 ``(num_images, 2)`` (row, column) of the ``A``
        and ``B`` patches.

    Raises:
        ValueError: for a non-positive ``num_images``, a ``patch_size`` below
            2, an image too small for two patches or a negative ``noise``.

    Examples:

        >>> images, labels = texture_layout_data(8, image_size=32, patch_size=8, seed=0)
        >>> images.shape, images.dtype.name, labels.shape, labels.dtype.name
        ((8, 32, 32, 3), 'float32', (8,), 'int32')
        >>> _, labels, first, second = texture_layout_data(
        ...     8, image_size=32, patch_size=8, seed=0, return_positions=True)
        >>> bool((layout_label(first, second) == labels).all())
        True
    """
    caller = "texture_layout_data"
    num_images = check_int(caller, "num_images", num_images, 1)
    patch_size = check_int(caller, "patch_size", patch_size, 2)
    image_size = check_int(caller, "image_size", image_size, 1)
    if image_size < 2 * patch_size:
        raise ValueError(
            f"{caller}: `image_size` must be at least 2 * patch_size = {2 * patch_size} so "
            f"that two patches fit side by side; got image_size={image_size}, "
            f"patch_size={patch_size}."
        )
    check_non_negative_number(caller, "noise", noise)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), num_images).astype("int32")
    room = image_size - patch_size  # corners lie in 0 .. room
    # Offset along the class's axis: patch_size .. room; across it: at most half of that.
    along = rng.integers(patch_size, room + 1, num_images)
    across = np.rint((rng.random(num_images) * 2 - 1) * (along // 2)).astype(int)
    horizontal = labels < 2  # 0, 1: left/right (along columns); 2, 3: above/below
    sign = np.where(labels % 2 == 0, 1, -1)  # A before B (left of, above) or after it
    offset = np.where(
        horizontal[:, None],
        np.stack([across, sign * along], 1),
        np.stack([sign * along, across], 1),
    )
    # A's corner: anywhere that keeps both patches inside the image.
    first = rng.integers(np.maximum(0, -offset), np.minimum(room, room - offset) + 1)
    first = first.astype("int32")
    second = (first + offset).astype("int32")
    images = rng.standard_normal((num_images, image_size, image_size)) * noise
    amplitudes = rng.uniform(0.7, 1.0, (num_images, 2))
    phases = rng.integers(0, 2, (num_images, 2))
    for n in range(num_images):
        for k, (corner, horizontal) in enumerate(((first[n], True), (second[n], False))):
            pattern = amplitudes[n, k] * _stripes(patch_size, horizontal, phases[n, k])
            r, c = corner
            images[n, r : r + patch_size, c : c + patch_size] += pattern
    colours = rng.uniform(0.5, 1.0, (num_images, 1, 1, 3))
    images = (images[..., None] * colours).astype("float32")
    if return_positions:
        return images, labels, first, second
    return images, labels
