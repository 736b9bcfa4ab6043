"""A fairseq translation archive generated for the tests, and fairseq's text pipeline by hand.

``write_archive`` builds what fairseq publishes as ``wmt14.v2.en-fr.fconv-py.tar.bz2``:
one folder holding ``model.pt`` (the tiny fconv of reference/fairseq_checkpoint.py with
longer position tables, random weights), ``bpecodes`` (subword-nmt codes learned here
from a few real sentences after Moses tokenisation, as fairseq's data preparation does)
and the dictionaries ``dict.en.txt`` / ``dict.fr.txt`` (``token count`` lines, most
frequent first, sized to the checkpoint's embeddings).

``fairseq_encode`` / ``fairseq_decode`` are fairseq's hub pipeline written from its rules
(``GeneratorHubInterface.encode`` / ``decode`` with ``tokenizer="moses"`` and
``bpe="subword_nmt"``), calling sacremoses and subword-nmt directly and reading the
dictionary lines themselves: they share nothing with keras_posenc.
"""

from __future__ import annotations

import collections
import io
import os
import tarfile

from reference.fairseq_checkpoint import TINY, write_fconv_checkpoint

NAME = "wmt14.tiny.en-fr.fconv-py"
# The tiny fconv with position tables long enough for the sentences below.
CONFIG = {**TINY, "max_positions": 64}
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's ids 0..3

ENGLISH = [
    "The cat sat on the mat.",
    "It's a well-known fact that cats like warm places.",
    "The dog doesn't like the cat, but the cat likes the dog!",
    'She said: "Translation is hard & fun."',
    "Prices rose by 3.5% in 2014 (a record).",
]
FRENCH = [
    "Le chat était assis sur le tapis.",
    "C'est un fait bien connu que les chats aiment les endroits chauds.",
    "Le chien n'aime pas le chat, mais le chat aime le chien !",
    "Elle a dit : « La traduction est difficile et amusante. »",
    "Les prix ont augmenté de 3,5 % en 2014 (un record).",
]


def moses(lang: str):
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    return lambda text: tokenizer.tokenize(
        text, aggressive_dash_splits=True, return_str=True, escape=True
    )


def learn_codes(merges: int = 200) -> str:
    """subword-nmt codes learned from both sides' Moses-tokenised sentences (joint BPE)."""
    from subword_nmt.learn_bpe import learn_bpe

    text = [moses("en")(s) for s in ENGLISH] + [moses("fr")(s) for s in FRENCH]
    out = io.StringIO()
    learn_bpe(io.StringIO("\n".join(text) + "\n"), out, merges, min_frequency=1)
    return out.getvalue()


def bpe(codes: str):
    from subword_nmt.apply_bpe import BPE

    return BPE(io.StringIO(codes)).process_line


def dictionary_lines(lang: str, sentences: list[str], codes: str, size: int) -> list[str]:
    """fairseq ``dict.txt`` lines: the ``size`` most frequent BPE tokens (ties by token)."""
    apply, tokenize = bpe(codes), moses(lang)
    counts = collections.Counter(t for s in sentences for t in apply(tokenize(s)).split())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]
    return [f"{token} {count}" for token, count in ranked]


def archive_files(codes: str | None = None) -> dict[str, bytes]:
    """The archive's files (name -> bytes) except the checkpoint."""
    codes = codes if codes is not None else learn_codes()
    words = len(SPECIALS)
    return {
        "bpecodes": codes.encode(),
        "dict.en.txt": "\n".join(
            dictionary_lines("en", ENGLISH, codes, CONFIG["src_vocab"] - words)
        ).encode()
        + b"\n",
        "dict.fr.txt": "\n".join(
            dictionary_lines("fr", FRENCH, codes, CONFIG["tgt_vocab"] - words)
        ).encode()
        + b"\n",
    }


def write_archive(folder: str | os.PathLike, files: dict[str, bytes] | None = None) -> str:
    """``folder/NAME.tar.bz2`` holding ``NAME/`` with model.pt and ``files``; its path."""
    folder = os.fspath(folder)
    inner = os.path.join(folder, NAME)
    os.makedirs(inner, exist_ok=True)
    write_fconv_checkpoint(os.path.join(inner, "model.pt"), config=CONFIG)
    for name, data in (files if files is not None else archive_files()).items():
        with open(os.path.join(inner, name), "wb") as handle:
            handle.write(data)
    path = os.path.join(folder, NAME + ".tar.bz2")
    with tarfile.open(path, "w:bz2") as tar:
        tar.add(inner, arcname=NAME)
    return path


def malicious_archive(path: str | os.PathLike, kind: str) -> str:
    """A gzip tar whose one bad member escapes the extraction folder: ``"absolute"``
    (``/tmp/...``), ``"parent"`` (``../``) or ``"symlink"`` (a link to ``/etc``)."""
    path = os.fspath(path)
    with tarfile.open(path, "w:gz") as tar:
        good = tarfile.TarInfo(f"{NAME}/dict.en.txt")
        good.size = 6
        tar.addfile(good, io.BytesIO(b"the 1\n"))
        if kind == "symlink":
            bad = tarfile.TarInfo(f"{NAME}/escape")
            bad.type, bad.linkname = tarfile.SYMTYPE, "/etc"
            tar.addfile(bad)
        else:
            name = "/tmp/keras_posenc_evil.txt" if kind == "absolute" else "../evil.txt"
            bad = tarfile.TarInfo(name)
            bad.size = 4
            tar.addfile(bad, io.BytesIO(b"evil"))
    return path


# --------------------------------------------------------------------------- by hand


def fairseq_encode(sentence: str, lang: str, codes: str, dictionary: list[str]) -> list[int]:
    """fairseq's ids of a sentence: Moses, BPE, ``encode_line`` (unk 3, then eos 2)."""
    words = [line.rsplit(" ", 1)[0] for line in dictionary]
    index = {word: i + len(SPECIALS) for i, word in enumerate(words)}
    tokens = bpe(codes)(moses(lang)(sentence)).split()
    return [index.get(token, 3) for token in tokens] + [2]


def fairseq_decode(ids: list[int], lang: str, dictionary: list[str]) -> str:
    """fairseq's text of ids: ``Dictionary.string`` (eos and bos dropped), the BPE joins
    removed (``"@@ "``), Moses detokenisation."""
    from sacremoses import MosesDetokenizer

    symbols = SPECIALS + [line.rsplit(" ", 1)[0] for line in dictionary]
    text = " ".join(symbols[i] for i in ids if i not in (0, 2))
    text = (text + " ").replace("@@ ", "").rstrip()
    return MosesDetokenizer(lang=lang).detokenize(text.split())
