"""The `posenc probe` and `posenc experiment` commands: the studies, run with the command
line's common arguments (``--quick``, ``--out``, ``--seeds``), their markdown tables printed.

`keras_posenc.cli` builds the parser and dispatches here; each study is imported only when its
command runs, so ``posenc --help`` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any


def probe_padding(args: argparse.Namespace) -> int:
    from keras_posenc.experiments.padding import padding_experiment, summary_markdown

    rows = padding_experiment(
        quick=args.quick,
        out=args.out,
        seeds=args.seeds or None,
        studies=args.studies,
        verbose=True,
    )
    # A short summary: the padding table on noise input (the study's headline). Every
    # table, the CSV and the figures go to --out (summary.md, padding.csv, *.png).
    headline = [r for r in rows if r["table"] == "padding" and r["input"] == "noise"]
    print()
    print(summary_markdown(headline or rows))
    print(  # what the numbers mean, where they are printed (as docs/index.md says)
        "\nSPC: Spearman's rank correlation of the drawn and the true map (1 perfect, 0 none); "
        "MAE: their mean absolute error. Targets: horizontal (H) and vertical (V) ramps, a "
        "Gaussian (G), horizontal and vertical stripes (HS, VS)."
    )
    if args.out:
        print(f"wrote every table (summary.md), padding.csv and the figures to {args.out}")
    else:
        print(
            f"{len(rows)} rows; the other tables (grey and white inputs, the paper's Tables "
            "2-4), the CSV and the figures are written with --out DIR."
        )
    return 0


def experiment_length(args: argparse.Namespace) -> int:
    from keras_posenc.experiments.length_generalization import (
        length_generalization_experiment,
        markdown_table,
    )

    choices = {"encodings": args.encodings, "tasks": args.tasks, "workers": args.workers}
    return run_study(length_generalization_experiment, markdown_table, args, choices)


def experiment_transplant(args: argparse.Namespace) -> int:
    from keras_posenc.experiments.transplant_study import markdown_table, transplant_study

    names = ("transplants", "tasks", "model", "text", "training_length")
    choices = {name: getattr(args, name) for name in names}
    return run_study(transplant_study, markdown_table, args, choices)


def experiment_layouts(args: argparse.Namespace) -> int:
    from keras_posenc.experiments.coatnet_layouts import layout_experiment, markdown_table

    choices = {name: getattr(args, name) for name in ("layouts", "positions", "merge")}
    return run_study(layout_experiment, markdown_table, args, choices)


def study_arguments(parser: argparse.ArgumentParser, tables: str) -> None:
    """``--quick``, ``--out`` and ``--seeds``, which every ``posenc experiment`` takes."""
    parser.add_argument("--quick", action="store_true", help="a short smoke run (one seed)")
    parser.add_argument("--out", help=f"folder for the CSV, the markdown {tables} and the PNG plot")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the mode's own)")


def run_study(study: Any, table: Any, args: argparse.Namespace, choices: dict) -> int:
    """Runs an experiment with the CLI's common arguments and prints its markdown table."""
    rows = study(
        quick=args.quick,
        out=args.out,
        seeds=args.seeds or None,
        verbose=2 if args.verbose else 1,  # 1: a line per model; 2: and Keras' per training
        **{key: value for key, value in choices.items() if value},
    )
    print()
    print(table(rows))
    if args.out:
        print(f"wrote the table (CSV, markdown) and the plot (PNG) to {args.out}")
    return 0
