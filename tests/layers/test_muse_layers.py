"""MUSE encoder and decoder blocks against numpy references; masks, causality, decoding,
Keras conventions and errors; the dynamic convolutions' weight dropout."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.muse import MUSEAttention, MUSEDecoderLayer, MUSEEncoderLayer
from reference.muse import muse_attention, muse_decoder_layer, muse_encoder_layer

pytestmark = pytest.mark.contract

ATOL = 1e-5
HEADS, HEAD_DIM = 2, 2
CHANNELS = HEADS * HEAD_DIM
FFN = 6
KERNELS = {"static": (1, 3), "dynamic": (3, 5)}

# (batch 2, length 6 / source length 5), True = real token.
TARGET_PADDING = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
SOURCE_PADDING = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], bool)
EMPTY_SOURCE = np.array([[0, 0, 0, 0, 0], [1, 1, 0, 0, 0]], bool)


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def normal(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def randomize(layer, seed=0):
    """Random values in every weight (biases, gate and layer norm included)."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))


def _bias(dense):
    return None if dense.bias is None else to_numpy(dense.bias)


def attention_weights(layer):
    weights = {
        "wq": to_numpy(layer.query_dense.kernel),
        "bq": _bias(layer.query_dense),
        "wk": to_numpy(layer.key_dense.kernel),
        "bk": _bias(layer.key_dense),
        "wv": to_numpy(layer.value_dense.kernel),
        "bv": _bias(layer.value_dense),
        "gamma": None if layer.gamma is None else to_numpy(layer.gamma),
        "wo": to_numpy(layer.output_dense.kernel),
        "bo": _bias(layer.output_dense),
    }
    if layer.conv == "static":
        weights["depthwise"] = [None if w is None else to_numpy(w) for w in layer.depthwise_kernels]
        weights["pointwise"] = [(to_numpy(d.kernel), _bias(d)) for d in layer.pointwise_denses]
    else:
        weights["predictor"] = [(to_numpy(d.kernel), _bias(d)) for d in layer.kernel_predictors]
    return weights


def block_weights(layer):
    weights = {
        "attention": attention_weights(layer.self_attention),
        "fc1": (
            to_numpy(layer.feedforward_intermediate_dense.kernel),
            _bias(layer.feedforward_intermediate_dense),
        ),
        "fc2": (
            to_numpy(layer.feedforward_output_dense.kernel),
            _bias(layer.feedforward_output_dense),
        ),
        "norm": (to_numpy(layer.layer_norm.gamma), to_numpy(layer.layer_norm.beta)),
    }
    cross = getattr(layer, "cross_attention", None)
    if cross is not None:
        weights["cross"] = {
            "wq": to_numpy(cross.query_dense.kernel),
            "bq": _bias(cross.query_dense),
            "wk": to_numpy(cross.key_dense.kernel),
            "bk": _bias(cross.key_dense),
            "wv": to_numpy(cross.value_dense.kernel),
            "bv": _bias(cross.value_dense),
            "wo": to_numpy(cross.output_dense.kernel),
            "bo": _bias(cross.output_dense),
        }
    return weights


def assert_close(actual, expected, atol=ATOL, what=""):
    actual = to_numpy(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    difference = float(np.max(np.abs(actual - expected)))
    assert difference <= atol, f"{what}: differs from the reference by {difference:.3g}"


def encoder(x, conv="dynamic", seed=0, **kwargs):
    layer = MUSEEncoderLayer(FFN, HEADS, conv=conv, kernel_sizes=KERNELS[conv], **kwargs)
    layer(x)
    randomize(layer, seed)
    return layer


def decoder(x, source, conv="dynamic", seed=0, **kwargs):
    layer = MUSEDecoderLayer(FFN, HEADS, conv=conv, kernel_sizes=KERNELS[conv], **kwargs)
    layer(x, source)
    randomize(layer, seed)
    return layer


# --------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_encoder_matches_reference(conv, rng):
    x = normal(rng, 2, 6, CHANNELS)
    layer = encoder(x, conv)
    weights = block_weights(layer)
    for mask in (None, TARGET_PADDING):
        expected = muse_encoder_layer(x, weights, HEADS, conv, KERNELS[conv], mask)
        assert_close(layer(x, padding_mask=mask), expected, what=f"{conv} mask={mask is not None}")
    masked = muse_encoder_layer(x, weights, HEADS, conv, KERNELS[conv], TARGET_PADDING)
    plain = muse_encoder_layer(x, weights, HEADS, conv, KERNELS[conv])
    assert np.max(np.abs(masked - plain)[TARGET_PADDING]) > 1e-3, "the mask must matter"


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_decoder_matches_reference(conv, rng):
    """Causal self-branch, cross-attention (a source row of padding only gives zeros), FFN."""
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source, conv)
    weights = block_weights(layer)
    for mask, source_mask in ((None, None), (TARGET_PADDING, SOURCE_PADDING), (None, EMPTY_SOURCE)):
        expected = muse_decoder_layer(
            x, source, weights, HEADS, conv, KERNELS[conv], mask, source_mask
        )
        actual = layer(x, source, decoder_padding_mask=mask, encoder_padding_mask=source_mask)
        assert np.isfinite(to_numpy(actual)).all()
        assert_close(actual, expected, what=f"{conv} {mask is not None} {source_mask}")


def test_decoder_cross_attention_matters(rng):
    """The reference test can fail: the output does depend on the encoder sequence."""
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source)
    changed = to_numpy(layer(x, source + 1.0)) - to_numpy(layer(x, source))
    assert np.max(np.abs(changed)) > 1e-3


# --------------------------------------------------------------------------- masks, causality


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_encoder_padding_invariance(conv, rng):
    x = normal(rng, 2, 6, CHANNELS)
    mask = np.array([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], bool)
    layer_checks.check_padding_invariance(encoder(x, conv), x, mask, mask_argument="padding_mask")


def test_decoder_ignores_padded_source_positions(rng):
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source)
    layer_checks.check_padding_invariance(
        layer,
        [x, source],
        SOURCE_PADDING,
        call_kwargs={"encoder_padding_mask": SOURCE_PADDING},
        mask_argument=None,
        output_mask=np.ones((2, 6), bool),
        sequence_inputs=[1],
    )


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_decoder_is_causal(conv, rng):
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source, conv)
    layer_checks.check_causal(layer, [x, source], sequence_inputs=[0])


def test_encoder_sees_both_sides(rng):
    """The causal check can fail: the encoder block does depend on later positions."""
    x = normal(rng, 2, 6, CHANNELS)
    with pytest.raises(AssertionError, match="see later positions"):
        layer_checks.check_causal(encoder(x), x)


def test_keras_masks_are_read(rng):
    """Embedding(mask_zero=True) masks reach both blocks; the output carries the mask."""
    target = np.array([[3, 1, 4, 1, 0, 0], [5, 9, 2, 6, 5, 3]], "int32")
    source = np.array([[7, 8, 9, 0, 0], [4, 4, 4, 4, 4]], "int32")
    embedding = keras.layers.Embedding(10, CHANNELS, mask_zero=True)
    encoder_layer = MUSEEncoderLayer(FFN, HEADS, kernel_sizes=(3,))
    decoder_layer = MUSEDecoderLayer(FFN, HEADS, kernel_sizes=(3,))
    inputs = [keras.Input((None,), dtype="int32") for _ in range(2)]
    encoded = encoder_layer(embedding(inputs[1]))
    decoded = decoder_layer(embedding(inputs[0]), encoded)
    pooled = keras.layers.GlobalAveragePooling1D()(decoded)
    model = keras.Model(inputs, [encoded, decoded, pooled])
    randomize(encoder_layer)
    randomize(decoder_layer, seed=1)
    out_encoded, out_decoded, out_pooled = model([target, source])
    source_embedded = to_numpy(embedding(source)).astype("float32")
    target_embedded = to_numpy(embedding(target)).astype("float32")
    expected_encoded = encoder_layer(source_embedded, padding_mask=source != 0)
    assert_close(out_encoded, to_numpy(expected_encoded), what="encoder Keras mask")
    expected_decoded = to_numpy(
        decoder_layer(
            target_embedded,
            expected_encoded,
            decoder_padding_mask=target != 0,
            encoder_padding_mask=source != 0,
        )
    )
    assert_close(out_decoded, expected_decoded, what="decoder Keras masks")
    real = target != 0
    expected_pool = (expected_decoded * real[..., None]).sum(1) / real.sum(1, keepdims=True)
    assert_close(out_pooled, expected_pool, what="mask after the decoder")


# --------------------------------------------------------------------------- decoding


def step_through(layer, x, source, sizes, max_len, order=None, reorder_at=None):
    """Decodes ``x`` in chunks of ``sizes``; optionally reorders the batch before a step."""
    cache = (
        np.zeros((x.shape[0], 2, max_len, HEADS, HEAD_DIM), "float32"),
        layer.cross_attention_cache(source),
    )
    outputs, t = [], 0
    for size in sizes:
        if reorder_at == t:
            cache = tuple(ops.take(c, order, axis=0) for c in cache)
            x = x[order]
        output, cache = layer(
            x[:, t : t + size], cache=cache, cache_update_index=ops.convert_to_tensor(t, "int32")
        )
        outputs.append(to_numpy(output))
        t += size
    return np.concatenate(outputs, axis=1), cache


def test_cached_decoding_equals_full(rng):
    """The dynamic (official) convolutions; test_muse.py steps both kinds of MUSEAttention."""
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source)
    full = to_numpy(layer(x, source, encoder_padding_mask=SOURCE_PADDING))
    cache = (np.zeros((2, 2, 8, HEADS, HEAD_DIM), "float32"), layer.cross_attention_cache(source))
    outputs, t = [], 0
    for size in (2, 1, 1, 1, 1):  # a two-token prefill, then single steps
        output, cache = layer(
            x[:, t : t + size],
            encoder_padding_mask=SOURCE_PADDING,
            cache=cache,
            cache_update_index=t,
        )
        outputs.append(to_numpy(output))
        t += size
    assert_close(np.concatenate(outputs, axis=1), full, what="cached decoding")
    assert np.all(to_numpy(cache[0])[:, :, 6:] == 0), "positions not decoded yet stay zero"
    assert_close(cache[1], to_numpy(layer.cross_attention_cache(source)), what="cross cache")


def test_cache_reordered_like_beam_search(rng):
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source)
    order = np.array([1, 1])  # a beam duplicated, another dropped
    full = to_numpy(layer(x[order], source[order]))
    stepped, _ = step_through(layer, x, source, [1] * 6, 6, order=order, reorder_at=3)
    assert_close(stepped[:, 3:], full[:, 3:], what="steps after reordering")


# --------------------------------------------------------------------------- Keras conventions


def test_encoder_standard_checks(rng):
    """Config, save/load, training step, bf16. ``use_bias=False``: a key bias has zero gradient.

    Static convolutions: the decoder's checks below use dynamic ones.
    """
    x = normal(rng, 2, 6, CHANNELS)
    layer_checks.run_standard_checks(
        lambda: MUSEEncoderLayer(
            FFN, HEADS, conv="static", kernel_sizes=(1, 3), use_bias=False, dropout=0.1
        ),
        x,
    )


def test_decoder_standard_checks(rng):
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer_checks.run_standard_checks(
        lambda: MUSEDecoderLayer(
            FFN, HEADS, kernel_sizes=(3, 5), use_bias=False, weight_dropout=0.1
        ),
        [x, source],
    )


def test_mixed_precision_close_to_reference(rng):
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    layer = decoder(x, source)
    low = MUSEDecoderLayer.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    low(x, source)
    low.set_weights(layer.get_weights())
    output = low(x, source, encoder_padding_mask=EMPTY_SOURCE)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    expected = muse_decoder_layer(
        x, source, block_weights(layer), HEADS, "dynamic", (3, 5), None, EMPTY_SOURCE
    )
    # Post-norm outputs are O(1); bfloat16's relative step is 2^-8.
    assert_close(output, expected, atol=5e-2, what="mixed_bfloat16")


def test_config_has_every_argument():
    kwargs = dict(
        conv="static",
        kernel_sizes=[7, 3],
        dropout=0.3,
        attention_dropout=0.1,
        activation_dropout=0.2,
        weight_dropout=0.0,
        activation="gelu",
        layer_norm_epsilon=1e-6,
        use_bias=False,
        kernel_initializer="he_normal",
        bias_initializer="ones",
        fused_attention=True,
    )
    for cls in (MUSEEncoderLayer, MUSEDecoderLayer):
        layer = cls(12, 3, name="block", **kwargs)
        config = layer.get_config()
        restored = cls.from_config(config)
        assert restored.get_config() == config
        assert (config["intermediate_dim"], config["num_heads"]) == (12, 3)
        assert config["kernel_sizes"] == [7, 3] and restored.kernel_sizes == (7, 3)
        assert config["layer_norm_epsilon"] == 1e-6 and config["activation_dropout"] == 0.2
        assert restored.fused_attention is True
    assert MUSEEncoderLayer(8, 2).get_config()["kernel_sizes"] == [3, 15]
    assert MUSEEncoderLayer(8, 2, conv="static").get_config()["kernel_sizes"] == [1, 3, 7]
    assert MUSEEncoderLayer(8, 2).compute_output_shape((2, 9, 12)) == (2, 9, 12)


def test_parameter_count():
    """Encoder block: q, k, v, output (2C -> C), predictors (with bias), gate, FFN, norm."""
    c, f, h = 8, 12, 2
    layer = MUSEDecoderLayer(f, h, kernel_sizes=(3, 5))
    layer.build((None, None, c), (None, None, 6))
    predictors = sum(c * h * k + h * k for k in (3, 5))
    self_part = 3 * (c * c + c) + predictors + 2 + (2 * c * c + c)
    cross = (c * c + c) + 2 * (6 * c + c) + (c * c + c)
    feedforward = (c * f + f) + (f * c + c)
    assert layer.count_params() == self_part + cross + feedforward + 2 * c
    encoder_layer = MUSEEncoderLayer(f, h, conv="static", kernel_sizes=(1, 3))
    encoder_layer.build((None, None, c))
    static = 3 * (c * c + c) + 3 * c + 2 * (c * c + c) + 2 + (2 * c * c + c)
    assert encoder_layer.count_params() == static + feedforward + 2 * c


# --------------------------------------------------------------------------- fused attention


def test_fused_attention_matches_the_reference(rng):
    """keras.ops.dot_product_attention gives the reference's numbers, masks and all."""
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    mask = np.array([[0, 0, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]], bool)  # an all-padding row
    for conv, causal in (("static", True), ("dynamic", False)):
        layer = MUSEAttention(
            HEADS, HEAD_DIM, conv=conv, kernel_sizes=KERNELS[conv], causal=causal,
            fused_attention=True,
        )  # fmt: skip
        layer(x)
        randomize(layer)
        expected = muse_attention(
            x, attention_weights(layer), HEADS, conv, KERNELS[conv], causal, mask
        )
        assert_close(layer(x, mask=mask), expected, what=f"fused {conv} causal={causal}")
    layer = decoder(x, source, fused_attention=True)
    expected = muse_decoder_layer(
        x, source, block_weights(layer), HEADS, "dynamic", (3, 5), None, EMPTY_SOURCE
    )
    assert_close(layer(x, source, encoder_padding_mask=EMPTY_SOURCE), expected, what="block")
    stepped, _ = step_through(layer, x, source, [2, 1, 1, 1, 1], 6)
    assert_close(stepped, to_numpy(layer(x, source)), what="fused cached decoding")


# --------------------------------------------------------------------------- weight dropout


def test_weight_dropout_drops_predicted_taps(rng):
    """Inference ignores it; in training dropped taps change the convolution branch only."""
    x = normal(rng, 2, 6, CHANNELS)
    layer = MUSEAttention(HEADS, HEAD_DIM, conv="dynamic", kernel_sizes=(3,), weight_dropout=0.5)
    layer(x)
    randomize(layer)
    weights = attention_weights(layer)
    weights["gamma"] = np.zeros(1)
    expected = muse_attention(x, weights, HEADS, "dynamic", (3,))
    assert_close(layer(x, training=False), expected, what="inference")
    trained = to_numpy(layer(x, training=True))
    assert np.max(np.abs(trained - expected)) > 1e-3, "training must drop taps"
    # The attention half of the output projection's input is untouched: zeroing the
    # convolution half of W_O makes training and inference agree.
    kernel = to_numpy(layer.output_dense.kernel)
    layer.output_dense.kernel.assign(np.concatenate([kernel[:CHANNELS], 0 * kernel[CHANNELS:]]))
    assert_close(layer(x, training=True), to_numpy(layer(x, training=False)), what="attention")
    assert layer.get_config()["weight_dropout"] == 0.5


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("cls", [MUSEEncoderLayer, MUSEDecoderLayer])
@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"kernel_sizes": (3, 4)}, ValueError, r"`kernel_sizes` must hold odd integers.*got 4"),
        ({"kernel_sizes": (0,)}, ValueError, r"`kernel_sizes` must hold positive.*got 0"),
        ({"kernel_sizes": (-3, 3)}, ValueError, r"`kernel_sizes` must hold positive.*got -3"),
        ({"kernel_sizes": (1, 3)}, ValueError, r"conv='dynamic' needs kernel sizes >= 3.*got 1"),
        ({"conv": "light"}, ValueError, r"`conv` must be one of 'static', 'dynamic'"),
        ({"num_heads": 0}, ValueError, r"`num_heads` must be an integer >= 1, got 0"),
        ({"intermediate_dim": 2.5}, TypeError, r"`intermediate_dim` must be an integer"),
        ({"dropout": 1.0}, ValueError, r"`dropout` must be in \[0, 1\), got 1.0"),
        ({"attention_dropout": -0.1}, ValueError, r"`attention_dropout` must be in \[0, 1\)"),
        (
            {"conv": "static", "weight_dropout": 0.1},
            ValueError,
            r"`weight_dropout` drops the taps.*must be 0, got 0.1",
        ),
        ({"activation": "nope"}, ValueError, r"`activation` must be a Keras activation.*'nope'"),
        ({"layer_norm_epsilon": 0}, ValueError, r"`layer_norm_epsilon` must be a positive"),
        ({"use_bias": 1}, TypeError, r"`use_bias` must be True or False"),
        ({"fused_attention": "yes"}, TypeError, r"`fused_attention` must be True, False or 'auto'"),
    ],
)
def test_bad_constructor_arguments(cls, kwargs, error, pattern):
    with pytest.raises(error, match=rf"{cls.__name__}: {pattern}"):
        cls(**{"intermediate_dim": 8, "num_heads": 2, **kwargs})


def test_attention_weight_dropout_needs_dynamic():
    with pytest.raises(ValueError, match=r"MUSEAttention: `weight_dropout` drops the taps"):
        MUSEAttention(2, 2, weight_dropout=0.1)


def test_width_not_a_multiple_of_heads(rng):
    with pytest.raises(
        ValueError, match=r"'enc'.*multiple of `num_heads`.*10 is not a multiple of 4"
    ):
        MUSEEncoderLayer(8, 4, name="enc")(normal(rng, 2, 3, 10))
    with pytest.raises(ValueError, match=r"'dec'.*10 is not a multiple of 4"):
        MUSEDecoderLayer(8, 4, name="dec")(normal(rng, 2, 3, 10), normal(rng, 2, 3, 10))


def test_bad_call_inputs(rng):
    x, source = normal(rng, 2, 6, CHANNELS), normal(rng, 2, 5, CHANNELS)
    enc = MUSEEncoderLayer(FFN, HEADS, name="enc")
    with pytest.raises(ValueError, match=r"'enc'.*`inputs` must have rank 3.*\(2, 6\)"):
        enc(x[..., 0])
    with pytest.raises(ValueError, match=r"'enc'.*`padding_mask` must have rank 2 \(batch, "):
        enc(x, padding_mask=np.ones((2, 6, 1), bool))
    enc(x)
    with pytest.raises(ValueError, match=r"'enc'.*last axis of `inputs` must be 4.*\(2, 6, 6\)"):
        enc(normal(rng, 2, 6, 6))

    dec = MUSEDecoderLayer(FFN, HEADS, name="dec")
    with pytest.raises(ValueError, match=r"'dec'.*first call must pass `encoder_sequence`"):
        dec(x)
    with pytest.raises(ValueError, match=r"'dec'.*build the layer first"):
        dec.cross_attention_cache(source)
    dec(x, source)
    with pytest.raises(ValueError, match=r"'dec'.*`encoder_sequence` is required without a"):
        dec(x)
    with pytest.raises(ValueError, match=r"'dec'.*`cache_update_index` needs a `cache`"):
        dec(x, source, cache_update_index=0)
    cache = (np.zeros((2, 2, 6, HEADS, HEAD_DIM), "float32"), dec.cross_attention_cache(source))
    step = x[:, :1]
    with pytest.raises(ValueError, match=r"'dec'.*`cache` must be a pair"):
        dec(step, cache=cache[0], cache_update_index=0)
    with pytest.raises(ValueError, match=r"'dec'.*`encoder_sequence` must be None"):
        dec(step, source, cache=cache, cache_update_index=0)
    with pytest.raises(ValueError, match=r"'dec'.*`decoder_padding_mask` cannot be combined"):
        dec(step, decoder_padding_mask=np.ones((2, 1), bool), cache=cache, cache_update_index=0)
    with pytest.raises(ValueError, match=r"'dec'.*needs `cache_update_index`"):
        dec(step, cache=cache)
    with pytest.raises(ValueError, match=r"'dec'.*`cache\[1\]` must have shape \(batch, 2"):
        dec(step, cache=(cache[0], cache[1][:, :, :, :1]), cache_update_index=0)
