"""The mechanics of `MultiHeadRelativeAttention`'s decoder options (issue 49): the rolling
cache's slots against a ring buffer written in plain Python, a window's key-range blocks
against the masked computation over every key, the cache's size, and the errors.

The numbers of each option against the NumPy reference are tests/layers/test_decoder_attention.py.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from keras_posenc.layers import _attention

pytestmark = pytest.mark.contract

ATOL = 1e-5


def _ring_buffer(length: int, sinks: int, window: int, writes: list[int]) -> dict:
    """Slot -> position after writing ``writes`` positions in order (a StreamingLLM cache:
    the sinks stay, then the slots of the window are reused round)."""
    slots: dict[int, int] = {}
    for position in writes:
        slot = position if position < sinks else sinks + (position - sinks) % window
        slots[slot] = position
    return slots


@pytest.mark.parametrize(
    ("sinks", "window", "chunks"),
    [
        (0, 4, [1] * 11),
        (2, 3, [1] * 9),
        pytest.param(1, 4, [3, 1, 6, 1, 2], marks=pytest.mark.matrix),
        pytest.param(0, 3, [7, 2], marks=pytest.mark.matrix),
    ],
)
def test_rolling_cache_holds_the_sinks_and_the_last_window(sinks, window, chunks):
    # Each row of the written cache is its position (a float), so the slots can be read back.
    length = sinks + window
    cache = np.full((1, length, 1), -1.0, "float32")
    start = 0
    for chunk in chunks:
        rows = np.arange(start, start + chunk, dtype="float32").reshape(1, chunk, 1)
        cache = ops.convert_to_numpy(_attention.write_rolling_rows(cache, rows, start, sinks))
        start += chunk
        expected = _ring_buffer(length, sinks, window, list(range(start)))
        got = {slot: int(cache[0, slot, 0]) for slot in range(length) if cache[0, slot, 0] >= 0}
        assert got == expected, (chunk, start)
    # Read back in order of position: the sinks, then the window before `start`.
    slots, positions, valid = (
        ops.convert_to_numpy(x) for x in _attention.rolling_positions(start, sinks, window)
    )
    recent = list(range(start - window, start))
    assert positions.tolist() == list(range(sinks)) + recent
    assert valid.tolist() == [p < start for p in range(sinks)] + [p >= sinks for p in recent]
    held = cache[0, slots, 0]
    assert held[valid].tolist() == positions[valid].astype("float32").tolist()


def _layer(**kwargs) -> layers.MultiHeadRelativeAttention:
    keras.utils.set_random_seed(3)
    return layers.MultiHeadRelativeAttention(num_heads=4, key_dim=8, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(relative="keys_values", sliding_window=16, attention_sinks=2, num_key_value_heads=2),
        pytest.param(
            dict(relative=None, rotary=layers.RotaryPositions(), sliding_window=16),
            marks=pytest.mark.matrix,
        ),
        pytest.param(
            dict(relative="bias", position="t5_decoder", sliding_window=24, logit_soft_cap=3.0),
            marks=pytest.mark.matrix,
        ),
        pytest.param(
            dict(relative="keys", relative_logits="skew", sliding_window=20, attention_sinks=1),
            marks=pytest.mark.matrix,
        ),
    ],
)
@pytest.mark.parametrize("causal", [True, False])
def test_window_blocks_read_only_their_keys_and_equal_the_masked_pass(kwargs, causal):
    # With static lengths a window's blocks attend to their keys only (about 2 W of 200);
    # asking for the scores takes the path over every key with the window as a mask.
    layer = _layer(query_block_size=32, **kwargs)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 200, 16)).astype("float32")
    padding = np.ones((2, 200), bool)
    padding[1, 150:] = False
    blocked = layer(x, x, use_causal_mask=causal, value_mask=padding)
    masked, scores = layer(
        x, x, use_causal_mask=causal, value_mask=padding, return_attention_scores=True
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(blocked), ops.convert_to_numpy(masked), atol=ATOL
    )
    # The scores show the band: nothing outside the window but the sinks.
    scores = ops.convert_to_numpy(scores)
    distance = np.abs(np.arange(200)[:, None] - np.arange(200)[None, :])
    outside = distance >= kwargs["sliding_window"]
    outside[:, : kwargs.get("attention_sinks", 0)] = False
    assert np.all(scores[:, :, outside] == 0)


@pytest.mark.parametrize("sinks", [0, 2])
def test_rolling_cache_does_not_grow_and_decodes_past_its_length(sinks):
    layer = _layer(
        relative="bias",
        position="t5_decoder",
        rotary=layers.RotaryPositions(),
        num_key_value_heads=1,
        sliding_window=4,
        attention_sinks=sinks,
    )
    rng = np.random.default_rng(1)
    length = 15
    x = rng.normal(size=(1, length, 16)).astype("float32")
    full = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    cache = np.zeros(layer.cache_shape(1, 1000), "float32")
    assert cache.shape == (1, 2, sinks + 4, 1, 8)
    # A prompt longer than the window, then single steps.
    output, cache = layer(
        x[:, :9], x[:, :9], cache=cache, cache_update_index=0, use_causal_mask=True
    )
    outputs = [ops.convert_to_numpy(output)]
    for t in range(9, length):
        output, cache = layer(
            x[:, t : t + 1],
            x[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
        )
        assert tuple(cache.shape) == (1, 2, sinks + 4, 1, 8)
        outputs.append(ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full, atol=ATOL)


def test_a_cache_longer_than_the_window_is_an_ordinary_one():
    # keras-hub's Mistral keeps a cache of the whole length and masks the band: the same.
    layer = _layer(relative=None, rotary=layers.RotaryPositions(), sliding_window=3)
    x = np.random.default_rng(2).normal(size=(1, 8, 16)).astype("float32")
    full = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    cache = np.zeros((1, 2, 8, 4, 8), "float32")
    steps = []
    for t in range(8):
        output, cache = layer(
            x[:, t : t + 1],
            x[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
        )
        steps.append(ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=ATOL)


@pytest.mark.neutral
def test_rolling_cache_refusals():
    x = np.zeros((1, 1, 16), "float32")
    layer = _layer(relative=None, sliding_window=3, attention_sinks=1)
    cache = np.zeros(layer.cache_shape(1, 10), "float32")
    with pytest.raises(ValueError, match="rolling cache.*cache_update_index"):
        layer(x, x, cache=cache, use_causal_mask=True)
    with pytest.raises(ValueError, match="rolling cache.*takes no `value_mask`"):
        layer(x, x, cache=cache, cache_update_index=0, value_mask=np.ones((1, 4), bool))
    dynamic = _layer(
        relative=None,
        sliding_window=3,
        rotary=layers.RotaryPositions(scaling="dynamic_ntk", training_length=4),
    )
    with pytest.raises(ValueError, match="rolling cache cannot replay"):
        dynamic(x, x, cache=np.zeros((1, 2, 3, 4, 8), "float32"), cache_update_index=0)
    fire = _layer(relative="bias", position="fire", sliding_window=3)
    with pytest.raises(ValueError, match="reads each query's own position"):
        fire(
            x,
            x,
            cache=np.zeros((1, 2, 3, 4, 8), "float32"),
            cache_update_index=0,
            use_causal_mask=True,
        )
    gqa = _layer(relative=None, num_key_value_heads=2)
    with pytest.raises(ValueError, match=r"\(batch, 2, max_len, 2, 8\)"):
        gqa(x, x, cache=np.zeros((1, 2, 5, 4, 8), "float32"), cache_update_index=0)


@pytest.mark.neutral
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(num_key_value_heads=3), "`num_key_value_heads` must divide num_heads=4"),
        (dict(num_key_value_heads=0), "num_key_value_heads"),
        (dict(sliding_window=0), "sliding_window"),
        (dict(attention_sinks=2), "without `sliding_window` every key is visible"),
        (dict(query_key_norm="l2"), "`query_key_norm` must be one of 'rms', 'layer'"),
        (dict(logit_soft_cap=0.0), "`logit_soft_cap` must be a positive number"),
        (dict(output_bias="no"), "output_bias"),
        (dict(query_scale_dim=0), "query_scale_dim"),
    ],
)
def test_decoder_arguments_are_checked_at_construction(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        layers.MultiHeadRelativeAttention(num_heads=4, key_dim=8, name="attention", **kwargs)


@pytest.mark.neutral
def test_decoder_options_round_trip_the_config_and_shape_the_weights():
    layer = layers.MultiHeadRelativeAttention(
        num_heads=4,
        key_dim=8,
        relative=None,
        num_key_value_heads=2,
        sliding_window=16,
        attention_sinks=1,
        query_key_norm="layer",
        query_key_norm_epsilon=1e-5,
        logit_soft_cap=30.0,
        use_bias=True,
        output_bias=False,
        query_scale_dim=12,
    )
    x = np.zeros((1, 3, 16), "float32")
    layer(x, x)
    clone = layers.MultiHeadRelativeAttention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert tuple(layer.key_dense.kernel.shape) == (16, 2, 8)
    assert tuple(layer.value_dense.kernel.shape) == (16, 2, 8)
    assert layer.key_dense.bias is not None and layer.output_dense.bias is None
    assert tuple(layer.query_norm.gamma.shape) == (8,)
