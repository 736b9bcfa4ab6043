"""Relative attention's per-backend speed paths, each against the numpy reference.

- `backend.cumulative_sum` (the value term's cumulative sums): blocks of matrix
  products on TensorFlow, ``keras.ops.cumsum`` elsewhere, in place on PyTorch in a
  call's scratch.
- `backend.scratch` (PyTorch without gradients, `keras_posenc.backend.torch.Workspace`):
  block-sized buffers reused by every block of queries in one call, the logits and
  softmax written into them (`backend.attention_probabilities`), the keys and values
  transposed once for the fused kernel (`backend.fused_attention`).
- `backend.query_block_bytes`: the automatic query block, per backend.

The PyTorch-only tests say why in their skip reason; the decision functions are
tested on every backend.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops
from test_relative_attention import assert_close, built_layer, inputs, layer_weights, to_numpy
from test_relative_gather import ON_TORCH, no_gradients

from keras_posenc import backend
from keras_posenc.backend import _registry
from keras_posenc.layers import ClipPositions, _attention
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
from reference.relative_attention import causal_mask, clip_index_matrix, relative_attention

pytestmark = pytest.mark.contract

TORCH_ONLY = pytest.mark.skipif(
    not ON_TORCH,
    reason="scratch buffers exist only for eager PyTorch without gradients: PyTorch has no "
    "caching CPU allocator (keras_posenc/backend/torch.py, Workspace); elsewhere "
    "`backend.scratch` is the reference's null context",
)


# Lengths around TensorFlow's former blocks of 32 keys, and a padded end.
@pytest.mark.parametrize("length", [1, 5, 32, 33, 64, 100])
def test_cumulative_sum_matches_numpy(length, rng):
    values = rng.random((2, 3, 4, length)).astype("float32")
    actual = ops.convert_to_numpy(backend.cumulative_sum(ops.convert_to_tensor(values)))
    expected = np.cumsum(values.astype("float64"), axis=-1)
    assert actual.shape == expected.shape and actual.dtype == np.float32
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_cumulative_sum_casts_to_float32(rng):
    values = rng.random((1, 2, 3, 40)).astype("float16")
    actual = backend.cumulative_sum(ops.convert_to_tensor(values))
    assert keras.backend.standardize_dtype(actual.dtype) == "float32"
    expected = np.cumsum(values.astype("float64"), axis=-1)
    np.testing.assert_allclose(ops.convert_to_numpy(actual), expected, rtol=1e-5, atol=1e-5)


def test_automatic_query_block_size_per_backend():
    block_bytes = backend.query_block_bytes()
    measured = {"tensorflow": 32, "jax": 32, "torch": 16}[keras.backend.backend()]
    assert block_bytes == (measured if backend.device() == "cpu" else 32) * 2**20
    layer = MultiHeadRelativeAttention(8, 64)
    for length in (512, 1024, 2048, 4096):
        logits = 4 * 8 * length * length
        block = layer._query_block(length, length, None, None)
        if logits <= block_bytes:
            assert block is None, length
        else:  # blocks of at most block_bytes, split evenly
            assert block is not None and 4 * 8 * length * block <= block_bytes, length
            assert block >= _attention.MIN_AUTO_BLOCK
            assert length % block == 0, (length, block)


# --------------------------------------------------------------------------- PyTorch


def _count(monkeypatch, name):
    """Records, for each call of the backend's override of kernel ``name``, whether it
    computed the result (rather than leaving it to the reference)."""
    taken = []
    entry = _registry.overrides()[name]
    original = entry.function

    def counting(*args):
        result = original(*args)
        taken.append(result is not backend.REFERENCE)
        return result

    monkeypatch.setattr(entry, "function", counting)
    return taken


def _count_buffers(monkeypatch):
    """The buffers `Workspace.buffer` allocates, as (name, shape)."""
    from keras_posenc.backend import torch as torch_kernels

    allocated = []
    original = torch_kernels.Workspace.buffer

    def counting(self, name, shape, like):
        before = self._buffers.get(name)
        result = original(self, name, shape, like)
        if result is not before:
            allocated.append((name, tuple(shape)))
        return result

    monkeypatch.setattr(torch_kernels.Workspace, "buffer", counting)
    return allocated


@TORCH_ONLY
def test_scratch_only_for_eager_float32_torch_without_gradients(rng, monkeypatch):
    q = ops.convert_to_tensor(inputs(rng, 1, 4, 8).reshape(1, 4, 2, 4))
    taken = _count(monkeypatch, "attention_probabilities")
    with backend.scratch():
        backend.attention_probabilities(q, q, None)  # gradients are recorded
    with no_gradients():
        backend.attention_probabilities(q, q, None)  # no scratch opened
        with backend.scratch():
            backend.attention_probabilities(q, q, None)
            half = ops.cast(q, "float16")
            backend.attention_probabilities(half, half, None)
    assert taken == [False, False, True, False]


@TORCH_ONLY
@pytest.mark.parametrize("relative", ["keys", "keys_values"])
@pytest.mark.parametrize("case", ["plain", "masks_and_causal", "attention_bias"])
@pytest.mark.parametrize("block", [None, 16])
def test_workspace_path_matches_reference(relative, case, block, rng, monkeypatch):
    """70 queries (blocks of 16: 14 + 14 + 14 + 14 + 14) against 66 or 70 keys."""
    query_length, key_length = 70, (70 if case == "masks_and_causal" else 66)
    query, value = inputs(rng, 2, query_length, 6), inputs(rng, 2, key_length, 6)
    layer = built_layer(query, value, relative=relative, query_block_size=block)
    index = clip_index_matrix(query_length, key_length, 3)
    kwargs, mask, bias = {}, None, None
    if case == "masks_and_causal":
        value_mask = np.ones((2, key_length), bool)
        value_mask[1, 50:] = False
        query_mask = np.ones((2, query_length), bool)
        query_mask[0, 3] = False
        kwargs = dict(value_mask=value_mask, query_mask=query_mask, use_causal_mask=True)
        mask = value_mask[:, None, :] & query_mask[:, :, None]
        mask = mask & causal_mask(query_length, key_length)
    elif case == "attention_bias":
        bias = rng.standard_normal((2, 2, query_length, key_length)).astype("float32")
        kwargs = dict(attention_bias=bias)
    expected, _ = relative_attention(
        query, value, None, layer_weights(layer), relative, index, mask, attention_bias=bias
    )
    path = "fused_attention" if relative == "keys" else "attention_probabilities"
    taken = _count(monkeypatch, path)
    allocated = _count_buffers(monkeypatch)
    with no_gradients():
        output = layer(query, value, **kwargs)
    blocks = 1 if block is None else 5
    assert taken == [True] * blocks, f"{path} computed every block"
    assert_close(output, expected, what=f"{relative}, {case}, blocks of {block}")
    # One buffer per name for all blocks (they are of equal size): each block reuses it.
    names = [name for name, _ in allocated]
    assert len(names) == len(set(names)), allocated
    # Gradients recorded: the plain keras.ops path, the same numbers.
    taken.clear()
    assert_close(layer(query, value, **kwargs), expected, what="with gradients")
    assert not any(taken)


@TORCH_ONLY
def test_workspace_reuse_keeps_each_blocks_result(rng, monkeypatch):
    """Blocks of 14 + 14 + 14 + 14 + 14 queries: a block's output must not alias a buffer
    that the next block overwrites, and an uneven last block gets its own buffer."""
    query = inputs(rng, 1, 70, 6)
    layer = built_layer(query, query, relative="keys_values", query_block_size=14)
    uneven = built_layer(query, query, relative="keys_values", query_block_size=30)
    weights, index = layer_weights(layer), clip_index_matrix(70, 70, 3)
    expected, _ = relative_attention(query, query, None, weights, "keys_values", index)
    allocated = _count_buffers(monkeypatch)
    with no_gradients():
        output = to_numpy(layer(query, query))
        first = to_numpy(layer(query, query))  # a second call: a new workspace
        other = to_numpy(uneven(query, query))  # 24 + 24 + 22 queries
    assert_close(output, expected, what="blocks of 14")
    np.testing.assert_array_equal(first, output)
    expected, _ = relative_attention(
        query, query, None, layer_weights(uneven), "keys_values", index
    )
    assert_close(other, expected, what="blocks of 24, 24, 22")
    shapes = [shape for name, shape in allocated if name == "bias"]
    assert shapes == [(1, 2, 14, 70), (1, 2, 14, 70), (1, 2, 24, 70), (1, 2, 22, 70)]


@TORCH_ONLY
def test_no_workspace_with_scores_or_half_precision(rng, monkeypatch):
    query = inputs(rng, 2, 20, 6)
    layer = built_layer(query, query, relative="keys_values", query_block_size=8)
    expected, probabilities = relative_attention(
        query, query, None, layer_weights(layer), "keys_values", clip_index_matrix(20, 20, 3)
    )
    taken = _count(monkeypatch, "attention_probabilities")
    with no_gradients():
        output, scores = layer(query, query, return_attention_scores=True)
    assert taken and not any(taken), "scores are kept per block: no buffers reused"
    assert_close(output, expected, what="output with scores")
    assert_close(scores, probabilities, what="scores")
    half = MultiHeadRelativeAttention(
        2, 4, relative="keys_values", position=ClipPositions(3), dtype="float16"
    )
    with no_gradients():
        result = to_numpy(half(query, query))
    assert not any(taken) and np.isfinite(result).all()
