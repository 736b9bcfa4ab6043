"""Content-free probe inputs: images that carry no position prior of their own."""

from __future__ import annotations

import numpy as np

from keras_posenc.layers._checks import check_int

INPUT_KINDS = ("noise", "grey", "white")
_CONSTANT_VALUE = {"grey": 0.5, "white": 1.0}


def content_free_images(
    kind: str,
    count: int,
    height: int,
    width: int,
    channels: int = 3,
    seed: int = 0,
    scale: float = 1.0,
) -> np.ndarray:
    """A batch of images with no content, so any position a probe decodes comes from the network.

    ``"noise"`` is i.i.d. uniform noise in ``[0, scale)`` (every position has
    the same distribution), ``"grey"`` the constant ``0.5 * scale`` and
    ``"white"`` the constant ``scale``. There is no ``"black"``: with zero
    biases an all-zero image gives all-zero features, which say nothing.

    Args:
        kind: ``"noise"``, ``"grey"`` or ``"white"``.
        count: number of images, at least 1.
        height: rows, at least 1.
        width: columns, at least 1.
        channels: channels, at least 1.
        seed: seed of the noise (numpy's ``default_rng``); same seed, same images.
        scale: the value range, e.g. 255 for a backbone that expects pixels in 0..255.

    Returns:
        float32 array ``(count, height, width, channels)``.

    Raises:
        ValueError: for an unknown kind or a non-positive size.

    Examples:

        >>> from keras_posenc import probe
        >>> images = probe.content_free_images("noise", 2, 4, 4, seed=1)
        >>> images.shape, bool(images.min() >= 0.0), bool(images.max() < 1.0)
        ((2, 4, 4, 3), True, True)
        >>> float(probe.content_free_images("grey", 1, 4, 4, scale=255.0).max())
        127.5
    """
    if kind not in INPUT_KINDS:
        raise ValueError(
            f"probe.content_free_images: `kind` must be one of "
            f"{', '.join(map(repr, INPUT_KINDS))}; received kind={kind!r}"
        )
    for argument, value in (
        ("count", count),
        ("height", height),
        ("width", width),
        ("channels", channels),
    ):
        check_int("probe.content_free_images", argument, value, 1)
    shape = (count, height, width, channels)
    if kind == "noise":
        return (np.random.default_rng(seed).random(shape) * scale).astype(np.float32)
    return np.full(shape, _CONSTANT_VALUE[kind] * scale, dtype=np.float32)
