"""GLUConv1D, ConvS2SAttention and GradMultiply against numpy references, decoding and checks."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.convs2s import (
    ConvS2SAttention,
    GLUConv1D,
    GradMultiply,
    folded_weight_norm,
)
from reference.convs2s import conv_padding, convs2s_attention, glu_conv1d, weight_norm

pytestmark = pytest.mark.contract

ATOL = 1e-5
# bfloat16 keeps 8 bits of mantissa (relative step 2^-8 ~ 4e-3); after a
# convolution or two projections and a softmax, errors stay below 2e-2 of the
# outputs' largest magnitude.
BF16_RELATIVE = 2e-2


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def randomize(layer, seed=0):
    """Random values in every weight (biases included), so each one matters."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))


def normal(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def assert_close(actual, expected, atol=ATOL, what=""):
    actual = to_numpy(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    difference = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert difference <= atol, f"{what}: differs from the reference by {difference:.3g}"


def assert_relatively_close(actual, expected, relative, what=""):
    actual = to_numpy(actual)
    assert np.isfinite(actual).all(), f"{what}: NaN/Inf"
    scale = max(1.0, float(np.max(np.abs(expected))))
    difference = float(np.max(np.abs(actual - expected)))
    assert difference <= relative * scale, (
        f"{what}: differs by {difference:.3g} > {relative} * {scale:.3g}"
    )


# Masks (batch 2, length 6), True = real token.
NO_PADDING = np.ones((2, 6), bool)
RIGHT_PADDING = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
LEFT_PADDING = np.array([[0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]], bool)
MASKS = {"none": None, "left": LEFT_PADDING, "right": RIGHT_PADDING}


# --------------------------------------------------------------------------- GLUConv1D


def glu_layer(x, seed=0, filters=3, kernel_size=3, **kwargs):
    layer = GLUConv1D(filters, kernel_size, **kwargs)
    layer(x)
    randomize(layer, seed)
    return layer


def glu_reference(layer, x, mask=None):
    return glu_conv1d(x, to_numpy(layer.kernel), to_numpy(layer.bias), layer.causal, mask)


@pytest.mark.parametrize(
    "kernel_size, causal",
    [(1, False), (2, False), (3, False), (1, True), (4, True)],
    ids=["k1", "k2_even", "k3_odd", "k1_causal", "k4_causal"],
)
def test_glu_matches_reference(kernel_size, causal, rng):
    x = normal(rng, 2, 6, 4)
    layer = glu_layer(x, kernel_size=kernel_size, causal=causal)
    assert_close(layer(x), glu_reference(layer, x), what=f"k={kernel_size} causal={causal}")


def test_glu_padding_convention_is_fairseqs():
    """Even kernels: (k - 1) // 2 zeros on the left, k // 2 on the right; causal: k - 1 left."""
    layer = GLUConv1D(1, 4)
    assert layer.padding == conv_padding(4, False) == (1, 2)
    assert GLUConv1D(1, 5).padding == (2, 2)
    assert GLUConv1D(1, 4, causal=True).padding == (3, 0)
    # An impulse at t = 3 through a kernel of ones reaches outputs t = 1 .. 4.
    x = np.zeros((1, 8, 1), "float32")
    x[0, 3, 0] = 1.0
    layer = GLUConv1D(1, 4, kernel_initializer="ones")
    output = to_numpy(layer(x))[0, :, 0]
    touched = np.flatnonzero(np.abs(output) > 1e-6).tolist()
    assert touched == [1, 2, 3, 4], touched


@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_glu_masked_matches_reference(padding, causal, rng):
    x = normal(rng, 2, 6, 4)
    mask = MASKS[padding]
    layer = glu_layer(x, kernel_size=4, causal=causal)
    expected = glu_reference(layer, x, mask)
    assert_close(layer(x, mask=mask), expected, what=f"{padding} padding")
    assert np.max(np.abs(expected - glu_reference(layer, x))) > 1e-3, "the mask must matter"


def test_glu_mixed_precision_close_to_reference(rng):
    x = normal(rng, 2, 6, 4)
    layer = glu_layer(x, kernel_size=3, causal=True)
    low = GLUConv1D.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    low(x)
    low.set_weights(layer.get_weights())
    output = low(x, mask=RIGHT_PADDING)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    expected = glu_reference(layer, x, RIGHT_PADDING)
    assert_relatively_close(output, expected, BF16_RELATIVE, "mixed_bfloat16 GLUConv1D")


@pytest.mark.parametrize("kernel_size", [3, 4])
def test_glu_causal_leaks_nothing(kernel_size, rng):
    x = normal(rng, 2, 7, 4)
    layer = glu_layer(x, kernel_size=kernel_size, causal=True)
    layer_checks.check_causal(layer, x)


def test_glu_padding_invariance(rng):
    x = normal(rng, 2, 6, 4)
    layer = glu_layer(x, kernel_size=3)
    mask = np.array([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], bool)
    layer_checks.check_padding_invariance(layer, x, mask)


@pytest.mark.parametrize("kernel_size", [3, 4])
def test_glu_nan_in_padding_never_reaches_real_outputs(kernel_size, rng):
    x = normal(rng, 2, 6, 4)
    layer = glu_layer(x, kernel_size=kernel_size)
    poisoned = np.where(RIGHT_PADDING[..., None], x, np.nan).astype("float32")
    output = to_numpy(layer(poisoned, mask=RIGHT_PADDING))
    expected = glu_reference(layer, x, RIGHT_PADDING)
    assert np.isfinite(output[RIGHT_PADDING]).all(), "NaN in padding reached real positions"
    assert_close(output[RIGHT_PADDING], expected[RIGHT_PADDING], what="NaN padding")


def test_glu_masks_go_through_the_one_mask_check(rng):
    x = normal(rng, 2, 6, 4)
    layer = glu_layer(x, kernel_size=3)
    expected = to_numpy(layer(x, mask=RIGHT_PADDING))
    # An int mask is 0/1 as a boolean: 2s mean real tokens, not twice the input.
    assert_close(layer(x, mask=RIGHT_PADDING.astype("int32") * 2), expected, what="int mask")
    # An additive float mask (0 real, -1e9 padding) was multiplied in: refused now.
    additive = np.where(RIGHT_PADDING, 0.0, -1e9).astype("float32")
    with pytest.raises(TypeError, match=r"GLUConv1D.*`mask` must be boolean or integer 0/1"):
        layer(x, mask=additive)
    with pytest.raises(ValueError, match=r"GLUConv1D.*`mask` must have shape \(batch, time\)"):
        layer(x, mask=np.ones((2, 5), bool))
    with pytest.raises(ValueError, match=r"`mask` must have shape \(batch, time\) = \(2, 6\)"):
        layer(x, mask=np.ones((2, 6, 1), bool))


def test_glu_keras_mask_propagation(rng):
    tokens = np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 0]])
    embedding = keras.layers.Embedding(10, 4, mask_zero=True)
    conv = GLUConv1D(3, 3)
    token_input = keras.Input((None,), dtype="int32")
    convolved = conv(embedding(token_input))
    # GlobalAveragePooling1D averages over the positions the incoming Keras mask marks real.
    pooled = keras.layers.GlobalAveragePooling1D()(convolved)
    model = keras.Model(token_input, [convolved, pooled])
    randomize(conv, 3)

    real = tokens != 0
    vectors = to_numpy(embedding.embeddings)[tokens]
    expected = glu_reference(conv, vectors, real)
    output, pooled_output = model(tokens)
    assert_close(output, expected, what="through Embedding(mask_zero=True)")
    expected_pooled = np.stack([expected[b][real[b]].mean(axis=0) for b in range(2)])
    assert_close(pooled_output, expected_pooled, what="pooled over the propagated mask")


@pytest.mark.parametrize(
    "kernel_size, weight_norm", [(1, False), (3, True), (4, False)], ids=["k1", "k3_wn", "k4"]
)
def test_glu_cached_decoding_equals_full(kernel_size, weight_norm, rng):
    length, channels = 6, 4
    x = normal(rng, 2, length, channels)
    layer = glu_layer(x, kernel_size=kernel_size, causal=True, weight_norm=weight_norm)
    full = to_numpy(layer(x))
    cache = np.zeros((2, kernel_size, channels), "float32")
    for t in range(length):
        output, cache = layer(x[:, t : t + 1], cache=cache, cache_update_index=t)
        assert_close(output, full[:, t : t + 1], what=f"step {t}")
        # The buffer holds the last kernel_size inputs (zeros before the start).
        window = np.concatenate([np.zeros((2, kernel_size, channels)), x[:, : t + 1]], axis=1)
        assert_close(cache, window[:, -kernel_size:], what=f"cache after step {t}")


def test_glu_prefill_then_decode(rng):
    x = normal(rng, 2, 7, 4)
    layer = glu_layer(x, kernel_size=3, causal=True)
    full = to_numpy(layer(x))
    cache = np.zeros((2, 3, 4), "float32")
    prompt, cache = layer(x[:, :5], cache=cache, cache_update_index=0)
    assert_close(prompt, full[:, :5], what="prefill")
    for t in (5, 6):
        step, cache = layer(x[:, t : t + 1], cache=cache, cache_update_index=t)
        assert_close(step, full[:, t : t + 1], what=f"step {t} after prefill")


def test_glu_cache_reordered_like_beam_search(rng):
    """Reordering the batch-first cache mid-sequence continues the reordered sequences."""
    x = normal(rng, 3, 6, 4)
    layer = glu_layer(x, kernel_size=3, causal=True)
    order = np.array([2, 2, 0])
    # Hypothesis b continues the prefix of order[b] from step 3 on.
    continued = np.concatenate([x[order, :3], x[:, 3:]], axis=1)
    full = to_numpy(layer(continued))
    cache = np.zeros((3, 3, 4), "float32")
    for t in range(3):
        _, cache = layer(x[:, t : t + 1], cache=cache, cache_update_index=t)
    cache = ops.take(cache, order, axis=0)
    for t in range(3, 6):
        output, cache = layer(x[:, t : t + 1], cache=cache, cache_update_index=t)
        assert_close(output, full[:, t : t + 1], what=f"step {t} after reordering")


@pytest.mark.parametrize(
    "make_initializer",
    [
        lambda: None,  # the layer's own RandomNormal (an int seed fixed when it is made)
        lambda: keras.initializers.GlorotUniform(seed=3),
        lambda: keras.initializers.RandomNormal(seed=keras.random.SeedGenerator(5)),
        lambda: keras.initializers.Constant(0.5),
    ],
    ids=["default", "int_seed", "seed_generator", "constant"],
)
def test_glu_weight_norm_starts_at_the_kernel_norm(make_initializer, rng):
    """g = ||v|| for every kind of kernel initializer: drawn by an initializer that repeats
    v's draw where the initializer repeats its draws (an int seed, or none), read from v
    where it does not (a SeedGenerator advances with every draw)."""
    layer = GLUConv1D(3, 3, weight_norm=True, kernel_initializer=make_initializer())
    layer(normal(rng, 2, 5, 4))
    v = to_numpy(layer.kernel_v)
    np.testing.assert_allclose(to_numpy(layer.kernel_g), np.sqrt((v**2).sum(axis=(0, 1))), 1e-6)


def test_glu_weight_norm(rng):
    x = normal(rng, 2, 5, 4)
    layer = GLUConv1D(3, 3, weight_norm=True)
    layer(x)
    assert [w.name for w in layer.trainable_weights] == ["kernel_v", "kernel_g", "bias"]
    v = to_numpy(layer.kernel_v)
    # g starts at ||v||, so the initial kernel equals v.
    np.testing.assert_allclose(to_numpy(layer.kernel_g), np.sqrt((v**2).sum(axis=(0, 1))), 1e-6)
    np.testing.assert_allclose(to_numpy(layer.kernel), v, atol=1e-6)
    # Any g: the kernel is g * v / ||v||, and the output follows it.
    g = np.abs(normal(rng, 6)) + 0.5
    layer.kernel_g.assign(g)
    expected_kernel = weight_norm(v, g)
    assert np.max(np.abs(expected_kernel - v)) > 1e-2
    assert_close(layer.kernel, expected_kernel, what="weight-normalised kernel")
    expected = glu_conv1d(x, expected_kernel, to_numpy(layer.bias))
    assert_close(layer(x), expected, what="weight-normalised output")


def test_glu_folded_weight_norm_uses_the_given_kernel_and_restores(rng):
    """Inside folded_weight_norm the layer reads the kernel it is given (not g * v / ||v||);
    after the block, also after an error, it computes its kernel again."""
    x = normal(rng, 2, 1, 4)
    layer = GLUConv1D(3, 3, causal=True, weight_norm=True)
    layer(x)
    layer.kernel_g.assign(np.abs(normal(rng, 6)) + 0.5)
    effective = weight_norm(to_numpy(layer.kernel_v), to_numpy(layer.kernel_g))
    cache = normal(rng, 2, 3, 4)
    window = np.concatenate([cache[:, 1:], x], axis=1)
    bias = to_numpy(layer.bias)
    expected = glu_conv1d(window, effective, bias, causal=True)[:, -1:]
    with folded_weight_norm([layer], [layer.kernel]):
        folded, _ = layer(x, cache=cache)
    assert_close(folded, expected, what="step with the folded kernel")
    other = normal(rng, 3, 4, 6)
    with folded_weight_norm([layer], [ops.convert_to_tensor(other)]):
        assert_close(layer.kernel, other, what="kernel inside the block")
        step, _ = layer(x, cache=cache)
    assert_close(
        step, glu_conv1d(window, other, bias, causal=True)[:, -1:], what="step with another kernel"
    )
    with pytest.raises(RuntimeError, match="inside"):
        with folded_weight_norm([layer], [ops.convert_to_tensor(other)]):
            raise RuntimeError("inside")
    assert_close(layer.kernel, effective, what="kernel after the block")


def test_glu_folded_weight_norm_bad_arguments(rng):
    plain = GLUConv1D(3, 3, causal=True)
    normed = GLUConv1D(3, 3, causal=True, weight_norm=True)
    x = normal(rng, 1, 2, 4)
    plain(x), normed(x)
    with pytest.raises(ValueError, match="one kernel per layer is needed, got 0 kernels for 1"):
        with folded_weight_norm([normed], []):
            pass
    with pytest.raises(TypeError, match="weight_norm=True, got GLUConv1D"):
        with folded_weight_norm([plain], [plain.kernel]):
            pass


@pytest.mark.parametrize("weight_norm", [False, True], ids=["plain", "weight_norm"])
def test_glu_reference_initialisation(weight_norm):
    layer = GLUConv1D(48, 3, dropout=0.2, weight_norm=weight_norm)
    layer.build((None, None, 64))
    kernel = to_numpy(layer.kernel)
    expected_std = math.sqrt(4 * (1 - 0.2) / (3 * 64))
    assert kernel.shape == (3, 64, 96)
    # 18 432 samples: the standard deviation is within 3 % with overwhelming probability.
    assert abs(kernel.std() / expected_std - 1) < 0.03, (kernel.std(), expected_std)
    assert abs(kernel.mean()) < 0.05 * expected_std
    assert np.all(to_numpy(layer.bias) == 0)
    custom = GLUConv1D(2, 3, kernel_initializer="ones")
    custom.build((None, None, 4))
    assert np.all(to_numpy(custom.kernel) == 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 3},
        {"kernel_size": 4, "causal": True, "dropout": 0.1},
        {"kernel_size": 2, "weight_norm": True, "bias_initializer": "ones"},
    ],
    ids=["noncausal", "causal_dropout", "weight_norm"],
)
def test_glu_standard_checks(kwargs, rng):
    x = normal(rng, 2, 5, 4)
    layer_checks.run_standard_checks(lambda: GLUConv1D(3, **kwargs), x)


def test_glu_config_has_every_argument():
    layer = GLUConv1D(
        7,
        4,
        causal=True,
        dropout=0.3,
        weight_norm=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="ones",
        name="conv",
    )
    config = layer.get_config()
    restored = GLUConv1D.from_config(config)
    assert restored.get_config() == config
    assert (config["filters"], config["kernel_size"], config["causal"]) == (7, 4, True)
    assert config["dropout"] == 0.3 and config["weight_norm"] is True
    assert GLUConv1D(2, 3).get_config()["kernel_initializer"] is None
    assert tuple(restored.compute_output_shape((2, 9, 5))) == (2, 9, 7)


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"filters": 0}, ValueError, r"GLUConv1D: `filters` must be an integer >= 1, got 0"),
        ({"filters": 2.5}, TypeError, r"GLUConv1D: `filters` must be an integer, got 2.5"),
        ({"kernel_size": 0}, ValueError, r"GLUConv1D: `kernel_size` must be .*>= 1, got 0"),
        ({"causal": "yes"}, TypeError, r"GLUConv1D: `causal` must be True or False, got 'yes'"),
        ({"dropout": 1.0}, ValueError, r"GLUConv1D: `dropout` must be in \[0, 1\), got 1.0"),
        ({"dropout": "0.1"}, TypeError, r"GLUConv1D: `dropout` must be a float"),
        ({"weight_norm": 1}, TypeError, r"GLUConv1D: `weight_norm` must be True or False"),
    ],
)
def test_glu_bad_constructor_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        GLUConv1D(**{"filters": 2, "kernel_size": 3, **kwargs})


def test_glu_bad_call_inputs(rng):
    layer = GLUConv1D(2, 3, name="conv")
    with pytest.raises(ValueError, match=r"'conv'.*`inputs` must have rank 3.*\(2, 5\)"):
        layer(np.zeros((2, 5), "float32"))
    x = normal(rng, 2, 5, 4)
    layer(x)
    with pytest.raises(
        ValueError, match=r"'conv'.*last axis of `inputs` must be 4 .*got shape \(2, 5, 6\)"
    ):
        layer(np.zeros((2, 5, 6), "float32"))
    with pytest.raises(ValueError, match=r"'conv'.*`mask` must have shape \(batch, time\)"):
        layer(x, mask=np.ones((2, 5, 1), bool))
    with pytest.raises(ValueError, match=r"'conv'.*a `cache` needs causal=True"):
        layer(x[:, :1], cache=np.zeros((2, 3, 4), "float32"), cache_update_index=0)
    causal = GLUConv1D(2, 3, causal=True, name="causal_conv")
    causal(x)
    with pytest.raises(ValueError, match=r"`cache` must have shape \(batch, 3, 4\).*\(2, 2, 4\)"):
        causal(x[:, :1], cache=np.zeros((2, 2, 4), "float32"), cache_update_index=0)


# --------------------------------------------------------------------------- ConvS2SAttention

CONV_CHANNELS, EMBED_DIM = 5, 4


def attention_inputs(rng, batch=2, target_length=3, source_length=6):
    x = normal(rng, batch, target_length, CONV_CHANNELS)
    target_embedding = normal(rng, batch, target_length, EMBED_DIM)
    keys = normal(rng, batch, source_length, EMBED_DIM)
    values = normal(rng, batch, source_length, EMBED_DIM)
    return x, target_embedding, keys, values


def attention_layer(x, target_embedding, keys, values, seed=0):
    layer = ConvS2SAttention(CONV_CHANNELS, EMBED_DIM)
    layer(x, target_embedding, (keys, values))
    randomize(layer, seed)
    return layer


def attention_weights(layer):
    return {
        "in_kernel": to_numpy(layer.in_projection.kernel),
        "in_bias": to_numpy(layer.in_projection.bias),
        "out_kernel": to_numpy(layer.out_projection.kernel),
        "out_bias": to_numpy(layer.out_projection.bias),
    }


@pytest.mark.parametrize("padding", ["none", "left", "right"])
def test_attention_matches_reference(padding, rng):
    x, g, keys, values = attention_inputs(rng)
    mask = MASKS[padding]
    layer = attention_layer(x, g, keys, values)
    out, scores = layer(x, g, (keys, values), encoder_mask=mask)
    expected, expected_scores = convs2s_attention(
        x, g, keys, values, attention_weights(layer), mask
    )
    assert_close(out, expected, what=f"{padding} padding: output")
    assert_close(scores, expected_scores, what=f"{padding} padding: scores")
    if mask is not None:
        assert np.all(to_numpy(scores)[~mask[:, None, :].repeat(3, axis=1)] == 0)


def test_attention_context_is_scaled_by_sqrt_real_length(rng):
    """Dropping the sqrt(s) factor (or using the padded length) must fail the reference."""
    x, g, keys, values = attention_inputs(rng)
    layer = attention_layer(x, g, keys, values)
    weights = attention_weights(layer)
    out = to_numpy(layer(x, g, (keys, values), encoder_mask=RIGHT_PADDING)[0])
    # With all of the padded positions counted, the context scale would differ.
    values_wrong = values * math.sqrt(6 / 4)
    wrong, _ = convs2s_attention(x, g, keys, values_wrong, weights, RIGHT_PADDING)
    right, _ = convs2s_attention(x, g, keys, values, weights, RIGHT_PADDING)
    assert np.max(np.abs(out - right)) <= ATOL < np.max(np.abs(out - wrong))


@pytest.mark.parametrize("padding", ["none", "right"])
def test_attention_mixed_precision_close_to_reference(padding, rng):
    x, g, keys, values = attention_inputs(rng)
    mask = MASKS[padding]
    layer = attention_layer(x, g, keys, values)
    low = ConvS2SAttention.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    low(x, g, (keys, values))
    low.set_weights(layer.get_weights())
    out, scores = low(x, g, (keys, values), encoder_mask=mask)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    expected, expected_scores = convs2s_attention(
        x, g, keys, values, attention_weights(layer), mask
    )
    assert_relatively_close(out, expected, BF16_RELATIVE, "mixed_bfloat16 output")
    assert_relatively_close(scores, expected_scores, BF16_RELATIVE, "mixed_bfloat16 scores")


def test_attention_all_padding_source_gives_zeros(rng):
    x, g, keys, values = attention_inputs(rng)
    layer = attention_layer(x, g, keys, values)
    mask = np.array([[0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]], bool)
    out, scores = layer(x, g, (keys, values), encoder_mask=mask)
    out, scores = to_numpy(out), to_numpy(scores)
    assert np.isfinite(out).all() and np.isfinite(scores).all()
    assert np.all(scores[0] == 0)
    # No context: only the output projection's bias joins the residual.
    out_bias = to_numpy(layer.out_projection.bias)
    np.testing.assert_allclose(out[0], (out_bias + x[0]) * math.sqrt(0.5), atol=ATOL)
    expected, expected_scores = convs2s_attention(
        x, g, keys, values, attention_weights(layer), mask
    )
    assert_close(out, expected, what="all-padding source")
    np.testing.assert_allclose(scores[1].sum(axis=-1), 1.0, atol=ATOL)


@keras.saving.register_keras_serializable(package="keras_posenc_tests")
class FlatConvS2SAttention(keras.layers.Layer):
    """ConvS2SAttention called with flat positional tensors (keys and values apart).

    The shared checks that wrap a layer into a model (save/load, a training
    step) and the padding check give the layer flat positional arrays.
    """

    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def call(self, x, target_embedding, keys, values, encoder_mask=None):
        return self.inner(x, target_embedding, (keys, values), encoder_mask=encoder_mask)

    def get_config(self):
        config = super().get_config()
        config["inner"] = keras.saving.serialize_keras_object(self.inner)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["inner"] = keras.saving.deserialize_keras_object(config["inner"])
        return cls(**config)


@pytest.mark.parametrize("padding", ["left", "right"])
def test_attention_encoder_padding_invariance(padding, rng):
    x, g, keys, values = attention_inputs(rng, target_length=3, source_length=6)
    layer = FlatConvS2SAttention(attention_layer(x, g, keys, values))
    # Keys and values (inputs 2 and 3) get new content at padded source positions;
    # every target position is compared.
    layer_checks.check_padding_invariance(
        layer,
        [x, g, keys, values],
        MASKS[padding],
        mask_argument="encoder_mask",
        output_mask=np.ones((2, 3), bool),
        sequence_inputs=[2, 3],
    )


def test_attention_sublayers():
    layer = ConvS2SAttention(CONV_CHANNELS, EMBED_DIM)
    layer.build((2, 3, CONV_CHANNELS), (2, 3, EMBED_DIM), ((2, 6, EMBED_DIM), (2, 6, EMBED_DIM)))
    assert isinstance(layer.in_projection, keras.layers.Dense)
    assert isinstance(layer.out_projection, keras.layers.Dense)
    assert layer.in_projection.name == "in_projection"
    assert layer.out_projection.name == "out_projection"
    assert tuple(layer.in_projection.kernel.shape) == (CONV_CHANNELS, EMBED_DIM)
    assert tuple(layer.out_projection.kernel.shape) == (EMBED_DIM, CONV_CHANNELS)
    # Reference initialisation: N(0, sqrt(1 / fan_in)), zero bias.
    big = ConvS2SAttention(256, 64)
    big.build((1, 1, 256), (1, 1, 64), ((1, 2, 64), (1, 2, 64)))
    std_in = to_numpy(big.in_projection.kernel).std()
    std_out = to_numpy(big.out_projection.kernel).std()
    assert abs(std_in * math.sqrt(256) - 1) < 0.03 and abs(std_out * math.sqrt(64) - 1) < 0.03
    assert np.all(to_numpy(big.in_projection.bias) == 0)


def test_attention_standard_checks(rng):
    x, g, keys, values = attention_inputs(rng)

    def make_layer():
        return ConvS2SAttention(CONV_CHANNELS, EMBED_DIM, bias_initializer="ones")

    mask_kwargs = {"encoder_mask": RIGHT_PADDING}
    # Config round trip and mixed precision on the layer itself (encoder_out as a pair);
    # save/load and the training step through flat positional inputs.
    layer_checks.run_standard_checks(
        make_layer, [x, g, (keys, values)], mask_kwargs, skip=("save_load", "training")
    )
    flat = [x, g, keys, values]
    layer_checks.check_save_load(FlatConvS2SAttention(make_layer()), flat, mask_kwargs)
    layer_checks.check_training_step(FlatConvS2SAttention(make_layer()), flat, mask_kwargs)


def test_attention_in_functional_model(rng, tmp_path):
    x, g, keys, values = attention_inputs(rng)
    inputs = [
        keras.Input((None, CONV_CHANNELS)),
        keras.Input((None, EMBED_DIM)),
        keras.Input((None, EMBED_DIM)),
        keras.Input((None, EMBED_DIM)),
        keras.Input((None,), dtype="bool"),
    ]
    layer = ConvS2SAttention(CONV_CHANNELS, EMBED_DIM)
    out, scores = layer(inputs[0], inputs[1], (inputs[2], inputs[3]), encoder_mask=inputs[4])
    assert tuple(out.shape) == (None, None, CONV_CHANNELS)
    assert tuple(scores.shape) == (None, None, None)
    model = keras.Model(inputs, [out, scores])
    randomize(layer)
    arrays = [x, g, keys, values, LEFT_PADDING]
    expected, expected_scores = convs2s_attention(
        x, g, keys, values, attention_weights(layer), LEFT_PADDING
    )
    path = str(tmp_path / "attention.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    for which, candidate in (("model", model), ("loaded", loaded)):
        actual, actual_scores = candidate(arrays)
        assert_close(actual, expected, what=f"{which} output")
        assert_close(actual_scores, expected_scores, what=f"{which} scores")


def test_attention_output_carries_the_target_keras_mask(rng):
    _, _, keys, values = attention_inputs(rng, batch=1)
    tokens = np.array([[3, 4, 0]])
    embedding = keras.layers.Embedding(10, CONV_CHANNELS, mask_zero=True)
    target_embedding = keras.layers.Embedding(10, EMBED_DIM)
    token_input = keras.Input((None,), dtype="int32")
    layer = ConvS2SAttention(CONV_CHANNELS, EMBED_DIM)
    out, _ = layer(embedding(token_input), target_embedding(token_input), (keys, values))
    # GlobalAveragePooling1D averages over the positions the propagated mask marks real.
    model = keras.Model(token_input, [out, keras.layers.GlobalAveragePooling1D()(out)])
    full, pooled = (to_numpy(t) for t in model(tokens))
    assert_close(pooled, full[:, :2].mean(axis=1), what="pooled over the real targets")
    assert np.max(np.abs(full[:, :3].mean(axis=1) - full[:, :2].mean(axis=1))) > 1e-4


def test_attention_config_and_output_shape():
    layer = ConvS2SAttention(6, 3, kernel_initializer="glorot_uniform", bias_initializer="ones")
    config = layer.get_config()
    restored = ConvS2SAttention.from_config(config)
    assert restored.get_config() == config
    assert (config["conv_channels"], config["embed_dim"]) == (6, 3)
    assert ConvS2SAttention(6, 3).get_config()["kernel_initializer"] is None
    shapes = restored.compute_output_shape((2, 4, 6), (2, 4, 3), ((2, 9, 3), (2, 9, 3)))
    assert tuple(map(tuple, shapes)) == ((2, 4, 6), (2, 4, 9))


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"conv_channels": 0}, ValueError, r"ConvS2SAttention: `conv_channels` must be .*>= 1"),
        ({"embed_dim": "4"}, TypeError, r"ConvS2SAttention: `embed_dim` must be an integer"),
    ],
)
def test_attention_bad_constructor_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        ConvS2SAttention(**{"conv_channels": 5, "embed_dim": 4, **kwargs})


def test_attention_bad_call_inputs(rng):
    x, g, keys, values = attention_inputs(rng)
    layer = ConvS2SAttention(CONV_CHANNELS, EMBED_DIM, name="attention")
    with pytest.raises(TypeError, match=r"'attention'.*`encoder_out` must be a pair.*got a"):
        layer(x, g, keys)
    with pytest.raises(TypeError, match=r"`encoder_out` must be a pair.*tuple of length 3"):
        layer(x, g, (keys, values, values))
    with pytest.raises(ValueError, match=r"'attention'.*`x` must have shape.*last axis 5.*"):
        layer(g, g, (keys, values))
    with pytest.raises(ValueError, match=r"`target_embedding` must have shape.*last axis 4"):
        layer(x, x, (keys, values))
    with pytest.raises(ValueError, match=r"`values` must have shape.*got shape \(2, 6, 5\)"):
        layer(x, g, (keys, normal(rng, 2, 6, 5)))
    with pytest.raises(ValueError, match=r"keys and values .* same source length"):
        layer(x, g, (keys, values[:, :4]))
    with pytest.raises(ValueError, match=r"`x` and `target_embedding` must have the same length"):
        layer(x, g[:, :2], (keys, values))
    with pytest.raises(ValueError, match=r"`encoder_mask` must have shape.*= \(2, 6\).*\(2, 5\)"):
        layer(x, g, (keys, values), encoder_mask=np.ones((2, 5), bool))


# --------------------------------------------------------------------------- GradMultiply


def test_grad_multiply_forward_is_identity(rng):
    x = normal(rng, 2, 3, 4) * 100
    for scale in (0.0, 0.125, 3.0):
        assert np.array_equal(ops.convert_to_numpy(GradMultiply(scale)(x)), x)


def _updates(scale, seed=0):
    """Weight changes of one SGD(lr=1) step of upstream Dense -> [GradMultiply] -> Dense."""
    rng = np.random.default_rng(seed)
    inputs = keras.Input((3,))
    upstream = keras.layers.Dense(4, name="upstream")
    downstream = keras.layers.Dense(2, name="downstream")
    hidden = upstream(inputs)
    if scale is not None:
        hidden = GradMultiply(scale)(hidden)
    model = keras.Model(inputs, downstream(hidden))
    for weight in model.weights:
        weight.assign(rng.standard_normal(tuple(weight.shape)).astype("float32"))
    # A numpy array, not a tensor: on TensorFlow, an eager tensor captured by the loss
    # made graph-mode train steps read wrong values (seen with tf 2.21, keras 3.15).
    coefficients = rng.standard_normal((1, 2)).astype("float32")
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=1.0),
        loss=lambda y_true, y_pred: ops.sum(ops.multiply(y_pred, coefficients), axis=-1),
    )
    before = {w.path: to_numpy(w) for w in model.weights}
    x = rng.standard_normal((5, 3)).astype("float32")
    model.train_on_batch(x, np.zeros((5, 2), "float32"))
    return {path: to_numpy(w) - before[w.path] for path, w in zip(before, model.weights)}


@pytest.mark.parametrize("scale", [0.25, 0.0])
def test_grad_multiply_scales_the_gradient_upstream_only(scale):
    plain = _updates(None)
    scaled = _updates(scale)
    paths = sorted(plain)
    assert paths == sorted(scaled) and any("upstream" in p for p in paths)
    for path in paths:
        factor = scale if "upstream" in path else 1.0
        assert np.max(np.abs(plain[path])) > 1e-3, f"{path}: no update to compare"
        np.testing.assert_allclose(scaled[path], factor * plain[path], atol=1e-5, err_msg=path)


def test_grad_multiply_standard_checks_and_mask(rng):
    x = normal(rng, 2, 3, 4)
    # No trainable weights, hence no training check (the gradient test above covers it).
    layer_checks.run_standard_checks(lambda: GradMultiply(0.5), x, skip=("training",))
    config = GradMultiply(0.5, name="grad").get_config()
    assert config["scale"] == 0.5 and GradMultiply.from_config(config).scale == 0.5
    assert GradMultiply(2).compute_output_shape((2, None, 4)) == (2, None, 4)
    # The Keras mask passes through: the pooling averages over the real tokens only.
    token_input = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(5, 4, mask_zero=True)
    scaled = GradMultiply(0.5)(embedding(token_input))
    model = keras.Model(token_input, keras.layers.GlobalAveragePooling1D()(scaled))
    tokens = np.array([[1, 2, 0, 0]])
    expected = to_numpy(embedding.embeddings)[[1, 2]].mean(axis=0)
    assert_close(model(tokens)[0], expected, what="mean over real tokens")


@pytest.mark.parametrize(
    "scale, error, pattern",
    [
        ("0.5", TypeError, r"GradMultiply: `scale` must be a finite number, got '0.5'"),
        (True, TypeError, r"GradMultiply: `scale` must be a finite number, got True"),
        (float("inf"), ValueError, r"GradMultiply: `scale` must be a finite number, got inf"),
    ],
)
def test_grad_multiply_bad_scale(scale, error, pattern):
    with pytest.raises(error, match=pattern):
        GradMultiply(scale)
