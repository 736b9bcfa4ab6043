"""Relative position index functions: clip (Shaw), log buckets (T5, DeBERTa), piecewise (iRPE),
multi-scale.

Every function maps an integer tensor of relative distances ``r = j - i``
(key position minus query position, see `relative_positions`) to an int32
tensor of row indices into a finite table, so a learned table works for any
sequence length. They use ``keras.ops`` only and accept Python ints, numpy
arrays and tensors of every backend, eager or traced.

The log and piecewise functions are defined by float32 formulas. Rather than
evaluating ``log`` inside the graph (where ``log(0)`` must be masked and where a
one-ulp difference between backends or devices can move a distance to the
neighbouring bucket), the float32 formula is evaluated once, in numpy, to find
the smallest distance of every bucket; the graph then only compares integers
with those thresholds. The result equals the published float32 algorithms
(checked for every ``|r| <= 10,000`` in the tests) and is identical on every
backend and device, and it exports to ONNX with plain comparisons.

Examples:

    >>> import keras
    >>> from keras_posenc.layers import relative_index
    >>> r = relative_index.relative_positions(2, 4)
    >>> print(keras.ops.convert_to_numpy(r))
    [[ 0  1  2  3]
     [-1  0  1  2]]
    >>> print(keras.ops.convert_to_numpy(relative_index.clip_index(r, max_distance=1)))
    [[1 2 2 2]
     [0 1 2 2]]
"""

from __future__ import annotations

import functools
import math
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import backend
from keras_posenc.layers._checks import check_bool, check_int

__all__ = [
    "clip_index",
    "deberta_index",
    "log_bucket_index",
    "multiscale_index",
    "multiscale_table_size",
    "piecewise_index",
    "relative_positions",
]


# --------------------------------------------------------------------------- validation


def _check_length(caller: str, name: str, value: Any) -> Any:
    """A sequence length: a non-negative Python int, or an integer scalar tensor."""
    if isinstance(value, bool) or value is None:
        raise TypeError(
            f"{caller}: `{name}` must be a non-negative integer or an integer scalar tensor, "
            f"got {value!r}."
        )
    if isinstance(value, int | np.integer):
        return check_int(caller, name, value, minimum=0)
    if isinstance(value, float | str):
        raise TypeError(
            f"{caller}: `{name}` must be a non-negative integer or an integer scalar tensor, "
            f"got {value!r} (type {type(value).__name__})."
        )
    shape = tuple(getattr(value, "shape", ()))
    try:
        dtype = keras.backend.standardize_dtype(value.dtype)
    except (AttributeError, ValueError):  # not a tensor, or a dtype Keras does not know
        dtype = str(getattr(value, "dtype", type(value).__name__))
    if shape != () or "int" not in dtype:
        raise TypeError(
            f"{caller}: `{name}` must be a non-negative integer or an integer scalar tensor, "
            f"got a tensor of shape {shape} and dtype {dtype}."
        )
    return ops.cast(value, "int32")


def _as_int32(r: Any) -> Any:
    return ops.cast(ops.convert_to_tensor(r), "int32")


# --------------------------------------------------------------------------- distances


def relative_positions(query_length: Any, key_length: Any, offset: Any = 0) -> Any:
    """The (query_length, key_length) int32 matrix of distances ``r[i, j] = j - (i + offset)``.

    Args:
        query_length: number of queries, a non-negative int or an integer scalar tensor.
        key_length: number of keys, likewise.
        offset: position of the first query among the keys (an int or integer
            scalar tensor). 0 when queries and keys are the same sequence; the
            cache index when decoding step by step, so the one new query at
            position ``offset`` sees ``r = j - offset``.

    Returns:
        An int32 tensor of shape ``(query_length, key_length)``.

    Examples:

        >>> import keras
        >>> print(keras.ops.convert_to_numpy(relative_positions(1, 4, offset=2)))
        [[-2 -1  0  1]]
    """
    return _relative_positions("relative_positions", query_length, key_length, offset)


def _relative_positions(caller: str, query_length: Any, key_length: Any, offset: Any) -> Any:
    """`relative_positions` whose errors name ``caller`` (a layer, when a layer calls it)."""
    query_length, key_length = check_block(caller, query_length, key_length, offset)
    queries = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    keys = ops.arange(key_length, dtype="int32")
    return keys[None, :] - queries[:, None]


def check_block(caller: str, query_length: Any, key_length: Any, offset: Any) -> tuple:
    """The checked lengths of a (q_len, k_len) block (ints stay ints); checks `offset`."""
    query_length = _check_length(caller, "query_length", query_length)
    key_length = _check_length(caller, "key_length", key_length)
    if isinstance(offset, bool) or isinstance(offset, float | str) or offset is None:
        raise TypeError(
            f"{caller}: `offset` must be an integer or an integer scalar tensor, got {offset!r}."
        )
    return query_length, key_length


def distances_in_order(query_length: Any, key_length: Any, offset: Any = 0) -> Any:
    """Every distance of a (query_length, key_length) block, smallest first.

    ``r = -(offset + query_length - 1) ... key_length - 1 - offset``, a vector of
    ``query_length + key_length - 1``: the diagonals of `relative_positions`, so
    ``relative_positions(...)[i, j] == distances_in_order(...)[j - i + query_length - 1]``.
    Plain arithmetic on the lengths: ints stay ints (JAX needs a concrete size
    for ``arange``), symbolic scalars stay tensors.

    Examples:

        >>> import keras
        >>> from keras_posenc.layers import relative_index
        >>> print(keras.ops.convert_to_numpy(relative_index.distances_in_order(2, 3)))
        [-1  0  1  2]
        >>> print(keras.ops.convert_to_numpy(relative_index.distances_in_order(1, 4, offset=3)))
        [-3 -2 -1  0]
    """
    query_length, key_length = check_block("distances_in_order", query_length, key_length, offset)
    count = query_length + key_length - 1
    first = ops.cast(offset, "int32") + ops.cast(query_length, "int32") - 1
    return ops.arange(count, dtype="int32") - first


def toeplitz(diagonals: Any, query_length: int, key_length: int) -> Any:
    """``out[..., i, j] = diagonals[..., j - i + query_length - 1]``, a (..., q_len, k_len) tensor.

    A table read through a relative index depends on ``j - i`` only, so the
    (q_len, k_len) result of gathering it is a Toeplitz matrix of its
    ``q_len + k_len - 1`` diagonals (`distances_in_order`). Computed by the
    backend kernel `keras_posenc.backend.toeplitz` (one gather by default; by
    runs of keys on TensorFlow, where that was measured faster).

    Args:
        diagonals: a tensor whose last axis has ``query_length + key_length - 1``
            entries (e.g. ``(heads, q_len + k_len - 1)``), whose other axes are
            static.
        query_length: the number of rows, a Python int >= 1.
        key_length: the number of columns, a Python int >= 1.

    Examples:

        >>> import keras
        >>> from keras_posenc.layers import relative_index
        >>> print(keras.ops.convert_to_numpy(relative_index.toeplitz([1, 2, 3, 4], 2, 3)))
        [[2 3 4]
         [1 2 3]]
    """
    query_length = check_int("toeplitz", "query_length", query_length, minimum=1)
    key_length = check_int("toeplitz", "key_length", key_length, minimum=1)
    diagonals = ops.convert_to_tensor(diagonals)
    count = diagonals.shape[-1] if len(diagonals.shape) else None
    if count is not None and count != query_length + key_length - 1:
        raise ValueError(
            f"toeplitz: the last axis of `diagonals` must have query_length + key_length - 1 "
            f"= {query_length + key_length - 1} entries, got shape {tuple(diagonals.shape)}."
        )
    return backend.toeplitz(diagonals, query_length, key_length)


# --------------------------------------------------------------------------- clip (Shaw)


def clip_index(r: Any, max_distance: int) -> Any:
    """Shaw et al.'s clipped distance: ``clip(r, -k, k) + k`` with ``k = max_distance``.

    Args:
        r: integer tensor (or array / int) of relative distances.
        max_distance: ``k >= 0``; distances beyond ``±k`` share the end rows.

    Returns:
        int32 indices in ``[0, 2k]`` (a table of ``2k + 1`` rows), same shape as ``r``.

    Examples:

        >>> import keras
        >>> print(keras.ops.convert_to_numpy(clip_index([-5, -1, 0, 1, 5], max_distance=2)))
        [0 1 2 3 4]

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
    """
    k = check_int("clip_index", "max_distance", max_distance, minimum=0)
    return ops.clip(_as_int32(r), -k, k) + k


# --------------------------------------------------------------------------- thresholds


def _first_reaching(value: Any, level: int, low: int, high: int) -> int:
    """The smallest integer n in [low, high] with value(n) >= level (value is non-decreasing)."""
    if value(high) < level:
        raise AssertionError(f"threshold search: level {level} not reached by {high}")
    while low < high:
        middle = (low + high) // 2
        if value(middle) >= level:
            high = middle
        else:
            low = middle + 1
    return low


def _count_reached(n: Any, thresholds: tuple[int, ...]) -> Any:
    """For each element of ``n``, how many of the sorted ``thresholds`` it reaches.

    A sum of comparisons rather than ``ops.digitize``: the same on every backend,
    no (…, len(thresholds)) intermediate, and exportable with plain ONNX ops.
    """
    count = ops.zeros_like(n)
    for threshold in thresholds:
        count = count + ops.cast(ops.greater_equal(n, threshold), "int32")
    return count


@functools.lru_cache(maxsize=64)
def _t5_thresholds(num_buckets: int, max_distance: int, max_exact: int) -> tuple[int, ...]:
    """Smallest distance n of each log bucket ``max_exact + 1 .. num_buckets - 1``.

    ``num_buckets`` is the per-direction count. The bucket of ``n >= max_exact``
    is T5's float32 ``max_exact + int(log(n / max_exact) / log(max_distance /
    max_exact) * (num_buckets - max_exact))``, capped at ``num_buckets - 1``.
    """
    log_ratio = np.float32(math.log(max_distance / max_exact))
    scale = np.float32(num_buckets - max_exact)

    def bucket(n: int) -> int:
        ratio = np.float32(n) / np.float32(max_exact)
        return max_exact + int(np.log(ratio) / log_ratio * scale)

    # The formula reaches num_buckets at n = max_distance (exactly, in real numbers),
    # so every capped level is reached well before 2 * max_distance + 2.
    high = 2 * max_distance + 2
    return tuple(
        _first_reaching(bucket, level, max_exact, high)
        for level in range(max_exact + 1, num_buckets)
    )


@functools.lru_cache(maxsize=64)
def _piecewise_thresholds(beta: int) -> tuple[int, tuple[int, ...]]:
    """(g at the first distance beyond alpha, the first distance of every later level)."""
    alpha = np.float32(beta / 2)
    log_ratio = np.float32(math.log((4 * beta) / (beta / 2)))  # ln(gamma / alpha) = ln(8)
    width = np.float32(beta - beta / 2)

    def level(n: int) -> int:
        value = alpha + np.log(np.float32(n) / alpha) / log_ratio * width
        return min(beta, int(np.round(value)))  # np.round is half-to-even, like torch.round

    first = beta // 2 + 1  # the smallest integer strictly greater than alpha = beta / 2
    start = level(first)
    high = 8 * beta + 2  # g reaches beta at |x| = gamma = 4 * beta
    return start, tuple(_first_reaching(level, v, first, high) for v in range(start + 1, beta + 1))


# --------------------------------------------------------------------------- log (T5)


def _log_arguments(
    caller: str, num_buckets: Any, max_distance: Any, bidirectional: Any
) -> tuple[int, int]:
    """Validates T5's arguments; returns (buckets per direction, max_exact)."""
    num_buckets = check_int(caller, "num_buckets", num_buckets)
    max_distance = check_int(caller, "max_distance", max_distance, minimum=0)
    bidirectional = check_bool(caller, "bidirectional", bidirectional)
    minimum = 4 if bidirectional else 2
    if num_buckets < minimum:
        kind = "bidirectional" if bidirectional else "unidirectional"
        raise ValueError(
            f"{caller}: `num_buckets` must be >= {minimum} for {kind} log buckets "
            f"(at least one exact and one log bucket per direction), got {num_buckets}."
        )
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_direction // 2
    if max_distance <= max_exact:
        # T5 divides by log(max_distance / max_exact): it must be positive.
        raise ValueError(
            f"{caller}: `max_distance` must be > {max_exact} (the exact range for "
            f"num_buckets={num_buckets}, bidirectional={bidirectional}), got {max_distance}."
        )
    return per_direction, max_exact


def log_bucket_index(
    r: Any, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True
) -> Any:
    """T5's ``_relative_position_bucket``: exact buckets near 0, log-spaced beyond.

    Follows the published algorithm with T5's convention ``r = j - i``
    (memory position minus query position). Bidirectional: half the buckets per
    sign, keys after the query (``r > 0``) get the upper half; within a half,
    ``|r| < max_exact = half // 2`` has its own bucket, larger distances are
    log-spaced up to ``max_distance`` and clamped to the half's last bucket.
    Unidirectional (causal): ``r > 0`` maps to bucket 0 and ``-r`` uses all
    buckets. The log formula is T5's, in float32, so indices equal T5's (see the
    module docstring for how it is evaluated).

    Args:
        r: integer tensor of relative distances ``j - i``.
        num_buckets: table size; >= 4 when bidirectional, >= 2 otherwise.
        max_distance: distances at or beyond it share the last bucket; must be
            greater than ``max_exact`` (T5's log of ``max_distance / max_exact``).
        bidirectional: whether keys on both sides get their own buckets.

    Returns:
        int32 indices in ``[0, num_buckets)``, same shape as ``r``.

    Examples:

        >>> import keras
        >>> r = [-200, -20, -7, 0, 7, 20, 200]
        >>> print(keras.ops.convert_to_numpy(log_bucket_index(r, 32, 128)))
        [15 10  7  0 23 26 31]
        >>> print(keras.ops.convert_to_numpy(log_bucket_index(r, 32, 128, bidirectional=False)))
        [31 17  7  0  0  0  0]

    Reference:
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020 (``_relative_position_bucket`` in
        Mesh TensorFlow and Hugging Face ``modeling_t5.py``).
    """
    per_direction, max_exact = _log_arguments(
        "log_bucket_index", num_buckets, max_distance, bidirectional
    )
    thresholds = _t5_thresholds(per_direction, max_distance, max_exact)
    r = _as_int32(r)
    if bidirectional:
        offset = ops.cast(ops.greater(r, 0), "int32") * per_direction
        n = ops.abs(r)
    else:
        offset = ops.zeros_like(r)
        n = ops.maximum(-r, 0)
    large = max_exact + _count_reached(n, thresholds)
    return offset + ops.where(ops.less(n, max_exact), n, large)


# --------------------------------------------------------------------------- log (DeBERTa)


def _deberta_arguments(caller: str, position_buckets: Any, max_position: Any) -> tuple[int, int]:
    """Validates DeBERTa's arguments; returns them as ints."""
    position_buckets = check_int(caller, "position_buckets", position_buckets, minimum=4)
    middle = position_buckets // 2
    max_position = check_int(caller, "max_position", max_position, minimum=1)
    if max_position - 1 <= middle:
        # DeBERTa divides by log((max_position - 1) / middle): it must be positive.
        raise ValueError(
            f"{caller}: `max_position` must be > {middle + 1} (position_buckets // 2 + 1, "
            f"for position_buckets={position_buckets}), got {max_position}."
        )
    return position_buckets, max_position


@functools.lru_cache(maxsize=64)
def _deberta_thresholds(position_buckets: int, max_position: int) -> tuple[int, ...]:
    """Smallest distance n of each log level ``middle + 1 .. position_buckets``.

    The level of ``n > middle = position_buckets // 2`` is DeBERTa's float32 ``middle +
    ceil(log(n / middle) * (middle - 1) / log((max_position - 1) / middle))`` (the order
    of operations of keras-hub's ``DisentangledSelfAttention``); from ``position_buckets``
    on the index is clipped, so the levels stop there.
    """
    middle = position_buckets // 2
    # float32 throughout, as keras-hub and Hugging Face evaluate it (a float64 log rounded
    # to float32 moved a distance at an exact level, n = 11 for (4, 12), one bucket on).
    log_ratio = np.log(np.float32(max_position - 1) / np.float32(middle))
    scale = np.float32(middle - 1)

    def level(n: int) -> int:
        ratio = np.log(np.float32(n) / np.float32(middle))
        return middle + int(np.ceil(ratio * scale / log_ratio))

    # In real numbers the last level is passed beyond middle * ((max_position - 1) / middle)
    # ** ((position_buckets - middle - 1) / (middle - 1)): max_position - 1 for an even
    # position_buckets, farther for an odd one; twice that bounds the search.
    exponent = (position_buckets - middle - 1) / (middle - 1)
    high = 2 * math.ceil(middle * ((max_position - 1) / middle) ** exponent) + 4
    return tuple(
        _first_reaching(level, v, middle + 1, high) for v in range(middle + 1, position_buckets + 1)
    )


def deberta_index(r: Any, position_buckets: int = 256, max_position: int = 512) -> Any:
    """DeBERTa v2/v3's log-bucketed relative position: a row of its ``2 * position_buckets`` table.

    DeBERTa measures ``i - j`` (query minus key), ``-r`` in our convention. Distances up
    to ``middle = position_buckets // 2`` keep their own bucket; beyond it the bucket is
    ``sign * (middle + ceil(log(|d| / middle) * (middle - 1) / log((max_position - 1) /
    middle)))``; the row is the bucket plus ``position_buckets``, clipped to ``[0, 2 *
    position_buckets)``. Both of DeBERTa's relative terms read this row for the pair
    (query ``i``, key ``j``): content-to-position with the query's content,
    position-to-content with the key's (`DisentangledSelfAttention`). The log formula is
    evaluated in float32 once, in numpy, for the thresholds (see the module docstring), in
    keras-hub's order of operations. For DeBERTa's (256, 512) every distance up to 10,000
    gets the row of keras-hub's and of Hugging Face's function; for other sizes those two
    orders of operations (multiply, then divide by the log; or divide, then multiply) can
    round a distance that lies exactly on a level's boundary to neighbouring rows, and
    keras-hub's also depends on the backend's float32 log (for (4, 12) TensorFlow's puts
    the distance 11 a row away from JAX's and PyTorch's, which agree with this function).

    Args:
        r: integer tensor of relative distances ``j - i``.
        position_buckets: DeBERTa's ``position_buckets`` (256 in v2 and v3): the table
            has twice as many rows; at least 4.
        max_position: DeBERTa's ``max_relative_positions`` (its ``max_position_embeddings``,
            512): the distance whose bucket is the last before clipping; greater than
            ``position_buckets // 2 + 1``.

    Returns:
        int32 indices in ``[0, 2 * position_buckets)``, same shape as ``r``.

    Examples:

        >>> import keras
        >>> r = [-1000, -200, -128, -1, 0, 1, 128, 200, 1000]
        >>> print(keras.ops.convert_to_numpy(deberta_index(r)))
        [511 425 384 257 256 255 128  87   0]

    Reference:
        He, Liu, Gao, Chen, "DeBERTa: Decoding-enhanced BERT with Disentangled
        Attention", ICLR 2021; He, Gao, Chen, "DeBERTaV3", ICLR 2023 (log buckets as in
        keras-hub's ``DisentangledSelfAttention`` and Hugging Face's ``modeling_deberta_v2.py``).
    """
    position_buckets, max_position = _deberta_arguments(
        "deberta_index", position_buckets, max_position
    )
    middle = position_buckets // 2
    thresholds = _deberta_thresholds(position_buckets, max_position)
    d = -_as_int32(r)  # DeBERTa's query minus key
    n = ops.abs(d)
    bucket = ops.where(ops.less_equal(n, middle), n, middle + _count_reached(n, thresholds))
    signed = ops.where(ops.less(d, 0), -bucket, bucket)
    return ops.clip(signed + position_buckets, 0, 2 * position_buckets - 1)


# --------------------------------------------------------------------------- piecewise (iRPE)


def piecewise_index(r: Any, num_buckets: int) -> Any:
    """iRPE's piecewise index ``g(r) + beta``: exact near 0, logarithmic beyond, clamped.

    With ``beta = num_buckets // 2``, ``alpha = beta / 2``, ``gamma = 4 * beta``
    (iRPE's ratio 1:2:8)::

        g(x) = round(x)                                        if |x| <= alpha
        g(x) = sign(x) * min(beta, round(alpha + ln(|x| / alpha)
                                         / ln(gamma / alpha) * (beta - alpha)))  otherwise

    evaluated in float32 like iRPE. ``round`` is half-to-even (``torch.round``,
    which iRPE uses, and ``numpy.round`` agree); exact ties occur, e.g.
    ``num_buckets=6`` at ``|x| = 6`` gives 2.5 -> 2.

    Args:
        r: integer tensor of relative distances.
        num_buckets: >= 2; the table has ``2 * (num_buckets // 2) + 1`` rows
            (an odd ``num_buckets`` uses all rows, an even one adds one).

    Returns:
        int32 indices in ``[0, 2 * beta]``, same shape as ``r``.

    Examples:

        >>> import keras
        >>> r = [-100, -9, -3, -1, 0, 1, 3, 9, 100]
        >>> print(keras.ops.convert_to_numpy(piecewise_index(r, num_buckets=8)))
        [0 1 2 3 4 5 6 7 8]

    Reference:
        Wu et al., "Rethinking and Improving Relative Position Encoding for
        Vision Transformer", ICCV 2021 (``piecewise_index`` in ``irpe.py``).
    """
    num_buckets = check_int("piecewise_index", "num_buckets", num_buckets, minimum=2)
    beta = num_buckets // 2
    start, thresholds = _piecewise_thresholds(beta)
    r = _as_int32(r)
    n = ops.abs(r)
    beyond = start + _count_reached(n, thresholds)
    # Integers with |x| <= alpha = beta / 2 are exactly |x| <= beta // 2.
    g = ops.where(ops.less_equal(n, beta // 2), n, beyond)
    return ops.sign(r) * g + beta


# --------------------------------------------------------------------------- multi-scale


def multiscale_table_size(scale: int) -> int:
    """Rows of the table `multiscale_index` uses for ``scale``: ``2 * (scale // 2) + 1``.

    Examples:

        >>> [multiscale_table_size(s) for s in (5, 10, 20)]
        [5, 11, 21]
    """
    scale = check_int("multiscale_table_size", "scale", scale, minimum=2)
    return 2 * (scale // 2) + 1


def multiscale_index(r: Any, scale: int) -> Any:
    """One scale of the multi-scale index: bins of width ``h = scale // 2``, clamped.

    ``clip(floor(r / h), -h, h) + h``. Bin ``b`` (``-h <= b <= h``) holds the
    distances ``b * h .. b * h + h - 1``, and the two end bins also hold every
    distance beyond them, so any length maps into the table of
    `multiscale_table_size` (``2h + 1``) rows. The seed lecture's formula
    ``r // h + h`` is the unclamped version: it leaves the table once
    ``|r| > h * h``. A small scale is a fine, short-range view; a large one
    a coarse, long-range view.

    Args:
        r: integer tensor of relative distances.
        scale: >= 2.

    Returns:
        int32 indices in ``[0, 2h]``, same shape as ``r``.

    Examples:

        >>> import keras
        >>> r = [-100, -5, -4, -1, 0, 1, 2, 5, 100]
        >>> print(keras.ops.convert_to_numpy(multiscale_index(r, scale=5)))
        [0 0 0 1 2 2 3 4 4]
    """
    scale = check_int("multiscale_index", "scale", scale, minimum=2)
    width = scale // 2
    return ops.clip(ops.floor_divide(_as_int32(r), width), -width, width) + width


# --------------------------------------------------------------------------- 2D grids
# The index of `Grid2DPositions` (position_schemes.py) and of the 2D biases
# (relative_position_2d.py, position_biases.py): pairs of cells of a grid.


def relative_index_2d(height: int, width: int) -> np.ndarray:
    """Index into a flattened ``(2H-1, 2W-1)`` table for every (query, key) pair of a grid.

    Positions are flattened row-major; entry ``[q, k]`` for query ``(i, j)`` and
    key ``(i', j')`` is ``(i - i' + H - 1) * (2W - 1) + (j - j' + W - 1)``.

    Returns:
        int32 array of shape ``(H * W, H * W)``.

    Examples:

        >>> print(relative_index_2d(1, 2))  # a 1 x 2 grid: a table of 1 x 3 offsets
        [[1 0]
         [2 1]]
    """
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    rows, cols = rows.reshape(-1), cols.reshape(-1)
    row_offset = rows[:, None] - rows[None, :] + height - 1
    col_offset = cols[:, None] - cols[None, :] + width - 1
    return (row_offset * (2 * width - 1) + col_offset).astype("int32")


def relative_index_2d_tensor(height: Any, width: Any) -> Any:
    """`relative_index_2d` for a grid whose sides are tensors (known at run time).

    The same entries, computed with ``keras.ops`` in the graph, flattened to
    ``(H * W * H * W,)``: what a model built for images of any size needs when the
    map's size is unknown until the call (a traced graph, an exported artifact).
    Tested equal to `relative_index_2d` (tests/zoo/test_any_size.py).
    """
    rows, cols = ops.meshgrid(ops.arange(height), ops.arange(width), indexing="ij")
    rows, cols = ops.reshape(rows, (-1,)), ops.reshape(cols, (-1,))
    row_offset = ops.expand_dims(rows, 1) - ops.expand_dims(rows, 0) + height - 1
    col_offset = ops.expand_dims(cols, 1) - ops.expand_dims(cols, 0) + width - 1
    index = row_offset * (2 * width - 1) + col_offset
    return ops.reshape(ops.cast(index, "int32"), (-1,))
