"""JAX's overrides of the reference kernels (`keras_posenc.backend.common`).

Each says where it was measured; the numbers are in docs/benchmark-notes.md and the list of
kept overrides in docs/development.md ("Backend kernels").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import keras
import numpy as np

from keras_posenc.backend import algorithms, common
from keras_posenc.backend._registry import REFERENCE, Registrar

_HERE = Registrar("jax")
override, device_query = _HERE.override, _HERE.device_query


@device_query
def device_kind() -> str:
    """JAX's default backend: where it places arrays and runs programs."""
    kind = jax.default_backend()
    return kind if kind in ("cpu", "tpu") else "gpu"  # "gpu", "cuda", "rocm"


@override(
    common.depthwise_conv2d,
    measured="3 x 3 depthwise convolution of an (8, 56, 56, 384) map (CoAtNet-0's first "
    "stage), 2 CPU cores: XLA's CPU convolution with feature groups was several times "
    "slower than nine shifted multiply-adds, which XLA fuses (benchmarks/coatnet_parts.py)",
)
def depthwise_conv2d(x: Any, kernel: Any, strides: int, pad: int) -> Any:
    if None in tuple(x.shape[1:3]):
        return REFERENCE  # the shifts need a static height and width
    return algorithms.depthwise_by_shifts(x, kernel, strides, pad)


@override(
    common.compile_function,
    devices=None,
    measured="JAX's own compiler: jax.jit of a stateless version, the variables' current "
    "values passed in on every call, so no stale weights are baked in",
)
def compile_function(
    function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
) -> Callable[..., Any]:
    variables = list(variables)

    def stateless(values: list, *args: Any) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
            return function(*args)

    jitted = jax.jit(stateless)

    def call(*args: Any) -> Any:
        return jitted([v.value for v in variables], *args)

    return call


@override(
    common.concrete_values, devices=None, measured="a traced array has no values", guarded=True
)
def concrete_values(x: Any) -> Any:
    if isinstance(x, jax.core.Tracer) and not isinstance(x, np.ndarray):
        return None
    return REFERENCE
