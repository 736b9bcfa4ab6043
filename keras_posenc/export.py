"""Export models to TensorFlow SavedModel, ONNX and LiteRT from any backend, verified.

Keras' own ``model.export`` works on the TensorFlow backend for both formats;
from PyTorch and JAX it is broken or incomplete with the versions this project
supports (SavedModel from torch needs torch_xla; ONNX from JAX needs jax2onnx
and fails on dynamic lengths). :func:`export_model` therefore exports on
TensorFlow: directly when TensorFlow is the active backend, otherwise by saving
the model as ``.keras`` and loading it in a subprocess with
``KERAS_BACKEND=tensorflow`` (design.md, "Export design"). It then runs the
artifact (onnxruntime, ``tf.saved_model.load``, or LiteRT's own interpreter from
``ai_edge_litert`` for a ``.tflite`` file) on the same random inputs as
the Keras model, at two sequence lengths when the model has dynamic axes, and
reports the largest absolute difference. Outputs that are not finite fail the
verification. The artifact is written to a hidden folder beside the target and
moved into place only once it has verified, so a failed export leaves nothing
at the target; an existing target is replaced only with ``overwrite=True``.

On PyTorch, ``route="native"`` exports ONNX with PyTorch's own exporter
instead (``torch.onnx.export``, TorchScript tracing), with no TensorFlow
subprocess. Before a tf2onnx conversion, the memory it will need is estimated
from the parameter count and compared with the memory available.

Every route names the artifact's inputs and outputs alike, after the model's
``keras.Input`` layers and output layers (or the keys of a dict of outputs):
:func:`export_names` gives them, docs/guides/export.md lists them per zoo family.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc import _quiet
from keras_posenc._packages import (  # noqa: F401 (public here: posenc info, the docs)
    EXPORTER_PACKAGES,
    PackageStatus,
    exporter_status,
    package_found,
    package_status,
)
from keras_posenc.layers._checks import check_non_negative_number, excerpt, innermost_error

FORMATS = ("onnx", "tf_saved_model", "litert")
ROUTES = ("tensorflow", "native")

# tf2onnx holds the whole graph, weights included, several times over while it
# converts. Peak memory measured on a 2-core, 24 GB machine: about 8 GB for a
# 25M-parameter CNN (CoAtNet-0) and 24 GB for a 200M-parameter model. The line
# through both points, 5.7 GB + 91 bytes per parameter, is the estimate
# checked before converting.
TF2ONNX_BASE_BYTES = 5.7e9
TF2ONNX_BYTES_PER_PARAMETER = (24e9 - 8e9) / (200e6 - 25e6)  # 91.4

# The ONNX opset of the native PyTorch route (LayerNormalization needs 17).
_NATIVE_OPSET = 17

# Sizes given to axes that are None in the model's inputs when verifying: batch,
# then two different sequence lengths so a graph fixed to one length is caught.
_VERIFY_BATCH = 2
_VERIFY_LENGTHS = (7, 11)


@dataclasses.dataclass
class ExportReport:
    """What :func:`export_model` did and measured.

    Attributes:
        format: ``"onnx"``, ``"tf_saved_model"`` or ``"litert"`` (a ``.tflite`` file).
        path: where the artifact was written.
        route: how it was exported, e.g. ``"tensorflow (direct)"`` or
            ``"tensorflow subprocess from torch"``.
        inputs: ``(name, shape, dtype)`` of each artifact input (None = dynamic),
            in the model's order.
        outputs: ``(name, shape, dtype)`` of each artifact output, in the model's order.
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
    _check_target(path, overwrite, "export_model")
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
    with quiet, _staged([path], overwrite, "export_model") as (staged,):
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


# --------------------------------------------------------------------------- names

# The names an exported graph's inputs and outputs may have: TensorFlow takes
# [A-Za-z0-9.][A-Za-z0-9_.\-/]* as a tensor name and ONNX any string; a letter, then
# letters, digits and "_", is a name every format, runtime and language binding takes
# as it is (docs/guides/export.md, "Input and output names").
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def export_names(
    model: keras.Model,
    input_signature: Sequence[keras.InputSpec] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
) -> tuple[list[str], list[str]]:
    """The input and output names :func:`export_model` gives ``model``'s graph.

    Inputs are named after the ``name`` of each spec of ``input_signature``,
    else after the model's ``keras.Input`` layers; outputs after the keys of
    a dict of outputs, else after the layers that produce them (Keras'
    ``model.output_names``); a model without either gets ``input_<i>`` and
    ``output_<i>``. Characters other than letters, digits and ``_`` become
    ``_``, and a name met before (an output named like an input, two outputs
    of one layer) gets ``_1``, ``_2``, ... appended. ``input_names`` and
    ``output_names`` replace them as given.

    Args:
        model: a ``keras.Model``; a subclassed model without ``output_names``
            is called once on zeros to see its outputs.
        input_signature: as in :func:`export_model`.
        input_names: as in :func:`export_model`.
        output_names: as in :func:`export_model`.

    Returns:
        ``(input_names, output_names)``, in the order of the model's
        (flattened) inputs and outputs.

    Raises:
        ValueError: for ``input_names`` or ``output_names`` of the wrong
            length, with a repeated or invalid name, or if the model has no
            symbolic inputs and no ``input_signature``.

    Examples:

        >>> import keras
        >>> tokens = keras.Input((None,), dtype="int32", name="token_ids")
        >>> x = keras.layers.Embedding(10, 4)(tokens)
        >>> model = keras.Model(tokens, keras.layers.Dense(3, name="logits")(x))
        >>> export_names(model)
        (['token_ids'], ['logits'])
        >>> export_names(model, output_names=["scores"])
        (['token_ids'], ['scores'])
    """
    specs = _input_specs(model, input_signature)
    return _names(model, specs, input_names, output_names, "export_names")


def _names(
    model: keras.Model,
    specs: list[dict],
    input_names: Sequence[str] | None,
    output_names: Sequence[str] | None,
    who: str,
    outputs: Any = None,
) -> tuple[list[str], list[str]]:
    """The graph's input and output names (see :func:`export_names`); ``outputs``: the
    model's outputs on some input if it was just called, which saves calling it again."""
    if input_names is None:
        inputs = _unique(
            [_clean_name(spec.get("name"), f"input_{i}") for i, spec in enumerate(specs)], []
        )
    else:
        inputs = _given_names(who, "input_names", input_names, len(specs), "model input")
    if output_names is None:
        return inputs, _unique(_derived_output_names(model, specs, outputs), inputs)
    count = len(_output_structure(model, specs, outputs)[1])
    given = _given_names(who, "output_names", output_names, count, "model output")
    clash = sorted(set(given) & set(inputs))
    if clash:
        raise ValueError(
            f"{who}: `output_names` must differ from the input names {inputs} (a graph "
            f"value has one name); got {clash[0]!r} in both."
        )
    return inputs, given


def _output_structure(model: keras.Model, specs: list[dict], outputs: Any) -> tuple[Any, list]:
    """The model's output structure and its flattened outputs, symbolic for a functional
    model, else from ``outputs`` or a call on zeros."""
    structure = outputs
    if structure is None:
        try:
            structure = model.output if model.outputs else None
        except (AttributeError, ValueError):  # a subclassed model has no symbolic outputs
            structure = None
    if structure is None:
        zeros = _sample_inputs(specs, _VERIFY_LENGTHS[0], np.random.default_rng(0), zeros=True)
        structure = model(zeros)
    return structure, keras.tree.flatten(structure)


def _derived_output_names(model: keras.Model, specs: list[dict], outputs: Any) -> list[str]:
    structure, flat = _output_structure(model, specs, outputs)
    if isinstance(structure, dict):
        return [
            _clean_name("_".join(str(key) for key in path), f"output_{i}")
            for i, (path, _) in enumerate(keras.tree.flatten_with_path(structure))
        ]
    layers = getattr(model, "output_names", None)
    if isinstance(layers, list | tuple) and len(layers) == len(flat):
        return [_clean_name(name, f"output_{i}") for i, name in enumerate(layers)]
    return [f"output_{i}" for i in range(len(flat))]


def _clean_name(name: Any, fallback: str) -> str:
    """``name`` with every character outside ``[A-Za-z0-9_]`` replaced by ``_``, and
    ``fallback`` prefixed when it does not start with a letter (or is empty)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", str(name or ""))
    if not cleaned:
        return fallback
    return cleaned if cleaned[0].isalpha() else f"{fallback}_{cleaned}"


def _unique(names: list[str], taken: list[str]) -> list[str]:
    """``names`` with ``_1``, ``_2``, ... appended to any already in ``taken`` or before it."""
    seen = set(taken)
    result = []
    for name in names:
        candidate, suffix = name, 0
        while candidate in seen:
            suffix += 1
            candidate = f"{name}_{suffix}"
        seen.add(candidate)
        result.append(candidate)
    return result


def _given_names(who: str, argument: str, names: Any, count: int, what: str) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(
            f"{who}: `{argument}` must be a list of names, one per {what} ({count}); "
            f"got {type(names).__name__} {names!r}."
        )
    names = list(names)
    if len(names) != count:
        raise ValueError(
            f"{who}: `{argument}` must hold one name per {what} ({count}); "
            f"got {len(names)}: {names}."
        )
    for name in names:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"{who}: every name in `{argument}` must be a letter followed by letters, "
                f"digits or '_' (a name every format and runtime takes); got {name!r}."
            )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"{who}: the names in `{argument}` must be distinct; got {repeated[0]!r} "
            f"{names.count(repeated[0])} times."
        )
    return names


def _check_artifact_names(report: ExportReport, inputs: list[str], outputs: list[str]) -> None:
    """Raises if the artifact's input or output names are not the ones asked for."""
    for kind, expected, described in (
        ("inputs", inputs, report.inputs),
        ("outputs", outputs, report.outputs),
    ):
        found = [name for name, _, _ in described]
        if found != expected:
            raise RuntimeError(
                f"export_model: the {report.format} artifact's {kind} are named {found}, "
                f"not {expected} as asked (route: {report.route})."
            )


# --------------------------------------------------------------------------- targets


def _occupied(path: str) -> bool:
    """Whether something is at ``path``; an empty folder has nothing to lose or merge."""
    if os.path.isdir(path) and not os.path.islink(path):
        return bool(os.listdir(path))
    return os.path.lexists(path)


def _check_target(path: str, overwrite: bool, who: str) -> None:
    if _occupied(path) and not overwrite:
        raise FileExistsError(
            f"{who}: {path!r} already exists; pass overwrite=True (posenc: --overwrite) "
            "to replace it."
        )


def _missing_folders(folder: str) -> list[str]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not os.path.exists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


@contextlib.contextmanager
def _staged(targets: list[str], overwrite: bool, who: str) -> Iterator[list[str]]:
    """Temporary paths for ``targets``, moved onto them when the block succeeds.

    The temporary folder is a hidden sibling of the first target, on the same
    file system, so moving an artifact is a rename. It is removed whatever
    happens; when the block fails, the targets are left as they were and the
    folders made for them are removed again.
    """
    parent = os.path.dirname(os.path.abspath(targets[0]))
    created = _missing_folders(parent)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".posenc-export-", dir=parent)
    try:
        staged = [os.path.join(staging, os.path.basename(target)) for target in targets]
        yield staged
        for index, (source, target) in enumerate(zip(staged, targets)):
            previous = os.path.join(staging, f"previous-{index}")
            _move_into_place(source, target, previous, overwrite, who)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:
            with contextlib.suppress(OSError):  # not empty: something else wrote there
                os.rmdir(folder)
        raise
    shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(source: str, target: str, previous: str, overwrite: bool, who: str) -> None:
    """Renames ``source`` to ``target``; what was at ``target`` goes to ``previous``."""
    if not os.path.lexists(source):
        raise RuntimeError(f"{who}: the exporter wrote nothing for {target!r}.")
    if not os.path.lexists(target):
        os.replace(source, target)
        return
    _check_target(target, overwrite, who)  # again: it may have appeared meanwhile
    # A folder cannot be renamed onto a file or a non-empty folder: move the old one aside.
    os.replace(target, previous)
    try:
        os.replace(source, target)
    except BaseException:
        os.replace(previous, target)
        raise


def available_memory() -> int | None:
    """Bytes of memory available to a new process now (None if unknown).

    ``MemAvailable`` from ``/proc/meminfo`` (Linux: free memory plus what the
    kernel can reclaim), else free physical pages from ``os.sysconf``.

    Examples:

        >>> memory = available_memory()
        >>> memory is None or memory > 0
        True
    """
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def tf2onnx_memory_estimate(parameters: int) -> float:
    """Bytes tf2onnx is estimated to need to convert a model of ``parameters`` weights.

    ``TF2ONNX_BASE_BYTES + TF2ONNX_BYTES_PER_PARAMETER * parameters``: the line
    through the two peaks measured on a 24 GB machine (about 8 GB for 25M
    parameters, 24 GB for 200M).

    Examples:

        >>> round(tf2onnx_memory_estimate(25_000_000) / 1e9, 1)
        8.0
        >>> round(tf2onnx_memory_estimate(200_000_000) / 1e9, 1)
        24.0
    """
    return TF2ONNX_BASE_BYTES + TF2ONNX_BYTES_PER_PARAMETER * parameters


def check_tf2onnx_memory(model: keras.Model) -> None:
    """Raises ``MemoryError`` if converting ``model`` with tf2onnx will not fit in memory.

    Args:
        model: a built ``keras.Model``.

    Raises:
        MemoryError: naming the model's size, the estimate and the memory
            available, and what to do instead.
    """
    parameters = model.count_params()
    needed = tf2onnx_memory_estimate(parameters)
    available = available_memory()
    if available is not None and needed > available:
        raise MemoryError(
            f"export_model: converting {model.name!r} ({parameters / 1e6:.1f}M parameters) "
            f"to ONNX with tf2onnx needs about {needed / 1e9:.1f} GB of memory "
            f"(5.7 GB + 91 bytes per parameter, measured), and {available / 1e9:.1f} GB is "
            "available. Export it with format='tf_saved_model' (which needs far less), "
            "on a machine with more memory, or pass check_memory=False "
            "(`posenc export --no-memory-check`) to try anyway."
        )


def export_seq2seq(
    model: keras.Model,
    directory: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (as export_model)
    verify: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    check_memory: bool = True,
    overwrite: bool = False,
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

    The graphs' inputs and outputs are named by
    :func:`~keras_posenc.zoo.seq2seq.decoding_names`: the encoder takes
    ``encoder_token_ids`` and returns the encoder state, each output named as
    the step input it feeds (ConvS2S: ``encoder_keys``, ``encoder_values``,
    ``source_mask``); the step takes ``token_ids``, ``index`` and the cache
    (one tensor per decoder layer, ``cache_<layer>``) and returns ``logits``
    and ``new_<name>`` for each cache tensor ``<name>``
    (docs/guides/export.md lists them per model family).

    Args:
        model: a :class:`~keras_posenc.zoo.seq2seq.Seq2SeqModel`.
        directory: folder for ``encoder`` and ``decoder_step`` (``.onnx`` files
            or ``.savedmodel`` SavedModel folders).
        format: ``"onnx"``, ``"tf_saved_model"`` or ``"litert"`` (a ``.tflite`` file).
        verify: verify each graph as :func:`export_model` does, on real
            decoding inputs: sources of two lengths (one row padded), their
            encoder states, and the cache after the ``bos`` step. Random-normal
            caches would be states no encoder produces; with them, a full-size
            WMT ConvS2S differs by ~1e-2 between eager Keras and a compiled
            TensorFlow graph alone, and a correct export would fail.
        atol: the verification tolerance's absolute part, as in :func:`export_model`.
        rtol: its relative part, as in :func:`export_model`.
        check_memory: as in :func:`export_model`.
        overwrite: replace existing ``encoder`` / ``decoder_step`` artifacts in
            ``directory``; False (default) refuses them. Both graphs are
            written to a temporary folder and moved into ``directory`` only
            after both have verified; other files in ``directory`` are left alone.

    Returns:
        ``{"encoder": report, "decoder_step": report}``.

    Raises:
        TypeError: if ``model`` does not follow the decoding contract.
        FileExistsError: if a graph's target exists and ``overwrite`` is False.
        ValueError, ImportError, MemoryError, RuntimeError: as :func:`export_model`.
    """
    from keras_posenc.zoo.seq2seq import (
        Seq2SeqDecoderStep,
        Seq2SeqEncoder,
        Seq2SeqModel,
        decoding_names,
        decoding_signatures,
    )

    if not isinstance(model, Seq2SeqModel):
        raise TypeError(
            "export_seq2seq: `model` must be a keras_posenc.zoo.seq2seq.Seq2SeqModel "
            f"(a sequence-to-sequence zoo model); got {type(model).__name__}."
        )
    encoder_signature, step_signature = decoding_signatures(model)
    names = decoding_names(model)
    encoder_runs, step_runs = _decoding_inputs(model) if verify else (None, None)
    graphs = {
        "encoder": (Seq2SeqEncoder(model, name="encoder"), encoder_signature, encoder_runs),
        "decoder_step": (
            Seq2SeqDecoderStep(model, name="decoder_step"),
            step_signature,
            step_runs,
        ),
    }
    options = dict(verify=verify, atol=atol, rtol=rtol, check_memory=check_memory)
    return _export_graphs("export_seq2seq", graphs, names, directory, format, overwrite, **options)


def export_language_model(
    model: keras.Model,
    directory: str | os.PathLike,
    format: str = "onnx",  # noqa: A002 (as export_model)
    verify: bool = True,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    check_memory: bool = True,
    overwrite: bool = False,
) -> dict[str, ExportReport]:
    """Exports a decoder-only zoo model's decoding step as a graph of its own.

    The graph is :class:`~keras_posenc.zoo.language_model.LanguageModelStep`,
    ``[token_ids, index, *cache] -> [logits, *new_cache]``, exported and
    verified by :func:`export_model`, as :func:`export_seq2seq` exports an
    encoder-decoder's step. A runtime generates with it as
    :mod:`keras_posenc.generation` does: the cache starts as zeros (its
    shapes are in the report), feed the prompt's tokens at indices 0, 1, ...
    then each chosen token, passing the returned cache back in. Inputs and
    outputs are named by :func:`keras_posenc.zoo.language_model.decoding_names`
    (``convs2s_lm``: ``cache_decoder_conv_<i>``, one per convolution).

    Args:
        model: a :class:`~keras_posenc.zoo.language_model.LanguageModel`.
        directory: folder for ``decoder_step`` (``.onnx`` or ``.savedmodel``).
        format: ``"onnx"``, ``"tf_saved_model"`` or ``"litert"`` (a ``.tflite`` file).
        verify: verify the graph as :func:`export_model` does, on the cache that
            decoding random prompts of two lengths leaves.
        atol: the verification tolerance's absolute part.
        rtol: its relative part.
        check_memory: as in :func:`export_model`.
        overwrite: replace an existing ``decoder_step`` artifact in ``directory``.

    Returns:
        ``{"decoder_step": report}``.

    Raises:
        TypeError: if ``model`` is not a language model.
        FileExistsError, ValueError, ImportError, MemoryError, RuntimeError: as
            :func:`export_seq2seq`.
    """
    from keras_posenc.zoo.language_model import (
        LanguageModel,
        LanguageModelStep,
        decoding_names,
        decoding_signatures,
    )

    if not isinstance(model, LanguageModel):
        raise TypeError(
            "export_language_model: `model` must be a keras_posenc.zoo.language_model."
            f"LanguageModel (a decoder-only zoo model); got {type(model).__name__}."
        )
    runs = _language_model_inputs(model) if verify else None
    graphs = {
        "decoder_step": (
            LanguageModelStep(model, name="decoder_step"),
            decoding_signatures(model),
            runs,
        )
    }
    names = {"decoder_step": decoding_names(model)}
    options = dict(verify=verify, atol=atol, rtol=rtol, check_memory=check_memory)
    return _export_graphs(
        "export_language_model", graphs, names, directory, format, overwrite, **options
    )


def _language_model_inputs(model: Any) -> list:
    """Verification inputs of a language model's step graph, as decoding produces them:
    for each verification length, random prompts decoded up to it, then a random token."""
    rng = np.random.default_rng(0)
    low = model.eos_id + 1
    runs = []
    for length in _VERIFY_LENGTHS:
        prompt = rng.integers(low, model.vocab_size, (_VERIFY_BATCH, length)).astype("int32")
        cache = model.init_cache(_VERIFY_BATCH, length + 2)
        for index in range(length):
            _, cache = model.decode_step(prompt[:, index], cache, index)
        token = rng.integers(low, model.vocab_size, (_VERIFY_BATCH,)).astype("int32")
        arrays = [keras.ops.convert_to_numpy(t) for t in cache]
        runs.append([token, np.array([length], "int32"), *arrays])
    return runs


def _export_graphs(
    who: str,
    graphs: dict[str, tuple],
    names: dict[str, tuple[list[str], list[str]]],
    directory: str | os.PathLike,
    format: str,  # noqa: A002 (as export_model)
    overwrite: bool,
    **options: Any,
) -> dict[str, ExportReport]:
    """Exports each ``graphs[name] = (model, input_signature, verify_inputs)`` as
    ``directory/name`` with its ``names[name] = (inputs, outputs)``, all or none: they
    are written to a temporary folder and moved in once every graph has verified."""
    directory = os.fspath(directory)
    # posenc's naming (cli.SUFFIXES)
    suffix = {"onnx": ".onnx", "litert": ".tflite"}.get(format, ".savedmodel")
    targets = [os.path.join(directory, name + suffix) for name in graphs]
    for target in targets:
        _check_target(target, overwrite, who)
    with _staged(targets, overwrite, who) as staged:
        reports = {
            name: export_model(
                graph,
                path,
                format=format,
                input_signature=signature,
                verify_inputs=runs,
                input_names=names[name][0],
                output_names=names[name][1],
                **options,
            )
            for path, (name, (graph, signature, runs)) in zip(staged, graphs.items())
        }
    for report, target in zip(reports.values(), targets):
        report.path = target
    return reports


def _decoding_inputs(model: Any) -> tuple[list, list]:
    """Verification inputs of a seq2seq model's two graphs, as decoding produces them.

    For each verification length: a batch of sources (real token ids, the
    second row ending in padding), and for the step graph a random next token
    at index 1 with the cache that encoding those sources and decoding
    ``bos`` at index 0 leaves.
    """
    rng = np.random.default_rng(0)
    low = model.eos_id + 1
    encoder_runs, step_runs = [], []
    for length in _VERIFY_LENGTHS:
        source = rng.integers(low, model.source_vocab_size, (_VERIFY_BATCH, length))
        source = source.astype("int32")
        source[-1, length - 2 :] = model.pad_id
        state = model.encode(source, training=False)
        cache = model.init_cache(state, max_length=4)
        bos = np.full((_VERIFY_BATCH,), model.bos_id, "int32")
        _, cache = model.decode_step(bos, cache, 0)
        token = rng.integers(low, model.target_vocab_size, (_VERIFY_BATCH,)).astype("int32")
        arrays = [keras.ops.convert_to_numpy(t) for t in cache]
        encoder_runs.append(source)
        step_runs.append([token, np.array([1], "int32"), *arrays])
    return encoder_runs, step_runs


# --------------------------------------------------------------------------- internals


def _input_specs(model: keras.Model, input_signature: Any) -> list[dict]:
    """Each model input as {"shape": [...], "dtype": str, "name": str | None}, batch axis
    first; the name is the signature spec's, else the ``keras.Input``'s."""
    try:
        inputs = keras.tree.flatten(model.inputs)
    except (AttributeError, ValueError):
        inputs = None
    if input_signature is not None:
        specs = list(input_signature)
        known = [x.name for x in inputs] if inputs and len(inputs) == len(specs) else None
        return [
            {
                "shape": list(s.shape),
                "dtype": str(s.dtype or "float32"),
                "name": getattr(s, "name", None) or (known[i] if known else None),
            }
            for i, s in enumerate(specs)
        ]
    if not inputs:
        raise ValueError(
            "export_model: the model has no symbolic inputs (a subclassed model?); "
            "pass `input_signature=[keras.InputSpec(shape=..., dtype=...)]`."
        )
    return [{"shape": list(x.shape), "dtype": str(x.dtype), "name": x.name} for x in inputs]


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


def _export_in_subprocess(
    model: keras.Model,
    path: str,
    format: str,
    specs: list[dict],
    output_names: list[str] | None = None,
    verbose: bool = False,
) -> dict:
    """Exports in a TensorFlow process; its output is shown only if it fails or ``verbose``."""
    verbose = verbose or _quiet.verbose()
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "model.keras")
        model.save(source)
        request = os.path.join(folder, "request.json")
        with open(request, "w") as handle:
            json.dump(
                {
                    "source": source,
                    "path": path,
                    "format": format,
                    "specs": specs,
                    "output_names": output_names,
                },
                handle,
            )
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        if not verbose:
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        result = subprocess.run(
            [sys.executable, "-m", "keras_posenc.export", request],
            capture_output=not verbose,
            text=True,
            env=env,
            timeout=3600,
        )
        if result.returncode != 0:
            raise RuntimeError(_worker_failure(format, request, result))
        with open(request + ".out") as handle:
            return json.load(handle)


def _worker_failure(format: str, request: str, result: subprocess.CompletedProcess) -> str:
    """The message for a failed export subprocess: the worker's own error first (what
    it wrote to ``request.error``; else the last line it printed), then what to check."""
    said = True
    try:
        with open(request + ".error") as handle:
            failure = json.load(handle)
    except (OSError, ValueError):  # it died before it could say (e.g. out of memory)
        said = False
        lines = result.stderr.strip().splitlines()
        last = lines[-1] if lines else "nothing printed"
        failure = {"stage": None, "error": f"exit status {result.returncode}, {excerpt(last)}"}
    message = (
        f"export_model: exporting to {format!r} in a TensorFlow subprocess failed: "
        f"{failure['error']}"
    )
    if failure["stage"] == "load":
        message += (
            "\nThe model is saved as .keras and loaded there, in a new Python process: every "
            "custom layer must be registered with @keras.saving.register_keras_serializable "
            "and importable in that process (every keras-posenc layer is). With "
            "KERAS_BACKEND=tensorflow the model is exported directly, without reloading it."
        )
    if result.stderr and not said:
        # It died without naming its error: what it printed last is all there is. When it
        # named it, its output is the traceback of that error (verbose=True shows it).
        message += "\nIts last lines:\n" + "\n".join(result.stderr.strip().splitlines()[-15:])
    return message


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


def _worker(request_path: str) -> None:
    """Subprocess entry point: load a .keras file on TensorFlow and export it."""
    import keras_posenc  # noqa: F401  (registers every keras-posenc layer)

    with open(request_path) as handle:
        request = json.load(handle)
    stage = "load"
    try:
        model = keras.saving.load_model(request["source"])
        stage = "export"
        details = _export_on_tensorflow(
            model,
            request["path"],
            request["format"],
            request["specs"],
            request.get("output_names"),
        )
    except Exception as error:
        # Keras wraps the cause (e.g. "Could not locate class ...") in a longer message:
        # the innermost error is the one to show first.
        cause = innermost_error(error)
        text = f"{type(cause).__name__}: {excerpt(cause, 25)}"
        with open(request_path + ".error", "w") as handle:
            json.dump({"stage": stage, "error": text}, handle)
        raise
    with open(request_path + ".out", "w") as handle:
        json.dump(details, handle)


if __name__ == "__main__":
    _worker(sys.argv[1])
