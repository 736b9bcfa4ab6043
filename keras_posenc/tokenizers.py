"""Text in and out of the zoo's language models: keras-hub's tokenizers, and a byte-level one.

A zoo model that generates text holds a tokenizer: a ``keras_hub`` tokenizer layer (what
keras-hub's presets ship: SentencePiece for Llama, Mistral and Gemma, byte-pair for Llama 3
and Qwen), or `ByteTokenizer` for models trained here from scratch. The library uses
keras-hub's tokenizers rather than wrapping ``sentencepiece`` or ``tokenizers`` again: a
converted preset then tokenizes exactly as keras-hub's ``CausalLM`` does (the same class
from the same preset folder, its special tokens included), and in keras-hub 0.32 an eager
call runs in Python (``sentencepiece`` or Hugging Face's ``tokenizers``), on every backend,
without TensorFlow ops (keras_hub/src/layers/preprocessing/preprocessing_layer.py,
``_use_tf_workflow``). A tokenizer is a layer the model holds as an attribute, so ``.keras``
files keep it: its config in the model's config, its vocabulary in the file's assets.

`get` resolves a model's ``tokenizer=`` argument; `next_token_windows` cuts a text into
training windows for ``fit``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.layers._checks import check_int

__all__ = ["ByteTokenizer", "get", "next_token_windows"]

_SPECIALS = ("<pad>", "<s>", "</s>")


@keras.saving.register_keras_serializable(package="keras_posenc")
class ByteTokenizer(keras.layers.Layer):
    """UTF-8 bytes as token ids, after three special tokens: the tiny models' tokenizer.

    Ids: ``0`` is ``<pad>``, ``1`` ``<s>`` (start), ``2`` ``</s>`` (end), and byte ``b`` is
    ``b + 3`` (its token is ``"<0xNN>"``): 259 ids, which cover any text with no unknown
    token. These are the zoo language models' default special ids (``pad_id``, ``bos_id``,
    ``eos_id``). Unlike keras-hub's ``ByteTokenizer`` (bytes as ids 0-255, no special
    tokens), a model can pad, start and stop with it.

    It tokenizes Python strings eagerly (the zoo's ``generate`` and `next_token_windows` do);
    inside a ``tf.data`` pipeline, tokenize first. It has keras-hub's tokenizer interface
    (``tokenize``, ``detokenize``, ``vocabulary_size``, ``id_to_token``, ``token_to_id``, the
    special ids) without being one: a plain Keras layer, so a byte-level model never imports
    keras-hub, and with it TensorFlow, on JAX or PyTorch.

    Examples:

        >>> tokenizer = ByteTokenizer()
        >>> tokenizer.tokenize("Hi!").tolist()
        [75, 108, 36]
        >>> tokenizer.detokenize([1, 75, 108, 36, 2])
        'Hi!'
        >>> tokenizer.vocabulary_size(), tokenizer.end_token_id
        (259, 2)
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        self._vocabulary = [*_SPECIALS, *(f"<0x{b:02X}>" for b in range(256))]
        self._ids = {token: i for i, token in enumerate(self._vocabulary)}
        self.pad_token, self.start_token, self.end_token = _SPECIALS
        self.pad_token_id, self.start_token_id, self.end_token_id = 0, 1, 2
        self.built = True

    @property
    def special_token_ids(self) -> list[int]:
        """The ids of ``<pad>``, ``<s>`` and ``</s>``."""
        return [0, 1, 2]

    def get_vocabulary(self) -> list[str]:
        return list(self._vocabulary)

    def vocabulary_size(self) -> int:
        return len(self._vocabulary)

    def id_to_token(self, id: int) -> str:  # noqa: A002 (keras-hub's name)
        index = check_int("ByteTokenizer.id_to_token", "id", id, 0)
        if index >= len(self._vocabulary):
            raise ValueError(
                f"ByteTokenizer.id_to_token: `id` must be below {len(self._vocabulary)}, got {id}."
            )
        return self._vocabulary[index]

    def token_to_id(self, token: str) -> int:
        if token not in self._ids:
            raise ValueError(
                f"ByteTokenizer.token_to_id: `token` must be one of {list(_SPECIALS)} or "
                f"'<0x00>' ... '<0xFF>', got {token!r}."
            )
        return self._ids[token]

    def tokenize(self, inputs: Any) -> Any:
        """A string's ids (an int32 array), or a list of them for a list of strings."""
        if isinstance(inputs, str | bytes):
            data = inputs.encode("utf-8") if isinstance(inputs, str) else inputs
            return np.frombuffer(data, np.uint8).astype("int32") + len(_SPECIALS)
        if isinstance(inputs, Sequence) and all(isinstance(s, str | bytes) for s in inputs):
            return [self.tokenize(text) for text in inputs]
        raise TypeError(
            "ByteTokenizer.tokenize: `inputs` must be a Python string or a list of strings "
            f"(it runs eagerly; tokenize before a tf.data pipeline), got {type(inputs).__name__}."
        )

    def detokenize(self, inputs: Any) -> Any:
        """The text of a sequence of ids (special ids dropped, invalid UTF-8 replaced), or
        a list of texts for a batch of sequences."""
        ids = keras.ops.convert_to_numpy(inputs) if not isinstance(inputs, list) else inputs
        if isinstance(ids, list) and ids and not np.isscalar(ids[0]):
            return [self.detokenize(row) for row in ids]
        ids = np.asarray(ids, "int64")
        if ids.ndim == 2:
            return [self.detokenize(row) for row in ids]
        if ids.size and (ids.min() < 0 or ids.max() >= len(self._vocabulary)):
            raise ValueError(
                f"ByteTokenizer.detokenize: ids must be in [0, {len(self._vocabulary)}), "
                f"got values from {ids.min()} to {ids.max()}."
            )
        data = (ids[ids >= len(_SPECIALS)] - len(_SPECIALS)).astype(np.uint8).tobytes()
        return data.decode("utf-8", errors="replace")

    def call(self, inputs: Any, *args: Any, training: Any = None, **kwargs: Any) -> Any:
        return self.tokenize(inputs)

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype_policy.name}


def get(tokenizer: Any, owner: str, argument: str = "tokenizer") -> Any:
    """A tokenizer from a model's ``tokenizer=`` argument.

    ``None`` (no text in or out), ``"byte"`` (`ByteTokenizer`), a ``keras_hub`` tokenizer
    (e.g. ``keras_hub.models.Tokenizer.from_preset(folder)``), or a tokenizer's serialised
    config (what a model's ``get_config`` writes).

    Raises:
        TypeError: for anything else, naming ``owner`` and ``argument``.

    Examples:

        >>> type(get("byte", "DecoderLM")).__name__
        'ByteTokenizer'
        >>> get(None, "DecoderLM") is None
        True
    """
    if tokenizer is None or _is_tokenizer(tokenizer):
        return tokenizer
    if isinstance(tokenizer, str) and tokenizer == "byte":
        return ByteTokenizer()
    if isinstance(tokenizer, dict) and "class_name" in tokenizer:
        if tokenizer.get("registered_name") != "keras_posenc>ByteTokenizer":
            from keras_posenc._quiet import quiet_import

            quiet_import("keras_hub")  # registers keras-hub's tokenizer classes
        restored = keras.saving.deserialize_keras_object(tokenizer)
        if _is_tokenizer(restored):
            return restored
    raise TypeError(
        f"{owner}: `{argument}` must be None, 'byte', a keras_hub tokenizer (e.g. "
        "keras_hub.models.Tokenizer.from_preset(...)) or a tokenizer's config, got "
        f"{tokenizer!r:.80}."
    )


def _is_tokenizer(obj: Any) -> bool:
    """A `ByteTokenizer` or a keras-hub tokenizer (keras-hub is not imported to ask: an
    object of its class means it was imported already)."""
    if isinstance(obj, ByteTokenizer):
        return True
    keras_hub = sys.modules.get("keras_hub")
    return keras_hub is not None and isinstance(obj, keras_hub.tokenizers.Tokenizer)


def ids_of(tokenizer: Any, text: str) -> list[int]:
    """The token ids of one string, as a list of Python ints."""
    return [int(i) for i in np.asarray(keras.ops.convert_to_numpy(tokenizer.tokenize(text)))]


def next_token_windows(
    tokenizer: Any, text: str, sequence_length: int, stride: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(inputs, targets)`` for training a language model on ``text`` with ``fit``.

    The text is tokenized once (after the tokenizer's start token, where it has one) and
    cut into windows of ``sequence_length + 1`` ids every ``stride`` ids (default
    ``sequence_length``: no overlap); ``inputs`` are each window's first ``sequence_length``
    ids and ``targets`` the next token at each position (``model.fit(inputs, targets)``
    with a sparse cross-entropy on logits).

    Raises:
        ValueError: if the text has fewer than ``sequence_length + 1`` tokens, or for a
            ``sequence_length`` or ``stride`` below 1.
        TypeError: if ``text`` is not a string.

    Examples:

        >>> inputs, targets = next_token_windows(ByteTokenizer(), "abcdefghij", 4)
        >>> inputs.tolist(), targets[0].tolist()
        ([[1, 100, 101, 102], [103, 104, 105, 106]], [100, 101, 102, 103])
    """
    who = "next_token_windows"
    length = check_int(who, "sequence_length", sequence_length, 1)
    step = length if stride is None else check_int(who, "stride", stride, 1)
    if not isinstance(text, str):
        raise TypeError(f"{who}: `text` must be a string, got {type(text).__name__}.")
    ids = text_ids(tokenizer, text)
    if ids.size < length + 1:
        raise ValueError(
            f"{who}: `text` must give at least sequence_length + 1 = {length + 1} tokens, "
            f"got {ids.size}."
        )
    rows = windows(ids, length + 1, step)
    return rows[:, :-1], rows[:, 1:]


def text_ids(tokenizer: Any, text: str) -> np.ndarray:
    """The ids of ``text`` after the tokenizer's start token (where it has one), int32:
    the token stream that `next_token_windows` and the length evaluation
    (keras_posenc/experiments/length_evaluation/measure.py) cut into windows.

    Examples:

        >>> text_ids(ByteTokenizer(), "ab").tolist()
        [1, 100, 101]
    """
    start = getattr(tokenizer, "start_token_id", None)
    return np.asarray(([] if start is None else [start]) + ids_of(tokenizer, text), "int32")


def windows(ids: np.ndarray, width: int, stride: int) -> np.ndarray:
    """The rows of ``width`` consecutive ``ids`` starting every ``stride`` ids, as long as a
    whole row fits (``ids`` must hold at least ``width``): ``(rows, width)``.

    Examples:

        >>> windows(np.arange(7), 3, 2).tolist()
        [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    """
    starts = np.arange(0, ids.size - width + 1, stride)
    return ids[starts[:, None] + np.arange(width)]


def as_texts(inputs: Any) -> list[str] | None:
    """``inputs`` as a list of strings when it is a string or a non-empty list of them
    (what ``generate`` treats as text), else None (token ids)."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, list | tuple) and inputs and all(isinstance(t, str) for t in inputs):
        return list(inputs)
    return None
