"""The ``posenc`` command: a thin shell over the library's public functions."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

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


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["num_classes=10", "layout=C-C-T-T"]`` -> ``{"num_classes": 10, "layout": "C-C-T-T"}``.

    Values are read as JSON when they parse (numbers, booleans, lists), else kept as text.

    Examples:

        >>> parse_overrides(["num_classes=10", "layout=C-C-T-T", "input_shape=[64, 64, 3]"])
        {'num_classes': 10, 'layout': 'C-C-T-T', 'input_shape': [64, 64, 3]}
    """
    overrides = {}
    for pair in pairs:
        key, separator, text = pair.partition("=")
        if not separator or not key:
            raise ValueError(f"posenc: --set takes key=value; got {pair!r}.")
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = text
    return overrides


def _export(args: argparse.Namespace) -> int:
    import keras

    from keras_posenc import zoo
    from keras_posenc.export import FORMATS, export_model

    overrides = parse_overrides(args.set)
    if args.model.endswith(".keras"):
        if overrides:
            raise ValueError("posenc export: --set applies to zoo names, not to .keras files.")
        model = keras.saving.load_model(args.model)
        name = os.path.basename(args.model)[: -len(".keras")]
    else:
        model = zoo.create(args.model, **overrides)
        name = args.model
    os.makedirs(args.out, exist_ok=True)
    formats = FORMATS if args.format == "all" else (args.format,)
    for format_name in formats:
        target = name + (".onnx" if format_name == "onnx" else "_saved_model")
        report = export_model(
            model,
            os.path.join(args.out, target),
            format=format_name,
            verify=not args.no_verify,
            atol=args.atol,
        )
        print(report.table(), end="\n\n")
    return 0


def _probe_padding(args: argparse.Namespace) -> int:
    from keras_posenc.experiments.padding import (
        markdown_table,
        padding_experiment,
        summary_markdown,
    )

    rows = padding_experiment(
        quick=args.quick,
        out=args.out,
        seeds=args.seeds or None,
        studies=args.studies,
        verbose=True,
    )
    print(markdown_table([row for row in rows if row["table"] == "padding"]))
    print(summary_markdown(rows))
    if args.out:
        print(f"\nwrote the tables (CSV, markdown) and the maps figures to {args.out}")
    return 0


def _experiment_length(args: argparse.Namespace) -> int:
    from keras_posenc.experiments.length_generalization import (
        length_generalization_experiment,
        markdown_table,
    )

    choices = {"encodings": args.encodings, "tasks": args.tasks}
    rows = length_generalization_experiment(
        quick=args.quick,
        out=args.out,
        seeds=args.seeds or None,
        **{key: value for key, value in choices.items() if value},
    )
    print()
    print(markdown_table(rows))
    if args.out:
        print(f"wrote the tables (CSV, markdown) and the plot (PNG) to {args.out}")
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

    export = commands.add_parser(
        "export",
        help="export a zoo model or a .keras file to ONNX and/or SavedModel, verified",
        description="Export a zoo model (by name) or a .keras file from any backend, then run "
        "the artifact on random inputs and compare it with the Keras model.",
    )
    export.add_argument("model", help="a zoo model name (see `posenc info`) or a .keras file")
    export.add_argument("--format", choices=("onnx", "tf_saved_model", "all"), default="all")
    export.add_argument("--out", required=True, help="folder for the artifacts")
    export.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a zoo configuration argument (repeatable; values parsed as JSON)",
    )
    export.add_argument("--atol", type=float, default=1e-4, help="verification tolerance")
    export.add_argument("--no-verify", action="store_true", help="skip the verification run")
    export.set_defaults(handler=_export)

    probe = commands.add_parser("probe", help="PosENet experiments")
    probe_commands = probe.add_subparsers(title="experiments", dest="experiment", required=True)
    padding = probe_commands.add_parser(
        "padding",
        help="how much absolute position each padding mode lets a frozen network encode",
        description="Frozen probe networks with zero, circular, reflect, replicate and "
        "'valid' padding (random or trained from scratch), VGG16 and ResNet50 (weights=None), "
        "read out on content-free inputs, and the analogues of Islam et al. (2020)'s Tables 2, "
        "3 and 4; prints SPC/MAE per setting, input and target.",
    )
    padding.add_argument("--quick", action="store_true", help="tiny networks, one seed (~1 min)")
    padding.add_argument("--out", help="folder for the CSV and markdown tables and the PNG figures")
    padding.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the mode's own)")
    padding.add_argument(
        "--studies",
        nargs="+",
        default="all",
        metavar="STUDY",
        help="parts to run (default: all): padding, trained_readout, trained_backbone, "
        "applications, readout_alone, readout_shape, stages",
    )
    padding.set_defaults(handler=_probe_padding)

    experiment = commands.add_parser("experiment", help="reproducible studies")
    experiments = experiment.add_subparsers(title="experiments", dest="experiment", required=True)
    length = experiments.add_parser(
        "length",
        help="which position encodings generalise from length 64 to 128-512",
        description="Small causal Transformers, one per position encoding, trained on "
        "synthetic token tasks at length 64 and tested at 64, 128, 256 and 512; prints the "
        "accuracy table (mean ± std over seeds). --quick: the relative task, one seed, a short "
        "training (under a minute); the full run takes about 20 minutes on 2 cores.",
    )
    length.add_argument("--quick", action="store_true", help="a small run of under a minute")
    length.add_argument("--out", help="folder for the CSV, the markdown tables and the PNG plot")
    length.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the mode's own)")
    length.add_argument("--encodings", nargs="+", help="a selection of encodings (default: all)")
    length.add_argument("--tasks", nargs="+", help="copy_back and/or copy_position")
    length.set_defaults(handler=_experiment_length)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``posenc`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (ValueError, TypeError, ImportError, RuntimeError, FileNotFoundError) as error:
        # The library's errors already say what was wrong and what was expected.
        print(f"posenc {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
