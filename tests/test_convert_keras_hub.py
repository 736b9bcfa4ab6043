"""keras-hub's T5Backbone as the outside truth for the zoo's T5: its weights (random, drawn
here so every tensor matters) copied by `convert.from_keras_hub_t5`, then the encoder output,
the decoder output and the logits compared to 1e-5 on every backend, at the small presets'
configurations (t5_small and t5_1.1_small widths, two blocks deep; the base presets at full
depth in the large stage).
The relative position buckets are compared first: keras-hub evaluates T5's log formula in
float32 on the backend, keras-posenc compares with thresholds computed once (relative_index)."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops
from keras_hub.src.models.t5.t5_multi_head_attention import T5MultiHeadAttention
from keras_hub.src.utils.keras_utils import gelu_approximate
from tiers import matrix

from keras_posenc import zoo
from keras_posenc.convert import from_keras_hub_t5
from keras_posenc.layers import relative_index
from keras_posenc.zoo.t5 import T5, query_kernel_scale

pytestmark = pytest.mark.contract

# Lengths with distances well into the log-spaced buckets (exact below 8 / 16).
SOURCE_LENGTH, TARGET_LENGTH = 40, 24


def to_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor), dtype="float64")


@pytest.mark.parametrize("bidirectional", [True, False])
def test_buckets_equal_keras_hubs_float32_formula(bidirectional):
    """Every distance up to 2,000 (16 x max_distance): the same bucket on this backend."""
    r = np.arange(-2000, 2001, dtype="int32")
    theirs = T5MultiHeadAttention._relative_position_bucket(
        ops.convert_to_tensor(r), bidirectional=bidirectional, num_buckets=32, max_distance=128
    )
    ours = relative_index.log_bucket_index(r, 32, 128, bidirectional=bidirectional)
    np.testing.assert_array_equal(ops.convert_to_numpy(ours), ops.convert_to_numpy(theirs))


def hub_backbone(name, vocabulary_size, num_layers=None, **widths):
    """A keras-hub T5Backbone with the zoo configuration ``name``'s shapes (``num_layers``
    blocks if given, ``widths`` in place of its widths) and random weights (keras-hub's own
    initialisation gives every embedding row about the same vector)."""
    config = {**zoo.get_spec(name).arguments(), **widths}
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers or config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        key_value_dim=config["key_value_dim"],
        dropout=0.1,
        # keras-hub's v1.1 presets use its tanh-approximated GELU.
        activation="relu" if config["activation"] == "relu" else gelu_approximate,
        use_gated_activation=config["gated_activation"],
        tie_embedding_weights=config["tie_embeddings"],
    )
    rng = np.random.default_rng(0)
    for weight in backbone.weights:
        shape = tuple(weight.shape)
        if "layer_norm" in weight.path:
            value = 1.0 + 0.2 * rng.standard_normal(shape)
        elif "relative_attention_bias" in weight.path:
            value = rng.standard_normal(shape)  # as large as the content logits: it matters
        elif "embeddings" in weight.path and "reverse" not in weight.path:
            value = rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[0])
            if "query_projector" in weight.path:
                # T5's scale, N(0, (d * d_kv) ** -0.5): logits of about unit size. Without
                # it they are 8 times larger, the softmaxes nearly one-hot, and float32
                # rounding alone moved outputs by up to 1.5e-4 (both implementations).
                value = value / np.sqrt(config["key_value_dim"])
        weight.assign(value.astype("float32"))
    return backbone


def ids(rng, vocabulary_size):
    source = rng.integers(2, vocabulary_size, (2, SOURCE_LENGTH)).astype("int32")
    source[:, -1] = 1  # eos
    source[1, SOURCE_LENGTH - 11 :] = 0  # the second row padded
    target_in = rng.integers(2, vocabulary_size, (2, TARGET_LENGTH)).astype("int32")
    target_in[:, 0] = 0  # the decoder start token
    return source, target_in


def hub_logits(backbone, decoder_output):
    """keras-hub's T5Seq2SeqLM head: the tied embedding after scaling by d ** -0.5 (v1.0),
    or the separate matrix (v1.1)."""
    hidden = decoder_output.astype("float64")
    embedding = backbone.token_embedding
    if backbone.tie_embedding_weights:
        return hidden * backbone.hidden_dim**-0.5 @ to_numpy(embedding.embeddings).T
    return hidden @ to_numpy(embedding.reverse_embeddings)


def compare(name, vocabulary_size, num_layers=None):
    backbone = hub_backbone(name, vocabulary_size, num_layers)
    model = from_keras_hub_t5(backbone)
    assert model.count_params() == backbone.count_params()
    source, target_in = ids(np.random.default_rng(1), vocabulary_size)
    inputs = {
        "encoder_token_ids": source,
        "encoder_padding_mask": source != 0,
        "decoder_token_ids": target_in,
        # T5's decoder is causal: no real position sees the positions after it, so the
        # zoo model's call below takes no decoder padding mask (all ones here; explicit
        # masks, either side: test_padding_masks_and_hidden_states_equal_keras_hub).
        "decoder_padding_mask": np.ones_like(target_in, bool),
    }
    expected = backbone.predict_on_batch(inputs)
    expected_logits = hub_logits(backbone, expected["decoder_sequence_output"])

    state = model.encode(source)
    decoder_output = model.decoder(
        model.token_embedding(target_in), encoder_output=state[0], encoder_mask=state[1]
    )
    logits = model.predict_on_batch({"encoder_token_ids": source, "decoder_token_ids": target_in})
    np.testing.assert_allclose(
        to_numpy(state[0]), expected["encoder_sequence_output"], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        to_numpy(decoder_output), expected["decoder_sequence_output"], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-5, atol=1e-5)
    # The comparison is not vacuous: sources, padding and positions all change the outputs.
    assert (
        np.abs(
            expected["encoder_sequence_output"][0] - expected["encoder_sequence_output"][1]
        ).max()
        > 0.1
    )
    return model


@pytest.mark.parametrize("name", ["t5_small", "t5_1.1_small"])
def test_small_presets_equal_keras_hub(name):
    # The released vocabulary (32,128 rows) adds only embedding rows, which the same
    # lookup reads; 1,000 keeps the test fast. Two blocks: the first holds the relative
    # bias table, the second reads it, and further blocks repeat the second (the six of the
    # presets compiled for over a minute per case on JAX; the large stage has full depth).
    model = compare(name, 1000, num_layers=2)
    config = zoo.get_spec(name).arguments()
    assert model.get_config()["activation"] == config["activation"]
    assert model.tie_embeddings is config["tie_embeddings"]


@pytest.mark.full
@pytest.mark.parametrize("name", ["t5_base", "t5_1.1_base"])
def test_base_presets_equal_keras_hub(name):
    # Full depth and width; 1,000 ids as in the small case (the released 32,128 only add rows
    # the same lookup reads, and took a third of the case's time in the logits).
    compare(name, 1000)


def padded_inputs(rng, vocabulary_size, side):
    """keras-hub's four inputs: a full and a shorter source (eos last) and target (the start
    token first), padded with 0 on ``side``, with their masks."""
    inputs = {}
    for name, length, short, first, last in (
        ("encoder", SOURCE_LENGTH, SOURCE_LENGTH - 11, None, 1),
        ("decoder", TARGET_LENGTH, TARGET_LENGTH - 9, 0, None),
    ):
        ids = np.zeros((2, length), "int32")
        mask = np.zeros((2, length), bool)
        for row, size in enumerate((length, short)):
            tokens = rng.integers(2, vocabulary_size, size)
            if first is not None:
                tokens[0] = first
            if last is not None:
                tokens[-1] = last
            where = slice(0, size) if side == "right" else slice(length - size, length)
            ids[row, where], mask[row, where] = tokens, True
        inputs[f"{name}_token_ids"], inputs[f"{name}_padding_mask"] = ids, mask
    return inputs


# Small widths (the full ones are compared above); the configuration is the variant.
WIDTHS = {"hidden_dim": 64, "intermediate_dim": 128, "num_heads": 4, "key_value_dim": 16}


@pytest.mark.parametrize(
    *matrix(
        "name, side",
        [("t5_small", "left"), ("t5_small", "right"), ("t5_1.1_small", "left"),
         ("t5_1.1_small", "right")],
        keep=(0, 1),
    )
)  # fmt: skip
def test_padding_masks_and_hidden_states_equal_keras_hub(name, side):
    """keras-hub's explicit masks, padding on either side: `hidden_states` and the logits
    equal T5Backbone's outputs, every encoder position and every real decoder position."""
    backbone = hub_backbone(name, 100, num_layers=2, **WIDTHS)
    model = from_keras_hub_t5(backbone)
    inputs = padded_inputs(np.random.default_rng(2), 100, side)
    expected = backbone.predict_on_batch(inputs)
    states = model.hidden_states(inputs)
    logits = model.predict_on_batch(inputs)
    real = inputs["decoder_padding_mask"]
    if side == "right":
        # A padded decoder position still sees the real ones before it: equal there too.
        real = np.ones_like(real)
    # Left: a padded decoder position sees no key; our attention gives it zeros, keras-hub's
    # additive -1e9 about the mean of all values, so only real positions compare.
    pairs = [
        (states["encoder_sequence_output"], expected["encoder_sequence_output"]),
        (
            to_numpy(states["decoder_sequence_output"])[real],
            expected["decoder_sequence_output"][real],
        ),
        (logits[real], hub_logits(backbone, expected["decoder_sequence_output"])[real]),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(to_numpy(ours), theirs, rtol=1e-5, atol=1e-5)
    assert np.isfinite(logits).all()
    # The masks matter: keras-hub without them gives other states at real positions.
    unmasked = backbone.predict_on_batch(
        {key: np.ones_like(value) if key.endswith("mask") else value
         for key, value in inputs.items()}
    )  # fmt: skip
    source_real = inputs["encoder_padding_mask"]
    difference = unmasked["encoder_sequence_output"] - expected["encoder_sequence_output"]
    assert np.abs(difference[source_real]).max() > 0.1


def test_query_kernel_carries_the_scale():
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16
    )
    model = from_keras_hub_t5(backbone)
    theirs = to_numpy(backbone.encoder_transformer_layers[0].self_attention.query_projector.kernel)
    ours = to_numpy(model.encoder.blocks[0].self_attention.query_dense.kernel)
    np.testing.assert_array_equal(ours.reshape(8, 8), theirs * query_kernel_scale(4))
    assert query_kernel_scale(4) == 2.0


def test_bad_backbones():
    with pytest.raises(TypeError, match="from_keras_hub_t5: `backbone` must be a keras_hub"):
        from_keras_hub_t5(keras.Sequential([keras.layers.Dense(2)]))
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=20, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        activation=lambda x: x,
    )  # fmt: skip
    with pytest.raises(ValueError, match="has no Keras name"):
        from_keras_hub_t5(backbone)
    assert isinstance(from_keras_hub_t5(backbone.__class__(20, 1, 2, 8, 16)), T5)
