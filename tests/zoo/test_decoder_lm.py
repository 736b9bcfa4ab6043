"""The decoder-only family (``decoder_lm_*``, issue 50): parameter counts derived by hand,
cached decoding equal to the full pass with every decoder option (windows on some layers with
rolling caches, sinks, relative schemes instead of rotary, soft caps, Gemma 2's norms, Gemma
3's rotary of the global layers), prompts decoded in one call, the config and ``.keras``
round trips, generation (beam search's n-best lists), the errors, and the exported prompt
and step graphs generating Keras' tokens."""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import generation, zoo
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


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(OPTIONS["mistral_sinks"], id="mistral_sinks"),
        pytest.param(OPTIONS["gemma3"], id="gemma3", marks=pytest.mark.matrix),
        pytest.param(
            dict(rotary=None, relative="bias", position="t5_decoder", sliding_window=3),
            id="t5_bias_window",
            marks=pytest.mark.matrix,
        ),
    ],
)
def test_decode_prompt_equals_the_full_pass_and_the_steps(options):
    # Windows of 3 (rolling caches of 3 or 4 positions): the first call writes 6 positions,
    # more than a rolling cache holds, the second one 3 more from index 6.
    model = tiny(**options)
    assert model.decodes_prompts
    ids = np.random.default_rng(1).integers(3, VOCAB, (2, 9)).astype("int32")
    full = ops.convert_to_numpy(model(ids))
    step_cache = model.init_cache(2, 12)
    for t in range(9):
        _, step_cache = model.decode_step(ids[:, t], step_cache, t)
    first, cache = model.decode_prompt(ids[:, :6], model.init_cache(2, 12), 0)
    second, cache = model.decode_prompt(ids[:, 6:], cache, 6)
    assert tuple(first.shape) == (2, 6, VOCAB)
    assert keras.backend.standardize_dtype(first.dtype) == "float32"
    logits = np.concatenate([ops.convert_to_numpy(first), ops.convert_to_numpy(second)], axis=1)
    np.testing.assert_allclose(logits, full, atol=2e-5)
    for prompted, stepped in zip(cache, step_cache, strict=True):
        assert prompted.shape == stepped.shape
        np.testing.assert_allclose(
            ops.convert_to_numpy(prompted), ops.convert_to_numpy(stepped), atol=2e-5
        )


def test_beam_search_returns_the_n_best():
    model = tiny(sliding_window=3)
    prompt = np.array([[1, 5, 6], [1, 9, 0]], "int32")
    n_best = model.generate(prompt, max_length=8, beam_size=4, return_n_best=3)
    assert n_best.shape == (2, 3, 8)
    np.testing.assert_array_equal(n_best[:, 0], model.generate(prompt, max_length=8, beam_size=4))
    tokens, scores = generation.beam_search(
        model, prompt, beam_size=4, max_length=8, return_n_best=3
    )
    np.testing.assert_array_equal(tokens, n_best)
    assert scores.shape == (2, 3) and np.all(np.diff(scores, axis=1) <= 0)
    for row in range(2):
        assert len({tuple(hypothesis) for hypothesis in n_best[row]}) == 3  # distinct
    # Every hypothesis starts with its row's prompt (the second row's ends in padding).
    assert (n_best[:, :, :2] == prompt[:, None, :2]).all() and (n_best[0, :, 2] == 6).all()


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


def onnx_prompt_then_steps(reports, model, prompt, max_length):
    """Greedy continuation of right-padded prompts with the two ONNX graphs alone, as the
    docstring of export_language_model tells a runtime: the prompt graph on the first P
    tokens of every row (P the shortest prompt's length), then steps from index P, feeding
    each row's prompt token while it lasts, else the chosen one."""
    import onnxruntime

    options = {"providers": ["CPUExecutionProvider"]}
    first = onnxruntime.InferenceSession(reports["prompt"].path, **options)
    step = onnxruntime.InferenceSession(reports["decoder_step"].path, **options)
    names = [spec.name for spec in step.get_inputs() if spec.name.startswith("cache_")]
    outputs = ["logits", *(f"new_{name}" for name in names)]
    cache = {  # zeros; a dynamic cache axis is the whole generation's length
        spec.name: np.zeros(
            [len(prompt), *(d if isinstance(d, int) else max_length for d in spec.shape[1:])],
            np.float32,
        )
        for spec in first.get_inputs()
        if spec.name in names
    }
    lengths = (prompt != model.pad_id).sum(axis=1)
    shortest = int(lengths.min())
    logits, *new = first.run(outputs, {"token_ids": prompt[:, :shortest], **cache})
    logits, cache = logits[:, -1], dict(zip(names, new))
    sequence = [prompt[:, i] for i in range(shortest)]
    for index in range(shortest, max_length):
        logits[:, [model.pad_id, model.bos_id, model.eos_id]] = -np.inf  # eos: min_length
        chosen = logits.argmax(-1).astype(np.int32)
        given = prompt[:, index] if index < prompt.shape[1] else chosen
        sequence.append(np.where(index < lengths, given, chosen).astype(np.int32))
        if index + 1 < max_length:
            feed = {"token_ids": sequence[-1], "index": np.array([index], np.int32), **cache}
            logits, *new = step.run(outputs, feed)
            cache = dict(zip(names, new))
    return np.stack(sequence, axis=1)


# Large: one ONNX export of two graphs with tf2onnx, their verification and the generation
# took about 13 s on TensorFlow.
@pytest.mark.large
def test_onnx_prompt_and_step_graphs_generate_the_keras_tokens(tmp_path):
    # Rolling caches (window 3 + 1 sink) in local layers, a full one in the global layer,
    # one key/value head, caps and query-key norms: each graph is verified against Keras
    # (export_language_model raises when they differ), the step on caches that decoding
    # past the window leaves; then both generate Keras' greedy tokens from prompts longer
    # than the rolling caches, of two lengths.
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
    reports = export_language_model(model, tmp_path)
    assert set(reports) == {"decoder_step", "prompt"}
    for report in reports.values():
        assert report.max_abs_difference is not None and report.max_abs_difference <= 1e-4
        shapes = [shape for name, shape, _ in report.inputs if name.startswith("cache_")]
        assert shapes[0][2] == 4  # the rolling cache keeps its length in the graph
    assert [name for name, _, _ in reports["prompt"].inputs][0] == "token_ids"
    prompt = np.array([[1, 5, 6, 7, 8, 9, 10], [1, 9, 9, 4, 3, 0, 0]], np.int32)
    expected = generation.greedy_search(model, prompt, max_length=12, min_length=12)
    np.testing.assert_array_equal(onnx_prompt_then_steps(reports, model, prompt, 12), expected)
