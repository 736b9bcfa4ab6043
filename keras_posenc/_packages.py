"""Which packages each export format needs, and whether they import.

Keras-free, so the command line's ``posenc info`` and :func:`package_found` (the
check made before exporting through a TensorFlow subprocess, which imports
nothing in the caller's process) stay light; ``keras_posenc.export`` re-exports
these names.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util

# The packages each export format needs, in the order they are imported.
EXPORTER_PACKAGES: dict[str, tuple[str, ...]] = {
    "tf_saved_model": ("tensorflow",),
    "onnx": ("tensorflow", "tf2onnx", "onnx", "onnxruntime"),
    # Keras' own LiteRT exporter (TensorFlow's converter); ai_edge_litert runs the file.
    "litert": ("tensorflow", "ai_edge_litert"),
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
        ['litert', 'onnx', 'tf_saved_model']
    """
    cache: dict[str, PackageStatus] = {}
    report = {}
    for format_name, packages in EXPORTER_PACKAGES.items():
        report[format_name] = [cache.setdefault(p, package_status(p)) for p in packages]
    return report


def package_found(name: str) -> PackageStatus:
    """Whether ``name`` is installed, without importing it: what the caller of an export
    through a TensorFlow subprocess checks for the packages only that process imports
    (importing TensorFlow here would take seconds and print its start-up lines).

    Examples:

        >>> package_found("numpy").importable
        True
        >>> package_found("surely_not_a_package").error.startswith("ModuleNotFoundError")
        True
    """
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError) as error:
        return PackageStatus(name, None, f"{type(error).__name__}: {error}")
    if not found:
        return PackageStatus(name, None, f"ModuleNotFoundError: No module named {name!r}")
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return PackageStatus(name, version, None)
