"""Train a small Shaw relative Transformer to reverse token sequences (the seq2seq example).

Uses only the public API. Run with any backend:

    KERAS_BACKEND=tensorflow python zoo/shaw_transformer/train_reverse.py [--epochs 4]

The model is the zoo's `shaw_transformer_base` shrunk to the size of the other families'
examples: 3 encoder and 3 decoder layers of width 64, feed-forward 128, 4 heads, relative
keys and values clipped at 16, dropout 0.1, 20 ids. The task is
keras_posenc.experiments.reverse_task (4-12 words from 17; ids pad 0, start
1, end 2): 20 000 training sequences, Adam 2e-3, batch 64, scored by exact match on 1 000
held-out sequences with greedy decoding, the recipe of zoo/t5/train_reverse.py.
"""

from __future__ import annotations

import argparse

import keras

from keras_posenc import zoo
from keras_posenc.experiments import train_reverse

TINY = dict(
    vocabulary_size=20,
    hidden_dim=64,
    intermediate_dim=128,
    num_heads=4,
    num_layers=3,
    max_distance=16,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    keras.utils.set_random_seed(args.seed)
    model = zoo.create("shaw_transformer_base", **TINY)
    result = train_reverse(model, epochs=args.epochs, seed=args.seed, verbose=2)
    print(
        f"shaw_transformer on {keras.backend.backend()}: {int(result['parameters']):,} "
        f"parameters, trained in {result['train_seconds']:.0f} s, held-out exact match "
        f"{result['exact_match']:.1%} (greedy, 1000 sequences)",
        flush=True,
    )


if __name__ == "__main__":
    main()
