"""Contextual position encoding (CoPE, Golovneva et al. 2024): positions counted by gates.

The layer's attention is the one core of keras_posenc/layers/_attention.py; CoPE's term
enters it as an additive bias. The position of key ``j`` seen from query ``i`` is the sum of
gates ``sigmoid(q_i . k_t / sqrt(d))`` over the keys ``t = j .. i``, so the model decides what
to count (tokens, words, sentences); its embedding is interpolated between the integer
positions' embeddings, read from ``(batch, heads, queries, max_positions)`` products of the
queries with the position table, as the relative layers read their tables (no ``(length,
length, head_dim)`` tensor is built).
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    check_bias,
    check_bool,
    check_bool_or_auto,
    check_features,
    check_int,
    check_mask,
    check_rate,
    shape_of,
)
from keras_posenc.layers._initializers import sublayer_initializer

__all__ = ["ContextualPositionAttention"]


@keras.saving.register_keras_serializable(package="keras_posenc")
class ContextualPositionAttention(keras.layers.Layer):
    """Causal multi-head self-attention with contextual position encoding (CoPE).

    With projected queries and keys ``q_i, k_j`` (head size ``d``) and content logits
    ``l_ij = q_i . k_j / sqrt(d)`` for ``j <= i``:

    - gates ``g_ij = sigmoid(l_ij)``, zero where the key is masked (later keys, padding);
    - positions ``p_ij = min(sum_{t=j..i} g_it, max_positions - 1)``: how many gated keys lie
      between key ``j`` and the query, a real number;
    - the position term ``c_ij = q_i . e[p_ij]``, with ``e[p]`` interpolated between the
      table's integer rows, ``e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p]``;
      the table ``E`` of ``(key_dim, max_positions)`` is shared by the heads (the paper's);
    - ``softmax_j(l_ij + c_ij)`` weights the values.

    ``q_i . e[p]`` is computed once for every integer ``p`` and interpolated per pair, as the
    paper does. The position term is added to the logits as a float32 bias of the attention
    core (masks, float32 softmax, a fully masked query gets zeros; `MultiHeadRelativeAttention`'s
    conventions). The attention is causal always (CoPE's positions count the keys up to the
    query). Another scheme's bias (ALiBi, a T5 table: `RelativePositionBias`) adds through
    ``attention_bias``.

    Cached decoding: with ``cache`` (keras-hub's ``(batch, 2, max_length, heads, key_dim)``
    layout) and ``cache_update_index``, the call's rows are written at the index and the
    queries attend to the cached keys at or before their positions; each step's gates and
    positions are those of the full pass (the positions of one query depend on its own row of
    gates only), so decoding step by step equals the full pass.

    Args:
        num_heads: attention heads.
        key_dim: size of each head.
        max_positions: rows of the position table (the paper's ``npos_max``); contextual
            positions are clipped to ``max_positions - 1``.
        dropout: dropout of the attention probabilities.
        use_bias: whether the projections have biases.
        output_shape: size of the output's last axis; default the input's.
        kernel_initializer: the projections' kernels' initializer (each its own copy).
        bias_initializer: their biases' initializer.
        embeddings_initializer: the position table's initializer (the paper's: zeros).
        fused_attention: ``"auto"``, ``True`` or ``False``; see `MultiHeadRelativeAttention`.
        **kwargs: standard layer arguments.

    Call arguments:
        inputs: ``(batch, length, features)``.
        padding_mask: ``(batch, key_length)`` bool or int 0/1, True for real tokens (the keys
            of the call, or of the cache with ``cache``). Default: the input's Keras mask
            (without a cache).
        attention_bias: an additive float bias broadcastable to ``(batch, heads, length,
            key_length)``.
        cache: the keys/values cache, or None.
        cache_update_index: the position of ``inputs[:, 0]`` (with ``cache``).
        return_attention_scores: also return the probabilities.
        training: whether dropout is active.

    Returns:
        ``(batch, length, output_shape)``; with ``cache``, ``(output, new_cache)``; with
        ``return_attention_scores`` the probabilities after them.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers import ContextualPositionAttention
        >>> layer = ContextualPositionAttention(2, 4, max_positions=8)
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> full = ops.convert_to_numpy(layer(x))
        >>> cache = np.zeros((2, 2, 5, 2, 4), "float32")
        >>> steps = []
        >>> for index in range(5):
        ...     out, cache = layer(x[:, index : index + 1], cache=cache, cache_update_index=index)
        ...     steps.append(ops.convert_to_numpy(out))
        >>> bool(np.allclose(np.concatenate(steps, 1), full, atol=1e-5))
        True

    Reference:
        Golovneva, Wang, Weston, Sukhbaatar, "Contextual Position Encoding: Learning to
        Count What's Important", arXiv 2405.18719, 2024.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        max_positions: int = 64,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | None = None,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        embeddings_initializer: Any = "zeros",
        fused_attention: bool | str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        self.key_dim = check_int(caller, "key_dim", key_dim, 1)
        self.max_positions = check_int(caller, "max_positions", max_positions, 2)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        self._output_dim = (
            None if output_shape is None else check_int(caller, "output_shape", output_shape, 1)
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)
        self.supports_masking = True

    @property
    def _owner(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def build(self, input_shape: Any, *args: Any, **kwargs: Any) -> None:
        features = input_shape[-1]
        if features is None:
            raise ValueError(f"{self._owner}: the last axis of `inputs` must be known.")
        features = int(features)
        shape = (None, None, features)
        for name in ("query", "key", "value"):
            dense = _attention.head_projection(self, self.key_dim, name)
            dense.build(shape)
            setattr(self, f"{name}_dense", dense)
        self.output_dense = _attention.projection(
            self, "abhd,hdo->abo", (None, self._output_dim or features), "o", "attention_output"
        )
        self.output_dense.build((None, None, self.num_heads, self.key_dim))
        self.position_embeddings = self.add_weight(
            shape=(self.key_dim, self.max_positions),
            initializer=sublayer_initializer(self.embeddings_initializer, "positions"),
            name="position_embeddings",
        )
        self.attention_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def contextual_positions(self, logits: Any, allowed: Any) -> Any:
        """``p_ij``, float32 ``(batch, heads, queries, keys)``, from the scaled content logits
        and the mask (``(batch or 1, queries, keys)`` bool): the gated keys from ``j`` to the
        end of the row, clipped to ``max_positions - 1``."""
        gates = ops.where(ops.expand_dims(allowed, 1), ops.sigmoid(logits), 0.0)
        # The sum from key j to the row's end, as the row's total minus the keys before j
        # (a cumulative sum, no flips; masked keys add nothing).
        before = ops.cumsum(gates, axis=-1) - gates
        positions = ops.sum(gates, axis=-1, keepdims=True) - before
        return ops.minimum(positions, float(self.max_positions - 1))

    def _position_term(self, q: Any, positions: Any) -> Any:
        """``q_i . e[p_ij]``, float32, interpolated between integer positions."""
        table = ops.cast(self.position_embeddings, q.dtype)
        per_position = ops.cast(ops.einsum("bqhd,dp->bhqp", q, table), "float32")
        floor = ops.floor(positions)
        weight = positions - floor
        low = ops.take_along_axis(per_position, ops.cast(floor, "int32"), axis=-1)
        high = ops.take_along_axis(per_position, ops.cast(ops.ceil(positions), "int32"), axis=-1)
        return weight * high + (1.0 - weight) * low

    def _mask(self, length: Any, key_length: Any, offset: Any, padding: Any) -> Any:
        allowed = _attention.causal_mask(length, key_length, offset)
        if padding is not None:
            allowed = ops.logical_and(allowed, ops.expand_dims(padding, 1))
        return allowed

    def call(
        self,
        inputs: Any,
        padding_mask: Any = None,
        attention_bias: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        mask: Any = None,
    ) -> Any:
        check_features(self._owner, "inputs", inputs)
        x = _attention.unmasked(inputs)
        batch, length = shape_of(x)[0], shape_of(x)[1]
        q = self.query_dense(x)
        k = self.key_dense(x)
        v = self.value_dense(x)
        offset = 0
        if cache is not None:
            if cache_update_index is None:
                raise ValueError(f"{self._owner}: `cache` needs `cache_update_index`.")
            _attention.check_cache(self._owner, "cache", cache, self.num_heads, self.key_dim)
            k, v, cache = _attention.write_key_value_cache(
                cache, k, v, cache_update_index, self._owner
            )
            offset = cache_update_index
        elif cache_update_index is not None:
            raise ValueError(f"{self._owner}: `cache_update_index` is given without `cache`.")
        key_length = ops.shape(k)[1]
        keys = shape_of(k)[1]
        padding = check_mask(
            self._owner, "padding_mask", padding_mask, (batch, keys), ("batch", "key_length")
        )
        if padding is None and cache is None:
            padding = check_mask(self._owner, "mask", mask, (batch, keys), ("batch", "length"))
        allowed = self._mask(ops.shape(x)[1], key_length, offset, padding)
        scaled = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", scaled, k), "float32")
        bias = self._position_term(q, self.contextual_positions(logits, allowed))
        del logits
        if attention_bias is not None:
            attention_bias = check_bias(
                self._owner,
                "attention_bias",
                attention_bias,
                (batch, self.num_heads, length, keys),
                ("batch", "num_heads", "length", "key_length"),
            )
            bias = bias + _attention.float32_bias(attention_bias)
        fused = not return_attention_scores and _attention.use_fused_attention(
            self.fused_attention, self.dropout, training
        )
        output, scores = _attention.attend(
            scaled,
            k,
            v,
            mask=allowed,
            bias=bias,
            dropout=self.attention_dropout,
            training=training,
            fused=fused,
            return_scores=return_attention_scores,
        )
        output = self.output_dense(output)
        results = (output,) if cache is None else (output, cache)
        if return_attention_scores:
            results += (scores,)
        return results[0] if len(results) == 1 else results

    def compute_mask(self, inputs: Any, mask: Any = None, **kwargs: Any) -> Any:
        return mask if kwargs.get("cache") is None else None

    def compute_output_spec(self, inputs: Any, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        shape = (*tuple(inputs.shape)[:-1], self._output_dim or inputs.shape[-1])
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        results = (output,) if cache is None else (output, keras.KerasTensor(cache.shape))
        if kwargs.get("return_attention_scores"):
            batch, length = inputs.shape[0], inputs.shape[1]
            keys = length if cache is None else cache.shape[2]
            results += (keras.KerasTensor((batch, self.num_heads, length, keys), "float32"),)
        return results[0] if len(results) == 1 else results

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            max_positions=self.max_positions,
            dropout=self.dropout,
            use_bias=self.use_bias,
            output_shape=self._output_dim,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
            fused_attention=self.fused_attention,
        )
        return config
