"""Learned relative position tables: T5-style biases and Shaw-style embeddings.

The layers here are called with lengths, not tensors:
``layer(query_length, key_length, offset=0)``, where each is a Python int or an
integer scalar tensor (``keras.ops.shape(x)[1]`` inside a traced function), so
one layer serves any sequence length, ``query_length != key_length`` and cached
decoding (``offset`` = position of the first query). Their weights depend only
on the constructor arguments; ``build()`` needs no input shape, and Keras calls
it on the first call (or ``.keras`` loading does), so save/load works like for
any layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import _attention, position_schemes, relative_index
from keras_posenc.layers._checks import check_int
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._memory import check_allocation

__all__ = [
    "MultiScaleRelativePositionEmbedding",
    "RelativePositionBias",
    "RelativePositionEmbedding",
]


def _static_length(value: Any) -> int | None:
    """A length as an int when it is known before running, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


class _RelativeTableLayer(keras.layers.Layer):
    """Shared plumbing: lengths in, a (query_length, key_length) index matrix out."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Keras refuses non-tensor positional arguments unless told otherwise (its
        # lookup layers do the same); these layers take Python int lengths.
        self._allow_non_tensor_positional_args = True

    def indices(self, query_length: Any, key_length: Any, offset: Any = 0) -> Any:
        raise NotImplementedError

    def compute_output_spec(self, query_length: Any, key_length: Any, offset: Any = 0) -> Any:
        # Keras' default derives output shapes from tensor *shapes*; here the
        # lengths' *values* decide the shape, unknown (None) when symbolic.
        shape = self.compute_output_shape(
            _static_length(query_length), _static_length(key_length), offset
        )
        return keras.KerasTensor(shape, dtype=self.compute_dtype)


class _SingleTableLayer(_RelativeTableLayer):
    """One learned table of ``(table_size, columns)`` read through one position scheme."""

    #: The relative mode the table serves (`PositionScheme.check_mode`).
    _mode = "bias"

    def _set_position(self, position: Any) -> None:
        """The position scheme (`position_schemes.get`), checked now, not when called."""
        caller = type(self).__name__
        scheme = position_schemes.get(position, caller)
        scheme.check_mode(caller, self._mode)
        self.position = scheme
        # A computed bias (`position_biases`) has weights of its own, no table.
        self.table_size = None if scheme.computed else scheme.table_size

    def _table_columns(self) -> int:
        raise NotImplementedError

    def build(self, input_shape: Any = None) -> None:
        # The table's shape depends only on the constructor arguments.
        shape = (self.table_size, self._table_columns())
        check_allocation(
            f"{type(self).__name__}({self.name!r})", "table", [shape], self.variable_dtype
        )
        self.embeddings = self.add_weight(
            name="table",
            shape=(self.table_size, self._table_columns()),
            initializer=self.embeddings_initializer,
        )

    def table(self) -> Any:
        """The ``(table_size, columns)`` table, in the compute dtype."""
        if not self.built:
            self.build()
        return ops.cast(self.embeddings, self.compute_dtype)

    def indices(self, query_length: Any, key_length: Any, offset: Any = 0) -> Any:
        """The ``(query_length, key_length)`` int32 row of the table for each (query, key)."""
        r = relative_index._relative_positions(
            type(self).__name__, query_length, key_length, offset
        )
        return self.position.index(r)


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativePositionBias(_SingleTableLayer):
    """A learned scalar per head and relative-distance bucket, added to attention logits.

    T5's relative attention bias: ``bias[0, h, i, j] = table[idx(j - (i + offset)), h]``,
    where ``idx`` is the position scheme's index (`PositionScheme.index`). T5 computes it once in
    the first layer and shares it with every layer; pass it as the
    ``attention_bias`` of ``MultiHeadRelativeAttention`` or add it to the logits.

    Args:
        num_heads: number of attention heads (one scalar per head and bucket).
        position: the position scheme: a `PositionScheme`, its config, or a
            registered name (`position_schemes.get`). Default ``"t5"``, T5's
            encoder buckets ``LogBuckets(num_buckets=32, max_distance=128)``
            (bidirectional: keys before and after the query get separate
            buckets); a causal decoder passes ``"t5_decoder"``
            (``LogBuckets(bidirectional=False)``: keys after the query share
            bucket 0, as in T5). Also ``"shaw"`` (`ClipPositions`), ``"irpe"``
            (`PiecewiseBuckets`), ... A computed bias (`ALiBi`, `KERPLE`, `FIRE`,
            `ContinuousBias`) is computed from the distances, with the scheme's
            weights held by this layer (``bias_weights``), instead of a table.
        embeddings_initializer: initializer of the ``(table_size, num_heads)`` table
            (unused by a computed bias, whose scheme initialises its own weights).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        query_length: number of queries, an int or integer scalar tensor.
        key_length: number of keys, an int or integer scalar tensor.
        offset: position of the first query among the keys (the cache index
            when decoding one step at a time); default 0.

    Returns:
        A ``(1, num_heads, query_length, key_length)`` tensor in the layer's
        compute dtype, broadcastable to attention logits. A computed bias is
        computed in float32; in float16 it is clipped at ``-3e4`` (and ``3e4``),
        since float16 ends at 65,504 (KERPLE's power kernel passes it at a distance
        of a few hundred).

    Examples:

        >>> import keras
        >>> from keras_posenc import layers
        >>> bias = layers.RelativePositionBias(num_heads=4)
        >>> tuple(bias(3, 5).shape)
        (1, 4, 3, 5)
        >>> tuple(bias(1, 10, offset=9).shape)  # one decoding step at position 9
        (1, 4, 1, 10)

    Reference:
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
    """

    def __init__(
        self,
        num_heads: int,
        position: Any = "t5",
        embeddings_initializer: Any = "truncated_normal",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_heads = check_int(caller, "num_heads", num_heads, minimum=1)
        self._set_position(position)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def _table_columns(self) -> int:
        return self.num_heads  # the table is (table_size, num_heads)

    def build(self, input_shape: Any = None) -> None:
        if self.position.computed:
            # The scheme's own weights (KERPLE's r1, r2; FIRE's MLP; none for ALiBi).
            self.bias_weights = self.position.build_weights(self, self.num_heads)
        else:
            super().build(input_shape)

    def table(self) -> Any:
        if self.position.computed:
            raise TypeError(
                f"{type(self).__name__}({self.name!r}): position={self.position!r} computes "
                f"its bias, it has no table; use `per_head` or call the layer."
            )
        return super().table()

    def _computed(self, r: Any, query_positions: Any = None) -> Any:
        """A computed scheme's float32 bias ``(num_heads,) + r.shape``."""
        if not self.built:
            self.build()
        return self.position.bias(self.bias_weights, self.num_heads, r, query_positions)

    def call(self, query_length: Any, key_length: Any, offset: Any = 0) -> Any:
        return ops.expand_dims(self.per_head(query_length, key_length, offset), 0)

    def per_head(
        self, query_length: Any, key_length: Any, offset: Any = 0, dtype: Any = None
    ) -> Any:
        """The bias as ``(num_heads, query_length, key_length)``, in ``dtype`` (default: compute).

        With static lengths it is built as the Toeplitz matrix it is (it depends
        on ``j - i`` only) from its ``q_len + k_len - 1`` diagonals (the kernel
        `keras_posenc.backend.toeplitz`); with lengths known only when run, the
        table is read at a (q_len, k_len) index into heads-first order (the
        kernel `keras_posenc.backend.gather_heads_first`).

        Examples:

            >>> from keras_posenc import layers
            >>> bias = layers.RelativePositionBias(num_heads=4, position=layers.ClipPositions(2))
            >>> tuple(bias.per_head(3, 5).shape), tuple(bias.per_head(1, 5, offset=4).shape)
            ((4, 3, 5), (4, 1, 5))
        """
        query_length, key_length = relative_index.check_block(
            type(self).__name__, query_length, key_length, offset
        )
        dtype = dtype or self.compute_dtype
        if not self.position.toeplitz:  # FIRE: depends on the query's position too
            r = relative_index._relative_positions(
                type(self).__name__, query_length, key_length, offset
            )
            positions = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
            return _attention.cast_bias(self._computed(r, positions[:, None]), dtype)
        static = isinstance(query_length, int) and isinstance(key_length, int)
        if static and min(query_length, key_length) > 0:
            diagonals = self.diagonals(query_length, key_length, offset, dtype)
            return relative_index.toeplitz(diagonals, query_length, key_length)
        if self.position.computed:
            # The bias of each of the q_len + k_len - 1 distances, read like a table
            # whose rows are the distances in order (cheaper than the formula per pair).
            table = ops.transpose(self.diagonals(query_length, key_length, offset, dtype))
            index = relative_index._relative_positions(
                type(self).__name__, query_length, key_length, 0
            ) + (ops.cast(query_length, "int32") - 1)
        else:
            table = ops.cast(self.table(), dtype)  # (rows, heads)
            index = self.indices(query_length, key_length, offset)
        return backend.gather_heads_first(table, index)

    def diagonals(
        self, query_length: Any, key_length: Any, offset: Any = 0, dtype: Any = None
    ) -> Any:
        """The bias per head and distance, ``(num_heads, query_length + key_length - 1)``.

        Entry ``m`` is the bias of ``j - (i + offset) = m - (query_length - 1)``
        (`relative_index.distances_in_order`): the diagonals of the Toeplitz
        matrix `per_head` returns, ``per_head(...)[h, i, j] ==
        diagonals(...)[h, j - i + query_length - 1]``.

        Examples:

            >>> import numpy as np
            >>> from keras_posenc import layers
            >>> bias = layers.RelativePositionBias(num_heads=2, position=layers.ALiBi())
            >>> diagonals = keras.ops.convert_to_numpy(bias.diagonals(2, 3))  # r = -1 .. 2
            >>> print(diagonals)
            [[-0.0625      0.         -0.0625     -0.125     ]
             [-0.00390625  0.         -0.00390625 -0.0078125 ]]
            >>> full = keras.ops.convert_to_numpy(bias.per_head(2, 3))
            >>> bool(np.all(full[:, 1, 0] == diagonals[:, 0]))  # i = 1, j = 0: r = -1
            True
        """
        query_length, key_length = relative_index.check_block(
            type(self).__name__, query_length, key_length, offset
        )
        if not self.position.toeplitz:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): position={self.position!r} depends on "
                f"the query's position, not on j - i alone: it has no diagonals."
            )
        distances = relative_index.distances_in_order(query_length, key_length, offset)
        if self.position.computed:
            return _attention.cast_bias(self._computed(distances), dtype or self.compute_dtype)
        table = ops.transpose(ops.cast(self.table(), dtype or self.compute_dtype))
        return ops.take(table, self.position.index(distances), axis=1)

    def compute_output_shape(
        self, query_length: int | None = None, key_length: int | None = None, offset: Any = 0
    ) -> tuple:
        """Takes the lengths (ints, or None when unknown), like ``call``."""
        return (1, self.num_heads, query_length, key_length)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            position=keras.saving.serialize_keras_object(self.position),
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativePositionEmbedding(_SingleTableLayer):
    """A learned vector per relative-distance bucket (Shaw et al.'s ``a_ij``).

    ``out[i, j] = table[idx(j - (i + offset))]``. Attention adds it to the keys
    (``q_i . (k_j + a^K_ij)``) and/or values. Materialising ``(q_len, k_len, d)``
    costs O(L^2 d): an attention layer should rather use `table` and `indices`
    and gather the ``(q_len, table_size)`` products ``q W^T`` with the index matrix.

    Args:
        output_dim: size of each vector (the attention head size, usually).
        position: the position scheme: a `PositionScheme`, its config, or a
            registered name (`position_schemes.get`). Default ``"shaw"``,
            Shaw's ``ClipPositions(max_distance=16)`` (a table of 33 rows); also
            ``"t5"`` (`LogBuckets`), ``"irpe"`` (`PiecewiseBuckets`), ...
            Several scales at once: `MultiScaleRelativePositionEmbedding`.
        embeddings_initializer: initializer of the ``(table_size, output_dim)`` table.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        query_length: number of queries, an int or integer scalar tensor.
        key_length: number of keys, an int or integer scalar tensor.
        offset: position of the first query among the keys; default 0.

    Returns:
        A ``(query_length, key_length, output_dim)`` tensor in the compute dtype.

    Examples:

        >>> import keras
        >>> from keras_posenc import layers
        >>> embedding = layers.RelativePositionEmbedding(8, position=layers.ClipPositions(2))
        >>> tuple(embedding(3, 4).shape)
        (3, 4, 8)
        >>> tuple(embedding.table().shape), tuple(embedding.indices(3, 4).shape)
        ((5, 8), (3, 4))

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
    """

    def __init__(
        self,
        output_dim: int,
        position: Any = "shaw",
        embeddings_initializer: Any = "truncated_normal",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.output_dim = check_int(caller, "output_dim", output_dim, minimum=1)
        self._set_position(position)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    _mode = "keys"  # the same table serves keys or values

    def _table_columns(self) -> int:
        return self.output_dim  # the table is (table_size, output_dim)

    def call(self, query_length: Any, key_length: Any, offset: Any = 0) -> Any:
        return ops.take(self.table(), self.indices(query_length, key_length, offset), axis=0)

    def compute_output_shape(
        self, query_length: int | None = None, key_length: int | None = None, offset: Any = 0
    ) -> tuple:
        """Takes the lengths (ints, or None when unknown), like ``call``."""
        return (query_length, key_length, self.output_dim)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            output_dim=self.output_dim,
            position=keras.saving.serialize_keras_object(self.position),
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config


_COMBINES = ("mean", "sum", "concat")


@keras.saving.register_keras_serializable(package="keras_posenc")
class MultiScaleRelativePositionEmbedding(_RelativeTableLayer):
    """Relative position vectors at several resolutions, combined.

    One table per scale ``s``, indexed by the scheme `MultiScaleBins` ``(scale=s)``
    (bins of width ``s // 2``, clamped, ``2 * (s // 2) + 1`` rows): a small
    scale sees nearby distances one by one, a large one sees far distances
    coarsely. Clamping keeps every distance inside every table, so any length
    works (the seed lecture's unclamped ``r // (s // 2) + s // 2`` does not).

    Args:
        output_dim: size of the combined vector. With ``combine="concat"`` it
            must be divisible by ``len(scales)``; each table then has
            ``output_dim // len(scales)`` columns. Otherwise each table has
            ``output_dim`` columns.
        scales: the scales, ints >= 2 (default ``(5, 10, 20)``).
        combine: ``"mean"`` (default), ``"sum"`` or ``"concat"`` (in the order of ``scales``).
        embeddings_initializer: initializer of every table; each table draws from
            its own copy (one derived seed per table when it is seeded).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        query_length: number of queries, an int or integer scalar tensor.
        key_length: number of keys, an int or integer scalar tensor.
        offset: position of the first query among the keys; default 0.

    Returns:
        A ``(query_length, key_length, output_dim)`` tensor in the compute dtype.

    Examples:

        >>> import keras
        >>> from keras_posenc import layers
        >>> embedding = layers.MultiScaleRelativePositionEmbedding(output_dim=6, combine="concat")
        >>> tuple(embedding(4, 7).shape)
        (4, 7, 6)
        >>> [tuple(t.shape) for t in embedding.tables()]
        [(5, 2), (11, 2), (21, 2)]

    Reference:
        Shaw et al., "Self-Attention with Relative Position Representations",
        NAACL 2018 (one table); the multi-scale variant follows the seed lecture
        on position information, with a clamped index.
    """

    def __init__(
        self,
        output_dim: int,
        scales: Sequence[int] = (5, 10, 20),
        combine: str = "mean",
        embeddings_initializer: Any = "truncated_normal",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.output_dim = check_int(caller, "output_dim", output_dim, minimum=1)
        if isinstance(scales, str) or not isinstance(scales, Sequence) or not scales:
            raise ValueError(
                f"{caller}: `scales` must be a non-empty sequence of ints >= 2, got {scales!r}."
            )
        self.scales = tuple(check_int(caller, "scales", s, minimum=2) for s in scales)
        # One scheme per scale owns its table size and index (one home each).
        self._schemes = tuple(position_schemes.MultiScaleBins(scale) for scale in self.scales)
        if combine not in _COMBINES:
            raise ValueError(
                f"{caller}: `combine` must be one of {', '.join(map(repr, _COMBINES))}, "
                f"got {combine!r}."
            )
        self.combine = combine
        if combine == "concat" and self.output_dim % len(self.scales):
            raise ValueError(
                f"{caller}: with combine='concat', `output_dim` must be divisible by "
                f"len(scales)={len(self.scales)}, got {self.output_dim}."
            )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    @property
    def table_dim(self) -> int:
        """Columns of each table."""
        if self.combine == "concat":
            return self.output_dim // len(self.scales)
        return self.output_dim

    def build(self, input_shape: Any = None) -> None:
        shapes = [(scheme.table_size, self.table_dim) for scheme in self._schemes]
        check_allocation(
            f"{type(self).__name__}({self.name!r})", "tables", shapes, self.variable_dtype
        )
        self.embeddings = [
            self.add_weight(
                name=f"table_{index}",
                shape=(scheme.table_size, self.table_dim),
                initializer=sublayer_initializer(
                    self.embeddings_initializer, f"embeddings_{index}"
                ),
            )
            for index, scheme in enumerate(self._schemes)
        ]

    def tables(self) -> list:
        """One ``(2 * (scale // 2) + 1, table_dim)`` table per scale, in the compute dtype."""
        if not self.built:
            self.build()
        return [ops.cast(table, self.compute_dtype) for table in self.embeddings]

    def indices(self, query_length: Any, key_length: Any, offset: Any = 0) -> list:
        """One ``(query_length, key_length)`` int32 index matrix per scale."""
        r = relative_index._relative_positions(
            type(self).__name__, query_length, key_length, offset
        )
        return [scheme.index(r) for scheme in self._schemes]

    def call(self, query_length: Any, key_length: Any, offset: Any = 0) -> Any:
        parts = [
            ops.take(table, index, axis=0)
            for table, index in zip(self.tables(), self.indices(query_length, key_length, offset))
        ]
        if self.combine == "concat":
            return ops.concatenate(parts, axis=-1)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        if self.combine == "mean":
            total = total / len(parts)
        return total

    def compute_output_shape(
        self, query_length: int | None = None, key_length: int | None = None, offset: Any = 0
    ) -> tuple:
        """Takes the lengths (ints, or None when unknown), like ``call``."""
        return (query_length, key_length, self.output_dim)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            output_dim=self.output_dim,
            scales=list(self.scales),
            combine=self.combine,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config
