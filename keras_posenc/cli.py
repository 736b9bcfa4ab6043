"""The ``posenc`` command: a thin shell over the library's public functions.

``posenc --help`` and argument errors import neither Keras nor a backend; a
command imports them when it runs, quietly unless ``--verbose`` (see
``keras_posenc._registration.quiet_runtime``). Outputs follow one naming scheme (:data:`NAMING`).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

from keras_posenc import cli_studies as studies
from keras_posenc import cli_text
from keras_posenc._registration import quiet_runtime
from keras_posenc._sources import offline_failure

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


def _output_folder(path: str) -> None:
    """Makes ``--out`` if missing, after checking it is no file: before any model is built."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--out must be a folder; {path!r} is a file.")
    os.makedirs(path, exist_ok=True)


# Wall-clock and CPU seconds of the commands --help quotes, with the 1-minute load average
# at the time: TensorFlow's rows of docs/data/cli_timings.csv, written here by
# benchmarks/cli_quick.py from it; tests/test_first_contact.py checks that the two agree.
# cli_timings measured
MEASURED = {
    "demo": (15.7, 16.0, 1.37),
    "probe padding --quick": (66.1, 75.5, 0.7),
    "experiment length --quick": (80.6, 139.8, 1.26),
    "experiment layouts --quick": (55.7, 56.4, 2.7),
    "experiment transplant --quick": (53.2, 56.4, 1.32),
    "generate": (6.6, 6.8, 1.56),
}
# /cli_timings


def measured(command: str) -> str:
    """How long ``posenc COMMAND`` took when measured, for --help.

    Examples:

        >>> measured("demo").startswith("measured ")
        True
    """
    wall, cpu, load = MEASURED[command]
    return (
        f"measured {wall:.0f} s wall clock, {cpu:.0f} s CPU, on TensorFlow, 2 CPU cores, "
        f"load average {load:.1f}"
    )


# Recorded runs of the full studies, from their pages in docs/experiments/.
FULL_RUNS = {
    "probe padding": "25 min 12 s wall clock, 673 s CPU at load 8-10",
    "experiment length": "1 h 7 min wall clock, 1977 s CPU at load 5-16",
    "experiment layouts": "10 min 54 s wall clock, 448 s CPU at load 4.8-8",
    "experiment transplant": "26 min 42 s wall clock, 1760 s CPU at load 2.4-3.8",
}

_VERBOSE_HELP = (
    "show the libraries' own log lines and warnings (TensorFlow's C++ logs, absl, Python "
    "warnings), hidden by default"
)


# The one naming scheme of `posenc export` and `posenc demo` (shown in their --help).
NAMING = (
    "Outputs in --out are named after the model: NAME.keras (the Keras model, written by "
    "demo), NAME.onnx, NAME.savedmodel/ (a SavedModel folder) and NAME.tflite (LiteRT); a "
    "translation model is two graphs, in NAME/: encoder.onnx, decoder_step.onnx, "
    "encoder.savedmodel/, decoder_step.savedmodel/, encoder.tflite, decoder_step.tflite. "
    "A language model (convs2s_lm, music_transformer_*, decoder_lm_*) is one graph, its "
    "teacher-forced pass; its decoding graphs, decoder_step and, for decoder_lm_*, prompt, "
    "come from keras_posenc.export.export_language_model. "
    "Existing outputs are refused unless --overwrite."
)
SUFFIXES = {
    "keras": ".keras",
    "onnx": ".onnx",
    "tf_saved_model": ".savedmodel",
    "litert": ".tflite",
}


def output_path(out: str, name: str, format_name: str) -> str:
    """Where ``posenc`` writes ``name`` in ``format_name``, following :data:`NAMING`.

    Examples:

        >>> output_path("demo", "coatnet_0", "tf_saved_model")
        'demo/coatnet_0.savedmodel'
        >>> output_path("demo", "coatnet_0", "keras")
        'demo/coatnet_0.keras'
    """
    return os.path.join(out, name + SUFFIXES[format_name])


def _export_formats(
    model: Any, name: str, out: str, formats: Sequence[str], **options: Any
) -> list[Any]:
    """Exports ``model`` in each format under :data:`NAMING`; returns the reports."""
    from keras_posenc.export import export_model, export_seq2seq
    from keras_posenc.zoo.seq2seq import Seq2SeqModel

    reports = []
    for format_name in formats:
        if isinstance(model, Seq2SeqModel):  # two graphs, in NAME/
            graphs = export_seq2seq(model, os.path.join(out, name), format=format_name, **options)
            done = list(graphs.values())
        else:
            path = output_path(out, name, format_name)
            done = [export_model(model, path, format=format_name, **options)]
        for report in done:
            print(report.table(), end="\n\n", flush=True)
        reports += done
    return reports


def _export(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.set)
    _output_folder(args.out)
    from keras_posenc import zoo
    from keras_posenc.export import FORMATS
    from keras_posenc.zoo.registry import load_keras_file

    if args.model.endswith(".keras"):
        if overrides:
            raise ValueError("posenc export: --set applies to zoo names, not to .keras files.")
        model = load_keras_file(args.model)
        name = os.path.basename(args.model)[: -len(".keras")]
    else:
        model = zoo.create(args.model, **overrides)
        name = args.model
    reports = _export_formats(
        model,
        name,
        args.out,
        FORMATS if args.format == "all" else (args.format,),
        verify=not args.no_verify,
        atol=args.atol,
        rtol=args.rtol,
        check_memory=not args.no_memory_check,
        overwrite=args.overwrite,
    )
    checked = "not verified (--no-verify)" if args.no_verify else "each verified against Keras"
    print(f"exported {name}: {', '.join(r.path for r in reports)}, {checked}.")
    return 0


# `posenc demo` without a name: the digits classifier shipped in the package
# (keras_posenc/cli_demo.py); its measured times are in docs/data/cli_timings.csv.


def _demo_inputs(model: Any, rng: Any) -> Any:
    """Random inputs for each of the model's inputs: ids 0 and 1 for int inputs
    (valid in any vocabulary), normal floats otherwise; batch 2, length 16."""
    arrays = []
    for tensor in model.inputs:
        shape = [2 if i == 0 else (16 if d is None else d) for i, d in enumerate(tensor.shape)]
        if "int" in str(tensor.dtype):
            arrays.append(rng.integers(0, 2, shape).astype(str(tensor.dtype)))
        else:
            arrays.append(rng.standard_normal(shape).astype("float32"))
    return arrays[0] if len(arrays) == 1 else arrays


def _check_demo(args: argparse.Namespace) -> None:
    """``posenc demo``'s argument check, before Keras is imported (cli.main's ``precheck``)."""
    if args.model is None and args.set:
        raise ValueError(
            "--set changes a zoo model's configuration: name the model (posenc demo NAME "
            "--set KEY=VALUE); without a name the demo loads the shipped digits classifier."
        )


def _demo(args: argparse.Namespace) -> int:
    _output_folder(args.out)
    if args.model is None:
        from keras_posenc.cli_demo import run_preset_demo

        return run_preset_demo(args, _export_formats, output_path)
    name = args.model
    saved = output_path(args.out, name, "keras")
    if os.path.exists(saved) and not args.overwrite:  # before minutes of work, as export does
        raise FileExistsError(f"{saved!r} already exists; pass --overwrite to replace it.")
    import keras
    import numpy as np

    from keras_posenc import zoo
    from keras_posenc.export import FORMATS
    from keras_posenc.generation import greedy_search
    from keras_posenc.zoo.seq2seq import Seq2SeqModel

    start = time.perf_counter()
    overrides = parse_overrides(args.set)
    keras.utils.set_random_seed(0)
    model = zoo.create(name, **overrides)
    print(
        f"1. created {name} ({model.count_params():,} parameters, random weights) "
        f"on the {keras.backend.backend()} backend"
        + (f", overrides {overrides}" if overrides else "")
    )
    rng = np.random.default_rng(0)
    if isinstance(model, Seq2SeqModel):
        low = model.eos_id + 1
        high = min(model.source_vocab_size, low + 50)
        source = rng.integers(low, high, (2, 12)).astype("int32")
        tokens = greedy_search(model, source, max_length=10, min_length=10)
        print(f"2. greedy search, 10 tokens for 2 random sources of 12 ids:\n{tokens}")
    else:
        inputs = _demo_inputs(model, rng)
        outputs = keras.tree.flatten(model(inputs, training=False))
        shapes = ", ".join(str(tuple(x.shape)) for x in outputs)
        print(f"2. ran it on random inputs ({_shapes(inputs)}): outputs {shapes}")
    model.save(saved)
    print(f"3. saved it as {saved} (posenc export {saved} --out DIR exports it again)")
    print(f"4. exporting to {', '.join(FORMATS)} in {args.out} and verifying:\n")
    _export_formats(model, name, args.out, FORMATS, overwrite=args.overwrite)
    print(f"done in {time.perf_counter() - start:.0f} s: every artifact verified.")
    return 0


def _shapes(inputs: Any) -> str:
    arrays = inputs if isinstance(inputs, list) else [inputs]
    return ", ".join(str(a.shape) for a in arrays)


def _convert_fairseq(args: argparse.Namespace) -> int:
    from keras_posenc.convert import from_fairseq_fconv

    if not args.out.endswith(".keras"):
        raise ValueError(f"posenc convert fairseq: --out must end in .keras, got {args.out!r}.")
    model = from_fairseq_fconv(args.src, weight_norm=args.weight_norm)
    model.save(args.out)
    print(
        f"converted {args.src} ({model.count_params():,} parameters, vocabularies "
        f"{model.source_vocab_size} / {model.target_vocab_size}) to {args.out}"
    )
    return 0


def _convert_timm(args: argparse.Namespace) -> int:
    from keras_posenc.convert import (
        from_timm_coatnet,
        from_timm_maxvit,
        from_timm_maxxvit,
        load_timm_state_dict,
    )

    if not args.out.endswith(".keras"):
        raise ValueError(f"posenc convert timm: --out must end in .keras, got {args.out!r}.")
    source, config = args.src, None
    if args.timm_config:
        config, kind = _timm_config(args.timm_config)
    elif args.name:
        kind = "maxxvit" if args.name.startswith(("maxxvit", "coatnext")) else args.name[:6]
    else:  # ConvNeXt blocks have conv_dw, a MaxViT's grid attention; read the file once
        source = load_timm_state_dict(args.src)
        kind = (
            "maxxvit"
            if any(".conv_dw." in key for key in source)
            else "maxvit"
            if any(".attn_grid." in key for key in source)
            else "coatnet"
        )
    # --image-size overrides the size of the configuration either way.
    input_shape = (*args.image_size, 3) if args.image_size else None
    convert = {"maxxvit": from_timm_maxxvit, "maxvit": from_timm_maxvit}.get(
        kind, from_timm_coatnet
    )
    model = convert(source, args.name, config=config, input_shape=input_shape)
    model.save(args.out)
    print(
        f"converted {args.src} ({model.name}, {model.count_params():,} parameters, "
        f"{model.output_shape[-1]} classes, input {model.input_shape[1:]}) to {args.out}"
    )
    return 0


def _timm_config(path: str) -> tuple[dict, str]:
    """The build arguments described by a ``--timm-config`` file, and which converter
    reads them: ``"maxxvit"`` (ConvNeXt blocks), ``"maxvit"`` (every stage of "M"
    blocks) or ``"coatnet"``; errors name the file."""
    from keras_posenc.convert import (
        config_from_timm,
        maxvit_config_from_timm,
        maxxvit_config_from_timm,
    )

    where = f"--timm-config {path!r}"
    with open(path, encoding="utf-8") as handle:
        try:
            described = json.load(handle)
        except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
            raise ValueError(f"{where} is not valid JSON: {error}.") from error
    if not isinstance(described, dict):
        raise ValueError(f"{where} must hold a JSON object, got {type(described).__name__}.")
    image = described.get("img_size", 224)
    image = tuple(image) if isinstance(image, list) else image
    cfg = described.get("cfg", described)
    block_types = cfg.get("block_type") if isinstance(cfg, dict) else None
    conv = (cfg.get("conv_cfg") if isinstance(cfg, dict) else None) or {}
    if isinstance(conv, dict) and conv.get("block_type") == "convnext":
        kind, to_config = "maxxvit", maxxvit_config_from_timm
    elif bool(block_types) and all(kind == "M" for kind in block_types):
        kind, to_config = "maxvit", maxvit_config_from_timm
    else:
        kind, to_config = "coatnet", config_from_timm
    try:
        return to_config(cfg, img_size=image), kind
    except (ValueError, TypeError) as error:
        raise ValueError(f"{where}: {error}") from error


def _classify(args: argparse.Namespace) -> int:
    if args.top < 1:  # before Keras is imported or anything downloads
        raise ValueError(f"--top must be at least 1, got {args.top}.")
    missing = [path for path in args.images if not os.path.isfile(path)]
    if missing:  # before anything downloads
        raise FileNotFoundError(f"no such image file: {missing[0]!r}.")
    from keras_posenc.hub import load_preset

    preset = load_preset(args.model)
    top = min(args.top, int(preset.model.output_shape[-1]))
    for path, classes in zip(args.images, preset.classify(args.images, top=top)):
        print(path)
        for rank, (name, probability) in enumerate(classes, 1):
            print(f"  {rank}. {name}  {probability:.3f}")
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
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    # --verbose after the command too; SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP
    )

    def subparser(**kwargs: Any) -> argparse.ArgumentParser:
        return argparse.ArgumentParser(parents=[common], **kwargs)

    commands = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", parser_class=subparser
    )
    info = commands.add_parser(
        "info", help="versions, the active backend, exporters and the registered zoo models"
    )
    info.set_defaults(handler=_info)

    export = commands.add_parser(
        "export",
        help="export a zoo model or a .keras file to ONNX and/or SavedModel, verified",
        description="Export a zoo model (by name) or a .keras file from any backend, then run "
        "the artifact on random inputs and compare it with the Keras model. " + NAMING,
    )
    export.add_argument("model", help="a zoo model name (see `posenc info`) or a .keras file")
    export.add_argument(
        "--format", choices=("onnx", "tf_saved_model", "litert", "all"), default="all"
    )
    export.add_argument("--out", required=True, help="folder for the outputs (made if missing)")
    export.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a zoo configuration argument (repeatable; values parsed as JSON)",
    )
    export.add_argument(
        "--atol", type=float, default=1e-4, help="verification tolerance, absolute part"
    )
    export.add_argument(
        "--rtol", type=float, default=1e-4, help="verification tolerance, relative part"
    )
    export.add_argument("--no-verify", action="store_true", help="skip the verification run")
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace artifacts already in --out (default: refuse); a failed export "
        "leaves them as they were",
    )
    export.add_argument(
        "--no-memory-check",
        action="store_true",
        help="convert to ONNX even if tf2onnx is estimated to need more memory than is free",
    )
    export.set_defaults(handler=_export)

    demo = commands.add_parser(
        "demo",
        help="run a trained model on real data, export it to ONNX, SavedModel and LiteRT and "
        "verify each",
        description="The main job end to end. Without NAME: load the digits classifier "
        "shipped in the package (coatnet_0, weights 'digits'; needs scikit-learn, the "
        "'data' extra, for the digits), print its predictions and accuracy on held-out "
        "digits, save it, export it to ONNX, SavedModel and LiteRT from the active backend, "
        "verify each artifact on those digits and show that each predicts the same classes, "
        f"all named coatnet_0_digits ({measured('demo')}). With NAME: create that zoo "
        "model (random weights), run it on generated input (greedy generation for "
        "translation models), export and verify it. " + NAMING,
    )
    demo.add_argument(
        "model", nargs="?", help="a zoo model name (default: the shipped digits classifier)"
    )
    demo.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a zoo configuration argument (repeatable; values parsed as JSON)",
    )
    demo.add_argument("--out", required=True, help="folder for the outputs (made if missing)")
    demo.add_argument("--overwrite", action="store_true", help="replace outputs already in --out")
    demo.set_defaults(handler=_demo, precheck=_check_demo)

    probe = commands.add_parser("probe", help="PosENet experiments")
    probe_commands = probe.add_subparsers(
        title="experiments", dest="experiment", required=True, parser_class=subparser
    )
    padding = probe_commands.add_parser(
        "padding",
        help="how much absolute position each padding mode lets a frozen network encode",
        description="Frozen probe networks with zero, circular, reflect, replicate and "
        "'valid' padding (random or trained from scratch), VGG16 and ResNet50 (weights=None), "
        "read out on content-free inputs, and the analogues of Islam et al. (2020)'s Tables 2, "
        "3 and 4. Prints the padding table on noise input (SPC / MAE per target); --out DIR "
        "writes every table (summary.md), every row (padding.csv) and the figures. "
        f"--quick: {measured('probe padding --quick')}; the full run: "
        f"{FULL_RUNS['probe padding']} (docs/experiments/position-information.md).",
    )
    padding.add_argument(
        "--quick", action="store_true", help="tiny networks at 32 px, one seed (a smoke run)"
    )
    padding.add_argument(
        "--out", help="folder for every table (CSV, markdown) and the PNG figures; default: none"
    )
    padding.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the mode's own)")
    padding.add_argument(
        "--studies",
        nargs="+",
        default="all",
        metavar="STUDY",
        help="parts to run (default: all): padding, trained_readout, trained_backbone, "
        "applications, readout_alone, readout_shape, stages",
    )
    padding.set_defaults(handler=studies.probe_padding)

    experiment = commands.add_parser("experiment", help="reproducible studies")
    experiments = experiment.add_subparsers(
        title="experiments", dest="experiment", required=True, parser_class=subparser
    )
    length = experiments.add_parser(
        "length",
        help="which position encodings generalise from length 64 to 128-1024",
        description="Small causal Transformers, one per position encoding, trained on "
        "synthetic token tasks at length 64 and tested at 64, 128, 256, 512 and 1024; prints "
        "the accuracy table (mean and range over seeds). --quick: the relative task, one seed, a "
        f"short training ({measured('experiment length --quick')}); the full run: "
        f"{FULL_RUNS['experiment length']} (docs/experiments/length-generalization.md).",
    )
    studies.study_arguments(length, "tables")
    length.add_argument("--encodings", nargs="+", help="a selection of encodings (default: all)")
    length.add_argument(
        "--tasks", nargs="+", help="a selection of copy_back, copy_position, copy_recent"
    )
    length.add_argument(
        "--workers",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="trainings run at once, each in its own process (default: 2, or 1 on one core); "
        "the numbers do not depend on it",
    )
    length.set_defaults(handler=studies.experiment_length)
    transplanted = experiments.add_parser(
        "transplant",
        help="a RoPE model's position encoding rescaled or replaced, tested at 1x-16x its "
        "training length",
        description="A small decoder-only model with RoPE is trained on a synthetic task at a "
        "short length; its position encoding is then rescaled (PI, NTK, dynamic NTK, YaRN, "
        "Llama 3.1) or replaced (ALiBi, KERPLE, FIRE, T5 buckets, none) with "
        "keras_posenc.zoo.transplant and fine-tuned, and each model is tested at 1x to 16x "
        "the training length; prints the accuracy table. --quick: one task, one seed, "
        f"length 32 ({measured('experiment transplant --quick')}); the full run: "
        f"{FULL_RUNS['experiment transplant']} (docs/experiments/transplant.md).",
    )
    studies.study_arguments(transplanted, "tables")
    transplanted.add_argument("--transplants", nargs="+", help="a selection (default: all)")
    transplanted.add_argument("--tasks", nargs="+", help="a selection of copy_back, copy_recent")
    transplanted.add_argument(
        "--model",
        metavar="FILE.keras",
        help="your own language model (e.g. a converted keras-hub preset, saved) instead of "
        "the one trained here; needs --text and --training-length",
    )
    transplanted.add_argument(
        "--text", metavar="FILE", help="with --model: the text file to fine-tune and test on"
    )
    transplanted.add_argument(
        "--training-length",
        type=int,
        help="with --model: the length it was trained at (the test lengths are 1x-16x it)",
    )
    transplanted.set_defaults(handler=studies.experiment_transplant)
    layouts = experiments.add_parser(
        "layouts",
        help="CoAtNet's layouts C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T on a texture-and-layout task",
        description="A small CoAtNet in each of the paper's four layouts, trained with fit on "
        "synthetic images whose class needs both local texture and global layout; prints "
        "the test and training accuracy per layout (mean ± std over seeds). --quick: one "
        f"seed, a short training ({measured('experiment layouts --quick')}); the full run: "
        f"{FULL_RUNS['experiment layouts']} (docs/experiments/coatnet-layouts.md).",
    )
    studies.study_arguments(layouts, "table")
    layouts.add_argument("--layouts", nargs="+", help="a selection of layouts (default: all four)")
    layouts.add_argument(
        "--positions",
        nargs="+",
        help="the Transformer stages' position encodings: table (default), rotary_axial, "
        "rotary_mixed, rotary_mixed_table, swin",
    )
    layouts.add_argument(
        "--merge", action="store_true", help="merge the rows into the CSV already in --out"
    )
    layouts.set_defaults(handler=studies.experiment_layouts)

    classify = commands.add_parser(
        "classify",
        help="the top classes of images, with a pretrained model (hf://ORG/REPO or a preset)",
        description="Classify image files (any format Pillow reads) with a preset: a folder "
        "written by save_preset, or hf://ORG/REPO, a timm CoAtNet on the Hugging Face hub "
        "(e.g. hf://timm/coatnet_0_rw_224.sw_in1k), which is downloaded and converted on "
        "first use and then read from the cache (KERAS_POSENC_HOME; HF_ENDPOINT, "
        "HF_HUB_OFFLINE and HF_HOME are honoured). Each image goes through the preset's "
        "preprocessing (timm's: resize, center crop, normalise); prints the top classes "
        "with their probabilities.",
    )
    classify.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    classify.add_argument(
        "--model",
        required=True,
        metavar="SOURCE",
        help="a preset folder or hf://ORG/REPO (downloads on first use)",
    )
    classify.add_argument(
        "--top", type=int, default=5, help="classes to print per image (default: 5)"
    )
    classify.set_defaults(handler=_classify)

    # translate and generate: keras_posenc/cli_text.py.
    cli_text.add_commands(commands, measured("generate") if "generate" in MEASURED else None)

    convert = commands.add_parser("convert", help="convert checkpoints of other libraries")
    converters = convert.add_subparsers(
        title="sources", dest="source", required=True, parser_class=subparser
    )
    fairseq = converters.add_parser(
        "fairseq",
        help="a fairseq fconv (ConvS2S) checkpoint -> a ConvS2S .keras file",
        description="Read a fairseq fconv checkpoint (.pt, loaded with weights_only=True: no "
        "pickled code runs), fold its weight norm and save the matching ConvS2S. Token ids "
        "0 and 1 are swapped (fairseq's <s>/<pad> -> our pad 0, bos 1); see the convert guide.",
    )
    fairseq.add_argument("src", help="the fairseq checkpoint (e.g. model.pt)")
    fairseq.add_argument("--out", required=True, help="the .keras file to write")
    fairseq.add_argument(
        "--weight-norm",
        action="store_true",
        help="keep weight-normalised convolutions (for fine-tuning); default: plain kernels",
    )
    fairseq.set_defaults(handler=_convert_fairseq)
    timm = converters.add_parser(
        "timm",
        help="a timm CoAtNet, MaxViT or MaxxViT checkpoint (coatnet_*_rw_*, maxvit_*, "
        "maxxvit*, coatnext_*) -> a .keras file",
        description="Read a timm CoAtNet, MaxViT or MaxxViT state dict (.safetensors, or .pth/.bin "
        "loaded with "
        "weights_only=True: no pickled code runs), build the matching zoo model (the variant "
        "is inferred from the tensors, or given with --name) and copy every tensor in; see "
        "the convert guide.",
    )
    timm.add_argument("src", help="the checkpoint (e.g. model.safetensors, pytorch_model.bin)")
    timm.add_argument("--out", required=True, help="the .keras file to write")
    timm.add_argument(
        "--name",
        help="the timm variant, e.g. coatnet_0_rw_224 or maxvit_tiny_tf_224 (default: inferred)",
    )
    timm.add_argument(
        "--timm-config",
        help="a JSON file with a custom timm MaxxVitCfg (dataclasses.asdict), or an object "
        "with it under 'cfg' and the image size under 'img_size'",
    )
    timm.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        metavar=("HEIGHT", "WIDTH"),
        help="build for this input size (sides divisible by 32; the relative position "
        "tables are resized bilinearly); default the checkpoint's configuration's",
    )
    timm.set_defaults(handler=_convert_timm)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``posenc`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    start = time.perf_counter()
    try:
        if getattr(args, "precheck", None) is not None:  # before Keras: fails within a second
            args.precheck(args)
        source = getattr(args, "model", None)
        if args.command == "generate":  # keras-hub's handles (hf:// is keras-hub's there)
            failure = cli_text.source_failure(source)
        elif args.command in ("classify", "translate"):
            failure = offline_failure(source)  # before Keras: fails within seconds
        else:
            failure = None
        if failure:
            raise ConnectionError(failure)
        with quiet_runtime(args.verbose):
            status = args.handler(args)
        # The long commands; demo prints its own closing line, and what classify,
        # translate and generate print (one result per line) is their output.
        if args.command in ("export", "probe", "experiment", "convert"):
            print(f"posenc {args.command}: done in {time.perf_counter() - start:.0f} s.")
        return status
    except (ValueError, TypeError, ImportError, RuntimeError, OSError, MemoryError) as error:
        # The library's errors already say what was wrong and what was expected; OSError's
        # name the file ("[Errno 17] File exists: 'out'"). One line, no traceback.
        print(f"posenc {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyError as error:  # a library bug on odd input; still one line
        print(f"posenc {args.command}: error: missing key {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
