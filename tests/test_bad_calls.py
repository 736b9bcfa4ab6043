"""Calls that gave a raw backend error, or a result, where one clear error is due
(hardening, round two): integer features, an attention bias of the wrong shape or
kind, and token ids outside a zoo model's vocabulary or position table in a direct
call or ``predict`` (JAX's gather clipped them and returned logits)."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_posenc import layers
from keras_posenc.zoo.convs2s import ConvS2S, ConvS2SLanguageModel

pytestmark = pytest.mark.contract


def tiny_convs2s() -> ConvS2S:
    keras.utils.set_random_seed(0)
    return ConvS2S(
        12,
        12,
        embed_dim=8,
        encoder_layers=[(8, 3)],
        decoder_layers=[(8, 3)],
        decoder_out_embed_dim=8,
        max_source_positions=16,
        max_target_positions=32,
        dropout=0.0,
    )


# Each feature-taking layer family, called with int32 features: PyTorch failed inside
# EinsumDense, TensorFlow inside AddV2 or Sigmoid, JAX returned or failed by layer.
INTEGER_FEATURES = {
    "MultiHeadRelativeAttention": (lambda: layers.MultiHeadRelativeAttention(2, 8), 2, "query"),
    "RelativeTransformerEncoder": (lambda: layers.RelativeTransformerEncoder(32, 2), 1, "inputs"),
    "MUSEEncoderLayer": (lambda: layers.MUSEEncoderLayer(32, 2), 1, "inputs"),
    "GLUConv1D": (lambda: layers.GLUConv1D(16, 3), 1, "inputs"),
}  # fmt: skip


def test_integer_features_are_refused_by_every_layer_family():
    ints = np.ones((2, 5, 16), "int32")
    for name, (make, arity, argument) in INTEGER_FEATURES.items():
        expected = (
            rf"{name}\('.*'\): `{argument}` must hold floating-point features, got dtype int32"
        )
        with pytest.raises(TypeError, match=expected):
            make()(*[ints] * arity)


def test_attention_bias_of_a_wrong_shape_or_kind_is_named():
    attention = layers.MultiHeadRelativeAttention(2, 4, relative="bias")
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    expected = (
        r"`attention_bias` must have shape \(batch, num_heads, q_len, k_len\) = \(2, 2, 5, 5\)"
    )
    with pytest.raises(ValueError, match=expected + r" \(or 1 on an axis"):
        attention(x, x, attention_bias=np.zeros((2, 3, 7), "float32"))
    with pytest.raises(ValueError, match=expected + r" \(rank at most 4\)"):
        attention(x, x, attention_bias=np.zeros((1, 2, 2, 5, 5), "float32"))
    with pytest.raises(TypeError, match="`attention_bias` must be an additive float bias"):
        attention(x, x, attention_bias=np.ones((5, 5), bool))
    # Broadcasting shapes still work, and equal the full bias.
    bias = np.random.default_rng(1).normal(size=(5, 5)).astype("float32")
    broadcast = keras.ops.convert_to_numpy(attention(x, x, attention_bias=bias))
    full = np.broadcast_to(bias, (2, 2, 5, 5))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(attention(x, x, attention_bias=full)), broadcast, atol=1e-6
    )


def test_token_ids_outside_the_model_are_refused_in_direct_calls_and_predict():
    model = tiny_convs2s()
    good = np.full((1, 4), 3, "int32")

    def inputs(source=good, target=good):
        return {"encoder_token_ids": source, "decoder_token_ids": target}

    vocabulary = r"holds token ids outside the vocabulary \[0, 12\): e.g. "
    cases = [
        (inputs(source=np.full((1, 4), 50, "int32")), "`encoder_token_ids` " + vocabulary + "50"),
        (inputs(source=np.full((1, 4), -1, "int32")), "`encoder_token_ids` " + vocabulary + "-1"),
        (inputs(target=np.full((1, 4), 12, "int32")), "`decoder_token_ids` " + vocabulary + "12"),
        (
            inputs(source=np.full((1, 17), 3, "int32")),
            "`encoder_token_ids` has 17 positions, more than the model's max_source_length = 16",
        ),
        (
            inputs(target=np.full((1, 33), 3, "int32")),
            "`decoder_token_ids` has 33 positions, more than the model's max_target_length = 32",
        ),
    ]
    for given, expected in cases:
        with pytest.raises(ValueError, match=r"ConvS2S\('.*'\): " + expected):
            model(given)
        with pytest.raises(ValueError, match=expected):
            model.predict(given, verbose=0)
    # Tensors are read as well as arrays; good ids still give logits.
    with pytest.raises(ValueError, match=vocabulary):
        model(inputs(source=keras.ops.convert_to_tensor(np.full((1, 4), 50, "int32"))))
    assert tuple(model(inputs()).shape) == (1, 4, 12)

    keras.utils.set_random_seed(0)
    lm = ConvS2SLanguageModel(13, embed_dim=8, decoder_layers=[(8, 3)], decoder_out_embed_dim=8)
    for given in (np.full((1, 4), 13, "int32"), {"token_ids": np.full((1, 4), 13, "int32")}):
        with pytest.raises(ValueError, match=r"`token_ids` holds token ids outside the vocabulary"):
            lm(given)
    assert tuple(lm(np.full((1, 4), 5, "int32")).shape) == (1, 4, 13)
