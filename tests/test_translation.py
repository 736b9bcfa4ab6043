"""fairseq translation archives as presets: download, safe extraction, the text pipeline,
``model.translate`` and ``posenc translate``.

The archive is generated (tests/fairseq_archive.py: the tiny fconv, BPE codes learned from
a few real sentences, dictionaries) and served by the local server (tests/hub_server.py).
Translations are checked against fairseq's pipeline written by hand: Moses and BPE called
directly, the dictionaries read from the archive's files, beam search by
tests/reference/search.py over the numpy fairseq forward pass of
tests/reference/fairseq_checkpoint.py.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from fairseq_archive import (
    CONFIG,
    ENGLISH,
    FRENCH,
    NAME,
    archive_files,
    fairseq_decode,
    fairseq_encode,
    malicious_archive,
    write_archive,
)
from hub_server import HubServer

from keras_posenc import cli, zoo
from keras_posenc.convert import fairseq_to_posenc_ids, load_fairseq_checkpoint
from keras_posenc.hub import archives, load_preset, preset_path, remove_cached, save_preset
from keras_posenc.zoo.translation import TranslationPreprocessor
from reference import search
from reference.fairseq_checkpoint import fconv_forward

pytestmark = pytest.mark.contract

URL_PATH = f"/fairseq/models/{NAME}.tar.bz2"
MAX_LENGTH = 12  # short: float32 and float64 beams then agree on a random tiny model


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """(archive path, its files except the checkpoint, the checkpoint dict)."""
    folder = tmp_path_factory.mktemp("archive")
    files = archive_files()
    path = write_archive(folder, files)
    checkpoint = load_fairseq_checkpoint(os.path.join(folder, NAME, "model.pt"))
    return path, files, checkpoint


@pytest.fixture
def server(archive, tmp_path, monkeypatch):
    """The archive on a local HTTP server; an empty keras-posenc cache."""
    with open(archive[0], "rb") as handle:
        data = handle.read()
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    with HubServer({}, files={URL_PATH: data}) as running:
        yield running


def dictionary(files, lang):
    return files[f"dict.{lang}.txt"].decode().splitlines()


def by_hand(archive, sentences, beam_size, max_length=MAX_LENGTH):
    """fairseq's translation of ``sentences``: encode by hand, beam search over the numpy
    fairseq forward pass (in our ids: pad 0, bos 1), decode by hand."""
    _, files, checkpoint = archive
    codes = files["bpecodes"].decode()
    results = []
    for sentence in sentences:
        source = np.array([fairseq_encode(sentence, "en", codes, dictionary(files, "en"))])

        def log_probs(prefix, source=source):
            # fairseq feeds </s> first; the rest of the prefix in fairseq ids.
            prev = np.array([[2, *fairseq_to_posenc_ids(np.array(prefix[1:], int)).tolist()]])
            logits = fconv_forward(checkpoint["model"], checkpoint["args"], source, prev)[0, -1]
            logits = logits[fairseq_to_posenc_ids(np.arange(logits.shape[-1]))]
            shifted = logits - logits.max()
            return shifted - np.log(np.exp(shifted).sum())

        if beam_size == 1:  # greedy search: no eos forced at the last step
            tokens = search.greedy(log_probs, max_length, 0, 1, 2, min_length=1)
        else:
            tokens, _ = search.beam(log_probs, beam_size, max_length, 1.0, 0, 1, 2, min_length=1)
        ids = fairseq_to_posenc_ids(np.array(tokens)).tolist()
        results.append(fairseq_decode(ids, "fr", dictionary(files, "fr")))
    return results


@pytest.mark.neutral
def test_the_pipeline_follows_fairseqs_on_real_sentences(archive):
    _, files, _ = archive
    codes = files["bpecodes"].decode()
    pre = TranslationPreprocessor(
        "en",
        "fr",
        source_vocabulary=["<pad>", "<s>", "</s>", "<unk>"]
        + [line.rsplit(" ", 1)[0] for line in dictionary(files, "en")],
        target_vocabulary=["<pad>", "<s>", "</s>", "<unk>"]
        + [line.rsplit(" ", 1)[0] for line in dictionary(files, "fr")],
        bpe_codes=codes,
    )
    ids = pre.encode(ENGLISH)
    for row, sentence in zip(ids, ENGLISH):
        fairseq = fairseq_encode(sentence, "en", codes, dictionary(files, "en"))
        expected = fairseq_to_posenc_ids(np.array(fairseq)).tolist()
        assert row[: len(expected)].tolist() == expected
        assert not row[len(expected) :].any()  # right-padded with pad 0
    # Tokens and back: the Moses + BPE round trip restores each sentence exactly.
    for sentence, lang in [*zip(ENGLISH, ["en"] * 5), *zip(FRENCH, ["fr"] * 5)]:
        one_way = TranslationPreprocessor(lang, lang, bpe_codes=codes)
        tokens = one_way.tokenize(sentence)
        assert any(token.endswith("@@") for token in tokens) or len(tokens) > 3
        assert one_way.detokenize(tokens) == sentence
    # Target ids to text, as fairseq's decode: up to eos, bos and pad dropped.
    target = dictionary(files, "fr")
    fairseq_ids = [4, 5, 3, 6, 2, 7]
    ours = fairseq_to_posenc_ids(np.array([[1, *fairseq_ids, 0]]))
    ours[0, 0] = 1  # a leading bos is dropped too
    assert pre.decode(ours) == [fairseq_decode(fairseq_ids[:4], "fr", target)]


def test_download_convert_translate_then_cache_hit(archive, server, capsys):
    url = server.url + URL_PATH
    model = zoo.from_preset(url, progress=False)
    assert model.preprocessor.source_lang == "en" and model.preprocessor.target_lang == "fr"
    assert (model.source_vocab_size, model.target_vocab_size) == (
        CONFIG["src_vocab"],
        CONFIG["tgt_vocab"],
    )
    sentences = ENGLISH[:3]
    got = model.translate(sentences, beam_size=2, max_length=MAX_LENGTH, batch_size=2)
    assert got == by_hand(archive, sentences, beam_size=2)
    assert model.translate(sentences[0], beam_size=2, max_length=MAX_LENGTH) == got[0]
    asked = len(server.requests)
    assert asked == 1
    # The second load reads the cache: no request; the preset folder has the pipeline.
    preset = load_preset(url, progress=False)
    assert len(server.requests) == asked
    assert sorted(os.listdir(os.path.join(preset.path, "assets"))) == [
        "bpecodes",
        "source_vocabulary.txt",
        "target_vocabulary.txt",
    ]
    assert preset.metadata["source"] == url
    assert preset.metadata["fairseq"]["dictionaries"] == ["dict.en.txt", "dict.fr.txt"]
    assert preset.translate(sentences, beam_size=2, max_length=MAX_LENGTH) == got
    # posenc translate, end to end against the server (the cache is removed first).
    assert remove_cached(url)
    assert (
        cli.main(
            [
                "translate",
                *sentences,
                "--model",
                url,
                "--beam",
                "1",
                "--max-length",
                "12",
                "--quiet",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out.splitlines()
    assert printed == by_hand(archive, sentences, beam_size=1)
    assert len(server.requests) == asked + 1


def test_a_local_archive_file_converts_once(archive, tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    copy = shutil.copy(archive[0], tmp_path / "copy.tar.bz2")
    folder = preset_path(copy, progress=False)
    assert os.path.basename(folder).startswith("copy-")  # the file's name, a digest
    assert preset_path(copy, progress=False) == folder  # a cache hit
    os.utime(copy, (0, 0))
    assert preset_path(copy, progress=False) == folder  # keyed by the bytes, not the time
    assert os.listdir(os.path.dirname(folder)) == [os.path.basename(folder)]  # no scratch left


@pytest.mark.neutral
def test_a_download_cut_short_is_refused_and_nothing_is_kept(server, tmp_path):
    server.cut_short.add(URL_PATH)
    with pytest.raises(OSError, match="truncated: .* of the .* bytes"):
        zoo.from_preset(server.url + URL_PATH, progress=False)
    cache = tmp_path / "posenc" / "archives"
    assert os.listdir(cache) == []


@pytest.mark.neutral
def test_a_damaged_archive_is_refused(archive, tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    with open(archive[0], "rb") as handle:
        data = handle.read()
    damaged = tmp_path / "damaged.tar.bz2"
    damaged.write_bytes(data[: len(data) // 2])  # complete download, incomplete archive
    with pytest.raises(ValueError, match="not a complete tar archive"):
        zoo.from_preset(str(damaged), progress=False)
    assert os.listdir(tmp_path / "posenc" / "archives") == []


@pytest.mark.neutral
@pytest.mark.parametrize("kind", ["absolute", "parent", "symlink"])
def test_a_malicious_archive_is_refused_before_anything_is_written(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    path = malicious_archive(tmp_path / "evil.tar.gz", kind)
    with pytest.raises(ValueError, match="is refused: its member .* outside"):
        zoo.from_preset(str(path), progress=False)
    target = tmp_path / "out"
    with pytest.raises(ValueError, match="is refused"):
        archives.extract_archive(path, target)
    assert not os.path.exists(target)  # refused before the folder was made
    assert not os.path.exists("/tmp/keras_posenc_evil.txt")
    assert not (tmp_path / "evil.txt").exists()


def test_bad_archives_and_calls_are_named(archive, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    _, files, _ = archive
    no_dict = write_archive(tmp_path / "a", {k: v for k, v in files.items() if k != "dict.fr.txt"})
    with pytest.raises(ValueError, match="has no dict.fr.txt"):
        zoo.from_preset(no_dict, progress=False)
    short = dict(files, **{"dict.fr.txt": b"le 4\n"})
    with pytest.raises(ValueError, match="tgt_vocab_size` is 5 but the checkpoint's embedding"):
        zoo.from_preset(write_archive(tmp_path / "b", short), progress=False)
    with pytest.raises(ConnectionError, match="http://127.0.0.1:9/none cannot be reached"):
        archives.download("http://127.0.0.1:9/none", tmp_path / "x")
    folder = preset_path(archive[0], progress=False)
    model = load_preset(folder).model
    with pytest.raises(ValueError, match="ConvS2S.translate: the model has no text pipeline"):
        model.preprocessor = None
        model.translate("hello")
    small = TranslationPreprocessor("en", "fr", ["<pad>", "<s>", "</s>", "<unk>", "a"],
                                    ["<pad>", "<s>", "</s>", "<unk>", "b"])  # fmt: skip
    with pytest.raises(ValueError, match="vocabularies have 5 / 5 tokens but the model's 13"):
        model.translate("hello", preprocessor=small)
    with pytest.raises(TypeError, match="`texts\\[1\\]` must be a string, got int"):
        small.encode(["a", 3])
    with pytest.raises(ValueError, match="ids must be in \\[0, 5\\)"):
        small.decode([[7]])
    assert cli.main(["translate", "hello", "--model", folder, "--beam", "0"]) == 1
    assert "--beam and --batch-size must be at least 1, got 0" in capsys.readouterr().err


def test_save_preset_keeps_the_pipeline(archive, tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    preset = load_preset(archive[0], progress=False)
    copy = save_preset(preset.model, tmp_path / "copy", preprocessor=preset.preprocessor)
    loaded = load_preset(copy)
    assert loaded.preprocessor.target_vocabulary == preset.preprocessor.target_vocabulary
    assert loaded.preprocessor.bpe_codes == preset.preprocessor.bpe_codes
    sentence = ENGLISH[1]
    assert loaded.model.translate(sentence, beam_size=1, max_length=8) == preset.translate(
        sentence, beam_size=1, max_length=8
    )


def onnx_translate(reports, preprocessor, sentences, max_length):
    """Greedy translation with the exported ONNX graphs in onnxruntime: the text pipeline,
    then the encoder and decoder-step graphs fed by the names the export reports."""
    import onnxruntime

    options = {"providers": ["CPUExecutionProvider"]}
    encoder = onnxruntime.InferenceSession(reports["encoder"].path, **options)
    step = onnxruntime.InferenceSession(reports["decoder_step"].path, **options)
    state = [name for name, _, _ in reports["encoder"].outputs]
    cache_names = [name for name, _, _ in reports["decoder_step"].inputs][2:]
    source = preprocessor.encode(sentences)
    cache = dict(zip(state, encoder.run(state, {"encoder_token_ids": source})))
    for spec in step.get_inputs():  # the decoder's buffers start as zeros
        if spec.name not in cache and spec.name.startswith("cache_"):
            shape = [source.shape[0], *[int(d) for d in spec.shape[1:]]]
            cache[spec.name] = np.zeros(shape, np.float32)
    tokens = np.full(source.shape[0], preprocessor.bos_id, np.int32)
    output = np.zeros((source.shape[0], max_length), np.int32)
    finished = np.zeros(source.shape[0], bool)
    for index in range(max_length):
        feed = {"token_ids": tokens, "index": np.array([index], np.int32), **cache}
        logits, *updated = step.run(["logits", *(f"new_{n}" for n in cache_names)], feed)
        cache.update(zip(cache_names, updated))
        logits[:, [preprocessor.pad_id, preprocessor.bos_id]] = -np.inf
        if index == 0:
            logits[:, preprocessor.eos_id] = -np.inf  # min_length 1, as translate
        tokens = np.argmax(logits, axis=-1).astype(np.int32)
        output[:, index] = np.where(finished, preprocessor.pad_id, tokens)
        finished |= tokens == preprocessor.eos_id
    return preprocessor.decode(output)


@pytest.mark.large
def test_translation_after_onnx_export(archive, tmp_path, monkeypatch):
    from keras_posenc.export import export_seq2seq

    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    preset = load_preset(archive[0], progress=False)
    reports = export_seq2seq(preset.model, tmp_path / "onnx", format="onnx")
    sentences = ENGLISH[:3]
    expected = preset.translate(sentences, beam_size=1, max_length=MAX_LENGTH)
    assert expected == by_hand(archive, sentences, beam_size=1)
    assert onnx_translate(reports, preset.preprocessor, sentences, MAX_LENGTH) == expected
