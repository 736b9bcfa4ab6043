"""The zoo's text encoders as keras-hub masked language models: DeBERTa v3 and RoFormer v2.

keras-hub's ``DebertaV3MaskedLM`` and ``RoformerV2MaskedLM`` (their heads, with the output
projection tied to the token embedding) and their preprocessors, over our backbones
(keras_posenc/models/encoders.py): a backbone's ``token_embedding`` is the zoo encoder's
embedding seen as keras-hub's reversible one, so the head reads the same matrix.

Examples:

    >>> from keras_posenc import models
    >>> models.RoformerV2MaskedLM.backbone_cls is models.RoformerV2Backbone
    True
"""

from __future__ import annotations

from typing import Any

import keras
import keras_hub

from keras_posenc.models.encoders import (
    DebertaV3Backbone,
    DebertaV3Tokenizer,
    RoformerV2Backbone,
    RoformerV2Tokenizer,
    check_padding_id,
)

__all__ = [
    "DebertaV3MaskedLM",
    "DebertaV3MaskedLMPreprocessor",
    "RoformerV2MaskedLM",
    "RoformerV2MaskedLMPreprocessor",
]


class _MaskedLMFromZoo:
    """``from_zoo`` of the masked language models: a mixin before keras-hub's class."""

    @classmethod
    def from_zoo(
        cls, name: str, *, weights: Any = None, preprocessor: Any = None, **overrides: Any
    ) -> keras_hub.models.MaskedLM:
        """The masked language model over the zoo's named configuration ``name``: its
        backbone with the weights ``zoo.create(name, weights=weights, **overrides)`` loads
        (None: fresh) and a fresh head of keras-hub's.

        Raises:
            ValueError: an unknown name, a name of another family, an override that is no
                field of the configuration, or weights ``zoo.create`` refuses.
        """
        backbone = cls.backbone_cls.from_zoo(name, weights=weights, **overrides)
        return cls(backbone=backbone, preprocessor=preprocessor)


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3MaskedLMPreprocessor(keras_hub.models.DebertaV3MaskedLMPreprocessor):
    """keras-hub's DeBERTa v3 masked-LM preprocessor (strings to masked ``token_ids``,
    ``mask_positions`` and their labels), for :class:`DebertaV3Backbone`.

    Examples:

        >>> DebertaV3MaskedLMPreprocessor.tokenizer_cls.__name__
        'DebertaV3Tokenizer'
    """

    backbone_cls = DebertaV3Backbone
    tokenizer_cls = DebertaV3Tokenizer


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3MaskedLM(_MaskedLMFromZoo, keras_hub.models.DebertaV3MaskedLM):
    """keras-hub's DeBERTa v3 masked language model over :class:`DebertaV3Backbone`: keras-hub's
    head (``mlm_head``) on the states at ``mask_positions``, its output projection tied to
    the backbone's token embedding.

    Constructed as keras-hub's class (its ``__init__``, not written here):

    - ``backbone``: a :class:`DebertaV3Backbone`.
    - ``preprocessor``: a :class:`DebertaV3MaskedLMPreprocessor` or None.
    - ``**kwargs``: ``keras_hub.models.Task``'s.

    Examples:

        >>> model = DebertaV3MaskedLM.from_zoo("deberta_v3_extra_small", vocabulary_size=50,
        ...     num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
        >>> sorted(model.input)
        ['mask_positions', 'padding_mask', 'token_ids']
    """

    backbone_cls = DebertaV3Backbone
    preprocessor_cls = DebertaV3MaskedLMPreprocessor


@keras.saving.register_keras_serializable(package="keras_posenc")
class RoformerV2MaskedLMPreprocessor(keras_hub.models.RoformerV2MaskedLMPreprocessor):
    """keras-hub's RoFormer v2 masked-LM preprocessor (strings to masked ``token_ids``,
    ``mask_positions`` and their labels), for :class:`RoformerV2Backbone`.

    Examples:

        >>> RoformerV2MaskedLMPreprocessor.tokenizer_cls.__name__
        'RoformerV2Tokenizer'
    """

    backbone_cls = RoformerV2Backbone
    tokenizer_cls = RoformerV2Tokenizer


@keras.saving.register_keras_serializable(package="keras_posenc")
class RoformerV2MaskedLM(_MaskedLMFromZoo, keras_hub.models.RoformerV2MaskedLM):
    """keras-hub's RoFormer v2 masked language model over :class:`RoformerV2Backbone`: keras-hub's
    head (``mlm_head``) on the states at ``mask_positions``, its output projection tied to
    the backbone's token embedding.

    Constructed as keras-hub's class (its ``__init__``, not written here):

    - ``backbone``: a :class:`RoformerV2Backbone`.
    - ``preprocessor``: a :class:`RoformerV2MaskedLMPreprocessor` or None.
    - ``**kwargs``: ``keras_hub.models.Task``'s.

    Examples:

        >>> model = RoformerV2MaskedLM.from_zoo("roformer_v2_small", vocabulary_size=50,
        ...     num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
        >>> sorted(model.input)
        ['mask_positions', 'segment_ids', 'token_ids']
    """

    backbone_cls = RoformerV2Backbone
    preprocessor_cls = RoformerV2MaskedLMPreprocessor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_padding_id(self)
