"""Time and extra peak memory of MUSEAttention against keras.layers.MultiHeadAttention.

For each sequence length L (batch 4, 8 heads, head size 64, so width C = 512;
self-attention, one forward pass):

- time: one subprocess builds every implementation, warms each up, then times
  them round-robin (``--repeats`` rounds, each implementation once per round),
  so a change in the machine's load hits all of them alike; medians, in two
  modes:

      eager      layer(x), op by op
      compiled   the same call compiled by the backend (tf.function, jax.jit;
                 PyTorch runs it eagerly under no_grad), via keras_posenc.backend.compile_function

- memory: a fresh subprocess per implementation; extra peak memory is the
  growth of the peak resident set (ru_maxrss) over one eager warm-up call and
  three more, from just before the first full-length call, so imports and
  weights do not count.

Implementations:
    keras_mha      keras.layers.MultiHeadAttention(8, 64) (the baseline)
    muse_dynamic   MUSEAttention(8, 64, conv="dynamic"): kernel sizes (3, 15), the
                   official code's layer, with the layer's defaults
                   (fused_attention="auto": the fused kernel on PyTorch without
                   gradients, as in the "compiled" mode, nowhere else)
    muse_dynamic_fused
                   the same with fused_attention=True: attention through
                   keras.ops.dot_product_attention (as keras_mha does without dropout)
                   on every backend and in both modes
    muse_static    MUSEAttention(8, 64, conv="static"): kernel sizes (1, 3, 7),
                   depthwise + pointwise per kernel (the paper's description)
    attention_only the same self-attention as MUSEAttention without convolutions:
                   separate q/k/v projections, float32 softmax (fused where "auto"
                   fuses), C -> C output (what MUSE's attention branch alone costs in
                   this implementation)

Usage:
    KERAS_BACKEND=torch python benchmarks/muse.py
    python benchmarks/muse.py --lengths 512 --impls keras_mha,muse_dynamic --batch 8
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

# benchmarks/_timing.py, next to this script
from _timing import library_compile_function, write_json

HEADS, HEAD_DIM = 8, 64
IMPLEMENTATIONS = (
    "keras_mha",
    "muse_dynamic",
    "muse_dynamic_fused",
    "muse_static",
    "attention_only",
)
# The runner (benchmarks/runner.py) reads this default to run one length per case.
DEFAULT_LENGTHS = "64,128,256,512,1024"


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _attention_only_layer():
    import keras

    from keras_posenc.layers.muse import MUSEAttention

    class AttentionOnly(MUSEAttention):
        """MUSEAttention's attention branch alone: q, k, v, attention, C -> C output."""

        def build(self, input_shape):
            channels = self.channels
            heads = (None, self.num_heads, self.key_dim)
            self.query_dense = self._dense("abc,cde->abde", heads, "de", "query")
            self.key_dense = self._dense("abc,cde->abde", heads, "de", "key")
            self.value_dense = self._dense("abc,cde->abde", heads, "de", "value")
            for dense in (self.query_dense, self.key_dense, self.value_dense):
                dense.build(input_shape)
            self.output_dense = self._dense("abc,cd->abd", (None, channels), "d", "output")
            self.output_dense.build(tuple(input_shape[:2]) + (channels,))
            self.dropout_layer = keras.layers.Dropout(0.0)
            self.built = True

        def call(self, inputs):
            q, k, v = self.query_dense(inputs), self.key_dense(inputs), self.value_dense(inputs)
            return self.output_dense(self._attend(q, k, v, None, None))

    return AttentionOnly(HEADS, HEAD_DIM)


def _make_forward(implementation: str):
    import keras

    if implementation == "keras_mha":
        layer = keras.layers.MultiHeadAttention(HEADS, HEAD_DIM)
        return layer, lambda x: layer(x, x)
    if implementation == "attention_only":
        layer = _attention_only_layer()
        return layer, layer
    from keras_posenc.layers import MUSEAttention

    conv = "static" if implementation == "muse_static" else "dynamic"
    # The layer's default ("auto"), or the fused kernel everywhere.
    fused = {"fused_attention": True} if implementation.endswith("_fused") else {}
    layer = MUSEAttention(HEADS, HEAD_DIM, conv=conv, **fused)
    return layer, layer


def _inputs(length: int, batch: int):
    import numpy as np
    from keras import ops

    values = np.random.default_rng(0).standard_normal((batch, length, HEADS * HEAD_DIM))
    return ops.convert_to_tensor(values, "float32")


def _build(implementation: str):
    import numpy as np

    layer, forward = _make_forward(implementation)
    forward(np.zeros((1, 8, HEADS * HEAD_DIM), "float32"))  # build weights at a tiny length
    return layer, forward


def measure_memory(implementation: str, length: int, batch: int) -> dict:
    """Extra peak memory of eager calls, in this (fresh) process."""
    from keras import ops

    _, forward = _build(implementation)
    inputs = _inputs(length, batch)
    before = _peak_rss_bytes()
    for _ in range(4):
        ops.convert_to_numpy(forward(inputs))
    return {"implementation": implementation, "extra_peak_bytes": _peak_rss_bytes() - before}


def measure_times(implementations: list[str], length: int, batch: int, repeats: int) -> list:
    """Median eager and compiled times of every implementation, timed round-robin."""
    import keras
    from keras import ops

    compile_function = library_compile_function()

    inputs = _inputs(length, batch)
    functions = {}
    for implementation in implementations:
        layer, forward = _build(implementation)
        functions[(implementation, "eager")] = forward
        functions[(implementation, "compiled")] = compile_function(forward, layer.variables)
    for function in functions.values():
        ops.convert_to_numpy(function(inputs))  # warm-up: tracing, compilation, allocation
    times: dict = {key: [] for key in functions}
    for _ in range(repeats):
        for key, function in functions.items():
            start = time.perf_counter()
            ops.convert_to_numpy(function(inputs))
            times[key].append(time.perf_counter() - start)
    rows = []
    for implementation in implementations:
        row = {"backend": keras.backend.backend(), "implementation": implementation}
        row.update(length=length, batch=batch)
        for mode in ("eager", "compiled"):
            values = sorted(times[(implementation, mode)])
            row[f"{mode}_seconds"] = values[len(values) // 2]
        rows.append(row)
    return rows


def _subprocess(arguments: list[str]) -> tuple[object, str]:
    command = [sys.executable, os.path.abspath(__file__), *arguments]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode != 0:
        return None, " | ".join(result.stderr.strip().splitlines()[-3:])
    return json.loads(result.stdout.strip().splitlines()[-1]), ""


def _ratio(row: dict, baseline: dict | None, key: str) -> float | None:
    if not baseline or not baseline[key] or row[key] is None:
        return None
    return row[key] / baseline[key]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default=DEFAULT_LENGTHS)
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--memory", nargs=2, metavar=("IMPL", "LENGTH"), help=argparse.SUPPRESS)
    parser.add_argument("--times", metavar="LENGTH", help=argparse.SUPPRESS)
    parser.add_argument(
        "--json",
        help="also write the rows (with eager_x_mha, compiled_x_mha and memory_x_mha, the "
        "ratios to keras_mha) to this JSON file",
    )
    args = parser.parse_args(argv)

    implementations = [i for i in args.impls.split(",") if i]
    if args.memory:
        print(json.dumps(measure_memory(args.memory[0], int(args.memory[1]), args.batch)))
        return 0
    if args.times:
        print(json.dumps(measure_times(implementations, int(args.times), args.batch, args.repeats)))
        return 0

    unknown = set(implementations) - set(IMPLEMENTATIONS)
    if unknown:
        parser.error(f"--impls: unknown {sorted(unknown)}; choose from {IMPLEMENTATIONS}")
    if implementations[0] != "keras_mha":
        parser.error("--impls: keras_mha (the baseline) must come first")
    rows = []
    failed = False
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    print(
        f"backend {backend}; batch {args.batch}, {HEADS} heads, head size {HEAD_DIM} "
        f"(C = {HEADS * HEAD_DIM}), forward pass; ratios against keras_mha in the same mode"
    )
    print(
        f"{'impl':<20}{'L':>6}{'eager ms':>10}{'x mha':>7}{'compiled ms':>13}{'x mha':>7}"
        f"{'extra MB':>10}{'x mha':>7}"
    )
    common = ["--batch", str(args.batch), "--repeats", str(args.repeats)]
    for length in (int(n) for n in args.lengths.split(",")):
        timed, error = _subprocess(
            ["--times", str(length), "--impls", ",".join(implementations), *common]
        )
        if timed is None:
            print(f"L = {length}: timing failed: {error}")
            rows.append({"length": length, "error": f"timing failed: {error}"})
            failed = True
            continue
        for row in timed:
            memory, error = _subprocess(
                ["--memory", row["implementation"], str(length), "--batch", str(args.batch)]
            )
            row["extra_peak_bytes"] = None if memory is None else memory["extra_peak_bytes"]
            failed = failed or memory is None
        baseline = timed[0]
        for row in timed:
            rows.append(row)
            for key, name in (
                ("eager_seconds", "eager_x_mha"),
                ("compiled_seconds", "compiled_x_mha"),
                ("extra_peak_bytes", "memory_x_mha"),
            ):
                row[name] = _ratio(row, baseline, key)
            eager, compiled, memory = (
                "-" if row[name] is None else f"{row[name]:.2f}"
                for name in ("eager_x_mha", "compiled_x_mha", "memory_x_mha")
            )
            extra = row["extra_peak_bytes"]
            megabytes = "-" if extra is None else f"{extra / 2**20:.0f}"
            print(
                f"{row['implementation']:<20}{length:>6}{row['eager_seconds'] * 1e3:>10.1f}"
                f"{eager:>7}{row['compiled_seconds'] * 1e3:>13.1f}{compiled:>7}"
                f"{megabytes:>10}{memory:>7}",
                flush=True,
            )
    write_json(args.json, rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
