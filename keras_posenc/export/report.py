"""What an export did and measured: :class:`ExportReport`."""

from __future__ import annotations

import dataclasses


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
