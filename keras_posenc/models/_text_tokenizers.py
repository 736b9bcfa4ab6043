"""keras-hub tokenizers for the zoo's generating models: bytes, and a word vocabulary.

keras-hub's ``Tokenizer.from_preset`` and the tasks' preprocessors need a tokenizer that is
a ``keras_hub.tokenizers.Tokenizer`` (its ``tokenizer.json`` names the registered class, its
``backbone_cls`` ties it to a family). Two bases serve the zoo's text families, each
subclassed per family in keras_posenc/models/seq2seq_lms.py and causal_lms.py:

- :class:`ZooByteTokenizer`: the byte-level vocabulary of `keras_posenc.tokenizers.ByteTokenizer`
  (``<pad>``, ``<s>``, ``</s>``, then the 256 bytes), whose tokenizing it calls: the
  tokenizer of the zoo's tiny language models, now in keras-hub's class tree;
- :class:`ZooWordTokenizer`: whitespace-separated words of a given vocabulary, for models
  trained on synthetic word tasks (the shipped ``shaw_transformer_base`` ``reverse``
  preset's 37 words).

Both run eagerly in Python on every backend, as keras-hub 0.32's tokenizers do outside a
``tf.data`` pipeline: their ``call`` takes Python strings (keras-hub's ``call`` converts
its inputs to TensorFlow tensors first, which these tokenizers do not read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import keras_hub
import numpy as np

from keras_posenc import tokenizers

__all__ = ["ZooByteTokenizer", "ZooWordTokenizer"]

_SPECIALS = (("<pad>", "pad_token"), ("<s>", "start_token"), ("</s>", "end_token"))


def _strings(inputs: Any) -> Any:
    """Python strings from what a preprocessor hands a tokenizer (a string, a list of
    them, or a numpy / TensorFlow array of bytes)."""
    if hasattr(inputs, "numpy"):
        inputs = inputs.numpy()
    if isinstance(inputs, np.ndarray):
        inputs = inputs.tolist()
    if isinstance(inputs, bytes):
        return inputs.decode("utf-8")
    if isinstance(inputs, list | tuple):
        return [_strings(item) for item in inputs]
    return inputs


def vocabulary_token(tokenizer: Any, id: Any) -> str:  # noqa: A002 (keras-hub's name)
    """``tokenizer.id_to_token(id)`` read from its ``get_vocabulary()``, the id checked."""
    vocabulary = tokenizer.get_vocabulary()
    if not isinstance(id, int | np.integer) or not 0 <= id < len(vocabulary):
        raise ValueError(
            f"{type(tokenizer).__name__}.id_to_token: `id` must be an int in "
            f"[0, {len(vocabulary)}), got {id!r}."
        )
    return vocabulary[int(id)]


class _ZooTokenizer(keras_hub.tokenizers.Tokenizer):
    """What both bases share: Python-string calls, and no asset files."""

    def __init__(self, vocabulary: list[str] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        self._set_vocabulary(vocabulary)
        for token, name in _SPECIALS:
            self._add_special_token(token, name)
        self.file_assets = []

    def _set_vocabulary(self, vocabulary: list[str] | None) -> None:
        """Sets what ``token_to_id`` reads (after ``Layer.__init__``: on PyTorch a layer
        takes no attributes before it)."""

    def call(self, inputs: Any, *args: Any, training: Any = None, **kwargs: Any) -> Any:
        return self.tokenize(inputs)

    # The vocabulary is in the config (bytes need none): no asset file to write or read.
    def save_assets(self, dir_path: str) -> None:
        return None

    def load_assets(self, dir_path: str) -> None:
        return None

    def load_preset_assets(self, preset: str) -> None:
        return None

    def id_to_token(self, id: int) -> str:  # noqa: A002 (keras-hub's name)
        return vocabulary_token(self, id)


class ZooByteTokenizer(_ZooTokenizer):
    """UTF-8 bytes after ``<pad>``, ``<s>`` and ``</s>``, as a keras-hub ``Tokenizer``.

    The ids of `keras_posenc.tokenizers.ByteTokenizer` (byte ``b`` is ``b + 3``; 259 ids),
    whose ``tokenize`` and ``detokenize`` it calls, in keras-hub's tokenizer class tree, so
    that a keras-hub preprocessor packs with it and ``save_to_preset`` saves it. A family
    subclass sets ``backbone_cls``.

    Examples:

        >>> from keras_posenc.models import DecoderLMTokenizer
        >>> tokenizer = DecoderLMTokenizer()
        >>> tokenizer("Hi").tolist(), tokenizer.detokenize([[1, 75, 108, 2]])
        ([75, 108], ['Hi'])
    """

    def _set_vocabulary(self, vocabulary: list[str] | None) -> None:
        self._bytes = tokenizers.ByteTokenizer(name="bytes")

    def get_vocabulary(self) -> list[str]:
        return self._bytes.get_vocabulary()

    def vocabulary_size(self) -> int:
        return self._bytes.vocabulary_size()

    def token_to_id(self, token: str) -> int:
        return self._bytes.token_to_id(token)

    def tokenize(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return self._bytes.tokenize(_strings(inputs))

    def detokenize(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        return self._bytes.detokenize(inputs)


class ZooWordTokenizer(_ZooTokenizer):
    """Whitespace-separated words of a vocabulary, as a keras-hub ``Tokenizer``.

    Token ``i`` is ``vocabulary[i]``; a text is split on whitespace and each word looked up
    (no unknown token: a word outside the vocabulary raises a ValueError naming it);
    ``detokenize`` joins words with one space. The vocabulary holds ``<pad>``, ``<s>`` and
    ``</s>`` (the special tokens; the zoo's default ids are 0, 1 and 2). A family subclass
    sets ``backbone_cls``.

    Args:
        vocabulary: the tokens, a list of distinct strings without whitespace.
        **kwargs: keras-hub ``Tokenizer`` arguments (``name``).

    Raises:
        TypeError, ValueError: a vocabulary that is not such a list, or lacks a special
            token.

    Examples:

        >>> from keras_posenc.models import ShawTransformerTokenizer
        >>> tokenizer = ShawTransformerTokenizer(["<pad>", "<s>", "</s>", "a", "b"])
        >>> tokenizer("b a").tolist(), tokenizer.detokenize([[3, 4, 2]])
        ([4, 3], ['a b </s>'])
    """

    def __init__(self, vocabulary: Sequence[str], **kwargs: Any) -> None:
        who = type(self).__name__
        if isinstance(vocabulary, str) or not all(isinstance(t, str) for t in vocabulary):
            raise TypeError(
                f"{who}: `vocabulary` must be a list of strings, got {vocabulary!r:.80}."
            )
        words = list(vocabulary)
        bad = [t for t in words if not t or t.split() != [t]]
        if bad or len(set(words)) != len(words):
            raise ValueError(
                f"{who}: `vocabulary` must hold distinct words without whitespace, got "
                f"{bad[:3] if bad else 'repeated words'}."
            )
        missing = [token for token, _ in _SPECIALS if token not in words]
        if missing:
            raise ValueError(f"{who}: `vocabulary` must hold the special tokens {missing}.")
        super().__init__(words, **kwargs)

    def _set_vocabulary(self, vocabulary: list[str] | None) -> None:
        self.vocabulary = vocabulary
        self._ids = {token: i for i, token in enumerate(vocabulary)}

    def get_vocabulary(self) -> list[str]:
        return list(self.vocabulary)

    def vocabulary_size(self) -> int:
        return len(self.vocabulary)

    def token_to_id(self, token: str) -> int:
        if token not in self._ids:
            raise ValueError(
                f"{type(self).__name__}: the word {token!r} is not in the vocabulary of "
                f"{len(self.vocabulary)} tokens (e.g. {self.vocabulary[3:8]})."
            )
        return self._ids[token]

    def tokenize(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = _strings(inputs)
        if isinstance(inputs, str):
            return np.array([self.token_to_id(w) for w in inputs.split()], "int32")
        if isinstance(inputs, list) and all(isinstance(t, str) for t in inputs):
            return [self.tokenize(text) for text in inputs]
        raise TypeError(
            f"{type(self).__name__}.tokenize: `inputs` must be a string or a list of "
            f"strings, got {type(inputs).__name__}."
        )

    def detokenize(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        ids = inputs if isinstance(inputs, list) else keras.ops.convert_to_numpy(inputs).tolist()
        if ids and isinstance(ids[0], list | np.ndarray):
            return [self.detokenize(list(row)) for row in ids]
        return " ".join(self.id_to_token(int(i)) for i in ids)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocabulary": list(self.vocabulary)}
