"""Multi-head attention with relative position representations (Shaw / T5 / rotary).

The relative terms never build the ``(query_length, key_length, head_dim)``
tensor that the textbook formula suggests; see the comments in
`MultiHeadRelativeAttention` for how each term is computed and what it costs.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers import relative_index
from keras_posenc.layers.relative_position import (
    RelativePositionBias,
    RelativePositionEmbedding,
)

__all__ = ["MultiHeadRelativeAttention"]

_RELATIVE_MODES = ("keys_values", "keys", "bias")

# Logits of masked pairs. Finite, so a fully masked row never produces NaN
# (softmax of a constant row is uniform; the mask then zeroes it), and far below
# any real float32 logit.
_MASK_FILL = -1e9


def _rank(tensor: Any) -> int:
    return len(tensor.shape)


@keras.saving.register_keras_serializable(package="keras_posenc")
class MultiHeadRelativeAttention(keras.layers.Layer):
    """Multi-head attention with learned relative positions between queries and keys.

    With ``r = j - i`` (key position minus query position) mapped to a table
    row ``idx(r)`` by ``bucketing`` (`relative_index.bucket_index`):

    - ``relative="keys_values"`` (Shaw et al.):
      ``e_ij = q_i . (k_j + a^K_ij) / sqrt(d)``,
      ``z_i = sum_j softmax(e)_ij (v_j + a^V_ij)``, with
      ``a^{K,V}_ij = w^{K,V}[idx(r_ij)]``, vectors of the head size shared by
      all heads (as in the paper).
    - ``relative="keys"``: only the ``a^K`` term (Shaw's ablation without ``a^V``).
    - ``relative="bias"`` (T5, Raffel et al.): ``e_ij = q_i . k_j / sqrt(d) +
      b[h, idx(r_ij)]``, one learned scalar per head and bucket
      (`RelativePositionBias`).

    ``rotary_max_wavelength`` additionally rotates the projected queries and
    keys (RoPE, `keras_hub.layers.RotaryEmbedding`); it combines with any mode.

    Memory: the key term is ``Q W_K^T`` of shape ``(batch, heads, q_len, rows)``,
    gathered into ``(batch, heads, q_len, k_len)`` with the index matrix; the
    value term first sums the attention weights that fall into each table row
    (a segment sum, ``(batch, heads, q_len, rows)``) and multiplies by the
    table. Nothing larger than the attention matrix itself is built, so the
    cost is that of plain attention plus ``O(q_len * rows * d)``.

    Masks follow Keras: ``True`` means "may attend". The Keras masks of
    ``query``/``value``/``key`` are used (e.g. from ``Embedding(mask_zero=True)``)
    and the output carries the query's mask. Logits and softmax run in float32
    with a large finite negative fill; a fully masked row gives a zero
    attention output (the output projection's bias only), never NaN.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head for the query and key.
        value_dim: size of each head for the value; default ``key_dim``.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections have biases.
        output_shape: size of the last output axis; default the query's last axis.
        relative: ``"keys_values"`` (default), ``"keys"`` or ``"bias"``.
        bucketing: ``"clip"`` (default), ``"log"`` or ``"piecewise"``; see
            `relative_index.bucket_index`.
        max_distance: ``"clip"``: ``k`` (table of ``2k + 1`` rows, default 16);
            ``"log"``: distances from it on share the last bucket.
        num_buckets: table rows for ``"log"``; ``2 * (num_buckets // 2) + 1``
            for ``"piecewise"``. Unused by ``"clip"``.
        bidirectional: ``"log"`` only, as in `RelativePositionBias`.
        rotary_max_wavelength: ``None`` (default) for no rotary embedding,
            else the ``max_wavelength`` of the rotary embedding applied to the
            projected queries and keys (``key_dim`` must then be even).
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        query: ``(batch, q_len, query_dim)``.
        value: ``(batch, k_len, value_dim_in)``.
        key: ``(batch, k_len, key_dim_in)``; default ``value``.
        query_mask: ``(batch, q_len)`` bool, True for real queries; default
            the query's Keras mask.
        value_mask: ``(batch, k_len)`` bool; default the value's Keras mask.
        key_mask: ``(batch, k_len)`` bool; default the key's Keras mask.
        attention_mask: bool, broadcastable to ``(batch, q_len, k_len)``.
        return_attention_scores: also return the attention probabilities
            ``(batch, heads, q_len, k_len)``.
        training: whether dropout is active.
        use_causal_mask: query ``i`` attends to keys ``j <= i + offset`` only
            (``offset`` = ``cache_update_index`` when decoding, else 0).
        attention_bias: an additive float bias broadcastable to
            ``(batch, heads, q_len, k_len)`` (e.g. a T5 bias shared across
            layers, or ALiBi), added to the logits before the softmax.
        cache: ``(batch, 2, max_len, heads, head_dim)`` holding keys and
            values (keras_hub's ``CachedMultiHeadAttention`` layout; needs
            ``value_dim == key_dim``). Without ``cache_update_index`` the cached
            keys/values are used as they are (``key``/``value`` are ignored).
        cache_update_index: position of the first query; the projected
            ``key``/``value`` are written into the cache there, and relative
            positions (and rotary angles) are offset by it, so decoding one
            step at a time equals the full causal computation.

    Returns:
        ``output`` of shape ``(batch, q_len, output_shape or query_dim)``;
        ``(output, scores)`` with ``return_attention_scores``; with a cache,
        the updated cache is appended: ``(output, cache)`` or
        ``(output, scores, cache)``.

    Examples:

    >>> import numpy as np
    >>> from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
    >>> attention = MultiHeadRelativeAttention(num_heads=2, key_dim=4)
    >>> x = np.zeros((3, 5, 8), "float32")
    >>> tuple(attention(x, x).shape)
    (3, 5, 8)
    >>> output, scores = attention(x[:, :2], x, return_attention_scores=True)
    >>> tuple(output.shape), tuple(scores.shape)
    ((3, 2, 8), (3, 2, 2, 5))
    >>> cache = np.zeros((3, 2, 5, 2, 4), "float32")
    >>> output, cache = attention(
    ...     x[:, :1], x[:, :1], cache=cache, cache_update_index=0, use_causal_mask=True
    ... )
    >>> tuple(output.shape), tuple(cache.shape)
    ((3, 1, 8), (3, 2, 5, 2, 4))

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
        Huang et al., "Music Transformer: Generating Music with Long-Term
        Structure", 2018 (memory-efficient relative attention).
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | None = None,
        relative: str = "keys_values",
        bucketing: str = "clip",
        max_distance: int = 16,
        num_buckets: int = 32,
        bidirectional: bool = True,
        rotary_max_wavelength: float | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        check_int = relative_index._check_int
        self.num_heads = check_int(caller, "num_heads", num_heads, minimum=1)
        self.key_dim = check_int(caller, "key_dim", key_dim, minimum=1)
        self.value_dim = (
            self.key_dim if value_dim is None else check_int(caller, "value_dim", value_dim, 1)
        )
        if isinstance(dropout, bool) or not isinstance(dropout, int | float):
            raise TypeError(f"{caller}: `dropout` must be a float in [0, 1), got {dropout!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{caller}: `dropout` must be in [0, 1), got {dropout!r}.")
        self.dropout = float(dropout)
        self.use_bias = relative_index._check_bool(caller, "use_bias", use_bias)
        if isinstance(output_shape, tuple | list) and len(output_shape) == 1:
            output_shape = output_shape[0]
        self.output_shape = (
            None if output_shape is None else check_int(caller, "output_shape", output_shape, 1)
        )
        if relative not in _RELATIVE_MODES:
            raise ValueError(
                f"{caller}: `relative` must be one of {', '.join(map(repr, _RELATIVE_MODES))}, "
                f"got {relative!r}."
            )
        self.relative = relative
        self.bucketing = bucketing
        self.max_distance = max_distance
        self.num_buckets = num_buckets
        self.bidirectional = bidirectional
        if rotary_max_wavelength is not None:
            if isinstance(rotary_max_wavelength, bool) or not isinstance(
                rotary_max_wavelength, int | float
            ):
                raise TypeError(
                    f"{caller}: `rotary_max_wavelength` must be None or a positive number, "
                    f"got {rotary_max_wavelength!r}."
                )
            if rotary_max_wavelength <= 0:
                raise ValueError(
                    f"{caller}: `rotary_max_wavelength` must be positive, "
                    f"got {rotary_max_wavelength!r}."
                )
            if self.key_dim % 2:
                raise ValueError(
                    f"{caller}: rotary embeddings need an even `key_dim`, got {self.key_dim}."
                )
        self.rotary_max_wavelength = rotary_max_wavelength
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

        # The relative tables depend only on the constructor arguments (which
        # they validate: bucketing, max_distance, num_buckets, bidirectional).
        table_args = dict(
            bucketing=bucketing,
            max_distance=max_distance,
            num_buckets=num_buckets,
            bidirectional=bidirectional,
            dtype=self.dtype_policy,
        )
        self.relative_bias = None
        self.relative_keys = None
        self.relative_values = None
        if relative == "bias":
            self.relative_bias = RelativePositionBias(
                self.num_heads, name="relative_bias", **table_args
            )
        else:
            self.relative_keys = RelativePositionEmbedding(
                self.key_dim, name="relative_keys", **table_args
            )
            if relative == "keys_values":
                self.relative_values = RelativePositionEmbedding(
                    self.value_dim, name="relative_values", **table_args
                )
        self.rotary = None
        if rotary_max_wavelength is not None:
            import keras_hub  # keras_hub imports TensorFlow; only load it when needed

            self.rotary = keras_hub.layers.RotaryEmbedding(
                max_wavelength=rotary_max_wavelength, dtype=self.dtype_policy, name="rotary"
            )

    # ------------------------------------------------------------------ build

    def _dense(self, equation: str, output_shape: tuple, bias_axes: str, name: str) -> Any:
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, query_shape: Any, value_shape: Any, key_shape: Any = None) -> None:
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        self._check_shapes(query_shape, value_shape, key_shape)
        heads = self.num_heads
        self.query_dense = self._dense("abc,cde->abde", (None, heads, self.key_dim), "de", "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._dense("abc,cde->abde", (None, heads, self.key_dim), "de", "key")
        self.key_dense.build(key_shape)
        self.value_dense = self._dense(
            "abc,cde->abde", (None, heads, self.value_dim), "de", "value"
        )
        self.value_dense.build(value_shape)
        output_dim = self.output_shape or query_shape[-1]
        self.output_dense = self._dense(
            "abcd,cde->abe", (None, output_dim), "e", "attention_output"
        )
        self.output_dense.build((query_shape[0], query_shape[1], heads, self.value_dim))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        for table in (self.relative_bias, self.relative_keys, self.relative_values):
            if table is not None:
                table.build()
        self._built_dims = (query_shape[-1], value_shape[-1], key_shape[-1])
        self.built = True

    def _check_shapes(self, query_shape: tuple, value_shape: tuple, key_shape: tuple) -> None:
        name = f"{type(self).__name__}({self.name!r})"
        for argument, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) != 3:
                raise ValueError(
                    f"{name}: `{argument}` must have rank 3 (batch, length, features), "
                    f"got shape {shape}."
                )
            if shape[-1] is None:
                raise ValueError(
                    f"{name}: the last axis of `{argument}` must be known, got shape {shape}."
                )
        if None not in (value_shape[1], key_shape[1]) and value_shape[1] != key_shape[1]:
            raise ValueError(
                f"{name}: `key` and `value` must have the same length (axis 1), got "
                f"key shape {key_shape} and value shape {value_shape}."
            )
        built = getattr(self, "_built_dims", None)
        if built is not None:
            given = (query_shape[-1], value_shape[-1], key_shape[-1])
            for argument, expected, actual in zip(("query", "value", "key"), built, given):
                if expected != actual:
                    raise ValueError(
                        f"{name}: the last axis of `{argument}` must be {expected} (the size "
                        f"the layer was built with), got {actual}."
                    )

    # ------------------------------------------------------------------ call

    def call(
        self,
        query: Any,
        value: Any,
        key: Any = None,
        query_mask: Any = None,
        value_mask: Any = None,
        key_mask: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        use_causal_mask: bool = False,
        attention_bias: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
    ) -> Any:
        if key is None:
            key = value
        self._check_shapes(tuple(query.shape), tuple(value.shape), tuple(key.shape))
        # Keras fills query_mask / value_mask / key_mask from the inputs' Keras
        # masks when they are not given (Layer.__call__ matches `<name>_mask`).
        # The projections must not see those masks (they do not support
        # masking); a fresh tensor carries none, and the caller's stay intact.
        if query_mask is not None:
            query = ops.add(query, ops.zeros((), query.dtype))
        if value_mask is not None or key_mask is not None:
            value = ops.add(value, ops.zeros((), value.dtype))
            key = ops.add(key, ops.zeros((), key.dtype))

        offset = 0 if cache_update_index is None else cache_update_index
        q = self.query_dense(query)  # (batch, q_len, heads, key_dim)
        if self.rotary is not None:
            q = self.rotary(q, start_index=offset)
        if cache is not None:
            k, v, cache = self._use_cache(cache, key, value, cache_update_index)
        else:
            k = self.key_dense(key)
            v = self.value_dense(value)
            if self.rotary is not None:
                k = self.rotary(k)

        query_length, key_length = ops.shape(q)[1], ops.shape(k)[1]
        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q, k), "float32")
        index = None
        if self.relative == "bias":
            bias = self.relative_bias(query_length, key_length, offset=offset)
            logits = logits + ops.cast(bias, "float32")
        else:
            index = self.relative_keys.indices(query_length, key_length, offset)
            logits = logits + self._relative_key_logits(q, index)
        if attention_bias is not None:
            logits = logits + ops.cast(attention_bias, "float32")

        mask = self._attention_mask(
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
            query_length,
            key_length,
            offset,
        )
        # Not `keras.ops.dot_product_attention`, even for "bias"/"keys" without
        # scores: the relative logits already need the full (batch, heads, q_len,
        # k_len) bias, so a fused kernel saves little; it gives a fully masked row
        # uniform weights instead of zeros (a fix-up pass would be needed), torch
        # refuses `bias` with `mask` (the mask must be folded into the bias), and
        # it is not yet tested against this path on all three backends.
        probabilities = self._masked_softmax(logits, mask)
        dropped = self.dropout_layer(probabilities, training=training)

        weights = ops.cast(dropped, v.dtype)
        output = ops.einsum("bhqk,bkhd->bqhd", weights, v)
        if self.relative == "keys_values":
            output = output + self._relative_value_term(dropped, index)
        output = self.output_dense(output)

        results = [output]
        if return_attention_scores:
            results.append(ops.cast(probabilities, self.compute_dtype))
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)

    def _use_cache(self, cache: Any, key: Any, value: Any, cache_update_index: Any) -> tuple:
        name = f"{type(self).__name__}({self.name!r})"
        expected = (2, None, self.num_heads, self.key_dim)
        shape = tuple(cache.shape)
        if (
            len(shape) != 5
            or shape[1] != 2
            or shape[3] != self.num_heads
            or shape[4] != self.key_dim
            or self.value_dim != self.key_dim
        ):
            raise ValueError(
                f"{name}: `cache` must have shape (batch, {', '.join(map(str, expected))}) "
                f"(= (batch, 2, max_len, num_heads, key_dim), with value_dim == key_dim); got "
                f"shape {shape} with value_dim={self.value_dim}."
            )
        key_cache, value_cache = cache[:, 0, ...], cache[:, 1, ...]
        if cache_update_index is None:
            return key_cache, value_cache, cache
        new_key = self.key_dense(key)
        new_value = self.value_dense(value)
        if self.rotary is not None:
            new_key = self.rotary(new_key, start_index=cache_update_index)
        start = [0, cache_update_index, 0, 0]
        k = ops.slice_update(key_cache, start, ops.cast(new_key, key_cache.dtype))
        v = ops.slice_update(value_cache, start, ops.cast(new_value, value_cache.dtype))
        return k, v, ops.stack((k, v), axis=1)

    def _relative_key_logits(self, q: Any, index: Any) -> Any:
        """``q_i . w^K[idx(i, j)]`` as (batch, heads, q_len, k_len), float32.

        ``Q W_K^T`` is computed once for every table row, (batch, heads, q_len,
        rows), then each (i, j) picks its row with ``take_along_axis``: the
        (q_len, k_len, key_dim) tensor a^K is never built.
        """
        table = ops.cast(self.relative_keys.table(), q.dtype)
        per_row = ops.cast(ops.einsum("bqhd,rd->bhqr", q, table), "float32")
        return ops.take_along_axis(per_row, index[None, None, :, :], axis=-1)

    def _relative_value_term(self, probabilities: Any, index: Any) -> Any:
        """``sum_j a_ij w^V[idx(i, j)]`` as (batch, q_len, heads, value_dim).

        Equal to ``sum_r A_ir w^V[r]`` with ``A_ir`` = the attention weight of
        query i that falls into table row r. ``A`` comes from one segment sum
        over the (query, row) ids of all (i, j) pairs: memory O(batch * heads *
        q_len * k_len) (the attention matrix itself, transposed) plus
        O(batch * heads * q_len * rows); a^V, (q_len, k_len, value_dim), is never built.
        """
        table = self.relative_values.table()
        rows = self.relative_values.table_size
        batch, heads, query_length, key_length = ops.shape(probabilities)
        data = ops.reshape(
            ops.transpose(ops.cast(probabilities, "float32"), (2, 3, 0, 1)),
            (query_length * key_length, batch * heads),
        )
        query_ids = ops.arange(query_length, dtype="int32")[:, None] * rows
        segment_ids = ops.reshape(query_ids + ops.cast(index, "int32"), (-1,))
        summed = ops.segment_sum(data, segment_ids, num_segments=query_length * rows)
        per_row = ops.reshape(summed, (query_length, rows, batch, heads))
        per_row = ops.cast(per_row, table.dtype)
        return ops.einsum("qrbh,rd->bqhd", per_row, table)

    def _attention_mask(
        self,
        query_mask: Any,
        value_mask: Any,
        key_mask: Any,
        attention_mask: Any,
        use_causal_mask: bool,
        query_length: Any,
        key_length: Any,
        offset: Any,
    ) -> Any:
        """A bool mask broadcastable to (batch, q_len, k_len), or None for no mask."""
        mask = None

        def combine(current: Any, new: Any) -> Any:
            new = ops.cast(new, "bool")
            return new if current is None else ops.logical_and(current, new)

        if query_mask is not None:
            mask = combine(mask, ops.expand_dims(query_mask, -1))
        if value_mask is not None:
            mask = combine(mask, ops.expand_dims(value_mask, -2))
        if key_mask is not None:
            mask = combine(mask, ops.expand_dims(key_mask, -2))
        if use_causal_mask:
            distances = relative_index.relative_positions(query_length, key_length, offset)
            mask = combine(mask, ops.expand_dims(ops.less_equal(distances, 0), 0))
        if attention_mask is not None:
            mask = combine(mask, attention_mask)
        return mask

    def _masked_softmax(self, logits: Any, mask: Any) -> Any:
        """Float32 softmax over keys; masked pairs get exactly 0, fully masked rows all 0."""
        if mask is None:
            return ops.softmax(logits, axis=-1)
        mask = ops.expand_dims(mask, 1)  # (batch, 1, q_len, k_len): the same for every head
        logits = ops.where(mask, logits, ops.cast(_MASK_FILL, "float32"))
        probabilities = ops.softmax(logits, axis=-1)
        return ops.where(mask, probabilities, ops.zeros_like(probabilities))

    # ------------------------------------------------------------------ shapes, masks, config

    def compute_mask(self, query: Any, previous_mask: Any = None) -> Any:
        """The output carries the query's mask (the output has one row per query)."""
        return previous_mask

    def compute_output_shape(
        self, query_shape: Any, value_shape: Any, key_shape: Any = None
    ) -> tuple:
        query_shape = tuple(query_shape)
        value_shape = tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        self._check_shapes(query_shape, value_shape, key_shape)
        return query_shape[:-1] + (self.output_shape or query_shape[-1],)

    def compute_output_spec(
        self,
        query: Any,
        value: Any,
        key: Any = None,
        query_mask: Any = None,
        value_mask: Any = None,
        key_mask: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        use_causal_mask: bool = False,
        attention_bias: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
    ) -> Any:
        key_shape = None if key is None else key.shape
        output_shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        results = [keras.KerasTensor(output_shape, dtype=self.compute_dtype)]
        if return_attention_scores:
            key_length = value.shape[1] if cache is None else cache.shape[2]
            scores_shape = (query.shape[0], self.num_heads, query.shape[1], key_length)
            results.append(keras.KerasTensor(scores_shape, dtype=self.compute_dtype))
        if cache is not None:
            results.append(keras.KerasTensor(cache.shape, dtype=cache.dtype))
        return results[0] if len(results) == 1 else tuple(results)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            dropout=self.dropout,
            use_bias=self.use_bias,
            output_shape=self.output_shape,
            relative=self.relative,
            bucketing=self.bucketing,
            max_distance=self.max_distance,
            num_buckets=self.num_buckets,
            bidirectional=self.bidirectional,
            rotary_max_wavelength=self.rotary_max_wavelength,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
