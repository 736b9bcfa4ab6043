"""A one-step RelativeTransformerDecoder graph with its cache exports to ONNX and SavedModel.

The cache write is the attention core's gather-and-select (tf2onnx cannot convert
``ops.slice_update``'s ``XlaDynamicUpdateSlice``); the exported graphs must give the
Keras model's logits and updated cache, from every backend.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc.export import export_model
from keras_posenc.layers import LogBuckets, RelativeTransformerDecoder

pytestmark = pytest.mark.contract

MAX_LENGTH, HEADS, HEAD_DIM, HIDDEN = 6, 2, 4, 8


def decoder_step(relative: str) -> keras.Model:
    """``[x (batch, 1, hidden), index (1,), cache] -> [logits, updated cache]``; the cache
    is keras_hub's ``(batch, 2, max_length, heads, head_dim)``, keys then values."""
    x = keras.Input((1, HIDDEN), name="x")
    index = keras.Input(batch_shape=(1,), dtype="int32", name="index")
    cache = keras.Input((2, MAX_LENGTH, HEADS, HEAD_DIM), name="cache_decoder_layer_0")
    position = LogBuckets(num_buckets=8, max_distance=10, bidirectional=False)
    decoder = RelativeTransformerDecoder(
        16, HEADS, relative=relative, position=position, name="decoder_layer_0"
    )
    y, new_cache = decoder(
        x, self_attention_cache=cache, self_attention_cache_update_index=ops.reshape(index, ())
    )
    return keras.Model([x, index, cache], [keras.layers.Dense(5, name="logits")(y), new_cache])


def step_inputs(rng: np.random.Generator, batch: int, step: int) -> list:
    cache = np.zeros((batch, 2, MAX_LENGTH, HEADS, HEAD_DIM), "float32")
    cache[:, :, :step] = rng.standard_normal((batch, 2, step, HEADS, HEAD_DIM))
    x = rng.standard_normal((batch, 1, HIDDEN)).astype("float32")
    return [x, np.array([step], "int32"), cache]


@pytest.mark.large
@pytest.mark.parametrize("format", ["onnx", "tf_saved_model"])
def test_decoder_step_with_cache_exports(tmp_path, format):
    rng = np.random.default_rng(0)
    model = decoder_step("keys_values")
    runs = [step_inputs(rng, 2, 0), step_inputs(rng, 3, 4)]
    logits, cache = model(runs[1])
    written = ops.convert_to_numpy(cache)[:, :, 4]
    assert np.abs(written).max() > 0, "the step writes its keys and values at the index"
    np.testing.assert_array_equal(ops.convert_to_numpy(cache)[:, :, 5], 0.0)
    signature = [
        keras.InputSpec(shape=(None, 1, HIDDEN)),
        keras.InputSpec(shape=(1,), dtype="int32"),
        keras.InputSpec(shape=(None, 2, MAX_LENGTH, HEADS, HEAD_DIM)),
    ]
    path = os.path.join(tmp_path, "step.onnx" if format == "onnx" else "step")
    report = export_model(
        model,
        path,
        format=format,
        input_signature=signature,
        verify_inputs=runs,
        output_names=["logits", "new_cache_decoder_layer_0"],
    )
    assert report.max_abs_difference <= 1e-4, report
    # The inputs keep the keras.Input names (the signature's specs have none); the
    # updated cache, which Keras would name after its layer, gets the name given.
    assert [name for name, _, _ in report.inputs] == ["x", "index", "cache_decoder_layer_0"]
    assert [name for name, _, _ in report.outputs] == ["logits", "new_cache_decoder_layer_0"]
