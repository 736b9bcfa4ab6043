"""Sequence-to-sequence export: an encoder graph and a one-step decoder graph, driven by
onnxruntime to decode greedily with the same tokens as Keras."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops
from test_export_zoo import assert_graph_follows_guide

from keras_posenc.export import export_language_model, export_names, export_seq2seq
from keras_posenc.generation import greedy_search
from keras_posenc.zoo.convs2s import ConvS2S, ConvS2SLanguageModel
from keras_posenc.zoo.seq2seq import Seq2SeqModel, decoding_names

pytestmark = pytest.mark.contract

# The graphs' names for small_convs2s (two decoder convolutions), as the export guide lists
# them for ConvS2S.
STATE = ["encoder_keys", "encoder_values", "source_mask"]
CACHE = [*STATE, "cache_decoder_conv_0", "cache_decoder_conv_1"]
NAMES = {
    "encoder": (["encoder_token_ids"], STATE),
    "decoder_step": (["token_ids", "index", *CACHE], ["logits", *(f"new_{n}" for n in CACHE)]),
}


def small_convs2s():
    keras.utils.set_random_seed(0)
    return ConvS2S(
        20,
        24,
        embed_dim=16,
        encoder_layers=[(16, 3), (16, 2)],
        decoder_layers=[(16, 3), (24, 2)],
        decoder_out_embed_dim=8,
        max_source_positions=32,
        max_target_positions=32,
        dropout=0.0,
    )


def onnx_greedy(reports, model, source, max_length):
    """Greedy search written against the two ONNX graphs only (as a deployment would),
    feeding and reading every tensor by the name the export guide gives it."""
    import onnxruntime

    options = {"providers": ["CPUExecutionProvider"]}
    encoder = onnxruntime.InferenceSession(reports["encoder"].path, **options)
    step = onnxruntime.InferenceSession(reports["decoder_step"].path, **options)
    # The encoder's outputs are named as the step inputs they feed.
    cache = dict(zip(STATE, encoder.run(STATE, {"encoder_token_ids": source})))
    batch = source.shape[0]
    for spec in step.get_inputs():  # the decoder buffers start as zeros
        if spec.name.startswith("cache_"):
            cache[spec.name] = np.zeros((batch, *[int(d) for d in spec.shape[1:]]), np.float32)
    tokens = np.full(batch, model.bos_id, np.int32)
    output = np.full((batch, max_length), model.pad_id, np.int32)
    finished = np.zeros(batch, bool)
    for index in range(max_length):
        feed = {"token_ids": tokens, "index": np.array([index], np.int32), **cache}
        logits, *updated = step.run(["logits", *(f"new_{n}" for n in CACHE)], feed)
        cache = dict(zip(CACHE, updated))
        logits[:, [model.pad_id, model.bos_id]] = -np.inf
        tokens = np.argmax(logits, axis=-1).astype(np.int32)
        output[:, index] = np.where(finished, model.pad_id, tokens)
        finished |= tokens == model.eos_id
    return output


@pytest.mark.large
def test_onnx_greedy_decoding_gives_the_keras_tokens(tmp_path):
    model = small_convs2s()
    reports = export_seq2seq(model, tmp_path, format="onnx")
    assert reports["encoder"].max_abs_difference <= 1e-4
    assert reports["decoder_step"].max_abs_difference <= 1e-4
    for graph, (inputs, outputs) in NAMES.items():
        assert [name for name, _, _ in reports[graph].inputs] == inputs
        assert [name for name, _, _ in reports[graph].outputs] == outputs
    source = np.array([[5, 6, 7, 8, 9, 2], [10, 11, 2, 0, 0, 0], [3, 4, 5, 6, 2, 0]], np.int32)
    expected = greedy_search(model, source, max_length=12)
    np.testing.assert_array_equal(onnx_greedy(reports, model, source, 12), expected)


@pytest.mark.full
def test_seq2seq_saved_model_graphs_verify(tmp_path):
    reports = export_seq2seq(small_convs2s(), tmp_path, format="tf_saved_model")
    assert set(reports) == {"encoder", "decoder_step"}
    for report in reports.values():
        assert report.max_abs_difference <= 1e-4
        assert len(report.verified_shapes) == 2  # two source lengths
    # The serving_default signature's keys are the same names as the ONNX graph's.
    import tensorflow as tf

    for graph, (inputs, outputs) in NAMES.items():
        function = tf.saved_model.load(reports[graph].path).signatures["serving_default"]
        assert set(function.structured_input_signature[1]) == set(inputs)
        assert set(function.structured_outputs) == set(outputs)


class Unnamed(Seq2SeqModel):
    """A seq2seq model that does not name its state and cache: the export numbers them."""

    def __init__(self, **kwargs):
        self.embedding = keras.layers.Embedding(10, 4, name="embedding")
        super().__init__(source_vocab_size=10, target_vocab_size=10, **kwargs)

    def encode(self, encoder_token_ids, training=None):
        return self.embedding(encoder_token_ids), ops.not_equal(encoder_token_ids, 0)

    def decode(self, decoder_token_ids, encoder_state, training=None):
        x = self.embedding(decoder_token_ids)
        return ops.matmul(x, ops.transpose(self.embedding.embeddings))

    def init_cache(self, encoder_state, max_length):
        batch = ops.shape(encoder_state[0])[0]
        return (*encoder_state, ops.zeros((batch, max_length, 4)))


def test_state_and_cache_a_model_does_not_name_are_numbered():
    model = Unnamed()
    state = ["encoder_state_0", "encoder_state_1"]
    assert decoding_names(model) == {
        "encoder": (["encoder_token_ids"], state),
        "decoder_step": (
            ["token_ids", "index", *state, "cache_0"],
            ["logits", "new_encoder_state_0", "new_encoder_state_1", "new_cache_0"],
        ),
    }
    # The teacher-forced model's output is named logits by Seq2SeqModel itself.
    assert export_names(model) == (["decoder_token_ids", "encoder_token_ids"], ["logits"])


def test_export_seq2seq_needs_a_seq2seq_model(tmp_path):
    inputs = keras.Input((3,))
    with pytest.raises(TypeError, match="must be a keras_posenc.zoo.seq2seq.Seq2SeqModel"):
        export_seq2seq(keras.Model(inputs, inputs), tmp_path)


def test_graphs_are_verified_on_real_decoding_inputs(tmp_path, monkeypatch):
    """The step graph is verified on a cache that decoding produces, not on random states.

    export_model is replaced by a recorder, so no conversion runs (fast on every backend);
    it leaves an empty file where the graph goes, which export_seq2seq moves into place.
    """
    from keras_posenc import export
    from keras_posenc.export import decoding

    recorded = {}

    def record(graph, path, **kwargs):
        recorded[graph.name] = kwargs["verify_inputs"]
        names[graph.name] = (kwargs["input_names"], kwargs["output_names"])
        specs[graph.name] = [spec.name for spec in kwargs["input_signature"]]
        open(path, "wb").close()
        return export.ExportReport(kwargs["format"], path, "recorded", [], [])

    names, specs = {}, {}
    monkeypatch.setattr(decoding, "export_model", record)
    model = small_convs2s()
    export_seq2seq(model, tmp_path, format="onnx")
    # Each graph is exported with the names of the export guide, its specs named alike.
    assert names == NAMES
    assert specs == {graph: inputs for graph, (inputs, _) in NAMES.items()}
    for graph, (inputs, outputs) in names.items():
        assert_graph_follows_guide(
            "convs2s_small",
            graph,
            [(name, None, None) for name in inputs],
            [(name, None, None) for name in outputs],
        )
    sources, steps = recorded["encoder"], recorded["decoder_step"]
    assert [s.shape for s in sources] == [(2, 7), (2, 11)]
    for source, (token, index, *cache) in zip(sources, steps, strict=True):
        # Real tokens, the second row ending in padding.
        assert source.dtype == np.int32 and (source[0] > model.eos_id).all()
        assert (source[1, -2:] == model.pad_id).all() and (source[1, :-2] > model.eos_id).all()
        assert index.tolist() == [1] and token.shape == (2,) and (token > model.eos_id).all()
        # The cache is what encoding the source and decoding bos at index 0 leaves.
        state = model.encode(source, training=False)
        bos = np.full((2,), model.bos_id, "int32")
        _, expected = model.decode_step(bos, model.init_cache(state, max_length=4), 0)
        assert len(cache) == len(expected)
        for given, want in zip(cache, expected, strict=True):
            np.testing.assert_allclose(given, keras.ops.convert_to_numpy(want), atol=1e-6)
    # verify=False builds no inputs.
    recorded.clear()
    export_seq2seq(model, tmp_path, format="onnx", verify=False, overwrite=True)
    assert recorded == {"encoder": None, "decoder_step": None}


# --------------------------------------------------------------------------- language models


def small_lm():
    keras.utils.set_random_seed(0)
    return ConvS2SLanguageModel(
        30, embed_dim=8, decoder_layers=[(12, 3), (16, 2)], decoder_out_embed_dim=8, dropout=0.0
    )


LM_CACHE = ["cache_decoder_conv_0", "cache_decoder_conv_1"]


def onnx_lm_greedy(path, model, prompt, max_length):
    """Greedy continuation of equal-length prompts with the ONNX step graph alone."""
    import onnxruntime

    step = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    batch = prompt.shape[0]
    cache = {
        spec.name: np.zeros((batch, *[int(d) for d in spec.shape[1:]]), np.float32)
        for spec in step.get_inputs()
        if spec.name.startswith("cache_")
    }
    sequence = [prompt[:, i] for i in range(prompt.shape[1])]
    for index in range(max_length - 1):
        feed = {"token_ids": sequence[index], "index": np.array([index], np.int32), **cache}
        logits, *updated = step.run(["logits", *(f"new_{n}" for n in LM_CACHE)], feed)
        cache = dict(zip(LM_CACHE, updated))
        if index + 1 < len(sequence):
            continue  # a prompt token comes next
        logits[:, [model.pad_id, model.bos_id, model.eos_id]] = -np.inf  # eos: min_length
        sequence.append(logits.argmax(-1).astype(np.int32))
    return np.stack(sequence, axis=1)


@pytest.mark.large
def test_onnx_language_model_generation_gives_the_keras_tokens(tmp_path):
    model = small_lm()
    reports = export_language_model(model, tmp_path, format="onnx")
    report = reports["decoder_step"]
    assert report.max_abs_difference <= 1e-4
    assert [name for name, _, _ in report.inputs] == ["token_ids", "index", *LM_CACHE]
    prompt = np.array([[1, 5, 6], [1, 9, 9]], np.int32)
    expected = greedy_search(model, prompt, max_length=12, min_length=12)
    np.testing.assert_array_equal(onnx_lm_greedy(report.path, model, prompt, 12), expected)


def test_language_model_step_is_verified_on_decoded_caches(tmp_path, monkeypatch):
    """export_language_model verifies the step on the cache a decoded prompt leaves, under
    the names of the export guide (export_model replaced by a recorder: no conversion)."""
    from keras_posenc import export
    from keras_posenc.export import decoding

    recorded = {}

    def record(graph, path, **kwargs):
        recorded.update(kwargs, name=graph.name)
        open(path, "wb").close()
        return export.ExportReport(kwargs["format"], path, "recorded", [], [])

    monkeypatch.setattr(decoding, "export_model", record)
    model = small_lm()
    export_language_model(model, tmp_path, format="onnx")
    assert recorded["name"] == "decoder_step"
    assert recorded["input_names"] == ["token_ids", "index", *LM_CACHE]
    assert recorded["output_names"] == ["logits", *(f"new_{n}" for n in LM_CACHE)]
    assert [spec.shape for spec in recorded["input_signature"]] == [
        (None,),
        (1,),
        (None, 3, 12),  # (batch, kernel_size, input channels) per convolution
        (None, 2, 12),
    ]
    for token, index, *cache in recorded["verify_inputs"]:
        assert int(index[0]) in (7, 11)
        prompt_cache = model.init_cache(2, 4)
        # After a decoded prompt the buffers hold its last inputs: not the zeros they start as.
        assert token.shape == (2,) and (token > model.eos_id).all()
        assert len(cache) == len(prompt_cache) and all(np.abs(c).sum() > 0 for c in cache)
    with pytest.raises(TypeError, match="must be a keras_posenc.zoo.language_model"):
        export_language_model(small_convs2s(), tmp_path / "other")


def test_prompt_graph_is_exported_where_the_model_decodes_prompts(tmp_path, monkeypatch):
    """decoder_lm gets the prompt graph beside the step, verified on prompts of the two
    verification lengths and zero caches, its outputs named as the step's inputs; convs2s_lm,
    which decodes token by token only, gets the step alone (export_model replaced by a
    recorder: no conversion)."""
    from keras_posenc import export, zoo
    from keras_posenc.export import decoding
    from keras_posenc.zoo.language_model import LanguageModelPrompt

    recorded = {}

    def record(graph, path, **kwargs):
        recorded[graph.name] = kwargs
        open(path, "wb").close()
        return export.ExportReport(kwargs["format"], path, "recorded", [], [])

    monkeypatch.setattr(decoding, "export_model", record)
    lm = small_lm()
    assert set(export_language_model(lm, tmp_path / "convs2s_lm")) == {"decoder_step"}
    assert not lm.decodes_prompts
    with pytest.raises(NotImplementedError, match="ConvS2SLanguageModel does not implement"):
        lm.decode_prompt(np.ones((1, 2), "int32"), lm.init_cache(1, 4), 0)
    with pytest.raises(TypeError, match="LanguageModelPrompt: `language_model` must implement"):
        LanguageModelPrompt(lm)

    recorded.clear()
    keras.utils.set_random_seed(0)
    model = zoo.create(
        "decoder_lm_tiny", vocab_size=30, tokenizer=None, sliding_window=3, global_every=2
    )
    reports = export_language_model(model, tmp_path / "decoder_lm")
    assert set(reports) == set(recorded) == {"decoder_step", "prompt"}
    assert (tmp_path / "decoder_lm" / "prompt.onnx").exists()
    cache = ["cache_transformer_layer_0", "cache_transformer_layer_1"]
    prompt = recorded["prompt"]
    assert prompt["input_names"] == ["token_ids", *cache]
    assert prompt["output_names"] == ["logits", *(f"new_{n}" for n in cache)]
    assert prompt["output_names"] == recorded["decoder_step"]["output_names"]
    assert [spec.shape for spec in prompt["input_signature"]] == [
        (None, None),
        (None, 2, 3, 2, 16),  # the local layer's rolling cache: a fixed length
        (None, 2, None, 2, 16),
    ]
    for tokens, *zeros in prompt["verify_inputs"]:
        assert tokens.dtype == np.int32 and (tokens > model.eos_id).all()
        assert tokens.shape in ((2, 7), (2, 11))
        assert [z.shape[2] for z in zeros] == [3, tokens.shape[1] + 2]
        assert all(not z.any() for z in zeros)
