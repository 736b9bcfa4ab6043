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
        keys: tuple | None = None,
    ) -> Any:
        """A rank-3 bool mask broadcastable to (batch, q_len, k_len), or None for no mask.

        Queries are at positions ``offset ..``; keys at ``0 ..``, or as ``keys`` says (a
        `key_layout`: their positions, which are written, and their runs of positions).
        """
        mask = None

        def combine(current: Any, new: Any) -> Any:
            return new if current is None else ops.logical_and(current, new)

        if query_mask is not None:
            mask = combine(mask, ops.expand_dims(query_mask, -1))
        if value_mask is not None:
            mask = combine(mask, ops.expand_dims(value_mask, -2))
        if key_mask is not None:
            mask = combine(mask, ops.expand_dims(key_mask, -2))
        window = self.decoder_options.sliding_window
        if use_causal_mask or window is not None or keys is not None:
            queries = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
            positions = ops.arange(key_length, dtype="int32") if keys is None else keys[0]
            mask = combine(
                mask,
                _attention.position_mask(
                    queries,
                    positions,
                    use_causal_mask,
                    window,
                    self.decoder_options.attention_sinks,
                ),
            )
            if keys is not None and keys[1] is not None:  # a rolling cache's unwritten slots
                mask = combine(mask, ops.reshape(keys[1], (1, 1, -1)))
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

    def _project_keys(self, key: Any) -> Any:
        """The projected keys (batch, length, kv_heads, key_dim), normalised per head with
        ``query_key_norm``."""
        k = self.key_dense(key)
        return k if self.key_norm is None else self.key_norm(k)

    def cache_shape(self, batch_size: int, max_length: int) -> tuple:
        """The shape of the decoding cache for ``max_length`` positions:
        ``(batch, 2, length, num_key_value_heads, key_dim)``.

        With a ``sliding_window`` the length is ``attention_sinks + sliding_window`` (a
        rolling cache: the sinks and the last ``sliding_window`` keys), however long or
        short the generation: up to that length a rolling cache is an ordinary one, and one
        shape for every length keeps a compiled or exported decoding step on the rolling path
        (a cache length unknown when tracing would not be recognised as rolling).

        Examples:

        >>> from keras_posenc.layers import MultiHeadRelativeAttention
        >>> layer = MultiHeadRelativeAttention(
        ...     8, 16, relative=None, num_key_value_heads=2, sliding_window=512
        ... )
        >>> layer.cache_shape(1, 4096)
        (1, 2, 512, 2, 16)
        """
        rolling = self.decoder_options.rolling_length
        length = max_length if rolling is None else rolling
        return (batch_size, 2, length, self.num_key_value_heads, self.key_dim)

    def _is_rolling(self, cache: Any) -> bool:
        """Whether ``cache`` is a rolling one: exactly sinks + window positions long."""
        rolling = self.decoder_options.rolling_length
        return rolling is not None and cache is not None and cache.shape[2] == rolling

    def _check_cache_layout(self, cache: Any) -> None:
        name = f"{type(self).__name__}({self.name!r})"
        if self.value_dim != self.key_dim:
            raise ValueError(
                f"{name}: `cache` needs value_dim == key_dim (one (batch, 2, max_len, "
                f"num_key_value_heads, key_dim) tensor holds keys and values); got "
                f"key_dim={self.key_dim}, value_dim={self.value_dim}."
            )
        _attention.check_cache(name, "cache", cache, self.num_key_value_heads, self.key_dim)

    def _use_cache(self, cache: Any, key: Any, value: Any, cache_update_index: Any) -> tuple:
        name = f"{type(self).__name__}({self.name!r})"
        self._check_cache_layout(cache)
        if cache_update_index is None:
            return cache[:, 0, ...], cache[:, 1, ...], cache
        new_key = self._project_keys(key)
        if self.rotary is not None and not self.rotary.dynamic:
            # Turned once, when written, without xPos' factors (each call applies them
            # centred on its queries); the dynamic scalings' rotation changes with the
            # length, so their cache holds the keys before rotation.
            new_key = self.rotary.rotate(new_key, cache_update_index, "key", xpos=False)
        return _attention.write_key_value_cache(
            cache, new_key, self.value_dense(value), cache_update_index, caller=name
        )

    def _use_rolling_cache(
        self, cache: Any, key: Any, value: Any, index: Any, masks: tuple
    ) -> tuple:
        """Keys and values of a call on a rolling cache, the cache written, and their layout.

        The keys are the cache's, in order of position (the sinks, then the ``window``
        positions before ``index``), followed by the call's new keys; the layout
        (`_attend_block`'s ``keys``) gives their positions, which of them are written, and
        their runs of consecutive positions (the sinks; the window and the new keys), so
        relative terms and masks see true distances. The new rows then go into their slots
        (`_attention.write_rolling_rows`).
        """
        name = f"{type(self).__name__}({self.name!r})"
        self._check_cache_layout(cache)
        sinks, window = self.attention_sinks, self.sliding_window
        if index is None:
            raise ValueError(
                f"{name}: a cache of sliding_window + attention_sinks = {sinks + window} "
                f"positions is a rolling cache, whose slots hold positions that depend on "
                f"the step: call it with `cache_update_index` (the position of the first query)."
            )
        if any(mask is not None for mask in masks):
            raise ValueError(
                f"{name}: a rolling cache (sliding_window + attention_sinks = {sinks + window} "
                f"positions) takes no `value_mask`, `key_mask`, `attention_mask` or "
                f"`attention_bias`: its slots do not follow the keys' positions. Use a cache "
                f"of the whole length for padded keys or a bias."
            )
        if self.rotary is not None and (self.rotary.dynamic or self.rotary.causal_only):
            raise ValueError(
                f"{name}: rotary={self.rotary!r} turns cached keys by the current length or "
                f"centres them on the queries, which a rolling cache cannot replay; use a "
                f"cache of the whole length (longer than sliding_window + attention_sinks)."
            )
        if self._reads_query_position:
            raise ValueError(
                f"{name}: position={self.position!r} reads each query's own position besides "
                f"the distance, which the runs of a rolling cache do not carry; use a cache of "
                f"the whole length (longer than sliding_window + attention_sinks)."
            )
        _attention.check_cache_index(name, index, None, None)
        slots, positions, written = _attention.rolling_positions(index, sinks, window)
        cached = ops.take(cache, slots, axis=2)  # (batch, 2, sinks + window, ...) in order
        new_key = self._project_keys(key)
        if self.rotary is not None:  # turned once, at its position, like `_use_cache`
            new_key = self.rotary.rotate(new_key, index, "key", xpos=False)
        new_value = self.value_dense(value)
        length = ops.shape(new_key)[1]
        k = ops.concatenate([cached[:, 0], ops.cast(new_key, cache.dtype)], axis=1)
        v = ops.concatenate([cached[:, 1], ops.cast(new_value, cache.dtype)], axis=1)
        index = ops.cast(index, "int32")
        layout = (
            ops.concatenate([positions, index + ops.arange(length, dtype="int32")]),
            ops.concatenate([written, ops.ones((length,), "bool")]),
            # Runs of consecutive positions: (keys, their first query's position minus the
            # first key's), the offset of the relative terms.
            ((sinks, index), (window + length, window)) if sinks else ((window + length, window),),
        )
        keys = _attention.write_rolling_rows(cache[:, 0], new_key, index, sinks)
        values = _attention.write_rolling_rows(cache[:, 1], new_value, index, sinks)
        return k, v, ops.stack((keys, values), axis=1), layout

    # ------------------------------------------------------------------ sliding windows

    @property
    def _reads_query_position(self) -> bool:
        """Whether the relative term reads the query's position, not only ``j - i`` (FIRE):
        it then needs the keys at positions ``0 ..`` (no runs: `_attend_block`)."""
        return self.relative == "bias" and not self.position.toeplitz

    @staticmethod
    def _shift_runs(keys: tuple, first: int) -> tuple:
        """A key layout's runs (`_attend_block`) for the block of queries from ``first``."""
        return tuple((run, run_offset + first) for run, run_offset in keys[2])

    def _window_block(
        self, query_length: Any, key_length: Any, offset: Any, block: int | None
    ) -> int | None:
        """Queries per block with a sliding window whose blocks read only their keys.

        Where `_window_keys` applies, blocks of ``query_block_size`` queries (default the
        window, at least `_attention.MIN_AUTO_BLOCK`) each attend to about ``2 W`` keys
        (``3 W`` bidirectional) instead of all: time and memory grow as ``L W``, not
        ``L^2``. Otherwise ``block``, the ordinary blocking.
        """
        if self._window_keys(0, query_length, offset, key_length) is None:
            return block
        size = self.query_block_size or max(self.sliding_window, _attention.MIN_AUTO_BLOCK)
        return None if size >= query_length else size

    def _window_keys(self, first: Any, last: Any, offset: Any, key_length: Any) -> tuple | None:
        """``(sinks, lo, hi)``: the keys queries ``first .. last - 1`` can see in the window,
        ``lo .. hi - 1`` and the first ``sinks`` (before ``lo``); None where that is not
        known before running (unknown lengths, a tensor offset) or saves nothing (at most
        ``2 W`` keys)."""
        window = self.sliding_window
        static = all(isinstance(x, int) for x in (first, last, offset, key_length))
        if window is None or not static or key_length <= 2 * window or self._reads_query_position:
            return None
        lo = max(0, offset + first - window + 1)
        hi = min(key_length, offset + last - 1 + window)  # the causal mask cuts the rest
        return min(self.attention_sinks, lo), lo, max(hi, lo)

    @staticmethod
    def _window_columns(window: tuple, tensors: tuple, first_position: int) -> tuple:
        """``tensors`` (keys and values on axis 1; masks and biases on their last axis, or
        broadcast there) at the window's keys, and the layout of those keys for a block
        whose first query is at ``first_position``."""
        sinks, lo, hi = window
        columns = []
        for index, tensor in enumerate(tensors):
            if tensor is None or (index >= 2 and tensor.shape[-1] == 1):
                columns.append(tensor)
                continue
            # Keys and values (batch, k_len, heads, dim); masks and biases (..., k_len).
            pick = (lambda x, a, b: x[:, a:b]) if index < 2 else (lambda x, a, b: x[..., a:b])
            part = pick(tensor, lo, hi)
            if sinks:
                part = ops.concatenate([pick(tensor, 0, sinks), part], axis=1 if index < 2 else -1)
            columns.append(part)
        positions = np.concatenate([np.arange(sinks), np.arange(lo, hi)]).astype("int32")
        runs = ((hi - lo, first_position - lo),)
        if sinks:
            runs = ((sinks, first_position),) + runs
        return columns, (ops.convert_to_tensor(positions), None, runs)

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
        keys: tuple | None = None,
        dropout: Any = None,
    ) -> tuple:
        """Attention of one block of (scaled) queries ``q`` at ``offset`` to every key.

        ``masks``: the block's query mask, the value and key masks and the block's
        rows of ``attention_mask`` (each None or bool). ``q`` may be a pair: the queries
        of the content logits and those of the relative key term (xPos). ``keys``: None
        (keys at positions ``0 ..``) or their layout ``(positions, written, runs)`` (a
        rolling cache, a window's keys): ``runs`` are ``(keys, offset)`` pairs, the
        relative terms' offset of each run of consecutive positions, for this block.
        ``dropout``: None (the layer's ``dropout_layer``) or the block's
        `_attention.SeededDropout` (a block recomputed in the backward pass).
        """
        query_length = ops.shape(q[0] if isinstance(q, tuple) else q)[1]
        key_length = ops.shape(k)[1]
        mask = self._attention_mask(*masks, use_causal_mask, query_length, key_length, offset, keys)
        return self._attend(
            q,
            k,
            v,
            mask,
            attention_bias,
            query_length,
            key_length,
            offset if keys is None else keys[2],
            training,
            return_attention_scores,
            dropout,
        )

    def _dropout_seeds(self, training: Any) -> Any:
        """None, or where dropout is active in training and the backend's recomputation does
        not replay random draws itself (`backend.replays_random_draws`), the function that
        draws one block's dropout seed (`_attention.attend_in_blocks`)."""
        if not self.dropout or (isinstance(training, bool | int | type(None)) and not training):
            return None
        if backend.replays_random_draws():
            return None
        return self.dropout_layer.seed_generator.next

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
        dropout: Any = None,
    ) -> tuple:
        """Attention of the (scaled) queries ``q`` at ``offset`` to every key (the core's).

        The relative logits are computed before the content logits, so the
        intermediate tensors of their computation are gone when the content
        logits (S) arrive; peak: the relative logits, the content logits and
        their sum (3 S without query blocking).
        """
        q, q_relative = q if isinstance(q, tuple) else (q, q)
        # `offset` may be the runs of a key layout (`_attend_block`): one relative term each.
        runs = offset if isinstance(offset, tuple) else ((key_length, offset),)
        relative_logits = self._relative_logits_of_runs(q_relative, query_length, runs)
        if attention_bias is not None:
            attention_bias = _attention.float32_bias(attention_bias)
        cap = self.logit_soft_cap
        capped = None
        if cap is not None:  # the content and relative logits are capped, the rest added after
            capped, bias = relative_logits, attention_bias
        elif attention_bias is None or relative_logits is None:
            bias = attention_bias if relative_logits is None else relative_logits
        else:
            bias = relative_logits + attention_bias
        del relative_logits, attention_bias
        # `keras.ops.dot_product_attention` where it pays ("auto": PyTorch, whose CPU
        # kernel takes the bias and skips the probabilities) or where it was asked for.
        fused = _attention.use_fused_attention(
            self.fused_attention,
            self.dropout,
            training,
            expressible=self.relative != "keys_values"
            and cap is None
            and not return_attention_scores
            and self.value_dim == self.key_dim,
        )
        value_term = None
        if self.relative == "keys_values":

            def value_term(probabilities: Any) -> Any:
                return self._relative_value_term_of_runs(probabilities, query_length, runs)

        return _attention.attend(
            q,
            k,
            v,
            mask=mask,
            bias=bias,
            dropout=self.dropout_layer if dropout is None else dropout,
            training=training,
            fused=fused,
            return_scores=return_attention_scores,
            value_term=value_term,
            soft_cap=cap,
            capped_bias=capped,
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
        """The attention output of ``relative="bias"`` (or of no relative term under a causal
        mask) from the bias's diagonals, or None.

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
        # With no relative term the bias is zero: a causal mask or a window alone is Toeplitz
        # too (RoPE's decoders). Before this route PyTorch attended block by block through a
        # built mask: a causal pass at L = 8192 took 12.9 s and 8.5 GB, after it 1.1 s and
        # 0.2 GB (decoder_window, docs/benchmark-notes.md).
        zero_bias = self.relative is None and (use_causal_mask or self.sliding_window is not None)
        if (
            not (zero_bias or (self.relative == "bias" and self.position.toeplitz))
            or self.logit_soft_cap is not None
            # A window without sinks is a band of diagonals: Toeplitz too, where its blocks
            # would read every key anyway (`_window_keys`: up to 2 W keys).
            or (
                self.sliding_window is not None
                and (
                    self.attention_sinks
                    or self._window_keys(0, query_length, offset, key_length) is not None
                )
            )
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
        if zero_bias:
            diagonals = ops.zeros((self.num_heads, query_length + key_length - 1), "float32")
        else:
            diagonals = self.relative_bias.diagonals(query_length, key_length, offset, "float32")
        distances = relative_index.distances_in_order(query_length, key_length, offset)
        fill = ops.cast(_attention.MASK_FILL, "float32")
        if use_causal_mask:
            diagonals = ops.where(ops.greater(distances, 0)[None, :], fill, diagonals)
        if self.sliding_window is not None:
            outside = ops.greater_equal(ops.abs(distances), self.sliding_window)
            diagonals = ops.where(outside[None, :], fill, diagonals)
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
