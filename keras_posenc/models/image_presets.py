"""Our image and translation presets in keras-hub's preset format.

:func:`to_keras_hub_preset` writes, for a preset folder of ours (``hub.save_preset``'s, a
converted timm repository's: ``hf://timm/...``) or a preset shipped in the package
(``"coatnet_0/digits"``), the family's ``ImageClassifier`` with its weights and its
preprocessing as keras-hub's ``save_to_preset`` writes it (``config.json``,
``task.json``, ``preprocessor.json``, the weights), plus the class names our presets keep
(``assets/class_names.json``). keras-hub's ``ImageClassifier.from_preset(folder)`` loads
it as ours; so do ``hub.load_preset(folder)``, ``hub.from_preset(folder)`` and
``zoo.create(name, weights=folder)``. A translation preset (a fairseq archive, or the
folder ``hub.load_preset`` converted it into) becomes its ``Seq2SeqLM`` with its text
pipeline (keras_posenc/models/translation.py).

Examples:

    >>> import tempfile, keras_hub
    >>> from keras_posenc import models
    >>> folder = models.to_keras_hub_preset("coatnet_0/digits", tempfile.mkdtemp() + "/digits")
    >>> classifier = keras_hub.models.ImageClassifier.from_preset(folder)
    >>> type(classifier).__name__, classifier.output_shape
    ('CoAtNetImageClassifier', (None, 10))
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from keras_posenc.hub import ImagePreprocessor, load_preset
from keras_posenc.models.image import CLASSIFIERS
from keras_posenc.models.translation import (
    is_translation_preset,
    to_keras_hub_translation_preset,
)
from keras_posenc.zoo import shipped
from keras_posenc.zoo.registry import get_spec

__all__ = ["SHIPPED_CONVERTERS", "to_keras_hub_preset"]

#: The image converter's arguments of each shipped image preset (``"NAME/TAG"``): the
#: digits' inputs are the 0-16 pixels as ``x / 8 - 1`` (keras_posenc/experiments/digits.py
#: ``to_inputs``), so 0-255 images scale by 2 / 255 less 1; 8 x 8 digits go to 32 x 32 by
#: repeating each pixel 4 x 4, which the nearest resize does.
SHIPPED_CONVERTERS: dict[str, dict[str, Any]] = {
    "coatnet_0/digits": {
        "image_size": (32, 32),
        "scale": 2.0 / 255.0,
        "offset": -1.0,
        "interpolation": "nearest",
    },
}
_SHIPPED_CLASS_NAMES = {"coatnet_0/digits": [str(digit) for digit in range(10)]}
_CLASS_NAMES = os.path.join("assets", "class_names.json")


def to_keras_hub_preset(
    source: str | os.PathLike,
    folder: str | os.PathLike,
    *,
    name: str | None = None,
    overwrite: bool = False,
    **overrides: Any,
) -> str:
    """Writes an image or translation preset of ours in keras-hub's preset format.

    An image preset becomes its family's ``ImageClassifier``; a translation preset
    (ConvS2S with its text pipeline) its ``Seq2SeqLM``, whose ``generate(texts)``
    translates as the zoo model's ``translate`` (:func:`~keras_posenc.models.translation.
    to_keras_hub_translation_preset`; ``name`` and ``overrides`` do not apply).

    Args:
        source: a shipped preset ``"NAME/TAG"`` (``zoo.shipped_presets()``), a preset
            folder of ours, or a source ``hub.load_preset`` reads (``hf://ORG/REPO``, a
            fairseq translation archive's URL or file).
        folder: the keras-hub preset folder to write.
        name: the zoo name of the preset's model; default the preset's
            ``metadata.json`` ``architecture`` (converted timm repositories record it).
        overwrite: replace an existing ``folder`` (default: refuse).
        **overrides: fields of the named configuration the preset's model was built
            with, as ``zoo.create(name, weights=source, **overrides)`` takes them (a
            preset saved from a narrowed configuration).

    Returns:
        The folder's path.

    Raises:
        ValueError: a source whose zoo name is unknown (give ``name``), or of a family
            without a keras-hub classifier here.
        FileExistsError: ``folder`` exists and ``overwrite`` is False.
    """
    who = "to_keras_hub_preset"
    text = os.fspath(source)
    target = os.fspath(folder)
    if os.path.exists(target) and not overwrite:
        raise FileExistsError(f"{who}: {target!r} exists; pass overwrite=True to replace it.")
    converter: dict[str, Any] | None = None
    class_names = None
    if text in shipped.shipped_presets():
        name, weights = text.split("/")
        converter = SHIPPED_CONVERTERS.get(text)
        class_names = _SHIPPED_CLASS_NAMES.get(text)
    else:
        preset = load_preset(text)
        if is_translation_preset(preset):  # keras_posenc/models/translation.py
            return to_keras_hub_translation_preset(preset, target)
        name = name or preset.metadata.get("architecture")
        if not name:
            raise ValueError(
                f"{who}: {text!r} records no zoo name (its metadata.json has no "
                "'architecture'); give name=..., the zoo name its model was built from."
            )
        weights = text
        if isinstance(preset.preprocessor, ImagePreprocessor):
            converter = {"preprocessor": preset.preprocessor}
        elif preset.preprocessor is not None and hasattr(preset.preprocessor, "get_config"):
            converter = {"converter": preset.preprocessor}  # a keras-hub preset's own
        class_names = preset.class_names
    family = get_spec(name).family
    classifier = CLASSIFIERS.get(family)
    if classifier is None:
        raise ValueError(
            f"{who}: zoo model {name!r} is of the {family!r} family; the image families "
            f"with a keras-hub classifier: {sorted(CLASSIFIERS)}."
        )
    task = classifier.from_zoo(name, weights=weights, **overrides)
    if converter is not None:
        task.preprocessor = _preprocessor(classifier, converter)
    if os.path.exists(target):
        shutil.rmtree(target)
    task.save_to_preset(target)
    if class_names is not None:
        os.makedirs(os.path.join(target, "assets"), exist_ok=True)
        with open(os.path.join(target, _CLASS_NAMES), "w", encoding="utf-8") as handle:
            json.dump([str(n) for n in class_names], handle, indent=2)
    return target


def _preprocessor(classifier: Any, converter: dict[str, Any]) -> Any:
    """The family's preprocessor around the converter ``converter`` describes."""
    preprocessor_cls = classifier.preprocessor_cls
    converter_cls = preprocessor_cls.image_converter_cls
    if "preprocessor" in converter:
        image_converter = converter_cls.from_image_preprocessor(converter["preprocessor"])
    elif "converter" in converter:
        image_converter = converter_cls.from_config(converter["converter"].get_config())
    else:
        image_converter = converter_cls(**converter)
    return preprocessor_cls(image_converter=image_converter)
