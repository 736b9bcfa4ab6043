"""keras-hub's ``Seq2SeqLM`` and ``CausalLM`` for the zoo's generating text families.

Per family: a ``Backbone`` (:class:`~keras_posenc.models.ZooBackbone`: the zoo network,
logits included, see keras_posenc/models/_generating_tasks.py for why), its tokenizer (a
keras-hub ``Tokenizer`` subclass whose ``backbone_cls`` is the family's), preprocessor and
task. All are registered under ``keras_posenc>``, so keras-hub's ``from_preset`` rebuilds a
preset that ``save_to_preset`` wrote.

Examples:

    >>> from keras_posenc import models
    >>> task = models.ShawTransformerSeq2SeqLM.from_zoo("shaw_transformer_base", weights="reverse")
    >>> task.generate("1 2 3 4 5")
    '5 4 3 2 1'
"""

from __future__ import annotations

from typing import Any

import keras

from keras_posenc.models._backbone import ZooBackbone
from keras_posenc.models._generating_tasks import (
    ZooCausalLM,
    ZooCausalLMPreprocessor,
    ZooSeq2SeqLM,
    ZooSeq2SeqLMPreprocessor,
)
from keras_posenc.models._text_tokenizers import ZooByteTokenizer, ZooWordTokenizer
from keras_posenc.zoo.decoder_lm import DecoderLM
from keras_posenc.zoo.relative_transformers import ShawTransformer

__all__ = [
    "DecoderLMBackbone",
    "DecoderLMCausalLM",
    "DecoderLMCausalLMPreprocessor",
    "DecoderLMTokenizer",
    "REVERSE_VOCABULARY",
    "ShawTransformerBackbone",
    "ShawTransformerSeq2SeqLM",
    "ShawTransformerSeq2SeqLMPreprocessor",
    "ShawTransformerTokenizer",
]

_register = keras.saving.register_keras_serializable(package="keras_posenc")

#: The words of the shipped ``shaw_transformer_base`` ``reverse`` preset: its 40 ids are
#: the padding, start and end ids and 37 words (``keras_posenc.experiments.reverse_task``
#: with ``vocab_size=40``), here the letters, the digits and ``"."``.
REVERSE_VOCABULARY = (
    "<pad>",
    "<s>",
    "</s>",
    *"abcdefghijklmnopqrstuvwxyz",
    *"0123456789",
    ".",
)


# ------------------------------------------------------------------ Shaw's Transformer


@_register
class ShawTransformerBackbone(ZooBackbone):
    """Shaw et al.'s relative Transformer (`keras_posenc.zoo.relative_transformers.ShawTransformer`)
    as a keras-hub ``Backbone``: ``{"encoder_token_ids", "decoder_token_ids"}`` -> logits.

    Examples:

        >>> from keras_posenc.models import ShawTransformerBackbone
        >>> backbone = ShawTransformerBackbone.from_zoo(
        ...     "shaw_transformer_base", vocabulary_size=12, hidden_dim=8, intermediate_dim=8,
        ...     num_heads=2, num_layers=1)
        >>> backbone.output.shape
        (None, None, 12)
    """

    family = "shaw_transformer"
    builder = staticmethod(ShawTransformer)


@_register
class ShawTransformerTokenizer(ZooWordTokenizer):
    """Words of a vocabulary (:class:`~keras_posenc.models.ZooWordTokenizer`) for
    Shaw's Transformer; :data:`REVERSE_VOCABULARY` is the shipped ``reverse`` preset's."""

    backbone_cls = ShawTransformerBackbone


@_register
class ShawTransformerSeq2SeqLMPreprocessor(ZooSeq2SeqLMPreprocessor):
    """Shaw's Transformer's keras-hub preprocessor
    (:class:`~keras_posenc.models.ZooSeq2SeqLMPreprocessor`)."""

    backbone_cls = ShawTransformerBackbone
    tokenizer_cls = ShawTransformerTokenizer


@_register
class ShawTransformerSeq2SeqLM(ZooSeq2SeqLM):
    """Shaw's Transformer as a keras-hub ``Seq2SeqLM`` (:class:`~keras_posenc.models.ZooSeq2SeqLM`).

    ``from_zoo("shaw_transformer_base", weights="reverse")`` is the shipped model that
    reverses sequences of distinct words, with :data:`REVERSE_VOCABULARY` as its tokenizer.

    Examples:

        >>> from keras_posenc.models import ShawTransformerSeq2SeqLM
        >>> task = ShawTransformerSeq2SeqLM.from_zoo("shaw_transformer_base", weights="reverse")
        >>> task.generate(["a b c", "x y z . 7"])
        ['c b a', '7 . z y x']
    """

    backbone_cls = ShawTransformerBackbone
    preprocessor_cls = ShawTransformerSeq2SeqLMPreprocessor

    @classmethod
    def zoo_tokenizer(cls, name: str, weights: Any, model: Any) -> Any:
        """The ``reverse`` preset's words (:data:`REVERSE_VOCABULARY`), else None."""
        if weights == "reverse":
            return ShawTransformerTokenizer(list(REVERSE_VOCABULARY))
        return super().zoo_tokenizer(name, weights, model)


# ------------------------------------------------------------------ DecoderLM


@_register
class DecoderLMBackbone(ZooBackbone):
    """The zoo's decoder-only language model (`keras_posenc.zoo.decoder_lm.DecoderLM`) as a
    keras-hub ``Backbone``: ``token_ids`` -> logits. Its tokenizer belongs to the
    preprocessor (:class:`DecoderLMTokenizer`), not to the backbone.

    Examples:

        >>> from keras_posenc.models import DecoderLMBackbone
        >>> DecoderLMBackbone.from_zoo("decoder_lm_tiny").output.shape
        (None, None, 259)
    """

    family = "decoder_lm"
    builder = staticmethod(DecoderLM)
    network_arguments = {"tokenizer": None}


@_register
class DecoderLMTokenizer(ZooByteTokenizer):
    """The byte-level tokenizer of the zoo's DecoderLMs
    (:class:`~keras_posenc.models.ZooByteTokenizer`)."""

    backbone_cls = DecoderLMBackbone


@_register
class DecoderLMCausalLMPreprocessor(ZooCausalLMPreprocessor):
    """DecoderLM's keras-hub preprocessor
    (:class:`~keras_posenc.models.ZooCausalLMPreprocessor`)."""

    backbone_cls = DecoderLMBackbone
    tokenizer_cls = DecoderLMTokenizer


@_register
class DecoderLMCausalLM(ZooCausalLM):
    """The zoo's DecoderLM as a keras-hub ``CausalLM`` (:class:`~keras_posenc.models.ZooCausalLM`).

    Examples:

        >>> from keras_posenc.models import DecoderLMCausalLM
        >>> task = DecoderLMCausalLM.from_zoo("decoder_lm_tiny")
        >>> type(task.generate("Hi", max_length=8)).__name__
        'str'
    """

    backbone_cls = DecoderLMBackbone
    preprocessor_cls = DecoderLMCausalLMPreprocessor
