"""Time to build a zoo model (``zoo.create``) on the active Keras backend, cold and warm.

For the backend chosen by KERAS_BACKEND and each small variant, builds the model
in a fresh Python process (``cold``: nothing compiled yet, keras and keras_posenc
already imported, as a user's first ``zoo.create`` after the imports) and then
once more in the same process (``warm``: JAX's compiled programs are cached by
then). Then times ``predict_on_batch`` on one batch of the model's inputs (batch 2,
16 tokens for a free sequence axis): the median of 5 calls after a first one, which
compiles. Prints seconds per model; ``--json`` writes the rows.

On JAX every initializer's draw is an XLA program compiled for its shape, so a cold
build compiles dozens of them; JAX's persistent compilation cache keeps them on disk for
the next process. ``cached`` is a cold build in a third process whose cache a second one
filled (``JAX_COMPILATION_CACHE_DIR``, every program cached: docs/backends.md); JAX only.
TensorFlow and PyTorch draw eagerly.

Usage:
    KERAS_BACKEND=jax python benchmarks/zoo_create.py [--models coatnet_0,muse_tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _timing import finish, median_seconds  # benchmarks/_timing.py, next to this script

# Small variants, with the arguments that make them small (the 64 x 64 CoAtNets).
MODELS = {
    "coatnet_0": {"input_shape": (64, 64, 3)},
    "coatnet_nano_rw_224": {"input_shape": (64, 64, 3)},
    "posenet_coatnet_0": {},
    "convs2s_small": {"src_vocab_size": 1000, "tgt_vocab_size": 1000},
    "convs2s_iwslt_de_en": {"src_vocab_size": 8000, "tgt_vocab_size": 8000},
    "muse_tiny": {"src_vocab_size": 1000, "tgt_vocab_size": 1000},
    "muse_encoder_small": {"vocab_size": 1000},
    "shaw_transformer_base": {"vocabulary_size": 1000, "num_layers": 2},
}
DEFAULT_MODELS = ",".join(MODELS)


def build_twice(name: str) -> dict:
    """In this process: import, build cold, build warm; the seconds of each."""
    start = time.perf_counter()
    import keras

    from keras_posenc import zoo

    imported = time.perf_counter()
    times = []
    for _ in range(2):
        begin = time.perf_counter()
        model = zoo.create(name, **MODELS[name])
        times.append(time.perf_counter() - begin)
    batch = example_batch(model)
    return {
        "backend": keras.backend.backend(),
        "model": name,
        "import_seconds": imported - start,
        "cold_seconds": times[0],
        "warm_seconds": times[1],
        "predict_seconds": median_seconds(lambda: model.predict_on_batch(batch), repeats=5),
        "parameters": int(model.count_params()),
    }


def example_batch(model) -> object:
    """One batch for the model's inputs, in their structure (a dict for seq2seq models):
    2 examples, 16 steps on a free axis; ones for ids (a real token everywhere), uniform
    noise for images."""
    import keras
    import numpy as np

    rng = np.random.default_rng(0)

    def make(spec):
        shape = (2, *(16 if size is None else size for size in spec.shape[1:]))
        if "int" in str(spec.dtype):
            return np.ones(shape, dtype=str(spec.dtype))
        return rng.uniform(size=shape).astype(str(spec.dtype))

    return keras.tree.map_structure(make, model.input)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo names")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one model
    parser.add_argument("--json", help="also write the rows (model, cold and warm seconds) here")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(build_twice(args.one)))
        return 0
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {unknown}; expected some of {', '.join(MODELS)}")
    rows = []
    for name in names:
        child = run_one(name)
        if "error" in child:
            rows.append({"model": name, "error": child["error"]})
            continue
        row = child
        if row["backend"] == "jax":
            with tempfile.TemporaryDirectory() as cache:
                filled = run_one(name, cache)  # fills the cache; its times are not kept
                cached = run_one(name, cache) if "error" not in filled else filled
            row["cached_seconds"] = cached.get("cold_seconds")
        rows.append(row)
        print(
            f"{row['backend']:<10} {name:<22} cold {row['cold_seconds']:6.2f} s  "
            + (f"cached {row['cached_seconds']:6.2f} s  " if row.get("cached_seconds") else "")
            + f"warm {row['warm_seconds']:6.2f} s  "
            f"predict_on_batch {row['predict_seconds'] * 1000:7.1f} ms  "
            f"({row['parameters']:,} parameters; "
            f"imports {row['import_seconds']:.1f} s)",
            flush=True,
        )
    return finish(rows, args.json)


def run_one(name: str, cache: str | None = None) -> dict:
    """`build_twice` in a fresh process (with JAX's persistent compilation cache in
    ``cache``, every program kept), its row or an ``error``."""
    env = dict(os.environ)
    if cache is not None:
        env.update(
            JAX_COMPILATION_CACHE_DIR=cache,
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        )
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--one", name],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if child.returncode != 0:
        print(child.stderr[-2000:], file=sys.stderr)
        return {"error": f"exit {child.returncode}"}
    return json.loads(child.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    raise SystemExit(main())
