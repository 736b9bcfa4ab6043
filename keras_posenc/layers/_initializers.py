"""One initializer per weight: the copy every sublayer of a keras-posenc layer gets.

A Keras 3 initializer instance draws the same values on every call unless it
is seeded with a ``keras.random.SeedGenerator``: an unseeded instance fixes a
seed when it is created, a seeded one keeps the seed it was given. A layer that
handed one instance to its query, key and value projections would start them
with element-for-element identical kernels. Every layer that builds several
weights from one user-facing initializer goes through `sublayer_initializer`
(see "Initializers" in docs/development.md).
"""

from __future__ import annotations

import zlib
from typing import Any

import keras

__all__ = ["sublayer_initializer"]


def _derived_seed(seed: int, name: str) -> int:
    # crc32 is stable across processes and platforms (Python's hash() of a str is not),
    # so a seeded layer initialises identically in every run.
    return zlib.crc32(f"{seed}/{name}".encode()) & 0x7FFFFFFF


def sublayer_initializer(initializer: Any, name: str) -> Any:
    """A copy of ``initializer`` for the sublayer or weight called ``name``.

    - Unseeded (``seed=None``): a fresh copy, which fixes a fresh seed (drawn from
      Keras' global random state, so ``keras.utils.set_random_seed`` makes it
      reproducible).
    - Seeded with an int: a copy seeded with a seed derived from that int and ``name``,
      so the layer is still reproducible but two sublayers never start equal (a plain
      clone, as ``keras.layers.MultiHeadAttention`` makes, would repeat the seed).
    - Seeded with a ``keras.random.SeedGenerator``: the same instance, whose state
      advances with every draw.
    - Anything that is not a ``keras.initializers.Initializer`` (``None``, a plain
      function) and initializers without a seed (``Zeros``, ``Constant``) are
      returned as they are: the first is resolved by the caller, the second draws
      nothing random.

    Args:
        initializer: an initializer instance, or anything ``keras.initializers.get``
            returns.
        name: the sublayer's or weight's name, unique within the layer.

    Returns:
        The initializer to give that one sublayer or weight.
    """
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    config = initializer.get_config()
    if "seed" not in config:
        return initializer
    seed = getattr(initializer, "seed", None)
    if isinstance(seed, keras.random.SeedGenerator):
        return initializer
    if isinstance(config["seed"], int):
        config = dict(config, seed=_derived_seed(config["seed"], name))
    return initializer.__class__.from_config(config)


def _int_seeded(initializer: Any) -> bool:
    return isinstance(initializer, keras.initializers.Initializer) and isinstance(
        initializer.get_config().get("seed"), int
    )


def redraw_seeded_weights(
    layer: keras.layers.Layer, kernel_initializer: Any, bias_initializer: Any
) -> None:
    """Draw a built Keras layer's kernels and biases again, one derived seed each.

    For a layer from another library that clones an int-seeded initializer plainly
    for its sublayers (``keras.layers.MultiHeadAttention``), which would start them
    equal. Weights are named by their sublayer (the path's last two parts), so the
    result does not depend on where the layer sits in a model. Does nothing for
    unseeded initializers: their plain clones already differ.
    """
    initializers = {"kernel": kernel_initializer, "bias": bias_initializer}
    for weight in layer.weights:
        initializer = initializers.get(weight.name)
        if initializer is None or not _int_seeded(initializer):
            continue
        owner = "/".join(weight.path.split("/")[-2:])
        draw = sublayer_initializer(initializer, owner)
        weight.assign(draw(weight.shape, weight.dtype))
