"""``posenc demo`` without a name: the shipped digits classifier, end to end.

It loads ``coatnet_0`` with the weights shipped in the package (``weights="digits"``,
keras_posenc/zoo/weights/presets.json), prints its predictions on the held-out digits and
their accuracy, saves the model, exports it to every format verified on those digits, and
runs each artifact to show that it predicts the same classes. ``posenc demo NAME`` (a zoo
model on random weights) stays in keras_posenc/cli.py; this module imports Keras only
inside its function, as the CLI must (docs/development.md, "Import time").
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

# The preset the demo shows, and the name its outputs take in --out (cli.NAMING).
PRESET_MODEL = "coatnet_0"
PRESET_TAG = "digits"
OUTPUT_NAME = "coatnet_0_digits"
SHOWN = 16  # predictions printed one by one


def _row(label: str, values: Any) -> str:
    return f"   {label:<10}" + " ".join(str(int(v)) for v in values)


def run_preset_demo(
    args: argparse.Namespace, export_formats: Callable[..., list], output_path: Callable
) -> int:
    """The preset demo; ``export_formats`` and ``output_path`` are the CLI's (cli.NAMING)."""
    saved = output_path(args.out, OUTPUT_NAME, "keras")
    if os.path.exists(saved) and not args.overwrite:  # before minutes of work, as export does
        raise FileExistsError(f"{saved!r} already exists; pass --overwrite to replace it.")
    import keras
    import numpy as np

    from keras_posenc import zoo
    from keras_posenc.experiments.digits import digits_split
    from keras_posenc.export import FORMATS
    from keras_posenc.export.verification import _run_artifact

    start = time.perf_counter()
    entry = zoo.shipped_presets()[f"{PRESET_MODEL}/{PRESET_TAG}"]
    _, _, images, labels = digits_split(entry["seed"])
    model = zoo.create(PRESET_MODEL, weights=PRESET_TAG)
    print(
        f"1. loaded {PRESET_MODEL} with its shipped weights {PRESET_TAG!r} "
        f"({model.count_params():,} parameters; {entry['description']}) "
        f"on the {keras.backend.backend()} backend, from the installed package (no download)"
    )
    logits = keras.ops.convert_to_numpy(model.predict(images, batch_size=120, verbose=0))
    predicted = np.argmax(logits, axis=-1)
    correct = int(np.sum(predicted == labels))
    card = entry["metrics"]["held_out_accuracy"]
    print(f"2. predictions on the {len(labels)} held-out digits (the split of seed {entry['seed']}"
          f", none trained on); the first {SHOWN}:")  # fmt: skip
    print(_row("predicted", predicted[:SHOWN]))
    print(_row("true", labels[:SHOWN]))
    print(
        f"   held-out accuracy {correct / len(labels):.1%} ({correct} of {len(labels)}); "
        f"the model card's: {card:.1%}"
    )
    model.save(saved)
    print(f"3. saved it as {saved} (posenc export {saved} --out DIR exports it again)")
    print(
        f"4. exporting to {', '.join(FORMATS)} in {args.out}, each verified on the "
        "held-out digits:\n"
    )
    # Verified on the digits themselves (batches of 8: the exported graphs take any batch).
    reports = export_formats(
        model, OUTPUT_NAME, args.out, FORMATS, overwrite=args.overwrite,
        verify_inputs=[images[:8], images[8:40]],
    )  # fmt: skip
    print(f"5. the exported artifacts' predictions on all {len(labels)} held-out digits:")
    for report in reports:
        artifact = np.argmax(_run_artifact(report, images)[0], axis=-1)
        same = int(np.sum(artifact == predicted))
        print(
            f"   {report.format:<15} {same} of {len(labels)} equal to Keras', accuracy "
            f"{np.mean(artifact == labels):.1%}  ({report.path})"
        )
        if same != len(labels):
            raise RuntimeError(
                f"posenc demo: the {report.format} artifact predicts another class for "
                f"{len(labels) - same} of the {len(labels)} digits."
            )
    print(f"done in {time.perf_counter() - start:.0f} s: every artifact predicts as Keras does.")
    return 0
