"""The study's CoAtNet, built with the zoo's builder, for one layout and position encoding."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc import zoo
from keras_posenc.experiments.coatnet_layouts.settings import (
    CLASSES,
    MODEL_SETTINGS,
    POSITION_OPTIONS,
    POSITIONS,
)
from keras_posenc.zoo.coatnet import parse_layout


def check_positions(caller: str, layout: str, positions: str) -> None:
    """``positions`` is one of `POSITIONS`, and one other than ``"table"`` has a
    Transformer stage of ``layout`` to go into.

    Raises:
        ValueError: otherwise, naming ``caller``.
    """
    if positions not in POSITIONS:
        raise ValueError(
            f"{caller}: `positions` must be some of {', '.join(map(repr, POSITIONS))}; "
            f"got {positions!r}."
        )
    if positions != "table" and "T" not in parse_layout(layout, caller):
        raise ValueError(
            f"{caller}: positions={positions!r} sets the Transformer stages' position "
            f"encoding, and layout {layout!r} has none; use positions='table' for it."
        )


def build_model(
    layout: str, seed: int | None = None, positions: str = "table", **model_settings: Any
) -> keras.Model:
    """The study's CoAtNet for one layout and position encoding, from the zoo's builder.

    ``zoo.create("coatnet_0", layout=layout, input_shape=(image_size,
    image_size, 3), num_classes=4, blocks=..., channels=..., head_dim=...,
    pre_logits=False, transformer_options=POSITION_OPTIONS[positions])`` with
    `MODEL_SETTINGS`; the classifier gives logits.

    Args:
        layout: one of `LAYOUTS` (or any other four of C/T joined by ``-``).
        seed: if given, ``keras.utils.set_random_seed(seed)`` first, so the
            initial weights are reproducible.
        positions: the Transformer stages' position encoding, one of `POSITIONS`
            (default ``"table"``, CoAtNet's relative bias table).
        **model_settings: overrides of `MODEL_SETTINGS` (``image_size``,
            ``blocks``, ``channels``, ``head_dim``).

    Returns:
        The ``keras.Model``.

    The guide (docs/guides/coatnet.md) builds, trains and predicts with the
    same configuration; no example runs here, as building a model costs
    seconds on JAX (each initializer shape is compiled).
    """
    unknown = set(model_settings) - set(MODEL_SETTINGS)
    if unknown:
        raise ValueError(
            f"build_model: unknown model settings {sorted(unknown)}; "
            f"expected some of {sorted(MODEL_SETTINGS)}."
        )
    check_positions("build_model", layout, positions)
    settings = {**MODEL_SETTINGS, **model_settings}
    if seed is not None:
        keras.utils.set_random_seed(seed)
    size = settings["image_size"]
    return zoo.create(
        "coatnet_0",
        layout=layout,
        input_shape=(size, size, 3),
        num_classes=len(CLASSES),
        blocks=tuple(settings["blocks"]),
        channels=tuple(settings["channels"]),
        head_dim=settings["head_dim"],
        pre_logits=False,
        transformer_options=POSITION_OPTIONS[positions],
    )


def trainable_parameters(model: keras.Model) -> int:
    """Trainable parameters (the paper's count; without BatchNorm's moving statistics)."""
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)
