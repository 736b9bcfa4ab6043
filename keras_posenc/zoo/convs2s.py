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
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers._checks import check_bool, check_int, check_rate
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers.convs2s import (
    ConvS2SAttention,
    GLUConv1D,
    GradMultiply,
    folded_weight_norm,
)
from keras_posenc.zoo.adapt import POSITION_TABLE_NAME
from keras_posenc.zoo.config import REQUIRED, ZooConfig, by_name
from keras_posenc.zoo.language_model import LanguageModel
from keras_posenc.zoo.registry import register_model
from keras_posenc.zoo.seq2seq import Seq2SeqModel

_SQRT_HALF = math.sqrt(0.5)
REFERENCE = (
    "Gehring et al. 2017, Convolutional Sequence to Sequence Learning (arXiv:1705.03122); "
    "fairseq fconv"
)

# --------------------------------------------------------------------------- validation


def parse_layer_specs(owner: str, argument: str, specs: Any) -> tuple[tuple[int, int, int], ...]:
    """``specs`` as ``((channels, kernel_size, residual), ...)``, residual defaulting to 1."""
    try:
        items = [tuple(spec) for spec in specs]
    except TypeError:
        items = None
    if not items:
        raise ValueError(
            f"{owner}: `{argument}` must be a non-empty sequence of (channels, kernel_size"
            f"[, residual]) tuples; got {specs!r}."
        )
    parsed = []
    for index, spec in enumerate(items):
        valid = len(spec) in (2, 3) and all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in spec
        )
        if valid:
            channels, kernel_size = int(spec[0]), int(spec[1])
            residual = int(spec[2]) if len(spec) == 3 else 1
            valid = channels > 0 and kernel_size > 0 and 0 <= residual <= index + 1
        if not valid:
            raise ValueError(
                f"{owner}: `{argument}[{index}]` must be (channels > 0, kernel_size > 0"
                f"[, 0 <= residual <= {index + 1}]) ints; got {spec!r}."
            )
        parsed.append((channels, kernel_size, residual))
    return tuple(parsed)


def _policy(kwargs: dict) -> Any:
    """The dtype policy the model's layers use: the ``dtype`` argument, else the global one."""
    dtype = kwargs.get("dtype")
    return keras.config.dtype_policy() if dtype is None else keras.dtype_policies.get(dtype)


def _normal(stddev: float) -> keras.initializers.Initializer:
    return keras.initializers.RandomNormal(mean=0.0, stddev=stddev)


class _ZeroRow(keras.initializers.RandomNormal):
    """``N(0, stddev)`` with one row zero: fairseq's embedding with a padding index.

    A ``RandomNormal``, so it fixes its seed when created (as Keras' initializers do)
    and draws the same values wherever it is called.
    """

    def __init__(self, stddev: float, row: int, seed: Any = None) -> None:
        super().__init__(mean=0.0, stddev=stddev, seed=seed)
        self.row = row

    def __call__(self, shape: tuple, dtype: Any = None) -> Any:
        values = super().__call__(shape, dtype=dtype)
        keep = ops.not_equal(ops.arange(shape[0]), self.row)
        return values * ops.cast(keep[:, None], values.dtype)

    def get_config(self) -> dict:
        return {"stddev": self.stddev, "row": self.row, "seed": super().get_config()["seed"]}


# --------------------------------------------------------------------------- embedding


@keras.saving.register_keras_serializable(package="keras_posenc")
class PositionEmbedding(keras.layers.Embedding):
    """A ``keras.layers.Embedding`` whose table is the variable ``position_embeddings``.

    A learned absolute position table: the same layer as Keras' ``Embedding`` (its
    build, call, int8 and int4 quantization, LoRA and saved variables), with the table
    named ``position_embeddings`` instead of ``embeddings``, so that a variable name
    tells it apart from a token table (:func:`~keras_posenc.zoo.adapt.is_no_decay`, and
    Keras' ``exclude_from_weight_decay(var_names=...)``, which matches names). The
    attribute stays ``embeddings``; a ``.keras`` file saved before the rename loads
    (Keras stores a layer's variables by their order, not by their names). Its
    arguments are ``keras.layers.Embedding``'s: ``input_dim`` the rows (positions),
    ``output_dim`` the embedding width.

    Examples:

        >>> from keras_posenc.zoo.convs2s import PositionEmbedding
        >>> layer = PositionEmbedding(8, 4)
        >>> layer.build()
        >>> [(v.name, tuple(v.shape)) for v in layer.weights]
        [('position_embeddings', (8, 4))]
    """

    def add_weight(self, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
        # Keras' build, _int8_build and _int4_build name the table "embeddings"; its
        # other variables (embeddings_scale, lora_embeddings_a, ...) keep their names.
        if name == "embeddings":
            name = POSITION_TABLE_NAME
        return super().add_weight(*args, name=name, **kwargs)

    def quantize(self, mode: Any = None, type_check: bool = True, config: Any = None) -> None:
        # Keras' Embedding.quantize refuses subclasses (their call may differ); this one
        # computes what Embedding computes, so it quantizes as Embedding does (and the
        # position tables of int8 models saved before the rename load quantized).
        if type_check and type(self) is not PositionEmbedding:
            raise NotImplementedError(
                f"Layer {type(self).__name__} does not have a `quantize` method implemented."
            )
        super().quantize(mode, type_check=False, config=config)


@keras.saving.register_keras_serializable(package="keras_posenc")
class ConvS2SEmbedding(keras.layers.Layer):
    """Token embedding plus learned absolute positions that count only real tokens.

    ``e = dropout(token_embedding(ids) + position_embedding(p))``, with ``p``
    the number of real (non-``pad_id``) tokens before each token, so a
    left-padded sequence starts at position 0 like a right-padded one (fairseq's
    ``make_positions``). Padded positions get a zero embedding. Both tables are
    initialised ``N(0, 0.1)`` (the token table's ``pad_id`` row zero). The token
    table is the variable ``token_embedding/embeddings``, the position table
    ``position_embedding/position_embeddings`` (a :class:`PositionEmbedding`), so
    weight decay can leave the position table alone by its name (timm's convention
    for learned absolute positions, ``pos_embed``; ``ZooModel.no_weight_decay_names``).

    Args:
        vocab_size: rows of the token table.
        embed_dim: embedding width.
        max_positions: rows of the position table (the longest sequence), or
            0 for no position embedding (the ConvS2S language model).
        pad_id: the padding token id.
        dropout: dropout rate on the sum.
        **kwargs: standard layer arguments.

    Call arguments:
        token_ids: ``(batch, time)`` ints.
        position_offset: None (positions counted from the real tokens), or a
            scalar int: the position of ``token_ids[:, 0]`` when decoding step by
            step (the prefix length).
        training: whether dropout is active.

    Returns:
        ``(batch, time, embed_dim)``.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.zoo.convs2s import ConvS2SEmbedding
        >>> embedding = ConvS2SEmbedding(vocab_size=10, embed_dim=4, max_positions=8)
        >>> left = ops.convert_to_numpy(embedding(np.array([[0, 0, 5, 6]])))
        >>> right = ops.convert_to_numpy(embedding(np.array([[5, 6, 0, 0]])))
        >>> bool(np.allclose(left[0, 2:], right[0, :2]))
        True

    Reference:
        Gehring et al., "Convolutional Sequence to Sequence Learning", ICML 2017 (section 3.1).
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        max_positions: int,
        pad_id: int = 0,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.vocab_size = check_int(owner, "vocab_size", vocab_size, 1)
        self.embed_dim = check_int(owner, "embed_dim", embed_dim, 1)
        self.max_positions = check_int(owner, "max_positions", max_positions, 0)
        self.pad_id = int(pad_id)
        self.dropout = check_rate(owner, "dropout", dropout)
        tables = [(self.vocab_size, self.embed_dim), (self.max_positions, self.embed_dim)]
        check_allocation(owner, "embedding tables", tables)
        self.token_embedding = keras.layers.Embedding(
            self.vocab_size,
            self.embed_dim,
            embeddings_initializer=_ZeroRow(0.1, self.pad_id),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.position_embedding = None
        if self.max_positions:
            self.position_embedding = PositionEmbedding(
                self.max_positions,
                self.embed_dim,
                embeddings_initializer=_normal(0.1),
                dtype=self.dtype_policy,
                name="position_embedding",
            )
        self.dropout_layer = keras.layers.Dropout(self.dropout, name="dropout")

    def build(self, input_shape: Any) -> None:
        self.token_embedding.build(input_shape)
        if self.position_embedding is not None:
            self.position_embedding.build(input_shape)
        self.built = True

    def call(self, token_ids: Any, position_offset: Any = None, training: Any = None) -> Any:
        token_ids = ops.cast(token_ids, "int32")
        real = ops.not_equal(token_ids, self.pad_id)
        x = self.token_embedding(token_ids)
        if self.position_embedding is not None:
            if position_offset is None:
                positions = ops.cumsum(ops.cast(real, "int32"), axis=1) - 1
                positions = ops.maximum(positions, 0)
            else:
                length = ops.shape(token_ids)[1]
                positions = ops.cast(position_offset, "int32") + ops.arange(length, dtype="int32")
                positions = ops.broadcast_to(positions[None, :], ops.shape(token_ids))
            x = x + self.position_embedding(positions)
        # expand_dims, not x[..., None]: LiteRT has no builtin for a slice adding an axis.
        x = x * ops.expand_dims(ops.cast(real, x.dtype), -1)
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape) + (self.embed_dim,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embed_dim=self.embed_dim,
            max_positions=self.max_positions,
            pad_id=self.pad_id,
            dropout=self.dropout,
        )
        return config


# --------------------------------------------------------------------------- stacks


class _ConvStack:
    """The layers of one convolution stack (fairseq's encoder or decoder body).

    Not a Layer: the model owns the sublayers (so their weights have stable
    paths in saved files); this object only holds references and the residual
    bookkeeping shared by the encoder, the full decoder and the decoding step.
    """

    def __init__(
        self,
        policy: Any,
        prefix: str,
        specs: tuple[tuple[int, int, int], ...],
        causal: bool,
        dropout: float,
        weight_norm: bool,
        attention_embed_dim: int | None,
    ) -> None:
        self.specs = specs
        self.convolutions = []
        self.projections = []
        self.attentions = []
        layer_in_channels = [specs[0][0]]
        in_channels = specs[0][0]
        for index, (channels, kernel_size, residual) in enumerate(specs):
            residual_dim = channels if residual == 0 else layer_in_channels[-residual]
            projection = None
            if residual_dim != channels:
                projection = keras.layers.Dense(
                    channels,
                    kernel_initializer=_normal(math.sqrt(1.0 / residual_dim)),
                    dtype=policy,
                    name=f"{prefix}_projection_{index}",
                )
            self.projections.append(projection)
            self.convolutions.append(
                GLUConv1D(
                    channels,
                    kernel_size,
                    causal=causal,
                    dropout=dropout,
                    weight_norm=weight_norm,
                    dtype=policy,
                    name=f"{prefix}_conv_{index}",
                )
            )
            if attention_embed_dim is not None:
                self.attentions.append(
                    ConvS2SAttention(
                        channels,
                        attention_embed_dim,
                        dtype=policy,
                        name=f"{prefix}_attention_{index}",
                    )
                )
            layer_in_channels.append(channels)
            in_channels = channels
        self.out_channels = in_channels

    def layers(self) -> list:
        found = self.convolutions + self.attentions
        return found + [p for p in self.projections if p is not None]

    def run(
        self,
        x: Any,
        mask: Any = None,
        training: Any = None,
        target_embedding: Any = None,
        encoder_out: Any = None,
        encoder_mask: Any = None,
        caches: Sequence | None = None,
    ) -> tuple[Any, list]:
        """The stack on ``x``; with ``caches``, one decoding step per convolution buffer."""
        residuals = [x]
        new_caches = []
        for index, (_, _, residual) in enumerate(self.specs):
            residual_x = None
            if residual > 0:
                residual_x = residuals[-residual]
                if self.projections[index] is not None:
                    residual_x = self.projections[index](residual_x)
            conv = self.convolutions[index]
            if caches is None:
                x = conv(x, mask=mask, training=training)
            else:
                x, cache = conv(x, training=training, cache=caches[index])
                new_caches.append(cache)
            if self.attentions:
                x, _ = self.attentions[index](x, target_embedding, encoder_out, encoder_mask)
            if residual_x is not None:
                x = (x + residual_x) * _SQRT_HALF
            residuals.append(x)
        return x, new_caches

    def empty_caches(self, batch: Any, dtype: str) -> list:
        """Zero buffers ``(batch, kernel_size, input_channels)``, one per convolution."""
        caches = []
        in_channels = self.specs[0][0]
        for channels, kernel_size, _ in self.specs:
            caches.append(ops.zeros((batch, kernel_size, in_channels), dtype=dtype))
            in_channels = channels
        return caches


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
        self._init_seq2seq(
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
        self.decoder_dropout = keras.layers.Dropout(p, name="decoder_dropout")
        self.decoder_fc3 = keras.layers.Dense(
            tgt_vocab_size,
            kernel_initializer=_normal(math.sqrt((1 - p) / self.decoder_out_embed_dim)),
            dtype=policy,
            name="decoder_fc3",
        )
        # Track the stacks' sublayers on the model, so their weights are saved.
        self.encoder_stack_layers = self.encoder_stack.layers()
        self.decoder_stack_layers = self.decoder_stack.layers()
        inputs, logits = self._functional_graph()
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

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
        self.output_dropout = keras.layers.Dropout(p, name="output_dropout")
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvS2SConfig(ZooConfig):
    """A named ConvS2S: :func:`build_convs2s`'s arguments (:class:`ConvS2S` says what each
    does), with its defaults; the vocabularies are left to ``zoo.create``. Layer specs
    (``(channels, kernel_size[, residual])`` each) are checked when made."""

    # The vocabularies (required) and the special ids.
    src_vocab_size: int = REQUIRED
    tgt_vocab_size: int = REQUIRED
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    # Widths and layers.
    embed_dim: int = 256
    encoder_layers: tuple[tuple[int, ...], ...] = ((256, 3),) * 4
    decoder_layers: tuple[tuple[int, ...], ...] = ((256, 3),) * 3
    decoder_out_embed_dim: int = 256
    # The position tables, regularisation and the model.
    max_source_positions: int = 1024
    max_target_positions: int = 1024
    dropout: float = 0.1
    weight_norm: bool = True
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("encoder_layers", "decoder_layers"):
            parse_layer_specs(type(self).__name__, field, getattr(self, field))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvS2SLMConfig(ZooConfig):
    """A named ConvS2S language model: :func:`build_convs2s_lm`'s arguments, with its
    defaults; the vocabulary is left to ``zoo.create``."""

    # The vocabulary (required) and the special ids.
    vocab_size: int = REQUIRED
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    # Widths and layers, regularisation and the model.
    embed_dim: int = 128
    decoder_layers: tuple[tuple[int, ...], ...] = ((1268, 4),) * 13
    decoder_out_embed_dim: int = 128
    dropout: float = 0.1
    weight_norm: bool = True
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_layer_specs(type(self).__name__, "decoder_layers", self.decoder_layers)


_EN_DE = ((512, 3),) * 9 + ((1024, 3),) * 4 + ((2048, 1),) * 2
_EN_FR = ((512, 3),) * 6 + ((768, 3),) * 4 + ((1024, 3),) * 3 + ((2048, 1),) + ((4096, 1),)
#: Every registered ConvS2S: zoo name -> :class:`ConvS2SConfig` (``convs2s_lm``:
#: :class:`ConvS2SLMConfig`), fairseq's ``fconv_*`` architectures.
CONFIGS: dict[str, ConvS2SConfig | ConvS2SLMConfig] = by_name([
    # Not a paper configuration: the small model of the training example and the tests.
    ConvS2SConfig(zoo_name="convs2s_small", embed_dim=64, encoder_layers=((64, 3),) * 4,
                  decoder_layers=((64, 3),) * 4, decoder_out_embed_dim=64,
                  max_source_positions=256, max_target_positions=256, dropout=0.1),
    ConvS2SConfig(zoo_name="convs2s_iwslt_de_en", embed_dim=256,
                  encoder_layers=((256, 3),) * 4, decoder_layers=((256, 3),) * 3,
                  decoder_out_embed_dim=256, dropout=0.2),
    ConvS2SConfig(zoo_name="convs2s_wmt_en_ro", embed_dim=512,
                  encoder_layers=((512, 3),) * 20, decoder_layers=((512, 3),) * 20,
                  decoder_out_embed_dim=512, dropout=0.1),
    ConvS2SConfig(zoo_name="convs2s_wmt_en_de", embed_dim=768, encoder_layers=_EN_DE,
                  decoder_layers=_EN_DE, decoder_out_embed_dim=512, dropout=0.2),
    ConvS2SConfig(zoo_name="convs2s_wmt_en_fr", embed_dim=768, encoder_layers=_EN_FR,
                  decoder_layers=_EN_FR, decoder_out_embed_dim=512, dropout=0.1),
    ConvS2SLMConfig(zoo_name="convs2s_lm", embed_dim=128, decoder_layers=((1268, 4),) * 13,
                    decoder_out_embed_dim=128, dropout=0.1),
])  # fmt: skip

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
