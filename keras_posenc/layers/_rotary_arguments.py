"""The arguments of `RotaryPositions` (keras_posenc/layers/rotary.py): their defaults, which
scalings read which, and their checks, with the messages of keras_posenc/layers/_checks.py.
Private: kept apart so that rotary.py stays about the rotation itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from keras_posenc.layers._checks import (
    check_bool,
    check_choice,
    check_int,
    check_number_at_least,
    check_positive_number,
)

#: The values of ``scaling`` besides None (plain RoPE).
SCALINGS = ("linear", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope")

#: The values of ``yarn_convention``.
YARN_CONVENTIONS = ("released", "paper")

# The arguments only some scalings read; with any other scaling they must keep their
# defaults, so that a value that would be ignored is an error instead.
READ_BY = {
    "scaling_factor": ("linear", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope"),
    "training_length": ("dynamic_ntk", "yarn", "llama3", "longrope"),
    "yarn_convention": ("yarn",),
    "yarn_alpha": ("yarn",),
    "yarn_beta": ("yarn",),
    "yarn_truncate": ("yarn",),
    "yarn_mscale": ("yarn",),
    "yarn_mscale_all_dim": ("yarn",),
    "attention_factor": ("yarn", "longrope"),
    "low_freq_factor": ("llama3",),
    "high_freq_factor": ("llama3",),
    "short_factor": ("longrope",),
    "long_factor": ("longrope",),
}

# The constructor's defaults (`__repr__` leaves them out).
DEFAULTS = {
    "max_wavelength": 10000.0,
    "scaling": None,
    "scaling_factor": 1.0,
    "training_length": None,
    "yarn_convention": "released",
    "yarn_alpha": 1.0,
    "yarn_beta": 32.0,
    "yarn_truncate": True,
    "yarn_mscale": None,
    "yarn_mscale_all_dim": None,
    "attention_factor": None,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "short_factor": None,
    "long_factor": None,
    "partial_rotary_factor": 1.0,
    "interleaved": False,
    "xpos_scale_base": None,
}


def check_factors(caller: str, name: str, value: Any) -> tuple | None:
    """LongRoPE's per-pair factors: None, or a non-empty sequence of positive numbers (a
    tuple, so that the description hashes; a `.keras` file holds it as a list)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray) or not len(value):
        raise ValueError(
            f"{caller}: `{name}` must be None or a non-empty sequence of positive numbers, "
            f"got {value!r}."
        )
    return tuple(check_positive_number(caller, f"{name}[{i}]", v) for i, v in enumerate(value))


def check_arguments(caller: str, given: dict) -> dict:
    """The arguments of `RotaryPositions`, checked and normalised (floats, ints, tuples)."""
    scaling = given["scaling"]
    if scaling is not None and (not isinstance(scaling, str) or scaling not in SCALINGS):
        raise ValueError(
            f"{caller}: `scaling` must be None or one of {', '.join(map(repr, SCALINGS))}, "
            f"got {scaling!r}."
        )

    def optional(name: str, check: Any) -> Any:
        value = given[name]
        return None if value is None else check(caller, name, value)

    arguments = {
        "max_wavelength": check_positive_number(caller, "max_wavelength", given["max_wavelength"]),
        "scaling": scaling,
        "scaling_factor": check_number_at_least(
            caller, "scaling_factor", given["scaling_factor"], 1
        ),
        "training_length": optional("training_length", lambda c, n, v: check_int(c, n, v, 1)),
        "yarn_convention": check_choice(
            caller, "yarn_convention", given["yarn_convention"], YARN_CONVENTIONS
        ),
        "yarn_alpha": check_positive_number(caller, "yarn_alpha", given["yarn_alpha"]),
        "yarn_beta": check_positive_number(caller, "yarn_beta", given["yarn_beta"]),
        "yarn_truncate": check_bool(caller, "yarn_truncate", given["yarn_truncate"]),
        "yarn_mscale": optional("yarn_mscale", check_positive_number),
        "yarn_mscale_all_dim": optional("yarn_mscale_all_dim", check_positive_number),
        "attention_factor": optional("attention_factor", check_positive_number),
        "low_freq_factor": check_positive_number(
            caller, "low_freq_factor", given["low_freq_factor"]
        ),
        "high_freq_factor": check_positive_number(
            caller, "high_freq_factor", given["high_freq_factor"]
        ),
        "short_factor": check_factors(caller, "short_factor", given["short_factor"]),
        "long_factor": check_factors(caller, "long_factor", given["long_factor"]),
        "partial_rotary_factor": check_positive_number(
            caller, "partial_rotary_factor", given["partial_rotary_factor"]
        ),
        "interleaved": check_bool(caller, "interleaved", given["interleaved"]),
        "xpos_scale_base": optional("xpos_scale_base", check_positive_number),
    }
    check_combinations(caller, scaling, arguments)
    return arguments


def check_combinations(caller: str, scaling: str | None, arguments: dict) -> None:
    """The rules between arguments: ranges that depend on each other, what a scaling needs,
    and no argument that the scaling would ignore."""
    pairs = (("yarn_alpha", "yarn_beta"), ("low_freq_factor", "high_freq_factor"))
    for low, high in pairs:
        if arguments[low] >= arguments[high]:
            raise ValueError(
                f"{caller}: `{low}` must be smaller than `{high}`, got "
                f"{low}={arguments[low]!r}, {high}={arguments[high]!r}."
            )
    if arguments["partial_rotary_factor"] > 1:
        raise ValueError(
            f"{caller}: `partial_rotary_factor` must be in (0, 1], got "
            f"{arguments['partial_rotary_factor']!r}."
        )
    needs = {"training_length": ("dynamic_ntk", "yarn", "llama3", "longrope")}
    needs.update({"short_factor": ("longrope",), "long_factor": ("longrope",)})
    for name, readers in needs.items():
        if scaling in readers and arguments[name] is None:
            raise ValueError(
                f"{caller}: scaling={scaling!r} needs `{name}`"
                + (
                    " (the sequence length the model was trained at, an integer >= 1)."
                    if name == "training_length"
                    else " (one positive factor per pair of the rotary dimension)."
                )
            )
    if scaling == "longrope" and arguments["training_length"] < 2:
        raise ValueError(
            f"{caller}: scaling='longrope' needs `training_length` >= 2 (its attention "
            f"factor divides by ln(training_length)), got {arguments['training_length']!r}."
        )
    if (arguments["yarn_mscale"] is None) != (arguments["yarn_mscale_all_dim"] is None):
        raise ValueError(
            f"{caller}: `yarn_mscale` and `yarn_mscale_all_dim` are given together or not at "
            f"all, got yarn_mscale={arguments['yarn_mscale']!r}, "
            f"yarn_mscale_all_dim={arguments['yarn_mscale_all_dim']!r}."
        )
    for name, readers in READ_BY.items():
        if scaling not in readers and arguments[name] != DEFAULTS[name]:
            raise ValueError(
                f"{caller}: `{name}` is read only by scaling="
                f"{' or '.join(map(repr, readers))}; with scaling={scaling!r} leave it at "
                f"{DEFAULTS[name]!r}, got {name}={arguments[name]!r}."
            )
    if arguments["yarn_convention"] == "paper" and not arguments["yarn_truncate"]:
        raise ValueError(
            f"{caller}: `yarn_truncate` is read only by yarn_convention='released'; with "
            "'paper' leave it at True, got yarn_truncate=False."
        )
