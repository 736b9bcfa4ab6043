"""The preset folder: a model, its preprocessing and its class names in one folder.

A preset folder has keras-hub's layout::

    config.json           the model (keras.saving.serialize_keras_object)
    model.weights.h5      its weights (model.save_weights)
    preprocessor.json     the ImagePreprocessor or TranslationPreprocessor (serialized)
    assets/...            the preprocessor's files (a translation model's vocabularies, BPE codes)
    metadata.json         versions, parameter count, date, where the weights came from
    assets/class_names.json   one name per output class, if known

:func:`save_preset` writes one; :func:`keras_posenc.hub.load_preset` reads one (or
a source converted into one: :mod:`keras_posenc.hub.presets`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

import keras_posenc
from keras_posenc.hub.preprocessing import ImagePreprocessor
from keras_posenc.layers._checks import check_int

__all__ = ["Preset", "save_preset"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
PREPROCESSOR_FILE = "preprocessor.json"
METADATA_FILE = "metadata.json"
CLASS_NAMES_FILE = os.path.join("assets", "class_names.json")
# What makes a preset folder keras-hub's (a Task's ``save_to_preset``): its task's config.
TASK_FILE = "task.json"
# What makes a folder a preset; preprocessing and class names are optional.
_REQUIRED = (CONFIG_FILE, WEIGHTS_FILE, METADATA_FILE)


@dataclasses.dataclass
class Preset:
    """A loaded preset: the model and what it needs to classify images.

    Attributes:
        model: the ``keras.Model``.
        preprocessor: the :class:`ImagePreprocessor` (image models), the
            :class:`~keras_posenc.zoo.translation.TranslationPreprocessor` (translation
            models), or None if the preset has none.
        class_names: one name per output class, or None.
        metadata: the preset's ``metadata.json``.
        path: the preset folder (for a hub source: its converted copy in the cache).
    """

    model: keras.Model
    preprocessor: Any
    class_names: list[str] | None
    metadata: dict[str, Any]
    path: str

    def classify(self, images: Sequence[Any], top: int = 5) -> list[list[tuple[str, float]]]:
        """The ``top`` classes of each image with their probabilities, most likely first.

        Args:
            images: image files (decoded by Pillow through ``keras.utils.load_img``, as
                RGB) or arrays ``(height, width, 3)`` with values 0-255, any sizes; one
                file or array alone is a list of one.
            top: how many classes per image (at most the model's class count).

        Returns:
            One list per image of ``(class name, probability)``; classes without a
            name are called ``"class N"``.

        Raises:
            ValueError: a preset without a preprocessor, or a bad ``top``.

        Example:

        >>> # preset = load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
        >>> # preset.classify(["cat.jpg"], top=2)   # [[('tabby', 0.61), ('tiger_cat', 0.2)]]
        """
        who = "Preset.classify"
        if self.preprocessor is None:
            raise ValueError(f"{who}: the preset at {self.path!r} has no preprocessor.")
        classes = int(self.model.output_shape[-1])
        top = check_int(who, "top", top, minimum=1)
        if top > classes:
            raise ValueError(f"{who}: `top` must be at most {classes} (the classes), got {top}.")
        if isinstance(images, str | os.PathLike | np.ndarray):
            images = [images]
        mode = "grayscale" if self.model.input_shape[-1] == 1 else "rgb"  # the digits' one
        batch = np.concatenate([_batch(self.preprocessor(_image_array(i, mode))) for i in images])
        probabilities = _probabilities(np.asarray(self.model.predict(batch, verbose=0)))
        names = self.class_names or [f"class {i}" for i in range(classes)]
        order = np.argsort(-probabilities, axis=-1, kind="stable")[:, :top]
        return [
            [(names[index], float(row[index])) for index in indices]
            for row, indices in zip(probabilities, order)
        ]

    def translate(self, texts: str | Sequence[str], **kwargs: Any) -> str | list[str]:
        """Translations of sentences by a translation preset (``model.translate``).

        Args:
            texts: one sentence or a list.
            **kwargs: :meth:`~keras_posenc.zoo.seq2seq.Seq2SeqModel.translate`'s
                (``beam_size``, ``max_length``, ``batch_size``, ...).

        Returns:
            One translation per sentence (a string for a string).

        Example:

        >>> # preset = load_preset("https://dl.fbaipublicfiles.com/fairseq/models/"
        >>> #                      "wmt14.v2.en-fr.fconv-py.tar.bz2")   # downloads once
        >>> # preset.translate("Hello world!")
        """
        translate = getattr(self.model, "translate", None)
        if translate is None:
            raise ValueError(
                f"Preset.translate: the preset at {self.path!r} holds a "
                f"{type(self.model).__name__}, not a translation model."
            )
        return translate(texts, preprocessor=self.preprocessor, **kwargs)


def _image_array(image: Any, color_mode: str = "rgb") -> np.ndarray:
    if isinstance(image, str | os.PathLike):
        loaded = keras.utils.load_img(os.fspath(image), color_mode=color_mode)
        return keras.utils.img_to_array(loaded)
    return np.asarray(image)


def _batch(preprocessed: Any) -> np.ndarray:
    """A preprocessor's output as a batch: keras-hub's image converters keep a single
    image unbatched (a keras-hub preset's, keras_posenc/models/image_presets.py)."""
    array = np.asarray(keras.ops.convert_to_numpy(preprocessed))
    return array[None] if array.ndim == 3 else array


def _probabilities(outputs: np.ndarray) -> np.ndarray:
    """Softmax of logits; outputs that are already a distribution (a model built with
    ``classifier_activation="softmax"``) are kept."""
    outputs = outputs.astype(np.float64)
    if np.all(outputs >= 0) and np.allclose(outputs.sum(-1), 1.0, atol=1e-4):
        return outputs
    shifted = np.exp(outputs - outputs.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def save_preset(
    model: keras.Model,
    path: str | os.PathLike,
    *,
    preprocessor: Any = None,
    class_names: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> str:
    """Saves ``model`` (and its preprocessing and class names) as a preset folder.

    The folder is written beside its target and renamed into place when complete,
    so a failed or interrupted save leaves nothing (or the previous preset) there.

    Args:
        model: a ``keras.Model`` whose config Keras can serialize (zoo models can).
        path: the folder to write.
        preprocessor: the :class:`ImagePreprocessor` its inputs go through, or a
            translation model's :class:`~keras_posenc.zoo.translation.TranslationPreprocessor`
            (its vocabularies and BPE codes are written under ``assets/``).
        class_names: one name per output class.
        metadata: more entries for ``metadata.json`` (JSON values), e.g. the source.
        overwrite: replace an existing folder (default: refuse).

    Returns:
        The folder's path.

    Raises:
        TypeError: ``model`` or ``preprocessor`` of the wrong type.
        ValueError: class names that do not match the model's outputs.
        FileExistsError: ``path`` exists and ``overwrite`` is False.

    Example:

    >>> import tempfile, keras
    >>> inputs = keras.Input((8, 8, 3))
    >>> outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(inputs))
    >>> model = keras.Model(inputs, outputs)
    >>> folder = save_preset(model, tempfile.mkdtemp() + "/tiny",
    ...                      preprocessor=ImagePreprocessor(8), class_names=["no", "yes"])
    >>> from keras_posenc.hub import load_preset
    >>> load_preset(folder).class_names
    ['no', 'yes']
    """
    from keras_posenc.export.staging import staged as _staged  # the one home of atomic writes

    who = "save_preset"
    if not isinstance(model, keras.Model):
        raise TypeError(f"{who}: `model` must be a keras.Model, got {type(model).__name__}.")
    from keras_posenc.zoo.translation import TranslationPreprocessor

    if preprocessor is not None and not isinstance(
        preprocessor, ImagePreprocessor | TranslationPreprocessor
    ):
        raise TypeError(
            f"{who}: `preprocessor` must be an ImagePreprocessor, a TranslationPreprocessor "
            f"or None, got {type(preprocessor).__name__}."
        )
    if class_names is not None:
        class_names = [str(name) for name in class_names]
        classes = model.output_shape[-1]
        if len(class_names) != classes:
            raise ValueError(
                f"{who}: `class_names` must have one name per output class ({classes}), "
                f"got {len(class_names)}."
            )
    target = os.fspath(path)
    with _staged([target], overwrite, who) as (staged,):
        os.makedirs(os.path.join(staged, "assets"))
        _write_json(os.path.join(staged, CONFIG_FILE), keras.saving.serialize_keras_object(model))
        model.save_weights(os.path.join(staged, WEIGHTS_FILE))
        if preprocessor is not None:
            _write_json(
                os.path.join(staged, PREPROCESSOR_FILE),
                keras.saving.serialize_keras_object(preprocessor),
            )
            if hasattr(preprocessor, "save_assets"):  # vocabularies, BPE codes
                preprocessor.save_assets(os.path.join(staged, "assets"))
        if class_names is not None:
            _write_json(os.path.join(staged, CLASS_NAMES_FILE), class_names)
        _write_json(
            os.path.join(staged, METADATA_FILE),
            {
                "keras_version": keras.__version__,
                "keras_posenc_version": keras_posenc.__version__,
                "parameter_count": int(model.count_params()),
                # zoo.create(name, weights=preset) builds the model with this many classes.
                "num_classes": int(model.output_shape[-1]),
                "date_saved": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                **dict(metadata or {}),
            },
        )
    return target


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2)


def _read_json(path: str, who: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
        raise ValueError(f"{who}: {path!r} is not valid JSON ({error}).") from error


def _is_preset(folder: str) -> bool:
    return all(os.path.isfile(os.path.join(folder, name)) for name in _REQUIRED)


def _class_count(folder: str) -> int | None:
    """The class count a preset folder's metadata records (None if it records none)."""
    metadata = _read_json(os.path.join(folder, METADATA_FILE), "zoo.create")
    classes = metadata.get("num_classes") if isinstance(metadata, dict) else None
    return int(classes) if isinstance(classes, int) else None


def _save_converted(
    model: keras.Model, target: str, preprocessor: Any, class_names: Any, metadata: dict
) -> None:
    """Saves a converted source's preset into the cache, once even when processes race."""
    try:
        save_preset(
            model,
            target,
            preprocessor=preprocessor,
            class_names=class_names,
            metadata=metadata,
            overwrite=os.path.exists(target),  # an incomplete folder left by hand
        )
    except FileExistsError:
        if not _is_preset(target):  # another process converted it meanwhile: use theirs
            raise
