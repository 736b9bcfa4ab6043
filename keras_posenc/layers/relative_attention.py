"""Multi-head attention with relative position representations (Shaw / T5 / rotary).

The relative terms never build the ``(query_length, key_length, head_dim)``
tensor that the textbook formula suggests; see the comments in
keras_posenc/layers/_relative_terms.py for how each term is computed and what it
costs. This module holds the layer: its arguments, projections and ``call``; the
steps of the call (masks, cache, query blocks, the routes to the attention core)
are keras_posenc/layers/_relative_call.py, the checks of the relative-position
arguments keras_posenc/layers/_relative_arguments.py.
"""

from __future__ import annotations

import contextlib
from typing import Any

import keras
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    check_bias,
    check_bool,
    check_bool_or_auto,
    check_features,
    check_int,
    check_rate,
    has_empty_axis,
)
from keras_posenc.layers._decoder_arguments import check_decoder_arguments
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers._relative_arguments import (
    check_relative_arguments,
    check_relative_logits,
    check_rotary,
)
from keras_posenc.layers._relative_call import RelativeCallSteps
from keras_posenc.layers._relative_terms import RelativeTerms
from keras_posenc.layers.relative_position import RelativePositionBias, RelativePositionEmbedding

__all__ = ["MultiHeadRelativeAttention"]


@keras.saving.register_keras_serializable(package="keras_posenc")
class MultiHeadRelativeAttention(RelativeCallSteps, RelativeTerms, keras.layers.Layer):
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

    Decoders as released (Llama, Mistral, Qwen, Gemma 2/3; docs/guides/decoder-attention.md):
    ``num_key_value_heads`` groups the query heads around fewer key/value heads (grouped-
    or multi-query attention; the cache holds the key/value heads only); ``sliding_window``
    limits each query to the keys within ``W`` positions (with ``use_causal_mask``: itself
    and the ``W - 1`` before it), ``attention_sinks`` keep the first keys visible
    (StreamingLLM), and a cache of ``attention_sinks + sliding_window`` positions
    (`cache_shape`) is a rolling one: its memory does not grow with the length, and a
    decoding step equals the full pass. Relative terms and rotary see true distances
    in the window. ``query_key_norm`` normalises each head's queries and keys,
    ``logit_soft_cap`` squashes the logits with a ``tanh``, ``output_bias=False`` with
    ``use_bias=True`` gives biases to the query/key/value projections only, and
    ``query_scale_dim`` scales the queries by another head size.

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
        num_key_value_heads: heads of the keys and values (default ``num_heads``); must
            divide ``num_heads``: key/value head ``g`` serves the query heads ``g * group
            .. (g + 1) * group - 1`` (``group = num_heads / num_key_value_heads``; 1 is
            multi-query attention).
        sliding_window: None (default) or ``W``: the query at position ``i`` sees the keys
            ``j`` with ``|i - j| < W`` (keras-hub's Mistral and Gemma 2 band). A cache of
            exactly ``attention_sinks + W`` positions is then a rolling cache (`cache_shape`):
            it keeps the sinks and the last ``W`` keys, needs ``cache_update_index``, and
            takes no key masks or ``attention_bias`` (its slots are not in key order).
        attention_sinks: with ``sliding_window``, the first ``attention_sinks`` positions
            stay visible to every query (StreamingLLM's sinks), at their true distance.
        query_key_norm: None (default), ``"rms"`` or ``"layer"``: the projected queries
            and keys are normalised over each head's features (before rotary) by a Keras
            ``RMSNormalization`` or ``LayerNormalization`` (sublayers ``query_norm`` and
            ``key_norm``, one scale of ``key_dim`` shared by the heads; Gemma 3, Qwen 3).
        query_key_norm_epsilon: the epsilon of those norms (default ``1e-6``).
        logit_soft_cap: None (default) or ``c > 0``: the scaled content logits plus the
            relative term become ``c * tanh(logits / c)`` (Gemma 2); ``attention_bias`` and
            the masks are added after the cap. The fused kernel is not used then.
        output_bias: whether the output projection has a bias; None (default) follows
            ``use_bias`` (``use_bias=True, output_bias=False``: Qwen's projections).
        query_scale_dim: the queries are scaled by ``1 / sqrt(query_scale_dim)``; default
            ``key_dim`` (Gemma 2 with ``query_head_dim_normalize=False``:
            ``hidden_dim // num_heads``).
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
        cache: ``(batch, 2, max_len, num_key_value_heads, head_dim)`` holding keys and
            values (keras_hub's ``CachedMultiHeadAttention`` layout; needs
            ``value_dim == key_dim``; `cache_shape` gives it). Without
            ``cache_update_index`` the cached keys/values are used as they are
            (``key``/``value`` are ignored).
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

    A Mistral-like layer: 4 query heads on 2 key/value heads, rotary, a window of 3 keys
    and a rolling cache of 3 positions, however long the decoding:

    >>> from keras_posenc.layers import RotaryPositions
    >>> local = MultiHeadRelativeAttention(
    ...     num_heads=4, key_dim=4, relative=None, rotary=RotaryPositions(),
    ...     num_key_value_heads=2, sliding_window=3, use_bias=False,
    ... )
    >>> x = np.random.default_rng(0).normal(size=(1, 6, 8)).astype("float32")
    >>> full = local(x, x, use_causal_mask=True)
    >>> cache = np.zeros(local.cache_shape(1, 6), "float32")
    >>> cache.shape
    (1, 2, 3, 2, 4)
    >>> steps = []
    >>> for t in range(6):
    ...     output, cache = local(
    ...         x[:, t : t + 1], x[:, t : t + 1], cache=cache, cache_update_index=t,
    ...         use_causal_mask=True,
    ...     )
    ...     steps.append(np.asarray(keras.ops.convert_to_numpy(output)))
    >>> bool(np.allclose(np.concatenate(steps, 1), keras.ops.convert_to_numpy(full), atol=1e-5))
    True

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
        Huang et al., "Music Transformer: Generating Music with Long-Term
        Structure", 2018 (memory-efficient relative attention).
        Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from
        Multi-Head Checkpoints", EMNLP 2023 (grouped-query attention).
        Jiang et al., "Mistral 7B", 2023 (sliding window, rolling buffer cache).
        Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR 2024.
        Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size", 2024
        (logit soft-capping); Dehghani et al., "Scaling Vision Transformers to 22 Billion
        Parameters", ICML 2023 (query-key normalisation).
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
        num_key_value_heads: int | None = None,
        sliding_window: int | None = None,
        attention_sinks: int = 0,
        query_key_norm: str | None = None,
        query_key_norm_epsilon: float = 1e-6,
        logit_soft_cap: float | None = None,
        output_bias: bool | None = None,
        query_scale_dim: int | None = None,
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
        self.decoder_options = check_decoder_arguments(
            caller,
            self.num_heads,
            self.key_dim,
            self.use_bias,
            num_key_value_heads=num_key_value_heads,
            sliding_window=sliding_window,
            attention_sinks=attention_sinks,
            query_key_norm=query_key_norm,
            query_key_norm_epsilon=query_key_norm_epsilon,
            logit_soft_cap=logit_soft_cap,
            output_bias=output_bias,
            query_scale_dim=query_scale_dim,
        )
        options = self.decoder_options
        self.num_key_value_heads = options.num_key_value_heads
        self.sliding_window = options.sliding_window
        self.attention_sinks = options.attention_sinks
        self.logit_soft_cap = options.logit_soft_cap
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
        heads, kv_heads = self.num_heads, self.num_key_value_heads
        kernels = [
            (query_shape[-1], heads, self.key_dim),
            (key_shape[-1], kv_heads, self.key_dim),
            (value_shape[-1], kv_heads, self.value_dim),
            (heads, self.value_dim, output_dim),
        ]
        check_allocation(
            f"{type(self).__name__}({self.name!r})", "projection kernels", kernels,
            self.variable_dtype,
        )  # fmt: skip
        self.query_dense = _attention.head_projection(self, self.key_dim, "query")
        self.query_dense.build(query_shape)
        self.key_dense = _attention.head_projection(self, self.key_dim, "key", kv_heads)
        self.key_dense.build(key_shape)
        self.value_dense = _attention.head_projection(self, self.value_dim, "value", kv_heads)
        self.value_dense.build(value_shape)
        self.output_dense = _attention.projection(
            self,
            "abcd,cde->abe",
            (None, output_dim),
            "e",
            "attention_output",
            use_bias=self.decoder_options.output_bias,
        )
        self.query_norm = self.key_norm = None
        if self.decoder_options.query_key_norm is not None:
            self.query_norm = _attention.head_norm(self, "query_norm")
            self.query_norm.build((None, None, heads, self.key_dim))
            self.key_norm = _attention.head_norm(self, "key_norm")
            self.key_norm.build((None, None, kv_heads, self.key_dim))
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
        if self.query_norm is not None:
            q = self.query_norm(q)
        keys = None  # keys at positions 0 .., or their layout (a rolling cache)
        if self._is_rolling(cache):
            k, v, cache, keys = self._use_rolling_cache(
                cache,
                key,
                value,
                cache_update_index,
                (value_mask, key_mask, attention_mask, attention_bias),
            )
        elif cache is not None:
            k, v, cache = self._use_cache(cache, key, value, cache_update_index)
        else:
            k = self._project_keys(key)
            v = self.value_dense(value)
        query_length, key_length = ops.shape(q)[1], ops.shape(k)[1]
        if self.rotary is not None:  # the current length: the keys seen so far
            length = key_length if cache is None else offset + query_length
            q, k, q_turned = self.rotary.rotate_for_attention(q, k, offset, length, cache)
            if self.rotary.causal_only and self.relative in ("keys", "keys_values"):
                q_relative = _attention.scale_queries(
                    q_turned, self.decoder_options.query_scale_dim
                )
        # Grouped-query attention: each key/value head serves a group of query heads.
        k = _attention.repeat_heads(k, self.num_heads)
        v = _attention.repeat_heads(v, self.num_heads)
        q = _attention.scale_queries(q, self.decoder_options.query_scale_dim)
        attention_bias = check_bias(
            f"{type(self).__name__}({self.name!r})",
            "attention_bias",
            attention_bias,
            (query.shape[0], self.num_heads, query.shape[1], k.shape[1]),
            ("batch", "num_heads", "q_len", "k_len"),
        )

        def attend_rows(
            first: int,
            last: int | None,
            q: Any,
            q_relative: Any,
            k: Any,
            v: Any,
            attention_bias: Any,
            seed: Any = None,
        ) -> tuple:
            # The tensors are arguments, not read from the enclosing call: a block's
            # backward pass recomputes it from them (`_attention.attend_in_blocks`).
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
            # A rolling cache's keys (runs shifted to the block), or in a sliding window
            # only the keys the block can see (`_window_keys`); not compiled (per block).
            block_keys = None if keys is None else keys[:2] + (self._shift_runs(keys, first),)
            window = None
            if keys is None and not return_attention_scores:
                window = self._window_keys(first, last or query_length, offset, key_length)
            # A recomputed block's dropout draws with the seed drawn for it (`attend_in_blocks`).
            seeded = (
                {}
                if seed is None
                else {"dropout": _attention.SeededDropout(self.dropout_layer, seed)}
            )
            k_block, v_block = k, v
            if window is not None:
                columns, block_keys = self._window_columns(
                    window, (k, v, *masks[1:], block_bias), offset + first
                )
                k_block, v_block, value_block, key_block, attention_block, block_bias = columns
                masks = (block_mask, value_block, key_block, attention_block)
            if block_keys is not None:
                return self._attend_block(
                    rows,
                    k_block,
                    v_block,
                    masks,
                    block_bias,
                    block_offset,
                    use_causal_mask=use_causal_mask,
                    training=training,
                    return_attention_scores=return_attention_scores,
                    keys=block_keys,
                    **seeded,
                )
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
                **seeded,
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
        if keys is None and not return_attention_scores:  # a window's blocks, if it has them
            block = self._window_block(query_length, key_length, offset, block)
        # Block-sized buffers reused within this call where the backend keeps them
        # (`backend.scratch`: PyTorch without gradients); not with scores, which are
        # kept per block.
        scope = contextlib.nullcontext() if return_attention_scores else backend.scratch()
        with scope:
            tensors = (q, q_relative, k, v, attention_bias)
            if block is None:
                output, probabilities = attend_rows(0, None, *tensors)
            else:
                output, probabilities = _attention.attend_in_blocks(
                    attend_rows,
                    query_length,
                    block,
                    return_attention_scores,
                    tensors,
                    training,
                    self._dropout_seeds(training),
                )
        return self._finish(
            self.output_dense(output), probabilities, cache, return_attention_scores
        )

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
            if self._is_rolling(cache) and cache_update_index is not None:
                key_length = None if query.shape[1] is None else key_length + query.shape[1]
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
        options = self.decoder_options
        config.update(
            num_key_value_heads=options.num_key_value_heads,
            sliding_window=options.sliding_window,
            attention_sinks=options.attention_sinks,
            query_key_norm=options.query_key_norm,
            query_key_norm_epsilon=options.query_key_norm_epsilon,
            logit_soft_cap=options.logit_soft_cap,
            output_bias=options.output_bias,
            query_scale_dim=options.query_scale_dim,
        )
        return config
