"""The steps of `MultiHeadRelativeAttention.call` (keras_posenc/layers/relative_attention.py):
the masks, the cache, the query blocks and the routes to the attention core
(keras_posenc/layers/_attention.py): the general one, the Toeplitz one of
``relative="bias"`` and the result of an empty input.

Private: the layer's module keeps its arguments, projections and ``call``; the
relative terms are keras_posenc/layers/_relative_terms.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import _attention, relative_index
from keras_posenc.layers._checks import check_mask


class RelativeCallSteps:
    """The steps of the layer's ``call``, as methods of `MultiHeadRelativeAttention`.

    They read the layer's arguments, its projections (``key_dense``,
    ``value_dense``, ``output_dense``, ``dropout_layer``, made in ``build``) and
    its relative terms (`RelativeTerms`, keras_posenc/layers/_relative_terms.py).
    """

    # ------------------------------------------------------------------ masks

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

    # ------------------------------------------------------------------ cache

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

    # ------------------------------------------------------------------ routes to the core

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

    def _finish(
        self, output: Any, probabilities: Any, cache: Any, return_attention_scores: bool
    ) -> Any:
        results = [output]
        if return_attention_scores:
            results.append(ops.cast(probabilities, self.compute_dtype))
        if cache is not None:
            results.append(cache)
        return results[0] if len(results) == 1 else tuple(results)
