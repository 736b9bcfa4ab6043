"""Translation presets in keras-hub's format (keras_posenc/models/translation.py): the tiny
fairseq archive (tests/fairseq_archive.py) -> our preset -> ``models.to_keras_hub_preset``
-> keras-hub's ``Seq2SeqLM.from_preset``, whose ``generate(texts)`` gives the zoo model's
``translate(texts)``; and our ``hub.load_preset`` / ``hub.from_preset`` read it back.

The tokenizer's ids and texts are checked against fairseq's pipeline written by hand
(``fairseq_encode`` / ``fairseq_decode``: sacremoses and subword-nmt called directly, the
dictionaries read from the archive's files); ``translate`` itself is checked against a
numpy fairseq in tests/test_translation.py.
"""

from __future__ import annotations

import os

import keras
import keras_hub
import numpy as np
import pytest
from fairseq_archive import (
    ENGLISH,
    archive_files,
    fairseq_decode,
    fairseq_encode,
    write_archive,
)

from keras_posenc import hub, models
from keras_posenc.convert import fairseq_to_posenc_ids

pytestmark = pytest.mark.contract


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


MAX_LENGTH = 8  # target tokens: short, so that the searches take a fraction of a second


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(archive path, its files, our preset folder, the keras-hub preset folder)."""
    folder = tmp_path_factory.mktemp("translation")
    files = archive_files()
    archive = write_archive(folder, files)
    home = os.environ.get("KERAS_POSENC_HOME")
    os.environ["KERAS_POSENC_HOME"] = str(folder / "posenc")
    try:
        ours = hub.preset_path(archive, progress=False)
        target = models.to_keras_hub_preset(archive, folder / "keras_hub")
    finally:
        if home is None:
            os.environ.pop("KERAS_POSENC_HOME")
        else:
            os.environ["KERAS_POSENC_HOME"] = home
    return archive, files, ours, target


def test_generate_equals_translate_through_keras_hub_and_back(converted):
    _, _, ours, target = converted
    assert sorted(os.listdir(os.path.join(target, "assets", "tokenizer"))) == [
        "bpecodes",
        "source_vocabulary.txt",
        "target_vocabulary.txt",
    ]
    task = keras_hub.models.Seq2SeqLM.from_preset(target)
    assert type(task) is models.ConvS2SSeq2SeqLM
    assert type(task.preprocessor.tokenizer) is models.ConvS2STranslationTokenizer
    reference = hub.load_preset(ours)
    model = reference.model
    texts = ENGLISH[:2]
    # keras-hub's max_length counts the decoder start: translate's tokens + 1.
    for beam_size in (1, 3):
        expected = model.translate(texts, beam_size=beam_size, max_length=MAX_LENGTH)
        got = task.generate(texts, max_length=MAX_LENGTH + 1, beam_size=beam_size, min_length=1)
        assert got == expected
        assert all(got)  # min_length=1: something was generated
    with pytest.raises(TypeError, match="packing text pairs for `fit` is not supported"):
        task.preprocessor({"encoder_text": texts, "decoder_text": texts})
    # The logits too: the backbone holds the converted weights.
    x = {
        "encoder_token_ids": np.array([[5, 6, 7, 2]], "int32"),
        "decoder_token_ids": np.array([[1, 4, 5]], "int32"),
    }
    np.testing.assert_allclose(_numpy(task(x)), _numpy(model(x)), rtol=1e-6, atol=1e-6)

    # Our hub reads keras-hub's folder back: the zoo's model with its text pipeline.
    preset = hub.load_preset(target)
    assert type(preset.model) is type(model)
    for name in ("source_vocabulary", "target_vocabulary", "bpe_codes"):
        assert getattr(preset.preprocessor, name) == getattr(reference.preprocessor, name)
    assert preset.model.preprocessor is preset.preprocessor  # for translate
    assert preset.model.translate(texts, beam_size=3, max_length=MAX_LENGTH) == expected
    np.testing.assert_allclose(_numpy(preset.model(x)), _numpy(model(x)), rtol=1e-6, atol=1e-6)


@pytest.mark.large
def test_our_preset_folder_converts_as_the_archive(converted, tmp_path):
    _, _, ours, _ = converted
    target = models.to_keras_hub_preset(ours, tmp_path / "keras_hub")
    task = keras_hub.models.Seq2SeqLM.from_preset(target)
    model = hub.from_preset(target)
    texts = ENGLISH[2:]
    expected = hub.from_preset(ours).translate(texts, beam_size=2, max_length=MAX_LENGTH)
    assert model.translate(texts, beam_size=2, max_length=MAX_LENGTH) == expected
    assert task.generate(texts, max_length=MAX_LENGTH + 1, beam_size=2, min_length=1) == expected
    # translate's defaults (beam 5, min_length 1, its length) through generate's options:
    # the preset's decoder_sequence_length is translate's default length + 1.
    assert task.generate(texts[:1], beam_size=5, min_length=1) == model.translate(texts[:1])


@pytest.mark.neutral
def test_the_tokenizer_is_fairseqs_pipeline(converted):
    _, files, _, target = converted
    tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(target)
    assert type(tokenizer) is models.ConvS2STranslationTokenizer
    codes = files["bpecodes"].decode()
    english = files["dict.en.txt"].decode().splitlines()
    french = files["dict.fr.txt"].decode().splitlines()
    for sentence in ENGLISH:
        expected = fairseq_to_posenc_ids(np.array(fairseq_encode(sentence, "en", codes, english)))
        assert tokenizer.tokenize(sentence).tolist() == expected[:-1].tolist()  # no eos
    ids = [fairseq_to_posenc_ids(np.array([4, 7, 5, 9, 6, 2])).tolist()]
    assert tokenizer.detokenize(ids) == [fairseq_decode(ids[0], "fr", french)]
    assert (tokenizer.pad_token_id, tokenizer.start_token_id, tokenizer.end_token_id) == (0, 1, 2)
    assert tokenizer.vocabulary_size() == len(french) + 4
    assert tokenizer.id_to_token(tokenizer.token_to_id("le")) == "le"
    with pytest.raises(ValueError, match="ConvS2STranslationTokenizer.token_to_id: 'zzz'"):
        tokenizer.token_to_id("zzz")
    with pytest.raises(TypeError, match="ConvS2STranslationTokenizer.tokenize: `inputs`"):
        tokenizer.tokenize(3)


@pytest.mark.neutral
def test_bad_inputs_are_named(converted, tmp_path):
    _, _, ours, target = converted
    with pytest.raises(TypeError, match="from_translation_preprocessor: `preprocessor` must"):
        models.ConvS2STranslationTokenizer.from_translation_preprocessor("en-fr")
    image = hub.Preset(None, None, None, {}, str(tmp_path))
    with pytest.raises(ValueError, match="must hold a TranslationPreprocessor, got NoneType"):
        models.to_keras_hub_translation_preset(image, tmp_path / "x")
    with pytest.raises(FileExistsError, match="exists; pass overwrite=True"):
        models.to_keras_hub_preset(ours, target)


@pytest.mark.large
def test_a_muse_translation_preset(converted, tmp_path):
    """MUSE takes the same pipeline: a narrowed muse_tiny with the archive's vocabularies."""
    from keras_posenc import zoo
    from keras_posenc.zoo.translation import TranslationPreprocessor

    _, files, _, _ = converted
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    english, french = (
        specials
        + [line.rsplit(" ", 1)[0] for line in files[f"dict.{lang}.txt"].decode().splitlines()]
        for lang in ("en", "fr")
    )
    pre = TranslationPreprocessor("en", "fr", english, french, bpe_codes=files["bpecodes"].decode())
    model = zoo.create(
        "muse_tiny",
        src_vocab_size=len(english),
        tgt_vocab_size=len(french),
        num_encoder_layers=1,
        num_decoder_layers=1,
        max_source_positions=32,
        max_target_positions=32,
    )
    ours = hub.save_preset(model, tmp_path / "muse", preprocessor=pre)
    target = models.to_keras_hub_preset(ours, tmp_path / "keras_hub")
    task = keras_hub.models.Seq2SeqLM.from_preset(target)
    assert type(task) is models.MUSESeq2SeqLM
    assert type(task.preprocessor.tokenizer) is models.MUSETranslationTokenizer
    texts = ENGLISH[:2]
    expected = model.translate(texts, preprocessor=pre, beam_size=2, max_length=MAX_LENGTH)
    assert task.generate(texts, max_length=MAX_LENGTH + 1, beam_size=2, min_length=1) == expected
    assert hub.from_preset(target).translate(texts, beam_size=2, max_length=MAX_LENGTH) == expected
