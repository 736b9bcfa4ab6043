"""T5 (Raffel et al. 2020): the encoder-decoder that made the log-bucket relative bias standard.

Both stacks are pre-norm Transformers without biases: RMS layer norm (no mean,
no offset), self-attention, in the decoder cross-attention, and a feed-forward
network, each added to the residual stream; a final RMS norm per stack. Position
information is one `keras_posenc.layers.RelativePositionBias` per stack
(``position=LogBuckets(...)``: 32 buckets, max distance 128; bidirectional in the
encoder, causal in the decoder), computed once per call and added to the logits
of every self-attention layer of its stack (`MultiHeadRelativeAttention` with
``relative=None`` and ``attention_bias=``). One token embedding is shared by the
encoder and the decoder.

Registered configurations (the released checkpoints' shapes, 32,128-token vocabulary;
parameters counted by the tests):

    name            layers  d    FFN   heads x d_kv  feed-forward   head              parameters
    t5_small        6+6     512  2048  8 x 64        ReLU           tied embedding    60,506,624
    t5_base         12+12   768  3072  12 x 64       ReLU           tied embedding    222,903,552
    t5_1.1_small    8+8     512  1024  6 x 64        gated GELU     separate matrix   76,961,152
    t5_1.1_base     12+12   768  2048  12 x 64       gated GELU     separate matrix   247,577,856

(T5 v1.0 ties the output projection to the embedding and scales the decoder
output by ``d ** -0.5`` before it; v1.1 has its own output matrix and no scale.
v1.1's GELU is the tanh approximation, `gelu_tanh`.)

Differences from the published layout, by design:

- **The query scale is folded into the query kernel.** T5 does not divide the
  logits by ``sqrt(d_kv)`` (Mesh TensorFlow folds it into the query's
  initialisation); our attention does. Our query kernel is therefore T5's
  times ``sqrt(d_kv)``, and every logit is the same: T5's initialisation
  ``N(0, (d * d_kv) ** -0.5)`` becomes ours, ``N(0, d ** -0.5)``, the same
  distribution as the other projections. With ``d_kv = 64`` the factor is 8,
  a power of two: converting a checkpoint (`keras_posenc.convert.from_keras_hub_t5`)
  changes no bit of its numbers.
- **Token ids**: T5 starts every target with its padding id 0 (the decoder
  start token) and ends it with 1. The model's ``bos_id`` (the decoder start,
  ``decoder_start_id``) is therefore equal to ``pad_id`` (see
  :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`); padding is found from the
  ids after position 0, and the logits' Keras mask counts position 0 as real.
- Softmaxes run in float32 with a finite mask fill; a fully padded source
  gives finite outputs. Padded source positions attend like real ones
  (only keys are masked), as in T5, so every encoder output equals keras-hub's.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._attention import unmasked
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_bool_or_auto,
    check_int,
    check_positive_number,
    check_rate,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers.position_schemes import LogBuckets
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
from keras_posenc.layers.relative_position import RelativePositionBias
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from keras_posenc.zoo.t5_config import CONFIGS, VOCABULARY_SIZE, T5Config

__all__ = [
    "T5",
    "T5Block",
    "T5Config",
    "T5Stack",
    "T5TargetMask",
    "gelu_tanh",
    "query_kernel_scale",
]

REFERENCE = (
    "Raffel et al. 2020, Exploring the Limits of Transfer Learning with a Unified "
    "Text-to-Text Transformer (JMLR 21); keras-hub's T5Backbone"
)
# The released checkpoints' parameter counts (keras-hub's presets t5_small_multi,
# t5_base_multi, flan_small_multi and flan_base_multi / t5_1.1_base have these shapes).
PAPER_PARAMETERS = {
    "t5_small": 60_506_624,
    "t5_base": 222_903_552,
    "t5_1.1_small": 76_961_152,
    "t5_1.1_base": 247_577_856,
}


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
class T5Block(keras.layers.Layer):
    """One T5 layer: pre-norm self-attention, cross-attention (decoder), feed-forward.

    ``x + attention(rms(x))``, then in the decoder ``x + cross(rms(x), encoder)``,
    then ``x + W_o(dropout(act(W_i rms(x)) [* W_g rms(x)]))``; every sublayer's
    output passes dropout before it is added. No projection has a bias; the
    layer norms are `keras.layers.RMSNormalization` (a scale, no offset). The
    relative position bias comes from outside (one per stack, `T5Stack`) as
    ``attention_bias``. Attention is `MultiHeadRelativeAttention` with
    ``relative=None``, which scales the queries by ``1 / sqrt(key_value_dim)``:
    T5's query kernel times ``sqrt(key_value_dim)`` gives T5's logits (the
    module docstring says why).

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
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
        fused_attention: ``"auto"``, ``True`` or ``False``; see `MultiHeadRelativeAttention`.
        **kwargs: standard layer arguments.

    Call arguments:
        x: embedded tokens, ``(batch, time, d)``.
        padding_mask: ``(batch, time)`` bool (encoder): True for real tokens.
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_layers = check_int(caller, "num_layers", num_layers, 1)
        self.decoder = check_bool(caller, "decoder", decoder)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.position_bias = RelativePositionBias(
            num_heads,
            position=LogBuckets(num_buckets, max_distance, bidirectional=not self.decoder),
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
                )
            },
            decoder=self.decoder,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5TargetMask(keras.layers.Layer):
    """Passes logits through, with the Keras mask of the decoder input T5 needs.

    ``layer([logits, decoder_token_ids])`` returns ``logits`` carrying the mask
    ``(decoder_token_ids != pad_id) | (position == 0)``: T5's decoder input
    starts with the padding id (its decoder start token), which is a real
    position, while padding after the target is not. Keras losses then skip
    the padded positions.

    Args:
        pad_id: the padding id.
        **kwargs: standard layer arguments.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> layer = T5TargetMask(pad_id=0)
        >>> mask = layer.compute_mask([np.zeros((1, 4, 3)), np.array([[0, 7, 0, 0]])])
        >>> ops.convert_to_numpy(mask).tolist()
        [[True, True, False, False]]
    """

    def __init__(self, pad_id: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pad_id = check_int(type(self).__name__, "pad_id", pad_id, 0)
        self.supports_masking = True

    def call(self, inputs: Any) -> Any:
        logits, _ = inputs
        return unmasked(logits)

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        _, ids = inputs
        ids = ops.cast(ids, "int32")
        # Position 0 from a cumulative sum: no length is needed (unknown while symbolic).
        first = ops.equal(ops.cumsum(ops.ones_like(ids), axis=1), 1)
        return ops.logical_or(ops.not_equal(ids, self.pad_id), first)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape[0])

    def compute_output_spec(self, inputs: Any) -> Any:
        return keras.KerasTensor(inputs[0].shape, dtype=inputs[0].dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(pad_id=self.pad_id)
        return config


# --------------------------------------------------------------------------- model


@keras.saving.register_keras_serializable(package="keras_posenc")
class T5(Seq2SeqModel):
    """The T5 encoder-decoder, built from `RelativePositionBias` and `MultiHeadRelativeAttention`.

    A functional model: ``model({"encoder_token_ids": source,
    "decoder_token_ids": target_in})`` returns float32 logits ``(batch,
    target_time, vocabulary_size)``; ``target_in`` is the target shifted right,
    starting with ``decoder_start_id`` (T5: 0, the padding id). Sources are
    padded with ``pad_id`` (the mask is ``ids != pad_id``); the logits carry
    the mask ``(target_in != pad_id) | (position == 0)`` (`T5TargetMask`).

    It implements the decoding contract of
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`: ``encode`` gives
    ``(encoder_output, source_mask, cross_0, ..)`` with every decoder block's
    projected keys and values of the encoder output; the cache adds one zero
    self-attention buffer per decoder block, ``(batch, 2, max_length, heads,
    key_value_dim)``. ``generate`` runs greedy or beam search.

    Pretrained weights: `keras_posenc.convert.from_keras_hub_t5` converts a
    ``keras_hub.models.T5Backbone`` (any keras-hub T5 preset).

    Args:
        vocabulary_size: token ids (shared by source, target and output).
        hidden_dim: model width ``d``.
        intermediate_dim: feed-forward width.
        num_heads: attention heads.
        num_layers: blocks in the encoder, and in the decoder unless
            ``num_decoder_layers`` is given.
        num_decoder_layers: decoder blocks; None: ``num_layers``.
        key_value_dim: head size; None: ``hidden_dim // num_heads``.
        activation: feed-forward activation: ``"relu"`` (v1.0), ``"gelu_tanh"``
            (v1.1), or any Keras activation.
        gated_activation: gated feed-forward (v1.1).
        tie_embeddings: the output projection is the embedding, transposed,
            applied to the decoder output scaled by ``hidden_dim ** -0.5``
            (v1.0); False: a separate matrix, no scale (v1.1).
        dropout: dropout rate (T5: 0.1 in pre-training).
        layer_norm_epsilon: the RMS norms' epsilon.
        num_buckets: relative position buckets (32).
        max_distance: the largest bucketed distance (128).
        fused_attention: ``"auto"``, ``True`` or ``False``; see
            `MultiHeadRelativeAttention`.
        max_source_length: the longest source accepted, or None (any).
        max_target_length: the longest target (start token included), or None.
        pad_id: padding id (0).
        eos_id: the id that ends a target (1).
        decoder_start_id: the id every target starts with (T5: 0, equal to
            ``pad_id``); the model's ``bos_id``.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.t5 import T5
        >>> model = T5(40, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1)
        >>> source = np.array([[5, 6, 7, 1], [8, 9, 1, 0]])
        >>> target_in = np.array([[0, 4, 5], [0, 6, 0]])
        >>> tuple(model({"encoder_token_ids": source, "decoder_token_ids": target_in}).shape)
        (2, 3, 40)
        >>> model.generate(source, max_length=5).shape
        (2, 5)

    Reference:
        Raffel, Shazeer, Roberts, Lee, Narang, Matena, Zhou, Li, Liu, "Exploring
        the Limits of Transfer Learning with a Unified Text-to-Text
        Transformer", JMLR 21, 2020.
    """

    # T5's targets start with the padding id (see Seq2SeqModel).
    decoder_start_may_be_pad = True

    def __init__(
        self,
        vocabulary_size: int = VOCABULARY_SIZE,
        hidden_dim: int = 512,
        intermediate_dim: int = 2048,
        num_heads: int = 8,
        num_layers: int = 6,
        num_decoder_layers: int | None = None,
        key_value_dim: int | None = None,
        activation: Any = "relu",
        gated_activation: bool = False,
        tie_embeddings: bool = True,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        num_buckets: int = 32,
        max_distance: int = 128,
        fused_attention: bool | str = "auto",
        max_source_length: int | None = None,
        max_target_length: int | None = None,
        pad_id: int = 0,
        eos_id: int = 1,
        decoder_start_id: int = 0,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        self.hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
        self.num_heads = check_int(owner, "num_heads", num_heads, 1)
        if key_value_dim is None:
            if self.hidden_dim % self.num_heads:
                raise ValueError(
                    f"{owner}: `hidden_dim` must be a multiple of `num_heads` when "
                    f"`key_value_dim` is None (head size = hidden_dim / num_heads), got "
                    f"hidden_dim={hidden_dim}, num_heads={num_heads}."
                )
            key_value_dim = self.hidden_dim // self.num_heads
        self.key_value_dim = check_int(owner, "key_value_dim", key_value_dim, 1)
        self.num_layers = check_int(owner, "num_layers", num_layers, 1)
        self.num_decoder_layers = (
            self.num_layers
            if num_decoder_layers is None
            else check_int(owner, "num_decoder_layers", num_decoder_layers, 1)
        )
        self._decoder_layers_given = num_decoder_layers is not None
        self.tie_embeddings = check_bool(owner, "tie_embeddings", tie_embeddings)
        self._init_seq2seq(
            vocabulary_size,
            vocabulary_size,
            pad_id,
            decoder_start_id,
            eos_id,
            max_source_length,
            max_target_length,
        )
        policy = keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())
        stack = dict(
            intermediate_dim=intermediate_dim,
            num_heads=self.num_heads,
            key_value_dim=self.key_value_dim,
            activation=activation,
            gated_activation=gated_activation,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            num_buckets=num_buckets,
            max_distance=max_distance,
            fused_attention=fused_attention,
            dtype=policy,
        )
        try:
            self.encoder = T5Stack(self.num_layers, **stack, name="encoder")
            self.decoder = T5Stack(self.num_decoder_layers, **stack, decoder=True, name="decoder")
        except (TypeError, ValueError) as error:
            raise type(error)(f"{owner}: {error}") from error
        check_allocation(owner, "token embedding", [(self.source_vocab_size, self.hidden_dim)])
        self.token_embedding = keras.layers.ReversibleEmbedding(
            self.source_vocab_size,
            self.hidden_dim,
            tie_weights=self.tie_embeddings,
            embeddings_initializer=_normal(1.0),
            reverse_dtype="float32",
            dtype=policy,
            name="token_embedding",
        )
        self.target_mask = T5TargetMask(self.pad_id, dtype=policy, name="target_mask")
        # Built before the graph: `encode` computes the cross-attention caches.
        self.token_embedding.build((None, None))
        self.decoder.build((None, None, self.hidden_dim))
        inputs, logits = self._functional_graph()
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # keras.Model.__init__ resets attributes it does not know; set the ids again.
        self._init_seq2seq(
            vocabulary_size,
            vocabulary_size,
            pad_id,
            decoder_start_id,
            eos_id,
            max_source_length,
            max_target_length,
        )

    # ------------------------------------------------------------------ contract

    def encode(self, encoder_token_ids: Any, training: Any = None) -> tuple:
        """``(encoder_output, source_mask, cross_0, .., cross_{n-1})``: the encoder state.

        ``encoder_output`` is ``(batch, source_time, d)`` (after the final RMS
        norm), ``source_mask`` True for real tokens, ``cross_i`` decoder block
        ``i``'s projected keys and values of the encoder output, ``(batch, 2,
        source_time, heads, key_value_dim)``, computed once per source.
        """
        ids = ops.cast(encoder_token_ids, "int32")
        mask = ops.not_equal(ids, self.pad_id)
        x = self.encoder(self.token_embedding(ids), padding_mask=mask, training=training)
        return (x, mask, *self.decoder.cross_attention_caches(x))

    def decode(self, decoder_token_ids: Any, encoder_state: tuple, training: Any = None) -> Any:
        """Teacher-forced float32 logits; target positions are 0, 1, .. (no left padding).

        The decoder's self-attention is causal and gets no padding mask, so a
        real position never sees the padding after it and ``decode`` equals
        ``decode_step`` at every position. The logits carry the Keras mask
        ``(decoder_token_ids != pad_id) | (position == 0)``.
        """
        output, mask = encoder_state[:2]
        ids = ops.cast(decoder_token_ids, "int32")
        x = self.decoder(
            self.token_embedding(ids), encoder_output=output, encoder_mask=mask, training=training
        )
        return self.target_mask([self.logits(x), ids])

    def logits(self, hidden: Any) -> Any:
        """float32 logits of decoder outputs: the transposed embedding applied to
        ``hidden * hidden_dim ** -0.5`` (tied, T5 v1.0), or the separate matrix."""
        if self.tie_embeddings:
            hidden = hidden * ops.cast(self.hidden_dim**-0.5, hidden.dtype)
        return self.token_embedding(hidden, reverse=True)

    def encoder_state_names(self) -> tuple[str, ...]:
        """``encoder_output``, ``source_mask``, then ``cache_decoder_block_<i>_cross_attention``."""
        crosses = (f"cache_{block.name}_cross_attention" for block in self.decoder.blocks)
        return ("encoder_output", "source_mask", *crosses)

    def cache_names(self) -> tuple[str, ...]:
        """The encoder state's names, then ``cache_decoder_block_<i>_self_attention``."""
        buffers = (f"cache_{block.name}_self_attention" for block in self.decoder.blocks)
        return (*self.encoder_state_names(), *buffers)

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        """The encoder state, then one zero self-attention buffer per decoder block."""
        batch = ops.shape(encoder_state[0])[0]
        shape = (batch, 2, max_length, self.num_heads, self.key_value_dim)
        buffers = [ops.zeros(shape, dtype=self.compute_dtype) for _ in self.decoder.blocks]
        return (*encoder_state, *buffers)

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        layers = len(self.decoder.blocks)
        output, mask, *rest = cache
        crosses, buffers = rest[:layers], rest[layers:]
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        x, new_buffers = self.decoder(
            self.token_embedding(ids),
            encoder_mask=mask,
            caches=list(zip(buffers, crosses, strict=True)),
            cache_update_index=index,
        )
        return self.logits(x)[:, 0], (output, mask, *crosses, *new_buffers)

    def get_config(self) -> dict:
        block = self.encoder.blocks[0]
        return {
            "name": self.name,
            "vocabulary_size": self.source_vocab_size,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": block.intermediate_dim,
            "num_heads": self.num_heads,
            "num_layers": self.num_layers,
            "num_decoder_layers": self.num_decoder_layers if self._decoder_layers_given else None,
            "key_value_dim": self.key_value_dim,
            "activation": block.get_config()["activation"],
            "gated_activation": block.gated_activation,
            "tie_embeddings": self.tie_embeddings,
            "dropout": block.dropout,
            "layer_norm_epsilon": block.layer_norm_epsilon,
            "num_buckets": self.encoder.num_buckets,
            "max_distance": self.encoder.max_distance,
            "fused_attention": block.fused_attention,
            "max_source_length": self.max_source_length,
            "max_target_length": self.max_target_length,
            "pad_id": self.pad_id,
            "eos_id": self.eos_id,
            "decoder_start_id": self.bos_id,
        }


def query_kernel_scale(key_value_dim: int) -> float:
    """Our query kernel divided by T5's: ``sqrt(key_value_dim)`` (the module docstring says why).

    Examples:

        >>> query_kernel_scale(64)
        8.0
    """
    return math.sqrt(key_value_dim)


for _name, _config in CONFIGS.items():
    register_model(
        _name,
        T5,
        family="t5",
        config=_config,
        description=(
            f"T5{' v1.1' if _config.gated_activation else ''} "
            f"{_config.num_layers}+{_config.num_layers} layers, d {_config.hidden_dim}, "
            f"FFN {_config.intermediate_dim}, {_config.num_heads} heads, log-bucket "
            "relative bias"
        ),
        paper_parameters=PAPER_PARAMETERS[_name],
        reference=REFERENCE,
    )
