"""Mixed precision at export: a mixed-precision model is exported as its float32 copy
(a bfloat16 ONNX graph does not load in onnxruntime)."""

from __future__ import annotations

from typing import Any

import keras


def _all_layers(model: keras.Model) -> list:
    layers = []
    for layer in model._flatten_layers(include_self=False):
        layers.append(layer)
    return layers


def _is_mixed(layer: keras.layers.Layer) -> bool:
    policy = layer.dtype_policy
    return policy.compute_dtype != policy.variable_dtype


def _float32_config(config: Any) -> Any:
    """``config`` with every dtype policy replaced by float32."""
    if isinstance(config, dict):
        if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and isinstance(
            config.get("config"), dict
        ):
            return {**config, "config": {**config["config"], "name": "float32"}}
        return {key: _float32_config(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_float32_config(value) for value in config]
    if isinstance(config, str) and config.startswith("mixed_"):
        return "float32"
    return config


def _as_float32(model: keras.Model) -> keras.Model:
    """A float32 copy of a mixed-precision model with the same weights (the model itself if not)."""
    if not any(_is_mixed(layer) for layer in _all_layers(model)):
        return model
    config = _float32_config(keras.saving.serialize_keras_object(model))
    copy = keras.saving.deserialize_keras_object(config)
    copy.set_weights(model.get_weights())
    return copy
