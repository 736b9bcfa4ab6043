"""The names of an exported graph's inputs and outputs: :func:`export_names`, the checks
of names given, and of the names an artifact has."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.export.inputs import _VERIFY_LENGTHS, _input_specs, _sample_inputs
from keras_posenc.export.report import ExportReport

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
