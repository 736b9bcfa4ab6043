"""DeBERTa v3 (He, Gao, Chen 2023): an encoder whose only position information is
disentangled attention over a shared table of relative positions.

``token_ids`` -> token embedding -> layer norm -> dropout -> ``num_layers`` post-norm
blocks (`DebertaEncoderBlock`: `keras_posenc.layers.DisentangledSelfAttention` with the
stack's table, dropout, residual, layer norm; a GELU feed-forward network, dropout,
residual, layer norm) -> ``(batch, length, hidden_dim)``. The table of relative
positions (``2 * bucket_size`` rows, DeBERTa's log buckets, `DebertaBuckets`) passes a
layer norm once per call (`DebertaRelativeEmbedding`) and every block's attention reads
it, projected by its own query and key projections (v3's shared position projections).
The layer norms' epsilon is 1e-7. No absolute position enters anywhere.

The layout is keras-hub's ``DebertaV3Backbone`` (its inputs ``token_ids`` and
``padding_mask``, its output), so `keras_posenc.convert.from_keras_hub_deberta_v3` copies
any keras-hub DeBERTa v3 preset tensor by tensor; as there, the padding mask masks the
keys of every attention (the embeddings of padded tokens are not zeroed).

Registered configurations (the released checkpoints' shapes; parameters counted by the
tests, equal to keras-hub's presets'):

    name                     layers  d     FFN   heads  vocabulary  parameters
    deberta_v3_extra_small   12      384   1536  6      128,100     70,682,112
    deberta_v3_small         6       768   3072  12     128,100     141,304,320
    deberta_v3_base          12      768   3072  12     128,100     183,831,552
    deberta_v3_large         24      1024  4096  16     128,100     434,012,160
    deberta_v3_base_multi    12      768   3072  12     251,000     278,218,752
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_posenc.layers import DebertaBuckets, DisentangledSelfAttention
from keras_posenc.layers._attention import unmasked
from keras_posenc.layers._checks import (
    check_activation,
    check_bool,
    check_int,
    check_mask,
    check_positive_number,
    check_rate,
    shape_of,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers._remat import Remat
from keras_posenc.zoo.adapt import ZooFunctional
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.registry import register_model

__all__ = [
    "CONFIGS",
    "DebertaEncoderBlock",
    "DebertaRelativeEmbedding",
    "DebertaV3",
    "DebertaV3Config",
    "build_deberta_v3",
]

REFERENCE = (
    "He, Gao, Chen 2023, DeBERTaV3: Improving DeBERTa using ELECTRA-Style Pre-Training with "
    "Gradient-Disentangled Embedding Sharing (ICLR); keras-hub's DebertaV3Backbone"
)
# keras-hub's presets' parameter counts (deberta_v3_*_en, deberta_v3_base_multi).
PAPER_PARAMETERS = {
    "deberta_v3_extra_small": 70_682_112,
    "deberta_v3_small": 141_304_320,
    "deberta_v3_base": 183_831_552,
    "deberta_v3_large": 434_012_160,
    "deberta_v3_base_multi": 278_218_752,
}


def _initializer() -> keras.initializers.Initializer:
    # DeBERTa's N(0, 0.02), truncated; each weight gets its own instance (`sublayer_initializer`).
    return keras.initializers.TruncatedNormal(stddev=0.02)


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaRelativeEmbedding(keras.layers.Layer):
    """DeBERTa's table of relative position embeddings, after its layer norm.

    ``layer(x)`` returns the ``(1, 2 * bucket_size, hidden_dim)`` table normalised by a
    layer norm; ``x`` (the embedded tokens) only ties it into a functional graph and
    gives the compute dtype. Every block of the stack reads the one table.

    Args:
        hidden_dim: the table's width (the model's).
        bucket_size: DeBERTa's ``position_buckets``: the table has twice as many rows.
        layer_norm_epsilon: the layer norm's epsilon.
        embeddings_initializer: the table's initializer.
        **kwargs: standard layer arguments.

    Examples:

        >>> import numpy as np
        >>> layer = DebertaRelativeEmbedding(8, bucket_size=4)
        >>> tuple(layer(np.zeros((2, 5, 8), "float32")).shape)
        (1, 8, 8)
    """

    def __init__(
        self,
        hidden_dim: int,
        bucket_size: int = 256,
        layer_norm_epsilon: float = 1e-7,
        embeddings_initializer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.hidden_dim = check_int(caller, "hidden_dim", hidden_dim, 1)
        self.bucket_size = check_int(caller, "bucket_size", bucket_size, 1)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or _initializer()
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )

    def build(self, input_shape: Any = None) -> None:
        # Named "table", as the zoo names relative tables: no weight decay on it
        # (keras_posenc/zoo/adapt.py).
        self.embeddings = self.add_weight(
            shape=(2 * self.bucket_size, self.hidden_dim),
            initializer=self.embeddings_initializer,
            name="table",
        )
        self.layer_norm.build((1, 2 * self.bucket_size, self.hidden_dim))
        self.built = True

    def call(self, inputs: Any) -> Any:
        return self.layer_norm(ops.expand_dims(ops.cast(self.embeddings, self.compute_dtype), 0))

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (1, 2 * self.bucket_size, self.hidden_dim)

    def compute_mask(self, inputs: Any, mask: Any = None) -> None:
        return None  # the table has no positions of the input

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            hidden_dim=self.hidden_dim,
            bucket_size=self.bucket_size,
            layer_norm_epsilon=self.layer_norm_epsilon,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer),
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaEncoderBlock(Remat, keras.layers.Layer):
    """One DeBERTa v3 layer: disentangled self-attention and a feed-forward network, post-norm.

    ``x = norm(x + dropout(attention(x, table)))``, then ``x = norm(x +
    dropout(W_2 act(W_1 x)))``; the attention is `DisentangledSelfAttention` reading the
    stack's shared table (``shared_table=True``) with DeBERTa's buckets.

    Args:
        num_heads: attention heads (``hidden_dim`` a multiple of them).
        intermediate_dim: feed-forward width.
        bucket_size: DeBERTa's ``position_buckets``.
        max_sequence_length: DeBERTa's ``max_relative_positions`` (the log buckets' end).
        dropout: dropout of the table, the probabilities and each sublayer's output.
        activation: the feed-forward activation (DeBERTa: exact GELU).
        layer_norm_epsilon: the layer norms' epsilon.
        kernel_initializer: the projections' initializer (each its own copy).
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; dropout draws the same masks again) instead of keeping its
            activations: less memory, about one more forward pass of time. Default False.
        **kwargs: standard layer arguments.

    Call arguments:
        x: ``(batch, length, hidden_dim)``.
        relative_embeddings: the stack's table (`DebertaRelativeEmbedding`).
        padding_mask: ``(batch, length)`` bool or int 0/1, True for real tokens.
        training: whether dropout is active.

    Examples:

        >>> import numpy as np
        >>> block = DebertaEncoderBlock(2, 16, bucket_size=4, max_sequence_length=16)
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> table = np.random.default_rng(1).standard_normal((1, 8, 8)).astype("float32")
        >>> tuple(block(x, table, padding_mask=np.array([[1, 1, 1, 0, 0], [1] * 5])).shape)
        (2, 5, 8)
    """

    def __init__(
        self,
        num_heads: int,
        intermediate_dim: int,
        bucket_size: int = 256,
        max_sequence_length: int = 512,
        dropout: float = 0.0,
        activation: Any = "gelu",
        layer_norm_epsilon: float = 1e-7,
        kernel_initializer: Any = None,
        remat: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self._set_remat(caller, remat)
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        self.intermediate_dim = check_int(caller, "intermediate_dim", intermediate_dim, 1)
        self.position = DebertaBuckets.checked(
            caller, position_buckets=bucket_size, max_position=max_sequence_length
        )
        self.dropout = check_rate(caller, "dropout", dropout)
        self.activation = check_activation(caller, activation)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer or _initializer())
        self.supports_masking = True

    def build(self, input_shape: Any, *args: Any, **kwargs: Any) -> None:
        hidden = int(input_shape[-1])
        if hidden % self.num_heads:
            raise ValueError(
                f"{type(self).__name__}({self.name!r}): the width {hidden} must be a multiple "
                f"of num_heads={self.num_heads}."
            )
        shape = (None, None, hidden)
        policy = self.dtype_policy
        self.attention = DisentangledSelfAttention(
            self.num_heads,
            hidden // self.num_heads,
            position=self.position,
            shared_table=True,
            dropout=self.dropout,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, "attention"),
            dtype=policy,
            name="attention",
        )
        self.attention.build(shape)
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="attention_norm"
        )
        self.attention_norm.build(shape)
        self.feedforward_intermediate = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, "intermediate"),
            dtype=policy,
            name="feedforward_intermediate",
        )
        self.feedforward_intermediate.build(shape)
        self.feedforward_output = keras.layers.Dense(
            hidden,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, "output"),
            dtype=policy,
            name="feedforward_output",
        )
        self.feedforward_output.build((None, None, self.intermediate_dim))
        self.feedforward_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="feedforward_norm"
        )
        self.feedforward_norm.build(shape)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=policy)
        self.built = True

    def call(
        self, x: Any, relative_embeddings: Any, padding_mask: Any = None, training: Any = None
    ) -> Any:
        if self._remats(training):
            return self._remat_call(
                lambda x, table: self.call(x, table, padding_mask, training),
                (unmasked(x), relative_embeddings),
                training,
            )
        x = unmasked(x)
        h = self.attention(x, relative_embeddings, padding_mask=padding_mask, training=training)
        x = self.attention_norm(x + self.dropout_layer(h, training=training))
        h = self.feedforward_output(self.feedforward_intermediate(x))
        return self.feedforward_norm(x + self.dropout_layer(h, training=training))

    def compute_output_shape(self, input_shape: Any, *args: Any, **kwargs: Any) -> tuple:
        return tuple(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            intermediate_dim=self.intermediate_dim,
            bucket_size=self.position.position_buckets,
            max_sequence_length=self.position.max_position,
            dropout=self.dropout,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            remat=self.remat,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class _PaddingMask(keras.layers.Layer):
    """The model's ``padding_mask`` input as bool, after the one mask check (`check_mask`)."""

    def call(self, ids: Any, mask: Any) -> Any:
        owner = f"{self.name}"
        checked = check_mask(owner, "padding_mask", mask, shape_of(ids), ("batch", "length"))
        return ops.broadcast_to(checked, ops.shape(ids))

    def compute_output_spec(self, ids: Any, mask: Any) -> Any:
        return keras.KerasTensor(ids.shape, dtype="bool")


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3(ZooFunctional):
    """The functional model `build_deberta_v3` returns: a `ZooFunctional` whose call checks
    the ``padding_mask`` it is given before Keras casts it to the input's int32 (a floating
    mask, perhaps an additive one, would be cast silently; `check_mask` refuses it)."""

    def _checked(self, inputs: Any) -> Any:
        inputs = self._structured(inputs)
        if isinstance(inputs, dict) and inputs.get("padding_mask") is not None:
            ids = inputs.get("token_ids")
            expected = shape_of(ids) if ids is not None else (None, None)
            check_mask(
                f"{type(self).__name__}({self.name!r})",
                "padding_mask",
                inputs["padding_mask"],
                expected,
                ("batch", "length"),
            )
        return inputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (self._checked(args[0]), *args[1:])
        return super().__call__(*args, **kwargs)

    def call(self, inputs: Any, training: Any = None, mask: Any = None, **kwargs: Any) -> Any:
        # `fit` and `predict` on JAX reach `call` without `__call__` (stateless_call).
        return super().call(self._checked(inputs), training=training, mask=mask, **kwargs)


def build_deberta_v3(
    vocabulary_size: int = 128100,
    num_layers: int = 12,
    num_heads: int = 12,
    hidden_dim: int = 768,
    intermediate_dim: int = 3072,
    dropout: float = 0.1,
    max_sequence_length: int = 512,
    bucket_size: int = 256,
    layer_norm_epsilon: float = 1e-7,
    remat: bool = False,
    name: str = "deberta_v3",
    dtype: Any = None,
) -> keras.Model:
    """A DeBERTa v3 encoder (the layout in this module's docstring) as a functional model.

    ``model({"token_ids": ids, "padding_mask": mask})`` returns the last block's output
    ``(batch, length, hidden_dim)``, as keras-hub's ``DebertaV3Backbone``; ``mask`` is
    bool or int 0/1, True for real tokens.

    Args:
        vocabulary_size: token ids.
        num_layers: encoder blocks.
        num_heads: attention heads (``hidden_dim`` a multiple of them).
        hidden_dim: model width.
        intermediate_dim: feed-forward width.
        dropout: dropout of the embeddings, the table, the probabilities and every
            sublayer's output.
        max_sequence_length: DeBERTa's ``max_relative_positions``: where the log buckets
            end (any length runs: farther distances share the end rows).
        bucket_size: DeBERTa's ``position_buckets`` (256): exact distances up to half of it.
        layer_norm_epsilon: the layer norms' epsilon.
        remat: recompute every block in the backward pass of training (Keras' remat:
            ``DebertaEncoderBlock(remat=True)``): less memory, more time. Default False.
        name: the model's name.
        dtype: the layers' dtype policy (``"mixed_bfloat16"``); None: Keras' global one.

    Returns:
        The ``keras.Model``.

    Examples:

        >>> import numpy as np
        >>> model = build_deberta_v3(50, num_layers=1, num_heads=2, hidden_dim=8,
        ...                          intermediate_dim=16, bucket_size=4, max_sequence_length=16)
        >>> ids = np.array([[1, 5, 6, 2, 0], [1, 7, 8, 9, 2]])
        >>> tuple(model({"token_ids": ids, "padding_mask": ids != 0}).shape)
        (2, 5, 8)
    """
    owner = "build_deberta_v3"
    remat = check_bool(owner, "remat", remat)
    vocabulary_size = check_int(owner, "vocabulary_size", vocabulary_size, 1)
    num_layers = check_int(owner, "num_layers", num_layers, 1)
    hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
    num_heads = check_int(owner, "num_heads", num_heads, 1)
    if hidden_dim % num_heads:
        raise ValueError(
            f"{owner}: `hidden_dim` must be a multiple of `num_heads`, got hidden_dim="
            f"{hidden_dim} and num_heads={num_heads}."
        )
    check_allocation(owner, "token embedding", [(vocabulary_size, hidden_dim)])
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    padding_input = keras.Input((None,), dtype="int32", name="padding_mask")
    padding_mask = _PaddingMask(dtype=dtype, name="padding_mask_check")(token_ids, padding_input)
    x = keras.layers.Embedding(
        vocabulary_size,
        hidden_dim,
        embeddings_initializer=_initializer(),
        dtype=dtype,
        name="token_embedding",
    )(token_ids)
    x = keras.layers.LayerNormalization(
        epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_norm"
    )(x)
    x = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")(x)
    table = DebertaRelativeEmbedding(
        hidden_dim, bucket_size, layer_norm_epsilon, dtype=dtype, name="relative_embedding"
    )(x)
    for index in range(num_layers):
        x = DebertaEncoderBlock(
            num_heads,
            intermediate_dim,
            bucket_size=bucket_size,
            max_sequence_length=max_sequence_length,
            dropout=dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            dtype=dtype,
            remat=remat,
            name=f"encoder_block_{index}",
        )(x, table, padding_mask=padding_mask)
    # One output name whatever the depth (the export's, docs/guides/export.md).
    x = keras.layers.Identity(dtype=dtype, name="sequence_output")(x)
    inputs = {"token_ids": token_ids, "padding_mask": padding_input}
    return DebertaV3(inputs, x, name=name, dtype=dtype)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class DebertaV3Config(ZooConfig):
    """A named DeBERTa v3: :func:`build_deberta_v3`'s arguments, with its defaults."""

    vocabulary_size: int = 128100
    num_layers: int = 12
    num_heads: int = 12
    hidden_dim: int = 768
    intermediate_dim: int = 3072
    dropout: float = 0.1
    max_sequence_length: int = 512
    bucket_size: int = 256
    layer_norm_epsilon: float = 1e-7
    remat: bool = False
    name: str = "deberta_v3"

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        for field in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim"):
            check_int(who, field, getattr(self, field), 1)


#: Every registered DeBERTa v3: zoo name -> :class:`DebertaV3Config` (keras-hub's presets).
CONFIGS: dict[str, DebertaV3Config] = by_name([
    DebertaV3Config(zoo_name="deberta_v3_extra_small", name="deberta_v3_extra_small",
                    num_layers=12, num_heads=6, hidden_dim=384, intermediate_dim=1536),
    DebertaV3Config(zoo_name="deberta_v3_small", name="deberta_v3_small", num_layers=6),
    DebertaV3Config(zoo_name="deberta_v3_base", name="deberta_v3_base"),
    DebertaV3Config(zoo_name="deberta_v3_large", name="deberta_v3_large", num_layers=24,
                    num_heads=16, hidden_dim=1024, intermediate_dim=4096),
    DebertaV3Config(zoo_name="deberta_v3_base_multi", name="deberta_v3_base_multi",
                    vocabulary_size=251000),
])  # fmt: skip

for _name, _config in CONFIGS.items():
    register_model(
        _name,
        build_deberta_v3,
        family="deberta_v3",
        config=_config,
        description=(
            f"DeBERTa v3 encoder, {_config.num_layers} layers, d {_config.hidden_dim}, "
            f"{_config.num_heads} heads, disentangled attention over log-bucketed relative "
            "positions"
        ),
        paper_parameters=PAPER_PARAMETERS[_name],
        reference=REFERENCE,
    )
