"""ConvS2S (Gehring et al. 2017) as in fairseq's ``fconv``: encoder, decoder, seq2seq and LM.

The encoder embeds tokens plus learned absolute positions, projects them to the
first layer's width and runs a stack of GLU convolutions with residual
connections; its output is a pair (keys, values) = (z, (z + e) * sqrt(0.5)).
The decoder runs causal GLU convolutions, each followed by the ConvS2S
attention over the encoder output, and projects to the vocabulary. Every
residual sum is scaled by sqrt(0.5). Exact formulas, initialisation and the
named configurations: the model card ``zoo/convs2s/README.md``.

Layer specs are tuples ``(channels, kernel_size)`` or ``(channels,
kernel_size, residual)``; ``residual`` is how many layers back the residual
comes from (1, the default: the previous layer; 0: none) and is projected by
a Dense layer when the widths differ, as in fairseq.

Registered configurations (``src_vocab_size`` / ``tgt_vocab_size`` are
required arguments of ``zoo.create``; ``vocab_size`` for the LM):

    name                 embed  encoder                                        decoder    out
    convs2s_small        64     [(64, 3)] * 4 (256 positions)                  same       64
    convs2s_iwslt_de_en  256    [(256, 3)] * 4                                 [(256, 3)] * 3  256
    convs2s_wmt_en_ro    512    [(512, 3)] * 20                                same       512
    convs2s_wmt_en_de    768    [(512, 3)] * 9 + [(1024, 3)] * 4 + [(2048, 1)] * 2   same  512
    convs2s_wmt_en_fr    768    [(512, 3)] * 6 + [(768, 3)] * 4 + [(1024, 3)] * 3
                                + [(2048, 1)] + [(4096, 1)]                    same       512
    convs2s_lm           128    (no encoder) decoder [(1268, 4)] * 13, no attention, no positions

Differences from fairseq, by design: masks are True for real tokens; the
attention's softmax runs in float32 and an all-padding source gives zeros,
not NaN; weight normalisation (``weight_norm=True``, the default) applies to
the convolutions but not to the Dense projections (it reparametrises, it does
not change what a layer computes); the position table has
``max_source_positions`` / ``max_target_positions`` rows and no reserved
padding row (padded positions get a zero embedding).

The parts (layer specs, embeddings, the convolution stack) are in
keras_posenc/zoo/convs2s_layers.py, the named configurations in
keras_posenc/zoo/convs2s_config.py; this module has the models, their builders and the
registration, and re-exports the public names of both.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import keras
from keras import ops

from keras_posenc.layers._checks import check_bool, check_int, check_rate
from keras_posenc.layers.convs2s import GradMultiply, folded_weight_norm
from keras_posenc.zoo.convs2s_config import CONFIGS, ConvS2SConfig, ConvS2SLMConfig
from keras_posenc.zoo.convs2s_layers import (
    _SQRT_HALF,
    ConvS2SEmbedding,
    PositionEmbedding,
    _ConvStack,
    _normal,
    parse_layer_specs,
)
from keras_posenc.zoo.language_model import LanguageModel
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel

# In the order of the API page (docs/api/zoo.md sorts by it): the layers, the models,
# the configurations, the functions.
__all__ = [
    "PositionEmbedding",
    "ConvS2SEmbedding",
    "ConvS2S",
    "ConvS2SLanguageModel",
    "ConvS2SConfig",
    "ConvS2SLMConfig",
    "parse_layer_specs",
    "build_convs2s",
    "build_convs2s_lm",
    "CONFIGS",
]

REFERENCE = (
    "Gehring et al. 2017, Convolutional Sequence to Sequence Learning (arXiv:1705.03122); "
    "fairseq fconv"
)


def _policy(kwargs: dict) -> Any:
    """The dtype policy the model's layers use: the ``dtype`` argument, else the global one."""
    dtype = kwargs.get("dtype")
    return keras.config.dtype_policy() if dtype is None else keras.dtype_policies.get(dtype)


# --------------------------------------------------------------------------- models


class _FoldedWeightNormSteps:
    """``step_constants`` / ``step_scope`` of a model whose decoding step runs
    weight-normalised convolutions (``_step_convolutions()``): the effective kernel
    ``g * v / ||v||`` of each is computed once per search, not once per step (see
    ``folded_weight_norm`` and docs/development.md, "Compiled decoding")."""

    def _step_convolutions(self) -> list:
        raise NotImplementedError

    def _folded_convolutions(self) -> list:
        return [conv for conv in self._step_convolutions() if conv.weight_norm]

    def step_constants(self) -> tuple:
        """The effective kernel ``g * v / ||v||`` of each weight-normalised convolution
        the decoding step runs, computed once per search."""
        return tuple(conv.kernel for conv in self._folded_convolutions())

    @contextlib.contextmanager
    def step_scope(self, constants: tuple) -> Iterator[None]:
        """Within the block, the convolutions use the kernels of :meth:`step_constants`."""
        with folded_weight_norm(self._folded_convolutions(), constants):
            yield


def _check_vocab(owner: str, name: str, value: Any) -> int:
    # At least the pad, bos and eos ids plus one word.
    return check_int(owner, name, value, 3)


@keras.saving.register_keras_serializable(package="keras_posenc")
class ConvS2S(_FoldedWeightNormSteps, Seq2SeqModel):
    """The ConvS2S encoder-decoder (fairseq's ``FConvModel``).

    A functional model: ``model({"encoder_token_ids": source,
    "decoder_token_ids": target_in})`` returns float32 logits ``(batch,
    target_time, tgt_vocab_size)``; ``target_in`` is the target shifted right
    (``bos_id`` first). It implements the decoding contract of
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`: ``encode`` gives
    ``(keys, values, source_mask)``; the cache is that state plus one buffer of
    the last ``kernel_size`` inputs per decoder convolution, so a step's cost
    does not grow with the prefix. ``generate`` runs greedy or beam search.

    Args:
        src_vocab_size: source vocabulary size (ids ``0 .. src_vocab_size - 1``).
        tgt_vocab_size: target vocabulary size.
        embed_dim: width of the embeddings and of the attention.
        encoder_layers: encoder layer specs ``(channels, kernel_size[, residual])``.
        decoder_layers: decoder layer specs; every decoder layer attends.
        decoder_out_embed_dim: width between the last decoder layer and the
            output projection (fairseq's ``fc2``).
        max_source_positions: rows of the source position table (the longest source).
        max_target_positions: rows of the target position table.
        dropout: dropout rate (embeddings, convolution inputs, before the
            output projection); also enters the reference initialisation.
        weight_norm: weight-normalise the convolutions (fairseq's default).
        pad_id: padding id (source mask: ``ids != pad_id``).
        bos_id: the id every target starts with.
        eos_id: the id that ends a target.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.convs2s import ConvS2S
        >>> model = ConvS2S(20, 22, embed_dim=16, encoder_layers=[(16, 3)] * 2,
        ...                 decoder_layers=[(16, 3)] * 2, decoder_out_embed_dim=8)
        >>> source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]])
        >>> target_in = np.array([[1, 4, 5], [1, 6, 0]])
        >>> tuple(model({"encoder_token_ids": source, "decoder_token_ids": target_in}).shape)
        (2, 3, 22)
        >>> model.generate(source, max_length=5).shape
        (2, 5)

    Reference:
        Gehring, Auli, Grangier, Yarats, Dauphin, "Convolutional Sequence to
        Sequence Learning", ICML 2017.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 256,
        encoder_layers: Sequence = ((256, 3),) * 4,
        decoder_layers: Sequence = ((256, 3),) * 3,
        decoder_out_embed_dim: int = 256,
        max_source_positions: int = 1024,
        max_target_positions: int = 1024,
        dropout: float = 0.1,
        weight_norm: bool = True,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        src_vocab_size = _check_vocab(owner, "src_vocab_size", src_vocab_size)
        tgt_vocab_size = _check_vocab(owner, "tgt_vocab_size", tgt_vocab_size)
        self.embed_dim = check_int(owner, "embed_dim", embed_dim, 1)
        self.encoder_layers = parse_layer_specs(owner, "encoder_layers", encoder_layers)
        self.decoder_layers = parse_layer_specs(owner, "decoder_layers", decoder_layers)
        self.decoder_out_embed_dim = check_int(
            owner, "decoder_out_embed_dim", decoder_out_embed_dim, 1
        )
        self.max_source_positions = check_int(
            owner, "max_source_positions", max_source_positions, 1
        )
        self.max_target_positions = check_int(
            owner, "max_target_positions", max_target_positions, 1
        )
        self.dropout = check_rate(owner, "dropout", dropout)
        self.weight_norm = check_bool(owner, "weight_norm", weight_norm)
        checked = self.check_seq2seq_arguments(
            src_vocab_size,
            tgt_vocab_size,
            pad_id,
            bos_id,
            eos_id,
            self.max_source_positions,
            self.max_target_positions,
        )
        policy = _policy(kwargs)
        p, embed = self.dropout, self.embed_dim

        # Encoder.
        self.encoder_embedding = ConvS2SEmbedding(
            src_vocab_size, embed, self.max_source_positions, pad_id, p,
            dtype=policy, name="encoder_embedding",
        )  # fmt: skip
        self.encoder_fc1 = keras.layers.Dense(
            self.encoder_layers[0][0],
            kernel_initializer=_normal(math.sqrt((1 - p) / embed)),
            dtype=policy,
            name="encoder_fc1",
        )
        self.encoder_stack = _ConvStack(
            policy, "encoder", self.encoder_layers, False, p, weight_norm, None
        )
        self.encoder_fc2 = keras.layers.Dense(
            embed,
            kernel_initializer=_normal(math.sqrt(1.0 / self.encoder_stack.out_channels)),
            dtype=policy,
            name="encoder_fc2",
        )
        # The decoder's attention layers all read the encoder output: scale its
        # gradient so the encoder is not updated once per attention layer.
        self.encoder_grad_multiply = GradMultiply(
            1.0 / (2.0 * len(self.decoder_layers)), dtype=policy, name="encoder_grad_multiply"
        )
        # Decoder.
        self.decoder_embedding = ConvS2SEmbedding(
            tgt_vocab_size, embed, self.max_target_positions, pad_id, p,
            dtype=policy, name="decoder_embedding",
        )  # fmt: skip
        self.decoder_fc1 = keras.layers.Dense(
            self.decoder_layers[0][0],
            kernel_initializer=_normal(math.sqrt((1 - p) / embed)),
            dtype=policy,
            name="decoder_fc1",
        )
        self.decoder_stack = _ConvStack(
            policy, "decoder", self.decoder_layers, True, p, weight_norm, embed
        )
        self.decoder_fc2 = keras.layers.Dense(
            self.decoder_out_embed_dim,
            kernel_initializer=_normal(math.sqrt(1.0 / self.decoder_stack.out_channels)),
            dtype=policy,
            name="decoder_fc2",
        )
        self.decoder_dropout = keras.layers.Dropout(p, dtype=policy, name="decoder_dropout")
        self.decoder_fc3 = keras.layers.Dense(
            tgt_vocab_size,
            kernel_initializer=_normal(math.sqrt((1 - p) / self.decoder_out_embed_dim)),
            dtype=policy,
            name="decoder_fc3",
        )
        # Track the stacks' sublayers on the model, so their weights are saved.
        self.encoder_stack_layers = self.encoder_stack.layers()
        self.decoder_stack_layers = self.decoder_stack.layers()
        super().__init__(**checked, **kwargs)

    # ------------------------------------------------------------------ contract

    def encode(self, encoder_token_ids: Any, training: Any = None) -> tuple:
        """``(keys, values, source_mask)``: ``z`` and ``(z + e) * sqrt(0.5)``, mask True = real."""
        ids = ops.cast(encoder_token_ids, "int32")
        mask = ops.not_equal(ids, self.pad_id)
        e = self.encoder_embedding(ids, training=training)
        x = self.encoder_fc1(e)
        x, _ = self.encoder_stack.run(x, mask=mask, training=training)
        z = self.encoder_fc2(x) * ops.expand_dims(ops.cast(mask, x.dtype), -1)
        z = self.encoder_grad_multiply(z)
        values = (z + e) * _SQRT_HALF
        return z, values, mask

    def _decoder_head(self, x: Any, training: Any) -> Any:
        x = self.decoder_dropout(self.decoder_fc2(x), training=training)
        return ops.cast(self.decoder_fc3(x), "float32")

    def decode(self, decoder_token_ids: Any, encoder_state: tuple, training: Any = None) -> Any:
        keys, values, mask = encoder_state
        g = self.decoder_embedding(decoder_token_ids, training=training)
        x = self.decoder_fc1(g)
        x, _ = self.decoder_stack.run(
            x,
            training=training,
            target_embedding=g,
            encoder_out=(keys, values),
            encoder_mask=mask,
        )
        return self._decoder_head(x, training)

    def encoder_state_names(self) -> tuple[str, ...]:
        """``("encoder_keys", "encoder_values", "source_mask")``, as :meth:`encode` returns them."""
        return ("encoder_keys", "encoder_values", "source_mask")

    def cache_names(self) -> tuple[str, ...]:
        """The encoder state's names, then ``cache_decoder_conv_<i>`` for the input window
        ``(batch, kernel_size, input_channels)`` of decoder convolution ``i``."""
        convolutions = self.decoder_stack.convolutions
        return (*self.encoder_state_names(), *(f"cache_{conv.name}" for conv in convolutions))

    def init_cache(self, encoder_state: tuple, max_length: int) -> tuple:
        keys = encoder_state[0]
        buffers = self.decoder_stack.empty_caches(ops.shape(keys)[0], self.compute_dtype)
        return (*encoder_state, *buffers)

    def _step_convolutions(self) -> list:
        return self.decoder_stack.convolutions

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        keys, values, mask, *buffers = cache
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        g = self.decoder_embedding(ids, position_offset=index)
        x = self.decoder_fc1(g)
        x, buffers = self.decoder_stack.run(
            x,
            target_embedding=g,
            encoder_out=(keys, values),
            encoder_mask=mask,
            caches=buffers,
        )
        return self._decoder_head(x, None)[:, 0], (keys, values, mask, *buffers)

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "src_vocab_size": self.source_vocab_size,
            "tgt_vocab_size": self.target_vocab_size,
            "embed_dim": self.embed_dim,
            "encoder_layers": [list(spec) for spec in self.encoder_layers],
            "decoder_layers": [list(spec) for spec in self.decoder_layers],
            "decoder_out_embed_dim": self.decoder_out_embed_dim,
            "max_source_positions": self.max_source_positions,
            "max_target_positions": self.max_target_positions,
            "dropout": self.dropout,
            "weight_norm": self.weight_norm,
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }


@keras.saving.register_keras_serializable(package="keras_posenc")
class ConvS2SLanguageModel(_FoldedWeightNormSteps, LanguageModel):
    """The ConvS2S language model (fairseq's ``FConvLanguageModel``): a causal GLU stack.

    The decoder of :class:`ConvS2S` without attention and without position
    embeddings (the causal convolutions see only the past, which is enough for
    a language model): ``model(token_ids)`` returns float32 next-token logits
    ``(batch, time, vocab_size)``. A :class:`~keras_posenc.zoo.language_model.LanguageModel`:
    ``generate`` continues prompts with a cache of each convolution's last
    ``kernel_size`` inputs, so a step costs the same at every position.

    Args:
        vocab_size: vocabulary size.
        embed_dim: embedding width.
        decoder_layers: layer specs ``(channels, kernel_size[, residual])``.
        decoder_out_embed_dim: width before the output projection.
        dropout: dropout rate (also in the reference initialisation).
        weight_norm: weight-normalise the convolutions.
        pad_id: the padding id.
        bos_id: the usual first token of a prompt (never generated).
        eos_id: the token that ends a generated text.
        **kwargs: ``name`` and other ``keras.Model`` arguments.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.convs2s import ConvS2SLanguageModel
        >>> model = ConvS2SLanguageModel(30, embed_dim=8, decoder_layers=[(12, 4)] * 2,
        ...                              decoder_out_embed_dim=8)
        >>> tuple(model(np.array([[3, 4, 5, 6]])).shape)
        (1, 4, 30)
        >>> model.generate(np.array([[1, 4, 5]]), max_length=8).shape
        (1, 8)

    Reference:
        Dauphin, Fan, Auli, Grangier, "Language Modeling with Gated Convolutional
        Networks", ICML 2017; Gehring et al. 2017 (the fconv code base).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int = 128,
        decoder_layers: Sequence = ((1268, 4),) * 13,
        decoder_out_embed_dim: int = 128,
        dropout: float = 0.1,
        weight_norm: bool = True,
        pad_id: int = 0,
        bos_id: int = 1,
        eos_id: int = 2,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        _check_vocab(owner, "vocab_size", vocab_size)
        self._init_language_model(vocab_size, pad_id, bos_id, eos_id, max_length=None)
        self.embed_dim = check_int(owner, "embed_dim", embed_dim, 1)
        self.decoder_layers = parse_layer_specs(owner, "decoder_layers", decoder_layers)
        self.decoder_out_embed_dim = check_int(
            owner, "decoder_out_embed_dim", decoder_out_embed_dim, 1
        )
        self.dropout = check_rate(owner, "dropout", dropout)
        self.weight_norm = check_bool(owner, "weight_norm", weight_norm)
        policy = _policy(kwargs)
        p = self.dropout
        self.embedding = ConvS2SEmbedding(
            self.vocab_size, self.embed_dim, 0, self.pad_id, p, dtype=policy, name="embedding"
        )
        self.fc1 = keras.layers.Dense(
            self.decoder_layers[0][0],
            kernel_initializer=_normal(math.sqrt((1 - p) / self.embed_dim)),
            dtype=policy,
            name="fc1",
        )
        self.stack = _ConvStack(policy, "decoder", self.decoder_layers, True, p, weight_norm, None)
        self.stack_layers = self.stack.layers()
        self.fc2 = keras.layers.Dense(
            self.decoder_out_embed_dim,
            kernel_initializer=_normal(math.sqrt(1.0 / self.stack.out_channels)),
            dtype=policy,
            name="fc2",
        )
        self.output_dropout = keras.layers.Dropout(p, dtype=policy, name="output_dropout")
        self.fc3 = keras.layers.Dense(
            self.vocab_size,
            kernel_initializer=_normal(math.sqrt((1 - p) / self.decoder_out_embed_dim)),
            dtype=policy,
            name="fc3",
        )
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = self.fc1(self.embedding(token_ids))
        x, _ = self.stack.run(x)
        x = self._head(x, None)
        # Named, so Keras' output_names and an exported graph's output say "logits".
        logits = keras.layers.Identity(dtype="float32", name="logits")(x)
        super().__init__(inputs=token_ids, outputs=logits, **kwargs)

    def _head(self, x: Any, training: Any) -> Any:
        x = self.fc3(self.output_dropout(self.fc2(x), training=training))
        return ops.cast(x, "float32")

    # ------------------------------------------------------------------ decoding contract

    def cache_names(self) -> tuple[str, ...]:
        """``cache_decoder_conv_<i>``: the input window ``(batch, kernel_size,
        input_channels)`` of convolution ``i``."""
        return tuple(f"cache_{conv.name}" for conv in self.stack.convolutions)

    def init_cache(self, batch_size: Any, max_length: int) -> tuple:
        """Zero input windows, one per convolution; their size does not depend on
        ``max_length`` (a convolution sees only its last ``kernel_size`` inputs)."""
        return tuple(self.stack.empty_caches(batch_size, self.compute_dtype))

    def _step_convolutions(self) -> list:
        return self.stack.convolutions

    def decode_step(self, token_ids: Any, cache: tuple, index: Any) -> tuple:
        ids = ops.reshape(ops.cast(token_ids, "int32"), (-1, 1))
        x = self.fc1(self.embedding(ids))
        x, buffers = self.stack.run(x, caches=list(cache))
        return self._head(x, None)[:, 0], tuple(buffers)

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "decoder_layers": [list(spec) for spec in self.decoder_layers],
            "decoder_out_embed_dim": self.decoder_out_embed_dim,
            "dropout": self.dropout,
            "weight_norm": self.weight_norm,
            **self._language_model_config(),
        }

    @classmethod
    def from_config(cls, config: dict) -> ConvS2SLanguageModel:
        config = dict(config)
        config.pop("trainable", None)
        return cls(**config)


# --------------------------------------------------------------------------- registry


def build_convs2s(
    src_vocab_size: int,
    tgt_vocab_size: int,
    embed_dim: int = 256,
    encoder_layers: Sequence = ((256, 3),) * 4,
    decoder_layers: Sequence = ((256, 3),) * 3,
    decoder_out_embed_dim: int = 256,
    max_source_positions: int = 1024,
    max_target_positions: int = 1024,
    dropout: float = 0.1,
    weight_norm: bool = True,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    name: str | None = None,
) -> ConvS2S:
    """Builds a :class:`ConvS2S` (the builder behind the ``convs2s_*`` zoo names)."""
    return ConvS2S(**locals())  # its arguments, every one the class's


def build_convs2s_lm(
    vocab_size: int,
    embed_dim: int = 128,
    decoder_layers: Sequence = ((1268, 4),) * 13,
    decoder_out_embed_dim: int = 128,
    dropout: float = 0.1,
    weight_norm: bool = True,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    name: str | None = None,
) -> ConvS2SLanguageModel:
    """Builds a :class:`ConvS2SLanguageModel` (the builder behind ``convs2s_lm``)."""
    return ConvS2SLanguageModel(**locals())  # its arguments, every one the class's


for _name, _config in CONFIGS.items():
    _lm = isinstance(_config, ConvS2SLMConfig)
    register_model(
        _name,
        build_convs2s_lm if _lm else build_convs2s,
        family="convs2s",
        config=_config,
        description=(
            "ConvS2S gated convolutional language model (fairseq fconv_lm)"
            if _lm
            else "ConvS2S, small (training example)"
            if _name == "convs2s_small"
            else f"ConvS2S {_name[8:]} (fairseq fconv_{_name[8:]})"
        ),
        reference=REFERENCE,
    )
