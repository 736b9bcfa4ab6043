"""Transformer decoder block with relative position self-attention.

`RelativeTransformerDecoder` is ``keras_hub.layers.TransformerDecoder`` with its
self-attention replaced by `MultiHeadRelativeAttention`; its arguments, sublayers
and residual blocks are those it shares with `RelativeTransformerEncoder`
(keras_posenc/layers/relative_transformer.py).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc.layers._attention import unmasked, zero_invalid
from keras_posenc.layers._checks import shape_of
from keras_posenc.layers._initializers import redraw_seeded_weights, sublayer_initializer
from keras_posenc.layers.relative_transformer import _RelativeTransformerBase

__all__ = ["RelativeTransformerDecoder"]


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativeTransformerDecoder(_RelativeTransformerBase):
    """Transformer decoder block whose causal self-attention uses relative positions.

    ``keras_hub.layers.TransformerDecoder`` with `MultiHeadRelativeAttention`
    as its (causal) self-attention: a self-attention block, an optional
    cross-attention block over an encoder's output, and a feed-forward block,
    each with a residual connection, dropout and layer normalisation (post-norm
    by default, pre-norm with ``normalize_first=True``).

    Called as ``layer(decoder_sequence)`` it is a decoder-only block (GPT);
    called as ``layer(decoder_sequence, encoder_sequence)`` it has
    cross-attention (the original encoder-decoder Transformer). Which one is
    fixed by the first call (``build``), as in keras_hub.

    The cross-attention is ``keras_hub.layers.CachedMultiHeadAttention`` (its
    arguments, weights and cache), with no relative term: relative positions are
    defined within one sequence, and Shaw et al. and T5 use them in self-attention
    only. Its attention itself is computed by the library's attention core, as
    every other attention of keras-posenc is (float32 logits and softmax, dropout
    on the probabilities): Keras' own computation goes through
    ``keras.ops.dot_product_attention``, which on JAX asks XLA's CPU backend for a
    float16 dot algorithm it does not have, so the block did not train under
    ``mixed_float16`` there (tests/zoo/test_mixed_precision_training.py). A query
    whose encoder keys are all masked gets a zero attention output (the core's
    convention), not NaN.

    T5's log buckets in a decoder: ``position="t5_decoder"`` (or
    ``LogBuckets(..., bidirectional=False)``), as T5's decoder has them: under the
    causal mask a query never sees later keys, so all buckets go to ``r <= 0``.
    ``position="t5"`` is the encoder's bidirectional ``LogBuckets(32, 128)`` here
    too, whose buckets for keys after the query a causal decoder leaves unused.

    Decoding follows keras_hub's ``TransformerDecoder``: with
    ``self_attention_cache`` (``(batch, 2, max_length, num_key_value_heads, key_dim)``
    keys and values; ``self_attention.cache_shape(batch, max_length)`` once built) and
    ``self_attention_cache_update_index`` (the position of the first query), the
    projected keys/values of ``decoder_sequence`` are written into the cache, relative
    positions are offset by the index, and one step at a time equals the full causal
    computation. The cross-attention cache holds the encoder's projected keys/values:
    computed and written when ``cross_attention_cache_update_index`` is ``0``, reused
    as it is when it is ``None``.

    Today's decoders: the self-attention arguments ``num_key_value_heads``,
    ``sliding_window``, ``attention_sinks``, ``query_key_norm``, ``logit_soft_cap``,
    ``output_bias`` and ``query_scale_dim`` are passed to `MultiHeadRelativeAttention`.
    With ``sliding_window=W`` a self-attention cache of ``attention_sinks + W``
    positions (what ``self_attention.cache_shape`` gives for any longer
    ``max_length``) is a rolling one: its memory stays the same however long the
    generation, and it takes no ``decoder_padding_mask``, ``decoder_attention_mask`` or
    ``attention_bias`` (its slots do not follow the positions). Blocks with a window and
    blocks without one alternate in a stack as Gemma 2's local and global layers do,
    each with its own cache (example below).

    Masks follow Keras: ``True`` marks a real token. The decoder padding mask
    is ``decoder_padding_mask`` when given, else the decoder sequence's Keras
    mask; the encoder padding mask likewise. The output carries the decoder
    sequence's Keras mask.

    With ``normalize_first=True`` the block's output is not normalised: a
    pre-norm stack needs a ``LayerNormalization`` after its last block.

    Args:
        intermediate_dim: hidden size of the feed-forward network.
        num_heads: number of attention heads.
        key_dim: size of each attention head; default ``None``: the inputs'
            last axis // ``num_heads`` (as keras_hub does).
        dropout: dropout rate of the attention probabilities and of each
            block's output before the residual connection.
        activation: activation of the feed-forward network's first layer.
        layer_norm_epsilon: epsilon of the layer normalisations.
        layer_norm: ``"layer"`` (default, ``LayerNormalization``) or ``"rms"``
            (``RMSNormalization``: a scale, no mean subtracted, no offset).
        kernel_initializer: initializer of every projection and dense kernel; each
            kernel draws from its own copy (a seeded initializer gets one seed per
            kernel, derived from its seed), so no two start equal.
        bias_initializer: initializer of every bias (copied the same way).
        normalize_first: ``True``: pre-norm, ``x + f(norm(x))`` (GPT-2);
            ``False`` (default): post-norm, ``norm(x + f(x))`` (the original
            Transformer, BERT).
        use_bias: whether the attention projections and the feed-forward
            layers have biases (``False``: as in T5). Layer normalisations
            always have both scale and offset.
        relative: ``"keys_values"`` (Shaw et al., default), ``"keys"``,
            ``"bias"`` (T5) or None (no relative term); see
            `MultiHeadRelativeAttention`.
        position: the position scheme, passed to `MultiHeadRelativeAttention`: a
            `PositionScheme` (`ClipPositions`, `LogBuckets`, ...; with
            ``relative="bias"`` also `ALiBi`, `KERPLE`, `FIRE`, `ContinuousBias`),
            its config, or a registered name (``"shaw"``, ``"t5_decoder"`` (T5's
            decoder buckets, see above), ``"irpe"``, ...). ``None`` (default):
            ``ClipPositions(max_distance=16)``, or none with ``relative=None``.
        rotary: ``None`` (default) or a `RotaryPositions` (rotary embedding,
            scaled or xPos) applied to the self-attention's queries and keys (the
            head size must be even); passed to `MultiHeadRelativeAttention`.
        query_block_size: passed to the self-attention's
            ``MultiHeadRelativeAttention``: ``None`` (default) blocks the queries
            automatically when one example's logits exceed a size measured per
            backend (16 MiB on PyTorch, 32 MiB elsewhere); an int forces blocks of
            that many queries.
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; dropout draws the same masks again) instead of keeping its
            activations: less memory per block, about one more forward pass of time.
            Default False. Calls with a cache or returning scores are not recomputed.
        relative_logits: passed to the self-attention's
            ``MultiHeadRelativeAttention``: ``"auto"`` (default), ``"gather"`` or
            ``"skew"`` (Music Transformer's memory-efficient shift; `ClipPositions` tables
            with ``relative="keys"`` or ``"keys_values"`` only).
        num_key_value_heads: heads of the self-attention's keys and values (default
            ``num_heads``; must divide it): grouped-query attention, 1 for multi-query; passed
            to `MultiHeadRelativeAttention`, as are the arguments below.
        sliding_window: None (default) or ``W``: each query sees the keys within ``W``
            positions (``|i - j| < W``; under the causal mask the query and the ``W - 1``
            before it; a cache of ``attention_sinks + W`` positions is a rolling one, see
            Decoding above).
        attention_sinks: with ``sliding_window``, the first ``attention_sinks`` positions
            stay visible to every query (default 0).
        query_key_norm: None (default), ``"rms"`` or ``"layer"``: the self-attention's
            queries and keys normalised per head.
        query_key_norm_epsilon: the epsilon of those norms (default ``1e-6``).
        logit_soft_cap: None (default) or ``c > 0``: the self-attention's logits become
            ``c * tanh(logits / c)``.
        output_bias: whether the self-attention's output projection has a bias; None
            (default) follows ``use_bias``.
        query_scale_dim: the self-attention's queries are scaled by
            ``1 / sqrt(query_scale_dim)``; default the head size.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        decoder_sequence: ``(batch, length, hidden)``.
        encoder_sequence: ``(batch, encoder_length, encoder_hidden)``, or
            ``None`` for a decoder-only block.
        decoder_padding_mask: boolean or integer 0/1, ``True`` for real tokens; ``(batch,
            length)``, or with a self-attention cache ``(batch, max_length)``
            (it masks the cached keys). Default: the decoder sequence's Keras
            mask (not used with a cache, whose keys it does not cover).
        decoder_attention_mask: ``(batch, length, key_length)`` boolean or integer 0/1, combined
            with the causal and padding masks (``key_length`` is
            ``max_length`` with a cache).
        encoder_padding_mask: ``(batch, encoder_length)`` boolean or integer 0/1; default the
            encoder sequence's Keras mask.
        encoder_attention_mask: ``(batch, length, encoder_length)`` boolean or integer 0/1, for
            the cross-attention.
        self_attention_cache: ``(batch, 2, max_length, num_key_value_heads, key_dim)``, or
            a rolling cache of ``attention_sinks + sliding_window`` positions.
        self_attention_cache_update_index: int or scalar int tensor, the
            position of ``decoder_sequence``'s first token.
        cross_attention_cache: ``(batch, 2, encoder_length, num_heads,
            key_dim)``; needs ``self_attention_cache``.
        cross_attention_cache_update_index: ``0`` to compute the cache from
            ``encoder_sequence``, ``None`` to reuse it.
        use_causal_mask: default ``True``: position ``i`` attends to keys at
            positions ``<= i`` only.
        attention_bias: an additive float bias broadcastable to ``(batch,
            num_heads, length, key_length)`` added to the self-attention logits
            (a shared T5 bias, ALiBi).
        training: whether dropout is active.

    Returns:
        ``output`` of shape ``(batch, length, hidden)``; with a
        self-attention cache ``(output, self_attention_cache)``, and with a
        cross-attention cache too ``(output, self_attention_cache,
        cross_attention_cache)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers import LogBuckets
        >>> from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder
        >>> decoder = RelativeTransformerDecoder(
        ...     intermediate_dim=32,
        ...     num_heads=2,
        ...     relative="bias",
        ...     position=LogBuckets(num_buckets=8, bidirectional=False),
        ... )
        >>> x, encoded = np.zeros((3, 5, 8), "float32"), np.zeros((3, 9, 8), "float32")
        >>> tuple(decoder(x, encoded).shape)
        (3, 5, 8)
        >>> cache = np.zeros((3, 2, 5, 2, 4), "float32")  # (batch, 2, max_length, heads, key_dim)
        >>> cross_cache = np.zeros((3, 2, 9, 2, 4), "float32")
        >>> output, cache, cross_cache = decoder(
        ...     x[:, :1],
        ...     encoded,
        ...     self_attention_cache=cache,
        ...     self_attention_cache_update_index=0,
        ...     cross_attention_cache=cross_cache,
        ...     cross_attention_cache_update_index=0,
        ... )
        >>> tuple(output.shape), tuple(cache.shape), tuple(cross_cache.shape)
        ((3, 1, 8), (3, 2, 5, 2, 4), (3, 2, 9, 2, 4))

        Gemma 2's alternation: a local block (a window of 4 keys, a rolling cache of 4
        positions) and a global one (a cache of the whole length), 4 query heads on 2
        key/value heads, rotary, soft-capped logits; decoding one token at a time gives
        the full pass:

        >>> import keras
        >>> from keras_posenc.layers import RotaryPositions
        >>> blocks = [
        ...     RelativeTransformerDecoder(
        ...         16, 4, relative=None, rotary=RotaryPositions(), num_key_value_heads=2,
        ...         sliding_window=window, logit_soft_cap=50.0, normalize_first=True,
        ...     )
        ...     for window in (4, None)
        ... ]
        >>> x = np.random.default_rng(0).normal(size=(1, 10, 8)).astype("float32")
        >>> full = x
        >>> for block in blocks:
        ...     full = block(full)
        >>> caches = [np.zeros(b.self_attention.cache_shape(1, 10), "float32") for b in blocks]
        >>> [cache.shape[2] for cache in caches]
        [4, 10]
        >>> steps = []
        >>> for t in range(10):
        ...     y = x[:, t : t + 1]
        ...     for i, block in enumerate(blocks):
        ...         y, caches[i] = block(
        ...             y, self_attention_cache=caches[i], self_attention_cache_update_index=t
        ...         )
        ...     steps.append(keras.ops.convert_to_numpy(y))
        >>> bool(np.allclose(np.concatenate(steps, 1), keras.ops.convert_to_numpy(full), atol=1e-5))
        True

    Reference:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        key_dim: int | None = None,
        dropout: float = 0.0,
        activation: Any = "relu",
        layer_norm_epsilon: float = 1e-5,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        normalize_first: bool = False,
        use_bias: bool = True,
        relative: str | None = "keys_values",
        position: Any = None,
        rotary: Any = None,
        query_block_size: int | None = None,
        relative_logits: str = "auto",
        num_key_value_heads: int | None = None,
        sliding_window: int | None = None,
        attention_sinks: int = 0,
        query_key_norm: str | None = None,
        query_key_norm_epsilon: float = 1e-6,
        logit_soft_cap: float | None = None,
        output_bias: bool | None = None,
        query_scale_dim: int | None = None,
        layer_norm: str = "layer",
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            intermediate_dim,
            num_heads,
            key_dim=key_dim,
            dropout=dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            normalize_first=normalize_first,
            use_bias=use_bias,
            relative=relative,
            position=position,
            rotary=rotary,
            query_block_size=query_block_size,
            relative_logits=relative_logits,
            num_key_value_heads=num_key_value_heads,
            sliding_window=sliding_window,
            attention_sinks=attention_sinks,
            query_key_norm=query_key_norm,
            query_key_norm_epsilon=query_key_norm_epsilon,
            logit_soft_cap=logit_soft_cap,
            output_bias=output_bias,
            query_scale_dim=query_scale_dim,
            layer_norm=layer_norm,
            remat=remat,
            **kwargs,
        )
        self.cross_attention = None

    def build(self, decoder_sequence_shape: Any, encoder_sequence_shape: Any = None) -> None:
        shape = self._check_sequence("decoder_sequence", decoder_sequence_shape)
        key_dim = self._head_dim(shape[-1])
        self.self_attention = self._relative_attention("self_attention", key_dim)
        self.self_attention.build(shape, shape)
        self.self_attention_layer_norm = self._layer_norm("self_attention_layer_norm", shape)
        self.self_attention_dropout = self._dropout_layer("self_attention_dropout")
        self._built_features = {"decoder_sequence": shape[-1]}

        self.cross_attention = None
        if encoder_sequence_shape is not None:
            encoder_shape = self._check_sequence("encoder_sequence", encoder_sequence_shape)
            # keras_hub's CachedMultiHeadAttention attending through the core; its module
            # imports keras_hub (and TensorFlow): only when needed.
            from keras_posenc.layers._cross_attention import CoreCachedMultiHeadAttention

            kernel_initializer = sublayer_initializer(self.kernel_initializer, "cross_attention")
            bias_initializer = sublayer_initializer(self.bias_initializer, "cross_attention")
            self.cross_attention = CoreCachedMultiHeadAttention(
                num_heads=self.num_heads,
                key_dim=key_dim,
                value_dim=key_dim,
                dropout=self.dropout,
                use_bias=self.use_bias,
                kernel_initializer=kernel_initializer,
                bias_initializer=bias_initializer,
                dtype=self.dtype_policy,
                name="cross_attention",
            )
            self.cross_attention.build(shape, encoder_shape)
            # keras.layers.MultiHeadAttention clones its initializers with their seed, so
            # a seeded one would start query, key and value equal: draw them again.
            redraw_seeded_weights(self.cross_attention, kernel_initializer, bias_initializer)
            self.cross_attention_layer_norm = self._layer_norm("cross_attention_layer_norm", shape)
            self.cross_attention_dropout = self._dropout_layer("cross_attention_dropout")
            self._built_features["encoder_sequence"] = encoder_shape[-1]

        self._build_feedforward(shape)
        self.built = True

    def cross_attention_cache(self, encoder_sequence: Any, encoder_padding_mask: Any = None) -> Any:
        """The cross-attention's projected keys and values of ``encoder_sequence``.

        ``(batch, 2, encoder_length, num_heads, key_dim)``, keys then values: what
        ``call`` writes with ``cross_attention_cache_update_index=0``, computed once
        per source so that decoding steps (``cross_attention_cache_update_index=None``)
        do not project the encoder output again. Padding (``encoder_padding_mask``
        False, default the sequence's Keras mask) is zeroed first, as ``call`` does.

        Raises:
            ValueError: if the layer was built without cross-attention.

        Examples:

            >>> import numpy as np
            >>> from keras_posenc.layers.relative_transformer_decoder import (
            ...     RelativeTransformerDecoder,
            ... )
            >>> decoder = RelativeTransformerDecoder(intermediate_dim=16, num_heads=2)
            >>> x, encoded = np.zeros((3, 5, 8), "float32"), np.ones((3, 9, 8), "float32")
            >>> _ = decoder(x, encoded)
            >>> tuple(decoder.cross_attention_cache(encoded).shape)
            (3, 2, 9, 2, 4)
        """
        if self.cross_attention is None:
            raise ValueError(
                f"{self._describe()}: `cross_attention_cache` needs a block built with "
                "cross-attention (first called with an `encoder_sequence`)."
            )
        self._check_sequence("encoder_sequence", encoder_sequence)
        mask = self._check_mask("encoder_padding_mask", encoder_padding_mask, 2)
        if mask is None:
            mask = self._mask_reader(encoder_sequence)
        encoder_sequence = unmasked(encoder_sequence)
        if mask is not None:
            encoder_sequence = zero_invalid(encoder_sequence, mask)
        attention = self.cross_attention
        # keras.layers.MultiHeadAttention's projections, as keras_hub's cached call uses them.
        keys = attention._key_dense(encoder_sequence)
        values = attention._value_dense(encoder_sequence)
        return ops.stack([keys, values], axis=1)

    def _check_call(self, encoder_sequence: Any, self_cache: Any, cross_cache: Any) -> None:
        name = self._describe()
        has_cross_attention = self.cross_attention is not None
        if encoder_sequence is not None and not has_cross_attention:
            raise ValueError(
                f"{name}: was built without cross-attention (first called with "
                "`decoder_sequence` only), so `encoder_sequence` must be None; got a tensor "
                f"of shape {tuple(encoder_sequence.shape)}. Use a new layer for an "
                "encoder-decoder block."
            )
        if encoder_sequence is None and has_cross_attention:
            raise ValueError(
                f"{name}: was built with cross-attention (first called with an "
                "`encoder_sequence`), so `encoder_sequence` must be given; got None."
            )
        if cross_cache is not None and self_cache is None:
            raise ValueError(
                f"{name}: `cross_attention_cache` needs `self_attention_cache` (caching is "
                "for step-by-step decoding); got self_attention_cache=None."
            )
        if cross_cache is not None and not has_cross_attention:
            raise ValueError(
                f"{name}: `cross_attention_cache` must be None for a block without "
                f"cross-attention; got a tensor of shape {tuple(cross_cache.shape)}."
            )

    def _check_rolling(
        self, cache: Any, padding_mask: Any, attention_mask: Any, attention_bias: Any
    ) -> bool:
        """Whether ``cache`` is a rolling one (``attention_sinks + sliding_window``
        positions, `MultiHeadRelativeAttention.cache_shape`); raises for the masks and
        bias it cannot take, under this block's names for them."""
        if cache is None or self.sliding_window is None:
            return False
        length = self.attention_sinks + self.sliding_window
        if shape_of(cache)[2] != length:
            return False
        given = [
            name
            for name, value in (
                ("decoder_padding_mask", padding_mask),
                ("decoder_attention_mask", attention_mask),
                ("attention_bias", attention_bias),
            )
            if value is not None
        ]
        if given:
            raise ValueError(
                f"{self._describe()}: a self_attention_cache of attention_sinks + "
                f"sliding_window = {length} positions is a rolling cache, whose slots do not "
                f"follow the positions: it takes no {', '.join(given)}. Use a cache of the "
                f"whole length for padded sequences, masks or a bias."
            )
        return True

    def call(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any = None,
        decoder_padding_mask: Any = None,
        decoder_attention_mask: Any = None,
        encoder_padding_mask: Any = None,
        encoder_attention_mask: Any = None,
        self_attention_cache: Any = None,
        self_attention_cache_update_index: Any = None,
        cross_attention_cache: Any = None,
        cross_attention_cache_update_index: Any = None,
        use_causal_mask: bool = True,
        attention_bias: Any = None,
        training: Any = None,
    ) -> Any:
        if (
            self._remats(training)
            and self_attention_cache is None
            and cross_attention_cache is None
        ):
            # The masks read here: the recomputed sequences carry no Keras mask.
            if decoder_padding_mask is None:
                decoder_padding_mask = self._mask_reader(decoder_sequence)
            if encoder_padding_mask is None and encoder_sequence is not None:
                encoder_padding_mask = self._mask_reader(encoder_sequence)

            def body(decoder: Any, encoder: Any, bias: Any) -> Any:
                return self.call(
                    decoder,
                    encoder,
                    decoder_padding_mask,
                    decoder_attention_mask,
                    encoder_padding_mask,
                    encoder_attention_mask,
                    use_causal_mask=use_causal_mask,
                    attention_bias=bias,
                    training=training,
                )

            tensors = (decoder_sequence, encoder_sequence, attention_bias)
            return self._remat_call(body, tensors, training)
        self._check_sequence("decoder_sequence", decoder_sequence)
        if encoder_sequence is not None:
            self._check_sequence("encoder_sequence", encoder_sequence)
        self._check_call(encoder_sequence, self_attention_cache, cross_attention_cache)
        rolling = self._check_rolling(
            self_attention_cache, decoder_padding_mask, decoder_attention_mask, attention_bias
        )
        # The masks' shapes: keys are the cache's rows when decoding with one.
        batch, length = shape_of(decoder_sequence)[:2]
        keys = length if self_attention_cache is None else shape_of(self_attention_cache)[2]
        source = None
        if cross_attention_cache is not None:
            source = shape_of(cross_attention_cache)[2]
        elif encoder_sequence is not None:
            source = shape_of(encoder_sequence)[1]
        decoder_padding_mask = self._check_mask(
            "decoder_padding_mask", decoder_padding_mask, 2, (batch, keys)
        )
        decoder_attention_mask = self._check_mask(
            "decoder_attention_mask", decoder_attention_mask, 3, (batch, length, keys)
        )
        encoder_padding_mask = self._check_mask(
            "encoder_padding_mask", encoder_padding_mask, 2, (batch, source)
        )
        encoder_attention_mask = self._check_mask(
            "encoder_attention_mask", encoder_attention_mask, 3, (batch, length, source)
        )

        if self_attention_cache is None:
            if decoder_padding_mask is None:
                decoder_padding_mask = self._mask_reader(decoder_sequence)
            query_mask = decoder_padding_mask
            key_mask = decoder_padding_mask
        else:
            # The cached keys are not the decoder sequence's, so its Keras mask
            # does not apply to them; passing explicit masks also stops the
            # attention from reading that mask itself.
            batch = ops.shape(decoder_sequence)[0]
            query_mask = ops.ones((batch, ops.shape(decoder_sequence)[1]), "bool")
            key_mask = decoder_padding_mask
            if key_mask is None and not rolling:
                key_mask = ops.ones((batch, ops.shape(self_attention_cache)[2]), "bool")

        def self_attend(x: Any) -> tuple:
            if rolling:  # no key mask: none reaches the attention, not even x's Keras mask
                x = unmasked(x)
            result = self.self_attention(
                x,
                x,
                query_mask=query_mask,
                value_mask=key_mask,
                attention_mask=decoder_attention_mask,
                use_causal_mask=use_causal_mask,
                attention_bias=attention_bias,
                cache=self_attention_cache,
                cache_update_index=self_attention_cache_update_index,
                training=training,
            )
            return (result[0], result[1:]) if self_attention_cache is not None else (result, ())

        x, self_cache = self._residual_block(
            decoder_sequence,
            self.self_attention_layer_norm,
            self_attend,
            self.self_attention_dropout,
            training,
        )

        cross_cache = ()
        if self.cross_attention is not None:
            if encoder_padding_mask is None:
                encoder_padding_mask = self._mask_reader(encoder_sequence)
            if encoder_padding_mask is not None:
                # Padding zeroed by a select (a fresh tensor, so it carries no Keras mask,
                # which the projections do not support). The core zeroes the projected keys
                # and values no query may see ("Architecture" in docs/development.md), so a
                # non-finite padding never reaches a real output; zeroed here first, the
                # cache written at `cross_attention_cache_update_index=0` holds finite
                # projections too, those of `cross_attention_cache`.
                encoder_sequence = zero_invalid(encoder_sequence, encoder_padding_mask)
            cross_mask = encoder_attention_mask
            if encoder_padding_mask is not None:
                keys = ops.expand_dims(encoder_padding_mask, 1)  # (batch, 1, encoder_length)
                cross_mask = keys if cross_mask is None else ops.logical_and(cross_mask, keys)

            def cross_attend(x: Any) -> tuple:
                result = self.cross_attention(
                    x,
                    encoder_sequence,
                    attention_mask=cross_mask,
                    cache=cross_attention_cache,
                    cache_update_index=cross_attention_cache_update_index,
                    training=training,
                )
                if cross_attention_cache is None:
                    return result, ()
                return result[0], result[1:]

            x, cross_cache = self._residual_block(
                x,
                self.cross_attention_layer_norm,
                cross_attend,
                self.cross_attention_dropout,
                training,
            )

        x = self._feedforward_block(x, training)
        if self_attention_cache is None:
            return x
        return (x, *self_cache, *cross_cache)

    def compute_output_shape(
        self, decoder_sequence_shape: Any, encoder_sequence_shape: Any = None
    ) -> tuple:
        return self._check_sequence("decoder_sequence", decoder_sequence_shape)

    def compute_output_spec(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any = None,
        decoder_padding_mask: Any = None,
        decoder_attention_mask: Any = None,
        encoder_padding_mask: Any = None,
        encoder_attention_mask: Any = None,
        self_attention_cache: Any = None,
        self_attention_cache_update_index: Any = None,
        cross_attention_cache: Any = None,
        cross_attention_cache_update_index: Any = None,
        use_causal_mask: bool = True,
        attention_bias: Any = None,
        training: Any = None,
    ) -> Any:
        self._check_call(encoder_sequence, self_attention_cache, cross_attention_cache)
        shape = self.compute_output_shape(decoder_sequence.shape)
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if self_attention_cache is None:
            return output
        results = [output]
        for cache in (self_attention_cache, cross_attention_cache):
            if cache is not None:
                results.append(keras.KerasTensor(cache.shape, dtype=cache.dtype))
        return tuple(results)
