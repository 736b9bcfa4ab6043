"""The native PyTorch route: ONNX through ``torch.onnx.export`` (TorchScript tracing) on the
torch backend, with no TensorFlow subprocess."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc.export.artifacts import _describe_artifact
from keras_posenc.export.precision import _as_float32

# The ONNX opset of the native PyTorch route (LayerNormalization needs 17).
_NATIVE_OPSET = 17


def _torch_module(model: keras.Model, structured: bool) -> Any:
    """The model as the ``torch.nn.Module`` that ``torch.onnx.export`` traces: flat
    tensors in (one per input), a flat tuple of tensors out."""
    import torch

    class Forward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *arrays: Any) -> tuple:
            inputs = list(arrays) if structured else arrays[0]
            return tuple(keras.tree.flatten(self.model(inputs, training=False)))

    return Forward().eval()


def _native_symbolics() -> dict:
    """TorchScript-exporter symbolics for ops Keras' torch backend emits that the
    built-in ones reject (seen with torch 2.13): ``aten::ravel`` (no symbolic at all),
    ``aten::permute`` and ``aten::moveaxis`` with negative axes (written as-is into
    an invalid Transpose),
    and ``aten::layer_norm`` whose normalized shape is traced from ``x.shape``
    (not a constant once an axis is dynamic)."""
    import torch
    from torch.onnx import symbolic_helper

    def ravel(g: Any, x: Any) -> Any:
        return g.op("Reshape", x, g.op("Constant", value_t=torch.tensor([-1])))

    def permute(g: Any, x: Any, dims: Any) -> Any:
        dims = symbolic_helper._get_const(dims, "is", "dims")
        return g.op("Transpose", x, perm_i=[d % len(dims) for d in dims])

    def layer_norm(g: Any, x: Any, shape: Any, weight: Any, bias: Any, eps: Any, cudnn: Any) -> Any:
        node = shape.node()
        if node.kind() == "prim::ListConstruct":
            rank = len(list(node.inputs()))
        else:
            rank = len(symbolic_helper._get_const(shape, "is", "normalized_shape"))
        epsilon = symbolic_helper._get_const(eps, "f", "eps")
        return g.op("LayerNormalization", x, weight, bias, axis_i=-rank, epsilon_f=epsilon)

    def moveaxis(g: Any, x: Any, source: Any, destination: Any) -> Any:
        rank = symbolic_helper._get_tensor_rank(x)
        source = [d % rank for d in symbolic_helper._get_const(source, "is", "source")]
        destination = [d % rank for d in symbolic_helper._get_const(destination, "is", "dest")]
        order = [d for d in range(rank) if d not in source]
        for target, axis in sorted(zip(destination, source)):
            order.insert(target, axis)
        return g.op("Transpose", x, perm_i=order)

    return {
        "aten::ravel": ravel,
        "aten::permute": permute,
        "aten::layer_norm": layer_norm,
        "aten::moveaxis": moveaxis,
        "aten::movedim": moveaxis,
    }


def _export_native_torch(
    model: keras.Model, path: str, specs: list[dict], output_names: list[str]
) -> dict:
    """ONNX through ``torch.onnx.export``; must run with the torch backend."""
    import warnings

    import torch

    model = _as_float32(model)
    # Traced at sizes the verification does not use (batch 3, length 5), so a size the
    # tracer froze into the graph shows up as a difference or a shape error there.
    rng = np.random.default_rng(1)
    arrays = []
    for spec in specs:
        shape = [
            3 if i == 0 and d is None else (5 if d is None else d)
            for i, d in enumerate(spec["shape"])
        ]
        dtype = np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.integer):
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    names = [spec["name"] for spec in specs]
    dynamic_axes = {
        name: {
            i: "batch" if i == 0 else f"{name}_axis_{i}"
            for i, d in enumerate(spec["shape"])
            if d is None
        }
        for name, spec in zip(names, specs)
    }
    module = _torch_module(model, structured=len(specs) > 1)
    symbolics = _native_symbolics()
    for name, function in symbolics.items():
        torch.onnx.register_custom_op_symbolic(name, function, _NATIVE_OPSET)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # The tracer warns about every Python value it records; the verification
            # at other sizes is what tells whether one of them mattered.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                tuple(torch.as_tensor(a) for a in arrays),
                path,
                dynamo=False,
                opset_version=_NATIVE_OPSET,
                input_names=names,
                output_names=output_names,
                dynamic_axes={k: v for k, v in dynamic_axes.items() if v},
                do_constant_folding=True,
            )
    except Exception as error:  # the exporter's own error says which op failed
        raise RuntimeError(
            f"export_model: torch.onnx.export failed on route='native' ({type(error).__name__}: "
            f"{str(error)[:2000]}). route='tensorflow' (the default) exports through a "
            "TensorFlow subprocess instead."
        ) from error
    finally:
        for name in symbolics:
            torch.onnx.unregister_custom_op_symbolic(name, _NATIVE_OPSET)
    return _describe_artifact(path, "onnx", names, output_names)
