"""Translation presets in keras-hub's format: fairseq's text pipeline as a keras-hub tokenizer.

A translation preset of ours (a fairseq archive converted by ``hub.load_preset``, or a
folder ``hub.save_preset`` wrote) holds a ConvS2S and its text pipeline,
:class:`~keras_posenc.zoo.translation.TranslationPreprocessor` (Moses tokenisation, BPE,
one dictionary per language). :class:`TranslationTokenizer` is that pipeline as a keras-hub
``Tokenizer`` (it calls the pipeline, which stays the one implementation): ``tokenize``
gives source ids, ``detokenize`` the text of target ids, and ``save_assets`` /
``load_preset_assets`` keep the vocabularies and the BPE codes in keras-hub's preset
folder (``assets/tokenizer/``). With it, a translation preset is a
:class:`~keras_posenc.models.ConvS2SSeq2SeqLM` whose ``generate(texts)`` translates as
the zoo model's ``translate(texts)`` does, given the same search options (``translate``'s
defaults: ``beam_size=5, min_length=1``).

:func:`to_keras_hub_translation_preset` writes one (``models.to_keras_hub_preset`` calls it
for a translation source).

Examples:

    >>> from keras_posenc.models import ConvS2STranslationTokenizer
    >>> tokenizer = ConvS2STranslationTokenizer(
    ...     "en", "fr",
    ...     source_vocabulary=["<pad>", "<s>", "</s>", "<unk>", "hello", ","],
    ...     target_vocabulary=["<pad>", "<s>", "</s>", "<unk>", "bonjour", ","])
    >>> tokenizer.tokenize("hello, world").tolist(), tokenizer.detokenize([4, 5])
    ([4, 5, 3], 'bonjour,')
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import keras
import keras_hub
import numpy as np

from keras_posenc.models._backbone import copy_weights
from keras_posenc.models._text_tokenizers import _strings, vocabulary_token
from keras_posenc.models.seq2seq_lms import (
    ConvS2SBackbone,
    ConvS2SSeq2SeqLM,
    MUSEBackbone,
    MUSESeq2SeqLM,
)
from keras_posenc.zoo.convs2s import ConvS2S
from keras_posenc.zoo.muse import MUSE
from keras_posenc.zoo.translation import (
    BPE_CODES_FILE,
    SOURCE_VOCABULARY_FILE,
    TARGET_VOCABULARY_FILE,
    TranslationPreprocessor,
)

__all__ = [
    "ConvS2STranslationTokenizer",
    "MUSETranslationTokenizer",
    "TranslationTokenizer",
    "to_keras_hub_translation_preset",
]

_register = keras.saving.register_keras_serializable(package="keras_posenc")
# The special tokens keras-hub's preprocessors read, at the pipeline's fixed ids.
_SPECIALS = (("pad_token", "pad_id"), ("start_token", "bos_id"), ("end_token", "eos_id"))


class TranslationTokenizer(keras_hub.tokenizers.Tokenizer):
    """fairseq's translation pipeline (:class:`~keras_posenc.zoo.translation.
    TranslationPreprocessor`) as a keras-hub ``Tokenizer``.

    ``tokenize`` gives a sentence's source ids (Moses in the source language, BPE, the
    source dictionary; unknown tokens as ``<unk>``, no end token: the preprocessor adds
    it); ``detokenize`` the sentence of target ids (up to the end token, without padding
    and start tokens: the target dictionary, the BPE joins removed, Moses in the target
    language). keras-hub's one-vocabulary methods (``get_vocabulary``,
    ``vocabulary_size``, ``token_to_id``, ``id_to_token``) read the target vocabulary:
    the ids a model generates. The special tokens are the pipeline's ids: padding 0,
    start 1, end 2.

    The settings are the config (``tokenizer.json``); the vocabularies and the BPE codes
    are assets, written by ``save_assets`` and read by ``load_preset_assets``, so a
    tokenizer loaded from a preset by keras-hub's ``from_preset`` has them. A family
    subclass sets ``backbone_cls``. Runs eagerly in Python on every backend.

    Args:
        source_lang: the source language's code (``"en"``), for Moses.
        target_lang: the target language's code.
        source_vocabulary: the source tokens in id order, or a file of one token per line;
            None when the assets are loaded later.
        target_vocabulary: the target tokens, likewise.
        bpe_codes: subword-nmt BPE codes (their text or a path), or None.
        bpe: whether the assets hold BPE codes (default: whether ``bpe_codes`` is given;
            a config read back from a preset says it).
        bpe_separator: the pipeline's BPE continuation mark (``"@@"``).
        moses_escape: the pipeline's Moses escaping of special characters.
        aggressive_dash_splits: the pipeline's Moses dash splitting.
        **kwargs: keras-hub ``Tokenizer`` arguments (``name``).

    Raises:
        TypeError, ValueError: what ``TranslationPreprocessor`` refuses.
    """

    def __init__(
        self,
        source_lang: str,
        target_lang: str,
        source_vocabulary: Any = None,
        target_vocabulary: Any = None,
        bpe_codes: Any = None,
        *,
        bpe: bool | None = None,
        bpe_separator: str = "@@",
        moses_escape: bool = True,
        aggressive_dash_splits: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        self.pipeline = TranslationPreprocessor(
            source_lang,
            target_lang,
            source_vocabulary,
            target_vocabulary,
            bpe_codes,
            bpe_separator=bpe_separator,
            moses_escape=moses_escape,
            aggressive_dash_splits=aggressive_dash_splits,
        )
        self.bpe = bpe_codes is not None if bpe is None else bool(bpe)
        self.file_assets = [SOURCE_VOCABULARY_FILE, TARGET_VOCABULARY_FILE]
        if self.bpe:
            self.file_assets.append(BPE_CODES_FILE)
        self._special_token_attrs = [name for name, _ in _SPECIALS]
        self._set_special_tokens()

    @classmethod
    def from_translation_preprocessor(
        cls, preprocessor: TranslationPreprocessor, **kwargs: Any
    ) -> TranslationTokenizer:
        """The tokenizer of a pipeline (its settings, vocabularies and BPE codes).

        Raises:
            TypeError: ``preprocessor`` is not a ``TranslationPreprocessor``.
        """
        if not isinstance(preprocessor, TranslationPreprocessor):
            raise TypeError(
                f"{cls.__name__}.from_translation_preprocessor: `preprocessor` must be a "
                f"TranslationPreprocessor, got {type(preprocessor).__name__}."
            )
        return cls(
            source_vocabulary=preprocessor.source_vocabulary,
            target_vocabulary=preprocessor.target_vocabulary,
            bpe_codes=preprocessor.bpe_codes,
            **preprocessor.get_config(),
            **kwargs,
        )

    def _set_special_tokens(self) -> None:
        """The special tokens' names and ids (ids fixed by the pipeline; names from the
        target vocabulary once it is set)."""
        vocabulary = self.pipeline.target_vocabulary
        for name, id_name in _SPECIALS:
            index = getattr(self.pipeline, id_name)
            setattr(self, name, None if vocabulary is None else vocabulary[index])
            setattr(self, f"{name}_id", index)

    # ------------------------------------------------------------------ keras-hub's API

    def call(self, inputs: Any, *args: Any, training: Any = None, **kwargs: Any) -> Any:
        return self.tokenize(inputs)

    def tokenize(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = _strings(inputs)
        if isinstance(inputs, list):
            return [self.tokenize(text) for text in inputs]
        if not isinstance(inputs, str):
            raise TypeError(
                f"{type(self).__name__}.tokenize: `inputs` must be a string or a list of "
                f"strings, got {type(inputs).__name__}."
            )
        return self.pipeline.encode(inputs)[0, :-1]  # without the end token

    def detokenize(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        ids = inputs if isinstance(inputs, list) else keras.ops.convert_to_numpy(inputs).tolist()
        if ids and isinstance(ids[0], list | tuple | np.ndarray):
            return [self.detokenize(list(row)) for row in ids]
        return self.pipeline.decode(np.asarray(ids, "int64").reshape(1, -1))[0]

    def get_vocabulary(self) -> list[str]:
        return list(self.pipeline._require("target_vocabulary"))

    def vocabulary_size(self) -> int:
        return self.pipeline.target_vocab_size

    def token_to_id(self, token: str) -> int:
        vocabulary = self.get_vocabulary()
        if token not in vocabulary:
            raise ValueError(
                f"{type(self).__name__}.token_to_id: {token!r} is not in the target "
                f"vocabulary of {len(vocabulary)} tokens."
            )
        return vocabulary.index(token)

    def id_to_token(self, id: int) -> str:  # noqa: A002 (keras-hub's name)
        return vocabulary_token(self, id)

    # ------------------------------------------------------------------ assets

    def save_assets(self, dir_path: str) -> None:
        self.pipeline.save_assets(dir_path)

    def load_assets(self, dir_path: str) -> None:
        self.pipeline.load_assets(dir_path)
        self._set_special_tokens()

    # keras-hub's Tokenizer.load_preset_assets fetches each of `file_assets` (a local
    # folder's or a hub repository's) and calls load_assets on their folder.

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), **self.pipeline.get_config(), "bpe": self.bpe}


def _tokenizer(prefix: str, backbone: type) -> type:
    doc = (
        f"{prefix}'s translation pipeline as a keras-hub tokenizer "
        "(:class:`~keras_posenc.models.TranslationTokenizer`)."
    )
    attributes = {"__doc__": doc, "__module__": __name__, "backbone_cls": backbone}
    return _register(type(f"{prefix}TranslationTokenizer", (TranslationTokenizer,), attributes))


ConvS2STranslationTokenizer = _tokenizer("ConvS2S", ConvS2SBackbone)
MUSETranslationTokenizer = _tokenizer("MUSE", MUSEBackbone)

# The zoo's translation models -> their keras-hub task and tokenizer classes.
_TASKS = {
    ConvS2S: (ConvS2SSeq2SeqLM, ConvS2STranslationTokenizer),
    MUSE: (MUSESeq2SeqLM, MUSETranslationTokenizer),
}


def translation_task(model: keras.Model, preprocessor: TranslationPreprocessor) -> Any:
    """The keras-hub task of a zoo translation model and its pipeline: the family's
    ``Seq2SeqLM`` with the model's weights, and a preprocessor around the pipeline's
    :class:`TranslationTokenizer` whose ``decoder_sequence_length`` gives ``generate``
    ``translate``'s default length (``min(200, max_target_length)`` tokens).

    Raises:
        ValueError: a model of a family without a translation task here.
    """
    classes = _TASKS.get(type(model))
    if classes is None:
        raise ValueError(
            f"translation_task: `model` must be one of {[c.__name__ for c in _TASKS]}, got "
            f"{type(model).__name__}."
        )
    task_cls, tokenizer_cls = classes
    config = {k: v for k, v in model.get_config().items() if k != "trainable"}
    backbone = task_cls.backbone_cls(**config)
    copy_weights(model, backbone, f"translation_task({model.name!r})")
    limit = getattr(model, "max_target_length", None)
    length = 200 if limit is None else min(200, limit)
    tokenizer = tokenizer_cls.from_translation_preprocessor(preprocessor)
    return task_cls(
        backbone=backbone,
        preprocessor=task_cls.preprocessor_cls(tokenizer, decoder_sequence_length=length + 1),
    )


def is_translation_preset(preset: Any) -> bool:
    """Whether a ``hub.load_preset`` preset is a translation model with its pipeline."""
    return isinstance(preset.preprocessor, TranslationPreprocessor)


def to_keras_hub_translation_preset(preset: Any, folder: str | os.PathLike) -> str:
    """Writes a translation preset (``hub.load_preset``'s :class:`~keras_posenc.hub.Preset`
    of a translation model) in keras-hub's format: the family's ``Seq2SeqLM``
    (:func:`translation_task`) as ``save_to_preset`` writes it, the pipeline's vocabularies
    and BPE codes under ``assets/tokenizer/``. ``folder`` is replaced if it exists.

    Returns:
        The folder's path.

    Raises:
        ValueError: a preset without a translation pipeline, or of another family.
    """
    if not is_translation_preset(preset):
        raise ValueError(
            "to_keras_hub_translation_preset: `preset` must hold a TranslationPreprocessor, "
            f"got {type(preset.preprocessor).__name__}."
        )
    task = translation_task(preset.model, preset.preprocessor)
    target = os.fspath(folder)
    if os.path.exists(target):
        shutil.rmtree(target)
    task.save_to_preset(target)
    return target
