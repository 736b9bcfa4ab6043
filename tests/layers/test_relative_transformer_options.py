"""The decoder options of `MultiHeadRelativeAttention` (grouped-query heads, sliding windows
with rolling caches and sinks, query-key norms, soft-capped logits, the output bias, the query
scale) passed through `RelativeTransformerEncoder` and `RelativeTransformerDecoder`
(keras_posenc/layers/relative_transformer.py), and a stack of local and global decoder blocks
as Gemma 2 alternates them. The options' numbers are tested on the attention itself
(tests/layers/test_decoder_attention.py); here, that the blocks hand them over, keep them in
their config and decode with the caches they imply.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers import (
    RelativeTransformerDecoder,
    RelativeTransformerEncoder,
    RotaryPositions,
)

pytestmark = pytest.mark.contract

ATOL = 1e-5
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, WINDOW, LENGTH = 16, 4, 2, 4, 3, 9
OPTIONS = {
    "num_key_value_heads": KV_HEADS,
    "sliding_window": WINDOW,
    "attention_sinks": 1,
    "query_key_norm": "rms",
    "query_key_norm_epsilon": 1e-5,
    "logit_soft_cap": 20.0,
    "output_bias": False,
    "query_scale_dim": 8,
}


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def randomize(layers, seed=0):
    """Random values for every weight of ``layers`` (biases, norms' scales included)."""
    rng = np.random.default_rng(seed)
    for layer in layers:
        for weight in layer.weights:
            weight.assign(0.5 * rng.standard_normal(tuple(weight.shape)).astype("float32"))


@pytest.mark.parametrize("block", [RelativeTransformerEncoder, RelativeTransformerDecoder])
def test_options_reach_the_self_attention_and_round_trip(block, rng):
    x = rng.standard_normal((2, 7, HIDDEN)).astype("float32")
    layer = block(32, HEADS, relative="bias", position="t5", **OPTIONS)
    layer(x)
    attention = layer.self_attention
    attention_config = attention.get_config()
    assert {name: attention_config[name] for name in OPTIONS} == OPTIONS
    assert {name: layer.get_config()[name] for name in OPTIONS} == OPTIONS
    # Two key/value heads; biases on the query/key/value projections, none on the output.
    assert tuple(attention.key_dense.kernel.shape) == (HIDDEN, KV_HEADS, HEAD_DIM)
    assert attention.query_dense.bias is not None and attention.output_dense.bias is None
    assert attention.query_norm is not None and attention.key_norm is not None
    # The config has every argument and rebuilds a block with the same outputs.
    layer_checks.check_config_roundtrip(layer, x)
    # Left out, the options are the attention's defaults, and so is its config.
    plain = block(32, HEADS).get_config()
    assert {name: plain[name] for name in OPTIONS} == {
        "num_key_value_heads": None,
        "sliding_window": None,
        "attention_sinks": 0,
        "query_key_norm": None,
        "query_key_norm_epsilon": 1e-6,
        "logit_soft_cap": None,
        "output_bias": None,
        "query_scale_dim": None,
    }


def test_encoder_window_is_the_band_mask(rng):
    """A bidirectional window in the encoder: keys within ``W`` positions, as a band mask."""
    x = rng.standard_normal((2, 8, HIDDEN)).astype("float32")
    windowed = RelativeTransformerEncoder(32, HEADS, num_key_value_heads=1, sliding_window=WINDOW)
    full = RelativeTransformerEncoder(32, HEADS, num_key_value_heads=1)
    windowed(x), full(x)
    randomize([windowed])
    full.set_weights(windowed.get_weights())
    positions = np.arange(8)
    band = np.abs(positions[:, None] - positions[None, :]) < WINDOW
    band = np.broadcast_to(band, (2, 8, 8))
    expected = to_numpy(full(x, attention_mask=band))
    np.testing.assert_allclose(to_numpy(windowed(x)), expected, atol=ATOL)
    assert np.max(np.abs(to_numpy(full(x)) - expected)) > 1e-3, "the window must matter"


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"num_key_value_heads": 3}, ValueError, r"Decoder: `num_key_value_heads` must divide"),
        ({"attention_sinks": 1}, ValueError, r"Decoder: `attention_sinks` keep the first keys"),
        ({"sliding_window": 0}, ValueError, r"Decoder: `sliding_window` must be an integer >= 1"),
        ({"query_key_norm": "batch"}, ValueError, r"Decoder: `query_key_norm` must be one of"),
        ({"logit_soft_cap": 0.0}, ValueError, r"Decoder: `logit_soft_cap` must be a positive"),
        ({"output_bias": "no"}, TypeError, r"Decoder: `output_bias` must be True or False"),
        ({"query_scale_dim": 0}, ValueError, r"Decoder: `query_scale_dim` must be an integer"),
    ],
)
def test_bad_options_are_refused_by_the_block(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        RelativeTransformerDecoder(8, HEADS, **kwargs)


# --------------------------------------------------------------------------- Gemma 2's stack


def gemma_like_stack(windows, seed=0, x=None):
    """Pre-norm decoder blocks with rotary, grouped-query heads, query-key norms and
    soft-capped logits, the ``i``-th with ``sliding_window=windows[i]`` (None: global), in a
    functional model; with ``x``, called on it instead (the model is then None)."""
    blocks = [
        RelativeTransformerDecoder(
            32,
            HEADS,
            relative=None,
            rotary=RotaryPositions(max_wavelength=100),
            normalize_first=True,
            num_key_value_heads=KV_HEADS,
            sliding_window=window,
            attention_sinks=1 if window else 0,
            query_key_norm="rms",
            logit_soft_cap=20.0,
            query_scale_dim=HIDDEN // HEADS * 2,
            name=f"decoder_{i}",
        )
        for i, window in enumerate(windows)
    ]
    model = None
    if x is None:
        tokens = keras.Input((None, HIDDEN), name="tokens")
        x = tokens
        for block in blocks:
            x = block(x)
        model = keras.Model(tokens, x)
    else:
        for block in blocks:
            x = block(x)
    randomize(blocks, seed)
    return model, blocks


def decode(blocks, x, caches):
    """``x`` through ``blocks`` one position at a time, each block with its cache."""
    steps = []
    for t in range(x.shape[1]):
        y = x[:, t : t + 1]
        for i, block in enumerate(blocks):
            y, caches[i] = block(
                y, self_attention_cache=caches[i], self_attention_cache_update_index=t
            )
        steps.append(to_numpy(y))
    return np.concatenate(steps, axis=1), caches


def test_local_and_global_stack_round_trips_and_decodes(rng, tmp_path):
    windows = (WINDOW, None, WINDOW, None)
    model, blocks = gemma_like_stack(windows)
    x = rng.standard_normal((2, LENGTH, HIDDEN)).astype("float32")
    full = to_numpy(model(x))
    # The windows matter: the same weights without them give other outputs.
    unwindowed, others = gemma_like_stack((None,) * 4)
    for block, other in zip(blocks, others):
        other.set_weights(block.get_weights())
    assert np.max(np.abs(to_numpy(unwindowed(x)) - full)) > 1e-3

    path = os.path.join(tmp_path, "stack.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(to_numpy(loaded(x)), full, atol=ATOL)
    restored = [loaded.get_layer(f"decoder_{i}") for i in range(len(windows))]
    assert [block.sliding_window for block in restored] == list(windows)

    # Local blocks decode with a rolling cache of sinks + window positions, global ones
    # with a cache of the whole length; both the built and the loaded stack.
    shapes = [block.self_attention.cache_shape(2, LENGTH) for block in blocks]
    local, global_ = (2, 2, 1 + WINDOW, KV_HEADS, HEAD_DIM), (2, 2, LENGTH, KV_HEADS, HEAD_DIM)
    assert shapes == [local, global_, local, global_]
    for stack in (blocks, restored):
        caches = [np.zeros(shape, "float32") for shape in shapes]
        steps, caches = decode(stack, x, caches)
        np.testing.assert_allclose(steps, full, atol=ATOL)
        assert [tuple(cache.shape) for cache in caches] == shapes


def test_rolling_step_in_a_compiled_model(rng):
    """A decoding step of the stack as a Keras model with the caches and the index as
    inputs (as a generation loop or an export runs it), past the window's length."""
    # Built eagerly: Keras (3.15) checks a functional graph's nodes against the outputs of a
    # layer's first node, so blocks first called in a graph without a cache (one output)
    # cannot then sit in a graph with one (two outputs): "not connected to `inputs`".
    x = rng.standard_normal((2, LENGTH, HIDDEN)).astype("float32")
    _, blocks = gemma_like_stack((WINDOW, None), x=x)
    full = x
    for block in blocks:
        full = block(full)
    full = to_numpy(full)
    shapes = [block.self_attention.cache_shape(2, LENGTH) for block in blocks]
    token = keras.Input((1, HIDDEN), batch_size=2)
    index = keras.Input((), batch_size=2, dtype="int32")  # the same index for every row
    cache_inputs = [keras.Input(shape[1:], batch_size=2) for shape in shapes]
    y, new_caches = token, []
    for block, cache in zip(blocks, cache_inputs):
        y, cache = block(y, self_attention_cache=cache, self_attention_cache_update_index=index[0])
        new_caches.append(cache)
    step = keras.Model([token, index, *cache_inputs], [y, *new_caches])
    caches = [np.zeros(shape, "float32") for shape in shapes]
    for t in range(LENGTH):
        y, *caches = step.predict_on_batch([x[:, t : t + 1], np.full((2,), t, "int32"), *caches])
        np.testing.assert_allclose(to_numpy(y)[:, 0], full[:, t], atol=ATOL)


def test_rolling_cache_refuses_masks_under_the_blocks_names(rng):
    _, (block,) = gemma_like_stack((WINDOW,))
    x = rng.standard_normal((2, 1, HIDDEN)).astype("float32")
    rolling = np.zeros(block.self_attention.cache_shape(2, LENGTH), "float32")
    arguments = {"self_attention_cache": rolling, "self_attention_cache_update_index": 5}
    pattern = r"'decoder_0'.*rolling cache.*takes no decoder_padding_mask, attention_bias"
    with pytest.raises(ValueError, match=pattern):
        block(
            x,
            decoder_padding_mask=np.ones((2, 1 + WINDOW), bool),
            attention_bias=np.zeros((2, HEADS, 1, 1 + WINDOW), "float32"),
            **arguments,
        )
    # A cache of the whole length takes them: it is an ordinary cache with a window.
    whole = np.zeros((2, 2, LENGTH, KV_HEADS, HEAD_DIM), "float32")
    output, _ = block(
        x,
        decoder_padding_mask=np.ones((2, LENGTH), bool),
        self_attention_cache=whole,
        self_attention_cache_update_index=5,
    )
    assert tuple(output.shape) == (2, 1, HIDDEN)
