"""MUSEAttention against a numpy reference, its gate, masks, causality, decoding and checks."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.muse import MUSEAttention
from reference.muse import muse_attention

pytestmark = pytest.mark.contract

ATOL = 1e-5
# bfloat16 keeps 8 bits of mantissa (relative step 2^-8 ~ 4e-3); after the
# projections, a softmax, the convolutions and the output projection, errors
# stay below 2e-2 of the outputs' largest magnitude.
BF16_RELATIVE = 2e-2
HEADS, HEAD_DIM = 2, 2
CHANNELS = HEADS * HEAD_DIM

# Masks (batch 2, length 6), True = real token.
RIGHT_PADDING = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
LEFT_PADDING = np.array([[0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]], bool)
ALL_PADDING_ROW = np.array([[0, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]], bool)
MASKS = {"none": None, "left": LEFT_PADDING, "right": RIGHT_PADDING, "empty": ALL_PADDING_ROW}


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def normal(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def randomize(layer, seed=0):
    """Random values in every weight (biases and the gate included), so each one matters."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))


def muse_layer(x, seed=0, **kwargs):
    layer = MUSEAttention(HEADS, HEAD_DIM, **kwargs)
    layer(x)
    randomize(layer, seed)
    return layer


def _bias(dense):
    return None if dense.bias is None else to_numpy(dense.bias)


def reference_weights(layer):
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


def reference(layer, x, mask=None):
    return muse_attention(
        x,
        reference_weights(layer),
        layer.num_heads,
        layer.conv,
        layer.kernel_sizes,
        layer.causal,
        mask,
    )


def assert_close(actual, expected, atol=ATOL, what=""):
    actual = to_numpy(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    difference = float(np.max(np.abs(actual - expected))) if actual.size else 0.0
    assert difference <= atol, f"{what}: differs from the reference by {difference:.3g}"


# --------------------------------------------------------------------------- numerics


CASES = [
    ("static", False, "none"),
    ("static", False, "right"),
    ("static", True, "left"),
    ("static", True, "empty"),
    ("dynamic", False, "none"),
    ("dynamic", False, "left"),
    ("dynamic", True, "right"),
    ("dynamic", True, "empty"),
]


@pytest.mark.parametrize("conv, causal, padding", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_matches_reference(conv, causal, padding, rng):
    """Default kernel sizes: (1, 3, 7) static, (3, 15) dynamic (wider than the sequence)."""
    x = normal(rng, 2, 6, CHANNELS)
    mask = MASKS[padding]
    layer = muse_layer(x, conv=conv, causal=causal)
    expected = reference(layer, x, mask)
    assert_close(layer(x, mask=mask), expected, what=f"{conv} causal={causal} {padding}")
    if mask is not None:
        assert np.max(np.abs(expected - reference(layer, x))) > 1e-3, "the mask must matter"


def test_fully_masked_sequence_gives_finite_output(rng):
    """A sequence that is all padding: attention and convolutions give zeros, output = b_O."""
    x = normal(rng, 2, 6, CHANNELS)
    layer = muse_layer(x, conv="dynamic", kernel_sizes=(3, 5))
    output = to_numpy(layer(x, mask=ALL_PADDING_ROW))
    assert np.isfinite(output).all()
    bias = to_numpy(layer.output_dense.bias)
    assert_close(output[0], np.broadcast_to(bias, (6, CHANNELS)), what="all-padding row")


def test_branches_share_the_value_projection():
    """Only one value projection exists: the convolutions read the attention's V."""
    layer = MUSEAttention(HEADS, HEAD_DIM, kernel_sizes=(1, 3))
    layer.build((None, None, CHANNELS))
    names = sorted(w.path.split("/", 1)[1] for w in layer.weights)
    assert [n for n in names if "value" in n] == ["value/bias", "value/kernel"], names
    assert "depthwise_kernel_3" in names and "depthwise_kernel_1" not in names, names
    # 3 projections (4 * 4 + 4 each), depthwise 3 * 4, 2 pointwise (4 * 4 + 4),
    # the gate (2), output 8 * 4 + 4.
    assert layer.count_params() == 3 * 20 + 12 + 2 * 20 + 2 + 36


def test_single_kernel_has_no_gate(rng):
    """One branch: no gamma (its softmax would be 1 and never train); D = D_k."""
    x = normal(rng, 2, 6, CHANNELS)
    layer = muse_layer(x, conv="dynamic", kernel_sizes=(5,), causal=True)
    assert layer.gamma is None and not any("gamma" in w.path for w in layer.weights)
    weights = reference_weights(layer)
    weights["gamma"] = np.zeros(1)
    expected = muse_attention(x, weights, HEADS, "dynamic", (5,), True, RIGHT_PADDING)
    assert_close(layer(x, mask=RIGHT_PADDING), expected, what="single kernel")


def test_dynamic_kernel_predictor_shapes():
    layer = MUSEAttention(HEADS, HEAD_DIM, conv="dynamic")
    layer.build((None, None, CHANNELS))
    assert layer.kernel_sizes == (3, 15)
    shapes = [tuple(d.kernel.shape) for d in layer.kernel_predictors]
    assert shapes == [(CHANNELS, HEADS, 3), (CHANNELS, HEADS, 15)]
    assert tuple(layer.gamma.shape) == (2,)


def test_mixed_precision_close_to_reference(rng):
    x = normal(rng, 2, 6, CHANNELS)
    for conv in ("static", "dynamic"):
        layer = muse_layer(x, conv=conv, causal=True)
        low = MUSEAttention.from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
        low(x)
        low.set_weights(layer.get_weights())
        output = low(x, mask=ALL_PADDING_ROW)
        assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
        actual = to_numpy(output)
        assert np.isfinite(actual).all(), f"{conv}: NaN/Inf under mixed_bfloat16"
        expected = reference(layer, x, ALL_PADDING_ROW)
        scale = max(1.0, float(np.max(np.abs(expected))))
        difference = float(np.max(np.abs(actual - expected)))
        assert difference <= BF16_RELATIVE * scale, f"{conv}: bf16 differs by {difference:.3g}"


# --------------------------------------------------------------------------- the gate


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_gate_trains(conv, rng):
    """One fit step changes gamma (and every other weight), unlike the widely copied version.

    ``use_bias=False``: the key projection's bias adds ``q . b_k`` to every
    logit of a query, which the softmax cancels, so its gradient is exactly
    zero and the check that every weight moves would (rightly) fail on it.
    """
    x = normal(rng, 2, 6, CHANNELS)
    layer = MUSEAttention(
        HEADS,
        HEAD_DIM,
        conv=conv,
        kernel_sizes=(1, 3) if conv == "static" else (3, 5),
        use_bias=False,
    )
    layer(x)
    gate_before = to_numpy(ops.softmax(layer.gamma))
    assert np.allclose(gate_before, 0.5), "the gate starts with equal weights"
    layer_checks.check_training_step(layer, x)
    gate_after = to_numpy(ops.softmax(layer.gamma))
    assert np.max(np.abs(gate_after - gate_before)) > 1e-4, gate_after
    assert any(w is layer.gamma for w in layer.trainable_weights)


# --------------------------------------------------------------------------- masks, causality


@pytest.mark.parametrize(
    "conv, causal",
    [("static", False), ("static", True), ("dynamic", False), ("dynamic", True)],
)
def test_padding_invariance(conv, causal, rng):
    x = normal(rng, 2, 6, CHANNELS)
    layer = muse_layer(x, conv=conv, causal=causal)
    mask = np.array([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], bool)
    layer_checks.check_padding_invariance(layer, x, mask)


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_causal_leaks_nothing(conv, rng):
    x = normal(rng, 2, 7, CHANNELS)
    layer = muse_layer(x, conv=conv, causal=True)
    layer_checks.check_causal(layer, x)


def test_noncausal_sees_the_future(rng):
    """The causal check can fail: the non-causal layer does depend on later positions."""
    x = normal(rng, 2, 7, CHANNELS)
    layer = muse_layer(x)
    with pytest.raises(AssertionError, match="see later positions"):
        layer_checks.check_causal(layer, x)


def test_keras_mask_propagation(rng):
    ids = np.array([[3, 1, 4, 1, 0, 0], [5, 9, 2, 6, 5, 0]], "int32")
    inputs = keras.Input((None,), dtype="int32")
    embedding = keras.layers.Embedding(10, CHANNELS, mask_zero=True)
    attention = MUSEAttention(HEADS, HEAD_DIM, conv="dynamic", kernel_sizes=(3,))
    hidden = attention(embedding(inputs))
    # A mask-consuming layer after MUSEAttention: the mask must reach it.
    pooled = keras.layers.GlobalAveragePooling1D()(hidden)
    model = keras.Model(inputs, [hidden, pooled])
    randomize(attention)
    output, pooled_output = model(ids)
    embedded = to_numpy(embedding(ids)).astype("float32")  # no Keras mask attached
    mask = ids != 0
    assert_close(output, to_numpy(attention(embedded, mask=mask)), what="Keras mask")
    assert np.max(np.abs(to_numpy(output) - to_numpy(attention(embedded)))) > 1e-3
    real = to_numpy(output) * mask[..., None]
    expected_pool = real.sum(1) / mask.sum(1, keepdims=True)
    assert_close(pooled_output, expected_pool, what="mask after MUSEAttention")


# --------------------------------------------------------------------------- decoding


def full_and_steps(layer, x, max_len, prefill=1, index_as_tensor=False):
    full = to_numpy(layer(x))
    batch, length = x.shape[:2]
    cache = np.zeros((batch, 2, max_len, HEADS, HEAD_DIM), "float32")
    outputs = []
    t = 0
    while t < length:
        size = prefill if t == 0 else 1
        index = ops.convert_to_tensor(t, "int32") if index_as_tensor else t
        output, cache = layer(x[:, t : t + size], cache=cache, cache_update_index=index)
        outputs.append(to_numpy(output))
        t += size
    return full, np.concatenate(outputs, axis=1), cache


@pytest.mark.parametrize(
    "conv, kernel_sizes, prefill, index_as_tensor",
    [("static", None, 1, False), ("dynamic", (3, 5), 1, True), ("dynamic", None, 3, False)],
    ids=["static_steps", "dynamic_steps_tensor_index", "dynamic_prefill"],
)
def test_cached_decoding_equals_full(conv, kernel_sizes, prefill, index_as_tensor, rng):
    x = normal(rng, 2, 6, CHANNELS)
    layer = muse_layer(x, conv=conv, kernel_sizes=kernel_sizes, causal=True)
    full, stepped, cache = full_and_steps(layer, x, 8, prefill, index_as_tensor)
    assert_close(stepped, full, what="cached decoding")
    keys = np.einsum("btc,chd->bthd", x, to_numpy(layer.key_dense.kernel)) + to_numpy(
        layer.key_dense.bias
    )
    assert_close(cache[:, 0, :6], keys, what="cached keys")
    assert np.all(to_numpy(cache)[:, :, 6:] == 0), "positions not decoded yet stay untouched"


def test_cache_reordered_like_beam_search(rng):
    """Reordering the batch-first cache mid-sequence continues the reordered sequences."""
    x = normal(rng, 3, 6, CHANNELS)
    layer = muse_layer(x, kernel_sizes=(1, 3, 5), causal=True)
    order = np.array([2, 0, 1])
    full = to_numpy(layer(x[order]))
    cache = np.zeros((3, 2, 6, HEADS, HEAD_DIM), "float32")
    for t in range(3):
        _, cache = layer(x[:, t : t + 1], cache=cache, cache_update_index=t)
    cache = ops.take(cache, order, axis=0)
    for t in range(3, 6):
        output, cache = layer(x[order, t : t + 1], cache=cache, cache_update_index=t)
        assert_close(output, full[:, t : t + 1], what=f"step {t} after reordering")


# --------------------------------------------------------------------------- Keras conventions


@pytest.mark.parametrize(
    "kwargs",
    [
        {"conv": "static", "kernel_sizes": (1, 3), "causal": True},
        {"conv": "dynamic", "kernel_sizes": (3, 5), "dropout": 0.1},
    ],
    ids=["static_causal", "dynamic_dropout"],
)
def test_standard_checks(kwargs, rng):
    """Config, save/load, a training step (use_bias=False, see test_gate_trains), bf16."""
    x = normal(rng, 2, 5, CHANNELS)
    layer_checks.run_standard_checks(
        lambda: MUSEAttention(HEADS, HEAD_DIM, use_bias=False, **kwargs), x
    )


def test_config_and_save_load_with_biases(rng, tmp_path):
    x = normal(rng, 2, 5, CHANNELS)
    layer_checks.check_config_roundtrip(
        MUSEAttention(HEADS, HEAD_DIM, conv="dynamic", bias_initializer="ones"), x
    )
    layer_checks.check_save_load(MUSEAttention(HEADS, HEAD_DIM, causal=True), x, directory=tmp_path)


def test_config_has_every_argument():
    layer = MUSEAttention(
        4,
        3,
        conv="dynamic",
        kernel_sizes=[5, 3],
        causal=True,
        dropout=0.2,
        use_bias=False,
        kernel_initializer="he_normal",
        bias_initializer="ones",
        name="muse",
    )
    config = layer.get_config()
    restored = MUSEAttention.from_config(config)
    assert restored.get_config() == config
    assert (config["num_heads"], config["key_dim"], config["conv"]) == (4, 3, "dynamic")
    assert config["kernel_sizes"] == [5, 3] and restored.kernel_sizes == (5, 3)
    assert config["causal"] is True and config["dropout"] == 0.2 and config["use_bias"] is False
    assert MUSEAttention(2, 2).get_config()["kernel_sizes"] == [1, 3, 7]
    assert tuple(restored.compute_output_shape((2, 9, 12))) == (2, 9, 12)


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        (
            {"num_heads": 0},
            ValueError,
            r"MUSEAttention: `num_heads` must be an integer >= 1, got 0",
        ),
        ({"key_dim": 2.0}, TypeError, r"MUSEAttention: `key_dim` must be an integer, got 2.0"),
        ({"conv": "lightweight"}, ValueError, r"`conv` must be one of 'static', 'dynamic'.*'light"),
        ({"kernel_sizes": (3, 4)}, ValueError, r"`kernel_sizes` must hold odd integers.*got 4"),
        ({"kernel_sizes": (0, 3)}, ValueError, r"`kernel_sizes` must hold positive.*got 0"),
        ({"kernel_sizes": (-3,)}, ValueError, r"`kernel_sizes` must hold positive.*got -3"),
        ({"kernel_sizes": ()}, TypeError, r"`kernel_sizes` must be None or a non-empty"),
        ({"kernel_sizes": "3"}, TypeError, r"`kernel_sizes` must be None or a non-empty"),
        ({"kernel_sizes": (3, 3)}, ValueError, r"`kernel_sizes` must not repeat a size"),
        ({"kernel_sizes": (3, 2.5)}, TypeError, r"`kernel_sizes` must be an integer, got 2.5"),
        (
            {"conv": "dynamic", "kernel_sizes": (1, 3)},
            ValueError,
            r"MUSEAttention: conv='dynamic' needs kernel sizes >= 3.*got 1",
        ),
        ({"causal": 1}, TypeError, r"MUSEAttention: `causal` must be True or False, got 1"),
        ({"dropout": 1.0}, ValueError, r"MUSEAttention: `dropout` must be in \[0, 1\), got 1.0"),
        ({"use_bias": "no"}, TypeError, r"MUSEAttention: `use_bias` must be True or False"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        MUSEAttention(**{"num_heads": 2, "key_dim": 2, **kwargs})


def test_bad_call_inputs(rng):
    x = normal(rng, 2, 5, CHANNELS)
    layer = MUSEAttention(HEADS, HEAD_DIM, name="muse")
    with pytest.raises(ValueError, match=r"'muse'.*num_heads \* key_dim = 2 \* 2 = 4.*\(2, 5, 6\)"):
        layer(normal(rng, 2, 5, 6))
    with pytest.raises(ValueError, match=r"'muse'.*`inputs` must have rank 3.*\(2, 5\)"):
        layer(x[..., 0])
    with pytest.raises(ValueError, match=r"'muse'.*`mask` must have shape \(batch, time\)"):
        layer(x, mask=np.ones((2, 5, 1), bool))
    cache = np.zeros((2, 2, 5, HEADS, HEAD_DIM), "float32")
    with pytest.raises(ValueError, match=r"'muse'.*a `cache` needs causal=True"):
        layer(x[:, :1], cache=cache, cache_update_index=0)
    causal = MUSEAttention(HEADS, HEAD_DIM, causal=True, name="decoder")
    with pytest.raises(ValueError, match=r"'decoder'.*`cache` must have shape \(batch, 2, max_len"):
        causal(x[:, :1], cache=np.zeros((2, 2, 5, 4), "float32"), cache_update_index=0)
    with pytest.raises(ValueError, match=r"'decoder'.*needs `cache_update_index`.*got None"):
        causal(x[:, :1], cache=cache)
    with pytest.raises(ValueError, match=r"'decoder'.*`mask` cannot be combined with a `cache`"):
        causal(x[:, :1], mask=np.ones((2, 1), bool), cache=cache, cache_update_index=0)
