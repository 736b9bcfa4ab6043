"""`DecoderBlock`: the pre-norm block of today's decoder-only language models (Llama, Mistral,
Qwen, Gemma 2), on `MultiHeadRelativeAttention`, so that every position scheme of the library
can serve in one."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_features,
    check_int,
    check_mask,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers._decoder_arguments import check_decoder_arguments
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._relative_arguments import check_relative_arguments, check_rotary
from keras_posenc.layers._remat import Remat
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention

__all__ = ["DecoderBlock"]

# The arguments `DecoderBlock` hands to its attention unchanged (its docstring says each).
ATTENTION_ARGUMENTS = (
    "relative",
    "position",
    "rotary",
    "num_key_value_heads",
    "sliding_window",
    "attention_sinks",
    "query_key_norm",
    "logit_soft_cap",
    "query_scale_dim",
    "output_bias",
)


@keras.saving.register_keras_serializable(package="keras_posenc")
class DecoderBlock(Remat, keras.layers.Layer):
    """A causal decoder block as released decoders use it: RMS norms, attention, a gated MLP.

    ``h = x + post_attention_norm(attention(norm(x)))`` and
    ``y = h + post_feedforward_norm(W_out (act(W_gate n) * (W_up n)))`` with
    ``n = feedforward_norm(h)``; the ``post_*`` norms only with
    ``use_post_attention_norm`` / ``use_post_feedforward_norm`` (Gemma 2; Llama, Mistral
    and Qwen have none). Norms are Keras ``RMSNormalization``; the MLP is SwiGLU with
    ``activation="silu"`` (Llama) or GeGLU with ``"gelu_tanh"`` (Gemma). The attention is
    a causal `MultiHeadRelativeAttention` with every option of today's decoders
    (grouped-query heads, a sliding window with a rolling cache, sinks, query-key norms,
    soft-capping, projection biases) and any position scheme: rotary (``rotary``), a
    relative term (``relative`` and ``position``: T5's buckets, ALiBi, KERPLE, FIRE, Shaw's
    tables) or both.

    Args:
        intermediate_dim: width of the gated MLP.
        num_heads: query heads.
        head_dim: size of each head; default ``hidden_dim // num_heads``.
        num_key_value_heads: key/value heads (default ``num_heads``).
        activation: the gate's activation, ``"silu"`` (default) or ``"gelu_tanh"``, or any
            Keras activation.
        layer_norm_epsilon: the norms' epsilon (default ``1e-6``).
        use_post_attention_norm: a norm on the attention's output before the residual.
        use_post_feedforward_norm: a norm on the MLP's output before the residual.
        relative: the attention's (`MultiHeadRelativeAttention`), default None (rotary
            alone, or no position at all).
        position: the attention's relative scheme.
        rotary: the attention's rotary embedding (a `RotaryPositions` or its config).
        sliding_window: the attention's window (None: none).
        attention_sinks: the attention's sinks.
        query_key_norm: the attention's query-key norms.
        logit_soft_cap: the attention's logit cap.
        query_scale_dim: the attention's query scale.
        output_bias: the attention's output projection bias (None: ``use_bias``).
        use_bias: biases on the attention's projections (default False; Qwen: True with
            ``output_bias=False``). The MLP has none.
        dropout: dropout on the attention probabilities and on both branches' outputs.
        kernel_initializer: initializer of every kernel, one copy per sublayer.
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; dropout draws the same masks again) instead of keeping its
            activations: less memory, about one more forward pass of time. Default False.
            Calls with a cache are not recomputed.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        x: ``(batch, length, hidden_dim)``.
        padding_mask: ``(batch, length)`` bool or 0/1, True for real tokens (keys that may
            be attended to); None: every key (a causal decoder with padding on the right
            needs none: no real token sees the padding after it).
        cache: the attention's cache (``block.attention.cache_shape(batch, max_length)``).
        cache_update_index: the position of the first token of ``x`` in the cache.
        training: whether dropout is active.

    Returns:
        ``(batch, length, hidden_dim)``; with a cache, ``(output, new_cache)``.

    Examples:

    >>> import numpy as np
    >>> from keras_posenc.layers import DecoderBlock, RotaryPositions
    >>> block = DecoderBlock(
    ...     intermediate_dim=32, num_heads=4, num_key_value_heads=2,
    ...     rotary=RotaryPositions(), sliding_window=4,
    ... )
    >>> x = np.random.default_rng(0).normal(size=(1, 6, 16)).astype("float32")
    >>> tuple(block(x).shape)
    (1, 6, 16)
    >>> cache = np.zeros(block.attention.cache_shape(1, 100), "float32")
    >>> output, cache = block(x[:, :1], cache=cache, cache_update_index=0)
    >>> tuple(cache.shape)  # a rolling cache of the window
    (1, 2, 4, 2, 4)
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        head_dim: int | None = None,
        num_key_value_heads: int | None = None,
        activation: Any = "silu",
        layer_norm_epsilon: float = 1e-6,
        use_post_attention_norm: bool = False,
        use_post_feedforward_norm: bool = False,
        relative: str | None = None,
        position: Any = None,
        rotary: Any = None,
        sliding_window: int | None = None,
        attention_sinks: int = 0,
        query_key_norm: str | None = None,
        logit_soft_cap: float | None = None,
        query_scale_dim: int | None = None,
        use_bias: bool = False,
        output_bias: bool | None = None,
        dropout: float = 0.0,
        kernel_initializer: Any = "glorot_uniform",
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = f"{type(self).__name__}({self.name!r})"
        self._set_remat(caller, remat)
        self.intermediate_dim = check_int(caller, "intermediate_dim", intermediate_dim, 1)
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        self.head_dim = None if head_dim is None else check_int(caller, "head_dim", head_dim, 1)
        self.activation = check_activation(caller, activation)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.use_post_attention_norm = check_bool(
            caller, "use_post_attention_norm", use_post_attention_norm
        )
        self.use_post_feedforward_norm = check_bool(
            caller, "use_post_feedforward_norm", use_post_feedforward_norm
        )
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self._attention_arguments = dict(
            relative=relative,
            position=position,
            rotary=rotary,
            num_key_value_heads=num_key_value_heads,
            sliding_window=sliding_window,
            attention_sinks=attention_sinks,
            query_key_norm=query_key_norm,
            logit_soft_cap=logit_soft_cap,
            query_scale_dim=query_scale_dim,
            output_bias=output_bias,
        )
        # Checked here, so that bad attention arguments fail when the block is created; the
        # attention itself is made here when its head size is known, else in `build`.
        scheme = check_relative_arguments(caller, relative, position)
        self._attention_arguments["position"] = scheme
        self._attention_arguments["rotary"] = check_rotary(caller, rotary)
        check_decoder_arguments(
            caller,
            self.num_heads,
            self.head_dim or 2,
            self.use_bias,
            **{
                name: self._attention_arguments[name]
                for name in ATTENTION_ARGUMENTS
                if name not in ("relative", "position", "rotary")
            },
        )
        self.attention = None if self.head_dim is None else self._make_attention(self.head_dim)
        self.supports_masking = True

    def _make_attention(self, head_dim: int) -> MultiHeadRelativeAttention:
        return MultiHeadRelativeAttention(
            num_heads=self.num_heads,
            key_dim=head_dim,
            dropout=self.dropout,
            use_bias=self.use_bias,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, "attention"),
            dtype=self.dtype_policy,
            name="attention",
            **self._attention_arguments,
        )

    def _norm(self, name: str) -> keras.layers.Layer:
        return keras.layers.RMSNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )

    def _dense(self, units: int, name: str) -> keras.layers.Layer:
        return keras.layers.Dense(
            units,
            use_bias=False,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, name),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape: Any) -> None:
        input_shape = tuple(input_shape)
        hidden = input_shape[-1]
        caller = f"{type(self).__name__}({self.name!r})"
        if self.head_dim is None:
            if hidden % self.num_heads:
                raise ValueError(
                    f"{caller}: the input width {hidden} must be a multiple of "
                    f"num_heads={self.num_heads} when `head_dim` is not given."
                )
            self.attention = self._make_attention(hidden // self.num_heads)
        self.attention_norm = self._norm("attention_norm")
        self.attention_norm.build(input_shape)
        self.attention.build(input_shape, input_shape)
        self.post_attention_norm = None
        if self.use_post_attention_norm:
            self.post_attention_norm = self._norm("post_attention_norm")
            self.post_attention_norm.build(input_shape)
        self.feedforward_norm = self._norm("feedforward_norm")
        self.feedforward_norm.build(input_shape)
        self.gate_dense = self._dense(self.intermediate_dim, "gate")
        self.gate_dense.build(input_shape)
        self.up_dense = self._dense(self.intermediate_dim, "up")
        self.up_dense.build(input_shape)
        self.down_dense = self._dense(hidden, "down")
        self.down_dense.build(input_shape[:-1] + (self.intermediate_dim,))
        self.post_feedforward_norm = None
        if self.use_post_feedforward_norm:
            self.post_feedforward_norm = self._norm("post_feedforward_norm")
            self.post_feedforward_norm.build(input_shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def call(
        self,
        x: Any,
        padding_mask: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        if cache is None and self._remats(training):
            return self._remat_call(
                lambda x: self.call(x, padding_mask, training=training), (x,), training
            )
        caller = f"{type(self).__name__}({self.name!r})"
        check_features(caller, "x", x)
        if padding_mask is not None:  # named as the block's argument, not the attention's
            padding_mask = check_mask(
                caller, "padding_mask", padding_mask, tuple(x.shape[:2]), ("batch", "length")
            )
        x = _attention.unmasked(x)  # the norms and denses take no Keras mask
        normed = self.attention_norm(x)
        attended = self.attention(
            normed,
            normed,
            value_mask=padding_mask,
            use_causal_mask=True,
            cache=cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        if cache is not None:
            attended, cache = attended
        if self.post_attention_norm is not None:
            attended = self.post_attention_norm(attended)
        x = x + self.dropout_layer(attended, training=training)
        normed = self.feedforward_norm(x)
        gate = ops.cast(self.activation(ops.cast(self.gate_dense(normed), "float32")), x.dtype)
        hidden = self.down_dense(gate * self.up_dense(normed))
        if self.post_feedforward_norm is not None:
            hidden = self.post_feedforward_norm(hidden)
        x = x + self.dropout_layer(hidden, training=training)
        return x if cache is None else (x, cache)

    def compute_mask(self, x: Any, padding_mask: Any = None, previous_mask: Any = None) -> Any:
        return previous_mask

    def compute_output_spec(
        self,
        x: Any,
        padding_mask: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        output = keras.KerasTensor(x.shape, dtype=self.compute_dtype)
        if cache is None:
            return output
        return output, keras.KerasTensor(cache.shape, dtype=cache.dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        arguments = dict(self._attention_arguments)
        arguments["position"] = keras.saving.serialize_keras_object(arguments["position"])
        arguments["rotary"] = keras.saving.serialize_keras_object(arguments["rotary"])
        config.update(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            head_dim=self.head_dim,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            use_post_attention_norm=self.use_post_attention_norm,
            use_post_feedforward_norm=self.use_post_feedforward_norm,
            use_bias=self.use_bias,
            dropout=self.dropout,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            remat=self.remat,
            **arguments,
        )
        return config
