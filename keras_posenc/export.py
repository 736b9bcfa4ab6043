"""Export models to TensorFlow SavedModel and ONNX from any backend.

Keras' own ``model.export`` works on the TensorFlow backend for both formats;
from PyTorch and JAX it is broken or incomplete with the versions this project
supports, so exports from those backends go through a ``.keras`` file loaded
under ``KERAS_BACKEND=tensorflow`` in a subprocess (design.md, "Export design").

This module starts with :func:`exporter_status`, which tells which of the
packages the exporters need can be imported here.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata

# The packages each export format needs, in the order they are imported.
EXPORTER_PACKAGES: dict[str, tuple[str, ...]] = {
    "tf_saved_model": ("tensorflow",),
    "onnx": ("tensorflow", "tf2onnx", "onnx", "onnxruntime"),
}


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
