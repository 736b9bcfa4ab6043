"""Today's decoder options of `MultiHeadRelativeAttention` export to ONNX and give the Keras
model's outputs in ONNX Runtime: grouped- and multi-query heads, sliding windows (causal with
sinks, and bidirectional) in a full pass, soft-capped logits, query-key norms, projections
without an output bias, another query scale; and a decoding step on a rolling cache (the cache
and its index as inputs), whose slots wrap around once the window is full.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from keras_posenc.export import export_model

# Large: tf2onnx on a model of nine attention layers (and a decoder step), run once on the
# large tier's backend, as tests/test_export.py's position schemes are.
pytestmark = pytest.mark.large

HIDDEN, HEADS, HEAD_DIM = 16, 4, 4


def options_model() -> keras.Model:
    """Each decoder option on one attention layer of a small sequence model."""
    inputs = keras.Input((None, HIDDEN), name="tokens")
    x = inputs

    def attention(x, causal=True, **arguments):
        layer = layers.MultiHeadRelativeAttention(HEADS, HEAD_DIM, **arguments)
        return layer(x, x, use_causal_mask=causal)

    rotary = layers.RotaryPositions(max_wavelength=100)
    x = attention(x, relative=None, rotary=rotary, num_key_value_heads=2)
    x = attention(
        x, relative="keys_values", position=layers.ClipPositions(3), num_key_value_heads=1
    )
    # Windows of 4 keys: the verification's lengths (7 and 11) are longer.
    buckets = layers.LogBuckets(num_buckets=8, max_distance=16, bidirectional=False)
    x = attention(x, relative="bias", position=buckets, sliding_window=4, attention_sinks=1)
    x = attention(
        x, causal=False, relative="keys", position=layers.ClipPositions(2), sliding_window=3
    )
    x = attention(x, relative=None, rotary=rotary, logit_soft_cap=0.5)
    x = attention(x, relative="bias", position=buckets, query_key_norm="rms")
    x = attention(x, relative=None, query_key_norm="layer", query_key_norm_epsilon=1e-5)
    x = attention(x, relative=None, use_bias=True, output_bias=False)
    x = attention(x, relative=None, query_scale_dim=2 * HEAD_DIM)
    return keras.Model(inputs, x)


def test_decoder_options_export_to_onnx(tmp_path):
    report = export_model(options_model(), os.path.join(tmp_path, "options.onnx"))
    assert report.max_abs_difference is not None and report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, HIDDEN)], [(2, 11, HIDDEN)]]


SINKS, WINDOW, KV_HEADS = 1, 3, 2
ROLLING = SINKS + WINDOW


def rolling_step() -> keras.Model:
    """``[x (batch, 1, hidden), index (1,), cache] -> [logits, updated cache]`` of a decoder
    block with a window of 3 keys, one sink and a rolling cache of 4 positions."""
    x = keras.Input((1, HIDDEN), name="x")
    index = keras.Input(batch_shape=(1,), dtype="int32", name="index")
    cache = keras.Input((2, ROLLING, KV_HEADS, HEAD_DIM), name="cache")
    decoder = layers.RelativeTransformerDecoder(
        32,
        HEADS,
        relative="bias",
        position=layers.LogBuckets(num_buckets=8, max_distance=16, bidirectional=False),
        rotary=layers.RotaryPositions(max_wavelength=100),
        num_key_value_heads=KV_HEADS,
        sliding_window=WINDOW,
        attention_sinks=SINKS,
        query_key_norm="rms",
        logit_soft_cap=2.0,
        name="decoder",
    )
    y, new_cache = decoder(
        x, self_attention_cache=cache, self_attention_cache_update_index=ops.reshape(index, ())
    )
    return keras.Model([x, index, cache], [keras.layers.Dense(5, name="logits")(y), new_cache])


def test_rolling_cache_step_exports_to_onnx(tmp_path):
    model = rolling_step()
    assert model.get_layer("decoder").self_attention.cache_shape(1, 100)[2] == ROLLING
    rng = np.random.default_rng(0)

    def step(batch, index):
        cache = rng.standard_normal((batch, 2, ROLLING, KV_HEADS, HEAD_DIM)).astype("float32")
        x = rng.standard_normal((batch, 1, HIDDEN)).astype("float32")
        return [x, np.array([index], "int32"), cache]

    # Before the cache is full (unwritten slots masked), when just full, and at position 11,
    # long after it rolled over: a step writes slot SINKS + (index - SINKS) % WINDOW.
    runs = [step(2, 2), step(3, ROLLING), step(2, 11)]
    _, updated = model(runs[2])
    changed = np.any(ops.convert_to_numpy(updated) != runs[2][2], axis=(0, 1, 3, 4))
    assert changed.tolist() == [slot == SINKS + (11 - SINKS) % WINDOW for slot in range(ROLLING)]
    signature = [
        keras.InputSpec(shape=(None, 1, HIDDEN)),
        keras.InputSpec(shape=(1,), dtype="int32"),
        keras.InputSpec(shape=(None, 2, ROLLING, KV_HEADS, HEAD_DIM)),
    ]
    report = export_model(
        model,
        os.path.join(tmp_path, "step.onnx"),
        input_signature=signature,
        verify_inputs=runs,
        output_names=["logits", "new_cache"],
    )
    assert report.max_abs_difference <= 1e-4, report
    assert [name for name, _, _ in report.inputs] == ["x", "index", "cache"]
    assert [name for name, _, _ in report.outputs] == ["logits", "new_cache"]
