"""Activations written so that every exporter understands them."""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from keras_posenc import _compile


@keras.saving.register_keras_serializable(package="keras_posenc")
def exact_gelu(x: Any) -> Any:
    """The exact GELU, ``0.5 * x * (1 + erf(x / sqrt(2)))``, that exports to ONNX.

    Numerically the same function as ``keras.activations.gelu(x, approximate=False)``,
    but that one lowers on TensorFlow to ``erfc``, which tf2onnx emits as an ``Erfc``
    node that no ONNX opset defines (onnxruntime rejects the graph). Written with
    ``erf`` it becomes the standard ONNX ``Erf`` op on every route. On PyTorch it is
    ``keras.ops.gelu(x, approximate=False)``, one fused kernel there (the formula
    took five passes over the tensor; `_compile.exact_gelu_as_one_op`).

    Args:
        x: a floating tensor.

    Returns:
        GELU(x), same shape and dtype.

    Examples:

        >>> import keras
        >>> y = exact_gelu(keras.ops.convert_to_tensor([-1.0, 0.0, 2.0]))
        >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(y)]
        [-0.1587, 0.0, 1.9545]

    Reference: Hendrycks and Gimpel, "Gaussian Error Linear Units (GELUs)", 2016.
    """
    x = ops.convert_to_tensor(x)
    if _compile.exact_gelu_as_one_op():
        return ops.gelu(x, approximate=False)
    return 0.5 * x * (1.0 + ops.erf(x * ops.cast(1.0 / math.sqrt(2.0), x.dtype)))


def get_activation(identifier: Any) -> Any:
    """``keras.activations.get``, except that ``"gelu"`` means :func:`exact_gelu`."""
    if identifier == "gelu":
        return exact_gelu
    return keras.activations.get(identifier)
