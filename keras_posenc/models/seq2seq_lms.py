"""keras-hub ``Seq2SeqLM`` classes for the zoo's encoder-decoders: Shaw's Transformer, T5,
ConvS2S and MUSE.

Per family: a ``Backbone`` (:class:`~keras_posenc.models.ZooBackbone`: the zoo network,
logits included; keras_posenc/models/_generating_tasks.py says why), a tokenizer (a
keras-hub ``Tokenizer`` subclass whose ``backbone_cls`` is the family's), a preprocessor and
the task. All are registered under ``keras_posenc>``, so keras-hub's ``from_preset`` rebuilds
a preset that ``save_to_preset`` wrote.

Examples:

    >>> from keras_posenc import models
    >>> task = models.ShawTransformerSeq2SeqLM.from_zoo("shaw_transformer_base", weights="reverse")
    >>> task.generate("1 2 3 4 5")
    '5 4 3 2 1'
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from keras_posenc.models._generating_tasks import (
    TextBackbone,
    ZooSeq2SeqLM,
    ZooSeq2SeqLMPreprocessor,
)
from keras_posenc.models._text_tokenizers import ZooWordTokenizer
from keras_posenc.zoo.convs2s import ConvS2S, build_convs2s
from keras_posenc.zoo.muse import MUSE
from keras_posenc.zoo.relative_transformers import ShawTransformer
from keras_posenc.zoo.t5 import T5

__all__ = [
    "REVERSE_VOCABULARY",
    "ConvS2SBackbone",
    "ConvS2SSeq2SeqLM",
    "ConvS2SSeq2SeqLMPreprocessor",
    "ConvS2STokenizer",
    "MUSEBackbone",
    "MUSESeq2SeqLM",
    "MUSESeq2SeqLMPreprocessor",
    "MUSETokenizer",
    "ShawTransformerBackbone",
    "ShawTransformerSeq2SeqLM",
    "ShawTransformerSeq2SeqLMPreprocessor",
    "ShawTransformerTokenizer",
    "ZooT5Backbone",
    "ZooT5Seq2SeqLM",
    "ZooT5Seq2SeqLMPreprocessor",
    "ZooT5Tokenizer",
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


def _family(prefix: str, builder: Any, family: str, zoo_builders: tuple = (), **extra: Any) -> type:
    """The family's backbone class (registered)."""
    backbone = type(
        f"{prefix}Backbone",
        (TextBackbone,),
        {
            "__doc__": f"The zoo's {prefix} as a keras-hub ``Backbone``: "
            '``{"encoder_token_ids", "decoder_token_ids"}`` -> logits '
            "(:class:`~keras_posenc.models.ZooBackbone`).",
            "__module__": __name__,
            "family": family,
            "builder": staticmethod(builder),
            "zoo_builders": zoo_builders,
            **extra,
        },
    )
    return _register(backbone)


def _tokenizer(prefix: str, backbone: type, base: type = ZooWordTokenizer) -> type:
    doc = f"A keras-hub tokenizer for {prefix} (:class:`~keras_posenc.models.{base.__name__}`)."
    attributes = {"__doc__": doc, "__module__": __name__, "backbone_cls": backbone}
    return _register(type(f"{prefix}Tokenizer", (base,), attributes))


def _preprocessor(prefix: str, backbone: type, tokenizer: type, **extra: Any) -> type:
    doc = (
        f"{prefix}'s keras-hub preprocessor "
        "(:class:`~keras_posenc.models.ZooSeq2SeqLMPreprocessor`)."
    )
    attributes = {"__doc__": doc, "__module__": __name__, "backbone_cls": backbone,
                  "tokenizer_cls": tokenizer, **extra}  # fmt: skip
    return _register(
        type(f"{prefix}Seq2SeqLMPreprocessor", (ZooSeq2SeqLMPreprocessor,), attributes)
    )


# ------------------------------------------------------------------ Shaw's Transformer

ShawTransformerBackbone = _family("ShawTransformer", ShawTransformer, "shaw_transformer")
ShawTransformerTokenizer = _tokenizer("ShawTransformer", ShawTransformerBackbone)
ShawTransformerSeq2SeqLMPreprocessor = _preprocessor(
    "ShawTransformer", ShawTransformerBackbone, ShawTransformerTokenizer
)


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


# ------------------------------------------------------------------ T5

# "ZooT5": keras-hub has its own T5Backbone, T5Tokenizer, ... (the zoo's T5 converts them).
ZooT5Backbone = _family("ZooT5", T5, "t5", network_arguments={"tokenizer": None})
# T5's SentencePiece tokenizer (keras-hub's class), tied to the zoo's T5 backbone.
ZooT5Tokenizer = _tokenizer("ZooT5", ZooT5Backbone, keras_hub.models.T5Tokenizer)


@_register
class ZooT5Seq2SeqLMPreprocessor(ZooSeq2SeqLMPreprocessor):
    """T5's keras-hub preprocessor (:class:`~keras_posenc.models.ZooSeq2SeqLMPreprocessor`):
    targets start with the padding id (``decoder_start_id`` 0, T5's)."""

    backbone_cls = ZooT5Backbone
    tokenizer_cls = ZooT5Tokenizer

    def __init__(self, tokenizer: Any, *args: Any, decoder_start_id: int = 0, **kwargs: Any):
        super().__init__(tokenizer, *args, decoder_start_id=decoder_start_id, **kwargs)


@_register
class ZooT5Seq2SeqLM(ZooSeq2SeqLM):
    """The zoo's T5 as a keras-hub ``Seq2SeqLM`` (:class:`~keras_posenc.models.ZooSeq2SeqLM`);
    ``from_zoo`` gives it the zoo model's tokenizer (a converted preset's ``T5Tokenizer``)."""

    backbone_cls = ZooT5Backbone
    preprocessor_cls = ZooT5Seq2SeqLMPreprocessor


# ------------------------------------------------------------------ ConvS2S and MUSE

ConvS2SBackbone = _family("ConvS2S", ConvS2S, "convs2s", (build_convs2s,))
ConvS2STokenizer = _tokenizer("ConvS2S", ConvS2SBackbone)
ConvS2SSeq2SeqLMPreprocessor = _preprocessor("ConvS2S", ConvS2SBackbone, ConvS2STokenizer)

MUSEBackbone = _family("MUSE", MUSE, "muse", (MUSE,))
MUSETokenizer = _tokenizer("MUSE", MUSEBackbone)
MUSESeq2SeqLMPreprocessor = _preprocessor("MUSE", MUSEBackbone, MUSETokenizer)


@_register
class ConvS2SSeq2SeqLM(ZooSeq2SeqLM):
    """The zoo's ConvS2S as a keras-hub ``Seq2SeqLM``
    (:class:`~keras_posenc.models.ZooSeq2SeqLM`)."""

    backbone_cls = ConvS2SBackbone
    preprocessor_cls = ConvS2SSeq2SeqLMPreprocessor


@_register
class MUSESeq2SeqLM(ZooSeq2SeqLM):
    """The zoo's MUSE as a keras-hub ``Seq2SeqLM``
    (:class:`~keras_posenc.models.ZooSeq2SeqLM`)."""

    backbone_cls = MUSEBackbone
    preprocessor_cls = MUSESeq2SeqLMPreprocessor
