"""Convert a keras-hub ``RoformerV2Backbone`` into the zoo's RoFormer v2
(`keras_posenc.zoo.roformer.build_roformer_v2`).

keras-hub's ``RoformerV2Backbone`` (from a preset where keras-hub has one, or a folder written
by ``save_to_preset``) becomes our model tensor by tensor, every shape checked: the token and
segment embeddings, the embeddings' norm scale, and per layer the query, key, value and output
kernels (keras-hub's ``(hidden, heads * size)`` reshaped to our ``(hidden, heads, size)``, the
output's to ``(heads, size, hidden)``; biases too where ``use_bias``), the two norms' scales and
the feed-forward kernels. The rotary embedding has no weights: keras-hub's rotates the pairs
``(2k, 2k + 1)`` with base ``max_wavelength``, ours (`RotaryPositions(interleaved=True)`) the
same.

One difference: keras-hub 0.32's ``RoformerAttention`` reshapes its padding mask to ``(batch,
1, length, 1)``, which on TensorFlow and JAX masks padded *queries* and lets real positions
attend to padded keys; on PyTorch it transposes it into a key mask. Ours masks padded keys on
every backend, so outputs at real positions equal keras-hub's on PyTorch, and on the other
backends whenever nothing is padded.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc.zoo.roformer import build_roformer_v2

__all__ = ["from_keras_hub_roformer_v2"]

_OWNER = "from_keras_hub_roformer_v2"


def _copy(target: keras.Variable, array: Any, what: str) -> None:
    array = np.asarray(keras.ops.convert_to_numpy(array))
    if array.size == int(np.prod(target.shape)) and array.ndim != len(target.shape):
        array = array.reshape(tuple(target.shape))  # keras-hub's Dense kernels, ours per head
    if tuple(array.shape) != tuple(target.shape):
        raise ValueError(
            f"{_OWNER}: {what} has shape {tuple(array.shape)}, the converted model's "
            f"{target.path} needs {tuple(target.shape)}."
        )
    target.assign(array.astype(keras.backend.standardize_dtype(target.dtype)))


def _copy_dense(ours: Any, theirs: Any, what: str) -> None:
    _copy(ours.kernel, theirs.kernel, f"{what} kernel")
    if getattr(theirs, "bias", None) is not None:
        _copy(ours.bias, theirs.bias, f"{what} bias")


def from_keras_hub_roformer_v2(backbone: Any, name: str | None = None) -> keras.Model:
    """The zoo's RoFormer v2 with the weights of a keras-hub ``RoformerV2Backbone``.

    Args:
        backbone: a ``keras_hub.models.RoformerV2Backbone`` (or a keras-hub task holding
            one, such as ``RoformerV2TextClassifier``: its backbone converts).
        name: the model's name; default the backbone's.

    Returns:
        The converted ``keras.Model`` (`keras_posenc.zoo.roformer.build_roformer_v2`):
        the backbone's inputs (``token_ids``, ``segment_ids``) and output.

    Raises:
        TypeError: for another kind of backbone.
        ValueError: for a weight whose shape differs from the model built from the
            backbone's configuration.

    Examples:

        >>> import keras
        >>> import keras_hub
        >>> import numpy as np
        >>> from keras_posenc.convert import from_keras_hub_roformer_v2
        >>> backbone = keras_hub.models.RoformerV2Backbone(
        ...     vocabulary_size=40, num_layers=1, num_heads=2, hidden_dim=8,
        ...     intermediate_dim=16, head_size=4)
        >>> model = from_keras_hub_roformer_v2(backbone)
        >>> inputs = {"token_ids": np.array([[2, 5, 6, 3]]), "segment_ids": np.zeros((1, 4))}
        >>> ours, theirs = (keras.ops.convert_to_numpy(m(inputs)) for m in (model, backbone))
        >>> bool(np.allclose(ours, theirs, atol=1e-5))
        True
    """
    names = [cls.__name__ for cls in type(backbone).__mro__]
    if "RoformerV2Backbone" not in names:
        inner = getattr(backbone, "backbone", None)
        if inner is None or "RoformerV2Backbone" not in [c.__name__ for c in type(inner).__mro__]:
            raise TypeError(
                f"{_OWNER}: `backbone` must be a keras_hub RoformerV2Backbone (or a task "
                f"holding one), got {type(backbone).__name__}."
            )
        backbone = inner
    config = backbone.get_config()
    model = build_roformer_v2(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        head_size=config["head_size"],
        use_bias=config["use_bias"],
        activation=config["activation"],
        dropout=config["dropout"],
        num_segments=config["num_segments"],
        max_wavelength=config["max_wavelength"],
        name=name or backbone.name,
    )
    _copy(
        model.get_layer("token_embedding").embeddings,
        backbone.token_embedding.embeddings,
        "the token embedding",
    )
    _copy(
        model.get_layer("segment_embedding").embeddings,
        backbone.segment_embedding.embeddings,
        "the segment embedding",
    )
    _copy(
        model.get_layer("embeddings_norm").scale,
        backbone.embeddings_layer_norm.scale,
        "the embeddings' norm",
    )
    for index, layer in enumerate(backbone.transformer_layers):
        block = model.get_layer(f"encoder_block_{index}")
        what = f"layer {index}"
        theirs, ours = layer.attention_layer, block.self_attention
        for mine, their, role in (
            (ours.query_dense, theirs.q_dense, "query"),
            (ours.key_dense, theirs.k_dense, "key"),
            (ours.value_dense, theirs.v_dense, "value"),
            (ours.output_dense, theirs.o_dense, "output"),
        ):
            _copy_dense(mine, their, f"{what} {role}")
        _copy(block.self_attention_layer_norm.scale, layer.attention_norm.scale, f"{what} norm")
        _copy_dense(
            block.feedforward_intermediate_dense,
            layer.feedforward_intermediate_dense,
            f"{what} feed-forward input",
        )
        _copy_dense(
            block.feedforward_output_dense, layer.feedforward_output_dense, f"{what} feed-forward"
        )
        _copy(block.feedforward_layer_norm.scale, layer.feedforward_norm.scale, f"{what} norm")
    return model
