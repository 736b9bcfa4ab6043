"""The TensorFlow route: Keras' own exporter, run where TensorFlow is the backend (directly,
or in the export worker, keras_posenc/export/worker.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import keras
import numpy as np

from keras_posenc.export.artifacts import _describe_artifact
from keras_posenc.export.inputs import _VERIFY_LENGTHS, _sample_inputs
from keras_posenc.export.names import _names
from keras_posenc.export.precision import _as_float32


class _NamedOutputs(keras.Model):
    """``model`` with its outputs in a dict keyed by the export's output names.

    Keras' exporter names a SavedModel signature's outputs after the keys of a
    dict the model returns (``output_0``, ... for a list), and tf2onnx names
    the ONNX graph's outputs after them too (``Identity:0``, ... otherwise);
    the inputs are named after the input signature's specs. Never saved.
    """

    def __init__(self, model: keras.Model, names: list[str]) -> None:
        # float32: the wrapper itself must not cast the inputs to a mixed policy's dtype.
        super().__init__(name=f"{model.name}_named", dtype="float32")
        self.inner = model
        self.output_keys = list(names)
        # No weights of its own and the model is built: Keras exports built models only.
        self.built = True

    def call(self, inputs: Any) -> dict:
        outputs = keras.tree.flatten(self.inner(inputs, training=False))
        if len(outputs) != len(self.output_keys):
            raise ValueError(
                f"export_model: the model returned {len(outputs)} outputs, and "
                f"{len(self.output_keys)} output names were given ({self.output_keys})."
            )
        return dict(zip(self.output_keys, outputs, strict=True))


def _export_on_tensorflow(
    model: keras.Model,
    path: str,
    format: str,
    specs: list[dict],
    output_names: list[str] | None = None,
) -> dict:
    """Exports with Keras' own exporter; must run with the TensorFlow backend."""
    model = _as_float32(model)
    sample = _sample_inputs(specs, _VERIFY_LENGTHS[0], np.random.default_rng(0), zeros=True)
    if not getattr(model, "_called", True):
        model(sample)
    if output_names is None or any(spec.get("name") is None for spec in specs):
        input_names, output_names = _names(model, specs, None, output_names, "export_model")
        specs = [{**spec, "name": name} for spec, name in zip(specs, input_names)]
    signature = [keras.InputSpec(shape=s["shape"], dtype=s["dtype"], name=s["name"]) for s in specs]
    signature = [signature] if len(signature) > 1 else signature
    named = _NamedOutputs(model, output_names)
    if format == "litert":
        # Keras' LiteRT exporter insists on a ".tflite" name; the staged path may differ.
        with tempfile.TemporaryDirectory() as folder:
            flat = os.path.join(folder, "model.tflite")
            named.export(flat, format=format, verbose=False, input_signature=signature)
            shutil.move(flat, path)
        return _describe_artifact(path, format, [s["name"] for s in specs], output_names)
    named.export(path, format=format, verbose=False, input_signature=signature)
    if format == "onnx":
        _order_onnx_outputs(path, output_names)
    return _describe_artifact(path, format, [s["name"] for s in specs], output_names)


def _order_onnx_outputs(path: str, names: list[str]) -> None:
    """Puts the ONNX graph's outputs in the order of ``names`` (the model's: tf2onnx writes
    a dict's outputs sorted by key) and names its dynamic axes, which tf2onnx calls
    ``unk__1077``: ``batch`` first, then ``NAME_axis_I``, as the native route names them."""
    import onnx

    proto = onnx.load(path)
    for value in [*proto.graph.input, *proto.graph.output]:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                dim.dim_param = "batch" if axis == 0 else f"{value.name}_axis_{axis}"
    outputs = {value.name: value for value in proto.graph.output}
    if list(outputs) != names and set(outputs) == set(names):  # else _check_artifact_names
        ordered = [onnx.ValueInfoProto() for _ in names]
        for value, name in zip(ordered, names):
            value.CopyFrom(outputs[name])
        del proto.graph.output[:]
        proto.graph.output.extend(ordered)
    onnx.save(proto, path)
