"""keras-hub ``CausalLM`` classes for the zoo's decoder-only models: DecoderLM, the Music
Transformer and ConvS2S's language model.

Per family: a ``Backbone`` (:class:`~keras_posenc.models.ZooBackbone`: the zoo network,
logits included; keras_posenc/models/_generating_tasks.py says why), a tokenizer (a
keras-hub ``Tokenizer`` subclass whose ``backbone_cls`` is the family's: bytes for
DecoderLM, a word vocabulary for the others), a preprocessor and the task, registered under
``keras_posenc>``.

Examples:

    >>> from keras_posenc.models import DecoderLMCausalLM
    >>> task = DecoderLMCausalLM.from_zoo("decoder_lm_tiny")
    >>> type(task.generate("Hi", max_length=8)).__name__
    'str'
"""

from __future__ import annotations

from typing import Any

import keras

from keras_posenc.models._generating_tasks import (
    TextBackbone,
    ZooCausalLM,
    ZooCausalLMPreprocessor,
)
from keras_posenc.models._text_tokenizers import ZooByteTokenizer, ZooWordTokenizer
from keras_posenc.zoo.convs2s import ConvS2SLanguageModel, build_convs2s_lm
from keras_posenc.zoo.decoder_lm import DecoderLM
from keras_posenc.zoo.relative_transformers import MusicTransformer

__all__ = [
    "ConvS2SLanguageModelBackbone",
    "ConvS2SLanguageModelCausalLM",
    "ConvS2SLanguageModelCausalLMPreprocessor",
    "ConvS2SLanguageModelTokenizer",
    "DecoderLMBackbone",
    "DecoderLMCausalLM",
    "DecoderLMCausalLMPreprocessor",
    "DecoderLMTokenizer",
    "MusicTransformerBackbone",
    "MusicTransformerCausalLM",
    "MusicTransformerCausalLMPreprocessor",
    "MusicTransformerTokenizer",
]

_register = keras.saving.register_keras_serializable(package="keras_posenc")


def _family(prefix: str, builder: Any, family: str, tokenizer_base: type, **extra: Any) -> tuple:
    """The family's backbone, tokenizer, preprocessor and task classes (registered)."""
    where = {"__module__": __name__}
    backbone = _register(type(f"{prefix}Backbone", (TextBackbone,), {
        **where, "family": family, "builder": staticmethod(builder), **extra,
        "__doc__": f"The zoo's {prefix} as a keras-hub ``Backbone``: ``token_ids`` -> logits "
        "(:class:`~keras_posenc.models.ZooBackbone`).",
    }))  # fmt: skip
    tokenizer = _register(type(f"{prefix}Tokenizer", (tokenizer_base,), {
        **where, "backbone_cls": backbone,
        "__doc__": f"{prefix}'s keras-hub tokenizer "
        f"(:class:`~keras_posenc.models.{tokenizer_base.__name__}`).",
    }))  # fmt: skip
    preprocessor = _register(type(f"{prefix}CausalLMPreprocessor", (ZooCausalLMPreprocessor,), {
        **where, "backbone_cls": backbone, "tokenizer_cls": tokenizer,
        "__doc__": f"{prefix}'s keras-hub preprocessor "
        "(:class:`~keras_posenc.models.ZooCausalLMPreprocessor`).",
    }))  # fmt: skip
    task = _register(type(f"{prefix}CausalLM", (ZooCausalLM,), {
        **where, "backbone_cls": backbone, "preprocessor_cls": preprocessor,
        "__doc__": f"The zoo's {prefix} as a keras-hub ``CausalLM`` "
        "(:class:`~keras_posenc.models.ZooCausalLM`).",
    }))  # fmt: skip
    return backbone, tokenizer, preprocessor, task


# DecoderLM's tokenizer belongs to the preprocessor, not to the backbone.
DecoderLMBackbone, DecoderLMTokenizer, DecoderLMCausalLMPreprocessor, DecoderLMCausalLM = (
    _family("DecoderLM", DecoderLM, "decoder_lm", ZooByteTokenizer,
            network_arguments={"tokenizer": None})
)  # fmt: skip
(
    MusicTransformerBackbone,
    MusicTransformerTokenizer,
    MusicTransformerCausalLMPreprocessor,
    MusicTransformerCausalLM,
) = _family("MusicTransformer", MusicTransformer, "music_transformer", ZooWordTokenizer)
(
    ConvS2SLanguageModelBackbone,
    ConvS2SLanguageModelTokenizer,
    ConvS2SLanguageModelCausalLMPreprocessor,
    ConvS2SLanguageModelCausalLM,
) = _family(
    "ConvS2SLanguageModel",
    ConvS2SLanguageModel,
    "convs2s",
    ZooWordTokenizer,
    zoo_builders=(build_convs2s_lm,),
)
