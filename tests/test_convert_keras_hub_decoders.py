"""keras-hub's decoder backbones as the outside truth for the zoo's `DecoderLM` (issue 50):
``LlamaBackbone``, ``Llama3Backbone`` (Llama 3.1's rope ramp) and ``MistralBackbone`` (its
sliding window) with random weights drawn here (every tensor matters), converted by
`convert.from_keras_hub`, their logits (the sequence output times the reverse embedding, as
keras-hub's ``CausalLM`` computes them) compared to 1e-5; a backbone saved as a preset folder
converts offline; cached steps of the converted model equal keras-hub's full pass."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from keras_posenc.convert import from_keras_hub, from_keras_hub_decoder

pytestmark = pytest.mark.contract

RNG = np.random.default_rng(0)
VOCAB = 50
ATOL = 2e-5


def randomized(backbone):
    """The backbone with every weight drawn again (norm scales about 1), so none is trivial."""
    for weight in backbone.weights:
        value = RNG.normal(size=tuple(weight.shape)).astype("float32") * 0.3
        weight.assign(value + (1.0 if weight.path.endswith("scale") else 0.0))
    return backbone


def hub_logits(backbone, ids):
    output = backbone({"token_ids": ids, "padding_mask": np.ones_like(ids)})
    return ops.convert_to_numpy(backbone.token_embedding(output, reverse=True))


BACKBONES = {
    "llama": lambda: keras_hub.models.LlamaBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=16, intermediate_dim=32,
    ),
    "llama_tied_mqa": lambda: keras_hub.models.LlamaBackbone(
        vocabulary_size=VOCAB, num_layers=1, num_query_heads=4, num_key_value_heads=1,
        hidden_dim=16, intermediate_dim=32, tie_word_embeddings=True,
    ),
    # Head size 8 at training length 4: pairs below, on and above Llama 3.1's ramp.
    "llama3": lambda: keras_hub.models.Llama3Backbone(
        vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=32, intermediate_dim=32, rope_frequency_adjustment_factor=8.0,
        rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_pretraining_sequence_length=4,
    ),
    "mistral": lambda: keras_hub.models.MistralBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=16, intermediate_dim=32, sliding_window=3, rope_scaling_factor=2.0,
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    "family",
    [
        "mistral",
        pytest.param("llama", marks=pytest.mark.matrix),
        pytest.param("llama_tied_mqa", marks=pytest.mark.matrix),
        pytest.param("llama3", marks=pytest.mark.matrix),
    ],
)
def test_logits_equal_keras_hubs(family):
    backbone = randomized(BACKBONES[family]())
    ids = RNG.integers(3, VOCAB, (2, 11)).astype("int32")
    model = from_keras_hub(backbone)
    np.testing.assert_allclose(
        ops.convert_to_numpy(model(ids)), hub_logits(backbone, ids), atol=ATOL, rtol=0
    )


def test_cached_steps_of_a_converted_mistral_equal_keras_hubs_full_pass():
    # The rolling cache of the window (3 positions) decodes past it.
    backbone = randomized(BACKBONES["mistral"]())
    ids = RNG.integers(3, VOCAB, (1, 9)).astype("int32")
    model = from_keras_hub_decoder(backbone)
    cache = model.init_cache(1, 9)
    assert tuple(cache[0].shape) == (1, 2, 3, 2, 4)
    steps = []
    for t in range(9):
        logits, cache = model.decode_step(ids[:, t], cache, t)
        steps.append(ops.convert_to_numpy(logits))
    np.testing.assert_allclose(np.stack(steps, 1), hub_logits(backbone, ids), atol=ATOL, rtol=0)


def test_a_preset_folder_converts_offline(tmp_path):
    backbone = randomized(BACKBONES["llama"]())
    backbone.save_to_preset(str(tmp_path / "preset"))
    loaded = keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))
    ids = RNG.integers(3, VOCAB, (1, 6)).astype("int32")
    model = from_keras_hub(loaded)
    np.testing.assert_allclose(
        ops.convert_to_numpy(model(ids)), hub_logits(backbone, ids), atol=ATOL, rtol=0
    )


@pytest.mark.neutral
def test_other_backbones_are_refused_and_an_unapplied_factor_is_said():
    gpt2 = keras_hub.models.GPT2Backbone(
        vocabulary_size=VOCAB, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
        max_sequence_length=16,
    )  # fmt: skip
    with pytest.raises(TypeError, match="from_keras_hub: `backbone` must be one of"):
        from_keras_hub(gpt2)
    with pytest.raises(TypeError, match="from_keras_hub_decoder: `backbone` must be"):
        from_keras_hub_decoder(gpt2)
    scaled = keras_hub.models.LlamaBackbone(
        vocabulary_size=VOCAB, num_layers=1, num_query_heads=2, num_key_value_heads=2,
        hidden_dim=8, intermediate_dim=16, rope_position_scaling_factor=2.0,
    )  # fmt: skip
    with pytest.warns(UserWarning, match="rope_position_scaling_factor=2.0 is not applied"):
        model = from_keras_hub(scaled)
    assert model.transformer_layers[0].attention.rotary.scaling is None
    assert isinstance(model, keras.Model)
