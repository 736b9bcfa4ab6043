"""Activations written so that every exporter understands them."""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_posenc")
def exact_gelu(x: Any) -> Any:
    """The exact GELU, ``0.5 * x * (1 + erf(x / sqrt(2)))``, that exports to ONNX.

    Numerically the same function as ``keras.activations.gelu(x, approximate=False)``,
    but that one lowers on TensorFlow to ``erfc``, which tf2onnx emits as an ``Erfc``
    node that no ONNX opset defines (onnxruntime rejects the graph). Written with
    ``erf`` it becomes the standard ONNX ``Erf`` op on every route. (PyTorch's one
    fused ``gelu`` instead gained CoAtNet-0 less than 1.3x together with two other
    overrides, so it was deleted: docs/development.md, "Backend kernels".)

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
    return 0.5 * x * (1.0 + ops.erf(x * ops.cast(1.0 / math.sqrt(2.0), x.dtype)))


@keras.saving.register_keras_serializable(package="keras_posenc")
def tanh_gelu(x: Any) -> Any:
    """GELU's tanh approximation, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``.

    The GELU of the official MaxViT code (TensorFlow's ``gelu(approximate=True)``) and
    of timm's ``maxvit_*_tf`` ports (``act_layer="gelu_tanh"``): their weights were
    trained with it, so their outputs are reproduced with it, not with the exact GELU.
    Written with ``tanh`` so that every exporter understands it.

    Args:
        x: a floating tensor.

    Returns:
        the approximate GELU of x, same shape and dtype.

    Examples:

        >>> import keras
        >>> y = tanh_gelu(keras.ops.convert_to_tensor([-1.0, 0.0, 2.0]))
        >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(y)]
        [-0.1588, 0.0, 1.9546]

    Reference: Hendrycks and Gimpel, "Gaussian Error Linear Units (GELUs)", 2016.
    """
    x = ops.convert_to_tensor(x)
    inner = ops.cast(math.sqrt(2.0 / math.pi), x.dtype) * (
        x + ops.cast(0.044715, x.dtype) * x * x * x
    )
    return 0.5 * x * (1.0 + ops.tanh(inner))


#: The activation names that mean one of the functions above rather than Keras' own.
NAMED = {"gelu": exact_gelu, "gelu_tanh": tanh_gelu}


def get_activation(identifier: Any) -> Any:
    """``keras.activations.get``, except for the names of :data:`NAMED`: ``"gelu"`` is
    :func:`exact_gelu` and ``"gelu_tanh"`` :func:`tanh_gelu`."""
    if isinstance(identifier, str) and identifier in NAMED:
        return NAMED[identifier]
    return keras.activations.get(identifier)
