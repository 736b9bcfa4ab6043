"""Symbolic output specs shared by the layers that return ``(output, cache)`` when decoding."""

from __future__ import annotations

from typing import Any

import keras


def output_with_cache_spec(output_shape: tuple, dtype: str, cache: Any) -> Any:
    """The output's KerasTensor, paired with the cache's when a cache is passed.

    Keras' default spec inference would run ``call`` on symbolic tensors; the
    shapes here are known without it, and the cache comes back unchanged in shape.
    """
    output = keras.KerasTensor(output_shape, dtype=dtype)
    if cache is None:
        return output
    return output, keras.KerasTensor(cache.shape, dtype=cache.dtype)
