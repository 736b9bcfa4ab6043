"""Convert a keras-hub ``DebertaV3Backbone`` into the zoo's DeBERTa v3
(`keras_posenc.zoo.deberta.build_deberta_v3`).

keras-hub is how Keras users reach DeBERTa v3's released weights (its presets
``deberta_v3_extra_small_en`` .. ``deberta_v3_large_en``, ``deberta_v3_base_multi``):
``keras_hub.models.DebertaV3Backbone.from_preset(name)`` loads one (a handle where keras-hub
can download it, or a folder written by ``save_to_preset``), and
:func:`from_keras_hub_deberta_v3` copies it into our layers tensor by tensor, checking every
shape. The layouts agree but for the attention's output projection: keras-hub's ``(hidden,
hidden)`` kernel is ours ``(heads, head_dim, hidden)``, reshaped. The relative embedding
table and its layer norm go to `DebertaRelativeEmbedding`, each block's disentangled
attention to `DisentangledSelfAttention` (v3's shared position projections: its query and
key projections project the table too, as keras-hub's do).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc.zoo.deberta import build_deberta_v3

__all__ = ["from_keras_hub_deberta_v3"]

_OWNER = "from_keras_hub_deberta_v3"


def _copy(target: keras.Variable, array: Any, what: str, reshape: bool = False) -> None:
    array = np.asarray(keras.ops.convert_to_numpy(array))
    if reshape and array.size == int(np.prod(target.shape)):
        array = array.reshape(tuple(target.shape))  # (hidden, hidden) -> (heads, d, hidden)
    if tuple(array.shape) != tuple(target.shape):
        raise ValueError(
            f"{_OWNER}: {what} has shape {tuple(array.shape)}, the converted model's "
            f"{target.path} needs {tuple(target.shape)}."
        )
    target.assign(array.astype(keras.backend.standardize_dtype(target.dtype)))


def _copy_dense(ours: Any, theirs: Any, what: str, reshape: bool = False) -> None:
    _copy(ours.kernel, theirs.kernel, f"{what} kernel", reshape)
    _copy(ours.bias, theirs.bias, f"{what} bias")


def _copy_norm(ours: Any, theirs: Any, what: str) -> None:
    _copy(ours.gamma, theirs.gamma, f"{what} scale")
    _copy(ours.beta, theirs.beta, f"{what} offset")


def from_keras_hub_deberta_v3(backbone: Any, name: str | None = None) -> keras.Model:
    """The zoo's DeBERTa v3 with the weights of a keras-hub ``DebertaV3Backbone``.

    The model takes the backbone's inputs (``token_ids``, ``padding_mask``) and returns its
    output, with the same numbers (tests/test_convert_keras_hub_deberta.py: random weights,
    three backends).

    Args:
        backbone: a ``keras_hub.models.DebertaV3Backbone`` (or a keras-hub task holding
            one: ``DebertaV3TextClassifier``, ``DebertaV3MaskedLM``: its backbone converts).
        name: the model's name; default the backbone's.

    Returns:
        The converted ``keras.Model`` (`keras_posenc.zoo.deberta.build_deberta_v3`).

    Raises:
        TypeError: for another kind of backbone.
        ValueError: for a weight whose shape differs from the model built from the
            backbone's configuration.

    Examples:

        >>> import keras
        >>> import keras_hub
        >>> import numpy as np
        >>> from keras_posenc.convert import from_keras_hub_deberta_v3
        >>> backbone = keras_hub.models.DebertaV3Backbone(
        ...     vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8,
        ...     intermediate_dim=16, max_sequence_length=32, bucket_size=8)
        >>> model = from_keras_hub_deberta_v3(backbone)
        >>> inputs = {"token_ids": np.array([[1, 5, 6, 2]]), "padding_mask": np.ones((1, 4), int)}
        >>> ours, theirs = (keras.ops.convert_to_numpy(m(inputs)) for m in (model, backbone))
        >>> bool(np.allclose(ours, theirs, atol=1e-5))
        True
    """
    if "DebertaV3Backbone" not in [cls.__name__ for cls in type(backbone).__mro__]:
        inner = getattr(backbone, "backbone", None)
        if inner is None or "DebertaV3Backbone" not in [c.__name__ for c in type(inner).__mro__]:
            raise TypeError(
                f"{_OWNER}: `backbone` must be a keras_hub DebertaV3Backbone (or a task "
                f"holding one), got {type(backbone).__name__}."
            )
        backbone = inner
    config = backbone.get_config()
    model = build_deberta_v3(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        dropout=config["dropout"],
        max_sequence_length=config["max_sequence_length"],
        bucket_size=config["bucket_size"],
        name=name or backbone.name,
    )
    _copy(
        model.get_layer("token_embedding").embeddings,
        backbone.token_embedding.embeddings,
        "the token embedding",
    )
    _copy_norm(
        model.get_layer("embeddings_norm"), backbone.embeddings_layer_norm, "the embeddings' norm"
    )
    table = model.get_layer("relative_embedding")
    _copy(table.embeddings, backbone.relative_embeddings.rel_embeddings, "the relative table")
    _copy_norm(table.layer_norm, backbone.relative_embeddings.layer_norm, "the table's norm")
    for index, layer in enumerate(backbone.transformer_layers):
        block = model.get_layer(f"encoder_block_{index}")
        what = f"layer {index}"
        theirs = layer._self_attention_layer
        attention = block.attention
        _copy_dense(attention.query_dense, theirs._query_dense, f"{what} query")
        _copy_dense(attention.key_dense, theirs._key_dense, f"{what} key")
        _copy_dense(attention.value_dense, theirs._value_dense, f"{what} value")
        _copy_dense(
            attention.output_dense, theirs._output_dense, f"{what} attention output", reshape=True
        )
        _copy_norm(block.attention_norm, layer._self_attention_layer_norm, f"{what} norm")
        _copy_dense(
            block.feedforward_intermediate,
            layer._feedforward_intermediate_dense,
            f"{what} feed-forward input",
        )
        _copy_dense(
            block.feedforward_output, layer._feedforward_output_dense, f"{what} feed-forward"
        )
        _copy_norm(block.feedforward_norm, layer._feedforward_layer_norm, f"{what} norm")
    return model
