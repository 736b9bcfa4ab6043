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


class CachedSequenceSpec:
    """``compute_output_spec`` of a sequence layer called as ``(inputs, mask, training,
    cache, cache_update_index)`` whose output has the input's shape rules
    (``compute_output_shape``) and which returns ``(output, cache)`` with a cache."""

    def compute_output_spec(
        self,
        inputs: Any,
        mask: Any = None,
        training: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
    ) -> Any:
        return output_with_cache_spec(
            self.compute_output_shape(inputs.shape), self.compute_dtype, cache
        )
