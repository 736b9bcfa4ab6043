"""keras-hub's decoder-only backbones as zoo models: `from_keras_hub` (issue 50).

keras-hub's ``LlamaBackbone``, ``Llama3Backbone`` and ``MistralBackbone`` become a
`keras_posenc.zoo.decoder_lm.DecoderLM` with the same numbers: every block is a
`DecoderBlock` whose attention is the library's (so its position scheme can be changed
afterwards), the weights copied one to one (the kernels have the same layout: keras-hub's
``EinsumDense`` projections are ``(hidden, heads, head_dim)`` and ``(heads, head_dim,
hidden)``, as ours). ``T5Backbone`` goes to `from_keras_hub_t5`.

A backbone from a preset (``keras_hub.models.LlamaBackbone.from_preset(...)``: a handle
where keras-hub can download it, or a preset folder written by ``save_to_preset``, offline)
converts the same way.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from keras_posenc.layers.rotary import RotaryPositions
from keras_posenc.zoo.decoder_lm import DecoderLM

__all__ = ["from_keras_hub", "from_keras_hub_decoder"]

# keras-hub's decoder backbones this module converts, by class name (a subclass such as
# Llama3Backbone is matched through its bases).
DECODERS = ("LlamaBackbone", "MistralBackbone")


def _class_names(obj: Any) -> list[str]:
    return [cls.__name__ for cls in type(obj).__mro__]


def from_keras_hub(backbone: Any, **kwargs: Any) -> Any:
    """A zoo model equal to a keras-hub backbone: decoders (`from_keras_hub_decoder`) or T5
    (`keras_posenc.convert.from_keras_hub_t5`).

    Raises:
        TypeError: for a backbone of another family, naming the families converted.
    """
    names = _class_names(backbone)
    if "T5Backbone" in names:
        from keras_posenc.convert.keras_hub_t5 import from_keras_hub_t5

        return from_keras_hub_t5(backbone, **kwargs)
    if any(name in names for name in DECODERS):
        return from_keras_hub_decoder(backbone, **kwargs)
    raise TypeError(
        f"from_keras_hub: `backbone` must be one of keras_hub's T5Backbone, LlamaBackbone, "
        f"Llama3Backbone or MistralBackbone, got {type(backbone).__name__}."
    )


def _rotary(config: dict) -> RotaryPositions:
    """keras-hub's rope arguments as a `RotaryPositions` (the same rotation: half-split pairs).

    keras-hub's Llama rotary (``LlamaRotaryEmbedding``, 0.32) computes its frequencies
    without ``rope_position_scaling_factor`` (its ``_get_inverse_freq`` replaces the one that
    divides by it), so a Llama backbone's numbers do not depend on it and neither do ours:
    a factor other than 1 is warned about. Mistral's ``rope_scaling_factor`` is linear
    (keras-hub's ``RotaryEmbedding``).
    """
    wavelength = float(config.get("rope_max_wavelength", 10000))
    ignored = config.get("rope_position_scaling_factor", 1.0)
    if ignored not in (None, 1, 1.0):
        warnings.warn(
            f"from_keras_hub_decoder: the backbone's rope_position_scaling_factor={ignored} "
            f"is not applied by keras-hub's Llama rotary (0.32), so the converted model "
            f"does not apply it either (its numbers equal the backbone's).",
            UserWarning,
            stacklevel=3,
        )
    adjustment = config.get("rope_frequency_adjustment_factor")
    if adjustment is not None:  # Llama 3.1's frequency ramp
        return RotaryPositions(
            max_wavelength=wavelength,
            scaling="llama3",
            scaling_factor=float(adjustment),
            low_freq_factor=float(config.get("rope_low_freq_factor") or 1.0),
            high_freq_factor=float(config.get("rope_high_freq_factor") or 4.0),
            training_length=int(config["rope_pretraining_sequence_length"]),
        )
    factor = float(config.get("rope_scaling_factor", 1.0))
    if factor == 1.0:
        return RotaryPositions(max_wavelength=wavelength)
    return RotaryPositions(max_wavelength=wavelength, scaling="linear", scaling_factor=factor)


def from_keras_hub_decoder(
    backbone: Any,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    name: str | None = None,
) -> DecoderLM:
    """A `DecoderLM` equal to keras-hub's ``LlamaBackbone``, ``Llama3Backbone`` or
    ``MistralBackbone`` (its logits: the backbone's sequence output times the embedding,
    or its reverse embedding when untied, as ``CausalLM`` computes them).

    Args:
        backbone: the built keras-hub backbone.
        pad_id, bos_id, eos_id: the tokenizer's special ids (keras-hub's Llama and Mistral
            tokenizers: 0, 1, 2).
        name: the model's name (default: the backbone's).

    Returns:
        The `DecoderLM`, weights copied, in the backbone's dtype policy.

    Raises:
        TypeError: for another backbone.

    Examples:

        >>> import keras_hub, numpy as np
        >>> from keras_posenc.convert import from_keras_hub
        >>> backbone = keras_hub.models.MistralBackbone(
        ...     vocabulary_size=40, num_layers=2, num_query_heads=4, num_key_value_heads=2,
        ...     hidden_dim=16, intermediate_dim=32, sliding_window=4,
        ... )
        >>> model = from_keras_hub(backbone)
        >>> model.sliding_window, model.transformer_layers[0].attention.num_key_value_heads
        (4, 2)
    """
    names = _class_names(backbone)
    if not any(family in names for family in DECODERS):
        raise TypeError(
            f"from_keras_hub_decoder: `backbone` must be keras_hub's LlamaBackbone, "
            f"Llama3Backbone or MistralBackbone, got {type(backbone).__name__}."
        )
    config = backbone.get_config()
    head_dim = config.get("head_dim")
    model = DecoderLM(
        vocab_size=config["vocabulary_size"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        num_heads=config["num_query_heads"],
        num_layers=config["num_layers"],
        head_dim=head_dim,
        num_key_value_heads=config["num_key_value_heads"],
        activation="silu",
        layer_norm_epsilon=config["layer_norm_epsilon"],
        rotary=_rotary(config),
        sliding_window=config.get("sliding_window"),
        tie_word_embeddings=bool(backbone.token_embedding.tie_weights),
        dropout=float(config.get("dropout") or 0.0),
        pad_id=pad_id,
        bos_id=bos_id,
        eos_id=eos_id,
        name=name or backbone.name,
        dtype=backbone.dtype_policy,
    )
    _copy_weights(backbone, model)
    return model


# keras-hub's weight paths (its checkpoints' names: keras_hub/src/models/llama/llama_decoder.py
# and mistral_transformer_decoder.py) -> ours, within a block; read by path, so no private
# attribute of keras-hub's layers is touched.
_BLOCK_WEIGHTS = {
    "self_attention/query/kernel": "attention/query/kernel",
    "self_attention/key/kernel": "attention/key/kernel",
    "self_attention/value/kernel": "attention/value/kernel",
    "self_attention/attention_output/kernel": "attention/attention_output/kernel",
    "self_attention_layernorm/scale": "attention_norm/scale",
    "feedforward_gate_dense/kernel": "gate/kernel",
    "feedforward_intermediate_dense/kernel": "up/kernel",
    "feedforward_output_dense/kernel": "down/kernel",
    "feedforward_layernorm/scale": "feedforward_norm/scale",
}


def _our_path(path: str) -> str:
    """Our weight's path for keras-hub's ``path`` (the top-level ones are the same)."""
    layer, _, rest = path.partition("/")
    if layer.startswith("transformer_layer_") and rest in _BLOCK_WEIGHTS:
        return f"{layer}/{_BLOCK_WEIGHTS[rest]}"
    return path


def _copy_weights(backbone: Any, model: DecoderLM) -> None:
    ours = {weight.path: weight for weight in model.weights}
    theirs = {_our_path(weight.path): weight for weight in backbone.weights}
    if set(ours) != set(theirs):
        raise ValueError(
            f"from_keras_hub_decoder: the weights do not match: keras-hub's "
            f"{sorted(set(theirs) - set(ours))} have no counterpart, ours "
            f"{sorted(set(ours) - set(theirs))} no source."
        )
    for path, weight in ours.items():
        value = np.asarray(theirs[path].numpy() if hasattr(theirs[path], "numpy") else theirs[path])
        if tuple(value.shape) != tuple(weight.shape):
            raise ValueError(
                f"from_keras_hub_decoder: {path!r} has shape {tuple(value.shape)} in the "
                f"backbone, {tuple(weight.shape)} here."
            )
        weight.assign(value)
