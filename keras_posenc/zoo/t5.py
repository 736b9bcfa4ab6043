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

The layers (`gelu_tanh`, `T5Block`, `T5Stack`) are in keras_posenc/zoo/t5_layers.py, the
named configurations in keras_posenc/zoo/t5_config.py; this module has the model, the mask
of its logits and the registration, and re-exports the public names of both.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._attention import unmasked
from keras_posenc.layers._checks import check_bool, check_int
from keras_posenc.layers._memory import check_allocation
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from keras_posenc.zoo.t5_config import CONFIGS, VOCABULARY_SIZE, T5Config
from keras_posenc.zoo.t5_layers import T5Block, T5Stack, _normal, gelu_tanh

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
        position: another bias scheme in place of the buckets, in both stacks (a
            transplant, `keras_posenc.zoo.transplant`: ``"alibi"``, ``"kerple"``, ...);
            None (default) for T5's.
        max_source_length: the longest source accepted, or None (any).
        max_target_length: the longest target (start token included), or None.
        pad_id: padding id (0).
        eos_id: the id that ends a target (1).
        decoder_start_id: the id every target starts with (T5: 0, equal to
            ``pad_id``); the model's ``bos_id``.
        tokenizer: a keras-hub ``T5Tokenizer`` (a converted preset's,
            `keras_posenc.convert.from_keras_hub_preset`), with which ``generate`` takes
            and returns text; None (default): token ids only.
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
        position: Any = None,
        max_source_length: int | None = None,
        max_target_length: int | None = None,
        pad_id: int = 0,
        eos_id: int = 1,
        decoder_start_id: int = 0,
        tokenizer: Any = None,
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
        checked = self.check_seq2seq_arguments(
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
            position=position,
            dtype=policy,
        )
        try:
            self.encoder = T5Stack(self.num_layers, **stack, name="encoder")
            self.decoder = T5Stack(self.num_decoder_layers, **stack, decoder=True, name="decoder")
        except (TypeError, ValueError) as error:
            raise type(error)(f"{owner}: {error}") from error
        vocabulary = checked["source_vocab_size"]
        check_allocation(owner, "token embedding", [(vocabulary, self.hidden_dim)])
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocabulary,
            self.hidden_dim,
            tie_weights=self.tie_embeddings,
            embeddings_initializer=_normal(1.0),
            reverse_dtype="float32",
            dtype=policy,
            name="token_embedding",
        )
        self.target_mask = T5TargetMask(checked["pad_id"], dtype=policy, name="target_mask")
        # Built before the graph: `encode` computes the cross-attention caches.
        self.token_embedding.build((None, None))
        self.decoder.build((None, None, self.hidden_dim))
        super().__init__(**checked, **kwargs)
        self._init_tokenizer(tokenizer)

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
            "position": keras.saving.serialize_keras_object(self.encoder.position),
            "fused_attention": block.fused_attention,
            "max_source_length": self.max_source_length,
            "max_target_length": self.max_target_length,
            "pad_id": self.pad_id,
            "eos_id": self.eos_id,
            "decoder_start_id": self.bos_id,
            **self._tokenizer_config(),
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
