"""Building relative logits: the ways of reading a relative table, timed against each other.

`MultiHeadRelativeAttention` reads its relative tables into (heads, q_len, k_len)
logits in one of several ways that give the same numbers; `_compile.relative_gather`
picks one per backend, by the times this script measures (docs/benchmarks.md,
"Building the relative logits"). For each length L (8 heads, head size 64, batch 1,
self-attention, a clip table of 33 rows) one process times every way in turn,
round-robin (``--repeats`` rounds, each way once per round, medians), in inference
mode (`_timing.inference`: on PyTorch under ``torch.no_grad``):

    bias   gather        `RelativePositionBias.per_head` read through an (L, L) index
                         into heads-first order (the baseline)
           rows          the same gathered as rows of 8 (heads) values, then transposed
           toeplitz      the same built from its diagonals in strips
                         (`relative_index.toeplitz`)
           windows       the same built from its diagonals by runs of 16 keys
                         (`relative_index.toeplitz(method="windows")`)
    keys   flat          ``q_i . w[idx(i, j)]``: one gather from the flattened
                         (batch, heads, L * rows) products (the baseline)
           flat_2d       the same from a (batch * heads, L * rows) view
           rows          rows of the transposed (L * rows, batch * heads) products
           gather        PyTorch only: ``torch.gather`` with the (L, L) index broadcast
                         as a view (`_compile.take_along_last_axis`)
    fused  built_bias    PyTorch only: keras.ops.dot_product_attention with the
                         (1, heads, L, L) bias built by the fastest way (the baseline)
           strided_bias  `_compile.attention_with_toeplitz_bias`: the bias as a
                         strided view of its diagonals, never built
    cumsum ops           the value term's cumulative sums of (1, heads, L, L)
                         probabilities: ``keras.ops.cumsum`` (the baseline)
           blocked       `_compile.blocked_cumulative_sum`: blocks of 32 keys, each
                         summed by one matrix product (the layer's way on TensorFlow)
    fill   fresh         PyTorch only: the "gather" way of "keys" into a new tensor,
                         as each call allocates it (the baseline)
           reused        the same written into one tensor kept between calls
                         (``out=``, as `_compile.Workspace` does within a call)

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
    "cumsum": "ops",
    "fill": "fresh",
}


def _ways(length: int) -> dict:
    """``(group, way) -> a function of no arguments`` that computes it once."""
    import keras
    import numpy as np
    from keras import ops

    from keras_posenc import _compile
    from keras_posenc.layers import MultiHeadRelativeAttention

    rng = np.random.default_rng(0)
    x = ops.convert_to_tensor(rng.standard_normal((1, length, HEADS * HEAD_DIM), "float32"))
    layers = {}
    for relative in ("bias", "keys"):
        layer = MultiHeadRelativeAttention(
            HEADS, HEAD_DIM, relative=relative, bucketing="clip", max_distance=MAX_DISTANCE
        )
        layer(x[:, :8], x[:, :8])
        layers[relative] = layer
    q = layers["keys"].query_dense(x)
    original = _compile.relative_gather

    def forced(kind: str, method: str, run):
        def call():
            _compile.relative_gather = lambda asked: method if asked == kind else original(asked)
            try:
                return ops.convert_to_numpy(run())
            finally:
                _compile.relative_gather = original

        return call

    bias_layer = layers["bias"].relative_bias
    ways = {}
    for method in ("gather", "rows", "toeplitz", "windows"):
        run = lambda: bias_layer.per_head(length, length, 0, "float32")  # noqa: E731
        ways["bias", method] = forced("bias", method, run)
    keys_layer = layers["keys"]
    on_torch = keras.backend.backend() == "torch"
    for method in ("flat", "flat_2d", "rows") + (("gather",) if on_torch else ()):
        run = lambda: keys_layer._gathered_key_logits(q, length, length, 0)  # noqa: E731
        ways["keys", method] = forced("keys", method, run)
    if on_torch:
        k = v = ops.reshape(x, (1, length, HEADS, HEAD_DIM))
        scaled = k * (HEAD_DIM**-0.5)
        diagonals = bias_layer.diagonals(length, length, 0, "float32")

        def built():
            bias = ops.expand_dims(bias_layer.per_head(length, length, 0, "float32"), 0)
            return ops.dot_product_attention(scaled, k, v, bias=bias, scale=1.0)

        ways["fused", "built_bias"] = lambda: ops.convert_to_numpy(built())
        ways["fused", "strided_bias"] = lambda: ops.convert_to_numpy(
            _compile.attention_with_toeplitz_bias(scaled, k, v, diagonals)
        )
    probabilities = ops.softmax(
        ops.convert_to_tensor(rng.standard_normal((1, HEADS, length, length), "float32"))
    )
    ways["cumsum", "ops"] = lambda: ops.convert_to_numpy(ops.cumsum(probabilities, axis=-1))
    ways["cumsum", "blocked"] = lambda: ops.convert_to_numpy(
        _compile.blocked_cumulative_sum(probabilities)
    )
    if on_torch:
        import torch

        table = ops.cast(keys_layer.relative_keys.table(), q.dtype)
        per_row = ops.cast(ops.einsum("bqhd,rd->bhqr", q * (HEAD_DIM**-0.5), table), "float32")
        index = keys_layer.relative_keys.indices(length, length, 0)
        kept = torch.empty((1, HEADS, length, length))
        # Only the gather is timed (no copy to numpy: that would read the tensor again).
        ways["fill", "fresh"] = lambda: _compile.take_along_last_axis(per_row, index)
        ways["fill", "reused"] = lambda: _compile.take_along_last_axis(per_row, index, kept)
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
