"""The input-independent position maps PosENet is trained to predict."""

from __future__ import annotations

import numpy as np

from keras_posenc.layers._checks import check_int

# The names are part of a PosENet model's configuration, so they are defined with the model.
from keras_posenc.zoo.posenet import PATTERN_NAMES

__all__ = ["PATTERN_NAMES", "position_patterns"]

# Stripe frequency of HS/VS: 2.5 periods across the image (Islam et al. 2020).
_STRIPE_PERIODS = 2.5


def position_patterns(height: int, width: int) -> dict[str, np.ndarray]:
    """The five PosENet targets for an image of ``height`` x ``width``.

    Each map is float32 of shape ``(height, width)``, min-max normalised to
    0 to 1: ``H`` a horizontal ramp (value grows with x), ``V`` a vertical
    ramp, ``G`` an isotropic Gaussian at the centre with sigma half the
    width, ``HS`` horizontal stripes ``cos(2 pi 2.5 y / height)`` and ``VS``
    vertical stripes ``cos(2 pi 2.5 x / width)``.

    Args:
        height: rows, at least 3.
        width: columns, at least 3.

    Returns:
        A dict from pattern name (``PATTERN_NAMES``) to its map.

    Raises:
        ValueError: if a size is not an integer of at least 3 (smaller grids
            leave some maps constant, e.g. G on 2 x 2, with nothing to normalise).

    Examples:

        >>> from keras_posenc import probe
        >>> maps = probe.position_patterns(4, 5)
        >>> sorted(maps)
        ['G', 'H', 'HS', 'V', 'VS']
        >>> maps["H"][0].round(2).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]

    Reference: Islam, Jia and Bruce, ICLR 2020, section 3.
    """
    for argument, value in (("height", height), ("width", width)):
        check_int("position_patterns", argument, value, 3)
    y, x = np.meshgrid(
        np.arange(height, dtype=np.float64), np.arange(width, dtype=np.float64), indexing="ij"
    )
    centre_y, centre_x = (height - 1) / 2.0, (width - 1) / 2.0
    sigma = width / 2.0
    maps = {
        "H": x,
        "V": y,
        "G": np.exp(-((x - centre_x) ** 2 + (y - centre_y) ** 2) / (2.0 * sigma**2)),
        "HS": np.cos(2.0 * np.pi * _STRIPE_PERIODS * y / height),
        "VS": np.cos(2.0 * np.pi * _STRIPE_PERIODS * x / width),
    }
    return {name: _min_max(maps[name]) for name in PATTERN_NAMES}


def _min_max(values: np.ndarray) -> np.ndarray:
    low, high = values.min(), values.max()
    return ((values - low) / (high - low)).astype(np.float32)
