"""Where a CoAtNet's inference time goes, part by part, on the active Keras backend.

The profile behind issue #21's CoAtNet item: the zoo model (``coatnet_0`` at
224 x 224, batch 8 by default, random weights, float32) is cut into its parts,
each part wrapped in its own Keras model around the same layer objects (so the
same weights) and timed the way benchmarks/coatnet.py times the whole model,
``predict_on_batch`` (the backend's compiled predict step: tf.function, jax.jit;
PyTorch eagerly under no_grad):

    stem        the stem's convolutions, normalisations and activations
    S1 .. S4    each stage's blocks (MBConv or RelativeTransformerBlock2D), one part
                per block kind and stage
    head        pooling, normalisation, classifier
    whole       the whole model, for comparison with the sum of the parts

and, with ``--ops``, single operations of the first stage's second block on its
hidden map (e.g. (8, 56, 56, 384) for ``coatnet_0``), each as its own model: the
minimal reproductions of the profile's findings

    op: depthwise 3x3, Keras layer     keras.layers.DepthwiseConv2D
    op: depthwise 3x3, as MBConv runs it   (MBConv's own path on the backend)
    op: 1x1 conv                        the block's project convolution (MBConv runs the
                                        Keras layer: JAX's 1 x 1 convolutions as products were
                                        deleted, docs/benchmark-notes.md)

Parts are timed round-robin (``--repeats`` rounds, every part once per round),
each on the output of the part before it; medians. ``share`` is a part's time
over the sum of the parts. Run it on each backend (the runner's across_tensorflow
table puts them side by side).

Usage:
    KERAS_BACKEND=torch python benchmarks/coatnet_parts.py
    python -m benchmarks run coatnet_parts
"""

from __future__ import annotations

import statistics
import time

from _timing import finish  # benchmarks/_timing.py, next to this script
from coatnet import model_arguments  # benchmarks/coatnet.py


def _parts(model) -> list[tuple[str, list]]:
    """``(name, layers)`` in order: the stem, each stage's blocks, the head."""
    parts: list[tuple[str, list]] = []
    for layer in model.layers[1:]:  # [0] is the input
        name = layer.name
        if name.startswith("stage"):
            stage = name.split("_")[0].removeprefix("stage")
            part = f"S{stage} ({type(layer).__name__})"
        else:
            part = "stem" if name.startswith("stem") else "head"
        if parts and parts[-1][0] == part:
            parts[-1][1].append(layer)
        else:
            parts.append((part, [layer]))
    return parts


def _sub_model(layers: list, input_shape: tuple):
    import keras

    inputs = keras.Input(input_shape[1:], batch_size=input_shape[0])
    x = inputs
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x)


def _operations(model, batch: int) -> list[tuple[str, object, object]]:
    """``(name, model, input)`` for the single operations of ``--ops``."""
    import keras
    import numpy as np

    block = next(layer for layer in model.layers if layer.name == "stage1_block2")

    class Apply(keras.layers.Layer):
        """Runs ``function(block, x)``; holds the block so its weights are the model's."""

        def __init__(self, block, function, **kwargs):
            super().__init__(**kwargs)
            self.block, self.function = block, function

        def call(self, x):
            return self.function(self.block, x)

    size = block.input.shape[1]
    hidden = np.random.default_rng(1).standard_normal((batch, size, size, block.hidden_filters))
    hidden = hidden.astype("float32")
    depthwise = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)
    cases = [
        ("op: depthwise 3x3, Keras layer", lambda _, x: depthwise(x)),
        ("op: depthwise 3x3, as MBConv runs it", lambda b, x: b._depthwise(x)),
        ("op: 1x1 conv", lambda b, x: b.project_conv(x)),
    ]
    operations = []
    for name, function in cases:
        inputs = keras.Input(hidden.shape[1:], batch_size=batch)
        operation = keras.Model(inputs, Apply(block, function)(inputs))
        operation.predict_on_batch(hidden)  # warm-up
        operations.append((name, operation, hidden))
    return operations


def main(argv: list[str] | None = None) -> int:
    parser = model_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--ops", action="store_true", help="also time single operations")
    parser.add_argument("--json", help="also write the rows here (the runner's)")
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from keras_posenc import zoo

    model = zoo.create(args.model, input_shape=(args.size, args.size, 3))
    x = np.random.default_rng(0).standard_normal((args.batch, args.size, args.size, 3))
    timed = []  # (part, run)
    current = x.astype("float32")
    for part, layers in _parts(model):
        sub_model = _sub_model(layers, current.shape)
        inputs = current
        current = np.asarray(sub_model.predict_on_batch(inputs))  # warm-up, next input
        timed.append((part, lambda m=sub_model, i=inputs: m.predict_on_batch(i)))
    whole_input = x.astype("float32")
    model.predict_on_batch(whole_input)
    timed.append(("whole", lambda: model.predict_on_batch(whole_input)))
    if args.ops:
        for name, operation, inputs in _operations(model, args.batch):
            timed.append((name, lambda m=operation, i=inputs: m.predict_on_batch(i)))

    times: dict[str, list[float]] = {part: [] for part, _ in timed}
    for _ in range(args.repeats):
        for part, run in timed:
            start = time.perf_counter()
            run()
            times[part].append(time.perf_counter() - start)
    medians = {part: statistics.median(values) for part, values in times.items()}
    total = sum(seconds for part, seconds in medians.items() if part != "whole" and ":" not in part)
    print(
        f"{args.model} at {args.size}x{args.size}, batch {args.batch}, backend "
        f"{keras.backend.backend()}, predict_on_batch, medians of {args.repeats}"
    )
    rows = []
    for part, seconds in medians.items():
        share = seconds / total
        print(f"{part:34s} {seconds * 1e3:9.1f} ms  {share:6.1%}")
        rows.append(
            {
                "backend": keras.backend.backend(),
                "part": part,
                "seconds": seconds,
                "share": share,
            }
        )
    return finish(rows, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
