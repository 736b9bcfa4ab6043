"""RoFormer v2 (Su et al. 2022): a BERT-like encoder whose only position information is the
rotary embedding of its queries and keys.

``token_ids`` and ``segment_ids`` -> token and segment embeddings, summed -> RMS norm ->
dropout -> ``num_layers`` post-norm `keras_posenc.layers.RelativeTransformerEncoder` blocks
(``relative=None``, ``rotary=RotaryPositions(interleaved=True)``: RoFormer's rotation of
the pairs ``(2k, 2k + 1)``; ``layer_norm="rms"``: a scale, no mean, no offset; no biases;
ReLU feed-forward) -> ``(batch, length, hidden_dim)``. Padding is ``token_ids == 0`` (the
keys it marks are masked). v2's differences from RoFormer (v1): no biases, RMS norms
without offsets, a smaller feed-forward.

The layout is keras-hub's ``RoformerV2Backbone`` (inputs ``token_ids`` and
``segment_ids``, the last block's states), so `keras_posenc.convert.from_keras_hub_roformer_v2`
copies its weights one to one.

Registered configurations (the released Chinese character models' shapes, as PaddleNLP and
Hugging Face ``junnyu/roformer_v2_chinese_char_*`` list them; parameters counted by the
tests, equal to keras-hub's backbone of those shapes):

    name               layers  d     FFN   heads x size  vocabulary  parameters
    roformer_v2_small  6       384   1536  6 x 64        12,000      15,230,592
    roformer_v2_base   12      768   3072  12 x 64       12,000      94,171,392
    roformer_v2_large  24      1024  4096  16 x 64       12,000      314,330,112
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_posenc.layers import RelativeTransformerEncoder, RotaryPositions
from keras_posenc.layers._checks import check_bool, check_int, check_positive_number
from keras_posenc.layers._memory import check_allocation
from keras_posenc.zoo.adapt import ZooFunctional
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.registry import register_model

__all__ = ["CONFIGS", "RoformerV2Config", "build_roformer_v2"]

REFERENCE = (
    "Su, Lu, Pan, Murtadha, Wen, Liu 2024, RoFormer: Enhanced Transformer with Rotary Position "
    "Embedding (Neurocomputing 568); RoFormer v2 (Su et al. 2022, ZhuiyiAI); keras-hub's "
    "RoformerV2Backbone"
)


def _initializer() -> keras.initializers.Initializer:
    # BERT's N(0, 0.02), truncated (keras-hub's roformer_kernel_initializer).
    return keras.initializers.TruncatedNormal(stddev=0.02)


@keras.saving.register_keras_serializable(package="keras_posenc")
class _PaddingFromIds(keras.layers.Layer):
    """``token_ids != pad_id``: the keys the blocks may attend to."""

    def __init__(self, pad_id: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pad_id = pad_id

    def call(self, ids: Any) -> Any:
        return ops.not_equal(ops.cast(ids, "int32"), self.pad_id)

    def compute_output_spec(self, ids: Any) -> Any:
        return keras.KerasTensor(ids.shape, dtype="bool")

    def get_config(self) -> dict:
        return {**super().get_config(), "pad_id": self.pad_id}


def build_roformer_v2(
    vocabulary_size: int = 12000,
    num_layers: int = 12,
    num_heads: int = 12,
    hidden_dim: int = 768,
    intermediate_dim: int = 3072,
    head_size: int | None = None,
    use_bias: bool = False,
    activation: Any = "relu",
    dropout: float = 0.1,
    num_segments: int = 2,
    max_wavelength: float = 10000.0,
    layer_norm_epsilon: float = 1e-7,
    pad_id: int = 0,
    remat: bool = False,
    name: str = "roformer_v2",
    dtype: Any = None,
) -> keras.Model:
    """A RoFormer v2 encoder (the layout in this module's docstring) as a functional model.

    ``model({"token_ids": ids, "segment_ids": segments})`` returns the last block's output
    ``(batch, length, hidden_dim)``, as keras-hub's ``RoformerV2Backbone``.

    Args:
        vocabulary_size: token ids.
        num_layers: encoder blocks.
        num_heads: attention heads.
        hidden_dim: model width (``num_heads * head_size``).
        intermediate_dim: feed-forward width.
        head_size: size of each head; None: ``hidden_dim // num_heads``.
        use_bias: whether the projections have biases (v2: no).
        activation: the feed-forward activation (ReLU).
        dropout: dropout of the embeddings, the attention probabilities and each block's
            sublayers.
        num_segments: segment ids.
        max_wavelength: the rotary frequencies' base.
        layer_norm_epsilon: the RMS norms' epsilon (Keras' ``epsilon()``, 1e-7).
        pad_id: the padding id (its keys are masked).
        remat: recompute every block in the backward pass of training (Keras' remat:
            ``RelativeTransformerEncoder(remat=True)``): less memory, more time. Default
            False.
        name: the model's name.
        dtype: the layers' dtype policy (``"mixed_bfloat16"``); None: Keras' global one.

    Returns:
        The ``keras.Model``.

    Examples:

        >>> import numpy as np
        >>> model = build_roformer_v2(50, num_layers=1, num_heads=2, hidden_dim=8,
        ...                           intermediate_dim=16)
        >>> ids = np.array([[2, 5, 6, 3, 0], [2, 7, 8, 9, 3]])
        >>> tuple(model({"token_ids": ids, "segment_ids": np.zeros_like(ids)}).shape)
        (2, 5, 8)
    """
    owner = "build_roformer_v2"
    remat = check_bool(owner, "remat", remat)
    vocabulary_size = check_int(owner, "vocabulary_size", vocabulary_size, 1)
    num_layers = check_int(owner, "num_layers", num_layers, 1)
    num_heads = check_int(owner, "num_heads", num_heads, 1)
    hidden_dim = check_int(owner, "hidden_dim", hidden_dim, 1)
    num_segments = check_int(owner, "num_segments", num_segments, 1)
    layer_norm_epsilon = check_positive_number(owner, "layer_norm_epsilon", layer_norm_epsilon)
    head_size = hidden_dim // num_heads if head_size is None else head_size
    head_size = check_int(owner, "head_size", head_size, 1)
    if head_size * num_heads != hidden_dim:
        # The output projection returns heads * head_size features to the residual stream.
        raise ValueError(
            f"{owner}: `num_heads * head_size` must equal `hidden_dim`, got {num_heads} * "
            f"{head_size} and hidden_dim={hidden_dim}."
        )
    check_allocation(owner, "token embedding", [(vocabulary_size, hidden_dim)])
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    segment_ids = keras.Input((None,), dtype="int32", name="segment_ids")
    padding_mask = _PaddingFromIds(pad_id, dtype=dtype, name="padding_mask")(token_ids)
    tokens = keras.layers.Embedding(
        vocabulary_size,
        hidden_dim,
        embeddings_initializer=_initializer(),
        dtype=dtype,
        name="token_embedding",
    )(token_ids)
    segments = keras.layers.Embedding(
        num_segments,
        hidden_dim,
        embeddings_initializer=_initializer(),
        dtype=dtype,
        name="segment_embedding",
    )(segment_ids)
    x = keras.layers.Add(dtype=dtype, name="embeddings_add")([tokens, segments])
    x = keras.layers.RMSNormalization(
        epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_norm"
    )(x)
    x = keras.layers.Dropout(dropout, dtype=dtype, name="embeddings_dropout")(x)
    rotary = RotaryPositions(max_wavelength=max_wavelength, interleaved=True)
    for index in range(num_layers):
        x = RelativeTransformerEncoder(
            intermediate_dim,
            num_heads,
            key_dim=head_size,
            dropout=dropout,
            activation=activation,
            layer_norm_epsilon=layer_norm_epsilon,
            layer_norm="rms",
            kernel_initializer=_initializer(),
            use_bias=use_bias,
            relative=None,
            rotary=rotary,
            dtype=dtype,
            remat=remat,
            name=f"encoder_block_{index}",
        )(x, padding_mask=padding_mask)
    # One output name whatever the depth (the export's, docs/guides/export.md).
    x = keras.layers.Identity(dtype=dtype, name="sequence_output")(x)
    inputs = {"token_ids": token_ids, "segment_ids": segment_ids}
    return ZooFunctional(inputs, x, name=name, dtype=dtype)


# --------------------------------------------------------------------------- configurations


@dataclasses.dataclass(frozen=True, kw_only=True)
class RoformerV2Config(ZooConfig):
    """A named RoFormer v2: :func:`build_roformer_v2`'s arguments, with its defaults."""

    vocabulary_size: int = 12000
    num_layers: int = 12
    num_heads: int = 12
    hidden_dim: int = 768
    intermediate_dim: int = 3072
    head_size: int | None = None
    use_bias: bool = False
    activation: Any = "relu"
    dropout: float = 0.1
    num_segments: int = 2
    max_wavelength: float = 10000.0
    layer_norm_epsilon: float = 1e-7
    pad_id: int = 0
    remat: bool = False
    name: str = "roformer_v2"

    def __post_init__(self) -> None:
        super().__post_init__()
        who = type(self).__name__
        for field in ("vocabulary_size", "num_layers", "num_heads", "hidden_dim"):
            check_int(who, field, getattr(self, field), 1)


#: Every registered RoFormer v2: zoo name -> :class:`RoformerV2Config`.
CONFIGS: dict[str, RoformerV2Config] = by_name([
    RoformerV2Config(zoo_name="roformer_v2_small", name="roformer_v2_small", num_layers=6,
                     num_heads=6, hidden_dim=384, intermediate_dim=1536),
    RoformerV2Config(zoo_name="roformer_v2_base", name="roformer_v2_base"),
    RoformerV2Config(zoo_name="roformer_v2_large", name="roformer_v2_large", num_layers=24,
                     num_heads=16, hidden_dim=1024, intermediate_dim=4096),
])  # fmt: skip

for _name, _config in CONFIGS.items():
    register_model(
        _name,
        build_roformer_v2,
        family="roformer_v2",
        config=_config,
        description=(
            f"RoFormer v2 encoder, {_config.num_layers} layers, d {_config.hidden_dim}, "
            f"{_config.num_heads} heads, rotary positions (interleaved pairs)"
        ),
        reference=REFERENCE,
    )
