"""Convert a keras-hub ``T5Backbone`` into the zoo's :class:`~keras_posenc.zoo.t5.T5`.

keras-hub is how Keras users reach pretrained T5 weights (its presets
``t5_small_multi``, ``t5_base_multi``, ``t5_1.1_*``, ``flan_*_multi``):
``keras_hub.models.T5Backbone.from_preset(name)`` loads one, and
:func:`from_keras_hub_t5` copies it into our layers, tensor by tensor, checking
every shape:

- the shared token embedding, and the separate output matrix (v1.1) when the
  backbone's ``tie_embedding_weights`` is False;
- each layer's query, key, value and output projections: keras-hub's
  ``(d, heads * d_kv)`` kernels reshaped to ``(d, heads, d_kv)`` (and the output's
  ``(heads * d_kv, d)`` to ``(heads, d_kv, d)``); **the query kernel is multiplied
  by** ``sqrt(d_kv)`` (:func:`~keras_posenc.zoo.t5.query_kernel_scale`), since our
  attention divides the logits by it and T5's does not (8 for ``d_kv = 64``, a
  power of two: no rounding);
- the relative attention bias of each stack's first layer ``(32, heads)``: our
  stack's `RelativePositionBias` table, same layout;
- the RMS norms' scales and the feed-forward kernels (``input_projector`` is the
  activated projection, ``gate_projector`` the linear one it is multiplied by).

Token ids are T5's (pad 0, end of sequence 1, decoder start 0), so a keras-hub
tokenizer (``keras_hub.models.T5Tokenizer``) gives ids the converted model takes.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc._quiet import quiet_import
from keras_posenc.zoo.t5 import T5, query_kernel_scale

__all__ = ["from_keras_hub_t5"]

_OWNER = "from_keras_hub_t5"
# keras-hub's T5 fixes its relative attention's bucketing (T5MultiHeadAttention).
_KERAS_HUB_BUCKETS, _KERAS_HUB_MAX_DISTANCE = 32, 128


def _activation_name(activation: Any) -> str:
    """Our name for the backbone's feed-forward activation (a function there)."""
    name = keras.activations.serialize(activation)
    if isinstance(name, dict):  # a registered function serialises as a config
        name = name.get("config", name.get("class_name"))
    name = str(name)
    if name.endswith("gelu_approximate"):  # keras_hub's tanh approximation
        return "gelu_tanh"
    try:
        keras.activations.get(name)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{_OWNER}: the backbone's activation {activation!r} has no Keras name "
            "keras-posenc can rebuild."
        ) from error
    return name


def _copy(target: keras.Variable, array: Any, what: str) -> None:
    array = np.asarray(keras.ops.convert_to_numpy(array))
    if tuple(array.shape) != tuple(target.shape):
        raise ValueError(
            f"{_OWNER}: {what} has shape {tuple(array.shape)}, the converted model's "
            f"{target.path} needs {tuple(target.shape)}."
        )
    target.assign(array.astype(keras.backend.standardize_dtype(target.dtype)))


def _copy_attention(ours: Any, theirs: Any, scale: float, what: str) -> None:
    """keras-hub's T5MultiHeadAttention projections into a MultiHeadRelativeAttention."""
    heads, head_dim = ours.num_heads, ours.key_dim

    def split(kernel: Any) -> np.ndarray:  # (d, heads * d_kv) -> (d, heads, d_kv)
        array = np.asarray(keras.ops.convert_to_numpy(kernel))
        return array.reshape(array.shape[0], heads, head_dim)

    _copy(ours.query_dense.kernel, split(theirs.query_projector.kernel) * scale, f"{what} query")
    _copy(ours.key_dense.kernel, split(theirs.key_projector.kernel), f"{what} key")
    _copy(ours.value_dense.kernel, split(theirs.value_projector.kernel), f"{what} value")
    output = np.asarray(keras.ops.convert_to_numpy(theirs.output_projector.kernel))
    output = output.reshape(heads, head_dim, output.shape[-1])
    _copy(ours.output_dense.kernel, output, f"{what} output")


def _copy_stack(stack: Any, layers: list, final_norm: Any, what: str) -> None:
    first = layers[0].self_attention
    _copy(
        stack.position_bias.embeddings,
        first.relative_attention_bias,
        f"{what} relative attention bias",
    )
    scale = query_kernel_scale(stack.blocks[0].key_value_dim)
    for index, (block, layer) in enumerate(zip(stack.blocks, layers, strict=True)):
        name = f"{what} layer {index}"
        _copy(block.self_attention_norm.scale, layer.self_attention_layer_norm.weight, name)
        _copy_attention(block.self_attention, layer.self_attention, scale, f"{name} self-attention")
        if block.cross_attention:
            _copy(block.cross_attention_norm.scale, layer.cross_attention_layer_norm.weight, name)
            _copy_attention(
                block.cross_attention_layer, layer.cross_attention, scale, f"{name} cross-attention"
            )
        _copy(block.feedforward_norm.scale, layer.layer_norm.weight, f"{name} feed-forward norm")
        _copy(
            block.feedforward_intermediate.kernel,
            layer.input_projector.kernel,
            f"{name} feed-forward input",
        )
        if block.gated_activation:
            _copy(
                block.feedforward_gate.kernel,
                layer.gate_projector.kernel,
                f"{name} feed-forward gate",
            )
        _copy(
            block.feedforward_output.kernel,
            layer.output_projector.kernel,
            f"{name} feed-forward output",
        )
    _copy(stack.final_norm.scale, final_norm.weight, f"{what} final norm")


def _build(
    backbone: Any,
    max_source_length: int | None,
    max_target_length: int | None,
    fused_attention: bool | str,
    name: str,
    tokenizer: Any = None,
) -> T5:
    """The zoo's T5 with the backbone's configuration (weights freshly initialised)."""
    return T5(
        vocabulary_size=backbone.vocabulary_size,
        hidden_dim=backbone.hidden_dim,
        intermediate_dim=backbone.intermediate_dim,
        num_heads=backbone.num_heads,
        num_layers=backbone.num_layers,
        key_value_dim=backbone.key_value_dim or backbone.hidden_dim // backbone.num_heads,
        activation=_activation_name(backbone.activation),
        gated_activation=backbone.use_gated_activation,
        tie_embeddings=backbone.tie_embedding_weights,
        dropout=backbone.dropout,
        layer_norm_epsilon=backbone.layer_norm_epsilon,
        num_buckets=_KERAS_HUB_BUCKETS,
        max_distance=_KERAS_HUB_MAX_DISTANCE,
        fused_attention=fused_attention,
        max_source_length=max_source_length,
        max_target_length=max_target_length,
        dtype=backbone.dtype_policy.name,
        name=name,
        tokenizer=tokenizer,
    )


def from_keras_hub_t5(
    backbone: keras.Model,
    max_source_length: int | None = None,
    max_target_length: int | None = None,
    fused_attention: bool | str = "auto",
    name: str = "t5",
    tokenizer: Any = None,
) -> T5:
    """The zoo's :class:`~keras_posenc.zoo.t5.T5` with the weights of a keras-hub ``T5Backbone``.

    The configuration is the backbone's (vocabulary, widths, heads, layers,
    head size, activation, gating, tied or separate output matrix, dropout, norm
    epsilon); the weights are copied as the module docstring describes. The
    converted model's encoder output, decoder output and logits equal the
    backbone's (and ``keras_hub.models.T5Seq2SeqLM``'s logits) on the same ids;
    ``tests/test_convert_keras_hub.py`` checks it to 1e-5 on every backend.

    Args:
        backbone: a ``keras_hub.models.T5Backbone``, e.g.
            ``keras_hub.models.T5Backbone.from_preset("t5_small_multi")``.
        max_source_length: the converted model's longest accepted source
            (T5 has no position table; None accepts any).
        max_target_length: its longest target, or None.
        fused_attention: the attention layers' ``fused_attention``.
        name: the converted model's name.
        tokenizer: the preset's keras-hub ``T5Tokenizer``, so that ``generate`` takes and
            returns text as keras-hub's ``T5Seq2SeqLM`` does
            (`keras_posenc.convert.from_keras_hub_preset` passes it); None: token ids only.

    Returns:
        The :class:`~keras_posenc.zoo.t5.T5`, in the backbone's dtype policy.

    Raises:
        TypeError: if ``backbone`` is not a keras-hub ``T5Backbone``.
        ValueError: for an activation without a Keras name, or a tensor whose
            shape does not fit (naming it).

    Examples:

        >>> import keras_hub
        >>> from keras_posenc.convert import from_keras_hub_t5
        >>> backbone = keras_hub.models.T5Backbone(
        ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
        >>> model = from_keras_hub_t5(backbone)
        >>> model.count_params() == backbone.count_params()
        True
    """
    try:
        T5Backbone = quiet_import("keras_hub").models.T5Backbone  # noqa: N806
    except ImportError as error:  # keras-hub is a dependency; say so if it is missing
        raise ImportError(f"{_OWNER} needs keras-hub (`pip install keras-hub`).") from error
    if not isinstance(backbone, T5Backbone):
        raise TypeError(
            f"{_OWNER}: `backbone` must be a keras_hub.models.T5Backbone (e.g. "
            f"T5Backbone.from_preset('t5_small_multi')), got {type(backbone).__name__}."
        )
    model = _build(backbone, max_source_length, max_target_length, fused_attention, name, tokenizer)
    embedding = backbone.token_embedding
    _copy(model.token_embedding.embeddings, embedding.embeddings, "token embedding")
    if not backbone.tie_embedding_weights:
        _copy(
            model.token_embedding.reverse_embeddings,
            embedding.reverse_embeddings,
            "output projection",
        )
    _copy_stack(
        model.encoder, backbone.encoder_transformer_layers, backbone.encoder_layer_norm, "encoder"
    )
    _copy_stack(
        model.decoder, backbone.decoder_transformer_layers, backbone.decoder_layer_norm, "decoder"
    )
    return model
