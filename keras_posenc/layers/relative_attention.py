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
from keras_posenc.layers._checks import check_rate, has_empty_axis
from keras_posenc.layers.relative_position import (
    RelativePositionBias,
    RelativePositionEmbedding,
    _check_single_table_bucketing,
)

__all__ = ["MultiHeadRelativeAttention"]

_RELATIVE_MODES = ("keys_values", "keys", "bias")
_RELATIVE_LOGITS = ("auto", "gather", "skew")

# Logits of masked pairs. Finite, so a fully masked row never produces NaN
# (softmax of a constant row is uniform; the mask then zeroes it), and far below
# any real float32 logit.
_MASK_FILL = -1e9

# The same fill for the fused path (`keras.ops.dot_product_attention`), which
# adds the bias in the compute dtype: float16 cannot hold -1e9 (it would become
# -inf), so there the bias is clipped at about half its largest finite value,
# leaving room for the content logits to be added without overflowing.
_FLOAT16_MASK_FILL = -3.0e4

# Automatic query blocking (`MultiHeadRelativeAttention._query_block`): one
# block's float32 logits for one example stay under this many bytes, and a block
# has at least this many queries (fewer would make the per-block overhead of
# small ops dominate).
_AUTO_BLOCK_BYTES = 32 * 2**20
_MIN_AUTO_BLOCK = 64


def _rank(tensor: Any) -> int:
    return len(tensor.shape)


def _query_rows(tensor: Any, first: int, last: int) -> Any:
    """Rows ``first:last`` of a mask or bias broadcastable to (..., q_len, k_len).

    The query axis is the second to last; a tensor without one (rank < 2) or
    with a broadcast query axis (size 1) applies to every row unchanged.
    """
    if tensor is None or _rank(tensor) < 2 or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., first:last, :]


def check_relative_arguments(
    caller: str,
    relative: Any,
    bucketing: Any,
    max_distance: Any,
    num_buckets: Any,
    bidirectional: Any,
    rotary_max_wavelength: Any,
) -> None:
    """Validates the relative-position arguments at construction, naming ``caller``.

    Shared by `MultiHeadRelativeAttention` and the blocks built on it, so a bad
    argument fails when the outermost layer is created, with that layer's name.
    """
    if relative not in _RELATIVE_MODES:
        raise ValueError(
            f"{caller}: `relative` must be one of {', '.join(map(repr, _RELATIVE_MODES))}, "
            f"got {relative!r}."
        )
    _check_single_table_bucketing(caller, bucketing)
    relative_index._check_bool(caller, "bidirectional", bidirectional)
    relative_index._table_size(caller, bucketing, max_distance, num_buckets, bidirectional, None)
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

    Memory (``S`` = one float32 ``(batch, heads, q_len, k_len)`` tensor): the
    key term is ``Q W_K^T`` of shape ``(batch, heads, q_len, rows)``, read
    into ``(batch, heads, q_len, k_len)`` by a gather with the index matrix
    (``relative_logits="gather"``) or, when a ``"clip"`` table has a row for
    every distance, by Music Transformer's skew (pad/reshape/slice,
    ``relative_logits="skew"``). The value term sums the attention weights
    that fall into each table row from their cumulative sum over the keys
    (each row covers an interval of distances), ``(batch, heads, q_len,
    rows)``, and multiplies by the table. The mask is one additive
    ``(batch, 1, q_len, k_len)`` bias. Nothing larger than the attention
    matrix is built: the peak is about 3 S (relative logits, content logits,
    their sum) plus the index matrices. For long static inputs the queries are
    processed in blocks (``query_block_size``), so those tensors exist only for
    one block of queries at a time; ``docs/benchmarks.md`` has the numbers.

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
        relative_logits: how the relative key logits ``q_i . w^K[idx(i, j)]``
            are placed: ``"gather"`` (any bucketing and length), ``"skew"``
            (Music Transformer's shift; ``"clip"`` only, used when the lengths
            are static and the table has a row for every distance, i.e.
            ``max_distance >= max(q_len, k_len) - 1`` (with an int offset:
            ``offset + q_len - 1`` and ``k_len - 1 - offset``); otherwise it
            gathers, with the same result) or ``"auto"`` (default): currently
            the gather, which used less memory than the skew on CPU with
            PyTorch and TensorFlow. Unused by ``relative="bias"``.
        query_block_size: process the queries this many at a time (the
            output is the same; the peak memory drops to a few
            ``(batch, heads, block, k_len)`` tensors). ``None`` (default):
            automatic, blocks only when one example's logits,
            ``heads * q_len * k_len`` float32, exceed 32 MiB (8 heads: longer
            than 1024 x 1024), in blocks of about 32 MiB (8 heads: 512 queries
            at ``k_len = 2048``). Blocking needs a static query length (and,
            automatic, a static key length); with an unknown length (e.g.
            ``keras.Input((None, dim))``) all queries run at once. Pass a
            value ``>= q_len`` to never block.
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        fused_attention: ``False`` (default) or ``True``: compute the attention
            with `keras.ops.dot_product_attention`, the relative logits, the
            ``attention_bias`` and the mask (a large finite negative fill, never
            ``-inf``) passed as one additive bias in the compute dtype, so
            backends with fused attention kernels (e.g. cuDNN / flash kernels
            on GPU that accept a bias) serve relative attention too. Off by
            default because on CPU it costs memory: measured at L = 2048
            without query blocking it raised the peak on PyTorch (3.8 -> 4.0 S
            for ``"bias"``, 4.0 -> 4.3 S for ``"keys"``) and JAX (3.6 -> 5.4 S
            and 4.0 -> 5.7 S), TensorFlow unchanged (its version is the same
            einsum/softmax/einsum); no CPU kernel there skips the logits when
            given a full bias. On accelerators with fused kernels it can pay off.
            It applies only where that function can express the computation:
            ``relative="bias"`` or ``"keys"`` (no per-pair value term),
            ``value_dim == key_dim``, no ``return_attention_scores`` and
            dropout inactive (``training`` falsy or ``dropout == 0``); otherwise
            the layer silently uses its default path, with the same result.
            Query blocking, masks and the cache work as without it; fully
            masked query rows still give zeros. Under mixed precision the
            fused function may compute in the compute dtype (e.g. bfloat16),
            so results differ from the default path by that dtype's rounding.
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
        ``(output, scores, cache)``. An empty batch or query sequence gives
        an empty output; queries with no keys get what a fully masked row
        gets (zeros, then the output projection's bias).

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
        relative_logits: str = "auto",
        query_block_size: int | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        fused_attention: bool = False,
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
        self.dropout = check_rate(caller, "dropout", dropout)
        self.use_bias = relative_index._check_bool(caller, "use_bias", use_bias)
        if isinstance(output_shape, tuple | list) and len(output_shape) == 1:
            output_shape = output_shape[0]
        self.output_shape = (
            None if output_shape is None else check_int(caller, "output_shape", output_shape, 1)
        )
        check_relative_arguments(
            caller,
            relative,
            bucketing,
            max_distance,
            num_buckets,
            bidirectional,
            rotary_max_wavelength,
        )
        self.relative = relative
        self.bucketing = bucketing
        self.max_distance = max_distance
        self.num_buckets = num_buckets
        self.bidirectional = bidirectional
        if rotary_max_wavelength is not None:
            if self.key_dim % 2:
                raise ValueError(
                    f"{caller}: rotary embeddings need an even `key_dim`, got {self.key_dim}."
                )
        self.rotary_max_wavelength = rotary_max_wavelength
        if relative_logits not in _RELATIVE_LOGITS:
            raise ValueError(
                f"{caller}: `relative_logits` must be one of "
                f"{', '.join(map(repr, _RELATIVE_LOGITS))}, got {relative_logits!r}."
            )
        if relative_logits == "skew" and (relative == "bias" or bucketing != "clip"):
            raise ValueError(
                f"{caller}: relative_logits='skew' needs relative='keys' or 'keys_values' "
                f"and bucketing='clip', got relative={relative!r}, bucketing={bucketing!r}."
            )
        self.relative_logits = relative_logits
        self.query_block_size = (
            None
            if query_block_size is None
            else check_int(caller, "query_block_size", query_block_size, minimum=1)
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.fused_attention = relative_index._check_bool(
            caller, "fused_attention", fused_attention
        )
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
        if cache is None and has_empty_axis(query, key):
            return self._empty_result(query, key, return_attention_scores)
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
        if attention_mask is not None:
            attention_mask = ops.convert_to_tensor(attention_mask)
        if attention_bias is not None:
            attention_bias = ops.convert_to_tensor(attention_bias)
        attend = dict(
            k=k,
            v=v,
            value_mask=value_mask,
            key_mask=key_mask,
            use_causal_mask=use_causal_mask,
            key_length=key_length,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        block = self._query_block(query_length, key_length, attention_mask, attention_bias)
        if block is None:
            output, probabilities = self._attend(
                q, query_mask, attention_mask, attention_bias, query_length, offset, **attend
            )
        else:
            # Query blocking (see `_query_block`): rows of queries are independent
            # given k and v, so each block is attention of its queries to every
            # key, with its relative positions (and causal mask) shifted by the
            # block's first position; only the small outputs are kept.
            outputs, scores = [], []
            for first in range(0, query_length, block):
                last = min(first + block, query_length)

                def rows(tensor: Any, first: int = first, last: int = last) -> Any:
                    return _query_rows(tensor, first, last)

                output, probabilities = self._attend(
                    q[:, first:last],
                    None if query_mask is None else query_mask[:, first:last],
                    rows(attention_mask),
                    rows(attention_bias),
                    last - first,
                    offset if first == 0 else offset + first,
                    **attend,
                )
                outputs.append(output)
                scores.append(probabilities)
                del output, probabilities
            output = ops.concatenate(outputs, axis=1)
            del outputs
            probabilities = ops.concatenate(scores, axis=2) if return_attention_scores else None
            del scores
        output = self.output_dense(output)

        results = [output]
        if return_attention_scores:
            results.append(probabilities)
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)

    def _empty_result(self, query: Any, key: Any, return_attention_scores: bool) -> Any:
        """The result for an empty batch, query or key sequence (see ``has_empty_axis``).

        Attending to no keys is what a fully masked query row does: zeros before
        the output projection, so only its bias remains.
        """
        batch, query_length = ops.shape(query)[:2]
        key_length = ops.shape(key)[1]
        heads = (batch, query_length, self.num_heads, self.value_dim)
        output = self.output_dense(ops.zeros(heads, self.compute_dtype))
        if not return_attention_scores:
            return output
        scores = (batch, self.num_heads, query_length, key_length)
        return output, ops.zeros(scores, self.compute_dtype)

    def _query_block(
        self, query_length: Any, key_length: Any, attention_mask: Any, attention_bias: Any
    ) -> int | None:
        """How many queries to process at a time, or None for all at once.

        Memory: the logits of one block, (batch, heads, block, k_len) in float32,
        and the few tensors of that size alive with them (relative logits, their
        sum, the probabilities, their cumulative sum for "keys_values") are freed
        before the next block, so the peak is a few block-sized tensors instead of
        about 3-4 S for the whole (batch, heads, q_len, k_len); what is kept per
        block is its output, (batch, block, heads, value_dim) (and its scores
        when they are requested: those are S anyway).

        ``query_block_size=None`` ("auto") blocks only when one example's score
        tensor, heads * q_len * k_len float32, exceeds `_AUTO_BLOCK_BYTES` (32 MiB;
        heads 8: above q_len = k_len = 1024), with blocks of about that size (8
        heads: 512 queries at k_len = 2048, 256 at 4096; at least
        `_MIN_AUTO_BLOCK` queries), split evenly so the last block is not a sliver.
        Short inputs therefore run as one block, exactly as without blocking.
        Blocking needs a static query length (a Python int; with "auto" a static
        key length too), and attention masks/biases whose query axis is static:
        otherwise (e.g. ``keras.Input((None, dim))``) everything runs as one block.
        """
        if not isinstance(query_length, int):
            return None
        for tensor in (attention_mask, attention_bias):
            if tensor is not None and len(tensor.shape) >= 2 and tensor.shape[-2] is None:
                return None
        block = self.query_block_size
        if block is None:
            if not isinstance(key_length, int):
                return None
            row_bytes = 4 * self.num_heads * key_length  # one query's float32 logits
            if row_bytes * query_length <= _AUTO_BLOCK_BYTES:
                return None
            block = max(_AUTO_BLOCK_BYTES // row_bytes, _MIN_AUTO_BLOCK)
        if block >= query_length:
            return None
        blocks = -(-query_length // block)
        return -(-query_length // blocks)

    def _attend(
        self,
        q: Any,
        query_mask: Any,
        attention_mask: Any,
        attention_bias: Any,
        query_length: Any,
        offset: Any,
        *,
        k: Any,
        v: Any,
        value_mask: Any,
        key_mask: Any,
        use_causal_mask: bool,
        key_length: Any,
        training: Any,
        return_attention_scores: bool,
    ) -> tuple:
        """Attention of the (scaled) queries ``q`` at ``offset`` to every key.

        Returns the attention output before the output projection, (batch,
        q_len, heads, value_dim), fully masked rows zeroed, and the
        probabilities in the compute dtype (None unless requested).
        """
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
        # Memory (S = one float32 (batch, heads, q_len, k_len) tensor): every
        # S-sized temporary counts, since eager backends run op by op. The mask
        # is therefore folded into one additive float32 bias of shape
        # (batch or 1, 1, q_len, k_len), S / heads, instead of a `where` before
        # and after the softmax on the full tensor (two more S each); a fully
        # masked row, whose softmax is a finite but meaningless distribution
        # (every logit is near the fill), is zeroed afterwards with a
        # (batch or 1, q_len) multiplier on the small outputs.
        mask_bias = row_valid = None
        if mask is not None:
            mask_bias = ops.expand_dims(
                ops.where(mask, ops.zeros((), "float32"), ops.cast(_MASK_FILL, "float32")), 1
            )
            row_valid = ops.cast(ops.any(mask, axis=-1), "float32")  # (batch or 1, q_len)

        # The relative logits are computed before the content logits, so the
        # intermediate tensors of their computation are gone when the content
        # logits (S) arrive.
        relative_logits = self._relative_logits(q, query_length, key_length, offset)
        if attention_bias is not None:
            relative_logits = relative_logits + ops.cast(attention_bias, "float32")
        if mask_bias is not None:
            relative_logits = relative_logits + mask_bias

        if self._fused(training, return_attention_scores):
            return self._fused_attend(q, k, v, relative_logits, row_valid), None

        # By default not `keras.ops.dot_product_attention` (with the relative
        # logits and the mask as its bias; `fused_attention=True` opts in for
        # "bias" and "keys" without scores or dropout): measured at L = 2048 on
        # CPU (keras 3.15) it raised the peak, PyTorch 3.8 -> 4.0 S ("bias") and
        # 4.0 -> 4.3 S ("keys"), JAX 3.6 -> 5.4 S and 4.0 -> 5.7 S, TensorFlow
        # unchanged (its version is this same einsum/softmax/einsum): none of
        # them has a CPU kernel that skips the logits when given a full bias.
        # Peak here: the relative logits, the content logits and their sum (3 S
        # without query blocking; three block-sized tensors with it).
        logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q, k), "float32")
        logits = logits + relative_logits
        del relative_logits
        probabilities = ops.softmax(logits, axis=-1)
        del logits
        dropped = self.dropout_layer(probabilities, training=training)
        if not return_attention_scores:
            del probabilities
        output = ops.einsum("bhqk,bkhd->bqhd", ops.cast(dropped, v.dtype), v)
        if self.relative == "keys_values":
            output = output + self._relative_value_term(dropped, query_length, key_length, offset)
        del dropped
        if row_valid is not None:
            # Fully masked query rows: zero output (then only the projection's bias).
            output = output * ops.cast(row_valid[:, :, None, None], output.dtype)
        if return_attention_scores:
            if row_valid is not None:
                probabilities = probabilities * row_valid[:, None, :, None]
            probabilities = ops.cast(probabilities, self.compute_dtype)
        else:
            probabilities = None
        return output, probabilities

    def _fused(self, training: Any, return_attention_scores: bool) -> bool:
        """Whether `keras.ops.dot_product_attention` computes this attention.

        Only with ``fused_attention=True`` and what it can express: no relative
        value term ("bias" or "keys"), equal query/key and value head sizes
        (JAX's version needs them), no probabilities returned and no dropout
        (``dropout == 0`` or ``training`` falsy; a symbolic ``training`` counts
        as possibly true).
        """
        if not self.fused_attention or self.relative == "keys_values":
            return False
        if return_attention_scores or self.value_dim != self.key_dim:
            return False
        if self.dropout == 0:
            return True
        return isinstance(training, bool | int | type(None)) and not training

    def _fused_attend(self, q: Any, k: Any, v: Any, bias: Any, row_valid: Any) -> Any:
        """Attention by `keras.ops.dot_product_attention` with one additive bias.

        ``bias`` is the float32 sum of the relative logits, the attention bias
        and the mask fill, (batch or 1, heads, q_len, k_len): PyTorch's version
        refuses a bias and a mask together, so the mask is already in it. Every
        backend casts the bias to the compute dtype of q, k, v; it is cast here
        (float16: first clipped at a finite fill, as -1e9 would overflow to
        -inf). ``q`` is already scaled, hence ``scale=1``. Fully masked query
        rows (a finite, meaningless softmax) are zeroed as in `_attend`.
        """
        dtype = keras.backend.result_type(q.dtype, k.dtype, v.dtype)
        if keras.backend.standardize_dtype(dtype) == "float16":
            bias = ops.maximum(bias, ops.cast(_FLOAT16_MASK_FILL, bias.dtype))
        output = ops.dot_product_attention(
            ops.cast(q, dtype),
            ops.cast(k, dtype),
            ops.cast(v, dtype),
            bias=ops.cast(bias, dtype),
            scale=1.0,
        )
        if row_valid is not None:
            output = output * ops.cast(row_valid[:, :, None, None], output.dtype)
        return output

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

    # ------------------------------------------------------------------ relative terms

    def _relative_logits(self, q: Any, query_length: Any, key_length: Any, offset: Any) -> Any:
        """The relative part of the logits, float32, (batch or 1, heads, q_len, k_len)."""
        if self.relative == "bias":
            # table[idx(i, j), h] gathered straight into (heads, q_len, k_len) from
            # the transposed (heads, rows) table: RelativePositionBias.call would
            # gather (q_len, k_len, heads) and transpose it, one more S.
            table = ops.transpose(ops.cast(self.relative_bias.table(), "float32"))
            index = self.relative_bias.indices(query_length, key_length, offset)
            return ops.expand_dims(ops.take(table, index, axis=1), 0)
        if self._use_skew(query_length, key_length, offset):
            return self._skewed_key_logits(q, query_length, key_length, offset)
        return self._gathered_key_logits(q, query_length, key_length, offset)

    def _use_skew(self, query_length: Any, key_length: Any, offset: Any) -> bool:
        """Whether the skew applies: "clip" table with a row for every distance, static lengths.

        The rows needed are ``r = j - i - offset`` in ``[-(offset + q_len - 1),
        k_len - 1 - offset]``. With an int offset that is checked exactly; with
        a tensor offset (a cache index) ``0 <= offset <= k_len - q_len`` holds
        (the new keys must fit into the cache), so ``max_distance >=
        max(q_len, k_len) - 1`` suffices.
        """
        # "auto" gathers: measured at L = 2048 with a table of 2L - 1 rows on CPU,
        # the skew's reshape/slice copies cost more peak memory than the gather
        # on PyTorch (4.3 vs 4.0 S) and TensorFlow (5.4 vs 4.2 S), a little
        # less on JAX (4.6 vs 4.8 S); its gain is no index matrix and no gather.
        if self.relative_logits != "skew":
            return False
        if not (isinstance(query_length, int) and isinstance(key_length, int)):
            return False
        k = self.max_distance
        if isinstance(offset, int):
            return offset + query_length - 1 <= k and key_length - 1 - offset <= k
        return max(query_length, key_length) - 1 <= k

    def _gathered_key_logits(self, q: Any, query_length: Any, key_length: Any, offset: Any) -> Any:
        """``q_i . w^K[idx(i, j)]`` by a gather, for any bucketing and length.

        ``Q W_K^T`` is computed once for every table row, (batch, heads,
        q_len, rows), then flattened to (batch, heads, q_len * rows) and read
        with one ``take`` at ``i * rows + idx(i, j)``: the index matrix stays
        (q_len, k_len). (``take_along_axis`` with the index broadcast to
        (batch, heads, q_len, k_len) made PyTorch build a full int64 index, 2 S.)
        The (q_len, k_len, key_dim) tensor a^K is never built.
        """
        table = ops.cast(self.relative_keys.table(), q.dtype)
        rows = self.relative_keys.table_size
        per_row = ops.cast(ops.einsum("bqhd,rd->bhqr", q, table), "float32")
        batch, heads = ops.shape(per_row)[0], ops.shape(per_row)[1]
        per_row = ops.reshape(per_row, (batch, heads, -1))
        index = self.relative_keys.indices(query_length, key_length, offset)
        flat_index = ops.arange(query_length, dtype="int32")[:, None] * rows + index
        return ops.take(per_row, flat_index, axis=2)

    def _skewed_key_logits(self, q: Any, query_length: int, key_length: int, offset: Any) -> Any:
        """``q_i . w^K[idx(i, j)]`` by Music Transformer's skew (Huang et al. 2018).

        Needs a row for every distance (`_use_skew`). Let ``m = q_len + k_len - 1``
        and ``X = Q E^T`` of shape (batch, heads, q_len, m), where ``E`` holds the
        table rows of ``r = -(offset + q_len - 1) ... k_len - 1 - offset`` in
        order, so ``X[i, c]`` belongs to ``r = c - (offset + q_len - 1)``. The
        logit of (i, j) has ``r = j - i - offset``, i.e. ``c = j - i + q_len - 1``:
        row i of the result is row i of X shifted left by ``q_len - 1 - i``. In
        X flattened row by row that is element ``i * m + c = (q_len - 1) + i * (m - 1)
        + j``: drop the first ``q_len - 1`` elements, read rows of ``m - 1``
        (``>= k_len`` when ``q_len >= 2``) and keep their first ``k_len``. This
        covers both directions, ``q_len != k_len`` and an offset; the published
        recipe (pad a column on the left, reshape to (L + 1, L), drop the first
        row) is its causal ``L x L`` special case. No index matrix, no gather.
        """
        table = ops.cast(self.relative_keys.table(), q.dtype)
        width = query_length + key_length - 1
        first = self.max_distance - (offset + query_length - 1)  # table row of the smallest r
        rows = ops.slice(table, (first, 0), (width, self.key_dim))
        x = ops.cast(ops.einsum("bqhd,md->bhqm", q, rows), "float32")
        if query_length == 1:  # c = j: already in place
            return x
        batch, heads = ops.shape(x)[0], ops.shape(x)[1]
        flat = ops.reshape(x, (batch, heads, query_length * width))
        shifted = flat[:, :, query_length - 1 : query_length - 1 + query_length * (width - 1)]
        shifted = ops.reshape(shifted, (batch, heads, query_length, width - 1))
        return shifted[:, :, :, :key_length]

    def _relative_value_term(
        self, probabilities: Any, query_length: Any, key_length: Any, offset: Any
    ) -> Any:
        """``sum_j a_ij w^V[idx(i, j)]`` as (batch, q_len, heads, value_dim).

        Equal to ``sum_r A_ir w^V[r]`` with ``A_ir`` = the attention weight of
        query i that falls into table row r. Every bucketing here maps each
        row to an interval of distances (`_bucket_intervals`), so for query i
        row r covers a contiguous run of keys ``j_lo(i, r) .. j_hi(i, r)``, and
        ``A_ir = C[i, j_hi] - C[i, j_lo - 1]`` with ``C`` the cumulative sum of
        the weights over the keys. For "clip" the interior rows are single
        diagonals (band extraction) and the two end rows the tail sums. Cost:
        ``C`` (one S) and two (batch, heads, q_len, rows) gathers; no
        transposed copy of the weights (a segment sum needed one), and a^V,
        (q_len, k_len, value_dim), is never built.
        """
        table = self.relative_values.table()
        lowest, highest, nonempty = self._bucket_intervals(query_length, key_length, offset)
        positions = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
        last_key = ops.cast(key_length, "int32") - 1
        first_key = ops.maximum(positions + lowest[None, :], 0)  # (q_len, rows)
        last_key = ops.minimum(positions + highest[None, :], last_key)
        nonempty = ops.logical_and(nonempty[None, :], ops.less_equal(first_key, last_key))

        cumulative = ops.cumsum(ops.cast(probabilities, "float32"), axis=-1)
        batch, heads = ops.shape(cumulative)[0], ops.shape(cumulative)[1]
        cumulative = ops.reshape(cumulative, (batch, heads, -1))
        row_start = ops.arange(query_length, dtype="int32")[:, None] * ops.cast(key_length, "int32")

        def read(cumulative: Any, column: Any) -> Any:
            # C[i, column[i, r]]; empty rows read any valid column (masked below).
            column = ops.clip(column, 0, ops.cast(key_length, "int32") - 1)
            return ops.take(cumulative, row_start + column, axis=2)

        upto_last = read(cumulative, last_key)
        before_first = read(cumulative, first_key - 1)
        del cumulative
        before_first = before_first * ops.cast(ops.greater(first_key, 0), "float32")
        per_row = (upto_last - before_first) * ops.cast(nonempty, "float32")
        return ops.einsum("bhqr,rd->bqhd", ops.cast(per_row, table.dtype), table)

    def _bucket_intervals(self, query_length: Any, key_length: Any, offset: Any) -> tuple:
        """Per table row: the smallest and largest distance r mapped to it, and whether any is.

        Only the distances that occur, ``-(offset + q_len - 1) .. k_len - 1 -
        offset``, are bucketed (a vector of ``q_len + k_len - 1``). Each
        bucketing is monotone in r on each side of 0 (clip, piecewise: on the
        whole line; T5's log buckets: by |r| with separate buckets per sign), so
        a row's distances form one interval, found from its count ``n`` and sum
        ``s``: ``lo = (2 s - n (n - 1)) / (2 n)``, ``hi = lo + n - 1`` (exact in int32).
        """
        table = self.relative_values
        # Plain arithmetic on the lengths: ints stay ints (JAX needs a concrete
        # size for arange), TensorFlow's symbolic scalars stay tensors.
        count = query_length + key_length - 1
        distances = ops.arange(count, dtype="int32") - (
            ops.cast(offset, "int32") + ops.cast(query_length, "int32") - 1
        )
        buckets = relative_index.bucket_index(
            distances, table.bucketing, table.max_distance, table.num_buckets, table.bidirectional
        )
        rows = table.table_size
        number = ops.segment_sum(ops.ones_like(distances), buckets, num_segments=rows)
        total = ops.segment_sum(distances, buckets, num_segments=rows)
        safe = ops.maximum(number, 1)
        lowest = ops.floor_divide(2 * total - number * (number - 1), 2 * safe)
        return lowest, lowest + number - 1, ops.greater(number, 0)

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
        """A rank-3 bool mask broadcastable to (batch, q_len, k_len), or None for no mask."""
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
            attention_mask = ops.convert_to_tensor(attention_mask)
            while _rank(attention_mask) < 3:  # broadcastable to (batch, q_len, k_len)
                attention_mask = ops.expand_dims(attention_mask, 0)
            mask = combine(mask, attention_mask)
        return mask

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
            relative_logits=self.relative_logits,
            query_block_size=self.query_block_size,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            fused_attention=self.fused_attention,
        )
        return config
