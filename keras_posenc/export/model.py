""":func:`export_model`: one model to one verified artifact, by the route its backend and
arguments choose (the one module of the export that branches on the Keras backend:
tests/test_package.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc import _quiet
from keras_posenc._packages import EXPORTER_PACKAGES, package_found, package_status
from keras_posenc.export import staging
from keras_posenc.export.inputs import _VERIFY_LENGTHS, _input_specs, _sample_inputs
from keras_posenc.export.memory import check_tf2onnx_memory
from keras_posenc.export.names import _check_artifact_names, _names
from keras_posenc.export.native_torch import _NATIVE_OPSET, _export_native_torch
from keras_posenc.export.precision import _all_layers, _is_mixed
from keras_posenc.export.report import ExportReport
from keras_posenc.export.tensorflow_route import _export_on_tensorflow
from keras_posenc.export.verification import _verify
from keras_posenc.export.worker import _export_in_subprocess
from keras_posenc.layers._checks import check_non_negative_number

FORMATS = ("onnx", "tf_saved_model", "litert")
ROUTES = ("tensorflow", "native")


def export_model(
    model: keras.Model,
    path: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (Keras' own export uses this name)
    verify: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    input_signature: Sequence[keras.InputSpec] | None = None,
    route: str = "tensorflow",
    check_memory: bool = True,
    verify_inputs: Sequence[Any] | None = None,
    overwrite: bool = False,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    verbose: bool = False,
) -> ExportReport:
    """Exports ``model`` to ONNX or a TensorFlow SavedModel, from any backend, and verifies it.

    The artifact is written to a temporary path beside ``path`` (a hidden
    ``.posenc-export-*`` folder) and moved to ``path`` only after it has
    verified: when anything fails, nothing is left at ``path`` and a file or
    folder that was there is unchanged.

    Args:
        model: a ``keras.Model`` whose layers are registered Keras serialisables
            (every keras-posenc layer is). A model never called is called once
            on zeros shaped like its inputs.
        path: the ``.onnx`` file or the SavedModel directory to write; its
            parent folders are created. If something is there already (an
            empty folder does not count), ``overwrite=True`` is needed.
        format: ``"onnx"``, ``"tf_saved_model"`` or ``"litert"`` (a ``.tflite`` file).
        verify: run the artifact and the Keras model on the same random inputs
            (batch 2, and sequence lengths 7 and 11 for dynamic axes) and compare.
            An output with NaN or Inf values, in the model or the artifact,
            fails the verification.
        atol: the absolute part of the verification's tolerance: an output
            passes when ``max|keras - artifact| <= atol + rtol * max|keras|``.
            A finite number >= 0 (0 asks for identical outputs).
        rtol: the relative part, which scales the tolerance with the output's
            magnitude: float32 reordering noise in logits of size 5-10 reaches
            1e-4 by itself (seen on a ConvS2S decoder step), which says
            nothing about the export. A finite number >= 0.
        input_signature: optional list of ``keras.InputSpec`` (one per model
            input) to export with instead of the model's own input shapes.
        route: ``"tensorflow"`` (Keras' exporter on TensorFlow: directly, or in
            a TensorFlow subprocess from JAX and PyTorch) or ``"native"``
            (ONNX only, PyTorch backend only: ``torch.onnx.export`` of the
            model itself, traced at batch 3 and length 5, with the ``None``
            axes dynamic).
        check_memory: before a tf2onnx conversion, estimate the memory it
            needs (``TF2ONNX_BASE_BYTES + TF2ONNX_BYTES_PER_PARAMETER *
            parameters``) and raise ``MemoryError`` if the machine has less
            available; ``False`` converts anyway.
        verify_inputs: optional list of input sets (each what the model takes:
            an array, or a list of arrays) to verify with instead of random
            ones, for models whose inputs must be consistent with each other
            (:func:`export_seq2seq` passes real encoder states and caches).
        overwrite: replace what is at ``path`` (once the new artifact has
            verified); False (default) refuses an existing target.
        input_names: the names of the graph's inputs, one per model input;
            default: the ``name`` of each spec of ``input_signature``, else of
            the model's ``keras.Input`` layers, see :func:`export_names`.
        output_names: the names of the graph's outputs, one per output
            (flattened as ``keras.tree.flatten`` does); default: the keys of a
            dict of outputs, else the names of the layers that produce them.
        verbose: show what TensorFlow, tf2onnx and LiteRT print while exporting
            and verifying (the TensorFlow subprocess's output too); by default
            it is captured and shown only if the export fails (so is it with
            ``KERAS_POSENC_VERBOSE=1``, keras_posenc/_quiet.py).

    Every format and route gives the graph the same names: the ONNX graph's
    inputs and outputs (``onnxruntime.InferenceSession(path).get_inputs()``),
    in the model's order, and the SavedModel's ``serving_default`` signature
    keys. The export fails if the artifact's names differ from them.

    Returns:
        An :class:`ExportReport`.

    Raises:
        ValueError: for an unknown format or route, ``route="native"`` off
            PyTorch or with SavedModel, ``input_names`` or ``output_names``
            that are not one distinct name (a letter, then letters, digits
            or ``_``) per input or output, an ``atol`` or ``rtol`` that is
            negative, NaN or infinite, or if the verification finds outputs
            that are not finite or a difference above that tolerance (the
            message gives it).
        FileExistsError: if something is at ``path`` and ``overwrite`` is False.
        MemoryError: if a tf2onnx conversion is estimated to need more memory
            than is available (the message gives both and the alternatives).
        ImportError: if a package the format needs is missing (the message says
            what to install).
        RuntimeError: if exporting in the TensorFlow subprocess fails (its error
            comes first; when loading the model there failed, an unregistered
            custom layer is the usual cause), or if PyTorch's exporter fails on
            the native route.

    Examples:

        >>> import keras, os, tempfile
        >>> from keras_posenc.export import export_model
        >>> inputs = keras.Input((None, 8))
        >>> model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
        >>> folder = tempfile.mkdtemp()
        >>> report = export_model(model, os.path.join(folder, "m.onnx"))  # doctest: +SKIP
        >>> report.max_abs_difference < 1e-4  # doctest: +SKIP
        True
    """
    path = os.fspath(path)
    if format not in FORMATS:
        raise ValueError(
            f"export_model: `format` must be one of {', '.join(map(repr, FORMATS))}; "
            f"got {format!r}."
        )
    backend = keras.backend.backend()
    if route not in ROUTES:
        raise ValueError(
            f"export_model: `route` must be one of {', '.join(map(repr, ROUTES))}; got {route!r}."
        )
    if route == "native" and (backend != "torch" or format != "onnx"):
        raise ValueError(
            "export_model: route='native' exports ONNX with torch.onnx.export and needs "
            f"format='onnx' on the torch backend; got format={format!r} on the {backend} "
            "backend. Use route='tensorflow' (the default), which works from every backend."
        )
    atol = check_non_negative_number("export_model", "atol", atol)
    rtol = check_non_negative_number("export_model", "rtol", rtol)
    staging.check_target(path, overwrite, "export_model")
    packages = ("torch", "onnx", "onnxruntime") if route == "native" else EXPORTER_PACKAGES[format]
    # Through a TensorFlow subprocess, only that process imports TensorFlow and tf2onnx.
    check = package_found if backend != "tensorflow" and route != "native" else package_status
    missing = [status for status in map(check, packages) if not status.importable]
    if missing:
        names = ", ".join(f"{p.name} ({p.error})" for p in missing)
        raise ImportError(
            f"export_model: exporting to {format!r} needs {names}. "
            'Install them with: pip install "keras-posenc[export]"'
        )
    if not isinstance(model, keras.Model):
        raise TypeError(f"export_model: `model` must be a keras.Model; got {type(model).__name__}.")
    specs = _input_specs(model, input_signature)
    outputs = None
    if not model.built or not getattr(model, "_called", True):
        # The caller's inputs where given: a model may accept only some sizes (an
        # any-size MaxViT: multiples of its windows), which the default length misses.
        outputs = model(
            verify_inputs[0]
            if verify_inputs
            else _sample_inputs(specs, _VERIFY_LENGTHS[0], np.random.default_rng(0), zeros=True)
        )
    names, output_names = _names(model, specs, input_names, output_names, "export_model", outputs)
    specs = [{**spec, "name": name} for spec, name in zip(specs, names)]

    notes = []
    if any(_is_mixed(layer) for layer in _all_layers(model)):
        notes.append(
            "the model uses a mixed-precision policy; it was exported in float32 "
            "(a bfloat16 ONNX graph does not load in onnxruntime)"
        )
    if format == "onnx" and route == "tensorflow" and check_memory:
        check_tf2onnx_memory(model)
    quiet = contextlib.nullcontext() if verbose else _quiet.quieted()
    with quiet, staging.staged([path], overwrite, "export_model") as (staged,):
        if route == "native":
            details = _export_native_torch(model, staged, specs, output_names)
            taken = f"torch.onnx.export (TorchScript tracer, opset {_NATIVE_OPSET}) on torch"
        elif backend == "tensorflow":
            details = _export_on_tensorflow(model, staged, format, specs, output_names)
            taken = "tensorflow (direct)"
        else:
            details = _export_in_subprocess(model, staged, format, specs, output_names, verbose)
            taken = f"tensorflow subprocess from {backend} (via .keras)"
        report = ExportReport(
            format=format,
            path=staged,
            route=taken,
            inputs=[tuple(x) for x in details["inputs"]],
            outputs=[tuple(x) for x in details["outputs"]],
            opset=details.get("opset"),
            notes=notes,
        )
        _check_artifact_names(report, names, output_names)
        if verify:
            _verify(model, report, specs, atol, rtol, verify_inputs)
    report.path = path
    return report
