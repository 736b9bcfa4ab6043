"""Shaw et al.'s relative Transformer (2018) and the Music Transformer (Huang et al. 2018).

Both are Transformers whose only position information is learned relative positions
inside self-attention, assembled from `keras_posenc.layers.RelativeTransformerEncoder`
and `RelativeTransformerDecoder` (every attention is `MultiHeadRelativeAttention`; the
decoder's cross-attention is keras_hub's `CachedMultiHeadAttention`, attending through the
library's attention core).

**Shaw's relative Transformer** (:class:`ShawTransformer`, family ``shaw_transformer``):
the encoder-decoder of Vaswani et al. with ``relative="keys_values"`` (``a^K`` and
``a^V``, distances clipped to ``k``, one table pair per layer shared by the heads) in the
encoder's and the decoder's self-attention and no absolute positions. Its registered
configurations are the paper's WMT models (section 4.1 of Shaw et al.):

    name                     layers  d     FFN   heads  k   dropout  parameters (V = 37,000)
    shaw_transformer_base    6+6     512   1024  8      16  0.1      50,540,032
    shaw_transformer_big     6+6     1024  4096  16     8   0.3      214,275,584

**The Music Transformer** (:class:`MusicTransformer`, family ``music_transformer``): a
decoder-only Transformer with ``relative="keys"`` (Huang et al. drop Shaw's value term)
and the memory-efficient skew (``relative_logits="skew"``), over an event vocabulary
(``num_events``, default Magenta's 388 performance events, plus padding, start and end):

    name                      layers  d    FFN   heads  max distance  parameters (391 ids)
    music_transformer_base    6       512  2048  8      2048          20,688,768

(Magenta's ``score2perf_transformer_base``: tensor2tensor's ``transformer_base`` sizes,
2048-event training windows.) The model cards ``zoo/shaw_transformer/README.md`` and
``zoo/music_transformer/README.md`` derive the counts and say where each number comes from.

Both stacks are pre-norm with a final layer norm (tensor2tensor's ``transformer_base``,
the code both papers ran), the token embedding is ``N(0, d^-1/2)``, scaled by
``sqrt(d)`` and shared by the encoder, the decoder and the output projection (its
transpose), with dropout on the embedded tokens.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import keras
from keras import ops

from keras_posenc.layers import position_schemes
from keras_posenc.layers._checks import check_bool, check_int, check_positive_number, check_rate
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers._relative_arguments import check_rotary
from keras_posenc.layers.position_schemes import ClipPositions
from keras_posenc.layers.relative_transformer import RelativeTransformerEncoder
from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.language_model import LanguageModel
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from keras_posenc.zoo.t5 import T5TargetMask

__all__ = ["MusicTransformer", "ShawTransformer"]

SHAW_REFERENCE = (
    "Shaw, Uszkoreit, Vaswani 2018, Self-Attention with Relative Position Representations "
    "(NAACL); tensor2tensor's transformer_base"
)
MUSIC_REFERENCE = (
    "Huang et al. 2018, Music Transformer: Generating Music with Long-Term Structure "
    "(arXiv:1809.04281, ICLR 2019); Magenta's score2perf hparams (tensor2tensor)"
)
# Vaswani et al.'s shared English-German byte-pair vocabulary (about 37,000 tokens), which
# Shaw et al. reuse; the vocabulary is an argument and the count depends on it.
WMT_VOCABULARY = 37000


def _check_width(owner: str, hidden_dim: int, num_heads: int) -> int:
    if hidden_dim % num_heads:
        raise ValueError(
            f"{owner}: `hidden_dim` must be a multiple of `num_heads` (head size = "
            f"hidden_dim / num_heads), got hidden_dim={hidden_dim}, num_heads={num_heads}."
        )
    return hidden_dim // num_heads


def _policy(kwargs: dict) -> Any:
    return keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())


class _RelativeStack:
    """What both models share: validated block arguments, the scaled shared embedding,
    the final norm and the output projection. A mixin of the two model classes."""

    def _init_blocks(
        self,
        owner: str,
        vocab_size: int,
        hidden_dim: Any,
        intermediate_dim: Any,
        num_heads: Any,
        max_distance: Any,
        dropout: Any,
        normalize_first: Any,
        layer_norm_epsilon: Any,
        policy: Any,
        relative: Any = "keys",
        position: Any = None,
        rotary: Any = None,
        remat: Any = False,
    ) -> None:
        self.relative = relative
        # Keras' remat of every block's call in training (RelativeTransformerEncoder).
        self.remat = check_bool(owner, "remat", remat)
        # None: the papers' clipped distances (ClipPositions(max_distance)) where there is a
        # relative term; another scheme (ALiBi, T5's buckets, ...) replaces them
        # (keras_posenc/zoo/transplant.py). The blocks check every combination.
        self.position = None if position is None else position_schemes.get(position, owner)
        self.rotary = check_rotary(owner, rotary)
        self.hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
        self.intermediate_dim = check_int(owner, "intermediate_dim", intermediate_dim, 1)
        self.num_heads = check_int(owner, "num_heads", num_heads, 1)
        self.head_dim = _check_width(owner, self.hidden_dim, self.num_heads)
        self.max_distance = check_int(owner, "max_distance", max_distance, 1)
        self.dropout = check_rate(owner, "dropout", dropout)
        self.normalize_first = check_bool(owner, "normalize_first", normalize_first)
        self.layer_norm_epsilon = check_positive_number(
            owner, "layer_norm_epsilon", layer_norm_epsilon
        )
        check_allocation(owner, "token embedding", [(vocab_size, self.hidden_dim)])
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocab_size,
            self.hidden_dim,
            tie_weights=True,
            # tensor2tensor's symbol modality: N(0, d^-1/2), multiplied by sqrt(d) on input.
            embeddings_initializer=keras.initializers.RandomNormal(stddev=self.hidden_dim**-0.5),
            reverse_dtype="float32",
            dtype=policy,
            name="token_embedding",
        )
        self.token_embedding.build((None, None))
        self.embedding_dropout = keras.layers.Dropout(
            self.dropout, dtype=policy, name="embedding_dropout"
        )

    def _block_arguments(self, policy: Any) -> dict:
        return dict(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            dropout=self.dropout,
            activation="relu",
            layer_norm_epsilon=self.layer_norm_epsilon,
            normalize_first=self.normalize_first,
            relative=self.relative,
            position=self._scheme(),
            rotary=self.rotary,
            remat=self.remat,
            dtype=policy,
        )

    def _scheme(self) -> Any:
        if self.position is not None or self.relative is None:
            return self.position
        return ClipPositions(self.max_distance)

    def _final_norm(self, name: str, policy: Any) -> Any:
        """A pre-norm stack's last layer norm (None for post-norm, whose blocks end normed)."""
        if not self.normalize_first:
            return None
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name=name
        )
        norm.build((None, None, self.hidden_dim))
        return norm

    def _embed(self, ids: Any, training: Any = None) -> Any:
        # A Python float, not a tensor: in the functional graph a constant tensor would be
        # captured by the exported function and become one of its inputs.
        x = self.token_embedding(ids) * math.sqrt(self.hidden_dim)
        return self.embedding_dropout(x, training=training)

    def _logits(self, x: Any, norm: Any) -> Any:
        if norm is not None:
            x = norm(x)
        return self.token_embedding(x, reverse=True)

    def _stack_config(self) -> dict:
        return {
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "num_heads": self.num_heads,
            "max_distance": self.max_distance,
            "dropout": self.dropout,
            "normalize_first": self.normalize_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "relative": self.relative,
            "position": keras.saving.serialize_keras_object(self.position),
            "rotary": keras.saving.serialize_keras_object(self.rotary),
            "remat": self.remat,
        }


# --------------------------------------------------------------------------- Shaw


@keras.saving.register_keras_serializable(package="keras_posenc")
class ShawTransformer(_RelativeStack, Seq2SeqModel):
    """Shaw et al.'s encoder-decoder: relative keys and values, no absolute positions.

    A functional model: ``model({"encoder_token_ids": source,
    "decoder_token_ids": target_in})`` returns float32 logits ``(batch,
    target_time, vocabulary_size)``; ``target_in`` is the target shifted right,
    starting with ``bos_id``. Sources are padded with ``pad_id`` (the mask is
    ``ids != pad_id``); the logits carry the mask ``target_in != pad_id``, so
    Keras losses skip padded target positions.

    Every self-attention (encoder: bidirectional; decoder: causal) is
    `MultiHeadRelativeAttention` with ``relative="keys_values"``: ``e_ij = q_i .
    (k_j + a^K_ij) / sqrt(d_z)``, ``z_i = sum_j a_ij (v_j + a^V_ij)``, ``a_ij =
    w[clip(j - i, -k, k)]``, one pair of ``(2k + 1, d_z)`` tables per layer
    shared by the heads. The cross-attention has no relative term. One token
    embedding serves the source, the target and (transposed) the output.

    It implements the decoding contract of
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`: ``encode`` gives
    ``(encoder_output, source_mask, cross_0, ..)`` with every decoder layer's
    projected keys and values of the encoder output; the cache adds one zero
    self-attention buffer per decoder layer, ``(batch, 2, max_length, heads,
    head_dim)``. ``generate`` runs greedy, beam search or sampling.

    Args:
        vocabulary_size: token ids, shared by source, target and output
            (default 37,000, Vaswani et al.'s English-German vocabulary).
        hidden_dim: model width ``d_x`` (512 base, 1024 big).
        intermediate_dim: feed-forward width (1024 base, 4096 big).
        num_heads: attention heads (8 base, 16 big); head size ``d_z =
            hidden_dim / num_heads``.
        num_layers: encoder layers, and decoder layers unless
            ``num_decoder_layers`` is given (6).
        num_decoder_layers: decoder layers; None: ``num_layers``.
        max_distance: the clipping distance ``k`` (16 base, 8 big).
        dropout: dropout on the embedded tokens, the attention probabilities and
            every sublayer's output (0.1 base, 0.3 big on English-German).
        normalize_first: pre-norm with a final layer norm per stack (default
            True, tensor2tensor's layout), or post-norm (Vaswani et al.'s paper).
        layer_norm_epsilon: the layer norms' epsilon (1e-6, tensor2tensor's).
        max_source_length: the longest source accepted, or None (any length:
            relative positions have no table limit).
        max_target_length: the longest target (``bos`` included), or None.
        pad_id: padding id (0).
        bos_id: the id every target starts with (1).
        eos_id: the id that ends a target (2).
        relative: the self-attention's relative mode (default ``"keys_values"``, the paper's);
            None for none (then ``rotary`` or nothing: NoPE).
        position: the relative term's scheme; None (default) for the paper's clipped
            distances, ``ClipPositions(max_distance)``. Another (``"alibi"``,
            ``"t5_decoder"``, ...) with ``relative="bias"`` is a transplant
            (`keras_posenc.zoo.transplant`).
        rotary: a `RotaryPositions` on every self-attention, or None (default).
        remat: recompute every block in the backward pass of training (Keras' remat:
            ``RelativeTransformerEncoder(remat=True)``): less memory, more time. Default False.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.relative_transformers import ShawTransformer
        >>> model = ShawTransformer(40, hidden_dim=8, intermediate_dim=16, num_heads=2,
        ...                         num_layers=1, max_distance=2)
        >>> source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
        >>> target_in = np.array([[1, 4, 5], [1, 6, 0]])
        >>> tuple(model({"encoder_token_ids": source, "decoder_token_ids": target_in}).shape)
        (2, 3, 40)
        >>> model.generate(source, max_length=5, beam_size=2).shape
        (2, 5)

    Reference:
        Shaw, Uszkoreit, Vaswani, "Self-Attention with Relative Position
        Representations", NAACL 2018.
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    """

    def __init__(
        self,
        vocabulary_size: int = WMT_VOCABULARY,
        hidden_dim: int = 512,
        intermediate_dim: int = 1024,
        num_heads: int = 8,
        num_layers: int = 6,
        num_decoder_layers: int | None = None,
        max_distance: int = 16,
        dropout: float = 0.1,
        normalize_first: bool = True,
        layer_norm_epsilon: float = 1e-6,
        max_source_length: int | None = None,
        max_target_length: int | None = None,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        relative: str | None = "keys_values",
        position: Any = None,
        rotary: Any = None,
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        self.num_layers = check_int(owner, "num_layers", num_layers, 1)
        self.num_decoder_layers = (
            self.num_layers
            if num_decoder_layers is None
            else check_int(owner, "num_decoder_layers", num_decoder_layers, 1)
        )
        self._decoder_layers_given = num_decoder_layers is not None
        # Checked before the layers are created from them (Seq2SeqModel checks them again).
        ids = self.check_seq2seq_arguments(
            vocabulary_size,
            vocabulary_size,
            pad_id,
            bos_id,
            eos_id,
            max_source_length,
            max_target_length,
        )
        policy = _policy(kwargs)
        self._init_blocks(
            owner,
            ids["source_vocab_size"],
            hidden_dim,
            intermediate_dim,
            num_heads,
            max_distance,
            dropout,
            normalize_first,
            layer_norm_epsilon,
            policy,
            relative,
            position,
            rotary,
            remat,
        )
        blocks = self._block_arguments(policy)
        self.encoder_blocks = [
            RelativeTransformerEncoder(**blocks, name=f"encoder_layer_{i}")
            for i in range(self.num_layers)
        ]
        self.decoder_blocks = [
            RelativeTransformerDecoder(**blocks, name=f"decoder_layer_{i}")
            for i in range(self.num_decoder_layers)
        ]
        # Built before the graph: `encode` computes their cross-attention caches.
        shape = (None, None, self.hidden_dim)
        for block in self.decoder_blocks:
            block.build(shape, shape)
        self.encoder_norm = self._final_norm("encoder_layer_norm", policy)
        self.decoder_norm = self._final_norm("decoder_layer_norm", policy)
        self.target_mask = T5TargetMask(ids["pad_id"], dtype=policy, name="target_mask")
        super().__init__(**ids, **kwargs)

    # ------------------------------------------------------------------ contract

    def encode(self, encoder_token_ids: Any, training: Any = None) -> tuple:
        """``(encoder_output, source_mask, cross_0, .., cross_{n-1})``: the encoder state.

        ``encoder_output`` is ``(batch, source_time, d)`` (after the final norm),
        ``source_mask`` True for real tokens, ``cross_i`` decoder layer ``i``'s
        projected keys and values of the encoder output, ``(batch, 2,
        source_time, heads, head_dim)``, computed once per source.
        """
        ids = ops.cast(encoder_token_ids, "int32")
        mask = ops.not_equal(ids, self.pad_id)
        x = self._embed(ids, training)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask, training=training)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        crosses = [block.cross_attention_cache(x, mask) for block in self.decoder_blocks]
        return (x, mask, *crosses)

    def decode(self, decoder_token_ids: Any, encoder_state: tuple, training: Any = None) -> Any:
        """Teacher-forced float32 logits; target positions are 0, 1, .. (no left padding).

        The decoder's self-attention is causal and gets no padding mask (every
        position counts as real), so a real position never sees the padding
        after it and ``decode`` equals ``decode_step`` at every position.
        """
        output, mask = encoder_state[:2]
        ids = ops.cast(decoder_token_ids, "int32")
        x = self._embed(ids, training)
        every_position = ops.ones_like(ids, dtype="bool")
        for block in self.decoder_blocks:
            x = block(
                x,
                output,
                decoder_padding_mask=every_position,
                encoder_padding_mask=mask,
                training=training,
            )
        return self.target_mask([self._logits(x, self.decoder_norm), ids])

    def encoder_state_names(self) -> tuple[str, ...]:
        """``encoder_output``, ``source_mask``, then ``cache_decoder_layer_<i>_cross_attention``."""
        crosses = (f"cache_{block.name}_cross_attention" for block in self.decoder_blocks)
        return ("encoder_output", "source_mask", *crosses)

    def cache_names(self) -> tuple[str, ...]:
        """The encoder state's names, then ``cache_decoder_layer_<i>_self_attention``."""
        buffers = (f"cache_{block.name}_self_attention" for block in self.decoder_blocks)
        return (*self.encoder_state_names(), *buffers)

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        """The encoder state, then one zero self-attention buffer per decoder layer."""
        batch = ops.shape(encoder_state[0])[0]
        shape = (batch, 2, max_length, self.num_heads, self.head_dim)
        buffers = [ops.zeros(shape, dtype=self.compute_dtype) for _ in self.decoder_blocks]
        return (*encoder_state, *buffers)

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        layers = len(self.decoder_blocks)
        output, mask, *rest = cache
        crosses, buffers = rest[:layers], rest[layers:]
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        x = self._embed(ids)
        new_buffers = []
        for block, cross, buffer in zip(self.decoder_blocks, crosses, buffers, strict=True):
            x, buffer, _ = block(
                x,
                output,
                encoder_padding_mask=mask,
                self_attention_cache=buffer,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross,
                cross_attention_cache_update_index=None,
            )
            new_buffers.append(buffer)
        logits = self._logits(x, self.decoder_norm)
        return logits[:, 0], (output, mask, *crosses, *new_buffers)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "vocabulary_size": self.source_vocab_size,
            **self._stack_config(),
            "num_layers": self.num_layers,
            "num_decoder_layers": self.num_decoder_layers if self._decoder_layers_given else None,
            "max_source_length": self.max_source_length,
            "max_target_length": self.max_target_length,
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }


# --------------------------------------------------------------------------- Music Transformer


@keras.saving.register_keras_serializable(package="keras_posenc")
class MusicTransformer(_RelativeStack, LanguageModel):
    """The Music Transformer: a decoder-only Transformer with relative keys and the skew.

    ``model(token_ids)`` returns float32 next-token logits ``(batch, time,
    vocab_size)`` (position ``t`` predicts the event at ``t + 1``), carrying the
    mask ``token_ids != pad_id``. Every layer is a causal
    `RelativeTransformerDecoder` without cross-attention whose self-attention has
    ``relative="keys"``: ``e_ij = q_i . (k_j + w^K[clip(j - i, -k, k)]) /
    sqrt(d_z)`` (Huang et al. keep Shaw's key term and drop the value term), the
    relative logits placed by the memory-efficient skew
    (``relative_logits="skew"``; where the lengths are not static, or a table
    lacks a row per distance, the layer gathers the same numbers). One table per
    layer, shared by the heads. No absolute positions.

    The vocabulary is the event vocabulary plus three special ids: ``pad_id``
    (0), ``bos_id`` (1) and ``eos_id`` (2) come first and events are ids ``3 ..
    num_events + 2``: ``vocab_size = num_events + 3``.

    It implements the decoding contract of
    :class:`~keras_posenc.zoo.language_model.LanguageModel`: the cache is one
    self-attention buffer per layer, ``(batch, 2, max_length, heads, head_dim)``;
    ``generate`` runs greedy search, sampling (``sampler="top_k"``, ...) or beam
    search from a prompt.

    Args:
        num_events: the event vocabulary's size (388: Magenta's performance
            events, 128 note-on, 128 note-off, 100 time shifts, 32 velocities).
        hidden_dim: model width ``d``.
        intermediate_dim: feed-forward width.
        num_heads: attention heads; head size ``d_z = hidden_dim / num_heads``.
        num_layers: decoder layers.
        max_distance: the largest relative distance with its own table row
            (farther keys share the last row): the maximum relative position.
        dropout: dropout on the embedded events, the attention probabilities and
            every sublayer's output.
        normalize_first: pre-norm with a final layer norm (default True,
            tensor2tensor's layout), or post-norm.
        layer_norm_epsilon: the layer norms' epsilon (1e-6).
        pad_id: padding id (0).
        bos_id: the usual first id of a prompt (1).
        eos_id: the id that ends a sequence (2).
        relative: the self-attention's relative mode (default ``"keys"``, the paper's);
            None for none (then ``rotary`` or nothing: NoPE).
        position: the relative term's scheme; None (default) for the paper's clipped
            distances, ``ClipPositions(max_distance)``. Another (``"alibi"``,
            ``"t5_decoder"``, ...) with ``relative="bias"`` is a transplant
            (`keras_posenc.zoo.transplant`).
        rotary: a `RotaryPositions` on every self-attention, or None (default).
        remat: recompute every block in the backward pass of training (Keras' remat:
            ``RelativeTransformerEncoder(remat=True)``): less memory, more time. Default False.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.relative_transformers import MusicTransformer
        >>> model = MusicTransformer(num_events=20, hidden_dim=8, intermediate_dim=16,
        ...                          num_heads=2, num_layers=1, max_distance=8)
        >>> model.vocab_size
        23
        >>> tuple(model(np.array([[1, 5, 6, 7]])).shape)
        (1, 4, 23)
        >>> model.generate(np.array([[1, 5, 6]]), max_length=8).shape
        (1, 8)

    Reference:
        Huang, Vaswani, Uszkoreit, Shazeer, Simon, Hawthorne, Dai, Hoffman,
        Dinculescu, Eck, "Music Transformer: Generating Music with Long-Term
        Structure", ICLR 2019 (arXiv:1809.04281).
    """

    def __init__(
        self,
        num_events: int = 388,
        hidden_dim: int = 512,
        intermediate_dim: int = 2048,
        num_heads: int = 8,
        num_layers: int = 6,
        max_distance: int = 2048,
        dropout: float = 0.1,
        normalize_first: bool = True,
        layer_norm_epsilon: float = 1e-6,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        relative: str | None = "keys",
        position: Any = None,
        rotary: Any = None,
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        self.num_events = check_int(owner, "num_events", num_events, 1)
        self.num_layers = check_int(owner, "num_layers", num_layers, 1)
        ids = (self.num_events + 3, pad_id, bos_id, eos_id, None)
        self._init_language_model(*ids)
        policy = _policy(kwargs)
        self._init_blocks(
            owner,
            self.vocab_size,
            hidden_dim,
            intermediate_dim,
            num_heads,
            max_distance,
            dropout,
            normalize_first,
            layer_norm_epsilon,
            policy,
            relative,
            position,
            rotary,
            remat,
        )
        blocks = self._block_arguments(policy)
        if self.relative == "keys" and self.position is None:  # the paper's clipped keys
            blocks["relative_logits"] = "skew"
        self.decoder_blocks = [
            RelativeTransformerDecoder(**blocks, name=f"decoder_layer_{i}")
            for i in range(self.num_layers)
        ]
        self.decoder_norm = self._final_norm("decoder_layer_norm", policy)
        self.target_mask = T5TargetMask(self.pad_id, dtype=policy, name="target_mask")
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = self._decode(token_ids)
        # Named, so Keras' output_names and an exported graph's output say "logits".
        logits = keras.layers.Identity(dtype="float32", name="logits")(x)
        super().__init__(inputs=token_ids, outputs=logits, **kwargs)
        self._init_language_model(*ids)

    def _decode(self, token_ids: Any, training: Any = None) -> Any:
        ids = ops.cast(token_ids, "int32")
        x = self._embed(ids, training)
        # Causal: a real position never sees the padding after it, so no padding mask
        # (every position counts), and the full pass equals the cached steps.
        every_position = ops.ones_like(ids, dtype="bool")
        for block in self.decoder_blocks:
            x = block(x, decoder_padding_mask=every_position, training=training)
        return self.target_mask([self._logits(x, self.decoder_norm), ids])

    # ------------------------------------------------------------------ decoding contract

    def cache_names(self) -> tuple[str, ...]:
        """``cache_decoder_layer_<i>_self_attention``: layer ``i``'s keys and values so far."""
        return tuple(f"cache_{block.name}_self_attention" for block in self.decoder_blocks)

    def init_cache(self, batch_size: Any, max_length: int) -> tuple:
        """One zero buffer ``(batch, 2, max_length, heads, head_dim)`` per layer."""
        shape = (batch_size, 2, max_length, self.num_heads, self.head_dim)
        return tuple(ops.zeros(shape, dtype=self.compute_dtype) for _ in self.decoder_blocks)

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        x = self._embed(ids)
        new_cache = []
        for block, buffer in zip(self.decoder_blocks, cache, strict=True):
            x, buffer = block(
                x, self_attention_cache=buffer, self_attention_cache_update_index=index
            )
            new_cache.append(buffer)
        return self._logits(x, self.decoder_norm)[:, 0], tuple(new_cache)

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "num_events": self.num_events,
            **self._stack_config(),
            "num_layers": self.num_layers,
            **self._language_model_config(),
        }

    @classmethod
    def from_config(cls, config: dict) -> MusicTransformer:
        config = dict(config)
        config.pop("trainable", None)
        return cls(**config)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class _RelativeConfig(ZooConfig):
    """The fields both models share (their docstrings say what each does)."""

    # Widths, heads and layers.
    hidden_dim: int = 512
    intermediate_dim: int = 2048
    num_heads: int = 8
    num_layers: int = 6
    # The clipped relative positions (a zoo model's own hyperparameter), norms, dropout.
    max_distance: int = 16
    dropout: float = 0.1
    normalize_first: bool = True
    layer_norm_epsilon: float = 1e-6
    # The position scheme where it is not the paper's (keras_posenc/zoo/transplant.py).
    position: Any = None
    rotary: Any = None
    # Keras' remat of every block in training (less memory, more time).
    remat: bool = False
    # The special ids and the model.
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        hidden = check_int(who, "hidden_dim", self.hidden_dim, 1)
        _check_width(who, hidden, check_int(who, "num_heads", self.num_heads, 1))
        check_int(who, "max_distance", self.max_distance, 1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShawTransformerConfig(_RelativeConfig):
    """A named :class:`ShawTransformer`: its arguments, with its defaults."""

    vocabulary_size: int = WMT_VOCABULARY
    intermediate_dim: int = 1024
    num_decoder_layers: int | None = None
    max_source_length: int | None = None
    max_target_length: int | None = None
    relative: str | None = "keys_values"


@dataclasses.dataclass(frozen=True, kw_only=True)
class MusicTransformerConfig(_RelativeConfig):
    """A named :class:`MusicTransformer`: its arguments, with its defaults."""

    num_events: int = 388
    max_distance: int = 2048
    relative: str | None = "keys"


#: The registered Shaw et al. Transformers: zoo name -> :class:`ShawTransformerConfig`.
SHAW_CONFIGS: dict[str, ShawTransformerConfig] = by_name([
    ShawTransformerConfig(zoo_name="shaw_transformer_base", name="shaw_transformer_base",
                          hidden_dim=512, intermediate_dim=1024, num_heads=8, num_layers=6,
                          max_distance=16, dropout=0.1, vocabulary_size=WMT_VOCABULARY),
    ShawTransformerConfig(zoo_name="shaw_transformer_big", name="shaw_transformer_big",
                          hidden_dim=1024, intermediate_dim=4096, num_heads=16, num_layers=6,
                          max_distance=8, dropout=0.3, vocabulary_size=WMT_VOCABULARY),
])  # fmt: skip
# Magenta's performance encoding: 388 events (128 note-on, 128 note-off, 100 time shifts,
# 32 velocities) after 2 reserved ids (padding 0, end of sequence 1).
#: The registered Music Transformers: zoo name -> :class:`MusicTransformerConfig`.
MUSIC_CONFIGS: dict[str, MusicTransformerConfig] = by_name([
    # Magenta's score2perf_transformer_base: tensor2tensor's transformer_base sizes, trained
    # on 2048-event windows with relative attention (dot_product_relative_v2).
    MusicTransformerConfig(zoo_name="music_transformer_base", name="music_transformer_base",
                           num_events=388, hidden_dim=512, intermediate_dim=2048, num_heads=8,
                           num_layers=6, max_distance=2048, dropout=0.1),
])  # fmt: skip

for _name, _config in SHAW_CONFIGS.items():
    register_model(
        _name,
        ShawTransformer,
        family="shaw_transformer",
        config=_config,
        description=(
            f"Shaw et al. relative Transformer {_config.num_layers}+{_config.num_layers} "
            f"layers, d {_config.hidden_dim}, FFN {_config.intermediate_dim}, "
            f"{_config.num_heads} heads, relative keys and values clipped at "
            f"{_config.max_distance}"
        ),
        reference=SHAW_REFERENCE,
    )
for _name, _config in MUSIC_CONFIGS.items():
    register_model(
        _name,
        MusicTransformer,
        family="music_transformer",
        config=_config,
        description=(
            f"Music Transformer, {_config.num_layers} layers, d {_config.hidden_dim}, "
            f"FFN {_config.intermediate_dim}, {_config.num_heads} heads, relative keys "
            f"(skew) up to {_config.max_distance}"
        ),
        reference=MUSIC_REFERENCE,
    )
