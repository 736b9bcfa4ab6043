"""keras_hub's samplers inside the compiled loop: choosing, checking and seeding them.

A sampler is named (:data:`SAMPLERS`) or given as an instance; its settings are
checked once, and its random state is a loop variable, mapped in a
``keras.StatelessScope`` at each draw.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.layers._checks import check_int, is_finite_number

# keras_hub's samplers by name (keras_hub.samplers.get's identifiers that sample one
# token from the next-token distribution).
SAMPLERS = ("greedy", "random", "top_k", "top_p")


def _sampler(function: str, sampler: Any) -> Any:
    """A ``keras_hub.samplers.Sampler`` from a name or an instance."""
    samplers = quiet_import("keras_hub").samplers  # imports TensorFlow: only when needed

    if isinstance(sampler, str):
        if sampler not in SAMPLERS:
            raise ValueError(
                f"{function}: `sampler` must be one of {SAMPLERS} or a keras_hub.samplers "
                f"instance, got {sampler!r}."
            )
        return samplers.get(sampler)
    if not isinstance(sampler, samplers.Sampler):
        raise TypeError(
            f"{function}: `sampler` must be one of {SAMPLERS} or a keras_hub.samplers.Sampler "
            f"instance, got {type(sampler).__name__}."
        )
    if type(sampler).__call__ is not samplers.Sampler.__call__ or not hasattr(
        sampler, "get_next_token"
    ):
        raise ValueError(
            f"{function}: {type(sampler).__name__} runs its own decoding loop (beam or "
            "contrastive search) and cannot draw one token at a time; use beam_search for "
            "beams, or a sampler that draws from the next-token distribution "
            f"{SAMPLERS}."
        )
    return sampler


def _check_sampler_settings(function: str, sampler: Any, vocab: int | None) -> None:
    """The one check of a sampler's settings, for every sampler our generation receives.

    keras_hub's samplers take any value: a temperature of 0 divides by zero (argmax on
    TensorFlow came back as id = vocabulary size, JAX returned tokens), a negative one samples
    the inverted distribution, ``top_p`` above 1 or at 0 and ``k`` of 0 or above the
    vocabulary fail deep in each backend or sample wrongly. Greedy search is the way to ask
    for the argmax.
    """
    name = type(sampler).__name__
    temperature = getattr(sampler, "temperature", 1.0)
    if not (is_finite_number(temperature) and temperature > 0):
        raise ValueError(
            f"{function}: {name}: `temperature` must be a finite number > 0 (for the most "
            f"likely token, use greedy_search or the 'greedy' sampler), got {temperature!r}."
        )
    p = getattr(sampler, "p", None)
    if p is not None and not (is_finite_number(p) and 0 < p <= 1):
        raise ValueError(f"{function}: {name}: `p` must be in (0, 1], got {p!r}.")
    k = getattr(sampler, "k", None)
    if k is None:
        return
    most = f" and at most the vocabulary size {vocab}" if vocab else ""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1 or (vocab and k > vocab):
        raise ValueError(f"{function}: {name}: `k` must be an int >= 1{most}, got {k!r}.")


def _sampler_key(sampler: Any) -> Any:
    """What a compiled loop depends on in ``sampler``: its type and settings, not its seed
    (the random state is a loop input), so samplers that differ only there share it."""
    if sampler is None:
        return None
    try:
        config = dict(sampler.get_config())
        config.pop("seed", None)
        return (type(sampler), repr(sorted(config.items())))
    except Exception:  # noqa: BLE001  (a custom sampler without a usable config)
        return (type(sampler), id(sampler))


def _seed_states(function: str, sampler: Any, seed: Any) -> tuple:
    """The sampler's random state to start from: its own, or fresh from ``seed``."""
    if sampler is None:
        return ()
    if seed is None:
        return tuple(ops.convert_to_tensor(v.value) for v in sampler.variables)
    seed = check_int(function, "seed", seed, 0)
    return tuple(
        ops.convert_to_tensor(keras.random.SeedGenerator(seed + i).state.value)
        for i in range(len(sampler.variables))
    )


def _draw(sampler: Any, logits: Any, seeds: tuple) -> tuple:
    """The sampler's next token from ``logits``, with its random state given and returned.

    The state is mapped in a ``keras.StatelessScope``, so a compiled loop carries it as
    a loop variable instead of assigning a variable inside the graph.
    """
    variables = sampler.variables
    with keras.StatelessScope(state_mapping=list(zip(variables, seeds, strict=True))) as scope:
        token = sampler.get_next_token(sampler.compute_probabilities(logits))
    new_seeds = []
    for variable, old in zip(variables, seeds, strict=True):
        value = scope.get_current_value(variable)
        new_seeds.append(old if value is None else value)
    return ops.cast(token, "int32"), tuple(new_seeds)
