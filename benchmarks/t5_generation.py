"""Greedy generation of a converted keras-hub T5: ours against keras-hub's ``T5Seq2SeqLM.generate``.

For the backend chosen by KERAS_BACKEND, builds keras-hub's ``T5Backbone`` at the widths
given (default: t5_small's, 6 + 6 layers, d 512, FFN 2048, 8 heads of 64; random weights;
vocabulary --vocab), converts it with ``keras_posenc.convert.from_keras_hub_t5`` (the same
numbers: tests/test_convert_keras_hub.py), and translates a batch of --batch random sources of
mixed lengths (--source tokens at most, right-padded) into --tokens tokens greedily, twice:

    keras_hub    ``T5Seq2SeqLM(backbone, preprocessor=None)`` compiled with
                 ``sampler="greedy"``, ``generate`` on the four id and mask inputs (the
                 decoder's holding its start token 0, then --tokens free places; no stop
                 token: it runs to the end)
    keras_posenc ``keras_posenc.generation.greedy_search`` on the converted ``T5``
                 (``min_length`` keeps the end-of-sequence id out until the end)

and prints tokens/s of each and their ratio (ours / keras-hub's). A third row, ``weights_floor``,
is what no implementation can beat on this machine: every step reads each decoder weight it
multiplies (self-attention's four matrices, cross-attention's query and output, the
feed-forward's two, the output embedding; cross-attention's keys and values are computed once
per source) at least once, timed here as one NumPy product of a float32 matrix of that many
numbers with the batch's vectors per token. At batch 1 decoding is bound by this memory
traffic, not by arithmetic. Both decode the same tokens
up to float rounding (compared here; a differing token after a near-tie is reported, not an
error). Timings are the median of --repeats runs after a warm-up; the warm-up's own time
(compilation or tracing included) is printed too. --batch takes a comma-separated list
(the runner runs each as its own case).

Usage:
    KERAS_BACKEND=jax python benchmarks/t5_generation.py [--tokens 64 --batch 1]
"""

from __future__ import annotations

import argparse
import os
import sys

from _timing import (  # benchmarks/_timing.py, next to this script
    finish,
    first_and_median_seconds,
    inference,
)

# The runner's default split of --batch (benchmarks/registry.py).
BATCHES = "1,8"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--intermediate", type=int, default=2048)
    parser.add_argument("--source", type=int, default=32, help="the longest source")
    parser.add_argument("--tokens", type=int, default=64, help="tokens to generate")
    parser.add_argument("--batch", default=BATCHES, help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)

    import keras
    import keras_hub
    import numpy as np

    from keras_posenc.convert import from_keras_hub_t5

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.T5Backbone(
        vocabulary_size=args.vocab,
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_dim=args.hidden,
        intermediate_dim=args.intermediate,
        key_value_dim=args.hidden // args.heads,
    )
    rng = np.random.default_rng(0)
    for weight in backbone.weights:
        if len(weight.shape) == 1:
            continue  # the RMS norms' scales stay 1
        # The embedding (the tied output too) at T5's N(0, 1): logits of unit scale, whose
        # top two rarely tie within float rounding; the rest small, as trained T5's.
        scale = 1.0 if weight.path.startswith("token_embedding") else 0.05
        weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * scale)
    # Ours never generates the padding/start id 0 or the end id 1 before `min_length`
    # (keras-hub's generate has no such rule): their embeddings are zeroed, so with the tied
    # output their logit is 0 and never the largest of a thousand, and both decode the same.
    table = keras.ops.convert_to_numpy(backbone.token_embedding.embeddings).copy()
    table[:2] = 0.0
    backbone.token_embedding.embeddings.assign(table)
    t5_lm = keras_hub.models.T5Seq2SeqLM(backbone=backbone, preprocessor=None)
    t5_lm.compile(sampler="greedy")
    ours = from_keras_hub_t5(backbone)
    print(
        f"T5Backbone ({backbone.count_params():,} parameters: {args.layers} + {args.layers} "
        f"layers, d {args.hidden}, FFN {args.intermediate}, {args.heads} heads), vocabulary "
        f"{args.vocab}, backend {keras.backend.backend()}, sources of at most {args.source} "
        f"tokens, {args.tokens} generated tokens, {os.cpu_count()} CPUs, "
        f"python {sys.version.split()[0]}"
    )
    rows = []
    for batch in [int(b) for b in str(args.batch).split(",")]:
        rows += _run_batch(args, batch, t5_lm, ours, rng, first_and_median_seconds, inference)
    return finish(rows, args.json)


def _run_batch(args, batch, t5_lm, ours, rng, timed, inference) -> list[dict]:
    import keras
    import numpy as np

    from keras_posenc.generation import greedy_search

    lengths = np.linspace(args.source, max(2, args.source // 2), batch).astype(int)
    source = np.zeros((batch, args.source), "int32")
    for row, length in enumerate(lengths):
        source[row, : length - 1] = rng.integers(2, args.vocab, length - 1)
        source[row, length - 1] = 1  # T5's sources end with </s>
    decoder = np.zeros((batch, args.tokens + 1), "int32")
    decoder_mask = np.zeros((batch, args.tokens + 1), bool)
    decoder_mask[:, 0] = True
    inputs = {
        "encoder_token_ids": source,
        "encoder_padding_mask": source != 0,
        "decoder_token_ids": decoder,
        "decoder_padding_mask": decoder_mask,
    }
    outputs: dict = {}

    def keras_hub_run() -> None:
        result = t5_lm.generate(inputs, stop_token_ids=None)
        outputs["keras_hub"] = np.asarray(result["decoder_token_ids"])[:, 1:]

    def ours_run() -> None:
        with inference():
            outputs["keras_posenc"] = greedy_search(
                ours, source, max_length=args.tokens, min_length=args.tokens
            )

    # The decoder's per-step weights as one matrix (see the module docstring).
    h, ff = args.hidden, args.intermediate
    step_weights = args.layers * (6 * h * h + 2 * h * ff) + args.vocab * h
    floor_matrix = rng.standard_normal((step_weights // h, h), dtype="float32")
    floor_vectors = rng.standard_normal((h, batch), dtype="float32")

    def floor_run() -> None:
        for _ in range(args.tokens):
            floor_matrix @ floor_vectors

    rows = []
    runs = (("keras_hub", keras_hub_run), ("keras_posenc", ours_run), ("weights_floor", floor_run))
    for name, run in runs:
        first, seconds = timed(run, args.repeats)
        rows.append(
            {
                "backend": keras.backend.backend(),
                "implementation": name,
                "batch": batch,
                "tokens": args.tokens,
                "seconds": seconds,
                "first_seconds": first,
                "tokens_per_second": batch * args.tokens / seconds,
            }
        )
        print(
            f"  batch {batch}  {name:<13} {rows[-1]['tokens_per_second']:9.1f} tokens/s  "
            f"({seconds:.2f} s per batch; first batch {first:.2f} s, compilation included)"
        )
    same = float(np.mean(outputs["keras_hub"] == outputs["keras_posenc"]))
    for row in rows:
        row["x_keras_hub"] = row["tokens_per_second"] / rows[0]["tokens_per_second"]
        if row["implementation"] != "weights_floor":
            row["same_tokens"] = same
    speed, floor = rows[1]["x_keras_hub"], rows[2]["x_keras_hub"]
    print(
        f"  batch {batch}  keras_posenc / keras_hub: {speed:.2f}x (the weights' floor: "
        f"{floor:.2f}x); tokens equal: {same:.1%}"
    )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
