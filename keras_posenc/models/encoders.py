"""The zoo's text encoders through keras-hub's API: DeBERTa v3 and RoFormer v2.

Per family a `ZooBackbone` (the zoo's encoder, its inputs and its sequence output named
as keras-hub's ``DebertaV3Backbone`` / ``RoformerV2Backbone`` name theirs), the
``TextClassifier`` around it, its preprocessor and its tokenizer. The zoo has no head for
these encoders (``zoo.create`` returns the sequence output), so the classifiers' head is
keras-hub's own for the family: its ``DebertaV3TextClassifier`` and
``RoformerV2TextClassifier`` are the classes subclassed here, with our backbone as their
``backbone_cls``; a user finds the same layers (``pooled_dense``, ``logits``) and the same
arguments. The preprocessors and tokenizers are keras-hub's too (SentencePiece for
DeBERTa v3, WordPiece for RoFormer v2), bound to our backbones so that keras-hub's
``from_preset`` picks them for a preset ours saved. The families' masked language models
are in keras_posenc/models/encoder_lms.py.

``Task.from_zoo(name, num_classes=..., weights=...)`` builds the named configuration and
loads the weights ``zoo.create(name, weights=...)`` would
(:func:`~keras_posenc.models.copy_weights`);
``backbone.to_zoo()`` returns the zoo's model with the backbone's weights.

Examples:

    >>> import numpy as np
    >>> from keras_posenc import models
    >>> backbone = models.RoformerV2Backbone.from_zoo(
    ...     "roformer_v2_small", vocabulary_size=50, num_layers=1, num_heads=2,
    ...     hidden_dim=8, intermediate_dim=16)
    >>> ids = np.array([[2, 5, 6, 3, 0]])
    >>> tuple(backbone({"token_ids": ids, "segment_ids": 0 * ids}).shape)
    (1, 5, 8)
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import keras
import keras_hub

from keras_posenc.models._backbone import ZooBackbone, copy_weights
from keras_posenc.zoo.deberta import build_deberta_v3
from keras_posenc.zoo.registry import create
from keras_posenc.zoo.roformer import build_roformer_v2

__all__ = [
    "DebertaV3Backbone",
    "DebertaV3TextClassifier",
    "DebertaV3TextClassifierPreprocessor",
    "DebertaV3Tokenizer",
    "RoformerV2Backbone",
    "RoformerV2TextClassifier",
    "RoformerV2TextClassifierPreprocessor",
    "RoformerV2Tokenizer",
    "check_padding_id",
]


def check_padding_id(task: Any) -> None:
    """Refuses a RoFormer v2 task whose tokenizer pads with another id than the one its
    backbone masks (``token_ids == pad_id``: padded keys would be attended to silently).

    A tokenizer without its vocabulary yet (keras-hub's ``from_preset`` loads it after
    building the task) is not checked.

    Raises:
        ValueError: the two ids differ (both named, with the task's class).
    """
    tokenizer = getattr(getattr(task, "preprocessor", None), "tokenizer", None)
    padding = getattr(tokenizer, "pad_token_id", None)
    expected = task.backbone.network_config.get("pad_id", 0)
    if padding is not None and int(padding) != expected:
        raise ValueError(
            f"{type(task).__name__}: the tokenizer pads with id {int(padding)} "
            f"({tokenizer.pad_token!r}), the backbone masks token_ids == pad_id={expected}; "
            f"put {tokenizer.pad_token!r} at id {expected} of the vocabulary, or build the "
            f"backbone with pad_id={int(padding)}."
        )


@keras.saving.register_keras_serializable(package="keras_posenc")
class _TiedEmbedding(keras.layers.Layer):
    """The zoo encoder's ``keras.layers.Embedding`` seen as keras-hub's masked-LM heads
    need it: ``layer(x, reverse=True)`` projects states onto the vocabulary with the
    embedding's own matrix (tied, as keras-hub's ``ReversibleEmbedding``); no weights of
    its own. ``reverse_dtype`` as keras-hub's ``ReversibleEmbedding``'s."""

    def __init__(self, embedding: keras.layers.Embedding, reverse_dtype: Any = None, **kwargs):
        super().__init__(**kwargs)
        self.embedding = embedding
        self.reverse_dtype = reverse_dtype

    @property
    def input_dim(self) -> int:
        return self.embedding.input_dim

    @property
    def output_dim(self) -> int:
        return self.embedding.output_dim

    def build(self, input_shape: Any = None) -> None:
        self.built = True  # the embedding is the backbone's, built there

    def call(self, inputs: Any, reverse: bool = False) -> Any:
        if not reverse:
            return self.embedding(inputs)
        kernel = keras.ops.transpose(keras.ops.convert_to_tensor(self.embedding.embeddings))
        dtype = self.reverse_dtype or self.compute_dtype
        return keras.ops.matmul(keras.ops.cast(inputs, dtype), keras.ops.cast(kernel, dtype))

    def compute_output_spec(self, inputs: Any, reverse: bool = False) -> Any:
        if not reverse:
            return self.embedding.compute_output_spec(inputs)
        shape = (*inputs.shape[:-1], self.input_dim)
        return keras.KerasTensor(shape, dtype=self.reverse_dtype or self.compute_dtype)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "embedding": keras.layers.serialize(self.embedding),
            "reverse_dtype": self.reverse_dtype,
        }

    @classmethod
    def from_config(cls, config: dict) -> _TiedEmbedding:
        config = dict(config)
        config["embedding"] = keras.layers.deserialize(config["embedding"])
        return cls(**config)


class _TextBackbone(ZooBackbone):
    """What keras-hub's text tasks read of a backbone: ``hidden_dim``, ``dropout``,
    ``vocabulary_size``, ``start_token_index`` and ``token_embedding``."""

    def __init__(self, **arguments: Any) -> None:
        super().__init__(**arguments)
        defaults = inspect.signature(self.builder).parameters
        for key in ("vocabulary_size", "hidden_dim", "dropout"):
            setattr(self, key, self.network_config.get(key, defaults[key].default))
        # keras-hub's classifiers pool the first token's state ([CLS]).
        self.start_token_index = 0

    @property
    def token_embedding(self) -> _TiedEmbedding:
        """The token embedding as keras-hub's masked-LM heads read it (``reverse=True``:
        the states' logits over the vocabulary, with the same matrix). One view per
        backbone, kept out of the backbone's tracking: its weights are the embedding's."""
        view = self.__dict__.get("_token_embedding_view")
        if view is None:
            view = _TiedEmbedding(
                self.get_layer("token_embedding"),
                dtype=self.dtype_policy,
                name="token_embedding_view",
            )
            object.__setattr__(self, "_token_embedding_view", view)
        return view

    @classmethod
    def from_zoo(cls, name: str, weights: Any = None, **overrides: Any) -> ZooBackbone:
        """The backbone of the zoo's named configuration ``name``, with the weights
        ``zoo.create(name, weights=weights, **overrides)`` loads (fresh ones for None).

        Raises:
            ValueError: an unknown name, a name of another family, an override that is no
                field of the configuration, or weights ``zoo.create`` refuses.
        """
        backbone = super().from_zoo(name, **overrides)
        if weights is not None:
            source = create(name, weights=weights, **overrides)
            copy_weights(source, backbone, f"{cls.__name__}.from_zoo({name!r})")
        return backbone

    def to_zoo(self) -> keras.Model:
        """The zoo's model (what ``zoo.create`` returns for this configuration) with this
        backbone's weights: its sequence output equals the backbone's."""
        model = self.build_network(dtype=self.dtype_policy, name=self.name, **self.network_config)
        copy_weights(self, model, f"{type(self).__name__}.to_zoo")
        return model


class _ClassifierFromZoo:
    """``from_zoo`` of the text classifiers: a mixin before keras-hub's classifier class."""

    @classmethod
    def from_zoo(
        cls,
        name: str,
        *,
        num_classes: int,
        weights: Any = None,
        preprocessor: Any = None,
        head: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> keras_hub.models.TextClassifier:
        """The classifier over the zoo's named configuration ``name``: its backbone
        with the weights ``zoo.create(name, weights=weights, **overrides)`` loads (a shipped
        tag, a ``.weights.h5`` / ``.keras`` file, a preset source; None: fresh), and a fresh
        head of keras-hub's: ``num_classes`` classes, ``head`` its other arguments
        (``{"activation": ..., "hidden_dim": ..., "dropout": ...}``, the classifier's
        own; ``overrides`` are the configuration's fields, ``hidden_dim`` the encoder's).

        Raises:
            ValueError: an unknown name, a name of another family, an override that is no
                field of the configuration, weights ``zoo.create`` refuses, or a key of
                ``head`` the classifier does not take.
        """
        head = dict(head or {})
        unknown = sorted(set(head) - {"activation", "hidden_dim", "dropout"})
        if unknown:
            raise ValueError(
                f"{cls.__name__}.from_zoo: `head` takes 'activation', 'hidden_dim' and "
                f"'dropout' (keras-hub's head arguments), got {', '.join(map(repr, unknown))}."
            )
        backbone = cls.backbone_cls.from_zoo(name, weights=weights, **overrides)
        return cls(backbone=backbone, num_classes=num_classes, preprocessor=preprocessor, **head)


# --------------------------------------------------------------------------- DeBERTa v3


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3Backbone(_TextBackbone):
    """The zoo's DeBERTa v3 encoder (`keras_posenc.zoo.deberta.build_deberta_v3`) as a
    keras-hub ``Backbone``.

    Inputs ``token_ids`` and ``padding_mask``, output the last block's states ``(batch,
    length, hidden_dim)``, as keras-hub's ``DebertaV3Backbone``; the arguments are
    ``build_deberta_v3``'s (keras-hub's, and ``layer_norm_epsilon``).

    Examples:

        >>> import numpy as np
        >>> backbone = DebertaV3Backbone(vocabulary_size=50, num_layers=1, num_heads=2,
        ...     hidden_dim=8, intermediate_dim=16, bucket_size=4, max_sequence_length=16)
        >>> ids = np.array([[1, 5, 6, 2, 0]])
        >>> tuple(backbone({"token_ids": ids, "padding_mask": ids != 0}).shape)
        (1, 5, 8)
    """

    family: ClassVar[str] = "deberta_v3"
    builder = staticmethod(build_deberta_v3)


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3Tokenizer(keras_hub.models.DebertaV3Tokenizer):
    """keras-hub's DeBERTa v3 SentencePiece tokenizer (``proto``: a SentencePiece model
    with ``[PAD]``, ``[CLS]``, ``[SEP]``, ``[UNK]``), for :class:`DebertaV3Backbone`.

    Examples:

        >>> DebertaV3Tokenizer.backbone_cls.__name__
        'DebertaV3Backbone'
    """

    backbone_cls = DebertaV3Backbone


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3TextClassifierPreprocessor(keras_hub.models.DebertaV3TextClassifierPreprocessor):
    """keras-hub's DeBERTa v3 classifier preprocessor (strings to ``token_ids`` and
    ``padding_mask``, ``[CLS] ... [SEP]``), for :class:`DebertaV3Backbone`.

    Examples:

        >>> DebertaV3TextClassifierPreprocessor.tokenizer_cls.__name__
        'DebertaV3Tokenizer'
    """

    backbone_cls = DebertaV3Backbone
    tokenizer_cls = DebertaV3Tokenizer


@keras.saving.register_keras_serializable(package="keras_posenc")
class DebertaV3TextClassifier(_ClassifierFromZoo, keras_hub.models.DebertaV3TextClassifier):
    """keras-hub's DeBERTa v3 text classifier over :class:`DebertaV3Backbone`.

    The head is keras-hub's: the ``[CLS]`` state, dropout, a GELU dense layer
    (``hidden_dim``), dropout, the ``logits`` dense layer.

    Constructed as keras-hub's class (its ``__init__``, not written here):

    - ``backbone``: a :class:`DebertaV3Backbone`.
    - ``num_classes``: classes.
    - ``preprocessor``: a :class:`DebertaV3TextClassifierPreprocessor` or None.
    - ``activation``: the logits' activation (None: logits).
    - ``hidden_dim``: the pooled layer's width; None: the backbone's.
    - ``dropout``: the pooled state's dropout.
    - ``**kwargs``: ``keras_hub.models.Task``'s.

    Examples:

        >>> import numpy as np
        >>> classifier = DebertaV3TextClassifier.from_zoo(
        ...     "deberta_v3_extra_small", num_classes=3, vocabulary_size=50, num_layers=1,
        ...     num_heads=2, hidden_dim=8, intermediate_dim=16, bucket_size=4)
        >>> ids = np.array([[1, 5, 6, 2, 0]])
        >>> tuple(classifier({"token_ids": ids, "padding_mask": ids != 0}).shape)
        (1, 3)
    """

    backbone_cls = DebertaV3Backbone
    preprocessor_cls = DebertaV3TextClassifierPreprocessor


# --------------------------------------------------------------------------- RoFormer v2


@keras.saving.register_keras_serializable(package="keras_posenc")
class RoformerV2Backbone(_TextBackbone):
    """The zoo's RoFormer v2 encoder (`keras_posenc.zoo.roformer.build_roformer_v2`) as a
    keras-hub ``Backbone``.

    Inputs ``token_ids`` and ``segment_ids``, output the last block's states ``(batch,
    length, hidden_dim)``, as keras-hub's ``RoformerV2Backbone``; padding is ``token_ids
    == pad_id`` (0: WordPiece's ``[PAD]`` in BERT-style vocabularies). The arguments are
    ``build_roformer_v2``'s. Its tasks refuse a tokenizer that pads with another id
    (:func:`check_padding_id`).

    Examples:

        >>> import numpy as np
        >>> backbone = RoformerV2Backbone(vocabulary_size=50, num_layers=1, num_heads=2,
        ...     hidden_dim=8, intermediate_dim=16)
        >>> ids = np.array([[2, 5, 6, 3, 0]])
        >>> tuple(backbone({"token_ids": ids, "segment_ids": 0 * ids}).shape)
        (1, 5, 8)
    """

    family: ClassVar[str] = "roformer_v2"
    builder = staticmethod(build_roformer_v2)


@keras.saving.register_keras_serializable(package="keras_posenc")
class RoformerV2Tokenizer(keras_hub.models.RoformerV2Tokenizer):
    """keras-hub's RoFormer v2 WordPiece tokenizer (``vocabulary`` with ``[PAD]`` first,
    ``[CLS]``, ``[SEP]``, ``[UNK]``, ``[MASK]``), for :class:`RoformerV2Backbone`.

    Examples:

        >>> RoformerV2Tokenizer.backbone_cls.__name__
        'RoformerV2Backbone'
    """

    backbone_cls = RoformerV2Backbone


@keras.saving.register_keras_serializable(package="keras_posenc")
class RoformerV2TextClassifierPreprocessor(keras_hub.models.RoformerV2TextClassifierPreprocessor):
    """keras-hub's RoFormer v2 classifier preprocessor (strings to ``token_ids`` and
    ``segment_ids``), for :class:`RoformerV2Backbone`.

    Examples:

        >>> RoformerV2TextClassifierPreprocessor.tokenizer_cls.__name__
        'RoformerV2Tokenizer'
    """

    backbone_cls = RoformerV2Backbone
    tokenizer_cls = RoformerV2Tokenizer


@keras.saving.register_keras_serializable(package="keras_posenc")
class RoformerV2TextClassifier(_ClassifierFromZoo, keras_hub.models.RoformerV2TextClassifier):
    """keras-hub's RoFormer v2 text classifier over :class:`RoformerV2Backbone`.

    The head is keras-hub's: the ``[CLS]`` state, dropout, a tanh dense layer
    (``hidden_dim``), dropout, the ``logits`` dense layer.

    Constructed as keras-hub's class (its ``__init__``, not written here):

    - ``backbone``: a :class:`RoformerV2Backbone`.
    - ``num_classes``: classes.
    - ``preprocessor``: a :class:`RoformerV2TextClassifierPreprocessor` or None.
    - ``activation``: the logits' activation (None: logits).
    - ``hidden_dim``: the pooled layer's width; None: the backbone's.
    - ``dropout``: the head's dropout.
    - ``**kwargs``: ``keras_hub.models.Task``'s.

    Examples:

        >>> import numpy as np
        >>> classifier = RoformerV2TextClassifier.from_zoo(
        ...     "roformer_v2_small", num_classes=3, vocabulary_size=50, num_layers=1,
        ...     num_heads=2, hidden_dim=8, intermediate_dim=16)
        >>> ids = np.array([[2, 5, 6, 3, 0]])
        >>> tuple(classifier({"token_ids": ids, "segment_ids": 0 * ids}).shape)
        (1, 3)
    """

    backbone_cls = RoformerV2Backbone
    preprocessor_cls = RoformerV2TextClassifierPreprocessor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_padding_id(self)
