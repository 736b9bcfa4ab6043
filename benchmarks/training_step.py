"""Time and extra peak memory of one training step of relative attention against
keras.layers.MultiHeadAttention.

A training step is one forward and one backward pass (batch 1, 8 heads, head size 64,
self-attention, ``training=True``, dropout 0): the gradients of the sum of the output with
respect to the input and every trainable weight. TensorFlow runs it eagerly under a
``GradientTape`` (as relative_attention.py runs its forward pass: eager), JAX as one
``jax.jit`` of ``jax.grad`` of the layer's ``stateless_call``, PyTorch eagerly with
``backward``. For each length L and implementation a fresh subprocess builds the layer at
a tiny length, then runs one warm-up step (and any tracing or compilation) and
``--repeats`` timed steps; extra peak memory is the growth of the process's peak resident
set (ru_maxrss) over those steps, so imports and weights do not count, as in
relative_attention.py. The time ratio to keras_mha (``x_mha``) is then measured in the
same process: steps of the layer and of MultiHeadAttention alternate, and it is the median
of the pairs' ratios.

The memory this measures is what the backward pass keeps: a relative attention's query
blocks (above L = 1024 at 8 heads) are recomputed one at a time in the backward pass
(keras_posenc/layers/_attention.py, ``attend_in_blocks``) instead of keeping every block's
probabilities. S is one float32 score tensor, heads x L x L x 4 bytes (128 MiB at L = 2048).

Implementations:
    keras_mha        keras.layers.MultiHeadAttention (the baseline)
    rel_bias         MultiHeadRelativeAttention(relative="bias")
    rel_keys         MultiHeadRelativeAttention(relative="keys")
    rel_keys_values  MultiHeadRelativeAttention(relative="keys_values")

Usage:
    KERAS_BACKEND=torch python benchmarks/training_step.py
    python benchmarks/training_step.py --lengths 512,1024,2048 --impls keras_mha,rel_keys
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from _timing import case_in_subprocess, finish  # benchmarks/_timing.py, next to this script

HEADS, HEAD_DIM, MAX_DISTANCE = 8, 64, 16
IMPLEMENTATIONS = ("keras_mha", "rel_bias", "rel_keys", "rel_keys_values")
# The runner (benchmarks/runner.py) reads this default to run one length per case; 4096
# (a few GB and tens of seconds a step on 2 cores) is asked for with --lengths.
DEFAULT_LENGTHS = "512,1024,2048"


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _make_layer(implementation: str):
    import keras

    if implementation == "keras_mha":
        return keras.layers.MultiHeadAttention(HEADS, HEAD_DIM)
    from keras_posenc import layers

    relative = implementation.removeprefix("rel_")
    return layers.MultiHeadRelativeAttention(
        HEADS, HEAD_DIM, relative=relative, position=layers.ClipPositions(MAX_DISTANCE)
    )


def _training_step(layer):
    """``step(x)``: the gradients of ``sum(layer(x, x))`` for the input and the weights,
    as NumPy arrays (so the step is finished when it returns)."""
    import keras
    from keras import ops

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                total = tf.reduce_sum(layer(x, x, training=True))
            variables = [v.value for v in layer.trainable_variables]
            return [ops.convert_to_numpy(g) for g in tape.gradient(total, [x, *variables])]

        return step
    if backend == "jax":
        import jax

        def loss(trainable, non_trainable, x):
            output, _ = layer.stateless_call(trainable, non_trainable, x, x, training=True)
            return ops.sum(output)

        gradients = jax.jit(jax.grad(loss, argnums=(0, 2)))

        def step(x):
            trainable = [v.value for v in layer.trainable_variables]
            non_trainable = [v.value for v in layer.non_trainable_variables]
            grads = gradients(trainable, non_trainable, x)
            return jax.tree_util.tree_map(ops.convert_to_numpy, grads)

        return step

    def step(x):
        x = x.detach().requires_grad_(True)
        for variable in layer.trainable_variables:
            variable.value.grad = None
        layer(x, x, training=True).sum().backward()
        grads = [x.grad] + [v.value.grad for v in layer.trainable_variables]
        return [g.detach().cpu().numpy() for g in grads]

    return step


def _built_step(implementation: str):
    import numpy as np

    layer = _make_layer(implementation)
    tiny = np.zeros((1, 8, HEADS * HEAD_DIM), "float32")
    layer(tiny, tiny)  # build the weights at a tiny length
    return _training_step(layer)


def run_case(implementation: str, length: int, repeats: int) -> dict:
    """Runs one case in this process and returns its measurements."""
    import keras
    import numpy as np
    from keras import ops

    step = _built_step(implementation)
    inputs = ops.convert_to_tensor(
        np.random.default_rng(0).standard_normal((1, length, HEADS * HEAD_DIM)).astype("float32")
    )
    before = _peak_rss_bytes()
    step(inputs)  # warm-up (and any tracing or compilation)
    times = [_seconds(step, inputs) for _ in range(repeats)]
    row = {
        "backend": keras.backend.backend(),
        "implementation": implementation,
        "length": length,
        "seconds": float(np.median(times)),
        "extra_peak_bytes": _peak_rss_bytes() - before,
        "x_mha": 1.0,
    }
    if implementation == "keras_mha":
        return row
    # The time ratio in this process, after the memory reading (see the module's docstring).
    baseline = _built_step("keras_mha")
    baseline(inputs)
    pairs = [(_seconds(step, inputs), _seconds(baseline, inputs)) for _ in range(repeats)]
    row["seconds"] = float(np.median([own for own, _ in pairs]))
    row["mha_seconds"] = float(np.median([mha for _, mha in pairs]))
    row["x_mha"] = float(np.median([own / mha for own, mha in pairs]))
    return row


def _seconds(step, inputs) -> float:
    start = time.perf_counter()
    step(inputs)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS)
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--case", nargs=2, metavar=("IMPL", "LENGTH"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--json",
        help="also write the rows (with x_mha, the time ratio, and extra_S, the memory in S) "
        "to this JSON file",
    )
    args = parser.parse_args(argv)

    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.repeats)))
        return 0

    implementations = [i for i in args.impls.split(",") if i]
    unknown = set(implementations) - set(IMPLEMENTATIONS)
    if unknown:
        parser.error(f"--impls: unknown {sorted(unknown)}; choose from {IMPLEMENTATIONS}")
    rows = []
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    print(f"backend {backend}; batch 1, {HEADS} heads, head size {HEAD_DIM}, training step")
    print(f"{'impl':<16}{'L':>6}{'ms':>10}{'x mha':>8}{'extra MB':>10}{'x S':>7}")
    for length in (int(n) for n in args.lengths.split(",")):
        score_bytes = HEADS * length * length * 4
        for implementation in implementations:
            row = case_in_subprocess(__file__, implementation, length, args.repeats)
            rows.append(row)
            if "error" in row:
                print(f"{implementation:<16}{length:>6}  failed: {row['error']}")
                continue
            row["extra_S"] = row["extra_peak_bytes"] / score_bytes
            print(
                f"{implementation:<16}{length:>6}{row['seconds'] * 1e3:>10.1f}"
                f"{row['x_mha']:>8.2f}{row['extra_peak_bytes'] / 2**20:>10.0f}"
                f"{row['extra_S']:>7.2f}",
                flush=True,
            )
    return finish(rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
