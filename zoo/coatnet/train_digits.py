"""Train a narrow CoAtNet on scikit-learn's digits: the shipped preset ``coatnet_0`` / ``digits``.

Uses only the public API. Run with any backend (scikit-learn: ``pip install
"keras-posenc[data]"``):

    KERAS_BACKEND=jax python zoo/coatnet/train_digits.py [--epochs 30] [--save FILE]

The model is the zoo's ``coatnet_0`` narrowed through its configuration (one block per
stage, widths 16-32-64-64-128, layout C-C-T-T, 32 x 32 x 1 inputs, 10 classes); the data
are the 1,797 digits upsampled to 32 x 32 (keras_posenc.experiments.digits_split, 360
held out by a permutation seeded with --seed). Adam 2e-3 with cosine decay, batch 32;
scored by accuracy on the held-out digits. --save writes the weights (.weights.h5).
"""

from __future__ import annotations

import argparse
import time

import keras
import numpy as np

from keras_posenc import zoo
from keras_posenc.experiments import digits_split

# What the preset changes in coatnet_0's configuration (keras_posenc/zoo/weights/presets.json).
DIGITS = dict(
    blocks=(1, 1, 1, 1, 1),
    channels=(16, 32, 64, 64, 128),
    input_shape=(32, 32, 1),
    num_classes=10,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the trained weights to this .weights.h5 file")
    args = parser.parse_args()
    train_x, train_y, test_x, test_y = digits_split(seed=args.seed)
    keras.utils.set_random_seed(args.seed)
    model = zoo.create("coatnet_0", **DIGITS)
    steps = args.epochs * -(-len(train_y) // 32)
    model.compile(
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(2e-3, steps)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    model.fit(train_x, train_y, batch_size=32, epochs=args.epochs, verbose=2)
    seconds = time.perf_counter() - start
    predicted = np.argmax(model.predict(test_x, batch_size=120, verbose=0), axis=-1)
    accuracy = float(np.mean(predicted == test_y))
    print(
        f"coatnet_0 (digits) on {keras.backend.backend()}: {model.count_params():,} parameters, "
        f"trained in {seconds:.0f} s, held-out accuracy {accuracy:.1%} "
        f"({int(np.sum(predicted == test_y))} of {len(test_y)})",
        flush=True,
    )
    if args.save:  # the weights alone: a compiled model's file holds Adam's state too
        bare = zoo.create("coatnet_0", **DIGITS)
        bare.set_weights(model.get_weights())
        bare.save_weights(args.save)


if __name__ == "__main__":
    main()
