"""The study's transplants: what each one is, and the grouping the tables and figure read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from keras_posenc.layers.rotary import RotaryPositions

WHO = "transplant_study"
VOCABULARY = 10  # the length study's tasks


def _rotary(scaling: str | None, tuned: bool = False) -> tuple[Callable[[int, int], Any], bool]:
    """A transplant to RoPE with ``scaling`` at factor ``s`` for a model trained at ``L``."""

    def scheme(length: int, factor: int) -> Any:
        if scaling is None:
            return RotaryPositions()
        if scaling == "dynamic_ntk":
            return RotaryPositions(scaling=scaling, training_length=length)
        needs_length = scaling in ("yarn", "llama3")
        return RotaryPositions(
            scaling=scaling,
            scaling_factor=float(factor),
            training_length=length if needs_length else None,
        )

    return scheme, tuned


def _replacement(name: str) -> tuple[Callable[[int, int], Any], bool]:
    return (lambda length, factor: name), True


#: Every transplant of the study: name -> (the scheme for a model trained at ``L`` and
#: stretched ``s`` times, whether it is fine-tuned at ``L`` after the transplant). ``"rope"``
#: is the trained model itself.
TRANSPLANTS: dict[str, tuple[Callable[[int, int], Any], bool]] = {
    "rope": (lambda length, factor: None, False),
    "rope_tuned": _rotary(None, tuned=True),
    "pi": _rotary("linear"),
    "pi_tuned": _rotary("linear", tuned=True),
    "ntk": _rotary("ntk"),
    "dynamic_ntk": _rotary("dynamic_ntk"),
    "yarn": _rotary("yarn"),
    "yarn_tuned": _rotary("yarn", tuned=True),
    "llama3": _rotary("llama3"),
    "alibi": _replacement("alibi"),
    "kerple": _replacement("kerple"),
    "fire": _replacement("fire"),
    "t5_decoder": _replacement("t5_decoder"),
    "nope": _replacement("nope"),
}
DESCRIPTIONS = {
    "rope": "RoPE as trained",
    "rope_tuned": "RoPE, fine-tuned as the replacements are (the control)",
    "pi": "position interpolation (linear), factor s, no fine-tuning",
    "pi_tuned": "position interpolation, factor s, fine-tuned",
    "ntk": "NTK-aware base, factor s, no fine-tuning",
    "dynamic_ntk": "dynamic NTK (the factor follows the length), no fine-tuning",
    "yarn": "YaRN, factor s, no fine-tuning",
    "yarn_tuned": "YaRN, factor s, fine-tuned",
    "llama3": "Llama 3.1's scaling, factor s, no fine-tuning",
    "alibi": "ALiBi instead of RoPE, fine-tuned",
    "kerple": "KERPLE (log) instead of RoPE, fine-tuned",
    "fire": "FIRE instead of RoPE, fine-tuned",
    "t5_decoder": "T5's decoder buckets instead of RoPE, fine-tuned",
    "nope": "no position encoding, fine-tuned",
}


def mean_by(rows: Sequence[dict], key: str) -> dict[tuple, float]:
    """``{(task, transplant, length): mean of key over seeds}``."""
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        if row[key] is not None:
            groups.setdefault((row["task"], row["transplant"], row["length"]), []).append(
                float(row[key])
            )
    return {group: float(np.mean(values)) for group, values in groups.items()}
