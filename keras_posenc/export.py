"""Export models to TensorFlow SavedModel and ONNX from any backend, verified.

Keras' own ``model.export`` works on the TensorFlow backend for both formats;
from PyTorch and JAX it is broken or incomplete with the versions this project
supports (SavedModel from torch needs torch_xla; ONNX from JAX needs jax2onnx
and fails on dynamic lengths). :func:`export_model` therefore exports on
TensorFlow: directly when TensorFlow is the active backend, otherwise by saving
the model as ``.keras`` and loading it in a subprocess with
``KERAS_BACKEND=tensorflow`` (design.md, "Export design"). It then runs the
artifact (onnxruntime, or ``tf.saved_model.load``) on the same random inputs as
the Keras model, at two sequence lengths when the model has dynamic axes, and
reports the largest absolute difference.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

FORMATS = ("onnx", "tf_saved_model")

# The packages each export format needs, in the order they are imported.
EXPORTER_PACKAGES: dict[str, tuple[str, ...]] = {
    "tf_saved_model": ("tensorflow",),
    "onnx": ("tensorflow", "tf2onnx", "onnx", "onnxruntime"),
}

# Sizes given to axes that are None in the model's inputs when verifying: batch,
# then two different sequence lengths so a graph fixed to one length is caught.
_VERIFY_BATCH = 2
_VERIFY_LENGTHS = (7, 11)


@dataclasses.dataclass(frozen=True)
class PackageStatus:
    """Whether one package imports, with its version or the import error."""

    name: str
    version: str | None
    error: str | None

    @property
    def importable(self) -> bool:
        return self.error is None


def package_status(name: str) -> PackageStatus:
    """Tries to import ``name``; reports its installed version or why it failed.

    Examples:

        >>> package_status("numpy").importable
        True
        >>> package_status("surely_not_a_package").importable
        False
    """
    try:
        importlib.import_module(name)
    except Exception as error:  # any failure means the exporter cannot run
        return PackageStatus(name, None, f"{type(error).__name__}: {error}")
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return PackageStatus(name, version, None)


def exporter_status() -> dict[str, list[PackageStatus]]:
    """For each export format, the status of every package it needs.

    A format is usable when every package it lists is importable; install the
    missing ones with ``pip install "keras-posenc[export]"``.

    Examples:

        >>> status = exporter_status()
        >>> sorted(status)
        ['onnx', 'tf_saved_model']
    """
    cache: dict[str, PackageStatus] = {}
    report = {}
    for format_name, packages in EXPORTER_PACKAGES.items():
        report[format_name] = [cache.setdefault(p, package_status(p)) for p in packages]
    return report


@dataclasses.dataclass
class ExportReport:
    """What :func:`export_model` did and measured.

    Attributes:
        format: ``"onnx"`` or ``"tf_saved_model"``.
        path: where the artifact was written.
        route: how it was exported, e.g. ``"tensorflow (direct)"`` or
            ``"tensorflow subprocess from torch"``.
        inputs: ``(name, shape, dtype)`` of each artifact input (None = dynamic).
        outputs: ``(name, shape, dtype)`` of each artifact output.
        opset: the ONNX opset (None for SavedModel).
        max_abs_difference: the largest absolute difference between the artifact's
            and the Keras model's outputs over the verification runs (None if
            ``verify=False``).
        verified_shapes: the input shapes the verification ran with.
        notes: anything the user should know (e.g. a float32 conversion).
    """

    format: str
    path: str
    route: str
    inputs: list[tuple[str, tuple, str]]
    outputs: list[tuple[str, tuple, str]]
    opset: int | None = None
    max_abs_difference: float | None = None
    verified_shapes: list[list[tuple]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def table(self) -> str:
        """The report as an aligned two-column text table."""
        rows = [
            ("format", self.format),
            ("path", self.path),
            ("route", self.route),
            ("inputs", "; ".join(f"{n} {list(s)} {d}" for n, s, d in self.inputs)),
            ("outputs", "; ".join(f"{n} {list(s)} {d}" for n, s, d in self.outputs)),
            ("onnx opset", "-" if self.opset is None else str(self.opset)),
            (
                "max |difference|",
                "not verified"
                if self.max_abs_difference is None
                else f"{self.max_abs_difference:.3g}",
            ),
            ("verified at", "; ".join(str(s) for s in self.verified_shapes) or "-"),
        ]
        rows += [("note", note) for note in self.notes]
        width = max(len(key) for key, _ in rows)
        return "\n".join(f"{key:<{width}}  {value}" for key, value in rows)


def export_model(
    model: keras.Model,
    path: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (Keras' own export uses this name)
    verify: bool = True,
    atol: float = 1e-4,
    input_signature: Sequence[keras.InputSpec] | None = None,
) -> ExportReport:
    """Exports ``model`` to ONNX or a TensorFlow SavedModel, from any backend, and verifies it.

    Args:
        model: a ``keras.Model`` whose layers are registered Keras serialisables
            (every keras-posenc layer is). A model never called is called once
            on zeros shaped like its inputs.
        path: the ``.onnx`` file or the SavedModel directory to write.
        format: ``"onnx"`` or ``"tf_saved_model"``.
        verify: run the artifact and the Keras model on the same random inputs
            (batch 2, and sequence lengths 7 and 11 for dynamic axes) and compare.
        atol: the largest absolute difference accepted by the verification.
        input_signature: optional list of ``keras.InputSpec`` (one per model
            input) to export with instead of the model's own input shapes.

    Returns:
        An :class:`ExportReport`.

    Raises:
        ValueError: for an unknown format, or if the verification finds a
            difference above ``atol`` (the message gives it).
        ImportError: if a package the format needs is missing (the message says
            what to install).
        RuntimeError: if exporting in the TensorFlow subprocess fails (its error
            is included; an unregistered custom layer is the usual cause).

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
    missing = [p for p in exporter_status()[format] if not p.importable]
    if missing:
        names = ", ".join(f"{p.name} ({p.error})" for p in missing)
        raise ImportError(
            f"export_model: exporting to {format!r} needs {names}. "
            'Install them with: pip install "keras-posenc[export]"'
        )
    if not isinstance(model, keras.Model):
        raise TypeError(f"export_model: `model` must be a keras.Model; got {type(model).__name__}.")
    specs = _input_specs(model, input_signature)
    if not model.built or not getattr(model, "_called", True):
        model(_sample_inputs(specs, _VERIFY_LENGTHS[0], np.random.default_rng(0), zeros=True))

    backend = keras.backend.backend()
    notes = []
    if any(_is_mixed(layer) for layer in _all_layers(model)):
        notes.append(
            "the model uses a mixed-precision policy; it was exported in float32 "
            "(a bfloat16 ONNX graph does not load in onnxruntime)"
        )
    if backend == "tensorflow":
        details = _export_on_tensorflow(model, path, format, specs)
        route = "tensorflow (direct)"
    else:
        details = _export_in_subprocess(model, path, format, specs)
        route = f"tensorflow subprocess from {backend} (via .keras)"
    report = ExportReport(
        format=format,
        path=path,
        route=route,
        inputs=[tuple(x) for x in details["inputs"]],
        outputs=[tuple(x) for x in details["outputs"]],
        opset=details.get("opset"),
        notes=notes,
    )
    if verify:
        _verify(model, report, specs, atol)
    return report


def export_seq2seq(
    model: keras.Model,
    directory: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (as export_model)
    verify: bool = True,
    atol: float = 1e-4,
) -> dict[str, ExportReport]:
    """Exports a sequence-to-sequence zoo model as an encoder graph and a one-step decoder graph.

    The two graphs are :class:`~keras_posenc.zoo.seq2seq.Seq2SeqEncoder`
    (``encoder_token_ids -> encoder state``) and
    :class:`~keras_posenc.zoo.seq2seq.Seq2SeqDecoderStep` (``[token_ids,
    index, *cache] -> [logits, *new_cache]``), each exported and verified by
    :func:`export_model`. A runtime decodes with them as
    :mod:`keras_posenc.generation` does: run the encoder once; the cache
    starts as the encoder state followed by zeros for the decoder buffers
    (their shapes are in the step's report); feed ``bos_id`` at index 0, then
    each chosen token, passing the returned cache back in.

    Args:
        model: a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`.
        directory: folder for ``encoder`` and ``decoder_step`` (``.onnx`` files
            or SavedModel folders).
        format: ``"onnx"`` or ``"tf_saved_model"``.
        verify: verify each graph as :func:`export_model` does (the encoder and
            the cache's source axis at two source lengths).
        atol: the largest absolute difference accepted.

    Returns:
        ``{"encoder": report, "decoder_step": report}``.

    Raises:
        TypeError: if ``model`` does not follow the decoding contract.
    """
    from keras_posenc.zoo.seq2seq import (
        Seq2SeqDecoderStep,
        Seq2SeqEncoder,
        Seq2SeqModel,
        decoding_signatures,
    )

    if not isinstance(model, Seq2SeqModel):
        raise TypeError(
            "export_seq2seq: `model` must be a keras_posenc.zoo.seq2seq.Seq2SeqModel "
            f"(a sequence-to-sequence zoo model); got {type(model).__name__}."
        )
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    suffix = ".onnx" if format == "onnx" else ""
    encoder_signature, step_signature = decoding_signatures(model)
    graphs = {
        "encoder": (Seq2SeqEncoder(model, name="encoder"), encoder_signature),
        "decoder_step": (Seq2SeqDecoderStep(model, name="decoder_step"), step_signature),
    }
    return {
        name: export_model(
            graph,
            os.path.join(directory, name + suffix),
            format=format,
            verify=verify,
            atol=atol,
            input_signature=signature,
        )
        for name, (graph, signature) in graphs.items()
    }


# --------------------------------------------------------------------------- internals


def _input_specs(model: keras.Model, input_signature: Any) -> list[dict]:
    """Each model input as {"shape": [...], "dtype": str}, batch axis first."""
    if input_signature is not None:
        specs = list(input_signature)
        return [{"shape": list(s.shape), "dtype": str(s.dtype or "float32")} for s in specs]
    try:
        inputs = keras.tree.flatten(model.inputs)
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise ValueError(
            "export_model: the model has no symbolic inputs (a subclassed model?); "
            "pass `input_signature=[keras.InputSpec(shape=..., dtype=...)]`."
        )
    return [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in inputs]


def _sample_inputs(
    specs: list[dict], length: int, rng: np.random.Generator, zeros: bool = False
) -> Any:
    arrays = []
    for spec in specs:
        shape = [
            _VERIFY_BATCH if i == 0 and d is None else (length if d is None else d)
            for i, d in enumerate(spec["shape"])
        ]
        dtype = np.dtype(spec["dtype"]) if spec["dtype"] != "bfloat16" else np.float32
        if zeros:
            arrays.append(np.zeros(shape, dtype))
        elif np.issubdtype(dtype, np.integer):
            # Ids 0 and 1 exist in any vocabulary (and 0 may be padding): safe for embeddings.
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        elif dtype == np.bool_:
            arrays.append(np.ones(shape, dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    return arrays[0] if len(arrays) == 1 else arrays


def _all_layers(model: keras.Model) -> list:
    layers = []
    for layer in model._flatten_layers(include_self=False):
        layers.append(layer)
    return layers


def _is_mixed(layer: keras.layers.Layer) -> bool:
    policy = layer.dtype_policy
    return policy.compute_dtype != policy.variable_dtype


def _float32_config(config: Any) -> Any:
    """``config`` with every dtype policy replaced by float32."""
    if isinstance(config, dict):
        if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and isinstance(
            config.get("config"), dict
        ):
            return {**config, "config": {**config["config"], "name": "float32"}}
        return {key: _float32_config(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_float32_config(value) for value in config]
    if isinstance(config, str) and config.startswith("mixed_"):
        return "float32"
    return config


def _as_float32(model: keras.Model) -> keras.Model:
    """A float32 copy of a mixed-precision model with the same weights (the model itself if not)."""
    if not any(_is_mixed(layer) for layer in _all_layers(model)):
        return model
    config = _float32_config(keras.saving.serialize_keras_object(model))
    copy = keras.saving.deserialize_keras_object(config)
    copy.set_weights(model.get_weights())
    return copy


def _export_on_tensorflow(model: keras.Model, path: str, format: str, specs: list[dict]) -> dict:
    """Exports with Keras' own exporter; must run with the TensorFlow backend."""
    model = _as_float32(model)
    signature = [keras.InputSpec(shape=s["shape"], dtype=s["dtype"]) for s in specs]
    signature = [signature] if len(signature) > 1 else signature
    if not getattr(model, "_called", True):
        model(_sample_inputs(specs, _VERIFY_LENGTHS[0], np.random.default_rng(0), zeros=True))
    model.export(path, format=format, verbose=False, input_signature=signature)
    return _describe_artifact(path, format)


def _describe_artifact(path: str, format: str) -> dict:
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
    import tensorflow as tf

    function = tf.saved_model.load(path).signatures["serving_default"]
    inputs = function.structured_input_signature[1]
    outputs = function.structured_outputs
    return {
        "inputs": [[k, list(v.shape), v.dtype.name] for k, v in sorted(inputs.items())],
        "outputs": [[k, list(v.shape), v.dtype.name] for k, v in sorted(outputs.items())],
    }


def _export_in_subprocess(model: keras.Model, path: str, format: str, specs: list[dict]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "model.keras")
        model.save(source)
        request = os.path.join(folder, "request.json")
        with open(request, "w") as handle:
            json.dump({"source": source, "path": path, "format": format, "specs": specs}, handle)
        env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
        result = subprocess.run(
            [sys.executable, "-m", "keras_posenc.export", request],
            capture_output=True,
            text=True,
            env=env,
            timeout=3600,
        )
        if result.returncode != 0:
            tail = "\n".join(result.stderr.strip().splitlines()[-15:])
            raise RuntimeError(
                f"export_model: exporting to {format!r} in a TensorFlow subprocess failed. "
                "Every custom layer must be registered with "
                "@keras.saving.register_keras_serializable and importable there.\n" + tail
            )
        with open(request + ".out") as handle:
            return json.load(handle)


def _run_artifact(report: ExportReport, inputs: Any) -> list[np.ndarray]:
    arrays = inputs if isinstance(inputs, list) else [inputs]
    if report.format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(report.path, providers=["CPUExecutionProvider"])
        feed = {spec.name: array for spec, array in zip(session.get_inputs(), arrays)}
        return [np.asarray(x) for x in session.run(None, feed)]
    import tensorflow as tf

    function = tf.saved_model.load(report.path).signatures["serving_default"]
    names = sorted(function.structured_input_signature[1], key=_natural)
    outputs = function(**{name: tf.constant(a) for name, a in zip(names, arrays)})
    return [outputs[key].numpy() for key in sorted(outputs, key=_natural)]


def _natural(name: str) -> tuple:
    """Sort key that puts ``output_2`` before ``output_10`` (Keras numbers its signature names)."""
    prefix = name.rstrip("0123456789")
    suffix = name[len(prefix) :]
    return (prefix, int(suffix) if suffix else -1)


def _verify(model: keras.Model, report: ExportReport, specs: list[dict], atol: float) -> None:
    dynamic = any(d is None for s in specs for d in s["shape"][1:])
    lengths = _VERIFY_LENGTHS if dynamic else _VERIFY_LENGTHS[:1]
    rng = np.random.default_rng(0)
    worst = 0.0
    for length in lengths:
        inputs = _sample_inputs(specs, length, rng)
        expected = [
            keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))
            for x in keras.tree.flatten(model(inputs, training=False))
        ]
        actual = _run_artifact(report, inputs)
        if len(expected) != len(actual):
            raise ValueError(
                f"export_model: the artifact has {len(actual)} outputs, the model {len(expected)}."
            )
        for e, a in zip(expected, actual):
            if e.shape != a.shape:
                raise ValueError(
                    f"export_model: artifact output shape {a.shape} != model's {e.shape}."
                )
            worst = max(worst, float(np.max(np.abs(e - a.astype(np.float32)))) if e.size else 0.0)
        report.verified_shapes.append(
            [tuple(np.shape(x)) for x in (inputs if isinstance(inputs, list) else [inputs])]
        )
    report.max_abs_difference = worst
    if worst > atol:
        raise ValueError(
            f"export_model: the {report.format} artifact differs from the Keras model by "
            f"{worst:.3g} > atol={atol} (verified at {report.verified_shapes})."
        )


def _worker(request_path: str) -> None:
    """Subprocess entry point: load a .keras file on TensorFlow and export it."""
    import keras_posenc  # noqa: F401  (registers every keras-posenc layer)

    with open(request_path) as handle:
        request = json.load(handle)
    model = keras.saving.load_model(request["source"])
    details = _export_on_tensorflow(model, request["path"], request["format"], request["specs"])
    with open(request_path + ".out", "w") as handle:
        json.dump(details, handle)


if __name__ == "__main__":
    _worker(sys.argv[1])
