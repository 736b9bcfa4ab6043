"""Decoder attention: the memory of grouped-query and rolling caches, and the time and memory
of sliding-window attention, each against full attention measured in the same run.

Two parts (``--part``), each a benchmark of the runner (benchmarks/registry.py); 8 query
heads of size 64 (width 512), no projection biases, inference mode (on PyTorch under
``torch.no_grad``):

``--part cache`` (``python -m benchmarks run decoder_cache``): the decoding cache of one
MultiHeadRelativeAttention (relative=None, rotary) at ``--max-length`` L (8192), batch
``--batch`` (4). Cases:

    mha          8 key/value heads, a cache of L positions (the baseline)
    gqa          2 key/value heads (grouped-query attention), L positions
    mqa          1 key/value head (multi-query attention), L positions
    rolling      8 key/value heads and sliding_window=W (``--window``, 512): a rolling
                 cache of W positions, however long the decoding
    rolling_gqa  2 key/value heads and the window: W positions

Each case runs in a fresh subprocess: the layer is built and its decoding step compiled
(`keras_posenc.backend.compile_function`: tf.function, jax.jit, torch.export); then, from
just before the cache is allocated (ones, as a prompt would have filled it), warm-up steps
(one; on PyTorch until the library traces the step) and ``--steps`` N steps run at
positions L - N .. L - 1, one token each, with the cache and its index as tensors (each
step returns the updated cache, as a generation loop keeps it). Fields:

    cache_bytes         the cache tensor
    extra_peak_bytes    the growth of the peak resident set (ru_maxrss) over the allocation
                        and the steps: the cache, the updated caches, the steps' tensors
                        and the compilation
    step_seconds        the median of the N steps
    first_step_seconds  the first warm-up step, compilation included
    x_full_cache, x_full_peak
                        cache_bytes and extra_peak_bytes over the baseline's (measured in
                        its own subprocess of the same run)
    x_full_time         the time ratio to the baseline, measured in the case's process
                        after its memory reading: its steps and the baseline's alternate,
                        the median of the pairs' ratios

``--part window`` (``python -m benchmarks run decoder_window``): one causal self-attention
forward pass (batch 1, eager, as benchmarks/relative_attention.py runs it) at each of
``--lengths`` L (512 .. 8192) per implementation:

    full_rope     relative=None, rotary (the baseline of rope)
    window_rope   the same with sliding_window=W
    full_bias     relative="bias", position="t5_decoder" (T5's decoder buckets)
    window_bias   the same with sliding_window=W
    full_keys     relative="keys" (Shaw's, ClipPositions(16)); ``--impls`` only
    window_keys   the same with sliding_window=W; ``--impls`` only

Each in a fresh subprocess, as benchmarks/relative_attention.py measures: the layer is
built at a tiny length, then ``extra_peak_bytes`` is the growth of the peak resident set from
just before a warm-up call at L to the end of ``--repeats`` timed calls; a window's time
ratio to full attention of the same mode (``x_full``) is measured in its process after that
(calls of both alternate; the median of the pairs' ratios), its memory ratio
(``x_full_memory``) against the full implementation's subprocess of the same run.

``--quick``: tiny sizes, to check that it runs (window 16, lengths 64 and 128, L = 128,
batch 1, 3 steps, 1 repeat: a minute or two, mostly subprocesses' imports); under the
runner pass ``--lengths`` too (the runner passes its own default).

Usage:
    KERAS_BACKEND=jax python benchmarks/decoder_attention.py --part cache
    python benchmarks/decoder_attention.py --part window --impls full_keys,window_keys
    python benchmarks/decoder_attention.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _timing import finish, inference, library_compile_function  # benchmarks/_timing.py

HEADS, HEAD_DIM = 8, 64
CASES = {  # name: (key/value heads, rolling)
    "mha": (8, False),
    "gqa": (2, False),
    "mqa": (1, False),
    "rolling": (8, True),
    "rolling_gqa": (2, True),
}
BASELINE_CASE = "mha"
IMPLEMENTATIONS = ("full_rope", "window_rope", "full_bias", "window_bias")
EXTRA_IMPLEMENTATIONS = ("full_keys", "window_keys")
# The runner (benchmarks/runner.py) reads this default to run one length per case.
DEFAULT_LENGTHS = "512,1024,2048,4096,8192"
DEFAULTS = {
    "window": 512,
    "max_length": 8192,
    "steps": 32,
    "repeats": 3,
    "batch": 4,
    "lengths": DEFAULT_LENGTHS,
}
QUICK = {"window": 16, "max_length": 128, "steps": 3, "repeats": 1, "batch": 1, "lengths": "64,128"}


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _attention(window: int | None, kv_heads: int = HEADS, mode: str = "rope"):
    from keras_posenc import layers

    arguments = {
        "rope": dict(relative=None, rotary=layers.RotaryPositions()),
        "bias": dict(relative="bias", position="t5_decoder"),
        "keys": dict(relative="keys", position=layers.ClipPositions(16)),
    }[mode]
    return layers.MultiHeadRelativeAttention(
        HEADS,
        HEAD_DIM,
        use_bias=False,
        num_key_value_heads=kv_heads,
        sliding_window=window,
        **arguments,
    )


def _convert(array):
    from keras import ops

    return ops.convert_to_tensor(array)


# --------------------------------------------------------------------------- the cache part


class _Decoder:
    """One case's layer, its compiled step and its cache, for steps at given positions."""

    def __init__(self, case: str, args: argparse.Namespace) -> None:
        import numpy as np

        kv_heads, rolling = CASES[case]
        self.layer = _attention(args.window if rolling else None, kv_heads)
        width = HEADS * HEAD_DIM
        self.layer(np.zeros((1, 2, width), "float32"), np.zeros((1, 2, width), "float32"))
        layer = self.layer

        def step(x, cache, index):
            return layer(x, x, cache=cache, cache_update_index=index, use_causal_mask=True)

        self.step = library_compile_function()(step, layer.variables)
        self.shape = layer.cache_shape(args.batch, args.max_length)
        rng = np.random.default_rng(0)
        self.x = _convert(rng.standard_normal((args.batch, 1, width)).astype("float32"))
        self.cache = None

    def allocate(self) -> None:
        from keras import ops

        self.cache = ops.ones(self.shape, "float32")  # written: every page is resident

    def __call__(self, position: int) -> float:
        from keras import ops

        start = time.perf_counter()
        output, self.cache = self.step(self.x, self.cache, _convert(_int32(position)))
        ops.convert_to_numpy(output)
        return time.perf_counter() - start


def _int32(value: int):
    import numpy as np

    return np.asarray(value, "int32")


def _warm_up_calls() -> int:
    """Calls of a compiled step before it runs compiled: on PyTorch the library traces a
    step after some eager calls (keras_posenc/backend/torch_trace.py), elsewhere the first
    call compiles."""
    import keras

    if keras.backend.backend() != "torch":
        return 1
    try:
        from keras_posenc.backend.torch_trace import TORCH_TRACE_AFTER
    except ImportError:  # a library from before the traced steps (--against an old commit)
        return 1
    return TORCH_TRACE_AFTER + 1


def run_cache_case(case: str, args: argparse.Namespace) -> dict:
    """One case of the cache part, in this process (see the module docstring)."""
    import math

    import keras
    import numpy as np

    with inference():
        decoder = _Decoder(case, args)
        positions = range(args.max_length - args.steps, args.max_length)
        warm_up = [positions[0]] * _warm_up_calls()
        before = _peak_rss_bytes()
        decoder.allocate()
        first, *_ = [decoder(position) for position in warm_up]
        times = [decoder(position) for position in positions]
        row = {
            "backend": keras.backend.backend(),
            "case": case,
            "length": args.max_length,
            "batch": args.batch,
            "kv_heads": CASES[case][0],
            "cache_positions": decoder.shape[2],
            "cache_bytes": math.prod(decoder.shape) * 4,
            "extra_peak_bytes": _peak_rss_bytes() - before,
            "first_step_seconds": first,
            "step_seconds": float(np.median(times)),
            "x_full_time": 1.0,
        }
        if case == BASELINE_CASE:
            return row
        # The time ratio, in this process, after the memory reading (the baseline's cache
        # does not count there): steps of the case and of the baseline alternate.
        baseline = _Decoder(BASELINE_CASE, args)
        baseline.allocate()
        for position in warm_up:  # the baseline's compilation
            baseline(position)
        pairs = [(decoder(p), baseline(p)) for p in positions]
        row["step_seconds"] = float(np.median([own for own, _ in pairs]))
        row["full_step_seconds"] = float(np.median([full for _, full in pairs]))
        row["x_full_time"] = float(np.median([own / full for own, full in pairs]))
        return row


# --------------------------------------------------------------------------- the window part


def _window_layer(implementation: str, window: int):
    kind, mode = implementation.split("_")
    return _attention(window if kind == "window" else None, mode=mode)


def run_window_case(implementation: str, length: int, args: argparse.Namespace) -> dict:
    """One implementation at one length, in this process (see the module docstring)."""
    import keras
    import numpy as np
    from keras import ops

    with inference():
        layer = _window_layer(implementation, args.window)
        width = HEADS * HEAD_DIM
        layer(np.zeros((1, 8, width), "float32"), np.zeros((1, 8, width), "float32"))
        rng = np.random.default_rng(0)
        inputs = _convert(rng.standard_normal((1, length, width)).astype("float32"))

        def forward(attention):
            start = time.perf_counter()
            ops.convert_to_numpy(attention(inputs, inputs, use_causal_mask=True))
            return time.perf_counter() - start

        before = _peak_rss_bytes()
        forward(layer)  # warm-up
        times = [forward(layer) for _ in range(args.repeats)]
        row = {
            "backend": keras.backend.backend(),
            "implementation": implementation,
            "length": length,
            "window": args.window,
            "seconds": float(np.median(times)),
            "extra_peak_bytes": _peak_rss_bytes() - before,
            "x_full": 1.0,
        }
        if implementation.startswith("full_"):
            return row
        full = _window_layer(implementation.replace("window_", "full_"), args.window)
        full(np.zeros((1, 8, width), "float32"), np.zeros((1, 8, width), "float32"))
        forward(full)
        pairs = [(forward(layer), forward(full)) for _ in range(args.repeats)]
        row["seconds"] = float(np.median([own for own, _ in pairs]))
        row["full_seconds"] = float(np.median([other for _, other in pairs]))
        row["x_full"] = float(np.median([own / other for own, other in pairs]))
        return row


# --------------------------------------------------------------------------- driver


def _options(args: argparse.Namespace) -> list[str]:
    return [
        f"--{name.replace('_', '-')}={getattr(args, name)}"
        for name in ("window", "max_length", "steps", "repeats", "batch")
    ]


def _in_subprocess(case: list[str], args: argparse.Namespace, key: dict) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--case", *case, *_options(args)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-3:]
        return {**key, "error": " | ".join(tail)}
    return json.loads(result.stdout.strip().splitlines()[-1])


def cache_part(cases: list[str], args: argparse.Namespace) -> list[dict]:
    print(
        f"cache: batch {args.batch}, {HEADS} query heads of {HEAD_DIM}, L = {args.max_length}, "
        f"{args.steps} steps at the end, window {args.window}"
    )
    print(
        f"{'case':<13}{'kv':>3}{'slots':>7}{'cache MB':>10}{'x full':>8}{'peak MB':>9}"
        f"{'x full':>8}{'step ms':>9}{'x full':>8}"
    )
    rows = [_in_subprocess(["cache", case], args, {"case": case}) for case in cases]
    base = next((r for r in rows if r["case"] == BASELINE_CASE and "error" not in r), None)
    for row in rows:
        if "error" in row:
            print(f"{row['case']:<13} failed: {row['error']}")
            continue
        for field, ratio in (("cache_bytes", "x_full_cache"), ("extra_peak_bytes", "x_full_peak")):
            row[ratio] = row[field] / base[field] if base and base[field] else None
        ratios = [
            "-" if row.get(name) is None else f"{row[name]:.2f}"
            for name in ("x_full_cache", "x_full_peak", "x_full_time")
        ]
        print(
            f"{row['case']:<13}{row['kv_heads']:>3}{row['cache_positions']:>7}"
            f"{row['cache_bytes'] / 2**20:>10.1f}{ratios[0]:>8}"
            f"{row['extra_peak_bytes'] / 2**20:>9.0f}{ratios[1]:>8}"
            f"{row['step_seconds'] * 1e3:>9.2f}{ratios[2]:>8}",
            flush=True,
        )
    return rows


def window_part(
    implementations: list[str], lengths: list[int], args: argparse.Namespace
) -> list[dict]:
    print(f"window: batch 1, {HEADS} heads of {HEAD_DIM}, causal, W = {args.window}")
    print(f"{'impl':<13}{'L':>6}{'ms':>10}{'x full':>8}{'extra MB':>10}{'x full':>8}")
    rows = []
    for length in lengths:
        measured = {}
        for implementation in implementations:
            key = {"implementation": implementation, "length": length}
            case = ["window", implementation, str(length)]
            row = measured[implementation] = _in_subprocess(case, args, key)
            rows.append(row)
            if "error" in row:
                print(f"{implementation:<13}{length:>6}  failed: {row['error']}")
                continue
            full = measured.get(implementation.replace("window_", "full_"), {})
            memory = full.get("extra_peak_bytes")
            row["x_full_memory"] = row["extra_peak_bytes"] / memory if memory else None
            ratio = "-" if row["x_full_memory"] is None else f"{row['x_full_memory']:.2f}"
            print(
                f"{implementation:<13}{length:>6}{row['seconds'] * 1e3:>10.1f}"
                f"{row['x_full']:>8.2f}{row['extra_peak_bytes'] / 2**20:>10.0f}{ratio:>8}",
                flush=True,
            )
    return rows


def _ordered(names: list[str], baselines: list[str]) -> list[str]:
    """``names`` with the baselines they are compared with first (their rows come first)."""
    return [n for n in names if n in baselines] + [n for n in names if n not in baselines]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("cache", "window", "both"), default="both")
    parser.add_argument("--cases", default=",".join(CASES), help="the cache part's cases")
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--lengths", help=f"the window part's L (default {DEFAULT_LENGTHS})")
    parser.add_argument("--window", type=int, help="W (default 512)")
    parser.add_argument("--max-length", type=int, help="the cache part's L (default 8192)")
    parser.add_argument("--steps", type=int, help="decoding steps per cache case (default 32)")
    parser.add_argument("--repeats", type=int, help="timed calls per window case (default 3)")
    parser.add_argument("--batch", type=int, help="the cache part's batch (default 4; quick 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check it runs")
    parser.add_argument("--case", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument(
        "--json", help="also write the rows (with their ratios to full attention) to this file"
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else DEFAULTS
    for name, value in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, value)

    if args.case:
        part, *rest = args.case
        if part == "cache":
            row = run_cache_case(rest[0], args)
        else:
            row = run_window_case(rest[0], int(rest[1]), args)
        print(json.dumps(row))
        return 0

    cases = [c for c in args.cases.split(",") if c]
    implementations = [i for i in args.impls.split(",") if i]
    known = IMPLEMENTATIONS + EXTRA_IMPLEMENTATIONS
    if set(cases) - set(CASES):
        parser.error(f"--cases: unknown {sorted(set(cases) - set(CASES))}; choose from {CASES}")
    if set(implementations) - set(known):
        unknown = sorted(set(implementations) - set(known))
        parser.error(f"--impls: unknown {unknown}; choose from {known}")
    print(f"backend {os.environ.get('KERAS_BACKEND', 'tensorflow')}")
    rows = []
    if args.part in ("cache", "both"):
        rows += cache_part(_ordered(cases, [BASELINE_CASE]), args)
    if args.part in ("window", "both"):
        lengths = [int(n) for n in args.lengths.split(",") if n]
        fulls = [i for i in implementations if i.startswith("full_")]
        rows += window_part(_ordered(implementations, fulls), lengths, args)
    return finish(rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
