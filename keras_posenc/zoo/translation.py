"""fairseq's text pipeline for translation models: Moses tokenisation, BPE, dictionaries.

A fairseq translation archive (``wmt14.v2.en-fr.fconv-py`` and its siblings) holds,
beside the checkpoint, the BPE codes (``bpecodes``) and one dictionary per language
(``dict.en.txt``, ``dict.fr.txt``). fairseq's ``translate`` turns a sentence into ids
with ``moses`` tokenisation, ``subword_nmt`` BPE and a dictionary lookup, and ids back
into a sentence the other way round. :class:`TranslationPreprocessor` does the same,
with the libraries fairseq itself calls: ``sacremoses`` (Moses) and ``subword-nmt``
(BPE), so the same sentence gives the same ids.

The preprocessor is saved in a preset (``preprocessor.json`` plus its vocabularies
and codes under ``assets/``) and attached to the model that :func:`~keras_posenc.zoo.
presets.load_preset` returns, so ``model.translate(texts)`` works after
``zoo.from_preset(...)``.

>>> pre = TranslationPreprocessor("en", "fr",
...     source_vocabulary=["<pad>", "<s>", "</s>", "<unk>", "hello", ","],
...     target_vocabulary=["<pad>", "<s>", "</s>", "<unk>", "bonjour", ","])
>>> pre.encode(["hello, world"]).tolist()
[[4, 5, 3, 2]]
>>> pre.decode([[4, 5, 2, 0]])
['bonjour,']
"""

from __future__ import annotations

import importlib
import io
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.layers._checks import check_bool, check_int, excerpt

__all__ = ["TranslationPreprocessor"]

SOURCE_VOCABULARY_FILE = "source_vocabulary.txt"
TARGET_VOCABULARY_FILE = "target_vocabulary.txt"
BPE_CODES_FILE = "bpecodes"
# The ids every zoo seq2seq model and the fairseq converter use (see convert.fairseq).
_SPECIALS = {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}


def _library(who: str, module: str, package: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"{who}: the text pipeline needs {package}; install it with "
            '`pip install "keras-posenc[text]"`.'
        ) from error


@keras.saving.register_keras_serializable(package="keras_posenc")
class TranslationPreprocessor:
    """Sentences to token ids and back, as fairseq's ``moses`` + ``subword_nmt`` pipeline.

    Encoding a sentence (fairseq's ``GeneratorHubInterface.encode``): Moses
    tokenisation in the source language (``aggressive_dash_splits`` and XML
    escaping on, fairseq's defaults), BPE with the codes (``@@`` joins a word's
    pieces), whitespace split, each token's id in the source vocabulary
    (``unk_id`` for a token it lacks), and ``eos_id`` at the end. A batch is
    right-padded with ``pad_id``.

    Decoding ids (fairseq's ``decode``): up to the first ``eos_id``, without pad and
    bos, each id's token, joined by spaces; the BPE joins removed
    (``"@@ "``), then Moses detokenisation in the target language.

    Args:
        source_lang: the source language's code (``"en"``), for Moses.
        target_lang: the target language's code (``"fr"``), for Moses.
        source_vocabulary: the source tokens in the model's id order (``tokens[i]``
            is id ``i``; :func:`~keras_posenc.convert.read_fairseq_dictionary` reads
            a fairseq ``dict.txt`` so), or a text file of one token per line. May be
            left out when the preprocessor is loaded from a preset (its assets
            fill it).
        target_vocabulary: likewise for the target side.
        bpe_codes: subword-nmt BPE codes (the text of an archive's ``bpecodes``, or
            its path); None for a model trained without BPE.
        bpe_separator: the BPE continuation mark (fairseq's ``--bpe-separator``).
        moses_escape: escape ``&<>'"[]|`` as Moses does (fairseq's default; off with
            ``--moses-no-escape``).
        aggressive_dash_splits: split hyphenated words as ``well @-@ known``
            (fairseq's default; off with ``--moses-no-dash-splits``).

    Special ids are the zoo's: pad 0, bos 1, eos 2, unk 3.

    Example:

    >>> pre = TranslationPreprocessor("en", "de",
    ...     source_vocabulary=["<pad>", "<s>", "</s>", "<unk>", "a", "well", "@-@", "known"],
    ...     target_vocabulary=["<pad>", "<s>", "</s>", "<unk>", "gut", "bekannt"])
    >>> pre.tokenize("A well-known")
    ['A', 'well', '@-@', 'known']
    >>> pre.encode(["A well-known", ""]).tolist()
    [[3, 5, 6, 7, 2], [2, 0, 0, 0, 0]]
    """

    def __init__(
        self,
        source_lang: str,
        target_lang: str,
        source_vocabulary: Sequence[str] | str | os.PathLike | None = None,
        target_vocabulary: Sequence[str] | str | os.PathLike | None = None,
        bpe_codes: str | os.PathLike | None = None,
        bpe_separator: str = "@@",
        moses_escape: bool = True,
        aggressive_dash_splits: bool = True,
    ) -> None:
        who = "TranslationPreprocessor"
        for name, value in (("source_lang", source_lang), ("target_lang", target_lang)):
            if not isinstance(value, str) or not value.strip():
                raise TypeError(
                    f"{who}: `{name}` must be a language code such as 'en', got {value!r}."
                )
        if (
            not isinstance(bpe_separator, str)
            or not bpe_separator
            or any(c.isspace() for c in bpe_separator)
        ):
            raise ValueError(
                f"{who}: `bpe_separator` must be a non-empty string without spaces, got "
                f"{bpe_separator!r}."
            )
        moses_escape = check_bool(who, "moses_escape", moses_escape)
        aggressive_dash_splits = check_bool(who, "aggressive_dash_splits", aggressive_dash_splits)
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.bpe_separator = bpe_separator
        self.moses_escape = moses_escape
        self.aggressive_dash_splits = aggressive_dash_splits
        self.pad_id, self.bos_id = _SPECIALS["pad_id"], _SPECIALS["bos_id"]
        self.eos_id, self.unk_id = _SPECIALS["eos_id"], _SPECIALS["unk_id"]
        self.source_vocabulary: list[str] | None = None
        self.target_vocabulary: list[str] | None = None
        self._source_ids: dict[str, int] = {}
        self.bpe_codes: str | None = None
        self._bpe = self._tokenizer = self._detokenizer = None
        if source_vocabulary is not None or target_vocabulary is not None:
            self.set_vocabularies(source_vocabulary, target_vocabulary)
        if bpe_codes is not None:
            self.set_bpe_codes(bpe_codes)

    # ----------------------------------------------------------------------- contents

    def set_vocabularies(
        self,
        source: Sequence[str] | str | os.PathLike | None,
        target: Sequence[str] | str | os.PathLike | None,
    ) -> None:
        """Sets both vocabularies (token lists in id order, or files of one token a line)."""
        self.source_vocabulary = self._vocabulary("source_vocabulary", source)
        self.target_vocabulary = self._vocabulary("target_vocabulary", target)
        self._source_ids = {}
        for index, token in enumerate(self.source_vocabulary):
            self._source_ids.setdefault(token, index)  # fairseq's lookup: the first wins

    def _vocabulary(self, name: str, value: Any) -> list[str]:
        who = "TranslationPreprocessor"
        if isinstance(value, str | os.PathLike):
            with open(value, encoding="utf-8") as handle:
                value = handle.read().split("\n")
            if value and value[-1] == "":
                value = value[:-1]
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise TypeError(
                f"{who}: `{name}` must be a list of tokens or a file of one token per line, "
                f"got {type(value).__name__}."
            )
        tokens = list(value)
        bad = [t for t in tokens if not isinstance(t, str) or not t or t != t.strip() or " " in t]
        if bad:
            raise ValueError(
                f"{who}: `{name}` tokens must be non-empty strings without spaces; got "
                f"{excerpt(bad)}."
            )
        if len(tokens) <= max(_SPECIALS.values()):
            raise ValueError(
                f"{who}: `{name}` must start with the {len(_SPECIALS)} special tokens "
                f"(<pad>, <s>, </s>, <unk>), got {len(tokens)} tokens."
            )
        return tokens

    def set_bpe_codes(self, codes: str | os.PathLike) -> None:
        """Sets the BPE codes: their text, or the path of a codes file."""
        if isinstance(codes, os.PathLike) or (
            isinstance(codes, str) and "\n" not in codes and os.path.isfile(codes)
        ):
            with open(codes, encoding="utf-8") as handle:
                codes = handle.read()
        if not isinstance(codes, str):
            raise TypeError(
                f"TranslationPreprocessor: `bpe_codes` must be the codes' text or a path, got "
                f"{type(codes).__name__}."
            )
        self.bpe_codes = codes
        self._bpe = None

    @property
    def source_vocab_size(self) -> int:
        return len(self._require("source_vocabulary"))

    @property
    def target_vocab_size(self) -> int:
        return len(self._require("target_vocabulary"))

    def _require(self, name: str) -> list[str]:
        value = getattr(self, name)
        if value is None:
            raise ValueError(
                f"TranslationPreprocessor: no {name.replace('_', ' ')} is set; pass it to the "
                "constructor, or load the preprocessor from a preset."
            )
        return value

    # ----------------------------------------------------------------------- text

    def _moses(self) -> tuple[Any, Any]:
        if self._tokenizer is None:
            moses = _library("TranslationPreprocessor", "sacremoses", "sacremoses")
            self._tokenizer = moses.MosesTokenizer(lang=self.source_lang)
            self._detokenizer = moses.MosesDetokenizer(lang=self.target_lang)
        return self._tokenizer, self._detokenizer

    def _apply_bpe(self, text: str) -> str:
        if self.bpe_codes is None:
            return text
        if self._bpe is None:
            apply_bpe = _library("TranslationPreprocessor", "subword_nmt.apply_bpe", "subword-nmt")
            self._bpe = apply_bpe.BPE(io.StringIO(self.bpe_codes), separator=self.bpe_separator)
        return self._bpe.process_line(text)

    def tokenize(self, text: str) -> list[str]:
        """The source tokens of one sentence: Moses, then BPE.

        >>> TranslationPreprocessor("en", "fr").tokenize("Hello, world!")
        ['Hello', ',', 'world', '!']
        """
        text = self._text(text, "text")
        tokenizer, _ = self._moses()
        tokenized = tokenizer.tokenize(
            text,
            aggressive_dash_splits=self.aggressive_dash_splits,
            return_str=True,
            escape=self.moses_escape,
        )
        return self._apply_bpe(tokenized).split()

    def detokenize(self, tokens: Sequence[str]) -> str:
        """One target sentence from its tokens: BPE joins removed, then Moses.

        >>> pre = TranslationPreprocessor("en", "en", bpe_codes="#version: 0.2\\n")
        >>> pre.detokenize(["Hel@@", "lo", ",", "world", "!"])
        'Hello, world!'
        """
        joined = " ".join(tokens)
        if self.bpe_codes is not None:  # fairseq's subword_nmt decode
            joined = (joined + " ").replace(self.bpe_separator + " ", "").rstrip()
        _, detokenizer = self._moses()
        # fairseq unescapes whatever its tokenizer did (its detokenize call's default).
        return detokenizer.detokenize(joined.split())

    def _text(self, text: Any, name: str) -> str:
        if not isinstance(text, str):
            raise TypeError(
                f"TranslationPreprocessor: `{name}` must be a string, got {type(text).__name__}."
            )
        return text

    # ----------------------------------------------------------------------- ids

    def encode(self, texts: str | Sequence[str], max_length: int | None = None) -> np.ndarray:
        """Source ids of sentences, each ending in ``eos_id``, right-padded with ``pad_id``.

        Args:
            texts: one sentence, or a list of them.
            max_length: if given, a sentence with more tokens (eos included) raises.

        Returns:
            int32 ``(len(texts), longest)``.

        Raises:
            TypeError: a text that is not a string.
            ValueError: a sentence longer than ``max_length`` tokens.
        """
        if isinstance(texts, str):
            texts = [texts]
        if isinstance(texts, bytes) or not isinstance(texts, Sequence):
            raise TypeError(
                "TranslationPreprocessor.encode: `texts` must be a string or a list of "
                f"strings, got {type(texts).__name__}."
            )
        self._require("source_vocabulary")
        rows = []
        for index, text in enumerate(texts):
            tokens = self.tokenize(self._text(text, f"texts[{index}]"))
            rows.append([self._source_ids.get(t, self.unk_id) for t in tokens] + [self.eos_id])
        longest = max((len(row) for row in rows), default=0)
        if max_length is not None:
            max_length = check_int("TranslationPreprocessor.encode", "max_length", max_length, 1)
            for index, row in enumerate(rows):
                if len(row) > max_length:
                    raise ValueError(
                        f"TranslationPreprocessor.encode: texts[{index}] has {len(row)} tokens "
                        f"(eos included), more than the model's {max_length} source positions."
                    )
        ids = np.full((len(rows), longest), self.pad_id, "int32")
        for index, row in enumerate(rows):
            ids[index, : len(row)] = row
        return ids

    def decode(self, ids: Any) -> list[str]:
        """Sentences from target ids (each row up to its first ``eos_id``).

        Raises:
            ValueError: ids that are not a 2D integer array, or outside the vocabulary.
        """
        vocabulary = self._require("target_vocabulary")
        ids = np.asarray(ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(
                "TranslationPreprocessor.decode: `ids` must be a 2D integer array, got "
                f"shape {ids.shape} and dtype {ids.dtype}."
            )
        if ids.size and (ids.min() < 0 or ids.max() >= len(vocabulary)):
            raise ValueError(
                f"TranslationPreprocessor.decode: ids must be in [0, {len(vocabulary)}) (the "
                f"target vocabulary), got values from {ids.min()} to {ids.max()}."
            )
        texts = []
        for row in ids.tolist():
            if self.eos_id in row:
                row = row[: row.index(self.eos_id)]
            kept = [vocabulary[i] for i in row if i not in (self.pad_id, self.bos_id)]
            texts.append(self.detokenize(kept))
        return texts

    # ----------------------------------------------------------------------- saving

    def get_config(self) -> dict:
        """The settings; the vocabularies and codes are assets (:meth:`save_assets`)."""
        return {
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "bpe_separator": self.bpe_separator,
            "moses_escape": self.moses_escape,
            "aggressive_dash_splits": self.aggressive_dash_splits,
        }

    @classmethod
    def from_config(cls, config: dict) -> TranslationPreprocessor:
        return cls(**config)

    def save_assets(self, folder: str | os.PathLike) -> None:
        """Writes the vocabularies (one token per line) and the BPE codes into ``folder``."""
        for name, file in (
            ("source_vocabulary", SOURCE_VOCABULARY_FILE),
            ("target_vocabulary", TARGET_VOCABULARY_FILE),
        ):
            with open(os.path.join(folder, file), "w", encoding="utf-8") as handle:
                handle.write("\n".join(self._require(name)) + "\n")
        if self.bpe_codes is not None:
            with open(os.path.join(folder, BPE_CODES_FILE), "w", encoding="utf-8") as handle:
                handle.write(self.bpe_codes)

    def load_assets(self, folder: str | os.PathLike) -> None:
        """Reads what :meth:`save_assets` wrote.

        Raises:
            ValueError: a vocabulary file is missing.
        """
        paths = [os.path.join(folder, f) for f in (SOURCE_VOCABULARY_FILE, TARGET_VOCABULARY_FILE)]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise ValueError(
                f"TranslationPreprocessor.load_assets: {excerpt(missing)} missing in {folder!r}."
            )
        self.set_vocabularies(*paths)
        codes = os.path.join(folder, BPE_CODES_FILE)
        if os.path.isfile(codes):
            self.set_bpe_codes(codes)

    def __repr__(self) -> str:
        sizes = ""
        if self.source_vocabulary is not None and self.target_vocabulary is not None:
            sizes = f", vocabularies {self.source_vocab_size} / {self.target_vocab_size}"
        bpe = ", BPE" if self.bpe_codes is not None else ""
        return f"TranslationPreprocessor({self.source_lang} -> {self.target_lang}{sizes}{bpe})"
