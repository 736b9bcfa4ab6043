"""Building relative logits: the ways of reading a relative table, timed against each other.

`MultiHeadRelativeAttention` reads its relative tables into (heads, q_len, k_len)
logits through the backend kernels (`keras_posenc.backend`): each has a reference and
portable variants (`keras_posenc.backend.algorithms`) that give the same numbers, and a
backend overrides the reference with one where this script measured it faster
(docs/benchmark-notes.md, "Building the relative logits"). For each length L (8 heads,
head size 64, batch 1, self-attention, a clip table of 33 rows) one process times every way in turn,
round-robin (``--repeats`` rounds, each way once per round, medians), in inference
mode (`_timing.inference`: on PyTorch under ``torch.no_grad``):

    bias   gather        a bias table read through an (L, L) index into heads-first
                         order (`common.gather_heads_first`, the baseline)
           reference     the same built from its diagonals by one gather
                         (`common.toeplitz`)
           windows       the same built from its diagonals by runs of 16 keys
                         (`algorithms.toeplitz_by_windows`)
    keys   flat          ``q_i . w[idx(i, j)]``: one gather from the flattened
                         (batch, heads, L * rows) products (`common.relative_key_logits`,
                         the baseline)
           gather        PyTorch only: ``torch.gather`` with the (L, L) index broadcast
                         as a view (keras_posenc/backend/torch.py)
    fused  built_bias    PyTorch only: keras.ops.dot_product_attention with the
                         (1, heads, L, L) bias built (the baseline)
           strided_bias  PyTorch's `toeplitz_attention`: the bias as a strided view of
                         its diagonals, never built
    fill   fresh         PyTorch only: the "gather" way of "keys" into a new tensor,
                         as each call allocates it (the baseline)
           reused        the same written into one tensor kept between calls
                         (``out=``, as PyTorch's `backend.scratch` does within a call)

``x base`` is each way's time over its group's baseline, per round, then the median.

Usage:
    KERAS_BACKEND=torch python benchmarks/relative_logits.py
    python benchmarks/relative_logits.py --lengths 1024 --repeats 9
"""

from __future__ import annotations

import argparse
import statistics
import time

from _timing import finish, inference  # benchmarks/_timing.py, next to this script

HEADS, HEAD_DIM, MAX_DISTANCE = 8, 64, 16
# The runner (benchmarks/runner.py) reads this default to run one length per case.
DEFAULT_LENGTHS = "512,1024,2048"
BASELINES = {
    "bias": "gather",
    "keys": "flat",
    "fused": "built_bias",
    "fill": "fresh",
}


def _ways(length: int) -> dict:
    """``(group, way) -> a function of no arguments`` that computes it once."""
    import keras
    import numpy as np
    from keras import ops

    from keras_posenc.backend import algorithms, common
    from keras_posenc.layers import ClipPositions, MultiHeadRelativeAttention

    rng = np.random.default_rng(0)
    x = ops.convert_to_tensor(rng.standard_normal((1, length, HEADS * HEAD_DIM), "float32"))
    layers = {}
    for relative in ("bias", "keys"):
        layer = MultiHeadRelativeAttention(
            HEADS, HEAD_DIM, relative=relative, position=ClipPositions(MAX_DISTANCE)
        )
        layer(x[:, :8], x[:, :8])
        layers[relative] = layer
    q = layers["keys"].query_dense(x)

    def numpy(function, *args):
        return lambda: ops.convert_to_numpy(function(*args))

    bias_layer = layers["bias"].relative_bias
    table = ops.cast(bias_layer.table(), "float32")
    bias_index = bias_layer.indices(length, length, 0)
    diagonals = bias_layer.diagonals(length, length, 0, "float32")
    ways = {
        ("bias", "gather"): numpy(common.gather_heads_first, table, bias_index),
        ("bias", "reference"): numpy(common.toeplitz, diagonals, length, length),
        ("bias", "windows"): numpy(algorithms.toeplitz_by_windows, diagonals, length, length),
    }
    keys_layer = layers["keys"]
    key_table = keys_layer.relative_keys.table()
    index = keys_layer.relative_keys.indices(length, length, 0)
    ways["keys", "flat"] = numpy(common.relative_key_logits, q, key_table, index)
    on_torch = keras.backend.backend() == "torch"
    if on_torch:
        from keras_posenc.backend import torch as torch_kernels

        ways["keys", "gather"] = numpy(torch_kernels.relative_key_logits, q, key_table, index)
        k = v = ops.reshape(x, (1, length, HEADS, HEAD_DIM))
        scaled = k * (HEAD_DIM**-0.5)

        def built():
            bias = ops.expand_dims(common.toeplitz(diagonals, length, length), 0)
            return ops.dot_product_attention(scaled, k, v, bias=bias, scale=1.0)

        ways["fused", "built_bias"] = numpy(built)
        ways["fused", "strided_bias"] = numpy(
            torch_kernels.toeplitz_attention, scaled, k, v, diagonals
        )
    if on_torch:
        import torch

        per_row = ops.cast(ops.einsum("bqhd,rd->bhqr", q, key_table), "float32")
        kept = torch.empty((1, HEADS, length, length))
        # Only the gather is timed (no copy to numpy: that would read the tensor again).
        ways["fill", "fresh"] = lambda: torch_kernels._gather(per_row, index)
        ways["fill", "reused"] = lambda: torch_kernels._gather(per_row, index, kept)
    return ways


def run_length(length: int, repeats: int) -> list[dict]:
    """Times every way at ``length``, round-robin, and checks each group agrees."""
    import keras
    import numpy as np

    with inference():
        ways = _ways(length)
        results = {way: run() for way, run in ways.items()}  # warm-up, and the values
        for (group, method), value in results.items():
            base = keras.ops.convert_to_numpy(results[group, BASELINES[group]])
            difference = float(np.max(np.abs(keras.ops.convert_to_numpy(value) - base)))
            if difference > 1e-4:
                raise AssertionError(f"{group} {method} differs from the baseline by {difference}")
        times = {way: [] for way in ways}
        for _ in range(repeats):
            for way, run in ways.items():
                start = time.perf_counter()
                run()
                times[way].append(time.perf_counter() - start)
    rows = []
    for (group, method), seconds in times.items():
        base = times[group, BASELINES[group]]
        rows.append(
            {
                "backend": keras.backend.backend(),
                "group": group,
                "method": method,
                "length": length,
                "seconds": statistics.median(seconds),
                "x_base": statistics.median(own / other for own, other in zip(seconds, base)),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", help="also write the rows to this file (the runner's)")
    args = parser.parse_args(argv)
    rows = []
    for length in (int(value) for value in args.lengths.split(",")):
        for row in run_length(length, args.repeats):
            print(
                f"{row['group']:6s} {row['method']:13s} L={length:5d} "
                f"{row['seconds'] * 1e3:8.1f} ms  x base {row['x_base']:.2f}",
                flush=True,
            )
            rows.append(row)
    return finish(rows, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
