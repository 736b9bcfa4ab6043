"""Verification: the artifact run as a user runs it, on the Keras model's inputs, and its
outputs compared with the model's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.export.artifacts import _litert_runner
from keras_posenc.export.inputs import _VERIFY_LENGTHS, _sample_inputs
from keras_posenc.export.report import ExportReport


def _run_artifact(report: ExportReport, inputs: Any) -> list[np.ndarray]:
    """Runs the artifact as a user would: inputs fed and outputs read by name."""
    arrays = inputs if isinstance(inputs, list) else [inputs]
    feed = {name: array for (name, _, _), array in zip(report.inputs, arrays, strict=True)}
    outputs = [name for name, _, _ in report.outputs]
    if report.format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(report.path, providers=["CPUExecutionProvider"])
        return [np.asarray(x) for x in session.run(outputs, feed)]
    if report.format == "litert":
        # The signature runner resizes its inputs to the arrays given (dynamic axes).
        results = _litert_runner(report.path)(**feed)
        return [np.asarray(results[name]) for name in outputs]
    import tensorflow as tf

    function = tf.saved_model.load(report.path).signatures["serving_default"]
    results = function(**{name: tf.constant(array) for name, array in feed.items()})
    return [results[name].numpy() for name in outputs]


def _verify(
    model: keras.Model,
    report: ExportReport,
    specs: list[dict],
    atol: float,
    rtol: float,
    verify_inputs: Sequence[Any] | None = None,
) -> None:
    if verify_inputs is None:
        dynamic = any(d is None for s in specs for d in s["shape"][1:])
        lengths = _VERIFY_LENGTHS if dynamic else _VERIFY_LENGTHS[:1]
        rng = np.random.default_rng(0)
        verify_inputs = [_sample_inputs(specs, length, rng) for length in lengths]
    worst = 0.0
    within = True
    for inputs in verify_inputs:
        shapes = [tuple(np.shape(x)) for x in (inputs if isinstance(inputs, list) else [inputs])]
        expected = [
            keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))
            for x in keras.tree.flatten(model(inputs, training=False))
        ]
        actual = _run_artifact(report, inputs)
        if len(expected) != len(actual):
            raise ValueError(
                f"export_model: the artifact has {len(actual)} outputs, the model {len(expected)}."
            )
        for index, (e, a) in enumerate(zip(expected, actual)):
            if e.shape != a.shape:
                raise ValueError(
                    f"export_model: artifact output shape {a.shape} != model's {e.shape}."
                )
            a = a.astype(np.float32)
            # A NaN compares False with every tolerance, so it would pass as no difference.
            for owner, values in (("the Keras model's", e), ("the artifact's", a)):
                bad = values.size - int(np.count_nonzero(np.isfinite(values)))
                if bad:
                    raise ValueError(
                        f"export_model: the outputs are not finite ({bad} of {values.size} "
                        f"values are NaN or Inf) in {owner} output {index}, at input shapes "
                        f"{shapes}; only finite outputs can be verified."
                    )
            if e.size:
                difference = float(np.max(np.abs(e - a)))
                worst = max(worst, difference)
                within = within and difference <= atol + rtol * float(np.max(np.abs(e)))
        report.verified_shapes.append(shapes)
    report.max_abs_difference = worst
    if not within:
        raise ValueError(
            f"export_model: the {report.format} artifact differs from the Keras model by "
            f"{worst:.3g}, more than atol={atol} + rtol={rtol} * max|expected| allows "
            f"(verified at {report.verified_shapes})."
        )
