"""MUSE (Zhao et al. 2019): parallel multi-scale attention encoder-decoders and encoders.

Every block runs self-attention, convolutions of the attention's value
projection and a feed-forward network in parallel from the same input
(`keras_posenc.layers.MUSEEncoderLayer` / `MUSEDecoderLayer`, post-norm). The
models follow the official code (fairseq's ``TransformerCombineEncoder`` /
``Decoder``): tokens embedded with a ``N(0, C^-1/2)`` table scaled by
``sqrt(C)``, plus sinusoidal positions (fairseq's layout: ``[sin ; cos]``,
frequencies ``10000^(-i / (C/2 - 1))``), dropout, the block stack, no final
layer norm, and an output projection to the target vocabulary without bias
(a separate matrix, or the target embedding transposed when tied).

Registered configurations (parameters: ours, trainable; the vocabulary sizes
are part of the configuration and can be overridden):

    name                layers  C    FFN   heads  vocabulary                        parameters
    muse_iwslt_de_en    12+12   384  768   4      8,848 src / 6,632 tgt, separate out   48,186,096
    muse_wmt_large      12+12   768  3072  16     32,768 shared by src, tgt and out    243,057,456
    muse_small          6+6     256  1024  4      8,000 src / 8,000 tgt, separate out   18,202,488
    muse_tiny           3+3     64   128   4      1,000 src / 1,000 tgt, separate out   494,652
    muse_encoder_small  6       256  1024  4      32,000, 2 classes                     13,432,254
    muse_encoder_base   12      384  768   4      32,000, 2 classes                     28,588,154

All use the official dynamic convolutions with kernel sizes (3, 15) and the
learned gate (``--attn_dynamic_type 2 --attn_wide_kernels [3,15]
--dynamic_gate 1``). The IWSLT figure reproduces the paper's "about 48.2M":
with fairseq's IWSLT'14 De-En dictionaries (8,848 German and 6,632 English
types) and a decoder output matrix separate from the target embedding (the
official command shares nothing), the official layout has 48,193,584
parameters; ours differs by +1,728 (biases of the kernel predictors, which
fairseq's have not) and -9,216 (an ``encoder_attn_layer_norm`` per decoder
layer that the official forward pass never uses). The model card
``zoo/muse/README.md`` has the derivation.

Differences from the official code, by design: masks are True for real
tokens; softmaxes run in float32 and an all-padding source gives zeros, not
NaN; positions count real tokens only, from 0 (fairseq starts at
``pad_id + 1``), so left- and right-padded sources give the same encoding;
fairseq's ``input_dropout`` (the attention branch's input, 0.1 for WMT) is not
modelled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._checks import check_bool, check_int, check_rate
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers.muse import MUSEDecoderLayer, MUSEEncoderLayer
from keras_posenc.zoo.adapt import ZooFunctional
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel

__all__ = ["MUSE", "MUSEEmbedding", "build_muse_encoder", "sinusoidal_positions"]

REFERENCE = (
    "Zhao et al. 2019, MUSE: Parallel Multi-Scale Attention for Sequence to Sequence "
    "Learning (arXiv:1911.09483); official code lancopku/MUSE"
)
TASKS = ("classification", "tagging")

PAPER_PARAMETERS = {"muse_iwslt_de_en": 48_200_000}


# --------------------------------------------------------------------------- validation


def _check_width(owner: str, hidden_dim: int, num_heads: int) -> None:
    if hidden_dim % num_heads:
        raise ValueError(
            f"{owner}: `hidden_dim` must be a multiple of `num_heads` (head size = "
            f"hidden_dim / num_heads), got hidden_dim={hidden_dim}, num_heads={num_heads}."
        )


# --------------------------------------------------------------------------- embedding


def sinusoidal_positions(positions: Any, dim: int) -> Any:
    """Sinusoidal position encodings as in fairseq (and tensor2tensor), in float32.

    ``[sin(p * w_0) .. sin(p * w_{h-1}) ; cos(p * w_0) .. cos(p * w_{h-1})]``
    with ``h = dim // 2`` and ``w_i = 10000 ** (-i / (h - 1))``; an odd
    ``dim`` gets a zero last channel.

    Args:
        positions: integer positions of any shape (a tensor or array).
        dim: the encoding width (at least 2).

    Returns:
        float32, ``positions.shape + (dim,)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.muse import sinusoidal_positions
        >>> from keras import ops
        >>> table = ops.convert_to_numpy(sinusoidal_positions(np.arange(3), 4))
        >>> np.round(table.astype("float64"), 4).tolist()
        [[0.0, 0.0, 1.0, 1.0], [0.8415, 0.0001, 0.5403, 1.0], [0.9093, 0.0002, -0.4161, 1.0]]
    """
    half = dim // 2
    step = math.log(10000.0) / max(half - 1, 1)
    frequencies = ops.exp(ops.arange(half, dtype="float32") * -step)
    angles = ops.expand_dims(ops.cast(positions, "float32"), -1) * frequencies
    encoding = ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
    if dim % 2:
        encoding = ops.pad(encoding, [(0, 0)] * (len(encoding.shape) - 1) + [(0, 1)])
    return encoding


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSEEmbedding(keras.layers.Layer):
    """Scaled token embedding plus sinusoidal positions; reversed, the output projection.

    ``dropout(sqrt(C) * E[ids] + PE(p))``, ``E`` initialised ``N(0, C^-1/2)``
    (fairseq's), ``PE`` :func:`sinusoidal_positions`, ``p`` the number of real
    (non-``pad_id``) tokens before each token, so left and right padding give
    the same encoding. Padded positions get zeros and the output carries the
    Keras mask ``ids != pad_id``.

    Called with ``reverse=True`` on hidden states ``(batch, time, C)`` it
    returns float32 logits ``h W`` over the vocabulary (no bias): ``W = E^T``
    with ``tie_weights=True``, else a separate ``(C, vocab)`` matrix (the
    official IWSLT model's ``embed_out``), as ``keras.layers.ReversibleEmbedding``.

    Args:
        vocab_size: rows of the table.
        embed_dim: embedding width ``C``.
        pad_id: the padding id.
        dropout: dropout rate on the sum.
        tie_weights: whether the reverse projection is the transposed table.
        **kwargs: standard layer arguments.

    Call arguments:
        inputs: ``(batch, time)`` int ids, or with ``reverse=True`` hidden
            states ``(batch, time, embed_dim)``.
        position_offset: None (positions counted from the real tokens), or a
            scalar int: the position of ``inputs[:, 0]`` when decoding step by
            step.
        reverse: project hidden states to logits instead.
        training: whether dropout is active.

    Returns:
        ``(batch, time, embed_dim)``, or float32 ``(batch, time, vocab_size)``
        with ``reverse=True``.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.zoo.muse import MUSEEmbedding
        >>> embedding = MUSEEmbedding(10, 4)
        >>> left = ops.convert_to_numpy(embedding(np.array([[0, 0, 5, 6]])))
        >>> right = ops.convert_to_numpy(embedding(np.array([[5, 6, 0, 0]])))
        >>> bool(np.allclose(left[0, 2:], right[0, :2]))
        True
        >>> tuple(embedding(right, reverse=True).shape)
        (1, 4, 10)

    Reference:
        Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (section 3.5).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        pad_id: int = 0,
        dropout: float = 0.0,
        tie_weights: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.vocab_size = check_int(owner, "vocab_size", vocab_size, 1)
        self.embed_dim = check_int(owner, "embed_dim", embed_dim, 1)
        if self.embed_dim < 2:
            raise ValueError(f"{owner}: `embed_dim` must be at least 2, got {embed_dim}.")
        self.pad_id = check_int(owner, "pad_id", pad_id, 0)
        self.dropout = check_rate(owner, "dropout", dropout)
        self.tie_weights = check_bool(owner, "tie_weights", tie_weights)
        check_allocation(owner, "token embedding", [(self.vocab_size, self.embed_dim)])
        self.token_embedding = keras.layers.ReversibleEmbedding(
            self.vocab_size,
            self.embed_dim,
            tie_weights=self.tie_weights,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=self.embed_dim**-0.5),
            reverse_dtype="float32",
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.supports_masking = True

    def build(self, input_shape: Any) -> None:
        self.token_embedding.build((None, None))
        self.built = True

    def call(
        self,
        inputs: Any,
        position_offset: Any = None,
        reverse: bool = False,
        training: Any = None,
    ) -> Any:
        if reverse:
            # A fresh tensor: the inner embedding does not take masks (this
            # layer passes the hidden states' mask on to the logits itself).
            return self.token_embedding(ops.add(inputs, ops.zeros((), inputs.dtype)), reverse=True)
        ids = ops.cast(inputs, "int32")
        real = ops.not_equal(ids, self.pad_id)
        x = self.token_embedding(ids) * ops.cast(math.sqrt(self.embed_dim), self.compute_dtype)
        if position_offset is None:
            positions = ops.maximum(ops.cumsum(ops.cast(real, "int32"), axis=1) - 1, 0)
        else:
            length = ops.shape(ids)[1]
            positions = ops.cast(position_offset, "int32") + ops.arange(length, dtype="int32")
            positions = ops.broadcast_to(positions[None, :], ops.shape(ids))
        x = x + ops.cast(sinusoidal_positions(positions, self.embed_dim), x.dtype)
        # expand_dims, not x[..., None]: LiteRT has no builtin for a slice adding an axis.
        x = x * ops.expand_dims(ops.cast(real, x.dtype), -1)
        return self.dropout_layer(x, training=training)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """``ids != pad_id`` for token ids; the logits keep the hidden states' mask."""
        if "int" not in keras.backend.standardize_dtype(inputs.dtype):
            return mask
        return ops.not_equal(inputs, self.pad_id)

    def compute_output_shape(self, input_shape: Any, reverse: bool = False) -> tuple:
        if reverse:
            return tuple(input_shape[:-1]) + (self.vocab_size,)
        return tuple(input_shape) + (self.embed_dim,)

    def compute_output_spec(
        self,
        inputs: Any,
        position_offset: Any = None,
        reverse: bool = False,
        training: Any = None,
    ) -> Any:
        shape = self.compute_output_shape(inputs.shape, reverse)
        return keras.KerasTensor(shape, dtype="float32" if reverse else self.compute_dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embed_dim=self.embed_dim,
            pad_id=self.pad_id,
            dropout=self.dropout,
            tie_weights=self.tie_weights,
        )
        return config


# --------------------------------------------------------------------------- models


def _block_arguments(
    owner: str,
    hidden_dim: Any,
    intermediate_dim: Any,
    num_heads: Any,
    conv: Any,
    kernel_sizes: Any,
    dropout: Any,
    attention_dropout: Any,
    activation_dropout: Any,
    weight_dropout: Any,
    fused_attention: Any,
    remat: Any,
) -> dict:
    """The blocks' keyword arguments, validated once (errors name ``owner``)."""
    hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
    num_heads = check_int(owner, "num_heads", num_heads, 1)
    _check_width(owner, hidden_dim, num_heads)
    arguments = dict(
        intermediate_dim=intermediate_dim,
        num_heads=num_heads,
        conv=conv,
        kernel_sizes=kernel_sizes,
        dropout=dropout,
        attention_dropout=attention_dropout,
        activation_dropout=activation_dropout,
        weight_dropout=weight_dropout,
        fused_attention=fused_attention,
        remat=remat,
    )
    try:
        probe = MUSEEncoderLayer(**arguments)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{owner}: {error}") from error
    # The validated values (tuples, floats, bools), as the config reports them.
    for key in arguments:
        arguments[key] = getattr(probe, key)
    return arguments


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSE(Seq2SeqModel):
    """The MUSE encoder-decoder (the official ``TransformerCombine`` model).

    A functional model: ``model({"encoder_token_ids": source,
    "decoder_token_ids": target_in})`` returns float32 logits ``(batch,
    target_time, tgt_vocab_size)``; ``target_in`` is the target shifted right
    (``bos_id`` first). It implements the decoding contract of
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`: ``encode`` gives
    ``(encoder_output, source_mask, cross_0, ..)``, with every decoder
    layer's projected keys/values of the encoder output ``(batch, 2,
    source_time, heads, head_dim)``, computed once; the cache is that state
    followed by one zero buffer per decoder layer for its self-attention
    keys/values, ``(batch, 2, max_length, heads, head_dim)`` (its
    convolutions read their history from the cached values). ``generate``
    runs greedy or beam search.

    Args:
        src_vocab_size: source vocabulary size (ids ``0 .. src_vocab_size - 1``).
        tgt_vocab_size: target vocabulary size.
        hidden_dim: model width ``C`` (a multiple of ``num_heads``).
        intermediate_dim: feed-forward width.
        num_heads: attention heads (also the heads sharing a dynamic kernel).
        num_encoder_layers: encoder blocks.
        num_decoder_layers: decoder blocks.
        conv: ``"dynamic"`` (the official code) or ``"static"``.
        kernel_sizes: convolution kernel sizes, ``(3, 15)`` officially (None: the layers').
        dropout: dropout on the embeddings and on every branch's output.
        attention_dropout: dropout on attention probabilities.
        activation_dropout: dropout after the feed-forward activation.
        weight_dropout: dropout on the dynamic kernels' taps (0.1 officially).
        fused_attention: ``"auto"`` (default), ``True`` or ``False``: attention
            through ``keras.ops.dot_product_attention`` when it can (float32, no
            active attention dropout); ``"auto"`` where it pays (PyTorch without
            gradients); see `MUSEAttention`.
        remat: Keras' remat of every block in training (less memory, more time).
        share_embeddings: one table for source tokens, target tokens and the
            output projection (fairseq's ``--share-all-embeddings``; needs equal
            vocabulary sizes).
        tie_output_embedding: the output projection is the transposed target
            embedding (``--share-decoder-input-output-embed``); ``None``:
            the same as ``share_embeddings``.
        max_source_positions: the longest source accepted (the sinusoids
            have no table; this is the checked limit, as fairseq's), or None.
        max_target_positions: the longest target (``bos`` included), or None.
        pad_id: padding id (source mask: ``ids != pad_id``).
        bos_id: the id every target starts with.
        eos_id: the id that ends a target.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.muse import MUSE
        >>> model = MUSE(20, 22, hidden_dim=8, intermediate_dim=16, num_heads=2,
        ...              num_encoder_layers=1, num_decoder_layers=1, kernel_sizes=(3, 5))
        >>> source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
        >>> target_in = np.array([[1, 4, 5], [1, 6, 0]])
        >>> tuple(model({"encoder_token_ids": source, "decoder_token_ids": target_in}).shape)
        (2, 3, 22)
        >>> model.generate(source, max_length=5).shape
        (2, 5)

    Reference:
        Zhao, Sun, Xu, Zhang, Luo, "MUSE: Parallel Multi-Scale Attention for
        Sequence to Sequence Learning", arXiv:1911.09483, 2019.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        hidden_dim: int = 384,
        intermediate_dim: int = 768,
        num_heads: int = 4,
        num_encoder_layers: int = 12,
        num_decoder_layers: int = 12,
        conv: str = "dynamic",
        kernel_sizes: Sequence[int] | None = (3, 15),
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        weight_dropout: float = 0.1,
        fused_attention: bool | str = "auto",
        remat: bool = False,
        share_embeddings: bool = False,
        tie_output_embedding: bool | None = None,
        max_source_positions: int | None = 1024,
        max_target_positions: int | None = 1024,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        self._blocks_config = _block_arguments(
            owner,
            hidden_dim,
            intermediate_dim,
            num_heads,
            conv,
            kernel_sizes,
            dropout,
            attention_dropout,
            activation_dropout,
            weight_dropout,
            fused_attention,
            remat,
        )
        self.hidden_dim = int(hidden_dim)
        self.num_encoder_layers = check_int(owner, "num_encoder_layers", num_encoder_layers, 1)
        self.num_decoder_layers = check_int(owner, "num_decoder_layers", num_decoder_layers, 1)
        self.share_embeddings = check_bool(owner, "share_embeddings", share_embeddings)
        if tie_output_embedding is None:
            tie_output_embedding = self.share_embeddings
        self.tie_output_embedding = check_bool(owner, "tie_output_embedding", tie_output_embedding)
        if self.share_embeddings and not self.tie_output_embedding:
            raise ValueError(
                f"{owner}: share_embeddings=True uses one table for the source, the target and "
                "the output projection, so `tie_output_embedding` must be True or None, got False."
            )
        if self.share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                f"{owner}: share_embeddings=True needs one vocabulary, got src_vocab_size="
                f"{src_vocab_size!r} and tgt_vocab_size={tgt_vocab_size!r}."
            )
        # Checked before the layers are created from them (Seq2SeqModel checks them again).
        ids = self.check_seq2seq_arguments(
            src_vocab_size,
            tgt_vocab_size,
            pad_id,
            bos_id,
            eos_id,
            max_source_positions,
            max_target_positions,
        )
        policy = keras.dtype_policies.get(kwargs.get("dtype") or keras.config.dtype_policy())
        blocks = {**self._blocks_config, "dtype": policy}
        self.target_embedding = MUSEEmbedding(
            ids["target_vocab_size"],
            self.hidden_dim,
            pad_id=ids["pad_id"],
            dropout=self._blocks_config["dropout"],
            tie_weights=self.tie_output_embedding,
            dtype=policy,
            name="target_embedding" if not self.share_embeddings else "embedding",
        )
        if self.share_embeddings:
            self.source_embedding = self.target_embedding
        else:
            self.source_embedding = MUSEEmbedding(
                ids["source_vocab_size"],
                self.hidden_dim,
                pad_id=ids["pad_id"],
                dropout=self._blocks_config["dropout"],
                dtype=policy,
                name="source_embedding",
            )
        self.encoder_blocks = [
            MUSEEncoderLayer(**blocks, name=f"encoder_layer_{i}")
            for i in range(self.num_encoder_layers)
        ]
        self.decoder_blocks = [
            MUSEDecoderLayer(**blocks, name=f"decoder_layer_{i}")
            for i in range(self.num_decoder_layers)
        ]
        # Built before the graph: `encode` computes their cross-attention caches.
        for block in self.decoder_blocks:
            block.build((None, None, self.hidden_dim), (None, None, self.hidden_dim))
        super().__init__(**ids, **kwargs)

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self._blocks_config["num_heads"]

    # ------------------------------------------------------------------ contract

    def encode(self, encoder_token_ids: Any, training: Any = None) -> tuple:
        """``(encoder_output, source_mask, cross_0, .., cross_{n-1})``: the encoder state.

        ``encoder_output`` is ``(batch, source_time, C)``, ``source_mask`` True
        for real tokens, and ``cross_i`` the ``i``-th decoder layer's projected
        keys and values of the encoder output, ``(batch, 2, source_time,
        heads, head_dim)``: computed once per source, so decoding steps do not
        project the encoder output again. (In the teacher-forced functional
        graph nothing reads them, and Keras leaves them out.)
        """
        ids = ops.cast(encoder_token_ids, "int32")
        mask = ops.not_equal(ids, self.pad_id)
        x = self.source_embedding(ids, training=training)
        for block in self.encoder_blocks:
            x = block(x, padding_mask=mask, training=training)
        crosses = [block.cross_attention_cache(x) for block in self.decoder_blocks]
        return (x, mask, *crosses)

    def decode(self, decoder_token_ids: Any, encoder_state: tuple, training: Any = None) -> Any:
        """Teacher-forced float32 logits; target positions are 0, 1, .. (no left padding).

        The decoder blocks get no padding mask: they are causal, so a real
        position never sees the padding after it, and without one ``decode``
        equals ``decode_step`` at every position. The logits carry the Keras
        mask ``decoder_token_ids != pad_id``, so Keras losses skip padded
        target positions.
        """
        output, mask = encoder_state[:2]
        ids = ops.cast(decoder_token_ids, "int32")
        x = self.target_embedding(ids, position_offset=0, training=training)
        every_position = ops.ones_like(ids, dtype="bool")
        for block in self.decoder_blocks:
            x = block(
                x,
                output,
                decoder_padding_mask=every_position,
                encoder_padding_mask=mask,
                training=training,
            )
        return self.target_embedding(x, reverse=True)

    def encoder_state_names(self) -> tuple[str, ...]:
        """``encoder_output``, ``source_mask``, then ``cache_decoder_layer_<i>_cross_attention``
        (decoder layer ``i``'s keys and values of the encoder output), as :meth:`encode`
        returns them."""
        crosses = (f"cache_{block.name}_cross_attention" for block in self.decoder_blocks)
        return ("encoder_output", "source_mask", *crosses)

    def cache_names(self) -> tuple[str, ...]:
        """The encoder state's names, then ``cache_decoder_layer_<i>_self_attention``
        (decoder layer ``i``'s keys and values of the target so far)."""
        buffers = (f"cache_{block.name}_self_attention" for block in self.decoder_blocks)
        return (*self.encoder_state_names(), *buffers)

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        """The encoder state, then one zero self-attention buffer per decoder layer."""
        batch = ops.shape(encoder_state[0])[0]
        shape = (batch, 2, max_length, self._blocks_config["num_heads"], self.head_dim)
        buffers = [ops.zeros(shape, dtype=self.compute_dtype) for _ in self.decoder_blocks]
        return (*encoder_state, *buffers)

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        layers = len(self.decoder_blocks)
        output, mask, *rest = cache
        crosses, buffers = rest[:layers], rest[layers:]
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        x = self.target_embedding(ids, position_offset=index)
        new_buffers = []
        for block, cross, buffer in zip(self.decoder_blocks, crosses, buffers, strict=True):
            x, (buffer, _) = block(
                x, encoder_padding_mask=mask, cache=(buffer, cross), cache_update_index=index
            )
            new_buffers.append(buffer)
        logits = self.target_embedding(x, reverse=True)
        return logits[:, 0], (output, mask, *crosses, *new_buffers)

    def get_config(self) -> dict:
        blocks = self._blocks_config
        return {
            **super().get_config(),
            "src_vocab_size": self.source_vocab_size,
            "tgt_vocab_size": self.target_vocab_size,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": blocks["intermediate_dim"],
            "num_heads": blocks["num_heads"],
            "num_encoder_layers": self.num_encoder_layers,
            "num_decoder_layers": self.num_decoder_layers,
            "conv": blocks["conv"],
            "kernel_sizes": list(blocks["kernel_sizes"]),
            "dropout": blocks["dropout"],
            "attention_dropout": blocks["attention_dropout"],
            "activation_dropout": blocks["activation_dropout"],
            "weight_dropout": blocks["weight_dropout"],
            "fused_attention": blocks["fused_attention"],
            "remat": blocks["remat"],
            "share_embeddings": self.share_embeddings,
            "tie_output_embedding": self.tie_output_embedding,
            "max_source_positions": self.max_source_length,
            "max_target_positions": self.max_target_length,
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }


def build_muse_encoder(
    vocab_size: int = 32000,
    num_classes: int = 2,
    task: str = "classification",
    hidden_dim: int = 256,
    intermediate_dim: int = 1024,
    num_heads: int = 4,
    num_layers: int = 6,
    conv: str = "dynamic",
    kernel_sizes: Sequence[int] | None = (3, 15),
    dropout: float = 0.1,
    attention_dropout: float = 0.0,
    activation_dropout: float = 0.0,
    weight_dropout: float = 0.1,
    fused_attention: bool | str = "auto",
    remat: bool = False,
    pad_id: int = 0,
    name: str = "muse_encoder",
) -> keras.Model:
    """A MUSE encoder with a classification or tagging head, as a functional model.

    ``token_ids (batch, time)`` (``pad_id`` for padding) -> :class:`MUSEEmbedding`
    -> ``num_layers`` `MUSEEncoderLayer` blocks -> for ``task="classification"``
    the mean over real tokens, dropout and ``Dense(num_classes)``: logits
    ``(batch, num_classes)``; for ``task="tagging"`` dropout and
    ``Dense(num_classes)`` at every position: ``(batch, time, num_classes)``
    (carrying the padding mask). Logits are float32.

    Args:
        vocab_size: number of token ids.
        num_classes: classes (or tags).
        task: ``"classification"`` or ``"tagging"``.
        hidden_dim: width ``C`` (a multiple of ``num_heads``).
        intermediate_dim: feed-forward width.
        num_heads: attention heads.
        num_layers: encoder blocks.
        conv: ``"dynamic"`` or ``"static"`` convolutions.
        kernel_sizes: convolution kernel sizes (``None``: the layer's defaults).
        dropout: dropout on embeddings, branch outputs and before the head.
        attention_dropout: dropout on attention probabilities.
        activation_dropout: dropout after the feed-forward activation.
        weight_dropout: dropout on the dynamic kernels' taps.
        fused_attention: ``"auto"`` (default), ``True`` or ``False``; see
            `MUSEAttention`.
        remat: Keras' remat of every block in training (less memory, more time).
        pad_id: padding id.
        name: the model's name.

    Returns:
        The ``keras.Model``.

    Raises:
        ValueError: for an unknown task, a width not divisible by the heads or
            other bad arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.muse import build_muse_encoder
        >>> model = build_muse_encoder(vocab_size=50, num_classes=3, hidden_dim=8,
        ...                            intermediate_dim=16, num_heads=2, num_layers=1)
        >>> tuple(model(np.array([[4, 5, 6, 0], [7, 8, 0, 0]])).shape)
        (2, 3)
        >>> tagger = build_muse_encoder(vocab_size=50, num_classes=5, task="tagging",
        ...                             hidden_dim=8, intermediate_dim=16, num_heads=2,
        ...                             num_layers=1)
        >>> tuple(tagger(np.array([[4, 5, 6, 0]])).shape)
        (1, 4, 5)
    """
    owner = "build_muse_encoder"
    if task not in TASKS:
        raise ValueError(f"{owner}: `task` must be one of {TASKS}, got {task!r}.")
    blocks = _block_arguments(
        owner,
        hidden_dim,
        intermediate_dim,
        num_heads,
        conv,
        kernel_sizes,
        dropout,
        attention_dropout,
        activation_dropout,
        weight_dropout,
        fused_attention,
        remat,
    )
    vocab_size = check_int(owner, "vocab_size", vocab_size, 1)
    num_classes = check_int(owner, "num_classes", num_classes, 1)
    num_layers = check_int(owner, "num_layers", num_layers, 1)
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    # The embedding attaches the mask ids != pad_id; the blocks, the pooling
    # and the tagging head read it.
    x = MUSEEmbedding(vocab_size, hidden_dim, pad_id, dropout, name="embedding")(token_ids)
    for index in range(num_layers):
        x = MUSEEncoderLayer(**blocks, name=f"encoder_layer_{index}")(x)
    if task == "classification":
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
    x = keras.layers.Dropout(dropout, name="head_dropout")(x)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(x)
    return ZooFunctional(token_ids, logits, name=name)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Blocks(ZooConfig):
    """The block fields both MUSE configurations share (what :class:`MUSE` and
    :func:`build_muse_encoder` say of each), with the encoder's defaults."""

    # Widths and heads.
    hidden_dim: int = 256
    intermediate_dim: int = 1024
    num_heads: int = 4
    # The convolutions of the value projection.
    conv: str = "dynamic"
    kernel_sizes: tuple[int, ...] | None = (3, 15)
    # Regularisation and the attention kernel.
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    weight_dropout: float = 0.1
    fused_attention: bool | str = "auto"
    remat: bool = False
    pad_id: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        hidden = check_int(who, "hidden_dim", self.hidden_dim, 1)
        _check_width(who, hidden, check_int(who, "num_heads", self.num_heads, 1))


@dataclasses.dataclass(frozen=True, kw_only=True)
class MUSEConfig(_Blocks):
    """A named MUSE encoder-decoder: :class:`MUSE`'s arguments, with its defaults."""

    # The vocabularies and the special ids.
    src_vocab_size: int
    tgt_vocab_size: int
    share_embeddings: bool = False
    tie_output_embedding: bool | None = None
    bos_id: int = 1
    eos_id: int = 2
    # Layers and position tables (the MUSE class's defaults).
    hidden_dim: int = 384
    intermediate_dim: int = 768
    num_encoder_layers: int = 12
    num_decoder_layers: int = 12
    max_source_positions: int | None = 1024
    max_target_positions: int | None = 1024
    name: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class MUSEEncoderConfig(_Blocks):
    """A named MUSE encoder: :func:`build_muse_encoder`'s arguments, with its defaults."""

    # The vocabulary, the task and its classes, the layers.
    vocab_size: int = 32000
    num_classes: int = 2
    task: str = "classification"
    num_layers: int = 6
    name: str = "muse_encoder"


#: Every registered MUSE: zoo name -> :class:`MUSEConfig` or :class:`MUSEEncoderConfig`.
CONFIGS: dict[str, MUSEConfig | MUSEEncoderConfig] = by_name([
    MUSEConfig(zoo_name="muse_iwslt_de_en", name="muse_iwslt_de_en",
               src_vocab_size=8848, tgt_vocab_size=6632, hidden_dim=384, intermediate_dim=768,
               num_heads=4, num_encoder_layers=12, num_decoder_layers=12, dropout=0.4),
    MUSEConfig(zoo_name="muse_wmt_large", name="muse_wmt_large",
               src_vocab_size=32768, tgt_vocab_size=32768, hidden_dim=768,
               intermediate_dim=3072, num_heads=16, num_encoder_layers=12,
               num_decoder_layers=12, dropout=0.3, attention_dropout=0.1,
               share_embeddings=True),
    MUSEConfig(zoo_name="muse_small", name="muse_small",
               src_vocab_size=8000, tgt_vocab_size=8000, hidden_dim=256, intermediate_dim=1024,
               num_heads=4, num_encoder_layers=6, num_decoder_layers=6, dropout=0.3),
    # For experiments on CPU (the training example: reversing sequences).
    MUSEConfig(zoo_name="muse_tiny", name="muse_tiny",
               src_vocab_size=1000, tgt_vocab_size=1000, hidden_dim=64, intermediate_dim=128,
               num_heads=4, num_encoder_layers=3, num_decoder_layers=3, dropout=0.1,
               max_source_positions=256, max_target_positions=256),
    MUSEEncoderConfig(zoo_name="muse_encoder_small", name="muse_encoder_small",
                      hidden_dim=256, intermediate_dim=1024, num_heads=4, num_layers=6),
    MUSEEncoderConfig(zoo_name="muse_encoder_base", name="muse_encoder_base",
                      hidden_dim=384, intermediate_dim=768, num_heads=4, num_layers=12),
])  # fmt: skip


for _name, _config in CONFIGS.items():
    _encoder = isinstance(_config, MUSEEncoderConfig)
    register_model(
        _name,
        build_muse_encoder if _encoder else MUSE,
        family="muse",
        config=_config,
        description=(
            f"MUSE encoder, {_config.num_layers} layers, d {_config.hidden_dim}, "
            "classification or tagging head"
            if _encoder
            else f"MUSE {_config.num_encoder_layers}+{_config.num_decoder_layers} layers, "
            f"d {_config.hidden_dim}, FFN {_config.intermediate_dim}, "
            f"{_config.num_heads} heads, dynamic convs (3, 15)"
        ),
        paper_parameters=PAPER_PARAMETERS.get(_name),
        reference=REFERENCE,
    )
