"""PosENet's metrics: Spearman correlation (SPC) and mean absolute error (MAE) per image."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

# A prediction whose values span less than this (maps live in [0, 1]) is treated as constant:
# float rounding in an otherwise constant map would give Spearman an arbitrary ranking.
CONSTANT_TOLERANCE = 1e-6


def _as_maps(values: Any, who: str, argument: str) -> np.ndarray:
    """``values`` as float64 ``(images, height, width)``; a trailing axis of size 1 is dropped."""
    if hasattr(values, "numpy") and not isinstance(values, np.ndarray):
        from keras import ops  # only for backend tensors; numpy needs no Keras

        values = ops.convert_to_numpy(values)
    array = np.asarray(values, dtype=np.float64)
    if array.ndim == 4 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3 or 0 in array.shape:
        raise ValueError(
            f"{who}: `{argument}` must be a map (height, width) or a batch of maps "
            f"(images, height, width) or (images, height, width, 1); received shape "
            f"{np.shape(values)}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{who}: `{argument}` holds NaN or infinite values")
    return array


def _paired(prediction: Any, target: Any, who: str) -> tuple[np.ndarray, np.ndarray]:
    prediction = _as_maps(prediction, who, "prediction")
    target = _as_maps(target, who, "target")
    if target.shape[0] == 1 and target.shape[1:] == prediction.shape[1:]:
        target = np.broadcast_to(target, prediction.shape)
    if target.shape != prediction.shape:
        raise ValueError(
            f"{who}: `target` must be one map of the prediction's size or one per image; "
            f"received prediction maps {prediction.shape} and target maps {target.shape}"
        )
    return prediction, target


def spc(
    prediction: Any,
    target: Any,
    return_flag: bool = False,
    tolerance: float = CONSTANT_TOLERANCE,
) -> float | tuple[float, bool]:
    """Spearman correlation between predicted and target maps, per image, averaged.

    Each image's prediction is ranked against the target over all its pixels
    with ``scipy.stats.spearmanr``, and the correlations are averaged over the
    images. Spearman's correlation is undefined for a constant prediction
    (there is nothing to rank); PosENet's convention is to count such an image
    as 0 (no position information) and flag it. An image counts as constant
    when its values span at most ``tolerance``.

    Args:
        prediction: one map ``(height, width)`` or a batch ``(images, height,
            width)`` / ``(images, height, width, 1)``; numpy or backend tensors.
        target: one map of the same size (used for every image) or one per image.
            It must not be constant.
        return_flag: also return whether any image's prediction was constant.
        tolerance: largest value span treated as constant.

    Returns:
        The mean SPC, a float in [-1, 1]; with ``return_flag``, the pair
        ``(spc, flagged)`` where ``flagged`` is True when at least one image was
        constant and scored 0.

    Raises:
        ValueError: for malformed shapes, NaN/inf values, or a constant target.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc import probe
        >>> target = probe.position_patterns(8, 8)["H"]
        >>> round(probe.spc(target**3, target), 6)  # any increasing map ranks the same
        1.0
        >>> round(probe.spc(1.0 - target, target), 6)
        -1.0
        >>> probe.spc(np.full((8, 8), 0.5), target, return_flag=True)
        (0.0, True)

    Reference: Islam, Jia and Bruce, ICLR 2020, section 3 (SPC and MAE).
    """
    who = "probe.spc"
    prediction, target = _paired(prediction, target, who)
    if np.any(np.ptp(target.reshape(target.shape[0], -1), axis=1) <= 0.0):
        raise ValueError(f"{who}: `target` is constant; a correlation with it is undefined")
    scores, flagged = [], False
    for predicted, wanted in zip(prediction, target):
        if np.ptp(predicted) <= tolerance:
            scores.append(0.0)
            flagged = True
            continue
        scores.append(float(stats.spearmanr(predicted.ravel(), wanted.ravel()).statistic))
    value = float(np.mean(scores))
    return (value, flagged) if return_flag else value


def mae(prediction: Any, target: Any) -> float:
    """Mean absolute error between predicted and target maps, over every pixel of every image.

    Args:
        prediction: one map ``(height, width)`` or a batch ``(images, height,
            width)`` / ``(images, height, width, 1)``.
        target: one map of the same size (used for every image) or one per image.

    Returns:
        The mean absolute error, a float.

    Raises:
        ValueError: for malformed shapes or NaN/inf values.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc import probe
        >>> target = probe.position_patterns(4, 5)["H"]
        >>> round(probe.mae(np.full((2, 4, 5), 0.5), target), 6)
        0.3
    """
    prediction, target = _paired(prediction, target, "probe.mae")
    return float(np.mean(np.abs(prediction - target)))
