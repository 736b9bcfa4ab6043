"""Train a tiny Shaw relative Transformer to reverse sequences, then reverse longer ones.

The shipped preset ``shaw_transformer_base`` / ``reverse``. Uses only the public API. Run
with any backend:

    KERAS_BACKEND=jax python zoo/shaw_transformer/train_reverse_longer.py [--save FILE]

The model is the zoo's ``shaw_transformer_base`` narrowed through its configuration (2
encoder and 2 decoder layers of width 64, feed-forward 128, 4 heads, relative keys and
values clipped at 4, no dropout, 40 ids). It trains on keras_posenc.experiments.reverse_task
with distinct words (37 of them), 3-12 per sequence (12 000 sequences, 4 epochs, Adam 2e-3,
batch 64), and is scored by exact match with greedy decoding on 500 held-out sequences of
the training lengths, 500 of 13-16 words and 500 of 17-24, longer than any it saw. With
distinct words, "write the word that stood before the one just written" reverses a
sequence of any length, and it needs distances up to 1 only; clipped at 4, the model cannot
count its way through a longer source by distances it never trained on.
--save writes the weights (.weights.h5).
"""

from __future__ import annotations

import argparse
import time

import keras

from keras_posenc import zoo
from keras_posenc.experiments import exact_match, reverse_task
from keras_posenc.generation import greedy_search

VOCABULARY = 40  # 37 words

# What the preset changes in shaw_transformer_base's configuration
# (keras_posenc/zoo/weights/presets.json).
REVERSE = dict(
    vocabulary_size=VOCABULARY,
    hidden_dim=64,
    intermediate_dim=128,
    num_heads=4,
    num_layers=2,
    max_distance=4,
    dropout=0.0,
)
TRAIN_LENGTHS = (3, 12)
LONGER_LENGTHS = ((13, 16), (17, 24))


def score(model: keras.Model, lengths: tuple[int, int], seed: int, count: int = 500) -> float:
    """Exact match of greedy decoding on ``count`` held-out sequences of ``lengths`` words."""
    inputs, targets = reverse_task(count, *lengths, VOCABULARY, seed=seed, distinct=True)
    predicted = greedy_search(model, inputs["encoder_token_ids"], max_length=targets.shape[1])
    return exact_match(predicted, targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the trained weights to this .weights.h5 file")
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)
    model = zoo.create("shaw_transformer_base", **REVERSE)
    inputs, targets = reverse_task(12_000, *TRAIN_LENGTHS, VOCABULARY, args.seed, distinct=True)
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    start = time.perf_counter()
    model.fit(inputs, targets, batch_size=64, epochs=args.epochs, verbose=2)
    seconds = time.perf_counter() - start
    seen = score(model, TRAIN_LENGTHS, args.seed + 1000)
    longer = [
        score(model, lengths, args.seed + 2000 + i) for i, lengths in enumerate(LONGER_LENGTHS)
    ]
    print(
        f"shaw_transformer_base (reverse) on {keras.backend.backend()}: "
        f"{model.count_params():,} parameters, trained in {seconds:.0f} s, held-out exact "
        f"match {seen:.1%} at {TRAIN_LENGTHS[0]}-{TRAIN_LENGTHS[1]} words (the training "
        f"lengths), "
        + ", ".join(
            f"{a:.1%} at {low}-{high} words" for a, (low, high) in zip(longer, LONGER_LENGTHS)
        )
        + " (longer)",
        flush=True,
    )
    if args.save:  # the weights alone: a compiled model's file holds Adam's state too
        bare = zoo.create("shaw_transformer_base", **REVERSE)
        bare.set_weights(model.get_weights())
        bare.save_weights(args.save)


if __name__ == "__main__":
    main()
