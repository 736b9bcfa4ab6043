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
from remat_gradients import assert_same, counting_remat, gradients, reseed

from keras_posenc.layers import (
    MultiHeadRelativeAttention,
    RelativeTransformerDecoder,
    RelativeTransformerEncoder,
)

pytestmark = pytest.mark.contract

MODES = ("bias", "keys", "keys_values")


@pytest.fixture
def remat_calls(monkeypatch):
    """How many functions Keras' remat wrapped (the blocks recomputed)."""
    return counting_remat(monkeypatch)


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

    got = gradients(blocked, (query, value), call)
    assert len(remat_calls) == 3  # blocks of 4 + 4 + 3 queries, each recomputed
    assert_same(got, gradients(whole, (query, value), call))


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

    got = gradients(blocked, (x, bias), call)
    assert remat_calls
    assert_same(got, gradients(whole, (x, bias), call))


def test_no_recomputation_outside_training(rng, remat_calls):
    blocked, whole = _pair(rng, relative="keys")
    x = rng.standard_normal((2, 11, 8)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(blocked(x, x)), ops.convert_to_numpy(whole(x, x)), atol=1e-5
    )
    assert not remat_calls


def test_dropout_is_replayed_in_the_recomputation(rng, monkeypatch):
    """With dropout the recomputed blocks draw the masks of the first pass, those the layer
    draws without recomputation: equal outputs, and the gradients of that output."""
    layer = MultiHeadRelativeAttention(
        2, 4, relative="keys_values", query_block_size=4, dropout=0.5
    )
    x = rng.standard_normal((2, 11, 8)).astype("float32")
    layer(x, x)
    reset = reseed(layer)

    def call(layer, x):
        return layer(x, x, training=True)

    reset()
    got = gradients(layer, (x,), call)
    reset()
    monkeypatch.setattr(keras, "remat", lambda function: function)  # no recomputation
    monkeypatch.setattr(layer, "_dropout_seeds", lambda training: None)  # the layer's draws
    expected = gradients(layer, (x,), call)
    assert np.mean(got[0] != 0) > 0  # dropout active: some probabilities dropped
    assert_same(got, expected)


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
    reset = reseed(remat)
    for variable, state in zip(plain.non_trainable_variables, remat.non_trainable_variables):
        variable.assign(state.value)

    def call(layer, x):
        return layer(x, padding_mask=padding, training=True)

    reset()
    got = gradients(remat, (x,), call)
    assert remat_calls
    reset()
    assert_same(got, gradients(plain, (x,), call))


def test_decoder_remat_gives_the_same_gradients(rng, remat_calls):
    remat, plain = _blocks(RelativeTransformerDecoder, relative="bias")
    decoder = rng.standard_normal((2, 6, 8)).astype("float32")
    encoder = rng.standard_normal((2, 5, 8)).astype("float32")
    for layer in (remat, plain):
        layer(decoder, encoder)
    plain.set_weights(remat.get_weights())

    def call(layer, decoder, encoder):
        return layer(decoder, encoder, training=True)

    got = gradients(remat, (decoder, encoder), call)
    assert remat_calls
    assert_same(got, gradients(plain, (decoder, encoder), call))


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

    got = gradients(remat, (), call)
    assert len(remat_calls) >= 2  # the encoder's block and the decoder's
    assert_same(got, gradients(plain, (), call))


def test_shifted_window_block_remat_gives_the_same_gradients(rng, remat_calls):
    """`RelativeTransformerBlock2D` (CoAtNet's, MaxViT's, Swin's blocks) in Swin's shifted
    windows, stochastic depth active: the recomputation draws the first pass's noise."""
    from keras_posenc.layers.coatnet import RelativeTransformerBlock2D

    arguments = dict(head_dim=4, partition="block", partition_size=4, shift="half")
    remat = RelativeTransformerBlock2D(8, remat=True, drop_path_rate=0.5, seed=1, **arguments)
    plain = RelativeTransformerBlock2D(8, drop_path_rate=0.5, seed=1, **arguments)
    assert remat.get_config()["remat"] is True and plain.get_config()["remat"] is False
    x = rng.standard_normal((4, 8, 8, 8)).astype("float32")
    for layer in (remat, plain):
        layer(x)
    plain.set_weights(remat.get_weights())
    reset = reseed(remat)

    def call(layer, x):
        return layer(x, training=True)

    reset()
    got = gradients(remat, (x,), call)
    assert len(remat_calls) == 1
    reset()
    expected = gradients(plain, (x,), call)
    # Stochastic depth was active: some examples' branches were dropped.
    assert not np.allclose(got[0], ops.convert_to_numpy(plain(x)), atol=1e-4)
    assert_same(got, expected)


@pytest.mark.neutral
def test_remat_is_a_bool_and_refuses_batch_norm():
    from keras_posenc.layers import DecoderBlock
    from keras_posenc.layers.coatnet import RelativeTransformerBlock2D

    with pytest.raises(TypeError, match=r"DecoderBlock.*`remat` must be True or False, got 1"):
        DecoderBlock(16, 2, remat=1)
    with pytest.raises(ValueError, match=r"remat=True .* norm='batch' would update its moving"):
        RelativeTransformerBlock2D(8, head_dim=4, norm="batch", remat=True)
    assert DecoderBlock.from_config(DecoderBlock(16, 2, remat=True).get_config()).remat
