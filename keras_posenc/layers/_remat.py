"""Rematerialisation (Keras' ``keras.remat``) of a layer's call with dropout inside.

A recomputed function must draw the same random numbers again, and on JAX must not
assign a variable (a seed generator's state) from within. Here every seed generator of
the layer's sublayers is read before the call and passed in; within the call each
sublayer draws from a `DrawnSeeds` that counts from that state, as the generator would;
after the call the generators are advanced by the draws made. The first pass and the
recomputation draw the same seeds, which are the seeds the layer draws without
recomputation: outputs do not change.

Used by the attention core's query blocks (keras_posenc/layers/_attention.py) and, through
`Remat`, by every Transformer block's ``remat=True`` (the relative blocks, `DecoderBlock`,
MUSE's, `RelativeTransformerBlock2D`, and the zoo's T5 and DeBERTa blocks).
Private: layers use it, users do not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import backend
from keras_posenc.layers._checks import check_bool


def training_now(training: Any) -> bool:
    """Whether ``training`` may be true (a tensor counts as possibly true)."""
    return not (isinstance(training, bool | int | type(None)) and not training)


class DrawnSeeds(keras.random.SeedGenerator):
    """A seed generator counting from a state read before the call: ``next()`` gives the
    state, then the state plus ``[0, 1]``, ... (as ``keras.random.SeedGenerator.next``
    does), without a state variable of its own."""

    def __init__(self, seed: Any) -> None:  # no super().__init__: no variable to create
        self._seed, self._initial_seed, self.count = seed, None, 0

    def next(self, ordered: bool = True) -> Any:
        seed, self.count = self._seed, self.count + 1
        if self.count == 1:
            return seed
        step = np.array([0, self.count - 1])
        return ops.add(seed, ops.convert_to_tensor(step, dtype=seed.dtype))


def remat_call(
    layer: keras.layers.Layer,
    function: Callable[..., Any],
    tensors: Sequence[Any],
    training: Any,
) -> Any:
    """``function(*tensors)`` recomputed in the backward pass (`backend.recompute_block`).

    ``tensors``: every tensor the gradients flow to (None allowed); ``function`` reads the
    layer's weights and tensors without gradients (masks) besides. Outside training it runs
    as it is.
    """
    if not training_now(training):
        return function(*tensors)
    owners = [
        owner
        for owner in layer._flatten_layers(include_self=True)
        if isinstance(getattr(owner, "seed_generator", None), keras.random.SeedGenerator)
    ]
    generators = [owner.seed_generator for owner in owners]
    # Copies (``* 1``, as SeedGenerator.next): TensorFlow's variable value is read lazily,
    # and the recomputation would read the state advanced below.
    states = tuple(generator.state.value * 1 for generator in generators)
    counts: list = []

    def run(*given: Any) -> Any:
        drawn = [DrawnSeeds(state) for state in given[len(tensors) :]]
        for owner, seeds in zip(owners, drawn, strict=True):
            object.__setattr__(owner, "seed_generator", seeds)  # untracked: restored below
        try:
            output = function(*given[: len(tensors)])
        finally:
            for owner, generator in zip(owners, generators, strict=True):
                object.__setattr__(owner, "seed_generator", generator)
        counts[:] = [seeds.count for seeds in drawn]
        return output

    output = backend.recompute_block(run, tuple(tensors) + states, training)
    for generator, count in zip(generators, counts, strict=True):
        if count:
            step = ops.convert_to_tensor(np.array([0, count]), dtype=generator.state.dtype)
            generator.state.assign(ops.add(generator.state.value, step))
    return output


class Remat:
    """A block's ``remat`` option: its call recomputed in the backward pass of training.

    A mixin of the blocks (one implementation): ``__init__`` calls ``_set_remat(caller,
    remat)``, ``get_config`` adds ``remat=self.remat``, and ``call`` starts with::

        if self._remats(training):
            return self._remat_call(lambda x, bias: self.call(x, ..., bias, ...), (x, bias),
                                    training)

    where the lambda is the same call with the tensors the gradients flow to as its
    arguments (masks and other tensors without gradients read from the enclosing call; a
    Keras mask read before: the recomputed tensors carry none). Within the recomputation
    ``_remats`` is False, so the call runs as without remat.
    """

    remat = False
    _inside_remat = False

    def _set_remat(self, caller: str, remat: Any) -> None:
        self.remat = check_bool(caller, "remat", remat)
        self._inside_remat = False

    def _remats(self, training: Any) -> bool:
        """Whether this call is recomputed in the backward pass (``remat=True``, training)."""
        return self.remat and not self._inside_remat and training_now(training)

    def _remat_call(self, call: Callable[..., Any], tensors: Sequence[Any], training: Any) -> Any:
        """``call(*tensors)`` (the block's own ``call``, without remat) recomputed in the
        backward pass: Keras' remat, its dropout replayed (`remat_call`)."""

        def body(*given: Any) -> Any:
            previous, self._inside_remat = self._inside_remat, True
            try:
                return call(*given)
            finally:
                self._inside_remat = previous

        return remat_call(self, body, tuple(tensors), training)
