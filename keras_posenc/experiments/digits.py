"""scikit-learn's digits as a small image task: the data of the shipped ``digits`` preset.

scikit-learn bundles 1,797 handwritten digits of 8 x 8 pixels (values 0-16) in its
package, so they need no download. :func:`digits_split` upsamples them to 32 x 32 (each
pixel repeated 4 x 4: CoAtNet's and MaxViT's stages halve the map five times), scales
them to [-1, 1] and splits them in two by a seeded permutation: 1,437 to train on and
360 held out. The recipe ``zoo/coatnet/train_digits.py`` trains on the first part;
``posenc demo`` and the model card score the second.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DIGITS_EXTRA", "digits_split", "load_digits"]

DIGITS_EXTRA = "data"
HELD_OUT = 360
UPSAMPLE = 4


def load_digits(caller: str = "load_digits") -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digits as ``(images (1797, 8, 8) uint8 0-16, labels (1797,) int32)``.

    Raises:
        ImportError: scikit-learn is not installed; the message names the extra that
            installs it.

    Example:

    >>> images, labels = load_digits()  # doctest: +SKIP
    >>> images.shape, labels[:5]  # doctest: +SKIP
    ((1797, 8, 8), array([0, 1, 2, 3, 4], dtype=int32))
    """
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as error:
        raise ImportError(
            f"{caller}: the digits data set comes with scikit-learn, which is not installed; "
            f'install it with pip install "keras-posenc[{DIGITS_EXTRA}]" (or scikit-learn).'
        ) from error
    data = sklearn_digits()
    return data.images.astype("uint8"), data.target.astype("int32")


def to_inputs(images: np.ndarray) -> np.ndarray:
    """8 x 8 digits (0-16) -> the model's inputs: ``(n, 32, 32, 1)`` float32 in [-1, 1].

    >>> to_inputs(np.full((1, 8, 8), 16)).shape, float(to_inputs(np.zeros((1, 8, 8))).min())
    ((1, 32, 32, 1), -1.0)
    """
    images = np.asarray(images, "float32")
    if images.ndim != 3 or images.shape[1:] != (8, 8):
        raise ValueError(f"to_inputs: `images` must be (n, 8, 8); got shape {images.shape}.")
    large = np.repeat(np.repeat(images, UPSAMPLE, axis=1), UPSAMPLE, axis=2)
    return (large / 8.0 - 1.0)[..., None]


def digits_split(
    seed: int = 0, caller: str = "digits_split"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The digits split by a permutation seeded with ``seed``: ``(train_x, train_y,
    test_x, test_y)``, inputs as :func:`to_inputs` makes them, 1,437 to train, 360 held out.

    Raises:
        ImportError: without scikit-learn (see :func:`load_digits`).

    Example:

    >>> train_x, train_y, test_x, test_y = digits_split(seed=0)  # doctest: +SKIP
    >>> train_x.shape, test_x.shape  # doctest: +SKIP
    ((1437, 32, 32, 1), (360, 32, 32, 1))
    """
    images, labels = load_digits(caller)
    order = np.random.default_rng(seed).permutation(len(labels))
    test, train = order[:HELD_OUT], order[HELD_OUT:]
    inputs = to_inputs(images)
    return inputs[train], labels[train], inputs[test], labels[test]
