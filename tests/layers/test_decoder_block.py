"""`DecoderBlock` (issue 50): equal to keras-hub's Llama block on copied random weights,
cached steps equal to the full pass with a rolling cache, padding, the config round trip and
the errors. The whole models are tests/zoo/test_decoder_lm.py and
tests/test_convert_keras_hub_decoders.py."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_posenc.layers import DecoderBlock, RotaryPositions
from layer_checks import decode_step_by_step

pytestmark = pytest.mark.contract

RNG = np.random.default_rng(0)


def test_equals_keras_hubs_llama_block_by_weight_path():
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=10, num_layers=1, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=16, intermediate_dim=24,
    )  # fmt: skip
    for weight in backbone.weights:
        value = RNG.normal(size=tuple(weight.shape)).astype("float32") * 0.3
        weight.assign(value + (1.0 if weight.path.endswith("scale") else 0.0))
    hub = backbone.transformer_layers[0]
    block = DecoderBlock(
        intermediate_dim=24, num_heads=4, num_key_value_heads=2, rotary=RotaryPositions()
    )
    x = RNG.normal(size=(2, 7, 16)).astype("float32")
    block(x)
    names = {  # keras-hub's weight names -> ours
        "self_attention/query": "attention/query",
        "self_attention/key": "attention/key",
        "self_attention/value": "attention/value",
        "self_attention/attention_output": "attention/attention_output",
        "self_attention_layernorm": "attention_norm",
        "feedforward_gate_dense": "gate",
        "feedforward_intermediate_dense": "up",
        "feedforward_output_dense": "down",
        "feedforward_layernorm": "feedforward_norm",
    }
    ours = {weight.path.split("/", 1)[1]: weight for weight in block.weights}
    for weight in hub.weights:
        path = weight.path.split("/", 1)[1]
        for theirs, mine in names.items():
            if path.startswith(theirs + "/"):
                ours.pop(mine + path[len(theirs) :]).assign(weight)
    assert not ours  # every weight of ours was copied
    expected = hub(x, decoder_padding_mask=np.ones((2, 7), "int32"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(block(x)), ops.convert_to_numpy(expected), atol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rotary=RotaryPositions(), sliding_window=3, attention_sinks=1, num_key_value_heads=1),
        pytest.param(
            dict(
                relative="bias",
                position="alibi",
                use_post_attention_norm=True,
                use_post_feedforward_norm=True,
                activation="gelu_tanh",
                logit_soft_cap=4.0,
            ),
            marks=pytest.mark.matrix,
        ),
    ],
)
def test_cached_steps_equal_the_full_pass(kwargs):
    keras.utils.set_random_seed(1)
    block = DecoderBlock(intermediate_dim=24, num_heads=4, **kwargs)
    x = RNG.normal(size=(2, 8, 16)).astype("float32")
    full = ops.convert_to_numpy(block(x))
    steps, _ = decode_step_by_step(_AsAttention(block), x)
    np.testing.assert_allclose(np.stack(steps, 1), full, atol=1e-5)


class _AsAttention:
    """A block called like an attention layer (``decode_step_by_step``'s calling convention)."""

    def __init__(self, block):
        self.block = block

    def cache_shape(self, batch, length):
        return self.block.attention.cache_shape(batch, length)

    def __call__(self, query, value, cache, cache_update_index, use_causal_mask):
        return self.block(query, cache=cache, cache_update_index=cache_update_index)


def test_padding_mask_hides_the_padded_keys():
    keras.utils.set_random_seed(2)
    block = DecoderBlock(intermediate_dim=24, num_heads=2, rotary=RotaryPositions())
    x = RNG.normal(size=(1, 6, 16)).astype("float32")
    padded = x.copy()
    padded[:, 2] = 100.0  # a key no query may see
    mask = np.array([[True, True, False, True, True, True]])
    rows = [0, 1, 3, 4, 5]
    np.testing.assert_allclose(
        ops.convert_to_numpy(block(x, padding_mask=mask))[:, rows],
        ops.convert_to_numpy(block(padded, padding_mask=mask))[:, rows],
        atol=1e-5,
    )


@pytest.mark.neutral
def test_config_round_trip_and_errors():
    block = DecoderBlock(
        intermediate_dim=24,
        num_heads=4,
        head_dim=6,
        num_key_value_heads=2,
        rotary=RotaryPositions(scaling="linear", scaling_factor=2.0),
        sliding_window=8,
        query_key_norm="rms",
        name="block",
    )
    config = block.get_config()
    assert DecoderBlock.from_config(config).get_config() == config
    with pytest.raises(ValueError, match=r"DecoderBlock\('bad'\): `num_key_value_heads` must"):
        DecoderBlock(intermediate_dim=8, num_heads=4, num_key_value_heads=3, name="bad")
    with pytest.raises(ValueError, match=r"DecoderBlock\('bad'\): `intermediate_dim`"):
        DecoderBlock(intermediate_dim=0, num_heads=4, name="bad")
    with pytest.raises(ValueError, match="must be a multiple of num_heads=3"):
        DecoderBlock(intermediate_dim=8, num_heads=3)(np.zeros((1, 2, 16), "float32"))
