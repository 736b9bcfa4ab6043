"""T5's cached decoding computes one row of the decoder's relative bias per step, not the whole
(max_length, max_length) matrix: each step's bias is ``(1, heads, 1, max_length)``, it is row
``index`` of the full decoder's bias, the encoder's bias is not computed again, and the step's
logits equal the full decoder's at every position (issue 52, item 4)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc.layers import RelativePositionBias
from keras_posenc.zoo.t5 import T5

pytestmark = pytest.mark.contract

VOCAB = 31
MAX_LENGTH = 16  # distances past 8 reach the log-spaced buckets (max_distance 12)


def to_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor), "float64")


def tiny(**overrides):
    keras.utils.set_random_seed(0)
    config = dict(
        hidden_dim=8,
        intermediate_dim=12,
        num_heads=2,
        num_layers=1,
        num_decoder_layers=2,
        dropout=0.0,
        num_buckets=8,
        max_distance=12,
    )
    return T5(VOCAB, **{**config, **overrides})


@pytest.fixture
def bias_calls(monkeypatch):
    """Every `RelativePositionBias` call: (the layer, its lengths and offset, its output)."""
    calls = []
    original = RelativePositionBias.call

    def spy(self, query_length, key_length, offset=0):
        output = original(self, query_length, key_length, offset)
        calls.append((self, (query_length, key_length, offset), to_numpy(output)))
        return output

    monkeypatch.setattr(RelativePositionBias, "call", spy)
    return calls


@pytest.mark.parametrize("position", [None, "alibi"], ids=["buckets", "alibi"])
def test_each_cached_step_computes_one_bias_row(bias_calls, position):
    # T5's log buckets (a table) and a computed scheme (a transplant) take different
    # branches of `RelativePositionBias.per_head`; both must compute one row.
    model = tiny(position=position)
    decoder_bias = model.decoder.position_bias
    rng = np.random.default_rng(0)
    source = rng.integers(2, VOCAB, (2, 9)).astype("int32")
    source[1, 6:] = model.pad_id
    state = model.encode(source)
    # The full decoder reads tokens whose positions after each step are random: equal
    # logits also show that no step sees a later position.
    tokens = rng.integers(2, VOCAB, (2, MAX_LENGTH)).astype("int32")
    tokens[:, 0] = model.bos_id
    full_logits = to_numpy(model.decode(tokens, state))
    bias_calls.clear()
    full_bias = to_numpy(decoder_bias(MAX_LENGTH, MAX_LENGTH))[0]  # (heads, L, L)
    bias_calls.clear()
    cache = model.init_cache(state, MAX_LENGTH)
    for index in range(MAX_LENGTH):
        logits, cache = model.decode_step(tokens[:, index], cache, index)
        # One bias, the decoder's (the encoder's is in the cache), of one query row.
        assert [layer for layer, _, _ in bias_calls] == [decoder_bias], index
        (_, (query_length, key_length, offset), row), *_ = bias_calls
        assert row.shape == (1, model.num_heads, 1, MAX_LENGTH), index
        assert int(query_length) == 1 and int(key_length) == MAX_LENGTH, index
        assert int(to_numpy(offset)) == index
        np.testing.assert_allclose(row[0, :, 0], full_bias[:, index], atol=1e-6)
        np.testing.assert_allclose(to_numpy(logits), full_logits[:, index], atol=1e-5)
        bias_calls.clear()
