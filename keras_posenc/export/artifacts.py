"""What an artifact holds: its inputs' and outputs' names, shapes and dtypes, and its ONNX
opset, read from the file itself (onnxruntime, ``tf.saved_model.load``, LiteRT's
interpreter)."""

from __future__ import annotations

from typing import Any

import numpy as np


def _litert_runner(path: str) -> Any:
    """The ``serving_default`` signature of a LiteRT file, run by ai_edge_litert's
    interpreter (LiteRT's own runtime, what a phone runs, not TensorFlow's)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    return interpreter.get_signature_runner("serving_default")


def _describe_artifact(
    path: str, format: str, input_names: list[str], output_names: list[str]
) -> dict:
    """The artifact's inputs and outputs as ``[name, shape, dtype]``: an ONNX graph's in
    its order, a SavedModel signature's (a mapping) in the order of the names asked for,
    then any others sorted."""
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

        def describe(values: Any) -> list:
            return [
                [v.name, [d if isinstance(d, int) else None for d in v.shape], v.type]
                for v in values
            ]

        import onnx

        opset = max(o.version for o in onnx.load(path).opset_import if o.domain in ("", "ai.onnx"))
        return {
            "inputs": describe(session.get_inputs()),
            "outputs": describe(session.get_outputs()),
            "opset": int(opset),
        }
    if format == "litert":
        runner = _litert_runner(path)

        def describe_litert(values: dict, names: list[str]) -> list:
            order = [n for n in names if n in values] + sorted(set(values) - set(names))
            return [
                [k, [None if d < 0 else int(d) for d in values[k]["shape_signature"]],
                 np.dtype(values[k]["dtype"]).name]
                for k in order
            ]  # fmt: skip

        return {
            "inputs": describe_litert(runner.get_input_details(), input_names),
            "outputs": describe_litert(runner.get_output_details(), output_names),
        }
    import tensorflow as tf

    function = tf.saved_model.load(path).signatures["serving_default"]

    def describe(values: dict, names: list[str]) -> list:
        order = [n for n in names if n in values] + sorted(set(values) - set(names))
        return [[k, list(values[k].shape), values[k].dtype.name] for k in order]

    return {
        "inputs": describe(function.structured_input_signature[1], input_names),
        "outputs": describe(function.structured_outputs, output_names),
    }
