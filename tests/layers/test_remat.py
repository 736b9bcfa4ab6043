"""Training in bounded memory: query blocks recomputed in the backward pass, and the
Transformer blocks' ``remat=True`` (keras_posenc/layers/_attention.py ``attend_in_blocks``,
keras_posenc/layers/_remat.py).

Gradients of a blocked, recomputed attention equal those of the unblocked one (every
relative mode, masks, a causal mask and an attention bias); with dropout the recomputation
draws the masks of the first pass, which are the masks drawn without recomputation; a block
with ``remat=True`` gives the gradients of the same block without it.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc.layers import (
    MultiHeadRelativeAttention,
    RelativeTransformerDecoder,
    RelativeTransformerEncoder,
)

pytestmark = pytest.mark.contract

BACKEND = keras.backend.backend()
MODES = ("bias", "keys", "keys_values")


def _gradients(layer, inputs, call):
    """``call(layer, *inputs)`` and the gradients of a fixed weighted sum of it with respect
    to the float inputs and the layer's trainable weights (NumPy arrays)."""
    weights = None

    def total(output):
        nonlocal weights
        if weights is None:
            rng = np.random.default_rng(1)
            weights = rng.standard_normal(tuple(output.shape)).astype("float32")
        return ops.sum(output * ops.convert_to_tensor(weights))

    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(x) for x in inputs]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            output = call(layer, *tensors)
            loss = total(output)
        grads = tape.gradient(loss, tensors + [v.value for v in layer.trainable_variables])
    elif BACKEND == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss(trainable, *tensors):
            state = list(zip(layer.trainable_variables, trainable, strict=True))
            state += list(zip(layer.non_trainable_variables, non_trainable, strict=True))
            with keras.StatelessScope(state_mapping=state):
                output = call(layer, *tensors)
            return total(output), output

        argnums = tuple(range(len(inputs) + 1))
        # Compiled: op by op, JAX's gradients of a recomputed block took a minute here.
        gradients = jax.jit(jax.value_and_grad(loss, argnums, has_aux=True))
        (_, output), grads = gradients(trainable, *inputs)
        grads = list(grads[1:]) + list(grads[0])
    else:
        import torch

        tensors = [torch.tensor(x, requires_grad=True) for x in inputs]
        for variable in layer.trainable_variables:
            variable.value.grad = None
        output = call(layer, *tensors)
        total(output).backward()
        grads = [t.grad for t in tensors] + [v.value.grad for v in layer.trainable_variables]
    assert all(g is not None for g in grads)
    return ops.convert_to_numpy(output), [ops.convert_to_numpy(g) for g in grads]


def _assert_same(got, expected, atol=1e-5):
    (output, grads), (expected_output, expected_grads) = got, expected
    np.testing.assert_allclose(output, expected_output, rtol=1e-5, atol=atol)
    assert len(grads) == len(expected_grads)
    for index, (grad, want) in enumerate(zip(grads, expected_grads, strict=True)):
        np.testing.assert_allclose(grad, want, rtol=1e-5, atol=atol, err_msg=f"gradient {index}")


@pytest.fixture
def remat_calls(monkeypatch):
    """How many functions Keras' remat wrapped (the blocks recomputed)."""
    calls = []
    wrap = keras.remat

    def counting(function):
        calls.append(function)
        return wrap(function)

    monkeypatch.setattr(keras, "remat", counting)
    return calls


def _pair(rng, **arguments):
    """A layer in blocks of 4 queries and the same layer unblocked, equal weights."""
    x = rng.standard_normal((2, 11, 8)).astype("float32")
    blocked = MultiHeadRelativeAttention(2, 4, query_block_size=4, **arguments)
    whole = MultiHeadRelativeAttention(2, 4, **arguments)
    blocked(x, x)
    whole(x, x)
    whole.set_weights(blocked.get_weights())
    return blocked, whole


@pytest.mark.parametrize("relative", MODES)
def test_recomputed_blocks_give_the_unblocked_gradients(relative, rng, remat_calls):
    blocked, whole = _pair(rng, relative=relative)
    query = rng.standard_normal((2, 11, 8)).astype("float32")
    value = rng.standard_normal((2, 9, 8)).astype("float32")

    def call(layer, query, value):
        return layer(query, value, training=True)

    got = _gradients(blocked, (query, value), call)
    assert len(remat_calls) == 3  # blocks of 4 + 4 + 3 queries, each recomputed
    _assert_same(got, _gradients(whole, (query, value), call))


def test_recomputed_blocks_with_masks_causal_and_a_bias(rng, remat_calls):
    blocked, whole = _pair(rng, relative="keys_values")
    x = rng.standard_normal((2, 11, 8)).astype("float32")
    bias = rng.standard_normal((2, 2, 11, 11)).astype("float32")
    padding = np.ones((2, 11), bool)
    padding[1, 8:] = False

    def call(layer, x, bias):
        return layer(
            x,
            x,
            query_mask=padding,
            value_mask=padding,
            attention_bias=bias,
            use_causal_mask=True,
            training=True,
        )

    got = _gradients(blocked, (x, bias), call)
    assert remat_calls
    _assert_same(got, _gradients(whole, (x, bias), call))


def test_no_recomputation_outside_training(rng, remat_calls):
    blocked, whole = _pair(rng, relative="keys")
    x = rng.standard_normal((2, 11, 8)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(blocked(x, x)), ops.convert_to_numpy(whole(x, x)), atol=1e-5
    )
    assert not remat_calls


def _reseed(layer):
    """A function that puts the layer's seed generators (and PyTorch's) back as now."""
    states = [ops.convert_to_numpy(v.value) for v in layer.non_trainable_variables]

    def reset():
        for variable, state in zip(layer.non_trainable_variables, states, strict=True):
            variable.assign(state)
        if BACKEND == "torch":
            import torch

            torch.manual_seed(3)

    return reset


def test_dropout_is_replayed_in_the_recomputation(rng, monkeypatch):
    """With dropout the recomputed blocks draw the masks of the first pass, those the layer
    draws without recomputation: equal outputs, and the gradients of that output."""
    layer = MultiHeadRelativeAttention(
        2, 4, relative="keys_values", query_block_size=4, dropout=0.5
    )
    x = rng.standard_normal((2, 11, 8)).astype("float32")
    layer(x, x)
    reset = _reseed(layer)

    def call(layer, x):
        return layer(x, x, training=True)

    reset()
    got = _gradients(layer, (x,), call)
    reset()
    monkeypatch.setattr(keras, "remat", lambda function: function)  # no recomputation
    monkeypatch.setattr(layer, "_dropout_seeds", lambda training: None)  # the layer's draws
    expected = _gradients(layer, (x,), call)
    assert np.mean(got[0] != 0) > 0  # dropout active: some probabilities dropped
    _assert_same(got, expected)


def _blocks(block, **arguments):
    first = block(16, 2, remat=True, **arguments)
    second = block(16, 2, **arguments)
    assert first.get_config()["remat"] is True and second.get_config()["remat"] is False
    assert block.from_config(first.get_config()).remat is True
    return first, second


def test_encoder_remat_gives_the_same_gradients(rng, remat_calls):
    """With dropout: the recomputation draws the masks of the first pass."""
    remat, plain = _blocks(RelativeTransformerEncoder, dropout=0.3, relative="keys")
    x = rng.standard_normal((2, 7, 8)).astype("float32")
    padding = np.array([[1] * 7, [1] * 5 + [0] * 2], bool)
    for layer in (remat, plain):
        layer(x, padding_mask=padding)
    plain.set_weights(remat.get_weights())
    reset = _reseed(remat)
    for variable, state in zip(plain.non_trainable_variables, remat.non_trainable_variables):
        variable.assign(state.value)

    def call(layer, x):
        return layer(x, padding_mask=padding, training=True)

    reset()
    got = _gradients(remat, (x,), call)
    assert remat_calls
    reset()
    _assert_same(got, _gradients(plain, (x,), call))


def test_decoder_remat_gives_the_same_gradients(rng, remat_calls):
    remat, plain = _blocks(RelativeTransformerDecoder, relative="bias")
    decoder = rng.standard_normal((2, 6, 8)).astype("float32")
    encoder = rng.standard_normal((2, 5, 8)).astype("float32")
    for layer in (remat, plain):
        layer(decoder, encoder)
    plain.set_weights(remat.get_weights())

    def call(layer, decoder, encoder):
        return layer(decoder, encoder, training=True)

    got = _gradients(remat, (decoder, encoder), call)
    assert remat_calls
    _assert_same(got, _gradients(plain, (decoder, encoder), call))


def test_zoo_model_remat_gives_the_same_gradients(rng, remat_calls):
    """A zoo model's ``remat=True`` reaches its blocks and its config; equal gradients."""
    from keras_posenc.zoo.relative_transformers import ShawTransformer

    arguments = dict(hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1, dropout=0.0)
    remat = ShawTransformer(20, remat=True, **arguments)
    plain = ShawTransformer(20, **arguments)
    assert remat.get_config()["remat"] is True
    assert all(block.remat for block in remat.encoder_blocks + remat.decoder_blocks)
    ids = {
        "encoder_token_ids": rng.integers(3, 20, (2, 5)).astype("int32"),
        "decoder_token_ids": rng.integers(3, 20, (2, 4)).astype("int32"),
    }
    remat(ids)
    plain(ids)
    plain.set_weights(remat.get_weights())

    def call(model):
        return model(ids, training=True)

    got = _gradients(remat, (), call)
    assert len(remat_calls) >= 2  # the encoder's block and the decoder's
    _assert_same(got, _gradients(plain, (), call))
