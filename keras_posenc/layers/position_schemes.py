"""Position schemes: how a relative distance becomes a row of a learned table.

A position scheme owns everything the relative layers need to know about one
way of indexing relative positions: the index function, the table size, the
intervals of distances each row covers (and whether they are contiguous, which
the value term of ``relative="keys_values"`` needs), whether Music
Transformer's skew applies, which relative modes it supports, and the checks of
its arguments. The layers take one as ``position=``; the loose arguments
(``bucketing``, ``max_distance``, ``num_buckets``, ``bidirectional``) are still
accepted and build the same scheme (`from_arguments`). See "Architecture" in
docs/development.md for how to add a scheme.

Examples:

    >>> import keras
    >>> from keras_posenc import layers
    >>> scheme = layers.LogBuckets(num_buckets=8, max_distance=20)
    >>> scheme.table_size, scheme.contiguous
    (8, True)
    >>> print(keras.ops.convert_to_numpy(scheme.index([-30, -1, 0, 1, 30])))
    [3 1 0 5 7]
    >>> attention = layers.MultiHeadRelativeAttention(2, 4, relative="bias", position=scheme)
    >>> attention.position == scheme
    True
"""

from __future__ import annotations

import functools
from typing import Any

import keras
import numpy as np

from keras_posenc.layers import relative_index
from keras_posenc.layers._checks import check_bool, check_int
from keras_posenc.layers._description import Description
from keras_posenc.layers.relative_position_2d import grid_size, relative_index_2d

__all__ = [
    "ClipPositions",
    "Grid2DPositions",
    "LogBuckets",
    "MultiScaleBins",
    "PiecewiseBuckets",
    "PositionScheme",
    "from_arguments",
]

#: The relative modes of `MultiHeadRelativeAttention`.
RELATIVE_MODES = ("keys_values", "keys", "bias")

# The loose arguments' defaults in the layers (`from_arguments`).
_LOOSE_DEFAULTS = {"max_distance": 16, "num_buckets": 32, "bidirectional": True}


class PositionScheme(Description):
    """Base class: a map from relative distances ``r = j - i`` to rows of a table.

    A subclass sets ``bucketing`` (its name among the layers' loose
    ``bucketing`` values), ``modes`` (the relative modes it supports), and
    implements ``_check`` (validates and returns its arguments, naming the
    caller), `index`, `table_size` and ``_saturation`` (a distance from which
    on the rows no longer change, bounding the contiguity check).
    """

    bucketing: str = ""
    modes: tuple[str, ...] = RELATIVE_MODES
    #: The layers' loose arguments this scheme takes (`from_arguments`).
    loose_names: tuple[str, ...] = ()
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

    def loose_arguments(self) -> dict:
        """The layers' loose arguments that describe this scheme (for their configs)."""
        described = dict(_LOOSE_DEFAULTS, bucketing=self.bucketing)
        described.update({name: getattr(self, name) for name in self.loose_names})
        return described

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

    bucketing = "clip"
    loose_names = ("max_distance",)
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

    bucketing = "log"
    loose_names = ("num_buckets", "max_distance", "bidirectional")

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

    bucketing = "piecewise"
    loose_names = ("num_buckets",)

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

    bucketing = "multiscale"

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

    bucketing = "grid2d"
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
        return relative_index_2d(*self.size)

    def index(self, r: Any) -> Any:
        raise TypeError(f"{self!r} indexes pairs of grid cells (`index_matrix`), not 1D distances.")

    @property
    def table_size(self) -> int:
        height, width = self.size
        return (2 * height - 1) * (2 * width - 1)

    @functools.cached_property
    def contiguous(self) -> bool:
        return False


#: Every 1D scheme by its name (``bucketing``): the one allow-list of names, read by
#: `relative_index.bucket_index` / `relative_index.BUCKETINGS` too.
BY_NAME: dict[str, type[PositionScheme]] = {
    scheme.bucketing: scheme
    for scheme in (ClipPositions, LogBuckets, PiecewiseBuckets, MultiScaleBins)
}

#: The schemes the layers' loose ``bucketing`` argument names (those with loose arguments).
SCHEMES: dict[str, type[PositionScheme]] = {
    name: scheme for name, scheme in BY_NAME.items() if scheme.loose_names
}


def from_arguments(
    caller: str,
    bucketing: Any,
    max_distance: Any = 16,
    num_buckets: Any = 32,
    bidirectional: Any = True,
) -> PositionScheme:
    """The scheme the layers' loose arguments describe; errors name ``caller``."""
    if not isinstance(bucketing, str) or bucketing not in SCHEMES:
        hint = ""
        if bucketing == "multiscale":
            hint = (
                " (one scale alone is position=MultiScaleBins(scale); several use one "
                "table per scale: use MultiScaleRelativePositionEmbedding)"
            )
        raise ValueError(
            f"{caller}: `bucketing` must be one of {', '.join(map(repr, SCHEMES))}, "
            f"got {bucketing!r}{hint}."
        )
    check_bool(caller, "bidirectional", bidirectional)
    scheme = SCHEMES[bucketing]
    given = {
        "max_distance": max_distance,
        "num_buckets": num_buckets,
        "bidirectional": bidirectional,
    }
    return scheme.checked(caller, **{name: given[name] for name in scheme.loose_names})


def by_name(
    caller: str,
    bucketing: Any,
    max_distance: Any = 16,
    num_buckets: Any = 32,
    bidirectional: Any = True,
    scale: Any = None,
) -> PositionScheme:
    """The scheme named ``bucketing`` (any of `BY_NAME`), ``scale`` for ``"multiscale"``."""
    if not isinstance(bucketing, str) or bucketing not in BY_NAME:
        raise ValueError(
            f"{caller}: `bucketing` must be one of {', '.join(map(repr, BY_NAME))}, "
            f"got {bucketing!r}."
        )
    if bucketing != "multiscale":
        return from_arguments(caller, bucketing, max_distance, num_buckets, bidirectional)
    if scale is None:
        raise ValueError(f"{caller}: bucketing='multiscale' needs `scale` (an int >= 2).")
    return MultiScaleBins.checked(caller, scale=scale)


def resolve(
    caller: str,
    position: Any,
    bucketing: Any,
    max_distance: Any,
    num_buckets: Any,
    bidirectional: Any,
    defaults: dict,
) -> PositionScheme:
    """The scheme of a layer given ``position`` and/or the loose arguments.

    ``position`` may be a `PositionScheme` or its serialised form (a ``.keras``
    config). With it, the loose arguments must be their ``defaults`` (the
    layer's: a dict of the four) or describe the same scheme (a config written
    by the layer holds both).
    """
    if position is None:
        return from_arguments(caller, bucketing, max_distance, num_buckets, bidirectional)
    if isinstance(position, dict):
        position = keras.saving.deserialize_keras_object(position)
    if not isinstance(position, PositionScheme):
        raise TypeError(
            f"{caller}: `position` must be None or a PositionScheme (e.g. "
            f"LogBuckets(num_buckets=32, max_distance=128)), got {position!r}."
        )
    loose = {
        "bucketing": bucketing,
        "max_distance": max_distance,
        "num_buckets": num_buckets,
        "bidirectional": bidirectional,
    }
    described = position.loose_arguments()
    for name, value in loose.items():
        if value != defaults[name] and value != described[name]:
            raise ValueError(
                f"{caller}: pass either `position` or the loose `{name}`, not both: "
                f"{name}={value!r} does not describe position={position!r}."
            )
    return position


def set_position_attributes(
    layer: Any,
    scheme: Any,
    position: Any,
    bucketing: Any,
    max_distance: Any,
    num_buckets: Any,
    bidirectional: Any,
) -> None:
    """Sets ``layer.position`` (the resolved ``scheme``) and the loose attributes its config writes.

    If the user passed ``position``, the loose attributes describe the scheme, so the
    config's two agree; else the four loose arguments are kept as given, and the config
    is the one older releases wrote.
    """
    layer.position = scheme
    layer._position_given = position is not None
    described = (
        scheme.loose_arguments()
        if position is not None
        else dict(
            bucketing=bucketing,
            max_distance=max_distance,
            num_buckets=num_buckets,
            bidirectional=bidirectional,
        )
    )
    for name in ("bucketing", "max_distance", "num_buckets", "bidirectional"):
        setattr(layer, name, described[name])


def position_config(layer: Any) -> dict:
    """``position`` (None unless it was given) and the loose arguments, for ``get_config``."""
    position = layer.position if layer._position_given else None
    return dict(
        position=keras.saving.serialize_keras_object(position),
        bucketing=layer.bucketing,
        max_distance=layer.max_distance,
        num_buckets=layer.num_buckets,
        bidirectional=layer.bidirectional,
    )
