"""The decoder-only family (``decoder_lm_*``, issue 50): parameter counts derived by hand,
cached decoding equal to the full pass with every decoder option (windows on some layers with
rolling caches, sinks, relative schemes instead of rotary, soft caps, Gemma 2's norms, Gemma
3's rotary of the global layers), the config and ``.keras`` round trips, generation, and the
errors."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import zoo
from keras_posenc.layers import RotaryPositions
from keras_posenc.zoo.decoder_lm import DecoderLM

pytestmark = pytest.mark.contract

VOCAB = 40


def hand_count(vocab, d, m, heads, kv_heads, layers, head_dim=None, tied=True):
    """Parameters: embedding ``V d`` (and its transpose untied), per layer the attention
    ``d (h + 2 g) d_h + h d_h d``, the gated MLP ``3 d m`` and two norms ``2 d``; the final
    norm ``d``."""
    head_dim = head_dim or d // heads
    attention = d * (heads + 2 * kv_heads) * head_dim + heads * head_dim * d
    per_layer = attention + 3 * d * m + 2 * d
    return vocab * d * (1 if tied else 2) + layers * per_layer + d


@pytest.mark.neutral
def test_named_sizes_and_counts():
    assert zoo.list_models("decoder_lm") == ["decoder_lm_small", "decoder_lm_tiny"]
    assert zoo.create("decoder_lm_tiny").count_params() == hand_count(259, 64, 172, 4, 2, 2)
    assert hand_count(259, 64, 172, 4, 2, 2) == 107_520  # the module docstring's table
    assert hand_count(259, 256, 688, 8, 4, 6) == 4_419_584
    untied = zoo.create(
        "decoder_lm_tiny", vocab_size=VOCAB, tokenizer=None, tie_word_embeddings=False
    )
    assert untied.count_params() == hand_count(VOCAB, 64, 172, 4, 2, 2, tied=False)


OPTIONS = {
    "llama": {},
    "mistral_sinks": dict(sliding_window=3, attention_sinks=1),
    "gemma2": dict(
        sliding_window=3,
        global_every=2,
        activation="gelu_tanh",
        logit_soft_cap=5.0,
        final_logit_soft_cap=3.0,
        use_post_attention_norm=True,
        use_post_feedforward_norm=True,
        scale_embeddings=True,
        query_scale_dim=8,
        head_dim=24,
    ),
    # Gemma 2's options with Gemma 3's query-key norms and base 1,000,000 in the global layers.
    "gemma3": dict(
        sliding_window=3,
        global_every=2,
        global_rotary=RotaryPositions(max_wavelength=1e6, scaling="linear", scaling_factor=8.0),
        query_key_norm="rms",
        activation="gelu_tanh",
        logit_soft_cap=5.0,
        final_logit_soft_cap=3.0,
        use_post_attention_norm=True,
        use_post_feedforward_norm=True,
        scale_embeddings=True,
        head_dim=24,
    ),
    "t5_bias_qk_norm": dict(
        rotary=None, relative="bias", position="t5_decoder", query_key_norm="rms"
    ),
    "qwen": dict(use_bias=True, output_bias=False, num_key_value_heads=1),
}


def tiny(**kwargs) -> DecoderLM:
    keras.utils.set_random_seed(0)
    return zoo.create("decoder_lm_tiny", vocab_size=VOCAB, tokenizer=None, **kwargs)


@pytest.mark.parametrize(
    "options",
    [
        "mistral_sinks",
        pytest.param("llama", marks=pytest.mark.matrix),
        pytest.param("gemma2", marks=pytest.mark.matrix),
        pytest.param("gemma3", marks=pytest.mark.matrix),
        pytest.param("t5_bias_qk_norm", marks=pytest.mark.matrix),
        pytest.param("qwen", marks=pytest.mark.matrix),
    ],
)
def test_cached_steps_equal_the_full_pass(options):
    model = tiny(**OPTIONS[options])
    ids = np.random.default_rng(0).integers(3, VOCAB, (2, 9)).astype("int32")
    full = ops.convert_to_numpy(model(ids))
    cache = model.init_cache(2, 9)
    steps = []
    for t in range(9):
        logits, cache = model.decode_step(ids[:, t], cache, t)
        steps.append(ops.convert_to_numpy(logits))
    np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=2e-5)


def test_windowed_layers_keep_rolling_caches():
    model = tiny(sliding_window=4, global_every=2, attention_sinks=1)
    shapes = [tuple(cache.shape) for cache in model.init_cache(3, 1000)]
    # Layer 0 is local (sinks + window), layer 1 global (every position).
    assert shapes == [(3, 2, 5, 2, 16), (3, 2, 1000, 2, 16)]
    assert [model.is_local(i) for i in range(2)] == [True, False]
    # The global layers' own rotary (Gemma 3), the local ones the model's.
    gemma3 = tiny(**OPTIONS["gemma3"])
    bases = [block.attention.rotary.max_wavelength for block in gemma3.transformer_layers]
    assert bases == [10000.0, 1e6]
    tokens = model.generate(np.array([[1, 5, 6]], "int32"), max_length=12)
    assert tokens.shape == (1, 12)


@pytest.mark.neutral
@pytest.mark.parametrize("options", ["gemma2", "gemma3"])
def test_config_round_trip(options):
    model = tiny(**OPTIONS[options])
    config = model.get_config()
    assert DecoderLM.from_config(config).get_config() == config


# Large: saving and loading took about 10 s on JAX.
@pytest.mark.large
def test_save_load_reproduces_the_outputs():
    model = tiny(**OPTIONS["gemma3"])  # Gemma 2's options and the global layers' rotary
    ids = np.array([[1, 5, 6, 7, 8]], "int32")
    expected = model.predict_on_batch(ids)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    assert type(loaded) is DecoderLM and loaded.get_config() == model.get_config()
    np.testing.assert_allclose(loaded.predict_on_batch(ids), expected, atol=1e-6)


@pytest.mark.neutral
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(global_every=2), "`global_every` chooses which layers"),
        (dict(sliding_window=4, global_rotary={}), "`global_rotary` is the rotary embedding"),
        (dict(attention_sinks=1), "`attention_sinks` keep the first keys"),
        (dict(hidden_dim=30), "`hidden_dim` \\(30\\) must be a multiple of `num_heads`"),
        (dict(final_logit_soft_cap=-1.0), "final_logit_soft_cap"),
        (dict(num_key_value_heads=3), "num_key_value_heads"),
    ],
)
def test_errors_name_the_class_and_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecoderLM(vocab_size=VOCAB, **kwargs)


# Large: one ONNX export with tf2onnx and its verification took about 10 s.
@pytest.mark.large
def test_onnx_decoding_step_with_rolling_caches_equals_keras(tmp_path):
    # Rolling caches (window 3 + 1 sink) in local layers, a full one in the global layer,
    # one key/value head, caps and query-key norms: the step graph is verified against
    # Keras on caches that decoding past the window leaves (export_language_model raises
    # when they differ).
    from keras_posenc.export import export_language_model

    model = tiny(
        sliding_window=3,
        global_every=2,
        attention_sinks=1,
        num_key_value_heads=1,
        logit_soft_cap=5.0,
        final_logit_soft_cap=3.0,
        query_key_norm="rms",
    )
    report = export_language_model(model, tmp_path)["decoder_step"]
    assert report.max_abs_difference is not None and report.max_abs_difference <= 1e-4
    shapes = [shape for name, shape, _ in report.inputs if name.startswith("cache_")]
    assert shapes[0][2] == 4  # the rolling cache keeps its length in the graph
