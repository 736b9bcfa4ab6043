"""keras-hub's Seq2SeqLM and CausalLM over the zoo's generating families
(keras_posenc/models/generating.py): ``from_zoo`` gives the zoo model's logits,
``save_to_preset`` then keras-hub's ``from_preset`` gives them again, and ``generate`` on
text runs through keras-hub's task API (preprocessor, ``generate_step``, postprocessor)."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest

from keras_posenc import hub, models, zoo
from keras_posenc.models._generating_tasks import copy_weights

pytestmark = pytest.mark.contract

SHAW_X = {
    "encoder_token_ids": np.array([[5, 6, 7, 2], [8, 9, 2, 0]], "int32"),
    "decoder_token_ids": np.array([[1, 7, 6], [1, 9, 0]], "int32"),
}


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def test_shaw_reverse_preset_through_keras_hub(tmp_path):
    task = models.ShawTransformerSeq2SeqLM.from_zoo("shaw_transformer_base", weights="reverse")
    reference = _numpy(zoo.create("shaw_transformer_base", weights="reverse")(SHAW_X))
    np.testing.assert_array_equal(_numpy(task(SHAW_X)), reference)

    task.save_to_preset(tmp_path)
    loaded = keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path))
    assert type(loaded) is models.ShawTransformerSeq2SeqLM
    np.testing.assert_array_equal(_numpy(loaded(SHAW_X)), reference)
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert type(backbone) is models.ShawTransformerBackbone
    np.testing.assert_array_equal(_numpy(backbone(SHAW_X)), reference)
    tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(str(tmp_path))
    assert type(tokenizer) is models.ShawTransformerTokenizer
    assert tokenizer.get_vocabulary() == list(models.REVERSE_VOCABULARY)

    # Text in, text out through keras-hub's Seq2SeqLM.generate: the shipped model reverses.
    assert loaded.generate(["k e r a s", "x y z . 7"]) == ["s a r e k", "7 . z y x"]
    # Our API reads the same folder: the zoo's model (task.to_zoo), the same logits.
    ours = hub.load_preset(str(tmp_path)).model
    assert type(ours).__name__ == "ShawTransformer"
    np.testing.assert_array_equal(_numpy(ours(SHAW_X)), reference)


@pytest.mark.large
def test_fit_on_text():
    # The preprocessors pack the texts; the shipped model knows the reversal (a small loss
    # only if the packed ids reach the backbone's inputs by name).
    task = models.ShawTransformerSeq2SeqLM.from_zoo("shaw_transformer_base", weights="reverse")
    task.compile(optimizer=keras.optimizers.SGD(0.0))
    pairs = {"encoder_text": ["a b c", "d e"], "decoder_text": ["c b a", "e d"]}
    history = task.fit(pairs, batch_size=2, verbose=0).history
    assert history["loss"][0] < 0.05 and history["sparse_categorical_accuracy"][0] == 1.0
    causal = models.DecoderLMCausalLM.from_zoo("decoder_lm_tiny", num_layers=1)
    causal.compile(optimizer=keras.optimizers.Adam(1e-2))
    losses = causal.fit(["abab abab", "abab"] * 4, batch_size=8, epochs=5, verbose=0)
    assert losses.history["loss"][-1] < losses.history["loss"][0]


def test_decoder_lm_through_keras_hub(tmp_path):
    task = models.DecoderLMCausalLM.from_zoo("decoder_lm_tiny")
    model = zoo.create("decoder_lm_tiny")
    copy_weights(task.backbone, model, "test")
    ids = np.array([[1, 75, 108, 36, 0], [1, 75, 108, 108, 111]], "int32")
    reference = _numpy(model(ids))
    np.testing.assert_array_equal(_numpy(task(ids)), reference)

    task.save_to_preset(tmp_path)
    loaded = keras_hub.models.CausalLM.from_preset(str(tmp_path))
    assert type(loaded) is models.DecoderLMCausalLM
    assert type(loaded.preprocessor.tokenizer) is models.DecoderLMTokenizer
    np.testing.assert_array_equal(_numpy(loaded(ids)), reference)
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path))
    np.testing.assert_array_equal(_numpy(backbone(ids)), reference)

    # keras-hub's CausalLM.generate gives the zoo model's own greedy text.
    prompts = ["Hi", "Hello"]
    assert loaded.generate(prompts, max_length=10) == model.generate(prompts, max_length=10)


def test_generating_tasks_refuse_bad_calls():
    task = models.DecoderLMCausalLM.from_zoo("decoder_lm_tiny", num_layers=1)
    with pytest.raises(TypeError, match="unknown arguments \\['beams'\\]"):
        task.generate("Hi", max_length=6, beams=2)
    with pytest.raises(ValueError, match="`stop_token_ids` must be 'auto' or \\[2\\]"):
        task.generate("Hi", max_length=6, stop_token_ids=[5])
    with pytest.raises(ValueError, match="'tokenizer' belong to the task"):
        models.DecoderLMBackbone(tokenizer="byte", vocab_size=259)
    with pytest.raises(ValueError, match="is a 'shaw_transformer' model"):
        models.DecoderLMCausalLM.from_zoo("shaw_transformer_base")


def test_seq2seq_preprocessor_packs_as_the_zoo_and_refuses_bad_input():
    tokenizer = models.ShawTransformerTokenizer(list(models.REVERSE_VOCABULARY))
    preprocessor = models.ShawTransformerSeq2SeqLMPreprocessor(tokenizer, decoder_sequence_length=4)
    packed = preprocessor.generate_preprocess(["a b c", "d"])
    assert packed["encoder_token_ids"].tolist() == [[3, 4, 5, 2], [6, 2, 0, 0]]
    assert packed["decoder_token_ids"].tolist() == [[1, 0, 0, 0]] * 2
    with pytest.raises(ValueError, match="decoder prompts are not supported"):
        preprocessor.generate_preprocess({"encoder_text": ["a"], "decoder_text": ["b"]})
    with pytest.raises(TypeError, match="`x` must be a string or a list of strings, got int"):
        preprocessor.generate_preprocess(3)


def test_word_tokenizer():
    tokenizer = models.ShawTransformerTokenizer(list(models.REVERSE_VOCABULARY))
    assert tokenizer(["a b", "9"])[0].tolist() == [3, 4]
    assert tokenizer.detokenize([[3, 4], [38]]) == ["a b", "9"]
    assert (tokenizer.pad_token_id, tokenizer.start_token_id, tokenizer.end_token_id) == (0, 1, 2)
    with pytest.raises(ValueError, match="the word 'hello' is not in the vocabulary"):
        tokenizer("a hello")
    with pytest.raises(ValueError, match="special tokens \\['</s>'\\]"):
        models.ShawTransformerTokenizer(["<pad>", "<s>", "a"])
    with pytest.raises(ValueError, match="distinct words without whitespace"):
        models.ShawTransformerTokenizer(["<pad>", "<s>", "</s>", "a b"])


def _words(size):
    return ["<pad>", "<s>", "</s>", *[f"w{i}" for i in range(3, size)]]


# One tiny configuration per other family: (task class, zoo name, overrides).
TINY = {
    "convs2s": (
        models.ConvS2SSeq2SeqLM,
        "convs2s_small",
        dict(src_vocab_size=20, tgt_vocab_size=20, embed_dim=8, encoder_layers=[(8, 3)],
             decoder_layers=[(8, 3)], decoder_out_embed_dim=8),
    ),
    "muse": (
        models.MUSESeq2SeqLM,
        "muse_tiny",
        dict(src_vocab_size=20, tgt_vocab_size=20, hidden_dim=8, intermediate_dim=16,
             num_heads=2, num_encoder_layers=1, num_decoder_layers=1),
    ),
    "music_transformer": (
        models.MusicTransformerCausalLM,
        "music_transformer_base",
        dict(num_events=17, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1,
             max_distance=8),
    ),
    "convs2s_lm": (
        models.ConvS2SLanguageModelCausalLM,
        "convs2s_lm",
        dict(vocab_size=20, embed_dim=8, decoder_layers=[(8, 3)], decoder_out_embed_dim=8),
    ),
}  # fmt: skip


def _expected_texts(model, tokenizer, texts, max_length):
    """The zoo model's greedy text from token ids packed by hand (sources: tokens and the
    end id; prompts: the start id and the tokens), cut at the end id, specials removed."""
    seq2seq = not getattr(model, "is_decoder_only", False)
    rows = [[int(i) for i in tokenizer(text)] for text in texts]
    rows = [row + [2] for row in rows] if seq2seq else [[1, *row] for row in rows]
    ids = np.zeros((len(rows), max(map(len, rows))), "int32")
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    out = model.generate(ids, max_length=max_length - 1 if seq2seq else max_length)
    texts = []
    for row in out:
        ends = np.flatnonzero(row[ids.shape[1] if not seq2seq else 0 :] == 2)
        stop = (ends[0] + (0 if seq2seq else ids.shape[1])) if ends.size else len(row)
        texts.append(tokenizer.detokenize([int(i) for i in row[:stop] if i > 2]))
    return texts


@pytest.mark.parametrize("family", sorted(TINY))
def test_other_families_through_keras_hub(family, tmp_path):
    cls, name, overrides = TINY[family]
    model = zoo.create(name, **overrides)
    model.save_weights(str(tmp_path / "zoo.weights.h5"))
    network_vocab = getattr(model, "vocab_size", None) or model.target_vocab_size
    tokenizer = cls.preprocessor_cls.tokenizer_cls(_words(network_vocab))
    task = cls.from_zoo(
        name, weights=str(tmp_path / "zoo.weights.h5"), tokenizer=tokenizer, **overrides
    )
    if cls.__mro__[1] is models.ZooSeq2SeqLM:
        x, base = SHAW_X, keras_hub.models.Seq2SeqLM
        x = {k: np.minimum(v, 19) for k, v in x.items()}
    else:
        x, base = np.array([[1, 5, 6, 7], [1, 9, 0, 0]], "int32"), keras_hub.models.CausalLM
    reference = _numpy(model(x))
    np.testing.assert_array_equal(_numpy(task(x)), reference)
    task.save_to_preset(str(tmp_path / "preset"))
    loaded = base.from_preset(str(tmp_path / "preset"))
    assert type(loaded) is cls
    np.testing.assert_array_equal(_numpy(loaded(x)), reference)
    assert type(keras_hub.tokenizers.Tokenizer.from_preset(str(tmp_path / "preset"))) is type(
        tokenizer
    )
    texts = ["w5 w6 w7", "w9"]
    expected = _expected_texts(model, tokenizer, texts, 8)
    assert loaded.generate(texts, max_length=8) == expected


def test_t5_through_keras_hub(tmp_path):
    from test_decoder_text import sentencepiece_proto

    proto = sentencepiece_proto({"pad": (0, "<pad>"), "eos": (1, "</s>"), "unk": (2, "<unk>")})
    tokenizer = models.ZooT5Tokenizer(proto=proto)
    overrides = dict(vocabulary_size=tokenizer.vocabulary_size(), hidden_dim=8,
                     intermediate_dim=16, num_heads=2, num_layers=1, key_value_dim=4)  # fmt: skip
    model = zoo.create("t5_small", tokenizer=tokenizer, **overrides)
    model.save_weights(str(tmp_path / "zoo.weights.h5"))
    task = models.ZooT5Seq2SeqLM.from_zoo(
        "t5_small", weights=str(tmp_path / "zoo.weights.h5"), tokenizer=tokenizer, **overrides
    )
    x = {
        "encoder_token_ids": np.array([[5, 6, 7, 1]], "int32"),
        "decoder_token_ids": np.array([[0, 7, 6]], "int32"),
    }
    x.update({name.replace("token_ids", "padding_mask"): np.ones_like(v) for name, v in x.items()})
    reference = _numpy(model(x))
    np.testing.assert_array_equal(_numpy(task(x)), reference)
    task.save_to_preset(str(tmp_path / "preset"))
    loaded = keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path / "preset"))
    assert type(loaded) is models.ZooT5Seq2SeqLM
    assert type(loaded.preprocessor.tokenizer) is models.ZooT5Tokenizer
    np.testing.assert_array_equal(_numpy(loaded(x)), reference)
    texts = ["the cat", "a dog sat"]
    # keras-hub's max_length counts the decoder's start token; the zoo's the tokens after it.
    assert loaded.generate(texts, max_length=6) == model.generate(texts, max_length=5)


def test_backbones_refuse_another_kind_of_the_family():
    with pytest.raises(ValueError, match="'convs2s_lm' is a 'convs2s' model of another kind"):
        models.ConvS2SBackbone.from_zoo("convs2s_lm", vocab_size=20)
