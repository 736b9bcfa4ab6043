"""Transformer encoder block with relative position self-attention, and what the blocks share.

`RelativeTransformerEncoder` (here) and `RelativeTransformerDecoder`
(`keras_posenc.layers.relative_transformer_decoder`) are
``keras_hub.layers.TransformerEncoder`` / ``TransformerDecoder`` with their
self-attention replaced by `MultiHeadRelativeAttention`: the same arguments,
masks, residual connections, pre- or post-norm and decoding caches, plus the
relative position arguments (``relative``, ``position`` and ``rotary``), which
are passed to the self-attention unchanged. Both are built on the base class
here, which holds their shared arguments, sublayers and residual blocks.

A relative-position Transformer in a few lines, with absolute positions added
to the inputs (``keras_hub.layers.SinePositionEncoding``) and a T5-style
relative bias inside attention: the combined absolute + relative encoding.
Token 0 is padding here; the padding mask could also come from
``Embedding(mask_zero=True)``, as the blocks read Keras masks.

>>> import keras, keras_hub, numpy as np
>>> from keras_posenc.layers.relative_transformer import RelativeTransformerEncoder
>>> tokens = keras.Input((None,), dtype="int32")
>>> padding_mask = keras.ops.not_equal(tokens, 0)
>>> embedded = keras.layers.Embedding(100, 16)(tokens)
>>> x = embedded + keras_hub.layers.SinePositionEncoding()(embedded)
>>> for _ in range(2):
...     block = RelativeTransformerEncoder(intermediate_dim=32, num_heads=2, relative="bias")
...     x = block(x, padding_mask=padding_mask)
>>> logits = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(x))
>>> model = keras.Model(tokens, logits)
>>> tuple(model(np.array([[5, 6, 7, 0, 0], [1, 2, 3, 4, 5]])).shape)
(2, 3)
"""

from __future__ import annotations

from typing import Any

import keras

from keras_posenc.layers._checks import (
    KerasMask,
    SequenceChecks,
    check_activation,
    check_bool,
    check_int,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers._decoder_arguments import check_decoder_arguments
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._relative_arguments import (
    check_relative_arguments,
    check_relative_logits,
    check_rotary,
)
from keras_posenc.layers._remat import Remat
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention

__all__ = ["RelativeTransformerEncoder"]


def feedforward_denses(layer: Any, shape: tuple) -> tuple[Any, Any]:
    """A block's two feed-forward ``Dense`` layers, built: width -> ``intermediate_dim`` -> width.

    ``layer`` gives ``intermediate_dim``, ``activation``, ``use_bias``, the
    initializers (cloned per sublayer) and the dtype policy.
    """

    def dense(units: int, activation: Any, name: str) -> keras.layers.Dense:
        return keras.layers.Dense(
            units,
            activation=activation,
            use_bias=layer.use_bias,
            kernel_initializer=sublayer_initializer(layer.kernel_initializer, name),
            bias_initializer=sublayer_initializer(layer.bias_initializer, name),
            dtype=layer.dtype_policy,
            name=name,
        )

    intermediate = dense(layer.intermediate_dim, layer.activation, "feedforward_intermediate_dense")
    intermediate.build(shape)
    output = dense(shape[-1], None, "feedforward_output_dense")
    output.build(shape[:-1] + (layer.intermediate_dim,))
    return intermediate, output


class _RelativeTransformerBase(Remat, SequenceChecks, keras.layers.Layer):
    """Arguments, validation and the sublayers both blocks share."""

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
        super().__init__(**kwargs)
        caller = type(self).__name__
        self._set_remat(caller, remat)
        if layer_norm not in ("layer", "rms"):
            raise ValueError(
                f"{caller}: `layer_norm` must be 'layer' (LayerNormalization) or 'rms' "
                f"(RMSNormalization: a scale, no mean, no offset), got {layer_norm!r}."
            )
        self.layer_norm = layer_norm
        self.intermediate_dim = check_int(caller, "intermediate_dim", intermediate_dim, 1)
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        self.key_dim = None if key_dim is None else check_int(caller, "key_dim", key_dim, 1)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.activation = check_activation(caller, activation)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = check_bool(caller, "normalize_first", normalize_first)
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        # Validated here (not only when the attention is built) so a bad
        # argument fails at construction, naming this layer.
        scheme = check_relative_arguments(caller, relative, position)
        self.relative = relative
        self.position = scheme
        self.rotary = check_rotary(caller, rotary)
        self.relative_logits = check_relative_logits(caller, relative_logits, relative, scheme)
        self.query_block_size = (
            None
            if query_block_size is None
            else check_int(caller, "query_block_size", query_block_size, 1)
        )
        # The self-attention's decoder options (keras_posenc/layers/_decoder_arguments.py),
        # checked here too so a bad one fails at construction, naming this layer. The head
        # size is not known before `build` (key_dim=None): the check's key_dim only fills
        # query_scale_dim's default, which is kept as given (None) here.
        options = check_decoder_arguments(
            caller,
            self.num_heads,
            self.key_dim or 1,
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
        given = num_key_value_heads is not None
        self.num_key_value_heads = options.num_key_value_heads if given else None
        self.sliding_window = options.sliding_window
        self.attention_sinks = options.attention_sinks
        self.query_key_norm = options.query_key_norm
        self.query_key_norm_epsilon = options.query_key_norm_epsilon
        self.logit_soft_cap = options.logit_soft_cap
        self.output_bias = None if output_bias is None else options.output_bias
        self.query_scale_dim = None if query_scale_dim is None else options.query_scale_dim
        self.supports_masking = True
        self._mask_reader = KerasMask(dtype=self.dtype_policy, name="keras_mask")

    # ------------------------------------------------------------------ helpers

    def _head_dim(self, hidden_dim: int) -> int:
        key_dim = self.key_dim if self.key_dim is not None else hidden_dim // self.num_heads
        if key_dim == 0:
            raise ValueError(
                f"{self._describe()}: the inputs' last axis ({hidden_dim}) must be at least "
                f"`num_heads` ({self.num_heads}) when `key_dim` is None "
                f"(key_dim = hidden // num_heads), or pass `key_dim`."
            )
        if self.rotary is not None:  # key_dim = hidden // num_heads, unless given
            self.rotary.check_head_dim(self._describe(), key_dim)
        return key_dim

    def _relative_attention(self, name: str, key_dim: int) -> MultiHeadRelativeAttention:
        return MultiHeadRelativeAttention(
            num_heads=self.num_heads,
            key_dim=key_dim,
            dropout=self.dropout,
            use_bias=self.use_bias,
            relative=self.relative,
            position=self.position,
            rotary=self.rotary,
            query_block_size=self.query_block_size,
            relative_logits=self.relative_logits,
            **self._decoder_options(),
            kernel_initializer=sublayer_initializer(self.kernel_initializer, name),
            bias_initializer=sublayer_initializer(self.bias_initializer, name),
            dtype=self.dtype_policy,
            name=name,
        )

    def _decoder_options(self) -> dict:
        """The self-attention's decoder options, as given to the block (its config too)."""
        return dict(
            num_key_value_heads=self.num_key_value_heads,
            sliding_window=self.sliding_window,
            attention_sinks=self.attention_sinks,
            query_key_norm=self.query_key_norm,
            query_key_norm_epsilon=self.query_key_norm_epsilon,
            logit_soft_cap=self.logit_soft_cap,
            output_bias=self.output_bias,
            query_scale_dim=self.query_scale_dim,
        )

    def _layer_norm(self, name: str, shape: tuple) -> keras.layers.Layer:
        kind = (
            keras.layers.RMSNormalization
            if self.layer_norm == "rms"
            else keras.layers.LayerNormalization
        )
        layer = kind(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)
        layer.build(shape)
        return layer

    def _dropout_layer(self, name: str) -> keras.layers.Dropout:
        return keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    def _build_feedforward(self, shape: tuple) -> None:
        self.feedforward_layer_norm = self._layer_norm("feedforward_layer_norm", shape)
        self.feedforward_intermediate_dense, self.feedforward_output_dense = feedforward_denses(
            self, shape
        )
        self.feedforward_dropout = self._dropout_layer("feedforward_dropout")

    def _residual_block(self, x: Any, norm: Any, sublayer: Any, dropout: Any, training: Any) -> Any:
        """``norm(x + f(x))`` (post-norm) or ``x + f(norm(x))`` (pre-norm).

        ``sublayer`` returns the block's output and a tuple of extra results
        (attention scores, caches), passed through.
        """
        residual = x
        if self.normalize_first:
            x = norm(x)
        x, extras = sublayer(x)
        x = dropout(x, training=training) + residual
        if not self.normalize_first:
            x = norm(x)
        return x, extras

    def _feedforward(self, x: Any) -> tuple:
        x = self.feedforward_intermediate_dense(x)
        return self.feedforward_output_dense(x), ()

    def _feedforward_block(self, x: Any, training: Any) -> Any:
        x, _ = self._residual_block(
            x, self.feedforward_layer_norm, self._feedforward, self.feedforward_dropout, training
        )
        return x

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        """The output carries the (decoder) input's Keras mask."""
        return previous_mask

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            dropout=self.dropout,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            normalize_first=self.normalize_first,
            layer_norm=self.layer_norm,
            use_bias=self.use_bias,
            relative=self.relative,
            position=keras.saving.serialize_keras_object(self.position),
            rotary=keras.saving.serialize_keras_object(self.rotary),
            query_block_size=self.query_block_size,
            relative_logits=self.relative_logits,
            remat=self.remat,
            **self._decoder_options(),
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class RelativeTransformerEncoder(_RelativeTransformerBase):
    """Transformer encoder block whose self-attention uses relative positions.

    ``keras_hub.layers.TransformerEncoder`` with `MultiHeadRelativeAttention`
    as its self-attention: a self-attention block and a feed-forward block
    (``Dense(intermediate_dim, activation)``, ``Dense(hidden)``), each with a
    residual connection, dropout and layer normalisation (post-norm by
    default, pre-norm with ``normalize_first=True``). Position information
    enters through the relative terms of the attention (and through any
    absolute encoding added to the inputs), so the block handles any sequence
    length.

    Masks follow Keras: ``True`` marks a real token. The padding mask is
    ``padding_mask`` when given, else the inputs' Keras mask (e.g. from
    ``Embedding(mask_zero=True)``). Padded tokens are never attended to, and
    their own attention output is zero (their rows are meaningless); the
    output carries the inputs' Keras mask.

    With ``normalize_first=True`` the block's output is not normalised: a
    pre-norm stack needs a ``LayerNormalization`` after its last block (as
    GPT-2 has), which the block does not add (as in keras_hub).

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
            (``RMSNormalization``: a scale, no mean subtracted, no offset; RoFormer v2).
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
            its config, or a registered name (``"shaw"``, ``"t5"`` (T5's
            encoder: bidirectional ``LogBuckets(32, 128)``), ``"irpe"``, ...).
            ``None`` (default): ``ClipPositions(max_distance=16)``, or none with
            ``relative=None``.
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
            positions (``|i - j| < W``).
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
        inputs: ``(batch, length, hidden)``.
        padding_mask: ``(batch, length)`` boolean or integer 0/1, ``True`` for real tokens;
            default the inputs' Keras mask.
        attention_mask: ``(batch, length, length)`` boolean or integer 0/1, ``True`` where query
            ``i`` may attend to key ``j``; combined with the padding mask.
        attention_bias: an additive float bias broadcastable to ``(batch,
            num_heads, length, length)`` (a T5 bias shared across layers,
            ALiBi), added to the self-attention logits.
        training: whether dropout is active.
        return_attention_scores: also return the self-attention probabilities.

    Returns:
        ``(batch, length, hidden)``; with ``return_attention_scores``,
        ``(output, scores)`` with scores of shape ``(batch, num_heads,
        length, length)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers import ClipPositions
        >>> from keras_posenc.layers.relative_transformer import RelativeTransformerEncoder
        >>> encoder = RelativeTransformerEncoder(
        ...     intermediate_dim=32, num_heads=2, position=ClipPositions(max_distance=4)
        ... )
        >>> x = np.zeros((3, 7, 8), "float32")
        >>> tuple(encoder(x).shape)
        (3, 7, 8)
        >>> padding_mask = np.array([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5], bool)
        >>> output, scores = encoder(x, padding_mask=padding_mask, return_attention_scores=True)
        >>> tuple(output.shape), tuple(scores.shape)
        ((3, 7, 8), (3, 2, 7, 7))

    Reference:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
    """

    def build(self, inputs_shape: Any) -> None:
        shape = self._check_sequence("inputs", inputs_shape)
        key_dim = self._head_dim(shape[-1])
        self.self_attention = self._relative_attention("self_attention", key_dim)
        self.self_attention.build(shape, shape)
        self.self_attention_layer_norm = self._layer_norm("self_attention_layer_norm", shape)
        self.self_attention_dropout = self._dropout_layer("self_attention_dropout")
        self._build_feedforward(shape)
        self._built_features = {"inputs": shape[-1]}
        self.built = True

    def call(
        self,
        inputs: Any,
        padding_mask: Any = None,
        attention_mask: Any = None,
        attention_bias: Any = None,
        training: Any = None,
        return_attention_scores: bool = False,
    ) -> Any:
        if self._remats(training) and not return_attention_scores:
            if padding_mask is None:  # read here: the recomputed inputs carry no Keras mask
                padding_mask = self._mask_reader(inputs)
            return self._remat_call(
                lambda x, bias: self.call(x, padding_mask, attention_mask, bias, training),
                (inputs, attention_bias),
                training,
            )
        batch, length, _ = self._check_sequence("inputs", inputs)
        padding_mask = self._check_mask("padding_mask", padding_mask, 2, (batch, length))
        attention_mask = self._check_mask(
            "attention_mask", attention_mask, 3, (batch, length, length)
        )
        if padding_mask is None:
            padding_mask = self._mask_reader(inputs)

        def attend(x: Any) -> tuple:
            # The padding mask masks both keys and queries: a padded query's
            # attention output is zero (its row is meaningless anyway).
            result = self.self_attention(
                x,
                x,
                query_mask=padding_mask,
                value_mask=padding_mask,
                attention_mask=attention_mask,
                attention_bias=attention_bias,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            return (result[0], result[1:]) if return_attention_scores else (result, ())

        x, scores = self._residual_block(
            inputs, self.self_attention_layer_norm, attend, self.self_attention_dropout, training
        )
        x = self._feedforward_block(x, training)
        return (x, scores[0]) if return_attention_scores else x

    def compute_output_shape(self, inputs_shape: Any) -> tuple:
        return self._check_sequence("inputs", inputs_shape)

    def compute_output_spec(
        self,
        inputs: Any,
        padding_mask: Any = None,
        attention_mask: Any = None,
        attention_bias: Any = None,
        training: Any = None,
        return_attention_scores: bool = False,
    ) -> Any:
        shape = self.compute_output_shape(inputs.shape)
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        scores = (shape[0], self.num_heads, shape[1], shape[1])
        return output, keras.KerasTensor(scores, dtype=self.compute_dtype)
