"""keras-hub's decoder backbones as the outside truth for the zoo's `DecoderLM` (issue 50):
``LlamaBackbone``, ``Llama3Backbone`` (Llama 3.1's rope ramp), ``MistralBackbone`` (its
sliding window), ``QwenBackbone`` (biases, tied or not, a window), ``GemmaBackbone`` (Gemma
1, and Gemma 2 with every flag) and ``Gemma3Backbone`` (text only) with random weights drawn
here (every tensor matters), converted by `convert.from_keras_hub`, their logits (the
sequence output times the reverse embedding, soft-capped where Gemma 2 caps them, as
keras-hub's ``CausalLM`` computes them) compared to 2e-5; a backbone saved as a preset folder
converts offline; cached steps of a converted Mistral, Qwen, Gemma 2 and Gemma 3 (rolling
caches) equal keras-hub's full pass."""

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
    """The backbone with every weight drawn again (norms multiplying by about 1: Gemma's
    ``1 + scale`` with scales about 0, the others' scales about 1), so none is trivial."""
    offset = 0.0 if type(backbone).__name__.startswith("Gemma") else 1.0
    for weight in backbone.weights:
        value = RNG.normal(size=tuple(weight.shape)).astype("float32") * 0.3
        weight.assign(value + (offset if weight.path.endswith("scale") else 0.0))
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
    "qwen_window": lambda: keras_hub.models.QwenBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=16, intermediate_dim=32, use_sliding_window_attention=True,
        sliding_window_size=3,
    ),
    "qwen_untied": lambda: keras_hub.models.QwenBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=1,
        hidden_dim=16, intermediate_dim=32, tie_word_embeddings=False,
        rope_max_wavelength=1000, rope_scaling_factor=2.0,
    ),
    # Gemma 1: multi-query, head_dim 8 (not hidden_dim / heads), no window, no caps.
    "gemma": lambda: keras_hub.models.GemmaBackbone(
        vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=1,
        hidden_dim=16, intermediate_dim=32, head_dim=8,
    ),
    # Gemma 2: local, global, local; caps small enough to bite (the logits reach about 3).
    "gemma2": lambda: keras_hub.models.GemmaBackbone(
        vocabulary_size=VOCAB, num_layers=3, num_query_heads=4, num_key_value_heads=2,
        hidden_dim=16, intermediate_dim=32, head_dim=6, use_post_ffw_norm=True,
        use_post_attention_norm=True, attention_logit_soft_cap=2.0, final_logit_soft_cap=3.0,
        use_sliding_window_attention=True, sliding_window_size=3,
    ),
    # Gemma 3: five local layers (rope 10,000 / 2), then a global one (1,000,000 / 8), with
    # query-key norms and caps (the post norms, which make six random layers sensitive to
    # rounding, in the next one).
    "gemma3": lambda: keras_hub.models.Gemma3Backbone(
        vocabulary_size=VOCAB, image_size=16, num_layers=6, num_query_heads=4,
        num_key_value_heads=2, hidden_dim=16, intermediate_dim=16, head_dim=6,
        attention_logit_soft_cap=5.0, final_logit_soft_cap=3.0,
        use_sliding_window_attention=True, sliding_window_size=3,
        local_rope_scaling_factor=2.0, global_rope_scaling_factor=8.0,
    ),
    # Gemma 3 without a window (every layer global) nor query-key norms, multi-query, with
    # Gemma 2's post norms.
    "gemma3_global": lambda: keras_hub.models.Gemma3Backbone(
        vocabulary_size=VOCAB, image_size=16, num_layers=2, num_query_heads=4,
        num_key_value_heads=1, hidden_dim=16, intermediate_dim=16, head_dim=8,
        use_query_key_norm=False, global_rope_scaling_factor=4.0, use_post_ffw_norm=True,
        use_post_attention_norm=True,
    ),
}  # fmt: skip


@pytest.fixture
def qwen_windows(monkeypatch):
    """keras-hub 0.32's ``QwenAttention`` drops its sliding window on the fused path it takes
    on JAX and PyTorch (``ops.dot_product_attention``; keras_hub/src/models/qwen/
    qwen_attention.py applies the window in its own path only): its own path everywhere."""
    from keras_hub.src.models.qwen import qwen_attention

    monkeypatch.setattr(qwen_attention, "fused_attention_op_available", lambda: False)


@pytest.mark.parametrize(
    "family",
    [
        "mistral",
        "qwen_window",
        "gemma2",
        "gemma3",
        pytest.param("llama", marks=pytest.mark.matrix),
        pytest.param("llama_tied_mqa", marks=pytest.mark.matrix),
        pytest.param("llama3", marks=pytest.mark.matrix),
        pytest.param("qwen_untied", marks=pytest.mark.matrix),
        pytest.param("gemma", marks=pytest.mark.matrix),
        pytest.param("gemma3_global", marks=pytest.mark.matrix),
    ],
)
def test_logits_equal_keras_hubs(family, qwen_windows):
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


# The cache lengths of each family's layers: a rolling cache of the window (3 positions) in
# the local ones, the whole length (9) in the global ones.
CACHE_LENGTHS = {"gemma2": [3, 9, 3], "qwen_window": [3, 3], "gemma3": [3, 3, 3, 3, 3, 9]}


@pytest.mark.parametrize(
    "family",
    [
        "gemma2",
        pytest.param("qwen_window", marks=pytest.mark.matrix),
        pytest.param("gemma3", marks=pytest.mark.matrix),
    ],
)
def test_cached_steps_of_a_converted_gemma_and_qwen_equal_keras_hubs_full_pass(
    family, qwen_windows
):
    backbone = randomized(BACKBONES[family]())
    ids = RNG.integers(3, VOCAB, (2, 9)).astype("int32")
    model = from_keras_hub_decoder(backbone)
    cache = model.init_cache(2, 9)
    assert [tuple(c.shape)[2] for c in cache] == CACHE_LENGTHS[family]
    steps = []
    for t in range(9):
        logits, cache = model.decode_step(ids[:, t], cache, t)
        steps.append(ops.convert_to_numpy(logits))
    np.testing.assert_allclose(np.stack(steps, 1), hub_logits(backbone, ids), atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["gemma2", pytest.param("llama", marks=pytest.mark.matrix)])
def test_a_preset_folder_converts_offline(tmp_path, family):
    backbone = randomized(BACKBONES[family]())
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
    with pytest.raises(TypeError, match="from_keras_hub: `backbone` must be one of .*Gemma"):
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


@pytest.mark.neutral
def test_gemmas_unapplied_flags_and_gemma3s_refusals_are_said_and_special_ids_follow():
    small = dict(
        vocabulary_size=VOCAB, num_layers=1, num_query_heads=2, num_key_value_heads=1,
        hidden_dim=8, intermediate_dim=16, head_dim=6,
    )  # fmt: skip
    # keras-hub 0.32's blocks scale queries by head_dim (6, not 8 / 2) whatever they are given.
    unnormalized = keras_hub.models.GemmaBackbone(**small, query_head_dim_normalize=False)
    with pytest.warns(UserWarning, match="query_head_dim_normalize=False is not applied"):
        model = from_keras_hub(unnormalized)
    assert model.transformer_layers[0].attention.decoder_options.query_scale_dim == 6
    assert (model.pad_id, model.bos_id, model.eos_id) == (0, 2, 1)  # <pad>, <bos>, <eos>
    # Its blocks keep their default epsilon, the final norm takes the backbone's.
    other_epsilon = keras_hub.models.GemmaBackbone(**small, layer_norm_epsilon=1e-5)
    with pytest.warns(UserWarning, match="final norm has epsilon 1e-05, its blocks 1e-06"):
        model = from_keras_hub(other_epsilon, eos_id=3)
    assert model.transformer_layers[0].layer_norm_epsilon == 1e-6 and model.eos_id == 3
    # Qwen ends with <|endoftext|> where the vocabulary holds it.
    qwen = keras_hub.models.QwenBackbone(
        vocabulary_size=151646, num_layers=1, num_query_heads=2, num_key_value_heads=1,
        hidden_dim=4, intermediate_dim=8,
    )  # fmt: skip
    assert from_keras_hub(qwen).eos_id == 151643
    # Gemma 3 converts as a causal text-only decoder.
    bidirectional = keras_hub.models.Gemma3Backbone(
        **small, image_size=16, use_bidirectional_attention=True
    )
    with pytest.raises(ValueError, match="text-only decoder.*use_bidirectional_attention"):
        from_keras_hub(bidirectional)
