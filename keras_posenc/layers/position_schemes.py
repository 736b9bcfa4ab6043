"""Position schemes: how a relative distance becomes a row of a learned table.

A position scheme owns everything the relative layers need to know about one
way of indexing relative positions: the index function, the table size, the
intervals of distances each row covers (and whether they are contiguous, which
the value term of ``relative="keys_values"`` needs), whether Music
Transformer's skew applies, which relative modes it supports, and the checks of
its arguments. The layers take one as ``position=``: a scheme, its serialised
config, or a registered name (`get`, `names`; ``"t5"`` is T5's bidirectional
``LogBuckets(32, 128)``). `register_scheme` adds a name. See "Architecture" in
docs/development.md for how to add a scheme.

Examples:

    >>> import keras
    >>> from keras_posenc import layers
    >>> from keras_posenc.layers import position_schemes
    >>> scheme = layers.LogBuckets(num_buckets=8, max_distance=20)
    >>> scheme.table_size, scheme.contiguous
    (8, True)
    >>> print(keras.ops.convert_to_numpy(scheme.index([-30, -1, 0, 1, 30])))
    [3 1 0 5 7]
    >>> attention = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position=scheme)
    >>> attention.position == scheme
    True
    >>> position_schemes.get("t5")
    LogBuckets(num_buckets=32, max_distance=128, bidirectional=True)
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from keras_posenc.layers import relative_index
from keras_posenc.layers._checks import check_int, grid_size
from keras_posenc.layers._description import Description

__all__ = [
    "ClipPositions",
    "DebertaBuckets",
    "Grid2DPositions",
    "LogBuckets",
    "MultiScaleBins",
    "PiecewiseBuckets",
    "PositionScheme",
    "get",
    "names",
    "register_scheme",
]

#: The relative modes of `MultiHeadRelativeAttention` that read a position scheme (its
#: fourth, ``relative=None``, adds no relative term). The one list of them.
RELATIVE_MODES = ("keys_values", "keys", "bias")


class PositionScheme(Description):
    """Base class: a map from relative distances ``r = j - i`` to rows of a table.

    A subclass sets ``modes`` (the relative modes it supports), implements
    ``_check`` (validates and returns its arguments, naming the caller), `index`,
    `table_size` and ``_saturation`` (a distance from which on the rows no longer
    change, bounding the contiguity check), and registers itself for
    serialisation (``keras.saving.register_keras_serializable``) and, if it has a
    name, with `register_scheme`.
    """

    modes: tuple[str, ...] = RELATIVE_MODES
    #: Whether Music Transformer's skew can place its key logits (a row per distance
    #: in order, `has_row_per_distance`; then ``max_distance`` is the row of r = 0).
    skewable: bool = False
    #: Whether the bias is computed from the distance (`position_biases.PositionBias`)
    #: rather than read from a learned table.
    computed: bool = False
    #: Whether the result depends on ``j - i`` only (a Toeplitz matrix per head).
    toeplitz: bool = True
    #: Whether it is defined for keys at or before the query only (attention with it
    #: then needs ``use_causal_mask=True``).
    causal_only: bool = False

    def __init__(self, **arguments: Any) -> None:
        self._arguments = self._check(type(self).__name__, **arguments)
        for name, value in self._arguments.items():
            setattr(self, name, value)

    @classmethod
    def _check(cls, caller: str, **arguments: Any) -> dict:
        raise NotImplementedError

    @classmethod
    def checked(cls, caller: str, **arguments: Any) -> PositionScheme:
        """The scheme, its arguments' errors naming ``caller`` (a layer)."""
        scheme = cls.__new__(cls)
        scheme._arguments = cls._check(caller, **arguments)
        for name, value in scheme._arguments.items():
            setattr(scheme, name, value)
        return scheme

    def index(self, r: Any) -> Any:
        """int32 rows in ``[0, table_size)`` for the integer distances ``r`` (same shape)."""
        raise NotImplementedError

    @property
    def table_size(self) -> int:
        """Rows of the table the index reads."""
        raise NotImplementedError

    def _saturation(self) -> int:
        raise NotImplementedError

    @functools.cached_property
    def contiguous(self) -> bool:
        """Whether every row covers one contiguous interval of distances.

        Checked on every distance up to where the rows stop changing. The value
        term of ``relative="keys_values"`` sums the attention weights of a row
        from their cumulative sum over the keys, which needs it.
        """
        span = self._saturation() + 1
        rows = keras.ops.convert_to_numpy(self.index(np.arange(-span, span + 1, dtype="int32")))
        for row in np.unique(rows):
            where = np.flatnonzero(rows == row)
            if where[-1] - where[0] + 1 != len(where):
                return False
        return True

    def has_row_per_distance(self, query_length: int, key_length: int, offset: Any) -> bool:
        """Whether the distances of these lengths each have their own row (the skew's need)."""
        return False

    def check_mode(self, caller: str, relative: str) -> None:
        """Raises unless ``relative`` is one of the modes this scheme supports."""
        if relative not in self.modes:
            supported = ", ".join(map(repr, self.modes)) or "none"
            raise ValueError(
                f"{caller}: `position={self!r}` does not support relative={relative!r} "
                f"(it supports: {supported})."
            )
        if relative == "keys_values" and not self.contiguous:
            raise ValueError(
                f"{caller}: relative='keys_values' needs every table row to cover a contiguous "
                f"interval of distances, and `position={self!r}` does not."
            )

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({arguments})"


@keras.saving.register_keras_serializable(package="keras_posenc")
class ClipPositions(PositionScheme):
    """Shaw et al.'s clipped distances: ``clip(r, -k, k) + k``, a table of ``2k + 1`` rows.

    Args:
        max_distance: ``k >= 0``; distances beyond ``±k`` share the end rows.

    Examples:

        >>> from keras_posenc.layers import ClipPositions
        >>> ClipPositions(max_distance=3).table_size
        7

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
    """

    skewable = True

    def __init__(self, max_distance: int = 16) -> None:
        super().__init__(max_distance=max_distance)

    @classmethod
    def _check(cls, caller: str, max_distance: Any = 16) -> dict:
        return {"max_distance": check_int(caller, "max_distance", max_distance, 0)}

    def index(self, r: Any) -> Any:
        return relative_index.clip_index(r, self.max_distance)

    @property
    def table_size(self) -> int:
        return 2 * self.max_distance + 1

    def _saturation(self) -> int:
        return self.max_distance + 1

    def has_row_per_distance(self, query_length: int, key_length: int, offset: Any) -> bool:
        # Rows needed: r = j - i - offset in [-(offset + q_len - 1), k_len - 1 - offset].
        # With a tensor offset (a cache index) 0 <= offset <= k_len - q_len holds.
        k = self.max_distance
        if isinstance(offset, int):
            return offset + query_length - 1 <= k and key_length - 1 - offset <= k
        return max(query_length, key_length) - 1 <= k


@keras.saving.register_keras_serializable(package="keras_posenc")
class LogBuckets(PositionScheme):
    """T5's buckets: exact near 0, log-spaced up to ``max_distance`` (`log_bucket_index`).

    Args:
        num_buckets: table rows; >= 4 when bidirectional, >= 2 otherwise.
        max_distance: distances from it on share the last bucket.
        bidirectional: whether keys before and after the query get their own buckets.

    Examples:

        >>> from keras_posenc.layers import LogBuckets
        >>> LogBuckets(num_buckets=32, max_distance=128).table_size
        32

    Reference:
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
    """

    def __init__(
        self, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True
    ) -> None:
        super().__init__(
            num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional
        )

    @classmethod
    def _check(
        cls, caller: str, num_buckets: Any = 32, max_distance: Any = 128, bidirectional: Any = True
    ) -> dict:
        relative_index._log_arguments(caller, num_buckets, max_distance, bidirectional)
        return {
            "num_buckets": int(num_buckets),
            "max_distance": int(max_distance),
            "bidirectional": bool(bidirectional),
        }

    def index(self, r: Any) -> Any:
        return relative_index.log_bucket_index(
            r, self.num_buckets, self.max_distance, self.bidirectional
        )

    @property
    def table_size(self) -> int:
        return self.num_buckets

    def _saturation(self) -> int:
        return 2 * self.max_distance + 2


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaBuckets(PositionScheme):
    """DeBERTa v2/v3's log buckets: exact up to ``position_buckets // 2``, log-spaced beyond
    (`relative_index.deberta_index`), a table of ``2 * position_buckets`` rows.

    The scheme of `DisentangledSelfAttention`; any relative mode of
    `MultiHeadRelativeAttention` reads it too (``relative="bias"``: a learned scalar per
    head and DeBERTa bucket).

    Args:
        position_buckets: DeBERTa's ``position_buckets`` (256); at least 4.
        max_position: DeBERTa's ``max_relative_positions`` (512), greater than
            ``position_buckets // 2 + 1``.

    Examples:

        >>> from keras_posenc.layers import DebertaBuckets
        >>> DebertaBuckets().table_size
        512
        >>> DebertaBuckets(position_buckets=8, max_position=40).table_size
        16

    Reference:
        He, Gao, Chen, "DeBERTaV3: Improving DeBERTa using ELECTRA-Style Pre-Training
        with Gradient-Disentangled Embedding Sharing", ICLR 2023.
    """

    def __init__(self, position_buckets: int = 256, max_position: int = 512) -> None:
        super().__init__(position_buckets=position_buckets, max_position=max_position)

    @classmethod
    def _check(cls, caller: str, position_buckets: Any = 256, max_position: Any = 512) -> dict:
        buckets, maximum = relative_index._deberta_arguments(caller, position_buckets, max_position)
        return {"position_buckets": buckets, "max_position": maximum}

    def index(self, r: Any) -> Any:
        return relative_index.deberta_index(r, self.position_buckets, self.max_position)

    @property
    def table_size(self) -> int:
        return 2 * self.position_buckets

    def _saturation(self) -> int:
        # The distance of the last log level: beyond it the index is clipped.
        return relative_index._deberta_thresholds(self.position_buckets, self.max_position)[-1]


@keras.saving.register_keras_serializable(package="keras_posenc")
class PiecewiseBuckets(PositionScheme):
    """iRPE's piecewise index (`piecewise_index`): ``2 * (num_buckets // 2) + 1`` rows.

    Args:
        num_buckets: >= 2; ``beta = num_buckets // 2``, ``alpha = beta / 2``,
            ``gamma = 4 * beta`` (iRPE's 1:2:8).

    Examples:

        >>> from keras_posenc.layers import PiecewiseBuckets
        >>> PiecewiseBuckets(num_buckets=8).table_size
        9

    Reference:
        Wu et al., "Rethinking and Improving Relative Position Encoding for
        Vision Transformer", ICCV 2021.
    """

    def __init__(self, num_buckets: int = 32) -> None:
        super().__init__(num_buckets=num_buckets)

    @classmethod
    def _check(cls, caller: str, num_buckets: Any = 32) -> dict:
        return {"num_buckets": check_int(caller, "num_buckets", num_buckets, 2)}

    def index(self, r: Any) -> Any:
        return relative_index.piecewise_index(r, self.num_buckets)

    @property
    def table_size(self) -> int:
        return 2 * (self.num_buckets // 2) + 1

    def _saturation(self) -> int:
        return 8 * (self.num_buckets // 2) + 2


@keras.saving.register_keras_serializable(package="keras_posenc")
class MultiScaleBins(PositionScheme):
    """One scale of the multi-scale index (`multiscale_index`): bins of width ``scale // 2``.

    `MultiScaleRelativePositionEmbedding` reads one table per scale; one scale
    alone is a scheme like the others, usable by every relative mode.

    Args:
        scale: >= 2; the table has ``2 * (scale // 2) + 1`` rows.

    Examples:

        >>> from keras_posenc.layers import MultiScaleBins
        >>> MultiScaleBins(scale=10).table_size
        11
    """

    def __init__(self, scale: int = 10) -> None:
        super().__init__(scale=scale)

    @classmethod
    def _check(cls, caller: str, scale: Any = 10) -> dict:
        return {"scale": check_int(caller, "scale", scale, 2)}

    def index(self, r: Any) -> Any:
        return relative_index.multiscale_index(r, self.scale)

    @property
    def table_size(self) -> int:
        return 2 * (self.scale // 2) + 1

    def _saturation(self) -> int:
        width = self.scale // 2
        return width * (width + 1)


@keras.saving.register_keras_serializable(package="keras_posenc")
class Grid2DPositions(PositionScheme):
    """2D offsets on an ``(height, width)`` grid: a ``(2h - 1) x (2w - 1)`` table (CoAtNet, Swin).

    Queries and keys are grid cells, flattened row-major; the row of a pair is
    ``(i - i' + h - 1) * (2w - 1) + (j - j' + w - 1)``. It indexes pairs of
    cells, not 1D distances, so `MultiHeadRelativeAttention` (which attends
    over sequences) supports none of its modes; `RelativePositionBias2D` reads it.

    Args:
        size: ``(height, width)`` of the grid (or one int for a square grid).

    Examples:

        >>> from keras_posenc.layers import Grid2DPositions
        >>> Grid2DPositions(size=(3, 4)).table_size
        35
    """

    modes = ()

    def __init__(self, size: Any = (7, 7)) -> None:
        super().__init__(size=size)

    @classmethod
    def _check(cls, caller: str, size: Any = (7, 7)) -> dict:
        return {"size": grid_size(size, caller, "size")}

    def get_config(self) -> dict:
        return {"size": list(self.size)}

    def index_matrix(self) -> np.ndarray:
        """The ``(h * w, h * w)`` int32 row of every (query cell, key cell) pair."""
        return relative_index.relative_index_2d(*self.size)

    def index(self, r: Any) -> Any:
        raise TypeError(f"{self!r} indexes pairs of grid cells (`index_matrix`), not 1D distances.")

    @property
    def table_size(self) -> int:
        height, width = self.size
        return (2 * height - 1) * (2 * width - 1)

    @functools.cached_property
    def contiguous(self) -> bool:
        return False


# --------------------------------------------------------------------------- names

# The one registry of scheme names: name -> a factory of the scheme, a scheme class (its
# constructor's defaults are the paper's) or a function of no arguments. The computed
# schemes register themselves in keras_posenc/layers/position_biases.py.
_REGISTRY: dict[str, Callable[[], PositionScheme]] = {}


def register_scheme(name: str, factory: Callable[[], PositionScheme]) -> None:
    """Lets the layers take ``position=name``: `get` then returns ``factory()``.

    Args:
        name: a lower-case identifier not registered yet (`names`).
        factory: a `PositionScheme` subclass (built with its defaults) or a
            function of no arguments that returns a scheme, such as
            ``functools.partial(LogBuckets, num_buckets=64)``.

    Examples:

        >>> import functools
        >>> from keras_posenc import layers
        >>> from keras_posenc.layers import position_schemes
        >>> position_schemes.register_scheme(
        ...     "example_clip_8", functools.partial(layers.ClipPositions, max_distance=8)
        ... )
        >>> layers.RelativePositionEmbedding(4, position="example_clip_8").position
        ClipPositions(max_distance=8)
    """
    caller = "register_scheme"
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ValueError(
            f"{caller}: `name` must be a lower-case identifier (such as 't5'), got {name!r}."
        )
    if name in _REGISTRY:
        raise ValueError(
            f"{caller}: `name` {name!r} is registered already (for {_REGISTRY[name]!r}); "
            f"pick another name."
        )
    if not callable(factory):
        raise TypeError(
            f"{caller}: `factory` must be a PositionScheme class or a function of no "
            f"arguments returning a scheme, got {factory!r}."
        )
    _REGISTRY[name] = factory


def names() -> tuple[str, ...]:
    """Every registered scheme name, sorted.

    Examples:

        >>> from keras_posenc.layers import position_schemes
        >>> {"shaw", "t5", "t5_decoder", "irpe", "alibi"} <= set(position_schemes.names())
        True
    """
    # The computed schemes of position_biases.py (which imports this module) are registered
    # by then: the package's __init__.py imports it, and any import of a layers module
    # runs the package's __init__.py first.
    return tuple(sorted(_REGISTRY))


def get(
    position: Any, caller: str = "position_schemes.get", argument: str = "position"
) -> PositionScheme:
    """The scheme ``position`` says: a `PositionScheme` (returned as it is), a registered
    name (`names`), or a scheme's serialised config (as a ``.keras`` file holds it).

    Errors name ``caller`` and its ``argument``: an unknown name is a ``ValueError``
    listing the names and the closest ones; anything else is a ``TypeError``.

    Examples:

        >>> from keras_posenc.layers import position_schemes
        >>> position_schemes.get("shaw")
        ClipPositions(max_distance=16)
        >>> position_schemes.get("t5_decoder")
        LogBuckets(num_buckets=32, max_distance=128, bidirectional=False)
        >>> position_schemes.get("tt5")
        Traceback (most recent call last):
        ...
        ValueError: position_schemes.get: `position` must be a PositionScheme, its config or ...
    """
    scheme = position
    if isinstance(position, str):
        known = names()
        if position not in known:
            close = difflib.get_close_matches(position.lower(), known, n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"{caller}: `{argument}` must be a PositionScheme, its config or one of the "
                f"registered names ({', '.join(map(repr, known))}), got {position!r}.{hint}"
            )
        scheme = _REGISTRY[position]()
    elif isinstance(position, dict):
        scheme = keras.saving.deserialize_keras_object(position)
    if not isinstance(scheme, PositionScheme):
        raise TypeError(
            f"{caller}: `{argument}` must be a PositionScheme (e.g. LogBuckets(num_buckets=32, "
            f"max_distance=128)), its config or a registered name (e.g. 't5'), got {position!r}"
            + ("." if scheme is position else f", which gives {scheme!r}.")
        )
    return scheme


register_scheme("shaw", ClipPositions)
register_scheme("clip", ClipPositions)
register_scheme("t5", LogBuckets)
register_scheme("log", LogBuckets)
# T5's decoder: under a causal mask no key follows its query, so every bucket serves r <= 0.
register_scheme("t5_decoder", functools.partial(LogBuckets, bidirectional=False))
register_scheme("deberta", DebertaBuckets)
register_scheme("irpe", PiecewiseBuckets)
register_scheme("piecewise", PiecewiseBuckets)
register_scheme("multiscale", MultiScaleBins)
register_scheme("grid2d", Grid2DPositions)
