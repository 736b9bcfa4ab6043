"""Text in and out of the zoo's generating models: the tokenizer a model holds, and how
``generate`` packs texts into ids and strips the ids it returns back into text.

`TextModel` is a base of `keras_posenc.zoo.seq2seq.GeneratingModel`, so every
encoder-decoder and language model of the zoo has it; a model with a tokenizer
(``_init_tokenizer``: `DecoderLM`, T5) takes a string or a list of strings in ``generate``
and returns text. The packing follows keras-hub's preprocessors, so that a model converted
with a keras-hub tokenizer reads and writes the same text as keras-hub's task model:

- an encoder-decoder's sources are each text's tokens and the end token, right-padded
  (keras_hub's ``T5Preprocessor``: no start token, an end token); its output is cut at the
  first end token and its special tokens removed (``generate_postprocess``);
- a language model's prompts start with the tokenizer's start token where it has one
  (``CausalLMPreprocessor``); `keras_posenc.zoo.language_model.LanguageModel` overrides the
  two methods for that.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc import tokenizers

__all__ = ["TextModel"]


class TextModel:
    """The tokenizer of a zoo model and the packing of texts (the module docstring)."""

    #: Whether the tokenizer's start token must be the model's ``bos_id`` (a language
    #: model's prompts start with it; an encoder-decoder's decoder start is its own, T5's
    #: is the padding id while its tokenizer's start token is ``</s>``).
    text_start_is_bos: bool = False

    def _init_tokenizer(self, tokenizer: Any) -> None:
        """Sets ``self.tokenizer`` after checking that its ids fit the model: its vocabulary
        within the model's, its end id (and start id where `text_start_is_bos`) the
        model's. A tokenizer restored from a config has no vocabulary until the ``.keras``
        file's assets load: it is checked where it can be. (No class attribute declares
        ``tokenizer``: on PyTorch a layer set on a model lives in its module dictionary, which
        a class attribute of the same name would hide.)"""
        owner = type(self).__name__
        tokenizer = tokenizers.get(tokenizer, owner)
        if tokenizer is not None:
            try:
                size = int(tokenizer.vocabulary_size())
            except (ValueError, AttributeError, TypeError):  # no vocabulary loaded yet
                size = None
            vocab = getattr(self, "vocab_size", None) or self.source_vocab_size
            if size is not None and size > vocab:
                raise ValueError(
                    f"{owner}: `tokenizer` has {size} token ids but `vocab_size` is "
                    f"{vocab}; give vocab_size >= {size}, or tokenizer=None for a "
                    "model of token ids only."
                )
            pairs = [("end_token_id", "eos_id")]
            if self.text_start_is_bos:
                pairs.insert(0, ("start_token_id", "bos_id"))
            for attribute, name in pairs:
                value = getattr(tokenizer, attribute, None) if size is not None else None
                if value is not None and int(value) != getattr(self, name):
                    raise ValueError(
                        f"{owner}: `{name}` must be the tokenizer's {attribute} ({value}), "
                        f"got {getattr(self, name)}."
                    )
        self.tokenizer = tokenizer

    def _tokenizer_config(self) -> dict:
        """``{"tokenizer": its config}`` for ``get_config`` where there is one (the
        vocabulary goes to the ``.keras`` file's assets)."""
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is None:
            return {}
        return {"tokenizer": keras.saving.serialize_keras_object(tokenizer)}

    def _tokenizer_for(self, caller: str) -> Any:
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is None:
            raise TypeError(
                f"{type(self).__name__}.{caller}: `inputs` must be token ids for a model "
                "without a tokenizer, got text; create the model with tokenizer=... (e.g. "
                "'byte', or a keras-hub tokenizer)."
            )
        return tokenizer

    def _pad(self, rows: list[list[int]], caller: str) -> np.ndarray:
        empty = [i for i, row in enumerate(rows) if not row]
        if empty:
            raise ValueError(
                f"{type(self).__name__}.{caller}: every text must give at least one token; "
                f"texts {empty} give none."
            )
        ids = np.full((len(rows), max(map(len, rows))), self.pad_id, "int32")
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
        return ids

    def _special_ids(self) -> set[int]:
        special = {self.pad_id, self.bos_id, self.eos_id}
        special.update(int(i) for i in getattr(self.tokenizer, "special_token_ids", []) or [])
        return special

    def _text(self, ids: np.ndarray) -> str:
        """The text of ``ids`` up to the first end token, special tokens removed."""
        ends = np.flatnonzero(ids == self.eos_id)
        kept = ids[: ends[0]] if ends.size else ids
        special = self._special_ids()
        return self.tokenizer.detokenize([int(i) for i in kept if int(i) not in special])

    def encode_texts(self, texts: list[str], caller: str) -> np.ndarray:
        """Sources as ids: each text's tokens and the end token, right-padded with
        ``pad_id`` (keras-hub's ``T5Preprocessor``)."""
        tokenizer = self._tokenizer_for(caller)
        rows = [tokenizers.ids_of(tokenizer, text) + [self.eos_id] for text in texts]
        return self._pad(rows, caller)

    def decode_texts(self, ids: np.ndarray, inputs: np.ndarray) -> list:
        """The text of each generated row (``(batch, N, time)`` with n-best lists)."""
        if ids.ndim == 3:
            return [[self._text(row) for row in rows] for rows in ids]
        return [self._text(row) for row in ids]
