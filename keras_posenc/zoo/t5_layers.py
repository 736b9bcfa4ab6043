"""T5's layers: its activation, the block (attention, cross-attention, feed-forward), the stack.

keras_posenc/zoo/t5.py builds the model from them; its docstring has the layout and
why the query scale is folded into the query kernel. ``keras_posenc.zoo.t5`` re-exports
the public names here.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_posenc.layers import position_schemes
from keras_posenc.layers._attention import unmasked
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_bool_or_auto,
    check_int,
    check_mask,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._remat import Remat
from keras_posenc.layers.position_schemes import LogBuckets
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
from keras_posenc.layers.relative_position import RelativePositionBias

__all__ = ["T5Block", "T5Stack", "gelu_tanh"]


@keras.saving.register_keras_serializable(package="keras_posenc")
def gelu_tanh(x: Any) -> Any:
    """GELU's tanh approximation, T5 v1.1's activation (Hugging Face's ``gelu_new``).

    ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``, that is
    ``keras.ops.gelu(x, approximate=True)`` (keras-hub's ``gelu_approximate``).

    Examples:

        >>> import keras
        >>> y = gelu_tanh(keras.ops.convert_to_tensor([-1.0, 0.0, 2.0]))
        >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(y)]
        [-0.1588, 0.0, 1.9546]
    """
    return ops.gelu(ops.convert_to_tensor(x), approximate=True)


def _activation(caller: str, activation: Any) -> Any:
    """The activation function; ``"gelu_tanh"`` names `gelu_tanh`."""
    if activation == "gelu_tanh":
        return gelu_tanh
    return check_activation(caller, activation)


def _normal(stddev: float) -> keras.initializers.Initializer:
    # An unseeded instance fixes its own seed when created (reproducible under
    # keras.utils.set_random_seed), which `zoo.create` on JAX needs to draw it
    # together with the others; every weight gets its own instance.
    return keras.initializers.RandomNormal(stddev=stddev)


# --------------------------------------------------------------------------- layers


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5Block(Remat, keras.layers.Layer):
    """One T5 layer: pre-norm self-attention, cross-attention (decoder), feed-forward.

    ``x + attention(rms(x))``, then in the decoder ``x + cross(rms(x), encoder)``,
    then ``x + W_o(dropout(act(W_i rms(x)) [* W_g rms(x)]))``; every sublayer's
    output passes dropout before it is added. No projection has a bias; the
    layer norms are `keras.layers.RMSNormalization` (a scale, no offset). The
    relative position bias comes from outside (one per stack, `T5Stack`) as
    ``attention_bias``. Attention is `MultiHeadRelativeAttention` with
    ``relative=None``, which scales the queries by ``1 / sqrt(key_value_dim)``:
    T5's query kernel times ``sqrt(key_value_dim)`` gives T5's logits (the
    docstring of keras_posenc/zoo/t5.py says why).

    Initialisation follows Mesh TensorFlow with the query scale folded in:
    attention projections ``N(0, d ** -0.5)``, the feed-forward input (and gate)
    ``N(0, d ** -0.5)``, its output ``N(0, intermediate_dim ** -0.5)``.

    Args:
        intermediate_dim: feed-forward width.
        num_heads: attention heads.
        key_value_dim: size of each head.
        activation: the feed-forward activation (``"relu"``, ``"gelu_tanh"``,
            any Keras activation; ``"gelu"`` is the exact GELU).
        gated_activation: multiply the activation by a second, linear
            projection (T5 v1.1's gated GELU).
        dropout: dropout on attention probabilities, the feed-forward
            activation and every sublayer's output.
        layer_norm_epsilon: the RMS norms' epsilon.
        cross_attention: whether the block attends to an encoder output (a
            decoder block).
        fused_attention: ``"auto"``, ``True`` or ``False``; see
            `MultiHeadRelativeAttention`.
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; dropout draws the same masks again) instead of keeping its
            activations: less memory, about one more forward pass of time. Default False.
            Calls with a cache are not recomputed.
        **kwargs: standard layer arguments.

    Call arguments:
        x: ``(batch, time, d)``.
        attention_bias: the stack's relative position bias, broadcastable to
            ``(batch, heads, time, key_time)``, or None.
        padding_mask: ``(batch, time)`` bool, True for real tokens: keys the
            self-attention may see (queries are not masked, as in T5).
        encoder_output: ``(batch, source_time, d)`` for the cross-attention.
        encoder_mask: ``(batch, source_time)`` bool, True for real source tokens.
        use_causal_mask: the self-attention sees no later position.
        cache: for decoding step by step, ``(self_cache, cross_cache)``: the
            self-attention's keys/values ``(batch, 2, max_length, heads,
            key_value_dim)`` and the cross-attention's projected encoder output
            ``(batch, 2, source_time, heads, key_value_dim)``
            (`cross_attention_cache`).
        cache_update_index: the position of ``x[:, 0]`` (with ``cache``).
        training: whether dropout is active.

    Returns:
        ``(batch, time, d)``; with ``cache``, ``(output, new_self_cache)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.t5 import T5Block
        >>> block = T5Block(intermediate_dim=16, num_heads=2, key_value_dim=4)
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> tuple(block(x).shape)
        (2, 5, 8)

    Reference:
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        key_value_dim: int,
        activation: Any = "relu",
        gated_activation: bool = False,
        dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        cross_attention: bool = False,
        fused_attention: bool | str = "auto",
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self._set_remat(caller, remat)
        self.intermediate_dim = check_int(caller, "intermediate_dim", intermediate_dim, 1)
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        self.key_value_dim = check_int(caller, "key_value_dim", key_value_dim, 1)
        self._activation = _activation(caller, activation)
        self.activation = activation
        self.gated_activation = check_bool(caller, "gated_activation", gated_activation)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.cross_attention = check_bool(caller, "cross_attention", cross_attention)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)

    def _attention(self, name: str, hidden_dim: int) -> MultiHeadRelativeAttention:
        return MultiHeadRelativeAttention(
            self.num_heads,
            self.key_value_dim,
            dropout=self.dropout,
            use_bias=False,
            relative=None,
            kernel_initializer=_normal(hidden_dim**-0.5),
            fused_attention=self.fused_attention,
            dtype=self.dtype_policy,
            name=name,
        )

    def _norm(self, name: str, shape: tuple) -> keras.layers.RMSNormalization:
        norm = keras.layers.RMSNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(shape)
        return norm

    def _dense(self, units: int, stddev: float, name: str, activation: Any = None) -> Any:
        return keras.layers.Dense(
            units,
            activation=activation,
            use_bias=False,
            kernel_initializer=sublayer_initializer(_normal(stddev), name),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape: Any) -> None:
        shape = (None, None, int(input_shape[-1]))
        hidden = shape[-1]
        self.self_attention_norm = self._norm("self_attention_norm", shape)
        self.self_attention = self._attention("self_attention", hidden)
        self.self_attention.build(shape, shape)
        if self.cross_attention:
            self.cross_attention_norm = self._norm("cross_attention_norm", shape)
            self.cross_attention_layer = self._attention("cross_attention", hidden)
            self.cross_attention_layer.build(shape, shape)
        self.feedforward_norm = self._norm("feedforward_norm", shape)
        self.feedforward_intermediate = self._dense(
            self.intermediate_dim, hidden**-0.5, "feedforward_intermediate", self._activation
        )
        self.feedforward_intermediate.build(shape)
        if self.gated_activation:
            self.feedforward_gate = self._dense(
                self.intermediate_dim, hidden**-0.5, "feedforward_gate"
            )
            self.feedforward_gate.build(shape)
        self.feedforward_output = self._dense(
            hidden, self.intermediate_dim**-0.5, "feedforward_output"
        )
        self.feedforward_output.build(shape[:-1] + (self.intermediate_dim,))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def cross_attention_cache(self, encoder_output: Any) -> Any:
        """The cross-attention's keys and values of ``encoder_output``, ``(batch, 2,
        source_time, heads, key_value_dim)``: computed once per source for decoding."""
        if not self.cross_attention:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): `cross_attention_cache` needs a "
                "decoder block (cross_attention=True)."
            )
        attention = self.cross_attention_layer
        encoder_output = unmasked(encoder_output)
        return ops.stack(
            [attention.key_dense(encoder_output), attention.value_dense(encoder_output)], axis=1
        )

    def call(
        self,
        x: Any,
        attention_bias: Any = None,
        padding_mask: Any = None,
        encoder_output: Any = None,
        encoder_mask: Any = None,
        use_causal_mask: bool = False,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        if cache is None and self._remats(training):

            def block(x: Any, bias: Any, encoder: Any) -> Any:
                return self.call(
                    x, bias, padding_mask, encoder, encoder_mask, use_causal_mask, training=training
                )

            return self._remat_call(block, (x, attention_bias, encoder_output), training)
        if self.cross_attention and encoder_output is None and cache is None:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): a decoder block needs "
                "`encoder_output` (or a `cache` holding its projection)."
            )
        self_cache = cross_cache = None
        if cache is not None:
            self_cache, cross_cache = cache
        h = self.self_attention_norm(x)
        h = self.self_attention(
            h,
            h,
            key_mask=padding_mask,
            attention_bias=attention_bias,
            use_causal_mask=use_causal_mask,
            cache=self_cache,
            cache_update_index=cache_update_index,
            training=training,
        )
        if self_cache is not None:
            h, self_cache = h
        x = x + self.dropout_layer(h, training=training)
        if self.cross_attention:
            h = self.cross_attention_norm(x)
            if cross_cache is None:
                h = self.cross_attention_layer(
                    h, encoder_output, key_mask=encoder_mask, training=training
                )
            else:  # the cached projection of the encoder output (key/value unused)
                h, _ = self.cross_attention_layer(
                    h, h, key_mask=encoder_mask, cache=cross_cache, training=training
                )
            x = x + self.dropout_layer(h, training=training)
        h = self.feedforward_norm(x)
        inner = self.feedforward_intermediate(h)
        if self.gated_activation:
            inner = inner * self.feedforward_gate(h)
        inner = self.dropout_layer(inner, training=training)
        x = x + self.dropout_layer(self.feedforward_output(inner), training=training)
        return x if cache is None else (x, self_cache)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape)

    def compute_output_spec(self, x: Any, *args: Any, cache: Any = None, **kwargs: Any) -> Any:
        output = keras.KerasTensor(x.shape, dtype=self.compute_dtype)
        if cache is None:
            return output
        return output, keras.KerasTensor(cache[0].shape, dtype=cache[0].dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            key_value_dim=self.key_value_dim,
            activation=self.activation
            if isinstance(self.activation, str)
            else keras.activations.serialize(self._activation),
            gated_activation=self.gated_activation,
            dropout=self.dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            cross_attention=self.cross_attention,
            fused_attention=self.fused_attention,
            remat=self.remat,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5Stack(keras.layers.Layer):
    """A T5 encoder or decoder stack: dropout, `T5Block` s sharing one relative bias, RMS norm.

    The stack's `RelativePositionBias` (log buckets; bidirectional for the
    encoder, causal for the decoder) is computed once per call and given to
    every block's self-attention, as T5 computes it in its first layer and
    shares it. The final RMS norm and a dropout end the stack.

    Args:
        num_layers: blocks.
        intermediate_dim: the blocks' feed-forward width (`T5Block`).
        num_heads: attention heads.
        key_value_dim: size of each head.
        activation: the feed-forward activation.
        gated_activation: gated feed-forward (T5 v1.1).
        dropout: dropout rate (see `T5Block`).
        layer_norm_epsilon: the RMS norms' epsilon.
        decoder: a decoder stack (causal self-attention and bias,
            cross-attention) or an encoder stack.
        num_buckets: rows of the bias table (T5: 32).
        max_distance: distances from it on share the last bucket (T5: 128).
        position: another scheme in place of T5's buckets (a transplant,
            keras_posenc/zoo/transplant.py: ``"alibi"``, ``"kerple"``, FIRE in a decoder,
            ...); None (default) for T5's ``LogBuckets(num_buckets, max_distance)``.
        fused_attention: ``"auto"``, ``True`` or ``False``; see `MultiHeadRelativeAttention`.
        remat: every block's (`T5Block`): recomputed in the backward pass of training.
        **kwargs: standard layer arguments.

    Call arguments:
        x: embedded tokens, ``(batch, time, d)``.
        padding_mask: ``(batch, time)`` bool or int 0/1, True for real tokens: the keys
            the self-attention may see (a decoder's combined with its causal mask); None:
            every key (a decoder's right padding is never seen by a real position).
        encoder_output: the encoder's output (a decoder without caches).
        encoder_mask: the source mask, True for real tokens (a decoder).
        caches: for decoding step by step, one ``(self_cache, cross_cache)``
            per block (`T5Block`); the bias rows start at ``cache_update_index``.
        cache_update_index: the position of ``x[:, 0]``.
        training: whether dropout is active.

    Returns:
        ``(batch, time, d)``; with ``caches``, ``(output, new_self_caches)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.t5 import T5Stack
        >>> encoder = T5Stack(2, intermediate_dim=16, num_heads=2, key_value_dim=4)
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> tuple(encoder(x, padding_mask=np.array([[1, 1, 1, 0, 0]] * 2, bool)).shape)
        (2, 5, 8)

    Reference:
        Raffel et al., "Exploring the Limits of Transfer Learning with a Unified
        Text-to-Text Transformer", JMLR 2020.
    """

    def __init__(
        self,
        num_layers: int,
        intermediate_dim: int,
        num_heads: int,
        key_value_dim: int,
        activation: Any = "relu",
        gated_activation: bool = False,
        dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-6,
        decoder: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
        fused_attention: bool | str = "auto",
        position: Any = None,
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_layers = check_int(caller, "num_layers", num_layers, 1)
        self.decoder = check_bool(caller, "decoder", decoder)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.position = None if position is None else position_schemes.get(position, caller)
        if getattr(self.position, "causal_only", False) and not self.decoder:
            raise ValueError(
                f"{caller}: position={self.position!r} is defined for keys at or before the "
                "query only; an encoder stack attends both ways."
            )
        scheme = self.position or LogBuckets(
            num_buckets, max_distance, bidirectional=not self.decoder
        )
        self.position_bias = RelativePositionBias(
            num_heads,
            position=scheme,
            embeddings_initializer=_normal((num_heads * key_value_dim) ** -0.5),
            dtype=self.dtype_policy,
            name="position_bias",
        )
        kind = "decoder" if self.decoder else "encoder"
        self.blocks = [
            T5Block(
                intermediate_dim,
                num_heads,
                key_value_dim,
                activation=activation,
                gated_activation=gated_activation,
                dropout=dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                cross_attention=self.decoder,
                fused_attention=fused_attention,
                remat=remat,
                dtype=self.dtype_policy,
                name=f"{kind}_block_{i}",
            )
            for i in range(self.num_layers)
        ]
        first = self.blocks[0]
        self.dropout_layer = keras.layers.Dropout(first.dropout, dtype=self.dtype_policy)

    def build(self, input_shape: Any) -> None:
        shape = (None, None, int(input_shape[-1]))
        self.position_bias.build()
        for block in self.blocks:
            block.build(shape)
        self.final_norm = keras.layers.RMSNormalization(
            epsilon=self.blocks[0].layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm"
        )
        self.final_norm.build(shape)
        self.built = True

    def cross_attention_caches(self, encoder_output: Any) -> list:
        """Every block's `T5Block.cross_attention_cache` of ``encoder_output``."""
        return [block.cross_attention_cache(encoder_output) for block in self.blocks]

    def call(
        self,
        x: Any,
        padding_mask: Any = None,
        encoder_output: Any = None,
        encoder_mask: Any = None,
        caches: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        if padding_mask is not None:
            padding_mask = check_mask(
                f"{type(self).__name__}({self.name!r})",
                "padding_mask",
                padding_mask,
                tuple(x.shape[:2]),
                ("batch", "time"),
            )
        x = self.dropout_layer(x, training=training)
        length = ops.shape(x)[1]
        if caches is None:
            bias = self.position_bias(length, length)
            for block in self.blocks:
                x = block(
                    x,
                    bias,
                    padding_mask=padding_mask,
                    encoder_output=encoder_output,
                    encoder_mask=encoder_mask,
                    use_causal_mask=self.decoder,
                    training=training,
                )
        else:
            # The queries are positions index.. of a buffer of max_length keys.
            max_length = ops.shape(caches[0][0])[2]
            bias = self.position_bias(length, max_length, offset=cache_update_index)
            new_caches = []
            for block, cache in zip(self.blocks, caches, strict=True):
                x, cache = block(
                    x,
                    bias,
                    encoder_mask=encoder_mask,
                    use_causal_mask=True,
                    cache=cache,
                    cache_update_index=cache_update_index,
                    training=training,
                )
                new_caches.append(cache)
        x = self.dropout_layer(self.final_norm(x), training=training)
        return x if caches is None else (x, new_caches)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape)

    def compute_output_spec(self, x: Any, *args: Any, caches: Any = None, **kwargs: Any) -> Any:
        output = keras.KerasTensor(x.shape, dtype=self.compute_dtype)
        if caches is None:
            return output
        return output, [keras.KerasTensor(c[0].shape, dtype=c[0].dtype) for c in caches]

    def get_config(self) -> dict:
        config = super().get_config()
        block = self.blocks[0].get_config()
        config.update(
            num_layers=self.num_layers,
            **{
                key: block[key]
                for key in (
                    "intermediate_dim",
                    "num_heads",
                    "key_value_dim",
                    "activation",
                    "gated_activation",
                    "dropout",
                    "layer_norm_epsilon",
                    "fused_attention",
                    "remat",
                )
            },
            decoder=self.decoder,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
            position=keras.saving.serialize_keras_object(self.position),
        )
        return config
