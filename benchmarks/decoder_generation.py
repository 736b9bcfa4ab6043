"""Greedy generation of a converted keras-hub Llama: ours against keras-hub's own ``generate``.

For the backend chosen by KERAS_BACKEND, builds keras-hub's ``LlamaBackbone`` at the size
given (random weights), converts it with ``keras_posenc.convert.from_keras_hub`` (the same
numbers: tests/test_convert_keras_hub_decoders.py), and generates --tokens tokens greedily
after a prompt of --prompt tokens for a batch of --batch prompts, twice:

    keras_hub    ``LlamaCausalLM(backbone, preprocessor=None)`` compiled with
                 ``sampler="greedy"``, ``generate`` on token ids and a padding mask (no stop
                 token: it runs to the end)
    keras_posenc ``keras_posenc.generation.greedy_search`` on the converted ``DecoderLM``
                 (``min_length`` keeps the end-of-sequence id out until the end)

and prints tokens/s of each and their ratio (ours / keras-hub's). Both decode the same
tokens up to float rounding (compared here; a differing token after a near-tie is reported,
not an error). Timings are the median of --repeats runs after a warm-up; the warm-up's own
time (compilation or tracing included) is printed too.

Usage:
    KERAS_BACKEND=jax python benchmarks/decoder_generation.py [--tokens 128 --batch 1]
"""

from __future__ import annotations

import argparse
import os
import sys

from _timing import (  # benchmarks/_timing.py, next to this script
    finish,
    first_and_median_seconds,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=688)
    parser.add_argument("--prompt", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128, help="tokens after the prompt")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)

    import keras
    import keras_hub
    import numpy as np

    from keras_posenc.convert import from_keras_hub
    from keras_posenc.generation import greedy_search

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.LlamaBackbone(
        vocabulary_size=args.vocab,
        num_layers=args.layers,
        num_query_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        hidden_dim=args.hidden,
        intermediate_dim=args.intermediate,
    )
    rng = np.random.default_rng(0)
    for weight in backbone.weights:  # keras-hub's initial draw gives near-uniform logits
        scale = 1.0 if weight.path.endswith("scale") else 0.0
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.05 + scale)
    # Ours never generates the padding, start or end ids before `min_length` (keras-hub's
    # generate has no such rule): their output columns are zeroed, so their logit is 0 and
    # never the largest of a thousand, and both decode the same tokens.
    reverse = backbone.token_embedding.reverse_embeddings
    reverse.assign(keras.ops.concatenate([keras.ops.zeros_like(reverse[:, :3]), reverse[:, 3:]], 1))
    causal_lm = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
    causal_lm.compile(sampler="greedy")
    ours = from_keras_hub(backbone)
    total = args.prompt + args.tokens
    prompt = rng.integers(3, args.vocab, (args.batch, args.prompt)).astype("int32")
    padded = np.zeros((args.batch, total), "int32")
    padded[:, : args.prompt] = prompt
    mask = np.zeros((args.batch, total), bool)
    mask[:, : args.prompt] = True
    print(
        f"LlamaBackbone ({backbone.count_params():,} parameters: {args.layers} layers, d "
        f"{args.hidden}, {args.heads} heads on {args.kv_heads}), backend "
        f"{keras.backend.backend()}, batch {args.batch}, prompt {args.prompt}, "
        f"{args.tokens} generated tokens, {os.cpu_count()} CPUs, "
        f"python {sys.version.split()[0]}"
    )
    outputs: dict[str, np.ndarray] = {}

    def keras_hub_run() -> None:
        result = causal_lm.generate(
            {"token_ids": padded, "padding_mask": mask}, stop_token_ids=None
        )
        outputs["keras_hub"] = np.asarray(result["token_ids"])

    def ours_run() -> None:
        outputs["keras_posenc"] = greedy_search(ours, prompt, max_length=total, min_length=total)

    rows = []
    for name, run in (("keras_hub", keras_hub_run), ("keras_posenc", ours_run)):
        first, seconds = first_and_median_seconds(run, args.repeats)
        rows.append(
            {
                "backend": keras.backend.backend(),
                "implementation": name,
                "batch": args.batch,
                "tokens": args.tokens,
                "seconds": seconds,
                "first_seconds": first,
                "tokens_per_second": args.batch * args.tokens / seconds,
            }
        )
        print(
            f"  {name:<13} {rows[-1]['tokens_per_second']:9.1f} tokens/s  ({seconds:.2f} s "
            f"per batch; first batch {first:.2f} s, compilation included)"
        )
    speed = rows[1]["tokens_per_second"] / rows[0]["tokens_per_second"]
    same = float(np.mean(outputs["keras_hub"] == outputs["keras_posenc"]))
    for row in rows:
        row["x_keras_hub"] = row["tokens_per_second"] / rows[0]["tokens_per_second"]
        row["same_tokens"] = same
    print(f"  keras_posenc / keras_hub: {speed:.2f}x; tokens equal: {same:.1%}")
    return finish(rows, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
