"""RelativeTransformerEncoder / Decoder: numpy reference, masks, causality, decoding, checks."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers import ClipPositions, LogBuckets, RotaryPositions
from keras_posenc.layers.relative_transformer import RelativeTransformerEncoder
from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder
from reference.relative_attention import causal_mask, clip_index_matrix
from reference.relative_index import relative_positions, t5_relative_position_bucket
from reference.relative_transformer import decoder_block, encoder_block

pytestmark = pytest.mark.contract

ATOL = 1e-5
HIDDEN, HEADS, HEAD_DIM = 8, 2, 4


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def inputs(rng, batch, length, features=HIDDEN):
    return rng.standard_normal((batch, length, features)).astype("float32")


def randomize(layer, seed=0):
    """Gives every weight (biases and layer-norm scales included) random values."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))


def attention_weights(attention, relative_tables=True):
    """An attention sublayer's weights under the reference's names."""
    weights = {}
    for name in ("query", "key", "value", "output"):
        dense = getattr(attention, f"{name}_dense")
        weights[f"{name}_kernel"] = to_numpy(dense.kernel)
        weights[f"{name}_bias"] = to_numpy(dense.bias) if dense.bias is not None else None
    if relative_tables:
        for name in ("relative_keys", "relative_values", "relative_bias"):
            table = getattr(attention, name)
            if table is not None:
                weights[name] = to_numpy(table.embeddings)
    return weights


def norm_weights(norm):
    return to_numpy(norm.gamma), to_numpy(norm.beta)


def block_weights(layer):
    intermediate, output = layer.feedforward_intermediate_dense, layer.feedforward_output_dense
    weights = {
        "self_attention": attention_weights(layer.self_attention),
        "self_attention_norm": norm_weights(layer.self_attention_layer_norm),
        "feedforward_norm": norm_weights(layer.feedforward_layer_norm),
        "feedforward": {
            "intermediate_kernel": to_numpy(intermediate.kernel),
            "intermediate_bias": to_numpy(intermediate.bias) if layer.use_bias else None,
            "output_kernel": to_numpy(output.kernel),
            "output_bias": to_numpy(output.bias) if layer.use_bias else None,
        },
    }
    if getattr(layer, "cross_attention", None) is not None:
        weights["cross_attention"] = attention_weights(layer.cross_attention, False)
        weights["cross_attention_norm"] = norm_weights(layer.cross_attention_layer_norm)
    return weights


def _arguments(kwargs):
    """The test blocks' arguments: a ClipPositions(3) table unless told otherwise."""
    defaults = {"intermediate_dim": 12, "num_heads": HEADS}
    if kwargs.get("relative", "keys_values") is not None:
        defaults["position"] = ClipPositions(3)
    return {**defaults, **kwargs}


def encoder(x, seed=0, **kwargs):
    kwargs = _arguments(kwargs)
    layer = RelativeTransformerEncoder(**kwargs)
    layer(x)
    randomize(layer, seed)
    return layer


def decoder(x, encoded=None, seed=0, **kwargs):
    kwargs = _arguments(kwargs)
    layer = RelativeTransformerDecoder(**kwargs)
    layer(x) if encoded is None else layer(x, encoded)
    randomize(layer, seed)
    return layer


def assert_close(actual, expected, atol=ATOL, what=""):
    actual = to_numpy(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    difference = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert difference <= atol, f"{what}: differs from the reference by {difference:.3g}"


PADDING = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)


# --------------------------------------------------------------------------- reference


@pytest.mark.parametrize("relative", ["keys_values", "keys", "bias"])
@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_matches_reference(relative, normalize_first, rng):
    x = inputs(rng, 2, 6)
    activation = "gelu" if relative == "keys" else "relu"
    layer = encoder(x, relative=relative, normalize_first=normalize_first, activation=activation)
    output = layer(x, padding_mask=PADDING)
    # Padded tokens are masked as keys and as queries (their rows attend to nothing).
    mask = PADDING[:, :, None] & PADDING[:, None, :]
    expected = encoder_block(
        x,
        block_weights(layer),
        relative,
        clip_index_matrix(6, 6, 3),
        normalize_first,
        activation=activation,
        mask=mask,
    )
    assert_close(output, expected, what=f"{relative} encoder, normalize_first={normalize_first}")


def test_encoder_attention_mask_and_bias_match_reference(rng):
    x = inputs(rng, 2, 6)
    attention_mask = rng.random((2, 6, 6)) > 0.3
    attention_mask[:, np.arange(6), np.arange(6)] = True  # no fully masked row
    bias = rng.standard_normal((1, HEADS, 6, 6)).astype("float32")
    layer = encoder(x, relative="bias", position=LogBuckets(6, 8))
    output, scores = layer(
        x, attention_mask=attention_mask, attention_bias=bias, return_attention_scores=True
    )
    index = t5_relative_position_bucket(relative_positions(6, 6), True, 6, 8)
    expected = encoder_block(
        x, block_weights(layer), "bias", index, False, mask=attention_mask, attention_bias=bias
    )
    assert_close(output, expected, what="encoder with attention_mask and attention_bias")
    assert tuple(scores.shape) == (2, HEADS, 6, 6)
    np.testing.assert_allclose(to_numpy(scores)[~attention_mask[:, None].repeat(HEADS, 1)], 0.0)


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_with_cross_attention_matches_reference(normalize_first, rng):
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)  # another length
    decoder_padding = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], bool)
    encoder_padding = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    layer = decoder(
        x,
        encoded,
        relative="bias",
        position="t5_decoder" if normalize_first else LogBuckets(6, 8, bidirectional=False),
        normalize_first=normalize_first,
    )
    output = layer(
        x,
        encoded,
        decoder_padding_mask=decoder_padding,
        encoder_padding_mask=encoder_padding,
    )
    self_mask = causal_mask(6, 6) & decoder_padding[:, :, None] & decoder_padding[:, None, :]
    # T5's causal buckets, by name (32 of them up to 128) or given.
    buckets = (32, 128) if normalize_first else (6, 8)
    index = t5_relative_position_bucket(relative_positions(6, 6), False, *buckets)
    expected = decoder_block(
        x,
        encoded,
        block_weights(layer),
        "bias",
        index,
        normalize_first,
        self_mask=self_mask,
        cross_mask=encoder_padding[:, None, :],
    )
    assert_close(output, expected, what=f"decoder, normalize_first={normalize_first}")


def test_decoder_only_matches_reference(rng):
    x = inputs(rng, 2, 6)
    layer = decoder(x, relative="keys_values", normalize_first=True)
    expected = decoder_block(
        x,
        None,
        block_weights(layer),
        "keys_values",
        clip_index_matrix(6, 6, 3),
        True,
        self_mask=causal_mask(6, 6),
    )
    assert_close(layer(x), expected, what="decoder-only")


# --------------------------------------------------------------------------- masks, causality


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_padding_invariance(normalize_first, rng):
    x = inputs(rng, 2, 6)
    layer = encoder(x, normalize_first=normalize_first)
    layer_checks.check_padding_invariance(layer, x, PADDING, mask_argument="padding_mask")


def test_decoder_padding_invariance(rng):
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)
    layer = decoder(x, encoded)
    mask = np.array([[1, 1, 0, 1, 1, 0], [0, 1, 1, 1, 1, 1]], bool)
    layer_checks.check_padding_invariance(
        layer, [x, encoded], mask, mask_argument="decoder_padding_mask", sequence_inputs=[0]
    )


def test_encoder_padding_is_ignored_by_cross_attention(rng):
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)
    layer = decoder(x, encoded)
    encoder_padding = np.array([[1, 1, 1, 0], [1, 0, 1, 1]], bool)
    layer_checks.check_padding_invariance(
        layer,
        [x, encoded],
        encoder_padding,
        mask_argument="encoder_padding_mask",
        output_mask=np.ones((2, 6), bool),  # every decoder position must be unaffected
        sequence_inputs=[1],
    )


@pytest.mark.parametrize("with_encoder", [False, True], ids=["decoder_only", "cross"])
@pytest.mark.parametrize("relative", ["keys_values", "bias"])
def test_decoder_causal_no_leak(relative, with_encoder, rng):
    x = inputs(rng, 2, 6)
    encoded = inputs(rng, 2, 4) if with_encoder else None
    layer = decoder(x, encoded, relative=relative, rotary=RotaryPositions(max_wavelength=100))
    layer_inputs = [x] if encoded is None else [x, encoded]
    layer_checks.check_causal(layer, layer_inputs, sequence_inputs=[0])


def test_fully_padded_sequence_gives_finite_output(rng):
    x = inputs(rng, 2, 6)
    layer = encoder(x)
    padding = np.array([[0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]], bool)
    assert np.isfinite(to_numpy(layer(x, padding_mask=padding))).all()


def test_encoder_reads_keras_mask_in_functional_model(rng):
    tokens = np.array([[3, 4, 5, 0, 0, 0], [1, 2, 3, 4, 5, 0]])
    embedding = keras.layers.Embedding(10, HIDDEN, mask_zero=True)
    block = RelativeTransformerEncoder(12, HEADS, position=ClipPositions(2), normalize_first=True)
    token_input = keras.Input((None,), dtype="int32")
    encoded = block(embedding(token_input))
    # GlobalAveragePooling1D averages over the positions the output's Keras mask marks real.
    pooled = keras.layers.GlobalAveragePooling1D()(encoded)
    model = keras.Model(token_input, [encoded, pooled])

    real = tokens != 0
    vectors = to_numpy(embedding.embeddings)[tokens].astype("float32")
    explicit = to_numpy(block(vectors, padding_mask=real))
    output, pooled_output = (to_numpy(t) for t in model(tokens))
    np.testing.assert_allclose(output[real], explicit[real], atol=ATOL)
    expected_pooled = np.stack([explicit[b][real[b]].mean(axis=0) for b in range(2)])
    np.testing.assert_allclose(pooled_output, expected_pooled, atol=ATOL)
    unmasked = to_numpy(block(vectors))
    assert np.max(np.abs(unmasked[real] - explicit[real])) > 1e-3, "the mask must matter"


def test_decoder_reads_keras_masks_in_functional_model(rng):
    source = np.array([[3, 4, 0, 0], [1, 2, 3, 4]])
    target = np.array([[7, 8, 0, 0, 0, 0], [1, 9, 2, 3, 4, 0]])
    source_embedding = keras.layers.Embedding(10, HIDDEN, mask_zero=True)
    target_embedding = keras.layers.Embedding(10, HIDDEN, mask_zero=True)
    block = RelativeTransformerDecoder(12, HEADS, position=ClipPositions(2))
    source_input = keras.Input((None,), dtype="int32")
    target_input = keras.Input((None,), dtype="int32")
    decoded = block(target_embedding(target_input), source_embedding(source_input))
    model = keras.Model([target_input, source_input], decoded)

    source_vectors = to_numpy(source_embedding.embeddings)[source].astype("float32")
    target_vectors = to_numpy(target_embedding.embeddings)[target].astype("float32")
    explicit = to_numpy(
        block(
            target_vectors,
            source_vectors,
            decoder_padding_mask=target != 0,
            encoder_padding_mask=source != 0,
        )
    )
    output = to_numpy(model([target, source]))
    real = target != 0
    np.testing.assert_allclose(output[real], explicit[real], atol=ATOL)
    unmasked = to_numpy(block(target_vectors, source_vectors))
    assert np.max(np.abs(unmasked[real] - explicit[real])) > 1e-3, "the masks must matter"


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize(
    "relative, rotary, padded",
    [("keys_values", None, False), ("keys", 100, False), ("bias", None, True)],
)
def test_incremental_decoding_equals_full(relative, rotary, padded, rng):
    length = 6
    x = inputs(rng, 2, length)
    rotary = None if rotary is None else RotaryPositions(max_wavelength=rotary)
    layer = decoder(x, relative=relative, rotary=rotary, normalize_first=True)
    mask = np.array([[1, 1, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]], bool) if padded else None
    full = to_numpy(layer(x, decoder_padding_mask=mask))
    cache = np.zeros((2, 2, length, HEADS, HEAD_DIM), "float32")
    steps = []
    for t in range(length):
        output, cache = layer(
            x[:, t : t + 1],
            decoder_padding_mask=mask,  # with a cache: the mask of every cached position
            self_attention_cache=cache,
            self_attention_cache_update_index=t,
        )
        steps.append(to_numpy(output))
    steps = np.concatenate(steps, axis=1)
    real = np.ones((2, length), bool) if mask is None else mask
    np.testing.assert_allclose(steps[real], full[real], atol=ATOL)


def test_incremental_decoding_with_cross_attention_cache(rng):
    length = 6
    x, encoded = inputs(rng, 2, length), inputs(rng, 2, 4)
    encoder_padding = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
    layer = decoder(x, encoded, relative="keys_values")
    full = to_numpy(layer(x, encoded, encoder_padding_mask=encoder_padding))
    cache = np.zeros((2, 2, length, HEADS, HEAD_DIM), "float32")
    cross_cache = np.zeros((2, 2, 4, HEADS, HEAD_DIM), "float32")
    steps = []
    for t in range(length):
        # The first step computes the cross cache (index 0); later steps reuse it
        # (index None), so the encoder values passed then are ignored.
        output, cache, cross_cache = layer(
            x[:, t : t + 1],
            encoded if t == 0 else np.zeros_like(encoded),
            encoder_padding_mask=encoder_padding,
            self_attention_cache=cache,
            self_attention_cache_update_index=t,
            cross_attention_cache=cross_cache,
            cross_attention_cache_update_index=0 if t == 0 else None,
        )
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL)
    # The cache `cross_attention_cache` computes once per source (padding zeroed) is the
    # one the first step wrote; a non-finite value in the padding does not reach it.
    poisoned = np.where(encoder_padding[..., None], encoded, np.nan).astype("float32")
    computed = to_numpy(layer.cross_attention_cache(poisoned, encoder_padding))
    written = layer(
        x[:, :1],
        encoded,
        encoder_padding_mask=encoder_padding,
        self_attention_cache=np.zeros((2, 2, length, HEADS, HEAD_DIM), "float32"),
        self_attention_cache_update_index=0,
        cross_attention_cache=np.zeros((2, 2, 4, HEADS, HEAD_DIM), "float32"),
        cross_attention_cache_update_index=0,
    )[2]
    np.testing.assert_allclose(computed, to_numpy(written), atol=ATOL)
    with pytest.raises(ValueError, match="cross_attention_cache` needs a block built with"):
        decoder(x, None, relative="keys").cross_attention_cache(encoded)


def test_decoding_step_inside_a_compiled_function(rng):
    """Steps with a tensor cache index run in a compiled graph (as in a generation loop)."""
    x = inputs(rng, 2, 6)
    layer = decoder(x, relative="bias", position=LogBuckets(6, 8, bidirectional=False))
    full = to_numpy(layer(x))
    token = keras.Input((1, HIDDEN), batch_size=2)
    cache_input = keras.Input((2, 6, HEADS, HEAD_DIM), batch_size=2)
    index = keras.Input((), batch_size=2, dtype="int32")  # the same index for every row
    output, new_cache = layer(
        token, self_attention_cache=cache_input, self_attention_cache_update_index=index[0]
    )
    step_model = keras.Model([token, cache_input, index], [output, new_cache])
    cache = np.zeros((2, 2, 6, HEADS, HEAD_DIM), "float32")
    for t in range(6):
        output, cache = step_model.predict_on_batch(
            [x[:, t : t + 1], cache, np.full((2,), t, "int32")]
        )
        np.testing.assert_allclose(to_numpy(output)[:, 0], full[:, t], atol=ATOL)


# --------------------------------------------------------------------------- standard checks


@pytest.mark.parametrize(
    "make_kwargs",
    [
        {"relative": "keys_values"},
        {"relative": "bias", "position": LogBuckets(6, 2), "normalize_first": True},
    ],
    ids=["encoder_post_norm", "encoder_pre_norm_bias"],
)
def test_encoder_standard_checks(make_kwargs, rng):
    x = inputs(rng, 2, 6)

    def make_layer():
        # use_bias=False: a key-projection bias adds q_i . b to every logit of query
        # i, which the softmax cancels, so its gradient is structurally zero (see
        # test_only_key_biases_get_no_gradient) and the training check would fail.
        return RelativeTransformerEncoder(
            12, HEADS, use_bias=False, dropout=0.1, **{"position": ClipPositions(2), **make_kwargs}
        )

    layer_checks.run_standard_checks(make_layer, x)


def test_decoder_standard_checks(rng):
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)

    def make_layer():
        # use_bias=False for the same reason as in the encoder (key biases of the
        # self- and cross-attention get no gradient).
        return RelativeTransformerDecoder(
            12,
            HEADS,
            use_bias=False,
            dropout=0.1,
            position=ClipPositions(2),
            rotary=RotaryPositions(max_wavelength=100),
        )

    layer_checks.run_standard_checks(make_layer, [x, encoded])


@pytest.mark.parametrize("block", ["encoder", "decoder"])
def test_only_key_biases_get_no_gradient(block, rng):
    """With biases, one SGD step moves every weight except the attention key biases.

    Why use_bias=False in the standard checks: the key biases' gradient is zero
    (up to rounding) because the softmax is invariant to adding the same
    ``q_i . b_k`` to all logits of a row.
    """
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)
    layer_inputs = [x] if block == "encoder" else [x, encoded]
    layer_class = RelativeTransformerEncoder if block == "encoder" else RelativeTransformerDecoder
    layer = layer_class(12, HEADS, position=ClipPositions(2), bias_initializer="random_normal")
    wrapper = layer_checks._wrap(layer, layer_inputs, None)
    outputs = layer_checks.floating_outputs(wrapper(layer_inputs))
    coefficients = [rng.standard_normal(o.shape).astype("float32") for o in outputs]
    model = layer_checks.LinearLoss(wrapper, coefficients)
    before = [ops.convert_to_numpy(w).copy() for w in layer.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=lambda _, loss: ops.mean(loss))
    model.train_on_batch(layer_inputs, np.zeros((2,), "float32"))
    moves = {
        w.path: float(np.max(np.abs(ops.convert_to_numpy(w) - old)))
        for w, old in zip(layer.trainable_weights, before)
    }
    key_biases = {path for path in moves if path.split("/")[-2:] == ["key", "bias"]}
    expected_key_biases = 1 if block == "encoder" else 2
    assert len(key_biases) == expected_key_biases, sorted(moves)
    assert all(moves[path] < 1e-6 for path in key_biases), moves
    stuck = [path for path, move in moves.items() if path not in key_biases and move < 1e-5]
    assert not stuck, f"weights that barely moved: {stuck}"


def test_mixed_precision_close_to_float32(rng):
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)
    layer = decoder(x, encoded)
    expected = to_numpy(layer(x, encoded))
    low = RelativeTransformerDecoder.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    low(x, encoded)
    low.set_weights(layer.get_weights())
    actual = to_numpy(low(x, encoded))
    assert np.isfinite(actual).all()
    # Post-norm outputs are of order 1; bfloat16 keeps 8 bits of mantissa, and
    # three sub-layers compound the rounding: agreement to about 0.1.
    np.testing.assert_allclose(actual, expected, atol=1.5e-1, rtol=5e-2)


def test_fit_reduces_loss_on_a_copy_task():
    """A one-block encoder-decoder learns to copy a short sequence (teacher forcing)."""
    rng = np.random.default_rng(0)
    vocabulary, length, samples = 6, 6, 32
    source = rng.integers(1, vocabulary, size=(samples, length))
    target_in = np.concatenate([np.zeros((samples, 1), int), source[:, :-1]], axis=1)  # 0: start

    source_input = keras.Input((length,), dtype="int32")
    target_input = keras.Input((length,), dtype="int32")
    embedding = keras.layers.Embedding(vocabulary, HIDDEN)
    encoded = RelativeTransformerEncoder(16, HEADS, position=ClipPositions(2))(
        embedding(source_input)
    )
    decoded = RelativeTransformerDecoder(
        16, HEADS, position=ClipPositions(2), normalize_first=True
    )(embedding(target_input), encoded)
    logits = keras.layers.Dense(vocabulary)(decoded)
    model = keras.Model([source_input, target_input], logits)
    model.compile(
        optimizer=keras.optimizers.Adam(2e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit([source, target_in], source, batch_size=8, epochs=4, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.8 * losses[0], f"loss per epoch: {losses}"


def test_config_has_every_argument():
    layer = RelativeTransformerDecoder(
        24,
        3,
        key_dim=6,
        dropout=0.2,
        activation="gelu",
        layer_norm_epsilon=1e-6,
        kernel_initializer="he_normal",
        bias_initializer="ones",
        normalize_first=True,
        use_bias=False,
        relative="bias",
        position=LogBuckets(16, 40, bidirectional=True),
        rotary=RotaryPositions(max_wavelength=500),
    )
    config = layer.get_config()
    restored = RelativeTransformerDecoder.from_config(config)
    assert restored.get_config() == config
    assert config["key_dim"] == 6 and restored.position == LogBuckets(16, 40, bidirectional=True)
    assert restored.rotary == RotaryPositions(max_wavelength=500)
    assert RelativeTransformerDecoder(8, 2).position == ClipPositions(16)  # "shaw"
    assert RelativeTransformerDecoder(8, 2, relative=None).get_config()["position"] is None
    assert tuple(restored.compute_output_shape((2, 4, 9), (2, 7, 5))) == (2, 4, 9)
    encoder_layer = RelativeTransformerEncoder(8, 2, key_dim=3)
    encoder_layer.build((None, 3, 10))
    assert tuple(encoder_layer.self_attention.query_dense.kernel.shape) == (10, 2, 3)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"intermediate_dim": 0}, ValueError, r"Encoder: `intermediate_dim` must be .*>= 1, got 0"),
        ({"num_heads": 2.0}, TypeError, r"Encoder: `num_heads` must be an integer, got 2.0"),
        ({"key_dim": 0}, ValueError, r"Encoder: `key_dim` must be an integer >= 1, got 0"),
        ({"dropout": 1.5}, ValueError, r"Encoder: `dropout` must be in \[0, 1\), got 1.5"),
        ({"layer_norm_epsilon": 0}, ValueError, r"`layer_norm_epsilon` must be a positive.*got 0"),
        ({"normalize_first": "yes"}, TypeError, r"`normalize_first` must be True or False.*'yes'"),
        ({"relative": "values"}, ValueError, r"Encoder: `relative` must be one of.*got 'values'"),
        ({"position": "nearest"}, ValueError, r"Encoder: `position` must be.*got 'nearest'"),
        ({"position": {"bad": 1}}, TypeError, r"Encoder: `position` must be"),
        ({"rotary": 10}, TypeError, r"Encoder: `rotary` must be None or a RotaryPositions"),
        ({"activation": "nope"}, ValueError, r"Encoder: `activation` must be.*got 'nope'"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        RelativeTransformerEncoder(**{"intermediate_dim": 8, "num_heads": 2, **kwargs})


def test_bad_encoder_inputs(rng):
    layer = RelativeTransformerEncoder(8, 2, name="block")
    with pytest.raises(ValueError, match=r"'block'.*`inputs` must have rank 3.*\(2, 6\)"):
        layer(np.zeros((2, 6), "float32"))
    narrow = RelativeTransformerEncoder(8, 4, name="narrow")
    with pytest.raises(ValueError, match=r"'narrow'.*last axis \(3\) must be at least `num_heads`"):
        narrow(np.zeros((2, 6, 3), "float32"))
    rotary = RelativeTransformerEncoder(
        8, 2, rotary=RotaryPositions(max_wavelength=10), name="rotary"
    )
    with pytest.raises(ValueError, match=r"'rotary'.*even `key_dim`, got 3"):
        rotary(np.zeros((2, 6, 6), "float32"))
    x = inputs(rng, 2, 6)
    layer(x)
    with pytest.raises(ValueError, match=r"'block'.*`inputs` must be 8.*got shape \(2, 6, 6\)"):
        layer(np.zeros((2, 6, 6), "float32"))
    with pytest.raises(ValueError, match=r"'block'.*`padding_mask` must have rank 2.*\(2, 1, 6\)"):
        layer(x, padding_mask=np.ones((2, 1, 6), bool))
    with pytest.raises(ValueError, match=r"'block'.*`attention_mask` must have rank 3.*\(6, 6\)"):
        layer(x, attention_mask=np.ones((6, 6), bool))


def test_bad_decoder_calls(rng):
    x, encoded = inputs(rng, 2, 6), inputs(rng, 2, 4)
    cache = np.zeros((2, 2, 6, HEADS, HEAD_DIM), "float32")
    only = RelativeTransformerDecoder(8, HEADS, name="gpt")
    only(x)
    with pytest.raises(ValueError, match=r"'gpt'.*built without cross-attention.*must be None"):
        only(x, encoded)
    with pytest.raises(ValueError, match=r"'gpt'.*`cross_attention_cache` must be None"):
        only(x[:, :1], self_attention_cache=cache, cross_attention_cache=cache)
    cross = RelativeTransformerDecoder(8, HEADS, name="seq2seq")
    cross(x, encoded)
    with pytest.raises(ValueError, match=r"'seq2seq'.*built with cross-attention.*got None"):
        cross(x)
    with pytest.raises(ValueError, match=r"'seq2seq'.*`cross_attention_cache` needs `self_att"):
        cross(x, encoded, cross_attention_cache=cache)
    pattern = r"'seq2seq'.*`encoder_sequence` must be 8.*got shape \(2, 4, 5\)"
    with pytest.raises(ValueError, match=pattern):
        cross(x, np.zeros((2, 4, 5), "float32"))
    with pytest.raises(ValueError, match=r"'seq2seq'.*`encoder_padding_mask` must have rank 2"):
        cross(x, encoded, encoder_padding_mask=np.ones((3,), bool))


def test_query_block_size_reaches_the_self_attention(rng):
    x = inputs(rng, 2, 6)
    whole = encoder(x, relative="keys_values")
    blocked = encoder(x, relative="keys_values", query_block_size=4)
    blocked.set_weights(whole.get_weights())
    assert blocked.self_attention.query_block_size == 4
    assert blocked.get_config()["query_block_size"] == 4
    expected = ops.convert_to_numpy(whole(x, padding_mask=PADDING))
    assert_close(blocked(x, padding_mask=PADDING), expected, what="blocked")
    with pytest.raises(ValueError, match="query_block_size"):
        RelativeTransformerEncoder(8, 2, query_block_size=0)


def test_relative_logits_reach_the_self_attention(rng):
    # The Music Transformer's skew, chosen on the block: the same outputs as the gather.
    x = inputs(rng, 2, 6)
    clip = ClipPositions(max_distance=8)
    gathered = decoder(x, None, relative="keys", position=clip, relative_logits="gather")
    skewed = decoder(x, None, relative="keys", position=clip, relative_logits="skew")
    skewed.set_weights(gathered.get_weights())
    assert skewed.self_attention.relative_logits == "skew"
    assert skewed.get_config()["relative_logits"] == "skew"
    assert_close(skewed(x), ops.convert_to_numpy(gathered(x)), what="skew")
    with pytest.raises(ValueError, match="Decoder: relative_logits='skew' needs"):
        RelativeTransformerDecoder(8, 2, relative="bias", relative_logits="skew")
    with pytest.raises(ValueError, match="Encoder: `relative_logits` must be one of"):
        RelativeTransformerEncoder(8, 2, relative_logits="shift")
