"""`MUSEDecoderLayer`: MUSE's decoder block, and its cross-attention over the encoder output."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import shape_of
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers.muse.attention import _attend_heads
from keras_posenc.layers.muse.block import _MUSEBlock

__all__ = ["MUSEDecoderLayer"]


class _CrossAttention(keras.layers.Layer):
    """Multi-head attention of decoder queries over encoder keys/values (MUSE's decoder).

    Not called through ``__call__``: the decoder block builds it, projects the
    encoder output once with :meth:`key_values` (which is also the decoding
    cache, ``(batch, 2, source_time, heads, head_dim)``) and attends with
    :meth:`attend`. The softmax runs in float32 and a query whose source is
    all padding gets zeros, as in `MUSEAttention`.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        dropout: float,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        fused_attention: bool | str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.fused_attention = fused_attention
        self.use_bias = use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer

    def _dense(self, equation: str, output_shape: tuple, bias_axes: str, name: str) -> Any:
        return _attention.projection(self, equation, output_shape, bias_axes, name)

    def build(self, query_shape: Any, source_shape: Any) -> None:
        heads = (None, self.num_heads, self.key_dim)
        self.query_dense = self._dense("abc,cde->abde", heads, "de", "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._dense("abc,cde->abde", heads, "de", "key")
        self.key_dense.build(source_shape)
        self.value_dense = self._dense("abc,cde->abde", heads, "de", "value")
        self.value_dense.build(source_shape)
        self.output_dense = self._dense("abde,dec->abc", (None, query_shape[-1]), "c", "output")
        self.output_dense.build(tuple(query_shape[:2]) + (self.num_heads, self.key_dim))
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.built = True

    def key_values(self, source: Any) -> Any:
        """The projected keys and values, stacked: ``(batch, 2, source_time, heads, head_dim)``."""
        return ops.stack((self.key_dense(source), self.value_dense(source)), axis=1)

    def attend(self, query: Any, key_values: Any, source_mask: Any, training: Any) -> Any:
        q = self.query_dense(query)
        k = ops.cast(key_values[:, 0], q.dtype)
        v = ops.cast(key_values[:, 1], q.dtype)
        # (batch, 1, source); expand_dims, as in MUSEAttention.call (attention.py), for LiteRT.
        mask = None if source_mask is None else ops.expand_dims(source_mask, 1)
        return self.output_dense(_attend_heads(self, q, k, v, mask, training))


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSEDecoderLayer(_MUSEBlock):
    """MUSE decoder block: causal attention + convolutions, cross-attention, feed-forward.

    With ``x`` of width ``C`` and the encoder output ``h`` (the official
    code's ``TransformerCombineDecoderLayer``)::

        Y  = MUSEAttention(x, causal=True)   # attention and causal convs of V
        X  = CrossAttention(x, h)            # plain multi-head attention over h
        F  = fc2(activation_dropout(relu(fc1(x))))
        x' = LayerNorm(x + dropout(Y) + dropout(X) + dropout(F))

    All three branches read the same input (post-norm, one layer norm). The
    convolutions pad ``k - 1`` zeros on the left, so output ``t`` sees
    decoder positions ``<= t`` only. (The official layer also creates an
    ``encoder_attn_layer_norm`` that its forward pass never uses; it is not
    created here.) The cross-attention's softmax runs in float32 and a
    query whose source is all padding gets zeros from it, never NaN.

    **Decoding**: ``cache`` is a pair ``(self_attention_cache,
    cross_attention_cache)``, both batch-first and of fixed shape, so beam
    search reorders them with ``ops.take(t, beam_indices, axis=0)``:

    - ``self_attention_cache``: ``(batch, 2, max_length, num_heads,
      head_dim)``, `MUSEAttention`'s keys/values buffer (zeros to start);
    - ``cross_attention_cache``: ``(batch, 2, source_time, num_heads,
      head_dim)``, the encoder output's projected keys and values, computed
      once with :meth:`cross_attention_cache` before the first step.

    A call with ``cache`` and ``cache_update_index=i`` writes the new
    self-attention keys/values at positions ``i ..``, reads the encoder side
    from the cross-attention cache (``encoder_sequence`` must then be
    None; its mask is ``encoder_padding_mask``) and returns ``(output,
    (new_self_attention_cache, cross_attention_cache))``; step by step it
    equals the full causal computation.

    Masks follow Keras: ``True`` marks a real token. Without a cache the
    decoder padding mask is ``decoder_padding_mask`` when given, else the
    decoder sequence's Keras mask; the encoder padding mask is
    ``encoder_padding_mask``, else the encoder sequence's Keras mask.

    Args:
        intermediate_dim: width of the feed-forward branch (768 for IWSLT, 3072
            for the large WMT model).
        num_heads: attention heads; the inputs' width must be a multiple of it
            (head size = width / num_heads).
        conv: ``"dynamic"`` (default, the official code: per-position kernels
            predicted from V) or ``"static"`` (depthwise-separable, the
            paper's description); see `MUSEAttention`.
        kernel_sizes: odd kernel sizes, one convolution branch each; ``None``
            for `MUSEAttention`'s defaults, ``(3, 15)`` dynamic (the official
            code) and ``(1, 3, 7)`` static.
        dropout: dropout on every branch's output before the sum (0.4 for
            IWSLT, 0.3 for WMT En-De in the official runs).
        attention_dropout: dropout on the attention probabilities.
        activation_dropout: dropout after the feed-forward activation.
        weight_dropout: dropout on the dynamic convolutions' predicted taps
            (0.1, hard-coded, in the official code); must be 0 for static.
        activation: activation of the feed-forward branch (``"relu"``).
        layer_norm_epsilon: epsilon of the layer normalisation.
        use_bias: whether the projections and the feed-forward layers have
            biases (the layer norm always has scale and offset).
        kernel_initializer: initializer of every kernel; each kernel draws from its
            own copy (a seeded initializer gets one seed per kernel, derived from its
            seed), so no two start equal.
        bias_initializer: initializer of every bias (copied the same way).
        fused_attention: ``"auto"`` (default), ``True`` or ``False``: self- (and
            cross-) attention through ``keras.ops.dot_product_attention`` without
            active attention dropout; see `MUSEAttention`.
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; dropout draws the same masks again) instead of keeping its
            activations: less memory, about one more forward pass of time. Default False.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        decoder_sequence: ``(batch, time, hidden)``.
        encoder_sequence: ``(batch, source_time, encoder_hidden)``; required
            without a cache (and on the first call, which builds the
            cross-attention), None with one.
        decoder_padding_mask: ``(batch, time)`` boolean or integer 0/1, True for real tokens;
            not with a cache.
        encoder_padding_mask: ``(batch, source_time)`` boolean or integer 0/1, True for real
            tokens.
        cache: ``(self_attention_cache, cross_attention_cache)``, see above.
        cache_update_index: position of ``decoder_sequence[:, 0]`` in the
            target (an int or a scalar integer tensor); required with a cache.
        training: whether dropout is active.

    Returns:
        ``(batch, time, hidden)``; with a cache, ``(output, (self_attention_cache,
        cross_attention_cache))``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.muse import MUSEDecoderLayer
        >>> decoder = MUSEDecoderLayer(intermediate_dim=16, num_heads=2, kernel_sizes=(3, 5))
        >>> rng = np.random.default_rng(0)
        >>> x = rng.standard_normal((2, 4, 8)).astype("float32")
        >>> encoded = rng.standard_normal((2, 7, 8)).astype("float32")
        >>> tuple(decoder(x, encoded).shape)
        (2, 4, 8)
        >>> cache = (np.zeros((2, 2, 4, 2, 4), "float32"), decoder.cross_attention_cache(encoded))
        >>> output, cache = decoder(x[:, :1], cache=cache, cache_update_index=0)
        >>> tuple(output.shape), [tuple(c.shape) for c in cache]
        ((2, 1, 8), [(2, 2, 4, 2, 4), (2, 2, 7, 2, 4)])

    Reference:
        Zhao, Sun, Xu, Zhang, Luo, "MUSE: Parallel Multi-Scale Attention for
        Sequence to Sequence Learning", arXiv:1911.09483, 2019.
    """

    _causal = True

    def build(self, decoder_sequence_shape: Any, encoder_sequence_shape: Any = None) -> None:
        shape = self._check_sequence("decoder_sequence", decoder_sequence_shape)
        if encoder_sequence_shape is None:
            raise ValueError(
                f"{self._describe()}: the first call must pass `encoder_sequence` (it builds "
                "the cross-attention, which every MUSE decoder block has); got None."
            )
        encoder_shape = self._check_sequence("encoder_sequence", encoder_sequence_shape)
        self._build_common(shape)
        self.cross_attention = _CrossAttention(
            self.num_heads,
            self.key_dim,
            self.attention_dropout,
            self.use_bias,
            sublayer_initializer(self.kernel_initializer, "cross_attention"),
            sublayer_initializer(self.bias_initializer, "cross_attention"),
            self.fused_attention,
            dtype=self.dtype_policy,
            name="cross_attention",
        )
        self.cross_attention.build(shape, encoder_shape)
        self._built_features = {
            "decoder_sequence": shape[-1],
            "encoder_sequence": encoder_shape[-1],
        }
        self.built = True

    def cross_attention_cache(self, encoder_sequence: Any) -> Any:
        """The cross-attention cache of an encoder output: its projected keys and values.

        Args:
            encoder_sequence: ``(batch, source_time, encoder_hidden)``.

        Returns:
            ``(batch, 2, source_time, num_heads, head_dim)``; ``[:, 0]`` the
            keys, ``[:, 1]`` the values.

        Raises:
            ValueError: if the layer is not built yet (call it once, or
                ``build(decoder_shape, encoder_shape)``), or for a wrong shape.
        """
        if not self.built:
            raise ValueError(
                f"{self._describe()}: build the layer first (call it once on a decoder and an "
                "encoder sequence, or `build(decoder_shape, encoder_shape)`) before computing "
                "a cross-attention cache."
            )
        self._check_sequence("encoder_sequence", encoder_sequence)
        return self.cross_attention.key_values(self._unmasked(encoder_sequence))

    def _check_cache(
        self, cache: Any, encoder_sequence: Any, decoder_padding_mask: Any, index: Any
    ) -> tuple:
        name = self._describe()
        if not isinstance(cache, tuple | list) or len(cache) != 2:
            raise ValueError(
                f"{name}: `cache` must be a pair (self_attention_cache, cross_attention_cache), "
                f"got {type(cache).__name__}."
            )
        if encoder_sequence is not None:
            raise ValueError(
                f"{name}: with a `cache` the encoder side comes from the cross-attention cache "
                "(`cross_attention_cache(encoder_sequence)`), so `encoder_sequence` must be None; "
                f"got a tensor of shape {shape_of(encoder_sequence)}."
            )
        if decoder_padding_mask is not None:
            raise ValueError(
                f"{name}: `decoder_padding_mask` cannot be combined with a `cache` (decoding "
                "attends to every cached position up to the current one); call without it."
            )
        if index is None:
            raise ValueError(
                f"{name}: a `cache` needs `cache_update_index` (the position of the inputs in "
                "the target), got None."
            )
        self_cache, cross_cache = cache
        heads = (self.num_heads, self.key_dim)
        for argument, tensor in (("cache[0]", self_cache), ("cache[1]", cross_cache)):
            shape = shape_of(tensor)
            if len(shape) != 5 or shape[1] != 2 or shape[3:] != heads:
                raise ValueError(
                    f"{name}: `{argument}` must have shape (batch, 2, length, {heads[0]}, "
                    f"{heads[1]}) (= (batch, 2, length, num_heads, head_dim)), got shape {shape}."
                )
        return self_cache, cross_cache

    def call(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any = None,
        decoder_padding_mask: Any = None,
        encoder_padding_mask: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        if cache is None and self._remats(training):
            # The masks read here: the recomputed sequences carry no Keras mask.
            if decoder_padding_mask is None:
                decoder_padding_mask = self._mask_reader(decoder_sequence)
            if encoder_padding_mask is None and encoder_sequence is not None:
                encoder_padding_mask = self._mask_reader(encoder_sequence)

            def block(decoder: Any, encoder: Any) -> Any:
                masks = (decoder_padding_mask, encoder_padding_mask)
                return self.call(decoder, encoder, *masks, training=training)

            return self._remat_call(block, (decoder_sequence, encoder_sequence), training)
        self._check_sequence("decoder_sequence", decoder_sequence)
        decoder_padding_mask = self._check_mask(
            "decoder_padding_mask", decoder_padding_mask, like=shape_of(decoder_sequence)[:2]
        )
        if cache is not None:
            self_cache, key_values = self._check_cache(
                cache, encoder_sequence, decoder_padding_mask, cache_update_index
            )
            encoder_padding_mask = self._check_mask("encoder_padding_mask", encoder_padding_mask)
        else:
            if encoder_sequence is None:
                raise ValueError(
                    f"{self._describe()}: `encoder_sequence` is required without a `cache` "
                    "(the cross-attention reads it); got None."
                )
            if cache_update_index is not None:
                raise ValueError(
                    f"{self._describe()}: `cache_update_index` needs a `cache`; got cache=None."
                )
            encoder_shape = self._check_sequence("encoder_sequence", encoder_sequence)
            encoder_padding_mask = self._check_mask(
                "encoder_padding_mask", encoder_padding_mask, like=encoder_shape[:2]
            )
            if decoder_padding_mask is None:
                decoder_padding_mask = self._mask_reader(decoder_sequence)
            if encoder_padding_mask is None:
                encoder_padding_mask = self._mask_reader(encoder_sequence)
            key_values = self.cross_attention.key_values(self._unmasked(encoder_sequence))

        x = self._unmasked(decoder_sequence)
        if cache is not None:
            attended, self_cache = self.self_attention(
                x, training=training, cache=self_cache, cache_update_index=cache_update_index
            )
        else:
            attended = self.self_attention(x, mask=decoder_padding_mask, training=training)
        crossed = self.cross_attention.attend(x, key_values, encoder_padding_mask, training)
        output = self._combine(x, [attended, crossed, self._feedforward(x, training)], training)
        if cache is None:
            return output
        return output, (self_cache, key_values)

    def compute_output_shape(self, decoder_sequence_shape: Any, *args: Any, **kwargs: Any) -> tuple:
        shape = self._check_sequence("decoder_sequence", decoder_sequence_shape)
        self._key_dim(shape[-1])
        return shape

    def compute_output_spec(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any = None,
        decoder_padding_mask: Any = None,
        encoder_padding_mask: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        output = keras.KerasTensor(
            self.compute_output_shape(decoder_sequence.shape), dtype=self.compute_dtype
        )
        if cache is None:
            return output
        return output, tuple(keras.KerasTensor(c.shape, dtype=c.dtype) for c in cache)
