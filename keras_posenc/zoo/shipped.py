"""Weights shipped inside the package: small presets trained by the repository's recipes.

``zoo.create(NAME, weights=TAG)`` loads them by name, offline: ``keras_posenc/zoo/weights/``
holds each preset's ``.weights.h5`` file and ``presets.json``, which says for every zoo name
and tag the fields of the named configuration the preset changes (a narrower CoAtNet, a
20-id vocabulary), the recipe that trained it, its seed and its held-out metrics (the
model cards in the repository's ``zoo/<family>/README.md`` quote the same numbers).

Examples:

    >>> from keras_posenc import zoo
    >>> sorted(zoo.shipped_presets())
    ['coatnet_0/digits', 'shaw_transformer_base/reverse']
    >>> zoo.shipped_presets()["coatnet_0/digits"]["overrides"]["num_classes"]
    10
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from typing import Any

__all__ = ["shipped_presets", "shipped_weights"]

FOLDER = os.path.join(os.path.dirname(__file__), "weights")
INDEX = os.path.join(FOLDER, "presets.json")
# A tag is one lower-case word, so a weights path (with a dot or a separator) is never one.
_TAG = re.compile(r"^[a-z][a-z0-9_]*$")


@functools.cache
def _index() -> dict[str, dict[str, Any]]:
    with open(INDEX, encoding="utf-8") as file:
        return json.load(file)


def shipped_presets() -> dict[str, dict[str, Any]]:
    """Every shipped preset, ``"NAME/TAG"`` -> its entry of ``presets.json``: ``model``,
    ``tag``, ``overrides``, ``weights`` (the file's path), ``recipe``, ``seed``,
    ``metrics`` (held-out), ``train_seconds`` and ``data``.

    >>> entry = shipped_presets()["shaw_transformer_base/reverse"]
    >>> entry["model"], entry["tag"], os.path.isfile(entry["weights"])
    ('shaw_transformer_base', 'reverse', True)
    """
    found = {}
    for model, tags in _index().items():
        for tag, entry in tags.items():
            entry = copy.deepcopy(entry)
            entry.update(model=model, tag=tag, weights=os.path.join(FOLDER, entry["weights"]))
            found[f"{model}/{tag}"] = entry
    return found


def is_tag(weights: Any) -> bool:
    """Whether ``weights`` has the form of a shipped preset's tag (``"digits"``)."""
    return isinstance(weights, str) and bool(_TAG.match(weights))


def shipped_weights(name: str, tag: str) -> tuple[str, dict[str, Any]]:
    """The weights file of the preset ``tag`` shipped for the zoo model ``name``, and the
    configuration fields it changes (JSON lists as tuples).

    Raises:
        ValueError: no preset ``tag`` is shipped for ``name``; the message lists those
            that are.

    >>> path, overrides = shipped_weights("coatnet_0", "digits")
    >>> os.path.basename(path), overrides["input_shape"]
    ('coatnet_0.digits.weights.h5', (32, 32, 1))
    """
    entry = _index().get(name, {}).get(tag)
    if entry is None:
        own = sorted(_index().get(name, {}))
        every = ", ".join(f"{model} ({', '.join(sorted(t))})" for model, t in _index().items())
        raise ValueError(
            f"zoo.create({name!r}): no shipped weights {tag!r} for {name!r}"
            + (f" (shipped for it: {', '.join(map(repr, own))})" if own else "")
            + f". Shipped presets: {every}. `weights` is otherwise a .weights.h5 or .keras "
            "file, a preset folder or hf://ORG/REPO."
        )
    overrides = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in entry["overrides"].items()
    }
    return os.path.join(FOLDER, entry["weights"]), overrides
