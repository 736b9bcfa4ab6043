"""`MultiHeadRelativeAttention`'s decoder options (issue 49) against the numpy reference
(tests/reference/decoder_attention.py): grouped key/value heads, the sliding window with
attention sinks (causal and bidirectional), QK normalisation, logit soft-capping, Qwen's
biases and the query scale, alone and combined with the relative modes and rotary; decoding
with a cache of the key/value heads only and with a rolling cache of ``attention_sinks +
sliding_window`` positions, each step equal to the full pass; the ``.keras`` round trip.

One representative per option runs on every backend; the cross-product of grouped heads x
relative mode x rotary x window runs on the matrix backend (tests/tiers.py).
"""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
from keras import ops
from tiers import matrix

from keras_posenc import layers
from layer_checks import check_config_roundtrip, check_save_load
from reference.decoder_attention import decoder_attention
from reference.relative_attention import clip_index_matrix

pytestmark = pytest.mark.contract

ATOL = 2e-5
HEADS, KEY_DIM, FEATURES, LENGTH, CLIP = 4, 4, 8, 7, 3
ROPE = {"max_wavelength": 100.0}  # short wavelengths, so a wrong position shows


def to_numpy(tensor) -> np.ndarray:
    return ops.convert_to_numpy(tensor).astype("float64")


def built(rng, x=None, **arguments):
    """A layer with every weight drawn at random (norm scales and biases too), and its input."""
    arguments.setdefault("relative", None)
    if arguments["relative"] is not None:
        arguments.setdefault("position", layers.ClipPositions(CLIP))
    rotary = arguments.pop("rope", False)
    if rotary:
        arguments["rotary"] = layers.RotaryPositions(**ROPE)
    layer = layers.MultiHeadRelativeAttention(HEADS, KEY_DIM, **arguments)
    x = rng.standard_normal((2, LENGTH, FEATURES)).astype("float32") if x is None else x
    layer(x, x)
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(tuple(weight.shape))).astype("float32"))
    return layer, x


def reference_weights(layer) -> dict:
    """The layer's weights by the reference's names (None where the layer has no bias)."""

    def array(variable):
        return None if variable is None else to_numpy(variable)

    weights = {}
    for role in ("query", "key", "value", "output"):
        dense = getattr(layer, f"{role}_dense")
        weights[f"{role}_kernel"] = to_numpy(dense.kernel)
        weights[f"{role}_bias"] = array(getattr(dense, "bias", None))
    for role in ("query", "key"):
        norm = getattr(layer, f"{role}_norm", None)
        if norm is None:
            continue
        # keras' RMSNormalization holds `scale`; LayerNormalization `gamma` and `beta` (its
        # `scale` is the boolean argument).
        rms = isinstance(norm, keras.layers.RMSNormalization)
        scale = norm.scale if rms else norm.gamma
        weights[f"{role}_norm_scale"] = array(scale)
        weights[f"{role}_norm_bias"] = array(getattr(norm, "beta", None))
    for name in ("relative_keys", "relative_values", "relative_bias"):
        table = getattr(layer, name, None)
        if table is not None:
            weights[name] = to_numpy(table.embeddings)
    return weights


def reference(layer, x, offset=0, **options):
    """The reference on ``layer``'s weights and arguments, ``options`` for the call's."""
    config = layer.get_config()
    rotary = None
    if config.get("rotary") is not None:
        rotary = {k: v for k, v in layer.rotary.get_config().items() if k != "xpos_scale_base"}
    index = None
    if config["relative"] is not None:
        index = clip_index_matrix(x.shape[1], x.shape[1], CLIP, offset)
    return decoder_attention(
        x,
        weights=reference_weights(layer),
        relative=config["relative"],
        index=index,
        rotary=rotary,
        window=config["sliding_window"],
        sinks=config["attention_sinks"],
        query_key_norm=config["query_key_norm"],
        norm_epsilon=config["query_key_norm_epsilon"],
        logit_soft_cap=config["logit_soft_cap"],
        query_scale_dim=config["query_scale_dim"],
        query_offset=offset,
        **options,
    )


def assert_matches(layer, x, causal=True, what="", **call):
    """The layer's output and probabilities equal the reference's (padding: ``value_mask``)."""
    output, scores = layer(x, x, use_causal_mask=causal, return_attention_scores=True, **call)
    mask = None if "value_mask" not in call else np.asarray(call["value_mask"], bool)[:, None]
    bias = call.get("attention_bias")
    expected, probabilities = reference(
        layer, x, causal=causal, mask=mask, attention_bias=None if bias is None else bias
    )
    np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL, err_msg=what)
    np.testing.assert_allclose(to_numpy(scores), probabilities, atol=ATOL, err_msg=what)


# ------------------------------------------------------------------ one option at a time


@pytest.mark.parametrize(*matrix("kv_heads", [2, 1, None, 4]))
def test_grouped_key_value_heads(kv_heads, rng):
    layer, x = built(rng, num_key_value_heads=kv_heads, rope=True)
    groups = HEADS if kv_heads is None else kv_heads
    assert tuple(layer.key_dense.kernel.shape) == (FEATURES, groups, KEY_DIM)
    assert tuple(layer.value_dense.kernel.shape) == (FEATURES, groups, KEY_DIM)
    assert_matches(layer, x, what=f"num_key_value_heads={kv_heads}")


@pytest.mark.parametrize(
    *matrix(
        "causal, window, sinks",
        [(True, 3, 2), (True, 3, 0), (False, 3, 0), (False, 2, 1), (True, 1, 0), (True, 7, 0)],
    )
)
def test_sliding_window_and_sinks(causal, window, sinks, rng):
    # T5's bias and rotary read true distances inside the window.
    layer, x = built(rng, sliding_window=window, attention_sinks=sinks, relative="bias", rope=True)
    padding = np.ones((2, LENGTH), bool)
    padding[1, -2:] = False
    assert_matches(layer, x, causal, f"window={window} sinks={sinks}", value_mask=padding)


@pytest.mark.parametrize(*matrix("norm", ["rms", "layer"]))
def test_query_key_norm(norm, rng):
    layer, x = built(rng, query_key_norm=norm, query_key_norm_epsilon=1e-5, rope=True)
    kinds = {"rms": "RMSNormalization", "layer": "LayerNormalization"}
    assert type(layer.query_norm).__name__ == kinds[norm] == type(layer.key_norm).__name__
    assert_matches(layer, x, what=norm)


def test_logit_soft_cap_before_the_attention_bias(rng):
    # The cap bounds the logits it is given; an additive bias comes after it, uncapped.
    layer, x = built(rng, logit_soft_cap=1.5, relative="keys", rope=True)
    bias = 4.0 * rng.standard_normal((1, HEADS, LENGTH, LENGTH)).astype("float32")
    assert_matches(layer, x, what="soft cap", attention_bias=bias)


def test_qwen_biases_on_the_projections_only(rng):
    layer, x = built(rng, use_bias=True, output_bias=False, num_key_value_heads=2, rope=True)
    assert layer.output_dense.bias is None
    assert all(getattr(layer, f"{r}_dense").bias is not None for r in ("query", "key", "value"))
    assert_matches(layer, x, what="Qwen biases")


@pytest.mark.parametrize(*matrix("scale_dim", [9, 1]))
def test_query_scale_dim(scale_dim, rng):
    layer, x = built(rng, query_scale_dim=scale_dim, relative="keys_values")
    assert_matches(layer, x, what=f"query_scale_dim={scale_dim}")


# ------------------------------------------------------------------ combinations

# GQA x relative mode x rotary x window, each with the causal rule and without.
CROSS = list(
    itertools.product([None, 2, 1], [None, "bias", "keys", "keys_values"], [False, True], [None, 3])
)


@pytest.mark.parametrize(*matrix("kv_heads, relative, rope, window", CROSS, keep=(len(CROSS) - 1,)))
def test_cross_product(kv_heads, relative, rope, window, rng):
    layer, x = built(
        rng,
        num_key_value_heads=kv_heads,
        relative=relative,
        rope=rope,
        sliding_window=window,
    )
    what = f"kv={kv_heads} relative={relative} rope={rope} window={window}"
    for causal in (True, False):
        assert_matches(layer, x, causal, what)


def test_every_option_at_once(rng):
    layer, x = built(
        rng,
        num_key_value_heads=2,
        sliding_window=3,
        attention_sinks=1,
        query_key_norm="rms",
        logit_soft_cap=2.0,
        use_bias=True,
        output_bias=False,
        query_scale_dim=6,
        relative="keys_values",
        rope=True,
    )
    assert_matches(layer, x, what="every option")


# ------------------------------------------------------------------ decoding


def decode(layer, x, cache_length=None, prefill=0):
    """Causal decoding: ``prefill`` positions in one call, then one position at a time, with
    a zero cache of ``layer.cache_shape`` (or ``cache_length`` positions). Returns the
    outputs (batch, length, features) and the cache's shape."""
    batch, length = x.shape[:2]
    shape = layer.cache_shape(batch, length)
    if cache_length is not None:
        shape = (*shape[:2], cache_length, *shape[3:])
    cache = np.zeros(shape, "float32")
    outputs, start = [], 0
    for stop in ([prefill] if prefill else []) + list(range(prefill + 1, length + 1)):
        chunk = x[:, start:stop]
        out, cache = layer(
            chunk, chunk, cache=cache, cache_update_index=start, use_causal_mask=True
        )
        outputs.append(to_numpy(out))
        start = stop
    return np.concatenate(outputs, axis=1), tuple(shape)


@pytest.mark.parametrize(
    *matrix(
        "arguments",
        [
            dict(num_key_value_heads=2, sliding_window=3, attention_sinks=1, relative="bias"),
            dict(num_key_value_heads=1, sliding_window=3),
            dict(
                num_key_value_heads=2, sliding_window=2, attention_sinks=2, relative="keys_values"
            ),
            dict(sliding_window=4, query_key_norm="layer", logit_soft_cap=2.0, relative="keys"),
        ],
    )
)
def test_rolling_cache_steps_equal_the_full_pass(arguments, rng):
    # LENGTH = 7 > sinks + window: the buffer wraps round, and every step still equals the
    # full causal pass (true positions for rotary and the relative terms).
    layer, x = built(rng, rope=True, **arguments)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    window, sinks = arguments["sliding_window"], arguments.get("attention_sinks", 0)
    kv_heads = arguments.get("num_key_value_heads", HEADS)
    steps, shape = decode(layer, x)
    assert shape == (2, 2, sinks + window, kv_heads, KEY_DIM)
    np.testing.assert_allclose(steps, full, atol=ATOL, err_msg=str(arguments))
    expected, _ = reference(layer, x, causal=True)
    np.testing.assert_allclose(full, expected, atol=ATOL)


@pytest.mark.parametrize(*matrix("prefill", [6, 4, 2]))
def test_rolling_cache_after_a_prefill(prefill, rng):
    # A prompt in one call, then steps, through a rolling cache of 1 + 3 positions: a prompt
    # longer than the cache (6), as long (4) and shorter (2).
    layer, x = built(rng, num_key_value_heads=2, sliding_window=3, attention_sinks=1, rope=True)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    steps, _ = decode(layer, x, prefill=prefill)
    np.testing.assert_allclose(steps, full, atol=ATOL)


@pytest.mark.parametrize(*matrix("kv_heads", [2, 1]))
def test_full_cache_holds_the_key_value_heads_only(kv_heads, rng):
    layer, x = built(
        rng, num_key_value_heads=kv_heads, query_key_norm="rms", relative="bias", rope=True
    )
    full = to_numpy(layer(x, x, use_causal_mask=True))
    steps, shape = decode(layer, x)
    assert shape == (2, 2, LENGTH, kv_heads, KEY_DIM)
    np.testing.assert_allclose(steps, full, atol=ATOL)


def test_windowed_layer_with_a_full_length_cache(rng):
    # A cache of the whole length works too (no rolling): the window masks the old keys.
    layer, x = built(rng, num_key_value_heads=2, sliding_window=3, relative="bias", rope=True)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    steps, _ = decode(layer, x, cache_length=LENGTH)
    np.testing.assert_allclose(steps, full, atol=ATOL)


# ------------------------------------------------------------------ saving

EVERY_OPTION = dict(
    num_key_value_heads=2,
    sliding_window=3,
    attention_sinks=1,
    query_key_norm="layer",
    query_key_norm_epsilon=1e-5,
    logit_soft_cap=2.0,
    use_bias=True,
    output_bias=False,
    query_scale_dim=6,
    relative="bias",
    rope=True,
)


def test_config_and_keras_round_trip(rng, tmp_path):
    layer, x = built(rng, **EVERY_OPTION)
    restored = check_config_roundtrip(layer, [x, x], {"use_causal_mask": True})
    for name in ("num_key_value_heads", "sliding_window", "attention_sinks", "query_scale_dim"):
        assert restored.get_config()[name] == EVERY_OPTION[name], name
    check_save_load(layer, [x, x], {"use_causal_mask": True}, directory=tmp_path)
