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
from keras_posenc.layers._checks import check_int

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

    def encode_texts(
        self, texts: list[str], caller: str, max_length: int | None = None
    ) -> np.ndarray:
        """Sources as ids: each text's tokens and the end token, right-padded with
        ``pad_id`` (keras-hub's ``T5Preprocessor``). A source longer than the model's
        ``max_source_length`` raises a ValueError naming the text (`_check_lengths`);
        ``max_length`` (the target's) does not concern sources."""
        tokenizer = self._tokenizer_for(caller)
        rows = [tokenizers.ids_of(tokenizer, text) + [self.eos_id] for text in texts]
        limit = getattr(self, "max_source_length", None)
        self._check_lengths(texts, rows, caller, "with the end token", limit, "max_source_length")
        return self._pad(rows, caller)

    def _check_lengths(
        self,
        texts: list[str],
        rows: list[list[int]],
        caller: str,
        counted: str,
        limit: int | None,
        limit_name: str,
        room: bool = False,
    ) -> None:
        """Raises a ValueError for the first text whose ``rows`` entry has more than
        ``limit`` tokens (``room``: ``limit`` or more, a prompt that leaves no token to
        generate), naming the method, the text's index and start, its token count and the
        limit: a long text would otherwise fail later as a shape or position error, far from
        the text that caused it."""
        if limit is None:
            return
        too_long = [i for i, row in enumerate(rows) if len(row) >= limit + (not room)]
        if not too_long:
            return
        first = too_long[0]
        start = texts[first] if len(texts[first]) <= 40 else texts[first][:40] + "..."
        others = f" (and {len(too_long) - 1} more)" if len(too_long) > 1 else ""
        if room:
            longest = max(len(rows[i]) for i in too_long)
            fix = (
                f"which leaves no room to generate within {limit_name} = {limit}; give "
                f"{limit_name} > {longest}"
            )
        else:
            fix = f"more than the model's {limit_name} = {limit}; shorten it"
        raise ValueError(
            f"{type(self).__name__}.{caller}: text {first} ({start!r}) gives "
            f"{len(rows[first])} tokens ({counted}), {fix}{others}."
        )

    def preprocess_text_pairs(
        self,
        x: dict,
        encoder_sequence_length: int | None = None,
        decoder_sequence_length: int | None = None,
    ) -> tuple[dict, np.ndarray, np.ndarray]:
        """``(x, y, sample_weight)`` for ``fit`` from ``{"encoder_text", "decoder_text"}``.

        An encoder-decoder's training pairs packed as keras-hub's
        ``T5Seq2SeqLMPreprocessor`` packs them: ``x["encoder_token_ids"]`` each source's
        tokens and the end token, right-padded; ``x["decoder_token_ids"]`` the decoder
        start id (``bos_id``; T5's is the padding id), then the target's tokens and the
        end token, without the last position; ``y`` the same sequence one step on (the
        next token at each position); the padding masks (``encoder_padding_mask``,
        ``decoder_padding_mask``, int32 0/1) where the model takes them as inputs (T5; the
        others compute them from the ids); and ``sample_weight`` (float32: the mask of
        ``y``'s real tokens), so that the loss skips the padding.

        Without a sequence length, each side is padded to its longest row, and a row longer
        than the model's ``max_source_length`` / ``max_target_length`` raises a ValueError
        naming the text. With one, every row has that length: longer ones are cut
        (the end token kept) as keras-hub's packer cuts them.

        Args:
            x: a dict of ``"encoder_text"`` and ``"decoder_text"``, each a string or a list
                of strings of the same length.
            encoder_sequence_length: the encoder inputs' length, or None.
            decoder_sequence_length: the decoder inputs' (and labels') length, or None.

        Returns:
            ``(x, y, sample_weight)``: pass them as ``fit(x, y, sample_weight=...)``.

        Raises:
            TypeError: for a model without a tokenizer, a language model (its text is one
                sequence: `keras_posenc.tokenizers.next_token_windows`), or ``x`` not such
                a dict.
            ValueError: for lists of different lengths, an empty text, a sequence length
                below 2, or a text too long for the model (as above).

        Examples:

            >>> from keras_posenc.zoo.t5 import T5
            >>> model = T5(259, hidden_dim=8, intermediate_dim=16, num_heads=2, num_layers=1,
            ...            eos_id=2, tokenizer="byte")
            >>> x, y, weight = model.preprocess_text_pairs(
            ...     {"encoder_text": ["hi", "hello"], "decoder_text": ["ok", "yes"]})
            >>> x["encoder_token_ids"].tolist()  # bytes + 3, then the end token 2
            [[107, 108, 2, 0, 0, 0], [107, 104, 111, 111, 114, 2]]
            >>> x["decoder_token_ids"].tolist(), y.tolist()
            ([[0, 114, 110, 2], [0, 124, 104, 118]], [[114, 110, 2, 0], [124, 104, 118, 2]])
            >>> weight.tolist()
            [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
        """
        caller = "preprocess_text_pairs"
        owner = f"{type(self).__name__}.{caller}"
        if getattr(self, "is_decoder_only", False):
            raise TypeError(
                f"{owner}: pairs are for encoder-decoders; a language model trains on one "
                "text (keras_posenc.tokenizers.next_token_windows)."
            )
        tokenizer = self._tokenizer_for(caller)
        sources, targets = _text_pair_lists(owner, x)
        if encoder_sequence_length is not None:
            encoder_sequence_length = check_int(
                owner, "encoder_sequence_length", encoder_sequence_length, 2
            )
        if decoder_sequence_length is not None:
            decoder_sequence_length = check_int(
                owner, "decoder_sequence_length", decoder_sequence_length, 2
            )
        encoder = [tokenizers.ids_of(tokenizer, text) + [self.eos_id] for text in sources]
        # The target's ids after the decoder start: the labels, one longer than the inputs.
        labels = [tokenizers.ids_of(tokenizer, text) + [self.eos_id] for text in targets]
        for name, rows in (("encoder_text", encoder), ("decoder_text", labels)):
            empty = [i for i, row in enumerate(rows) if len(row) == 1]
            if empty:
                raise ValueError(
                    f"{owner}: every text must give a token; {name} {empty} give none."
                )
        checks = (
            (encoder_sequence_length, "encoder_text", sources, encoder, "max_source_length"),
            (decoder_sequence_length, "decoder_text", targets, labels, "max_target_length"),
        )
        for given, name, texts, rows, limit_name in checks:
            if given is None:  # padded to the longest: the model's limit must hold it
                limit = getattr(self, limit_name, None)
                where = f"{caller} ({name})"
                self._check_lengths(texts, rows, where, "with the end token", limit, limit_name)
        pad, end = self.pad_id, self.eos_id
        encoder_ids, encoder_mask = _packed(encoder, encoder_sequence_length, pad, end)
        length = None if decoder_sequence_length is None else decoder_sequence_length + 1
        decoder = [[self.bos_id, *row] for row in labels]
        decoder_ids, decoder_mask = _packed(decoder, length, pad, end)
        inputs = {
            "encoder_token_ids": encoder_ids,
            "encoder_padding_mask": encoder_mask,
            "decoder_token_ids": decoder_ids[:, :-1],
            "decoder_padding_mask": decoder_mask[:, :-1],
        }
        # Only the inputs the model takes: given keys it has no input for, Keras matched
        # the dict to a two-input model in the wrong order (Shaw's evaluate gave a loss of
        # 7.4 for 0.001).
        taken = self.input if isinstance(self, keras.Model) else None  # (or a preprocessor)
        if isinstance(taken, dict):
            inputs = {name: array for name, array in inputs.items() if name in taken}
        return inputs, decoder_ids[:, 1:], decoder_mask[:, 1:].astype("float32")

    def decode_texts(self, ids: np.ndarray, inputs: np.ndarray) -> list:
        """The text of each generated row (``(batch, N, time)`` with n-best lists)."""
        if ids.ndim == 3:
            return [[self._text(row) for row in rows] for rows in ids]
        return [self._text(row) for row in ids]


def _text_pair_lists(owner: str, x: Any) -> tuple[list[str], list[str]]:
    """``x``'s ``encoder_text`` and ``decoder_text`` as lists of strings of one length."""
    names = ("encoder_text", "decoder_text")
    if not isinstance(x, dict) or any(name not in x for name in names):
        given = sorted(x) if isinstance(x, dict) else type(x).__name__
        raise TypeError(f"{owner}: `x` must be a dict with {names[0]} and {names[1]}, got {given}.")
    sides = []
    for name in names:
        texts = tokenizers.as_texts(x[name])
        if texts is None:
            raise TypeError(
                f"{owner}: `x[{name!r}]` must be a string or a non-empty list of strings, got "
                f"{type(x[name]).__name__}."
            )
        sides.append(texts)
    if len(sides[0]) != len(sides[1]):
        raise ValueError(
            f"{owner}: `x` must hold as many encoder_text as decoder_text, got "
            f"{len(sides[0])} and {len(sides[1])}."
        )
    return sides[0], sides[1]


def _packed(rows: list[list[int]], length: int | None, pad: int, end: int) -> tuple:
    """``rows`` right-padded with ``pad`` to ``length`` (None: the longest), with their
    padding masks (int32 0/1); a longer row is cut to ``length`` with its last id ``end``,
    as keras-hub's ``StartEndPacker`` cuts it (its tokens first, then the end token)."""
    length = max(map(len, rows)) if length is None else length
    ids = np.full((len(rows), length), pad, "int32")
    mask = np.zeros((len(rows), length), "int32")
    for i, row in enumerate(rows):
        if len(row) > length:
            row = [*row[: length - 1], end]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask
