"""The ``posenc`` command: a thin shell over the library's public functions."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys
from collections.abc import Sequence

_BACKEND_PACKAGES = ("tensorflow", "jax", "torch")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def info_lines() -> list[str]:
    """The report ``posenc info`` prints, one line per entry.

    Versions of keras-posenc, keras and keras-hub, the active Keras backend,
    which backend packages are installed, whether each export format's
    packages import, and the registered zoo models.
    """
    import keras

    from keras_posenc import export, zoo

    lines = [
        f"keras-posenc  {_version('keras-posenc') or 'not installed (source tree)'}",
        f"python        {platform.python_version()}",
        f"keras         {keras.__version__}",
        f"keras-hub     {_version('keras-hub') or 'missing'}",
        f"backend       {keras.backend.backend()} (set KERAS_BACKEND to change it)",
        "backends      "
        + ", ".join(f"{name} {_version(name) or 'not installed'}" for name in _BACKEND_PACKAGES),
    ]
    for format_name, packages in export.exporter_status().items():
        usable = all(p.importable for p in packages)
        details = ", ".join(
            f"{p.name} {p.version}" if p.importable else f"{p.name} MISSING ({p.error})"
            for p in packages
        )
        lines.append(f"export {format_name:<15} {'ready' if usable else 'unavailable'}: {details}")
    names = zoo.list_models()
    lines.append(f"zoo models    {len(names)}" + (f": {', '.join(names)}" if names else ""))
    return lines


def _info(_: argparse.Namespace) -> int:
    print("\n".join(info_lines()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``posenc``; each subcommand sets ``handler``."""
    parser = argparse.ArgumentParser(
        prog="posenc",
        description=(
            "keras-posenc: relative position encodings, ConvS2S, MUSE, CoAtNet and PosENet "
            "for Keras 3 on TensorFlow, JAX and PyTorch (choose with KERAS_BACKEND)."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version('keras-posenc') or 'dev'}"
    )
    commands = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    info = commands.add_parser(
        "info", help="versions, the active backend, exporters and the registered zoo models"
    )
    info.set_defaults(handler=_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``posenc`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
