"""keras_hub's ``CachedMultiHeadAttention`` with its attention computed by the core.

`RelativeTransformerDecoder`'s cross-attention. keras_hub's layer keeps its
projections, its weights (names, shapes, variable paths: converters and saved
files read them), its cache and its arguments; only ``_compute_attention``, the
scaled dot-product attention of the projected heads, is the attention core's
(`_attention.attend`), so the core's conventions ("Architecture" in
docs/development.md) hold in the decoder's cross-attention too: float32 logits
and softmax, a finite mask fill, keys and values no query may see zeroed, a
fully masked query row giving zeros.

Why: Keras' ``MultiHeadAttention`` computes the attention without dropout (and
without scores) with ``keras.ops.dot_product_attention``, which on JAX is
``jax.nn.dot_product_attention``; under ``mixed_float16`` that asks XLA for the
float16 dot algorithm ``F16_F16_F32``, which its CPU backend refuses, so a
training step of Shaw's Transformer failed to compile on JAX on a CPU
(tests/zoo/test_mixed_precision_training.py).

This module imports keras_hub (and with it TensorFlow), so the decoder imports it
only when it builds a cross-attention; the class is registered for serialisation
from then on.

Private: the decoder uses it, users do not.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.layers import _attention

_keras_hub = quiet_import("keras_hub")  # imports TensorFlow: this module is imported lazily


@keras.saving.register_keras_serializable(package="keras_posenc")
class CoreCachedMultiHeadAttention(_keras_hub.layers.CachedMultiHeadAttention):
    """``keras_hub.layers.CachedMultiHeadAttention`` attending through the attention core.

    The same arguments, weights, call and cache as keras_hub's layer; the
    attention of the projected queries, keys and values is `_attention.attend`
    (queries scaled by ``1 / sqrt(key_dim)``, float32 logits and softmax,
    dropout on the probabilities by Keras' ``_dropout_layer``, the probabilities
    returned where they are asked for, in the compute dtype). With float32
    inputs and a query row that may see at least one key, the result is Keras'
    up to the rounding of the contractions; a fully masked row gives zeros
    (Keras gives it uniform weights). Keras' computation is kept where the core
    does not express it: several attention axes, or a mask per head.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers._cross_attention import CoreCachedMultiHeadAttention
        >>> attention = CoreCachedMultiHeadAttention(num_heads=2, key_dim=4)
        >>> query, source = np.ones((3, 5, 8), "float32"), np.ones((3, 7, 8), "float32")
        >>> tuple(attention(query, source).shape)
        (3, 5, 8)
    """

    def _compute_attention(
        self,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any = None,
        training: Any = None,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> tuple:
        """``(output, scores)`` of projected ``(batch, length, heads, head_dim)`` tensors.

        ``attention_mask``: None or boolean (integer 0/1 is cast), broadcastable to
        ``(batch, query_length, key_length)``, True where a query may attend to a key.
        ``scores`` is None unless ``return_attention_scores``.
        """
        mask_rank = 0 if attention_mask is None else len(attention_mask.shape)
        if len(query.shape) != 4 or mask_rank > 3:
            # Several attention axes, or a (batch, heads, q, k) mask: Keras' computation.
            return super()._compute_attention(
                query,
                key,
                value,
                attention_mask=attention_mask,
                training=training,
                return_attention_scores=return_attention_scores,
                use_causal_mask=use_causal_mask,
            )
        mask = None
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            while len(mask.shape) < 3:
                mask = ops.expand_dims(mask, 0)
        if use_causal_mask:
            causal = _attention.causal_mask(ops.shape(query)[1], ops.shape(key)[1])
            mask = causal if mask is None else ops.logical_and(mask, causal)
        dropout = self._dropout_layer if self._dropout > 0 else None
        fused = _attention.use_fused_attention(
            "auto",
            self._dropout,
            training,
            expressible=not return_attention_scores and self._value_dim == self._key_dim,
        )
        output, probabilities = _attention.attend(
            _attention.scale_queries(query, self._key_dim),
            key,
            value,
            mask=mask,
            dropout=dropout,
            training=training,
            fused=fused,
            return_scores=return_attention_scores,
        )
        if probabilities is not None:
            probabilities = ops.cast(probabilities, self.compute_dtype)
        return output, probabilities
