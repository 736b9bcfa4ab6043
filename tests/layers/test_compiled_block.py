"""Blocks of relative attention compiled by XLA in eager TensorFlow (`backend.compiled_block`).

Large eager blocks on TensorFlow run as one ``tf.function(jit_compile=True)`` per layer;
here the size threshold is lowered so that small inputs take that path, and the results
are checked against the numpy reference. Elsewhere (JAX, PyTorch, inside a TensorFlow
graph, small blocks, dropout in training) the plain method runs, which is checked too.
"""

from __future__ import annotations

import gc

import keras
import numpy as np
import pytest
from test_relative_attention import MODES, assert_close, built_layer, inputs, layer_weights

from keras_posenc import backend
from reference.relative_attention import causal_mask, clip_index_matrix, relative_attention

pytestmark = pytest.mark.contract

ON_TENSORFLOW = keras.backend.backend() == "tensorflow"
TENSORFLOW_ONLY = pytest.mark.skipif(
    not ON_TENSORFLOW,
    reason="XLA-compiled blocks are eager TensorFlow's (its op-by-op execution writes every "
    "(heads, q_len, k_len) intermediate); JAX and PyTorch run the plain method, checked below",
)


def _tensorflow_kernels():
    from keras_posenc.backend import tensorflow as tensorflow_kernels

    return tensorflow_kernels


def _compiled_traces(layer):
    """How often the layer's compiled block was traced (0: it never ran compiled)."""
    compiled = _tensorflow_kernels()._COMPILED_BLOCKS.get(layer, {}).get("_attend_block")
    return 0 if compiled is None else compiled.experimental_get_tracing_count()


@TENSORFLOW_ONLY
@pytest.mark.parametrize("relative", MODES)
def test_compiled_blocks_match_reference(relative, rng, monkeypatch):
    """Masks, an attention bias, causal masking and scores, in blocks of 3 + 3 + 1 queries."""
    monkeypatch.setattr(_tensorflow_kernels(), "COMPILED_BLOCK_MIN_LOGITS", 0)
    query, value = inputs(rng, 2, 7, 6), inputs(rng, 2, 9, 6)
    layer = built_layer(query, value, relative=relative, query_block_size=3)
    query_mask = np.ones((2, 7), bool)
    query_mask[1, 4] = False
    value_mask = np.array([[1] * 9, [1, 1, 0, 1, 1, 1, 1, 0, 1]], bool)
    attention_mask = rng.random((2, 7, 9)) > 0.2
    attention_mask[0, 5] = False  # a fully masked row
    attention_bias = rng.standard_normal((2, 2, 7, 9)).astype("float32")
    traced = _compiled_traces(layer)  # the programs of building the layer, without masks
    for causal in (False, True):
        mask = query_mask[:, :, None] & value_mask[:, None, :] & attention_mask
        if causal:
            mask = mask & causal_mask(7, 9)
        expected, probabilities = relative_attention(
            query,
            value,
            None,
            layer_weights(layer),
            relative,
            clip_index_matrix(7, 9, 3),
            mask,
            attention_bias,
        )
        output, scores = layer(
            query,
            value,
            query_mask=query_mask,
            value_mask=value_mask,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            use_causal_mask=causal,
            return_attention_scores=True,
        )
        assert_close(output, expected, what=f"{relative}, causal={causal}")
        assert_close(scores, probabilities, what=f"{relative} scores, causal={causal}")
    # Blocks of 3 and of 1 queries, with and without the causal mask: four programs,
    # the second block of 3 reusing the first's (its offset is an input).
    assert _compiled_traces(layer) - traced == 4


@TENSORFLOW_ONLY
def test_compiled_blocks_give_the_eager_gradients(rng, monkeypatch):
    query, value = inputs(rng, 2, 6, 6), inputs(rng, 2, 8, 6)
    layer = built_layer(query, value, relative="keys_values", query_block_size=4)
    import tensorflow as tf

    def gradients():
        with tf.GradientTape() as tape:
            output = layer(query, value, use_causal_mask=True)
            loss = tf.reduce_sum(output * output)
        return [np.asarray(g) for g in tape.gradient(loss, layer.trainable_variables)]

    eager = gradients()
    assert _compiled_traces(layer) == 0
    monkeypatch.setattr(_tensorflow_kernels(), "COMPILED_BLOCK_MIN_LOGITS", 0)
    compiled = gradients()
    assert _compiled_traces(layer) > 0
    # The key projection's bias adds the same logit to a whole row: its gradient is 0 up
    # to rounding, so the tolerance is relative to the largest gradient.
    scale = max(float(np.max(np.abs(g))) for g in eager)
    for a, b in zip(compiled, eager, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * scale)


class _Owner(keras.layers.Layer):
    def block(self, x):
        return x


@TENSORFLOW_ONLY
def test_compiled_block_only_where_it_applies(monkeypatch):
    layer = _Owner()
    big = _tensorflow_kernels().COMPILED_BLOCK_MIN_LOGITS

    def compiled(owner, logits, training, dropout):
        return backend.compiled_block(owner.block, logits, training, dropout) != owner.block

    assert compiled(layer, big, None, 0.0)
    assert not compiled(layer, big - 1, None, 0.0)  # small: eager
    assert not compiled(layer, big, True, 0.1)  # dropout active
    assert compiled(layer, big, False, 0.1)
    with backend.references_only():
        assert not compiled(layer, big, None, 0.0)
    import tensorflow as tf

    owner = _Owner()

    @tf.function
    def in_graph():
        return not compiled(owner, big, None, 0.0)

    assert bool(in_graph())  # a graph is TensorFlow's to optimise
    # Kept per owner and method, and only while the owner lives.
    assert backend.compiled_block(layer.block, big, None, 0.0) is (
        backend.compiled_block(layer.block, 2 * big, None, 0.0)
    )
    del layer
    gc.collect()
    assert not any(type(owner) is _Owner for owner in _tensorflow_kernels()._COMPILED_BLOCKS)


@pytest.mark.skipif(ON_TENSORFLOW, reason="on TensorFlow large eager blocks are compiled")
def test_no_compiled_blocks_on_other_backends():
    layer = _Owner()
    assert backend.compiled_block(layer.block, 2**30, None, 0.0) == layer.block
