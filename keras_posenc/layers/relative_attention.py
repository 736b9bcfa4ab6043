"""Multi-head attention with relative position representations (Shaw / T5 / rotary).

The relative terms never build the ``(query_length, key_length, head_dim)``
tensor that the textbook formula suggests; see the comments in
`MultiHeadRelativeAttention` for how each term is computed and what it costs.
"""

from __future__ import annotations

import contextlib
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import _attention, position_schemes, relative_index
from keras_posenc.layers._checks import (
    check_bias,
    check_bool,
    check_bool_or_auto,
    check_features,
    check_int,
    check_mask,
    check_rate,
    has_empty_axis,
)
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers.relative_position import RelativePositionBias, RelativePositionEmbedding
from keras_posenc.layers.rotary import RotaryPositions

__all__ = ["MultiHeadRelativeAttention"]

_RELATIVE_LOGITS = ("auto", "gather", "skew")


def check_relative_arguments(
    caller: str, relative: Any, position: Any
) -> position_schemes.PositionScheme | None:
    """Validates ``relative`` and ``position`` at construction, naming ``caller``.

    Shared by `MultiHeadRelativeAttention` and the blocks built on it, so a bad
    argument fails when the outermost layer is created, with that layer's name.
    Returns the position scheme (`position_schemes.get` of ``position``; None gives
    the default, Shaw's ``ClipPositions(max_distance=16)``), checked to support
    ``relative``. ``relative=None`` (no relative term) takes no ``position`` and
    returns None.
    """
    if relative is not None and relative not in position_schemes.RELATIVE_MODES:
        modes = (*position_schemes.RELATIVE_MODES, None)
        raise ValueError(
            f"{caller}: `relative` must be one of {', '.join(map(repr, modes))}, got {relative!r}."
        )
    if relative is None:
        if position is not None:
            raise ValueError(
                f"{caller}: relative=None adds no relative term, so it takes no `position`; "
                f"got position={position!r}. Pass relative='bias' (or 'keys', 'keys_values') "
                f"to use it."
            )
        return None
    scheme = position_schemes.get("shaw" if position is None else position, caller)
    scheme.check_mode(caller, relative)
    return scheme


def check_relative_logits(
    caller: str,
    relative_logits: Any,
    relative: Any,
    scheme: position_schemes.PositionScheme | None,
) -> str:
    """Validates ``relative_logits`` (``"auto"``, ``"gather"`` or ``"skew"``) at construction,
    naming ``caller``: the skew needs a relative key term and a table row per distance.

    Shared by `MultiHeadRelativeAttention` and the blocks that pass the argument on.
    """
    if relative_logits not in _RELATIVE_LOGITS:
        raise ValueError(
            f"{caller}: `relative_logits` must be one of "
            f"{', '.join(map(repr, _RELATIVE_LOGITS))}, got {relative_logits!r}."
        )
    has_key_term = relative in ("keys", "keys_values")
    if relative_logits == "skew" and (not has_key_term or not scheme.skewable):
        raise ValueError(
            f"{caller}: relative_logits='skew' needs relative='keys' or 'keys_values' "
            f"and a table row per distance (position=ClipPositions(...) or 'shaw'), got "
            f"relative={relative!r}, position={scheme!r}."
        )
    return relative_logits


def check_rotary(caller: str, rotary: Any) -> RotaryPositions | None:
    """The rotary embedding of ``rotary``: a `RotaryPositions`, its config, or None."""
    if isinstance(rotary, dict):
        rotary = keras.saving.deserialize_keras_object(rotary)
    if rotary is not None and not isinstance(rotary, RotaryPositions):
        raise TypeError(
            f"{caller}: `rotary` must be None or a RotaryPositions (e.g. "
            f"RotaryPositions(scaling='yarn', scaling_factor=4, training_length=512)), "
            f"got {rotary!r}."
        )
    return rotary


@keras.saving.register_keras_serializable(package="keras_posenc")
class MultiHeadRelativeAttention(keras.layers.Layer):
    """Multi-head attention with learned relative positions between queries and keys.

    With ``r = j - i`` (key position minus query position) mapped to a table
    row ``idx(r)`` by the position scheme ``position`` (`PositionScheme.index`):

    - ``relative="keys_values"`` (Shaw et al.):
      ``e_ij = q_i . (k_j + a^K_ij) / sqrt(d)``,
      ``z_i = sum_j softmax(e)_ij (v_j + a^V_ij)``, with
      ``a^{K,V}_ij = w^{K,V}[idx(r_ij)]``, vectors of the head size shared by
      all heads (as in the paper).
    - ``relative="keys"``: only the ``a^K`` term (Shaw's ablation without ``a^V``).
    - ``relative="bias"`` (T5, Raffel et al.): ``e_ij = q_i . k_j / sqrt(d) +
      b[h, idx(r_ij)]``, one learned scalar per head and bucket
      (`RelativePositionBias`).

    - ``relative=None``: no relative term (content logits only): with
      ``rotary`` that is RoPE alone; with neither, NoPE (under a causal mask
      the mask alone carries position).

    With ``relative="bias"`` the scheme may also compute its bias instead of
    reading a table: ``position=ALiBi()``, ``KERPLE(...)``, ``FIRE(...)`` or
    ``ContinuousBias(...)`` (`position_biases`); no table then limits the
    length. FIRE (and xPos rotary) are causal: call with ``use_causal_mask=True``.

    ``rotary`` (a `RotaryPositions`: RoPE and its scalings, xPos) additionally
    rotates the projected queries and keys, on top of the relative term of any
    mode or alone (``relative=None``; `RotaryPositions.rotate_for_attention`).
    With dynamic NTK and LongRoPE the rotation depends on the current length, so
    the cache holds keys before rotation and every step rotates them all: a
    decoding step at position ``t`` equals the full pass over the first
    ``t + 1`` tokens.

    Memory (``S`` = one float32 ``(batch, heads, q_len, k_len)`` tensor): the
    key term is ``Q W_K^T`` of shape ``(batch, heads, q_len, rows)``, read
    into ``(batch, heads, q_len, k_len)`` by a gather with the index matrix
    (``relative_logits="gather"``) or, when a `ClipPositions` table has a row for
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
        relative: ``"keys_values"`` (default), ``"keys"``, ``"bias"`` or None
            (no relative term: rotary alone, or no position information).
        position: the position scheme of the relative term: a `PositionScheme`
            (`ClipPositions`, `LogBuckets`, `PiecewiseBuckets`, `MultiScaleBins`;
            for ``relative="bias"`` also `ALiBi`, `KERPLE`, `FIRE`,
            `ContinuousBias`), its serialised config, or a registered name
            with the paper's arguments (``"shaw"``, ``"t5"``, ``"t5_decoder"``,
            ``"irpe"``, ``"alibi"``, ...; `position_schemes.names`). ``None``
            (default): ``ClipPositions(max_distance=16)`` (``"shaw"``), or no
            scheme with ``relative=None``, which takes none. The scheme must
            support ``relative`` (`PositionScheme.modes`).
        rotary: ``None`` (default) or a `RotaryPositions` (rotary embedding,
            scaled or xPos; or its config) applied to the projected queries and keys
            (its rotary dimension must then be even: `RotaryPositions.check_head_dim`).
        relative_logits: how the relative key logits ``q_i . w^K[idx(i, j)]``
            are placed: ``"gather"`` (any scheme and length), ``"skew"``
            (Music Transformer's shift; `ClipPositions` only, used when the lengths
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
            ``heads * q_len * k_len`` float32, exceed a size measured per
            backend (16 MiB on PyTorch, 32 MiB elsewhere; 8
            heads at 32 MiB: longer than 1024 x 1024), in blocks of about that
            size (8 heads at 32 MiB: 512 queries at ``k_len = 2048``). On
            PyTorch without gradients the blocks of one call share their
            buffers. Blocking needs a static query length (and,
            automatic, a static key length); with an unknown length (e.g.
            ``keras.Input((None, dim))``) all queries run at once. Pass a
            value ``>= q_len`` to never block.
        kernel_initializer: initializer of the projection kernels; each projection
            draws from its own copy (a seeded initializer gets one seed per projection,
            derived from its seed), so no two start equal.
        bias_initializer: initializer of the projection biases (copied the same way).
        fused_attention: ``"auto"`` (default), ``True`` or ``False``: compute
            the attention with `keras.ops.dot_product_attention`, the relative
            logits, the ``attention_bias`` and the mask (a large finite negative
            fill, never ``-inf``) passed as one additive bias in the compute
            dtype, so fused attention kernels that accept a bias (PyTorch's
            ``scaled_dot_product_attention``, cuDNN / flash kernels on GPU) serve
            relative attention too. ``"auto"`` uses it where it was measured to
            pay: on PyTorch when no gradient is recorded (``torch.no_grad``, as
            in ``predict``; its CPU kernel never builds the probabilities), not
            on TensorFlow (no fused CPU kernel) or JAX (slower with a bias on
            CPU, and a higher peak memory); docs/benchmarks.md has the numbers.
            With ``relative="bias"`` and no padding mask, attention bias or
            attention mask (``use_causal_mask`` is fine), PyTorch gets the bias
            as a strided view of its diagonals: nothing of size L x L is built.
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
        query_mask: ``(batch, q_len)`` boolean or integer 0/1, True for real queries; default
            the query's Keras mask.
        value_mask: ``(batch, k_len)`` boolean or integer 0/1; default the value's Keras mask.
        key_mask: ``(batch, k_len)`` boolean or integer 0/1; default the key's Keras mask.
        attention_mask: boolean or integer 0/1, broadcastable to ``(batch, q_len, k_len)``.
            A floating mask raises a `TypeError`: unlike ``keras.layers.MultiHeadAttention``,
            which casts any mask to bool (so an additive 0 / -1e9 mask is inverted),
            additive masks go in ``attention_bias``.
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
            step at a time equals the full causal computation. An int must
            leave the new rows inside the cache (``0 <= index`` and
            ``index + length <= max_len``), else a ``ValueError``.

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
        relative: str | None = "keys_values",
        position: Any = None,
        rotary: Any = None,
        relative_logits: str = "auto",
        query_block_size: int | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        fused_attention: bool | str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_heads = check_int(caller, "num_heads", num_heads, minimum=1)
        self.key_dim = check_int(caller, "key_dim", key_dim, minimum=1)
        self.value_dim = (
            self.key_dim if value_dim is None else check_int(caller, "value_dim", value_dim, 1)
        )
        self.dropout = check_rate(caller, "dropout", dropout)
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        if isinstance(output_shape, tuple | list) and len(output_shape) == 1:
            output_shape = output_shape[0]
        self.output_shape = (
            None if output_shape is None else check_int(caller, "output_shape", output_shape, 1)
        )
        scheme = check_relative_arguments(caller, relative, position)
        self.relative = relative
        self.position = scheme
        self.rotary = check_rotary(caller, rotary)
        if self.rotary is not None:
            self.rotary.check_head_dim(caller, self.key_dim)
        check_relative_logits(caller, relative_logits, relative, scheme)
        self.relative_logits = relative_logits
        self.query_block_size = (
            None
            if query_block_size is None
            else check_int(caller, "query_block_size", query_block_size, minimum=1)
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)
        self.supports_masking = True

        # The relative tables depend only on the position scheme.
        table_args = dict(position=scheme, dtype=self.dtype_policy)
        self.relative_bias = None
        self.relative_keys = None
        self.relative_values = None
        if relative == "bias":
            self.relative_bias = RelativePositionBias(
                self.num_heads, name="relative_bias", **table_args
            )
        elif relative is not None:
            self.relative_keys = RelativePositionEmbedding(
                self.key_dim, name="relative_keys", **table_args
            )
            if relative == "keys_values":
                self.relative_values = RelativePositionEmbedding(
                    self.value_dim, name="relative_values", **table_args
                )

    # ------------------------------------------------------------------ build

    def build(self, query_shape: Any, value_shape: Any, key_shape: Any = None) -> None:
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        self._check_shapes(query_shape, value_shape, key_shape)
        output_dim = self.output_shape or query_shape[-1]
        heads = self.num_heads
        kernels = [
            (query_shape[-1], heads, self.key_dim),
            (key_shape[-1], heads, self.key_dim),
            (value_shape[-1], heads, self.value_dim),
            (heads, self.value_dim, output_dim),
        ]
        check_allocation(
            f"{type(self).__name__}({self.name!r})", "projection kernels", kernels,
            self.variable_dtype,
        )  # fmt: skip
        self.query_dense = _attention.head_projection(self, self.key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = _attention.head_projection(self, self.key_dim, "key")
        self.key_dense.build(key_shape)
        self.value_dense = _attention.head_projection(self, self.value_dim, "value")
        self.value_dense.build(value_shape)
        self.output_dense = _attention.projection(
            self, "abcd,cde->abe", (None, output_dim), "e", "attention_output"
        )
        self.output_dense.build((query_shape[0], query_shape[1], self.num_heads, self.value_dim))
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
        for argument, features in (("query", query), ("value", value), ("key", key)):
            check_features(f"{type(self).__name__}({self.name!r})", argument, features)
        if cache is None and has_empty_axis(query, key):
            return self._empty_result(query, key, return_attention_scores)
        query_mask, value_mask, key_mask, attention_mask = self._check_masks(
            query, value, cache, query_mask, value_mask, key_mask, attention_mask
        )
        # Keras fills query_mask / value_mask / key_mask from the inputs' Keras
        # masks when they are not given (Layer.__call__ matches `<name>_mask`).
        # The projections must not see those masks (they do not support
        # masking); a fresh tensor carries none, and the caller's stay intact.
        if query_mask is not None:
            query = _attention.unmasked(query)
        if value_mask is not None or key_mask is not None:
            value = _attention.unmasked(value)
            key = _attention.unmasked(key)

        self._check_causal(use_causal_mask)
        offset = 0 if cache_update_index is None else cache_update_index
        q_relative = None  # the queries of the relative key term, where they differ (xPos)
        q = self.query_dense(query)  # (batch, q_len, heads, key_dim)
        if cache is not None:
            k, v, cache = self._use_cache(cache, key, value, cache_update_index)
        else:
            k = self.key_dense(key)
            v = self.value_dense(value)
        query_length, key_length = ops.shape(q)[1], ops.shape(k)[1]
        if self.rotary is not None:  # the current length: the keys seen so far
            length = key_length if cache is None else offset + query_length
            q, k, q_turned = self.rotary.rotate_for_attention(q, k, offset, length, cache)
            if self.rotary.causal_only and self.relative in ("keys", "keys_values"):
                q_relative = _attention.scale_queries(q_turned, self.key_dim)  # without xPos

        q = _attention.scale_queries(q, self.key_dim)
        attention_bias = check_bias(
            f"{type(self).__name__}({self.name!r})",
            "attention_bias",
            attention_bias,
            (query.shape[0], self.num_heads, query.shape[1], k.shape[1]),
            ("batch", "num_heads", "q_len", "k_len"),
        )

        def attend_rows(first: int, last: int | None) -> tuple:
            # Query blocking (see `_attention.query_block`): the block's queries
            # attend to every key, with their relative positions (and causal
            # mask) shifted by the block's first position.
            if last is None:
                rows, block_mask, block_bias = q, query_mask, attention_bias
                block_attention_mask, length = attention_mask, query_length
            else:
                rows = q[:, first:last]
                block_mask = None if query_mask is None else query_mask[:, first:last]
                block_attention_mask = _attention.query_rows(attention_mask, first, last)
                block_bias = _attention.query_rows(attention_bias, first, last)
                length = last - first
            if q_relative is not None:  # a pair: `_attend`
                rows = (rows, q_relative if last is None else q_relative[:, first:last])
            block_offset = offset if first == 0 else offset + first
            masks = (block_mask, value_mask, key_mask, block_attention_mask)
            # One compiled program per block shape where that pays (eager TensorFlow on
            # CPU: `backend.compiled_block`); the offset is then a tensor, so every
            # block of one size shares it.
            attend_block = backend.compiled_block(
                self._attend_block, self.num_heads * length * key_length, training, self.dropout
            )
            if attend_block != self._attend_block:
                block_offset = ops.convert_to_tensor(block_offset, "int32")
            return attend_block(
                rows,
                k,
                v,
                masks,
                block_bias,
                block_offset,
                use_causal_mask=use_causal_mask,
                training=training,
                return_attention_scores=return_attention_scores,
            )

        output = self._toeplitz_attend(
            q,
            k,
            v,
            (query_mask, value_mask, key_mask, attention_mask, attention_bias),
            use_causal_mask,
            offset,
            training,
            return_attention_scores,
        )
        if output is not None:
            return self._finish(self.output_dense(output), None, cache, return_attention_scores)
        block = self._query_block(query_length, key_length, attention_mask, attention_bias)
        # Block-sized buffers reused within this call where the backend keeps them
        # (`backend.scratch`: PyTorch without gradients); not with scores, which are
        # kept per block.
        scope = contextlib.nullcontext() if return_attention_scores else backend.scratch()
        with scope:
            if block is None:
                output, probabilities = attend_rows(0, None)
            else:
                output, probabilities = _attention.attend_in_blocks(
                    attend_rows, query_length, block, return_attention_scores
                )
        return self._finish(
            self.output_dense(output), probabilities, cache, return_attention_scores
        )

    def _attend_block(
        self,
        q: Any,
        k: Any,
        v: Any,
        masks: tuple,
        attention_bias: Any,
        offset: Any,
        use_causal_mask: bool,
        training: Any,
        return_attention_scores: bool,
    ) -> tuple:
        """Attention of one block of (scaled) queries ``q`` at ``offset`` to every key.

        ``masks``: the block's query mask, the value and key masks and the block's
        rows of ``attention_mask`` (each None or bool). ``q`` may be a pair: the queries
        of the content logits and those of the relative key term (xPos).
        """
        query_length = ops.shape(q[0] if isinstance(q, tuple) else q)[1]
        key_length = ops.shape(k)[1]
        mask = self._attention_mask(*masks, use_causal_mask, query_length, key_length, offset)
        return self._attend(
            q,
            k,
            v,
            mask,
            attention_bias,
            query_length,
            key_length,
            offset,
            training,
            return_attention_scores,
        )

    def _check_causal(self, use_causal_mask: bool) -> None:
        """Raises for a causal-only scheme (FIRE, xPos) called without the causal mask."""
        if use_causal_mask:
            return
        causal_only = [
            f"{argument}={scheme!r}"
            for argument, scheme in (
                ("position", self.position if self.relative == "bias" else None),
                ("rotary", self.rotary),
            )
            if scheme is not None and scheme.causal_only
        ]
        if causal_only:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): {' and '.join(causal_only)} is defined "
                f"for keys at or before the query only: call with use_causal_mask=True."
            )

    def _finish(
        self, output: Any, probabilities: Any, cache: Any, return_attention_scores: bool
    ) -> Any:
        results = [output]
        if return_attention_scores:
            results.append(ops.cast(probabilities, self.compute_dtype))
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)

    def _toeplitz_attend(
        self,
        q: Any,
        k: Any,
        v: Any,
        masks: tuple,
        use_causal_mask: bool,
        offset: Any,
        training: Any,
        return_attention_scores: bool,
    ) -> Any:
        """The attention output of ``relative="bias"`` from the bias's diagonals, or None.

        A bias table read by distance is a Toeplitz matrix, and so is a causal
        mask; where the backend's fused kernel takes it as a view of its
        ``q_len + k_len - 1`` diagonals (`backend.toeplitz_attention`: PyTorch on
        CPU without gradients), neither the (heads, q_len, k_len) bias nor
        the probabilities are built and no query blocking is needed. Only
        without padding masks, ``attention_mask`` or ``attention_bias`` (those
        are not Toeplitz), with static lengths and when `use_fused_attention`
        allows the fused path; otherwise None and the general path runs.
        """
        query_length, key_length = q.shape[1], k.shape[1]
        if (
            self.relative != "bias"
            or not self.position.toeplitz
            or any(mask is not None for mask in masks)
            or not (isinstance(query_length, int) and isinstance(key_length, int))
            or not _attention.use_fused_attention(
                self.fused_attention,
                self.dropout,
                training,
                expressible=not return_attention_scores and self.value_dim == self.key_dim,
            )
        ):
            return None
        if not backend.prefers_toeplitz_attention(q, k, v):
            return None  # the general path (query blocking included) builds the bias
        diagonals = self.relative_bias.diagonals(query_length, key_length, offset, "float32")
        if use_causal_mask:
            distances = relative_index.distances_in_order(query_length, key_length, offset)
            fill = ops.cast(_attention.MASK_FILL, "float32")
            diagonals = ops.where(ops.greater(distances, 0)[None, :], fill, diagonals)
        output, _ = _attention.attend(q, k, v, fused=True, bias_diagonals=diagonals)
        return output

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
        """Queries per block (`_attention.query_block`), or None for all at once."""
        return _attention.query_block(
            self.query_block_size,
            self.num_heads,
            query_length,
            key_length,
            (attention_mask, attention_bias),
        )

    def _check_masks(
        self,
        query: Any,
        value: Any,
        cache: Any,
        query_mask: Any,
        value_mask: Any,
        key_mask: Any,
        attention_mask: Any,
    ) -> tuple:
        """The masks as bool tensors, after checking their dtypes and shapes against the inputs."""
        caller = f"{type(self).__name__}({self.name!r})"
        batch, query_length = query.shape[0], query.shape[1]
        # With a cache the keys are the cache's rows, not `value`'s.
        key_length = value.shape[1] if cache is None else cache.shape[2]
        check = check_mask
        keys = ((batch, key_length), ("batch", "k_len"))
        query_mask = check(
            caller, "query_mask", query_mask, (batch, query_length), ("batch", "q_len")
        )
        value_mask = check(caller, "value_mask", value_mask, *keys)
        key_mask = check(caller, "key_mask", key_mask, *keys)
        if attention_mask is not None:
            full = (batch, query_length, key_length)
            names = ("batch", "q_len", "k_len")
            # Broadcastable to (batch, q_len, k_len): a rank-2 mask is (q_len, k_len).
            rank = len(tuple(getattr(attention_mask, "shape", np.shape(attention_mask))))
            rank = min(max(rank, 1), 3)
            attention_mask = check(
                caller, "attention_mask", attention_mask, full[-rank:], names[-rank:]
            )
            while len(attention_mask.shape) < 3:
                attention_mask = ops.expand_dims(attention_mask, 0)
        return query_mask, value_mask, key_mask, attention_mask

    def _attend(
        self,
        q: Any,
        k: Any,
        v: Any,
        mask: Any,
        attention_bias: Any,
        query_length: Any,
        key_length: Any,
        offset: Any,
        training: Any,
        return_attention_scores: bool,
    ) -> tuple:
        """Attention of the (scaled) queries ``q`` at ``offset`` to every key (the core's).

        The relative logits are computed before the content logits, so the
        intermediate tensors of their computation are gone when the content
        logits (S) arrive; peak: the relative logits, the content logits and
        their sum (3 S without query blocking).
        """
        q, q_relative = q if isinstance(q, tuple) else (q, q)
        relative_logits = self._relative_logits(q_relative, query_length, key_length, offset)
        if attention_bias is not None:
            attention_bias = _attention.float32_bias(attention_bias)
            relative_logits = (
                attention_bias if relative_logits is None else relative_logits + attention_bias
            )
        # `keras.ops.dot_product_attention` where it pays ("auto": PyTorch, whose CPU
        # kernel takes the bias and skips the probabilities) or where it was asked for.
        fused = _attention.use_fused_attention(
            self.fused_attention,
            self.dropout,
            training,
            expressible=self.relative != "keys_values"
            and not return_attention_scores
            and self.value_dim == self.key_dim,
        )
        value_term = None
        if self.relative == "keys_values":

            def value_term(probabilities: Any) -> Any:
                return self._relative_value_term(probabilities, query_length, key_length, offset)

        return _attention.attend(
            q,
            k,
            v,
            mask=mask,
            bias=relative_logits,
            dropout=self.dropout_layer,
            training=training,
            fused=fused,
            return_scores=return_attention_scores,
            value_term=value_term,
        )

    def _use_cache(self, cache: Any, key: Any, value: Any, cache_update_index: Any) -> tuple:
        name = f"{type(self).__name__}({self.name!r})"
        if self.value_dim != self.key_dim:
            raise ValueError(
                f"{name}: `cache` needs value_dim == key_dim (one (batch, 2, max_len, num_heads, "
                f"key_dim) tensor holds keys and values); got key_dim={self.key_dim}, "
                f"value_dim={self.value_dim}."
            )
        _attention.check_cache(name, "cache", cache, self.num_heads, self.key_dim)
        if cache_update_index is None:
            return cache[:, 0, ...], cache[:, 1, ...], cache
        new_key = self.key_dense(key)
        if self.rotary is not None and not self.rotary.dynamic:
            # Turned once, when written, without xPos' factors (each call applies them
            # centred on its queries); the dynamic scalings' rotation changes with the
            # length, so their cache holds the keys before rotation.
            new_key = self.rotary.rotate(new_key, cache_update_index, "key", xpos=False)
        return _attention.write_key_value_cache(
            cache, new_key, self.value_dense(value), cache_update_index, caller=name
        )

    # ------------------------------------------------------------------ relative terms

    def _relative_logits(self, q: Any, query_length: Any, key_length: Any, offset: Any) -> Any:
        """The relative part of the logits, float32, (batch or 1, heads, q_len, k_len), or None.

        Within a call's `backend.scratch` the gathered key logits may be a scratch
        buffer, which the attention core then overwrites.
        """
        if self.relative is None:
            return None
        if self.relative == "bias":
            bias = self.relative_bias.per_head(query_length, key_length, offset, "float32")
            return ops.expand_dims(bias, 0)
        if self._use_skew(query_length, key_length, offset):
            return self._skewed_key_logits(q, query_length, key_length, offset)
        return self._gathered_key_logits(q, query_length, key_length, offset)

    def _use_skew(self, query_length: Any, key_length: Any, offset: Any) -> bool:
        """Whether the skew applies: a `ClipPositions` row for every distance, static lengths.

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
        return self.position.has_row_per_distance(query_length, key_length, offset)

    def _gathered_key_logits(self, q: Any, query_length: Any, key_length: Any, offset: Any) -> Any:
        """``q_i . w^K[idx(i, j)]`` by a gather, for any scheme and length.

        The kernel `keras_posenc.backend.relative_key_logits`: ``Q W_K^T`` once for
        every table row, read at column ``idx(i, j)`` of row i with an index matrix
        of (q_len, k_len), never broadcast to the batch and heads (a broadcast
        index made PyTorch build a full int64 index, 2 S). The (q_len, k_len,
        key_dim) tensor a^K is never built.
        """
        index = self.relative_keys.indices(query_length, key_length, offset)
        return backend.relative_key_logits(q, self.relative_keys.table(), index)

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
        # The table row of the smallest r (a ClipPositions scheme: row = r + max_distance).
        first = self.position.max_distance - (offset + query_length - 1)
        if isinstance(offset, int):
            rows = ops.slice(table, (first, 0), (width, self.key_dim))
        else:
            # A cache index: a gather of `width` rows, not a slice at a tensor start, whose
            # start torch.export cannot trace (it reads the value; decoding then ran
            # eagerly, several times slower).
            rows = ops.take(table, first + ops.arange(width, dtype="int32"), axis=0)
        x = ops.cast(ops.einsum("bqhd,md->bhqm", q, rows), "float32")
        if query_length == 1:  # c = j: already in place
            return x
        batch, heads = ops.shape(x)[0], ops.shape(x)[1]
        flat = ops.reshape(x, (batch, heads, query_length * width))
        shifted = flat[:, :, query_length - 1 : query_length - 1 + query_length * (width - 1)]
        shifted = ops.reshape(shifted, (batch, heads, query_length, width - 1))
        return shifted[:, :, :, :key_length]

    def _relative_value_term(
        self,
        probabilities: Any,
        query_length: Any,
        key_length: Any,
        offset: Any,
    ) -> Any:
        """``sum_j a_ij w^V[idx(i, j)]`` as (batch, q_len, heads, value_dim).

        Equal to ``sum_r A_ir w^V[r]`` with ``A_ir`` = the attention weight of
        query i that falls into table row r. Every table scheme here maps each
        row to an interval of distances (`_bucket_intervals`), so for query i
        row r covers a contiguous run of keys ``j_lo(i, r) .. j_hi(i, r)``, and
        ``A_ir = C[i, j_hi] - C[i, j_lo - 1]`` with ``C`` the cumulative sum of
        the weights over the keys. For `ClipPositions` the interior rows are single
        diagonals (band extraction) and the two end rows the tail sums. Cost:
        ``C`` (one S) and two (batch, heads, q_len, rows) gathers; no
        transposed copy of the weights (a segment sum needed one), and a^V,
        (q_len, k_len, value_dim), is never built. Within a call's
        `backend.scratch` the cumulative sums may overwrite the probabilities
        (`backend.cumulative_sum`): the caller reads them no more.
        """
        table = self.relative_values.table()
        lowest, highest, nonempty = self._bucket_intervals(query_length, key_length, offset)
        positions = ops.arange(query_length, dtype="int32")[:, None] + ops.cast(offset, "int32")
        last_key = ops.cast(key_length, "int32") - 1
        first_key = ops.maximum(positions + lowest[None, :], 0)  # (q_len, rows)
        last_key = ops.minimum(positions + highest[None, :], last_key)
        nonempty = ops.logical_and(nonempty[None, :], ops.less_equal(first_key, last_key))

        cumulative = backend.cumulative_sum(probabilities)

        def read(cumulative: Any, column: Any) -> Any:
            # C[i, column[i, r]]; empty rows read any valid column (masked below).
            column = ops.clip(column, 0, ops.cast(key_length, "int32") - 1)
            return backend.take_columns(cumulative, column)

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
        table scheme is monotone in r on each side of 0 (clip, piecewise: on the
        whole line; T5's log buckets: by |r| with separate buckets per sign), so
        a row's distances form one interval, found from its count ``n`` and sum
        ``s``: ``lo = (2 s - n (n - 1)) / (2 n)``, ``hi = lo + n - 1`` (exact in int32).
        """
        # Plain arithmetic on the lengths: ints stay ints (JAX needs a concrete
        # size for arange), TensorFlow's symbolic scalars stay tensors.
        count = query_length + key_length - 1
        distances = ops.arange(count, dtype="int32") - (
            ops.cast(offset, "int32") + ops.cast(query_length, "int32") - 1
        )
        buckets = self.position.index(distances)
        rows = self.position.table_size
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
            return new if current is None else ops.logical_and(current, new)

        if query_mask is not None:
            mask = combine(mask, ops.expand_dims(query_mask, -1))
        if value_mask is not None:
            mask = combine(mask, ops.expand_dims(value_mask, -2))
        if key_mask is not None:
            mask = combine(mask, ops.expand_dims(key_mask, -2))
        if use_causal_mask:
            mask = combine(mask, _attention.causal_mask(query_length, key_length, offset))
        if attention_mask is not None:  # rank 3, checked in `_check_masks`
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
            position=keras.saving.serialize_keras_object(self.position),
            rotary=keras.saving.serialize_keras_object(self.rotary),
            relative_logits=self.relative_logits,
            query_block_size=self.query_block_size,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            fused_attention=self.fused_attention,
        )
        return config
