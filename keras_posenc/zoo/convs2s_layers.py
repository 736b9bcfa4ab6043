"""The parts the ConvS2S models are built from: layer specs, embeddings, the convolution stack.

keras_posenc/zoo/convs2s.py assembles them into ``ConvS2S`` and ``ConvS2SLanguageModel``
(its docstring has the formulas and the initialisation); ``keras_posenc.zoo.convs2s``
re-exports the public names here.

Examples:

    >>> from keras_posenc.zoo.convs2s_layers import parse_layer_specs
    >>> parse_layer_specs("demo", "layers", [(64, 3), (128, 3, 0)])
    ((64, 3, 1), (128, 3, 0))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers._checks import check_int, check_rate
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers.convs2s import ConvS2SAttention, GLUConv1D
from keras_posenc.zoo.adapt import POSITION_TABLE_NAME

__all__ = ["ConvS2SEmbedding", "PositionEmbedding", "parse_layer_specs"]

_SQRT_HALF = math.sqrt(0.5)

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
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )

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
