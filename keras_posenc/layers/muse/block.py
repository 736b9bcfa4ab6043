"""The part the MUSE encoder and decoder blocks share: arguments, sublayers, the sum.

Both blocks (``encoder``, ``decoder``) run `MUSEAttention` and a feed-forward
branch in parallel from the same input and sum them with the residual before
one layer normalisation (post-norm); this module builds and combines them.
"""

from __future__ import annotations

from typing import Any

import keras

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    KerasMask,
    SequenceChecks,
    check_activation,
    check_bool,
    check_bool_or_auto,
    check_int,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._remat import Remat
from keras_posenc.layers.muse.attention import _CONV_MODES, MUSEAttention, _check_kernel_sizes
from keras_posenc.layers.relative_transformer import feedforward_denses


class _MUSEBlock(Remat, SequenceChecks, keras.layers.Layer):
    """Arguments, validation and the sublayers the encoder and decoder blocks share."""

    _causal = False

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        conv: str = "dynamic",
        kernel_sizes: Any = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        weight_dropout: float = 0.0,
        activation: Any = "relu",
        layer_norm_epsilon: float = 1e-5,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        fused_attention: bool | str = "auto",
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self._set_remat(caller, remat)
        self.intermediate_dim = check_int(caller, "intermediate_dim", intermediate_dim, 1)
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        if conv not in _CONV_MODES:
            raise ValueError(
                f"{caller}: `conv` must be one of {', '.join(map(repr, _CONV_MODES))}, "
                f"got {conv!r}."
            )
        self.conv = conv
        self.kernel_sizes = _check_kernel_sizes(caller, conv, kernel_sizes)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.attention_dropout = check_rate(caller, "attention_dropout", attention_dropout)
        self.activation_dropout = check_rate(caller, "activation_dropout", activation_dropout)
        self.weight_dropout = check_rate(caller, "weight_dropout", weight_dropout)
        if self.weight_dropout and conv == "static":
            raise ValueError(
                f"{caller}: `weight_dropout` drops the taps that conv='dynamic' predicts; "
                f"conv='static' has none, so it must be 0, got {weight_dropout!r}."
            )
        self.activation = check_activation(caller, activation)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self._mask_reader = KerasMask(dtype=self.dtype_policy, name="keras_mask")

    # ------------------------------------------------------------------ helpers

    def _key_dim(self, hidden: int) -> int:
        if hidden % self.num_heads:
            raise ValueError(
                f"{self._describe()}: the inputs' last axis must be a multiple of `num_heads` "
                f"(the head size is hidden / num_heads, as in the official code): "
                f"{hidden} is not a multiple of {self.num_heads}."
            )
        return hidden // self.num_heads

    def _build_common(self, shape: tuple) -> None:
        """The self-attention, the feed-forward branch, the layer norm and the dropouts."""
        hidden = shape[-1]
        self.key_dim = self._key_dim(hidden)
        self.self_attention = MUSEAttention(
            self.num_heads,
            self.key_dim,
            conv=self.conv,
            kernel_sizes=self.kernel_sizes,
            causal=self._causal,
            dropout=self.attention_dropout,
            weight_dropout=self.weight_dropout,
            use_bias=self.use_bias,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, "self_attention"),
            bias_initializer=sublayer_initializer(self.bias_initializer, "self_attention"),
            fused_attention=self.fused_attention,
            dtype=self.dtype_policy,
            name="self_attention",
        )
        self.self_attention.build(shape)

        self.feedforward_intermediate_dense, self.feedforward_output_dense = feedforward_denses(
            self, shape
        )
        self.activation_dropout_layer = keras.layers.Dropout(
            self.activation_dropout, dtype=self.dtype_policy, name="activation_dropout"
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build(shape)

    def _feedforward(self, x: Any, training: Any) -> Any:
        hidden = self.feedforward_intermediate_dense(x)
        hidden = self.activation_dropout_layer(hidden, training=training)
        return self.feedforward_output_dense(hidden)

    def _combine(self, x: Any, branches: list, training: Any) -> Any:
        """``LayerNorm(x + sum(dropout(branch)))``: parallel branches, post-norm."""
        total = x
        for branch in branches:
            total = total + self.dropout_layer(branch, training=training)
        return self.layer_norm(total)

    _unmasked = staticmethod(_attention.unmasked)

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        """The output carries the (decoder) input's Keras mask."""
        return previous_mask

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            conv=self.conv,
            kernel_sizes=list(self.kernel_sizes),
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation_dropout=self.activation_dropout,
            weight_dropout=self.weight_dropout,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            fused_attention=self.fused_attention,
            remat=self.remat,
        )
        return config
