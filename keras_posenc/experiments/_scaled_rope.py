"""The length study's scaled rotary rows (keras_posenc/experiments/length_generalization/):
the trained `rope` models run at a test length with a scaled `RotaryPositions`, not retrained.
Kept apart so the study's models and tables do not grow with each scaling."""

from __future__ import annotations

from keras_posenc.layers.rotary import RotaryPositions

# Rows computed from the trained `rope` models at test time: encoding -> the scaling.
SCALED_ROPE = {
    "rope_pi": "linear",
    "rope_ntk": "ntk",
    "rope_dynamic_ntk": "dynamic_ntk",
    "rope_yarn": "yarn",
    "rope_llama3": "llama3",
    "rope_longrope": "longrope",
}

# The published claims of those rows (`length_generalization.tables.CLAIMS`).
SCALED_CLAIMS = {
    "rope_pi": "Chen et al. 2023: LLaMA 2048 -> 32768 with 1000 fine-tuning steps; "
    "without fine-tuning only for small s",
    "rope_ntk": "bloc97 2023: longer contexts without fine-tuning, small perplexity loss",
    "rope_dynamic_ntk": "bloc97 2023: as NTK-aware, and plain RoPE up to the training length",
    "rope_yarn": "Peng et al. 2023: LLaMA 2 to 64k and 128k with about 400 fine-tuning steps",
    "rope_llama3": "Meta 2024 (Llama 3.1): 8k to 128k, with continued pre-training on long "
    "documents",
    "rope_longrope": "Ding et al. 2024: to 2048k with searched per-pair factors and "
    "fine-tuning (here NTK-aware factors, no search)",
}


def scaled_rotation(
    encoding: str, factor: float, train_length: int, head_dim: int
) -> RotaryPositions:
    """`rope`'s rotation (wavelength 10000) scaled by ``encoding``'s scaling for ``factor``
    (``s``) times ``train_length``.

    YaRN keeps the paper's ramp (``yarn_convention="paper"``), which the published rows
    were measured with. Llama 3.1's scaling takes its released frequency factors (1 and 4).
    LongRoPE's factors are searched per model, and none exists for these models: its long
    factors here are the NTK-aware divisors ``s ** (2k / (d - 2))`` (one of the LongRoPE
    search's starting points), its short ones 1, so the row measures LongRoPE's switch and
    attention factor on NTK-aware frequencies, not a searched LongRoPE.
    """
    scaling = SCALED_ROPE[encoding]
    if scaling == "dynamic_ntk":  # it takes s from each call's length
        return RotaryPositions(scaling=scaling, training_length=train_length)
    if scaling in ("linear", "ntk"):
        return RotaryPositions(scaling=scaling, scaling_factor=factor)
    extra: dict = {}
    if scaling == "yarn":
        extra = {"yarn_convention": "paper"}
    elif scaling == "longrope":
        pairs = range(head_dim // 2)
        extra = {
            "short_factor": tuple(1.0 for _ in pairs),
            "long_factor": tuple(factor ** (2 * k / max(head_dim - 2, 1)) for k in pairs),
        }
    return RotaryPositions(
        scaling=scaling, scaling_factor=factor, training_length=train_length, **extra
    )
