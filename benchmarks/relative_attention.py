"""Time and extra peak memory of relative attention against keras.layers.MultiHeadAttention.

For each sequence length L (batch 1, 8 heads, head size 64, self-attention, one
forward pass in inference mode: on PyTorch under ``torch.no_grad``) and each
implementation, a fresh subprocess builds the layer, runs one warm-up call, then
times ``--repeats`` calls. Extra peak memory is the growth of the process's peak
resident set (ru_maxrss) from just before the first full-length call to the end
of those calls, so imports and weights do not count. The time ratio to keras_mha
is then measured in the same process: calls of the layer and of
keras.layers.MultiHeadAttention alternate ``--repeats`` times, and ``x_mha`` is
the median of the pairs' ratios (``seconds`` and ``mha_seconds`` are the medians
of the two sides).

Implementations:
    keras_mha        keras.layers.MultiHeadAttention (the baseline)
    rel_bias         MultiHeadRelativeAttention(relative="bias")
    rel_keys         MultiHeadRelativeAttention(relative="keys")
    rel_keys_values  MultiHeadRelativeAttention(relative="keys_values")
                     (the rel_* layers use their defaults, so above L = 1024 at 8 heads
                     they process the queries in blocks: query_block_size=None)
    naive_shaw       Shaw et al. written the obvious way: a^K and a^V gathered into
                     (L, L, 64) tensors (only up to L = 2048: it needs them in memory)

Position schemes (`--impls` only; not in the default list), MultiHeadRelativeAttention with:
    alibi            relative="bias", position=ALiBi()
    kerple           relative="bias", position=KERPLE("log")
    fire             relative="bias", position=FIRE() (causal: use_causal_mask=True)
    continuous       relative="bias", position=ContinuousBias() (hidden 512)
    rope             relative=None, rotary=RotaryPositions()
    rope_yarn        relative=None, rotary=RotaryPositions(scaling="yarn", ...)

The yardstick S is one float32 score tensor, heads x L x L x 4 bytes (134 MB at
L = 2048); memory is reported in units of S, time as a ratio to keras_mha.

Usage:
    KERAS_BACKEND=torch python benchmarks/relative_attention.py
    python benchmarks/relative_attention.py --lengths 256,1024 --impls keras_mha,rel_keys
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

from _timing import (  # benchmarks/_timing.py, next to this script
    case_in_subprocess,
    finish,
    inference,
)

HEADS, HEAD_DIM, MAX_DISTANCE = 8, 64, 16
IMPLEMENTATIONS = ("keras_mha", "rel_bias", "rel_keys", "rel_keys_values", "naive_shaw")
SCHEME_IMPLEMENTATIONS = ("alibi", "kerple", "fire", "continuous", "rope", "rope_yarn")
NAIVE_MAX_LENGTH = 2048
# The runner (benchmarks/runner.py) reads this default to run one length per case.
DEFAULT_LENGTHS = "256,512,1024,2048,4096"


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _naive_shaw_layer():
    import keras
    from keras import ops

    class NaiveShaw(keras.layers.Layer):
        """Shaw et al. 2018 with a^K and a^V materialised as (L, L, d) tensors."""

        def build(self, input_shape):
            dim = HEADS * HEAD_DIM
            self.qkv = keras.layers.Dense(3 * dim)
            self.qkv.build(input_shape)
            self.out = keras.layers.Dense(input_shape[-1])
            self.out.build(input_shape[:-1] + (dim,))
            rows = 2 * MAX_DISTANCE + 1
            self.table_k = self.add_weight(shape=(rows, HEAD_DIM), name="table_k")
            self.table_v = self.add_weight(shape=(rows, HEAD_DIM), name="table_v")

        def call(self, x):
            batch, length = ops.shape(x)[0], ops.shape(x)[1]
            qkv = ops.reshape(self.qkv(x), (batch, length, 3, HEADS, HEAD_DIM))
            q, k, v = (ops.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))
            positions = ops.arange(length)
            index = ops.clip(positions[None, :] - positions[:, None], -MAX_DISTANCE, MAX_DISTANCE)
            a_k = ops.take(self.table_k, index + MAX_DISTANCE, axis=0)  # (L, L, d)
            a_v = ops.take(self.table_v, index + MAX_DISTANCE, axis=0)
            logits = ops.einsum("bhid,bhjd->bhij", q, k) + ops.einsum("bhid,ijd->bhij", q, a_k)
            weights = ops.softmax(logits / HEAD_DIM**0.5, axis=-1)
            context = ops.einsum("bhij,bhjd->bhid", weights, v)
            context = context + ops.einsum("bhij,ijd->bhid", weights, a_v)
            context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (batch, length, -1))
            return self.out(context)

    return NaiveShaw()


def _make_layer(implementation: str):
    import keras

    if implementation == "keras_mha":
        layer = keras.layers.MultiHeadAttention(HEADS, HEAD_DIM)
        return layer, lambda x: layer(x, x)
    if implementation == "naive_shaw":
        layer = _naive_shaw_layer()
        return layer, layer
    from keras_posenc import layers

    if implementation in SCHEME_IMPLEMENTATIONS:
        arguments = {
            "alibi": dict(relative="bias", position=layers.ALiBi()),
            "kerple": dict(relative="bias", position=layers.KERPLE("log")),
            "fire": dict(relative="bias", position=layers.FIRE()),
            "continuous": dict(relative="bias", position=layers.ContinuousBias()),
            "rope": dict(relative=None, rotary=layers.RotaryPositions()),
            "rope_yarn": dict(
                relative=None,
                rotary=layers.RotaryPositions(
                    scaling="yarn", scaling_factor=4.0, training_length=512
                ),
            ),
        }[implementation]
        layer = layers.MultiHeadRelativeAttention(HEADS, HEAD_DIM, **arguments)
        causal = implementation == "fire"  # FIRE is defined for causal attention only
        return layer, lambda x: layer(x, x, use_causal_mask=causal)
    relative = implementation.removeprefix("rel_")
    layer = layers.MultiHeadRelativeAttention(
        HEADS, HEAD_DIM, relative=relative, position=layers.ClipPositions(MAX_DISTANCE)
    )
    return layer, lambda x: layer(x, x)


def run_case(implementation: str, length: int, repeats: int) -> dict:
    """Runs one case in this process and returns its measurements.

    Every call is an inference call (`_timing.inference`: on PyTorch under
    ``torch.no_grad``, as Keras' ``predict`` runs it), for the layer and the baseline alike.
    """
    with inference():
        return _run_case(implementation, length, repeats)


def _run_case(implementation: str, length: int, repeats: int) -> dict:
    import keras
    import numpy as np
    from keras import ops

    layer, forward = _make_layer(implementation)
    forward(np.zeros((1, 8, HEADS * HEAD_DIM), "float32"))  # build weights at a tiny length
    inputs = ops.convert_to_tensor(
        np.random.default_rng(0).standard_normal((1, length, HEADS * HEAD_DIM)).astype("float32")
    )
    before = _peak_rss_bytes()
    ops.convert_to_numpy(forward(inputs))  # warm-up (and any tracing)
    times = []
    for _ in range(repeats):
        times.append(_seconds(forward, inputs))
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
    # The time ratio, in this process (after the memory reading, so the baseline's
    # tensors do not count): calls of the layer and of MultiHeadAttention alternate,
    # and the ratio is the median of the pairs' ratios. A baseline timed in another
    # process moved by up to 10 % between processes at L = 512, and every ratio with it.
    _, baseline = _make_layer("keras_mha")
    baseline(np.zeros((1, 8, HEADS * HEAD_DIM), "float32"))
    ops.convert_to_numpy(baseline(inputs))
    pairs = [(_seconds(forward, inputs), _seconds(baseline, inputs)) for _ in range(repeats)]
    row["seconds"] = float(np.median([own for own, _ in pairs]))
    row["mha_seconds"] = float(np.median([mha for _, mha in pairs]))
    row["x_mha"] = float(np.median([own / mha for own, mha in pairs]))
    return row


def _seconds(forward, inputs) -> float:
    from keras import ops

    start = time.perf_counter()
    ops.convert_to_numpy(forward(inputs))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS)
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--repeats", type=int, default=3)
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
    known = IMPLEMENTATIONS + SCHEME_IMPLEMENTATIONS
    unknown = set(implementations) - set(known)
    if unknown:
        parser.error(f"--impls: unknown {sorted(unknown)}; choose from {known}")
    rows = []
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    print(f"backend {backend}; batch 1, {HEADS} heads, head size {HEAD_DIM}, forward pass")
    print(f"{'impl':<16}{'L':>6}{'ms':>10}{'x mha':>8}{'extra MB':>10}{'x S':>7}")
    for length in (int(n) for n in args.lengths.split(",")):
        score_bytes = HEADS * length * length * 4
        for implementation in implementations:
            if implementation == "naive_shaw" and length > NAIVE_MAX_LENGTH:
                continue
            row = case_in_subprocess(__file__, implementation, length, args.repeats)
            rows.append(row)
            if "error" in row:
                print(f"{implementation:<16}{length:>6}  failed: {row['error']}")
                continue
            row["extra_S"] = row["extra_peak_bytes"] / score_bytes
            ratio = f"{row['x_mha']:.2f}"
            print(
                f"{implementation:<16}{length:>6}{row['seconds'] * 1e3:>10.1f}{ratio:>8}"
                f"{row['extra_peak_bytes'] / 2**20:>10.0f}"
                f"{row['extra_S']:>7.2f}",
                flush=True,
            )
    return finish(rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
