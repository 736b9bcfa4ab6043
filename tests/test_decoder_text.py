"""Text in and out of the decoder family (issue 50), with keras-hub as the outside truth: a
keras-hub ``CausalLM`` with a tokenizer trained here on a few lines (SentencePiece for Llama
and Gemma, byte-pair for Llama 3 and Qwen), saved as a preset folder, converted by
`convert.from_keras_hub_preset`, generates the same text greedily as keras-hub's ``generate``
for prompts of mixed lengths; the tokenizer survives ``.keras``; the byte-level tokenizer's
ids and round trip; a tiny model's loss falls with ``fit`` on a byte-level text."""

from __future__ import annotations

import io
import json

import keras
import keras_hub
import numpy as np
import pytest
import sentencepiece
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from keras_posenc import zoo
from keras_posenc.convert import from_keras_hub, from_keras_hub_preset
from keras_posenc.tokenizers import ByteTokenizer, next_token_windows

pytestmark = pytest.mark.contract

LINES = [
    "The quick brown fox jumps over the lazy dog.",
    "A position encoding tells attention where each token stands.",
    "Rotary embeddings turn queries and keys by an angle per position.",
    "Hello world, this is a small text for a small tokenizer.",
    "Numbers like 2026 and 42 are tokens too; so are commas, and dots.",
] * 8
PROMPTS = ["The quick brown", "Hello", "A position encoding tells attention"]


def sentencepiece_proto(pieces: dict) -> bytes:
    """A unigram SentencePiece model of about 120 pieces trained on LINES, with the special
    pieces (``{"pad": (id, piece), ...}``) a family's tokenizer expects."""
    model = io.BytesIO()
    options = {f"{k}_id": -1 for k in ("pad", "unk", "bos", "eos")}
    for kind, (index, piece) in pieces.items():
        options[f"{kind}_id"] = index
        options[f"{kind}_piece"] = piece
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(LINES), model_writer=model, vocab_size=120,
        model_type="unigram", hard_vocab_limit=False, minloglevel=2, **options,
    )  # fmt: skip
    return model.getvalue()


def byte_pair_files(specials: list[str]) -> tuple[dict, list[str]]:
    """A byte-level BPE vocabulary and merges trained on LINES, the specials last (as in
    Llama 3's and Qwen's vocabularies, where id 0 is an ordinary token)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(LINES, trainer)
    bpe = json.loads(tokenizer.to_str())["model"]
    vocabulary = dict(bpe["vocab"])
    vocabulary.update({token: len(vocabulary) + i for i, token in enumerate(specials)})
    merges = [m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]]
    return vocabulary, merges


def llama_tokenizer():
    spm = sentencepiece_proto({"unk": (0, "<unk>"), "bos": (1, "<s>"), "eos": (2, "</s>")})
    return keras_hub.models.LlamaTokenizer(proto=spm)


def gemma_tokenizer():
    spm = sentencepiece_proto(
        {"pad": (0, "<pad>"), "eos": (1, "<eos>"), "bos": (2, "<bos>"), "unk": (3, "<unk>")}
    )
    return keras_hub.models.GemmaTokenizer(proto=spm)


def llama3_tokenizer():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]  # fmt: skip
    return keras_hub.models.Llama3Tokenizer(*byte_pair_files(specials))


def qwen_tokenizer():
    return keras_hub.models.QwenTokenizer(*byte_pair_files(["<|endoftext|>"]))


FAMILIES = {
    "llama": (llama_tokenizer, keras_hub.models.LlamaBackbone, keras_hub.models.LlamaCausalLM,
              keras_hub.models.LlamaCausalLMPreprocessor, {}),
    "gemma": (gemma_tokenizer, keras_hub.models.GemmaBackbone, keras_hub.models.GemmaCausalLM,
              keras_hub.models.GemmaCausalLMPreprocessor, {"head_dim": 8}),
    "llama3": (llama3_tokenizer, keras_hub.models.Llama3Backbone,
               keras_hub.models.Llama3CausalLM, keras_hub.models.Llama3CausalLMPreprocessor, {}),
    "qwen": (qwen_tokenizer, keras_hub.models.QwenBackbone, keras_hub.models.QwenCausalLM,
             keras_hub.models.QwenCausalLMPreprocessor, {}),
}  # fmt: skip


def causal_lm(family: str):
    """keras-hub's CausalLM of ``family`` with random weights (the padding and start ids'
    output columns zeroed: ours never generates them, keras-hub's ``generate`` may, and a
    zero logit is never the largest of a hundred random ones) and a greedy sampler."""
    make_tokenizer, backbone_class, lm_class, preprocessor_class, extra = FAMILIES[family]
    tokenizer = make_tokenizer()
    backbone = backbone_class(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_query_heads=4,
        num_key_value_heads=2, hidden_dim=16, intermediate_dim=32, **extra,
    )  # fmt: skip
    rng = np.random.default_rng(1)
    offset = 0.0 if family == "gemma" else 1.0
    for weight in backbone.weights:
        value = rng.normal(size=tuple(weight.shape)).astype("float32") * 0.5
        weight.assign(value + (offset if weight.path.endswith("scale") else 0.0))
    # (Qwen's tokenizer has no start token: the converted model's bos_id is 1.)
    banned = [tokenizer.pad_token_id, getattr(tokenizer, "start_token_id", None) or 1]
    embedding = backbone.token_embedding
    table = embedding.embeddings if embedding.tie_weights else embedding.reverse_embeddings
    values = keras.ops.convert_to_numpy(table).copy()
    for index in banned:
        if embedding.tie_weights:
            values[index] = 0.0
        else:
            values[:, index] = 0.0
    table.assign(values)
    preprocessor = preprocessor_class(tokenizer, sequence_length=24)
    model = lm_class(backbone=backbone, preprocessor=preprocessor)
    model.compile(sampler="greedy")
    return model


@pytest.mark.parametrize(
    "family",
    ["llama", *(pytest.param(f, marks=pytest.mark.matrix) for f in ("gemma", "llama3", "qwen"))],
)
def test_a_preset_folder_generates_keras_hubs_text(tmp_path, family):
    hub = causal_lm(family)
    hub.save_to_preset(str(tmp_path / "preset"))
    model = from_keras_hub_preset(str(tmp_path / "preset"))
    assert type(model.tokenizer).__name__ == type(hub.preprocessor.tokenizer).__name__
    expected = hub.generate(PROMPTS, max_length=20)
    assert model.generate(PROMPTS, max_length=20) == list(expected)
    assert model.generate(PROMPTS[1], max_length=20) == expected[1]  # a string for a string


@pytest.mark.neutral
def test_a_causal_lm_converts_with_its_tokenizer_and_the_tokenizer_survives_keras_files(
    tmp_path,
):
    hub = causal_lm("llama")
    model = from_keras_hub(hub)
    assert model.tokenizer is hub.preprocessor.tokenizer
    assert (model.pad_id, model.bos_id, model.eos_id) == (0, 1, 2)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.tokenizer.vocabulary_size() == hub.preprocessor.tokenizer.vocabulary_size()
    texts = model.generate(PROMPTS, max_length=24, beam_size=3, return_n_best=2)
    assert loaded.generate(PROMPTS, max_length=24, beam_size=3, return_n_best=2) == texts
    assert len(texts) == 3 and all(len(pair) == 2 for pair in texts)
    assert all(pair[0].startswith(prompt) for pair, prompt in zip(texts, PROMPTS, strict=True))


@pytest.mark.neutral
def test_text_errors_name_the_model_argument_and_what_was_given():
    ids_only = zoo.create("decoder_lm_tiny", vocab_size=40, tokenizer=None)
    with pytest.raises(TypeError, match=r"DecoderLM.generate: `inputs` must be token ids .*text"):
        ids_only.generate("hello", max_length=8)
    with pytest.raises(ValueError, match=r"`tokenizer` has 259 token ids but `vocab_size` is 40"):
        zoo.create("decoder_lm_tiny", vocab_size=40)
    with pytest.raises(ValueError, match=r"`eos_id` must be the tokenizer's end_token_id \(2\)"):
        zoo.create("decoder_lm_tiny", eos_id=5)
    with pytest.raises(TypeError, match=r"DecoderLM: `tokenizer` must be None, 'byte', a keras"):
        zoo.create("decoder_lm_tiny", tokenizer="sentencepiece")
    with pytest.raises(ValueError, match=r"from_keras_hub_preset: `preset` must be a folder"):
        from_keras_hub_preset("no_such_preset_here")


@pytest.mark.neutral
def test_the_byte_tokenizer_covers_any_text_and_round_trips():
    tokenizer = ByteTokenizer()
    text = "naïve café — 東京\n\t🙂"
    ids = tokenizer.tokenize(text)
    assert ids.dtype == np.int32 and ids.min() >= 3 and ids.max() < 259
    assert list(ids - 3) == list(text.encode("utf-8"))
    assert tokenizer.detokenize([1, *ids.tolist(), 2, 0, 0]) == text
    assert tokenizer.detokenize(np.array([[1, 75], [76, 2]])) == ["H", "I"]
    assert tokenizer.detokenize([3 + 0xC3]) == "\ufffd"  # a cut UTF-8 sequence is replaced
    assert [tokenizer.id_to_token(i) for i in (0, 1, 2, 3 + 65)] == [
        "<pad>",
        "<s>",
        "</s>",
        "<0x41>",
    ]
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(tokenizer))
    assert restored.tokenize("abc").tolist() == [100, 101, 102]
    with pytest.raises(TypeError, match="ByteTokenizer.tokenize: `inputs` must be a Python string"):
        tokenizer.tokenize(5)
    with pytest.raises(ValueError, match=r"ByteTokenizer.detokenize: ids must be in \[0, 259\)"):
        tokenizer.detokenize([300])
    with pytest.raises(
        ValueError,
        match=r"next_token_windows: `text` must give at least sequence_length \+ 1 = 9 tokens",
    ):
        next_token_windows(tokenizer, "short", 8)


def test_the_tiny_model_learns_a_byte_level_text_with_fit():
    inputs, targets = next_token_windows(ByteTokenizer(), " ".join(LINES[:5]) * 3, 24)
    keras.utils.set_random_seed(0)
    model = zoo.create("decoder_lm_tiny", num_layers=1)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(inputs, targets, batch_size=8, epochs=8, verbose=0)
    losses = history.history["loss"]
    # Below the bytes' unigram entropy: what a model that ignores the context reaches.
    counts = np.bincount(targets.ravel(), minlength=259)[targets.ravel().min() :]
    frequencies = counts[counts > 0] / counts.sum()
    entropy = float(-(frequencies * np.log(frequencies)).sum())
    assert losses[-1] < entropy < losses[0], (losses, entropy)
    assert isinstance(model.generate("The quick", max_length=16), str)
