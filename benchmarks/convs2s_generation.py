"""Greedy generation speed of a ConvS2S zoo model: cached steps vs full recompute.

For the backend chosen by KERAS_BACKEND, generates --tokens tokens (EOS
forbidden until then, so every run decodes the same number of steps) for a
batch of random sources with keras_posenc.generation.greedy_search, twice:

    cached      one compiled decode_step per token over the cache (a buffer of
                the last k inputs per decoder convolution): constant cost per step
    recompute   the whole decoder on the prefix at every step (use_cache=False;
                one compiled graph on a fixed-length buffer)

and prints tokens/s of each and their ratio. Both paths give the same tokens
(checked here too). Timings are the median of --repeats runs after a warm-up;
the warm-up's own time (compilation or tracing included) is printed too.

Usage:
    KERAS_BACKEND=jax python benchmarks/convs2s_generation.py [--tokens 256 --batch 1]
"""

from __future__ import annotations

import argparse
import os
import sys

from _timing import (  # benchmarks/_timing.py, next to this script
    first_and_median_seconds,
    write_json,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="convs2s_iwslt_de_en")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", help="also write the rows (path, seconds, tokens/s, x recompute) here"
    )
    args = parser.parse_args(argv)

    import keras
    import numpy as np

    from keras_posenc import zoo
    from keras_posenc.generation import greedy_search

    keras.utils.set_random_seed(0)
    model = zoo.create(
        args.model,
        src_vocab_size=args.vocab,
        tgt_vocab_size=args.vocab,
        max_target_positions=max(1024, args.tokens),
    )
    rng = np.random.default_rng(0)
    source = rng.integers(3, args.vocab, (args.batch, args.source_length)).astype("int32")
    print(
        f"{args.model} ({model.count_params():,} parameters, vocab {args.vocab}), "
        f"backend {keras.backend.backend()}, batch {args.batch}, source {args.source_length}, "
        f"{args.tokens} generated tokens, {os.cpu_count()} CPUs, python {sys.version.split()[0]}"
    )
    results, seconds_per_batch, first_seconds, outputs = {}, {}, {}, {}
    for name, use_cache in (("cached", True), ("recompute", False)):

        def run(use_cache=use_cache, name=name):
            outputs[name] = greedy_search(
                model, source, max_length=args.tokens, min_length=args.tokens, use_cache=use_cache
            )

        first, seconds = first_and_median_seconds(run, args.repeats)
        first_seconds[name], seconds_per_batch[name] = first, seconds
        results[name] = args.batch * args.tokens / seconds
        print(
            f"  {name:<10} {results[name]:10.1f} tokens/s  ({seconds:.2f} s per batch; "
            f"first batch {first:.2f} s, compilation included)"
        )
    same = bool(np.array_equal(outputs["cached"], outputs["recompute"]))
    ratio = results["cached"] / results["recompute"]
    print(f"  cached / recompute: {ratio:.1f}x; same tokens: {same}")
    if args.json:
        records = [
            {
                "backend": keras.backend.backend(),
                "model": args.model,
                "batch": args.batch,
                "tokens": args.tokens,
                "path": name,
                "seconds": seconds_per_batch[name],
                "first_seconds": first_seconds[name],
                "tokens_per_second": results[name],
                "x_recompute": results[name] / results["recompute"],
                "same_tokens": same,
            }
            for name in ("cached", "recompute")
        ]
        write_json(args.json, records)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
