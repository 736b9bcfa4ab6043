"""T5 with text in and out (issue 52, its first part): a keras-hub ``T5Seq2SeqLM`` with a
SentencePiece tokenizer trained here on a few lines, saved as a preset folder and converted
by `convert.from_keras_hub_preset` (its tokenizer included), generates the same text
greedily as keras-hub's ``generate`` for sources of mixed lengths; the tokenizer survives a
``.keras`` file."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest
from test_decoder_text import sentencepiece_proto

from keras_posenc.convert import from_keras_hub, from_keras_hub_preset

pytestmark = pytest.mark.contract

SOURCES = [
    "translate English to German: the quick brown fox",
    "Hello",
    "A position encoding tells attention where",
]


def t5_seq2seq_lm():
    """keras-hub's T5Seq2SeqLM with random weights (the padding id's embedding zeroed: our
    T5 never generates it, keras-hub's may, and a zero logit never wins among 75 random
    ones) and a greedy sampler."""
    proto = sentencepiece_proto({"pad": (0, "<pad>"), "eos": (1, "</s>"), "unk": (2, "<unk>")})
    tokenizer = keras_hub.models.T5Tokenizer(proto=proto)
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_heads=2,
        hidden_dim=16, intermediate_dim=32,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    for weight in backbone.weights:
        scale = 1.0 if "norm" in weight.path else 0.0
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.5 + scale)
    table = keras.ops.convert_to_numpy(backbone.token_embedding.embeddings).copy()
    table[0] = 0.0
    backbone.token_embedding.embeddings.assign(table)
    preprocessor = keras_hub.models.T5Seq2SeqLMPreprocessor(
        tokenizer, encoder_sequence_length=64, decoder_sequence_length=12
    )
    model = keras_hub.models.T5Seq2SeqLM(backbone=backbone, preprocessor=preprocessor)
    model.compile(sampler="greedy")
    return model


def test_a_t5_preset_folder_generates_keras_hubs_text(tmp_path):
    hub = t5_seq2seq_lm()
    hub.save_to_preset(str(tmp_path / "preset"))
    model = from_keras_hub_preset(str(tmp_path / "preset"))
    assert type(model.tokenizer).__name__ == "T5Tokenizer"
    expected = list(hub.generate(SOURCES, max_length=12))
    # keras-hub's max_length counts the decoder's start token; ours the tokens after it.
    assert model.generate(SOURCES, max_length=11) == expected
    assert model.generate(SOURCES[0], max_length=11) == expected[0]


@pytest.mark.neutral
def test_a_t5_task_model_converts_with_its_tokenizer_kept_in_keras_files(tmp_path):
    hub = t5_seq2seq_lm()
    model = from_keras_hub(hub)
    assert model.tokenizer is hub.preprocessor.tokenizer
    model.save(tmp_path / "t5.keras")
    loaded = keras.saving.load_model(tmp_path / "t5.keras")
    texts = model.generate(SOURCES, max_length=8, beam_size=2, return_n_best=2)
    assert loaded.generate(SOURCES, max_length=8, beam_size=2, return_n_best=2) == texts
    assert [len(pair) for pair in texts] == [2, 2, 2]
    with pytest.raises(TypeError, match=r"T5.generate: `inputs` must be token ids for a model"):
        from_keras_hub(hub.backbone).generate("hello", max_length=4)
    with pytest.raises(ValueError, match=r"T5: `eos_id` must be the tokenizer's end_token_id"):
        type(model)(vocabulary_size=80, eos_id=3, tokenizer=hub.preprocessor.tokenizer)


def test_text_pairs_pack_as_keras_hubs_preprocessor_and_train_with_fit():
    hub = t5_seq2seq_lm()
    model = from_keras_hub(hub)
    pairs = {"encoder_text": SOURCES, "decoder_text": ["Hallo", "Hello world", "the lazy dog"]}
    for encoder, decoder in ((64, 12), (6, 3)):  # (6, 3) cuts both sides, keeping the end
        lengths = {"encoder_sequence_length": encoder, "decoder_sequence_length": decoder}
        theirs = hub.preprocessor(pairs, **lengths)
        ours = model.preprocess_text_pairs(pairs, **lengths)
        for name, array in theirs[0].items():
            assert np.array_equal(keras.ops.convert_to_numpy(array).astype("int32"), ours[0][name])
        for their, our in zip(theirs[1:], ours[1:], strict=True):
            assert np.array_equal(keras.ops.convert_to_numpy(their).astype(our.dtype), our)
    x, y, weight = model.preprocess_text_pairs(pairs)  # padded to the longest rows
    longest = max(len(model.tokenizer.tokenize(source)) for source in SOURCES)
    assert x["encoder_token_ids"].shape[1] == longest + 1  # and the end token
    assert y.shape == x["decoder_token_ids"].shape == weight.shape
    # A fresh model learns the pairs (the converted one's large random weights train slowly).
    keras.utils.set_random_seed(0)
    fresh = type(model)(
        model.source_vocab_size, hidden_dim=32, intermediate_dim=64, num_heads=2, num_layers=1,
        dropout=0.0, tokenizer=model.tokenizer,
    )  # fmt: skip
    fresh.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = fresh.fit(x, y, sample_weight=weight, epochs=8, batch_size=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0], losses


@pytest.mark.neutral
def test_text_too_long_and_bad_pairs_raise_one_line_naming_the_text():
    model = from_keras_hub(t5_seq2seq_lm())
    limited = type(model)(
        vocabulary_size=model.source_vocab_size, hidden_dim=8, intermediate_dim=16, num_heads=2,
        num_layers=1, max_source_length=6, max_target_length=4, tokenizer=model.tokenizer,
    )  # fmt: skip
    tokens = len(model.tokenizer.tokenize(SOURCES[0])) + 1
    with pytest.raises(
        ValueError,
        match=rf"^T5.generate: text 0 \('translate English to German: the quick b...'\) gives "
        rf"{tokens} tokens \(with the end token\), more than the model's max_source_length = 6; "
        r"shorten it \(and 1 more\).$",
    ):
        limited.generate(SOURCES, max_length=4)
    with pytest.raises(ValueError, match=r"T5.preprocess_text_pairs \(decoder_text\): text 0 "):
        limited.preprocess_text_pairs({"encoder_text": "Hello", "decoder_text": SOURCES[2]})
    with pytest.raises(ValueError, match=r"as many encoder_text as decoder_text, got 3 and 1"):
        model.preprocess_text_pairs({"encoder_text": SOURCES, "decoder_text": "Hallo"})
    with pytest.raises(TypeError, match=r"`x` must be a dict with encoder_text and decoder_text"):
        model.preprocess_text_pairs(SOURCES)
    with pytest.raises(TypeError, match=r"DecoderLM.preprocess_text_pairs: pairs are for encoder"):
        from keras_posenc import zoo

        zoo.create("decoder_lm_tiny").preprocess_text_pairs(
            {"encoder_text": "a", "decoder_text": "b"}
        )
