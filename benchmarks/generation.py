"""Generation speed of zoo models: cached steps vs full recompute.

For the backend chosen by KERAS_BACKEND, each model in --models continues a batch of
one-token prompts (bos) to --tokens tokens (a sequence-to-sequence model: translates a
batch of random sources of --source-length tokens into --tokens tokens), EOS forbidden
until then, so every run decodes the same number of steps, with each search in --searches:

    greedy      keras_posenc.generation.greedy_search
    top_k       keras_posenc.generation.sample with keras_hub's TopKSampler(k=10), seed 0

twice each:

    cached      one compiled decode_step per token over the model's cache: constant
                cost per step
    recompute   the whole model on the prefix buffer at every step (use_cache=False;
                one compiled graph on a fixed-length buffer)

and prints tokens/s of each and their ratio. Both paths give the same tokens (checked
here too: the sampler draws from the same random state). Timings are the median of
--repeats runs after a warm-up; the warm-up's own time (compilation or tracing
included) is printed too.

Models (each row states its setting): ``convs2s_lm`` at the size given by --channels /
--layers (fairseq's fconv_lm is 13 layers of 1268 channels, kernel 4; its recompute at 256
tokens takes minutes per run on 2 cores, so the default is smaller);
``music_transformer_base`` and ``shaw_transformer_base`` at width --width (512, the
registered width; 4 layers of the
Music Transformer, 3 + 3 of Shaw's; relative tables of --tokens rows for the Music
Transformer, so every distance has its own row, and Shaw's clipping distance 16).

Usage:
    KERAS_BACKEND=jax python benchmarks/generation.py [--tokens 256 --batch 1]
"""

from __future__ import annotations

import argparse
import os
import sys

from _timing import (  # benchmarks/_timing.py, next to this script
    finish,
    first_and_median_seconds,
)

SEARCHES = ("greedy", "top_k")


def build(name: str, args: argparse.Namespace):
    from keras_posenc import zoo

    if name == "convs2s_lm":
        layers = [(args.channels, 4)] * args.layers
        model = zoo.create(name, vocab_size=args.vocab, decoder_layers=layers)
        return model, f"{args.layers} x ({args.channels}, 4), vocab {args.vocab}"
    if name == "music_transformer_base":
        d = args.width
        model = zoo.create(
            name, hidden_dim=d, intermediate_dim=4 * d, num_layers=4, max_distance=args.tokens
        )
        return model, f"4 layers, d {d}, 8 heads, max distance {args.tokens}, 391 ids"
    if name == "shaw_transformer_base":
        d = args.width
        model = zoo.create(
            name, vocabulary_size=args.vocab, hidden_dim=d, intermediate_dim=2 * d, num_layers=3
        )
        return model, (
            f"3 + 3 layers, d {d}, 8 heads, k 16, vocab {args.vocab}, "
            f"source {args.source_length} tokens"
        )
    raise SystemExit(f"generation.py: no settings for model {name!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", default="convs2s_lm,music_transformer_base,shaw_transformer_base"
    )
    parser.add_argument("--searches", default=",".join(SEARCHES))
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)

    import keras
    import keras_hub
    import numpy as np

    from keras_posenc import generation

    rows = []
    for name in args.models.split(","):
        keras.utils.set_random_seed(0)
        model, setting = build(name, args)
        if getattr(model, "is_decoder_only", False):
            prompt = np.full((args.batch, 1), model.bos_id, "int32")
        else:  # a sequence-to-sequence model: random sources, no eos
            rng = np.random.default_rng(0)
            prompt = rng.integers(3, model.source_vocab_size, (args.batch, args.source_length))
            prompt = prompt.astype("int32")
        print(
            f"{name} ({setting}, {model.count_params():,} parameters), backend "
            f"{keras.backend.backend()}, batch {args.batch}, {args.tokens} tokens, "
            f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}"
        )
        for search in args.searches.split(","):
            outputs, timings = {}, {}
            for path, use_cache in (("cached", True), ("recompute", False)):

                def run(
                    search=search,
                    path=path,
                    use_cache=use_cache,
                    model=model,
                    prompt=prompt,
                    outputs=outputs,
                ):
                    options = dict(
                        max_length=args.tokens, min_length=args.tokens, use_cache=use_cache
                    )
                    if search == "greedy":
                        outputs[path] = generation.greedy_search(model, prompt, **options)
                    else:
                        sampler = keras_hub.samplers.TopKSampler(k=10)
                        outputs[path] = generation.sample(model, prompt, sampler, seed=0, **options)

                timings[path] = first_and_median_seconds(run, args.repeats)
            same = bool(np.array_equal(outputs["cached"], outputs["recompute"]))
            speed = {path: args.batch * args.tokens / timings[path][1] for path in timings}
            for path, (first, seconds) in timings.items():
                print(
                    f"  {search:<7} {path:<10} {speed[path]:9.1f} tokens/s ({seconds:.2f} s per "
                    f"batch; first {first:.2f} s, compilation included)"
                )
                rows.append(
                    {
                        "backend": keras.backend.backend(),
                        "model": name,
                        "setting": setting,
                        "search": search,
                        "path": path,
                        "batch": args.batch,
                        "tokens": args.tokens,
                        "seconds": seconds,
                        "first_seconds": first,
                        "tokens_per_second": speed[path],
                        "x_recompute": speed[path] / speed["recompute"],
                        "same_tokens": same,
                    }
                )
            print(
                f"  {search}: cached / recompute {speed['cached'] / speed['recompute']:.1f}x; "
                f"same tokens: {same}"
            )
            if not same:
                rows[-1]["error"] = "cached and recomputed generation differ"
    return finish(rows, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
