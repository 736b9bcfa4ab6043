"""Presets: a model, its image preprocessing and its class names in one folder, and
pretrained weights by name (timm's CoAtNets on the Hugging Face hub).

A preset folder has keras-hub's layout::

    config.json           the model (keras.saving.serialize_keras_object)
    model.weights.h5      its weights (model.save_weights)
    preprocessor.json     the ImagePreprocessor or TranslationPreprocessor (serialized)
    assets/...            the preprocessor's files (a translation model's vocabularies, BPE codes)
    metadata.json         versions, parameter count, date, where the weights came from
    assets/class_names.json   one name per output class, if known

A *source* is a preset folder, ``hf://ORG/REPO``, a timm model repository on the hub
(``hf://timm/coatnet_0_rw_224.sw_in1k``), or a fairseq translation archive: its URL
(``https://dl.fbaipublicfiles.com/fairseq/models/wmt14.v2.en-fr.fconv-py.tar.bz2``) or
the archive file. An archive is downloaded (streamed, checked), extracted safely,
converted with its text pipeline (:class:`~keras_posenc.zoo.translation.
TranslationPreprocessor`) and cached like a hub source. A hub source is downloaded with
``huggingface_hub`` (which honours ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and its cache,
``HF_HOME`` / ``HF_HUB_CACHE``), converted once, and kept as a preset folder in
:func:`cache_folder` (``KERAS_POSENC_HOME``); later loads read that folder and ask the hub
nothing.

>>> from keras_posenc import zoo
>>> # model = zoo.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")   # downloads once
>>> # preset = zoo.load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
>>> # preset.classify(["cat.jpg"], top=5)
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
import json
import math
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

import keras_posenc
from keras_posenc._quiet import quiet_import
from keras_posenc._sources import (  # noqa: F401 (cache_folder: public here)
    HUB_PREFIX,
    archive_message,
    archive_target,
    cache_folder,
    hub_cache,
    hub_message,
    hub_offline,
    reachable,
)
from keras_posenc.layers._checks import (
    check_choice,
    check_int,
    check_ints,
    check_positive_number,
    excerpt,
)
from keras_posenc.zoo import archives

__all__ = [
    "HUB_PREFIX",
    "ImagePreprocessor",
    "Preset",
    "cache_folder",
    "from_preset",
    "imagenet_class_names",
    "load_preset",
    "preset_path",
    "remove_cached",
    "save_preset",
]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
PREPROCESSOR_FILE = "preprocessor.json"
METADATA_FILE = "metadata.json"
CLASS_NAMES_FILE = os.path.join("assets", "class_names.json")
# What makes a folder a preset; preprocessing and class names are optional.
_REQUIRED = (CONFIG_FILE, WEIGHTS_FILE, METADATA_FILE)
# A hub repository id: ORG/NAME, letters, digits, '-', '_', '.'; no '..' (it becomes a path).
_REPO_PATTERN = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# timm's interpolation names -> keras.ops.image.resize's (both antialias when shrinking).
_INTERPOLATIONS = {"bicubic": "bicubic", "bilinear": "bilinear", "nearest": "nearest"}
# The converter of each zoo family whose models load timm checkpoints ("module:function").
TIMM_CONVERTERS = {
    "coatnet": "keras_posenc.convert.timm:from_timm_coatnet",
    "maxvit": "keras_posenc.convert.timm:from_timm_maxvit",
}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


# --------------------------------------------------------------------------- preprocessing


@keras.saving.register_keras_serializable(package="keras_posenc")
class ImagePreprocessor(keras.layers.Layer):
    """timm's evaluation transform as a Keras layer: resize, center crop, normalise.

    For an image of any size (values 0-255, channels last): the shorter side is
    resized to ``floor(size / crop_pct)`` keeping the aspect ratio, the center
    ``image_size`` is cut out, and each channel becomes ``(x / 255 - mean) / std``
    (timm's ``transforms_imagenet_eval`` with ``crop_mode="center"``; ``"squash"``
    resizes both sides to ``size / crop_pct`` instead). The resize is Keras'
    antialiased one (``keras.ops.image.resize``), not Pillow's, so outputs are close
    to timm's, not bit-identical (on the test images, noisy ones: a mean absolute
    difference of 0.003 and at most 0.11 in normalised units, the same on every backend;
    an image already of the resize's size is not resized and matches exactly).

    The output size depends on the input's size, so the layer runs on concrete
    arrays (eagerly, one size per call), not inside a model with unknown input sizes.

    Args:
        image_size: ``(height, width)`` of the output, or one int for a square.
        crop_pct: the fraction of the resized image kept by the crop, in (0, 1].
        interpolation: ``"bicubic"``, ``"bilinear"`` or ``"nearest"``.
        crop_mode: ``"center"`` (keep the aspect ratio, then crop) or ``"squash"``.
        mean: per-channel mean of the 0-1 scaled image (ImageNet's by default).
        std: per-channel standard deviation (ImageNet's by default).

    Call arguments:
        images: ``(height, width, channels)`` or ``(batch, height, width, channels)``,
            any numeric dtype, values 0-255.

    Returns:
        float32 ``(batch, *image_size, channels)`` (a single image gets a batch of one).

    Example:

    >>> import numpy as np
    >>> preprocess = ImagePreprocessor(image_size=32, crop_pct=0.875,
    ...                                mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    >>> image = np.full((48, 64, 3), 255, "uint8")     # white, 48 x 64
    >>> out = np.asarray(preprocess(image))
    >>> out.shape, round(float(out.min()), 4), round(float(out.max()), 4)
    ((1, 32, 32, 3), 1.0, 1.0)

    Reference:
        timm's ``timm/data/transforms_factory.py`` (``transforms_imagenet_eval``).
    """

    def __init__(
        self,
        image_size: int | Sequence[int] = (224, 224),
        crop_pct: float = 0.875,
        interpolation: str = "bicubic",
        crop_mode: str = "center",
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        who = "ImagePreprocessor"
        if isinstance(image_size, int | np.integer) and not isinstance(image_size, bool):
            image_size = (int(image_size), int(image_size))
        self.image_size = check_ints(who, "image_size", image_size, count=2, what=" (h, w)")
        self.crop_pct = check_positive_number(who, "crop_pct", crop_pct)
        if self.crop_pct > 1:
            raise ValueError(f"{who}: `crop_pct` must be in (0, 1], got {crop_pct!r}.")
        self.interpolation = check_choice(
            who, "interpolation", interpolation, tuple(_INTERPOLATIONS)
        )
        self.crop_mode = check_choice(who, "crop_mode", crop_mode, ("center", "squash"))
        self.mean = _channel_values(who, "mean", mean)
        stds = _channel_values(who, "std", std)
        self.std = tuple(check_positive_number(who, "std", value) for value in stds)
        if len(self.mean) != len(self.std):
            raise ValueError(
                f"{who}: `mean` and `std` must have one value per channel each, got "
                f"{len(self.mean)} and {len(self.std)}."
            )

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """The size an image of ``height`` x ``width`` is resized to before the crop.

        >>> ImagePreprocessor(224, crop_pct=0.875).resized_size(480, 640)
        (256, 341)
        """
        scale = [math.floor(side / self.crop_pct) for side in self.image_size]
        if self.crop_mode == "squash":
            return scale[0], scale[1]
        if scale[0] == scale[1]:  # torchvision's Resize(int): the shorter side, truncated
            if height <= width:
                return scale[0], int(scale[0] * width / height)
            return int(scale[0] * height / width), scale[0]
        # timm's ResizeKeepRatio: the smaller ratio, each side rounded.
        ratio = min(height / scale[0], width / scale[1])
        return round(height / ratio), round(width / ratio)

    def call(self, images: Any) -> Any:
        images = ops.convert_to_tensor(images)
        if len(images.shape) == 3:
            images = images[None]
        if len(images.shape) != 4 or images.shape[-1] != len(self.mean):
            raise ValueError(
                f"{self._who()}: `images` must be (height, width, {len(self.mean)}) or "
                f"(batch, height, width, {len(self.mean)}), got shape {tuple(images.shape)}."
            )
        height, width = images.shape[1], images.shape[2]
        if height is None or width is None:
            raise ValueError(
                f"{self._who()}: the image size must be known (the resize depends on it); "
                f"got shape {tuple(images.shape)}. Call the layer on arrays, one size per call."
            )
        images = ops.cast(images, "float32")
        size = self.resized_size(int(height), int(width))
        if size != (height, width):
            images = ops.image.resize(
                images, size, interpolation=_INTERPOLATIONS[self.interpolation], antialias=True
            )
        top = int(round((size[0] - self.image_size[0]) / 2.0))  # torchvision's CenterCrop
        left = int(round((size[1] - self.image_size[1]) / 2.0))
        images = images[:, top : top + self.image_size[0], left : left + self.image_size[1], :]
        mean = ops.convert_to_tensor(np.asarray(self.mean, "float32") * 255.0)
        std = ops.convert_to_tensor(np.asarray(self.std, "float32") * 255.0)
        return (images - mean) / std

    def compute_output_shape(self, input_shape: tuple) -> tuple:
        batch = input_shape[0] if len(input_shape) == 4 else 1
        return (batch, *self.image_size, input_shape[-1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            image_size=list(self.image_size),
            crop_pct=self.crop_pct,
            interpolation=self.interpolation,
            crop_mode=self.crop_mode,
            mean=list(self.mean),
            std=list(self.std),
        )
        return config

    @classmethod
    def from_timm_config(cls, pretrained_cfg: Mapping[str, Any]) -> ImagePreprocessor:
        """The preprocessor a timm ``pretrained_cfg`` describes (a hub ``config.json``'s).

        Args:
            pretrained_cfg: with ``input_size`` ``(channels, height, width)`` and
                optionally ``crop_pct`` (timm's default 0.875), ``interpolation``,
                ``crop_mode``, ``mean`` and ``std`` (ImageNet's by default).

        Raises:
            ValueError: no ``input_size``, or a value the layer does not accept.

        Example:

        >>> cfg = {"input_size": [3, 224, 224], "interpolation": "bicubic",
        ...        "crop_pct": 0.95, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
        >>> ImagePreprocessor.from_timm_config(cfg).resized_size(224, 224)
        (235, 235)
        """
        who = "ImagePreprocessor.from_timm_config"
        size = pretrained_cfg.get("input_size")
        if not isinstance(size, list | tuple) or len(size) != 3:
            raise ValueError(
                f"{who}: `pretrained_cfg` must have 'input_size' [channels, height, width], "
                f"got {excerpt(size)}."
            )
        return cls(
            image_size=tuple(size[1:]),
            crop_pct=pretrained_cfg.get("crop_pct") or 0.875,
            interpolation=pretrained_cfg.get("interpolation") or "bicubic",
            crop_mode=pretrained_cfg.get("crop_mode") or "center",
            mean=tuple(pretrained_cfg.get("mean") or IMAGENET_MEAN),
            std=tuple(pretrained_cfg.get("std") or IMAGENET_STD),
        )

    def _who(self) -> str:
        return f"ImagePreprocessor {self.name!r}"


def _channel_values(who: str, name: str, values: Any) -> tuple[float, ...]:
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        raise TypeError(f"{who}: `{name}` must be a sequence of numbers, got {values!r}.")
    try:
        return tuple(float(v) for v in values)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{who}: `{name}` must be a sequence of numbers, got {values!r}."
        ) from error


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names in timm's (and torchvision's) order.

    From keras-hub's ImageNet utilities (``keras_hub.utils.imagenet_id_to_name``):
    nothing is downloaded.

    >>> names = imagenet_class_names()
    >>> len(names), names[1]
    (1000, 'goldfish')
    """
    keras_hub = quiet_import("keras_hub")

    return [keras_hub.utils.imagenet_id_to_name(index) for index in range(1000)]


# --------------------------------------------------------------------------- preset folders


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
        batch = np.concatenate([np.asarray(self.preprocessor(_image_array(i))) for i in images])
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


def _image_array(image: Any) -> np.ndarray:
    if isinstance(image, str | os.PathLike):
        return keras.utils.img_to_array(keras.utils.load_img(os.fspath(image), color_mode="rgb"))
    return np.asarray(image)


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


def load_preset(source: str | os.PathLike, *, progress: bool = True) -> Preset:
    """A preset: its model, preprocessor, class names and metadata.

    Args:
        source: a preset folder (:func:`save_preset`), ``hf://ORG/REPO``, a timm
            CoAtNet or MaxViT repository on the Hugging Face hub, or a fairseq
            translation archive's URL or file. **A hub source or URL is downloaded**
            (once; see :func:`preset_path`). A translation preset's model gets its
            preprocessor as ``model.preprocessor``, for ``model.translate``.
        progress: show download and conversion progress bars.

    Returns:
        The :class:`Preset`.

    Raises:
        ValueError: a folder that is not a preset, or a hub repository that cannot be
            converted (see :func:`preset_path`).
        ConnectionError: a hub source neither cached nor reachable (offline).

    Example:

    >>> # preset = load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
    >>> # preset.model.output_shape, preset.class_names[0]   # ((None, 1000), 'tench')
    """
    from keras_posenc.zoo.registry import configuration_errors

    who = "load_preset"
    folder = preset_path(source, progress=progress)
    config = _read_json(os.path.join(folder, CONFIG_FILE), who)
    with configuration_errors(os.path.join(folder, CONFIG_FILE), who):
        model = keras.saving.deserialize_keras_object(config)
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"{who}: {os.path.join(folder, CONFIG_FILE)!r} describes a "
            f"{type(model).__name__}, not a keras.Model."
        )
    model.load_weights(os.path.join(folder, WEIGHTS_FILE))
    preprocessor = None
    if os.path.isfile(os.path.join(folder, PREPROCESSOR_FILE)):
        described = _read_json(os.path.join(folder, PREPROCESSOR_FILE), who)
        with configuration_errors(os.path.join(folder, PREPROCESSOR_FILE), who):
            preprocessor = keras.saving.deserialize_keras_object(described)
        if hasattr(preprocessor, "load_assets"):
            preprocessor.load_assets(os.path.join(folder, "assets"))
            # model.translate(texts) after zoo.from_preset(...) finds it here.
            model.preprocessor = preprocessor
    class_names = None
    if os.path.isfile(os.path.join(folder, CLASS_NAMES_FILE)):
        class_names = [str(n) for n in _read_json(os.path.join(folder, CLASS_NAMES_FILE), who)]
    metadata = _read_json(os.path.join(folder, METADATA_FILE), who)
    return Preset(model, preprocessor, class_names, metadata, folder)


def from_preset(source: str | os.PathLike, *, progress: bool = True) -> keras.Model:
    """The model of a preset folder, a timm repository on the hub or a fairseq archive.

    Args:
        source: a preset folder, ``hf://ORG/REPO`` (e.g.
            ``"hf://timm/coatnet_0_rw_224.sw_in1k"``), or a fairseq translation
            archive's URL or file (e.g. ``"https://dl.fbaipublicfiles.com/fairseq/
            models/wmt14.v2.en-fr.fconv-py.tar.bz2"``). **A hub source or URL is
            downloaded and converted on first use**, then read from the cache
            (:func:`preset_path`). A translation model comes with its text pipeline
            (``model.translate(texts)``).
        progress: show download and conversion progress bars.

    Returns:
        The ``keras.Model`` with the preset's weights; it takes preprocessed images
        (:func:`load_preset` gives the preprocessor and class names too).

    Raises:
        ValueError, ConnectionError: see :func:`load_preset`.

    Example:

    >>> from keras_posenc import zoo
    >>> # model = zoo.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
    >>> # model.output_shape   # (None, 1000)
    """
    return load_preset(source, progress=progress).model


# --------------------------------------------------------------------------- the hub


def preset_path(source: str | os.PathLike, *, progress: bool = True) -> str:
    """The preset folder of ``source``; for ``hf://ORG/REPO``, its converted copy in the cache.

    A hub source is converted once: the first call downloads the repository's
    ``config.json`` (timm's pretrained config) and weights (``model.safetensors``, else
    ``pytorch_model.bin``) with ``huggingface_hub``, converts them with the converter of
    the zoo family named by the config's ``architecture`` (timm's ``coatnet_*_rw_224``
    CoAtNets: :func:`~keras_posenc.convert.from_timm_coatnet`), and writes the preset
    (model, :class:`ImagePreprocessor` from the pretrained config, class names: the
    config's ``label_names``, else ImageNet's for 1000 classes) atomically to
    ``cache_folder()/hf/ORG/REPO``. Later calls return that folder without contacting
    the hub; delete it to convert again.

    A fairseq translation archive (its ``http(s)://`` URL, or the archive file) is
    converted once too: the URL is streamed to a scratch folder in the cache
    (:func:`~keras_posenc.zoo.archives.download`: a download with fewer bytes than
    its ``Content-Length`` is refused), the archive read whole and extracted with
    tarfile's ``data`` filter (an archive with an absolute path, ``..`` or a link
    leaving the folder is refused before anything is written), converted by
    :func:`~keras_posenc.convert.from_fairseq_archive` (model, BPE codes,
    dictionaries) and saved to ``cache_folder()/archives/NAME-KEY``, the key being a
    digest of the URL or of the file's bytes. The scratch folder is removed.

    ``HF_ENDPOINT`` (another hub, or a local mirror), ``HF_HUB_OFFLINE`` and
    ``HF_HOME`` / ``HF_HUB_CACHE`` are read when this runs, so setting them after
    ``huggingface_hub`` was imported still counts.

    Args:
        source: a preset folder, ``hf://ORG/REPO``, or a fairseq archive's URL or
            file. **A hub source or URL downloads** on first use.
        progress: show download and conversion progress bars.

    Returns:
        The folder's path.

    Raises:
        FileNotFoundError: a local folder or file that does not exist.
        ValueError: a folder that is not a preset, a malformed ``hf://`` source, a
            repository without a timm config or weights, or whose architecture no
            converter loads; an archive that is damaged, truncated, unsafe (a member
            outside its folder) or not a fairseq fconv archive; a URL answering 404.
        ConnectionError: not cached, and the hub or URL cannot be reached, or
            ``HF_HUB_OFFLINE`` is set.
        OSError: a download that failed (e.g. cut short); nothing is cached.
        ImportError: ``huggingface_hub`` is not installed.

    Example:

    >>> # preset_path("hf://timm/coatnet_0_rw_224.sw_in1k")
    >>> # '/home/me/.cache/keras_posenc/hf/timm/coatnet_0_rw_224.sw_in1k'
    """
    who = "preset_path"
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            f"{who}: `source` must be a folder, 'hf://ORG/REPO' or an archive's URL or file, "
            f"got {type(source).__name__}."
        )
    text = os.fspath(source)
    if text.startswith(HUB_PREFIX):
        return _hub_preset(text, progress)
    if archives.is_url(text):
        return _archive_preset(text, progress)
    if not os.path.exists(text):
        raise FileNotFoundError(
            f"{who}: {text!r} does not exist (a preset folder, hf://ORG/REPO, an archive's "
            "URL or file)."
        )
    if os.path.isfile(text):
        return _archive_preset(text, progress)
    if not _is_preset(text):
        missing = [name for name in _REQUIRED if not os.path.isfile(os.path.join(text, name))]
        raise ValueError(
            f"{who}: {text!r} is not a preset folder: it lacks {', '.join(missing)} "
            "(presets are written by save_preset)."
        )
    return text


def _hub_preset(source: str, progress: bool) -> str:
    repo = source[len(HUB_PREFIX) :].strip("/")
    if not _REPO_PATTERN.match(repo) or ".." in repo:
        raise ValueError(
            f"preset_path: a hub source must be hf://ORG/REPO (letters, digits, '-', '_', "
            f"'.'), got {source!r}."
        )
    target = os.path.join(cache_folder(), "hf", *repo.split("/"))
    if _is_preset(target):
        return target
    model, preprocessor, class_names, metadata = _convert_timm_repo(repo, source, progress)
    _save_converted(model, target, preprocessor, class_names, metadata)
    return target


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


# --------------------------------------------------------------------------- archives


def _archive_target(source: str) -> str:
    """The cache folder of an archive's preset: named after the archive, keyed by the
    URL or, for a file, by its bytes (a file changed in place converts again)."""
    key = source if archives.is_url(source) else archives.file_digest(source)
    return archive_target(source, key)


def _archive_preset(source: str, progress: bool) -> str:
    """The cached preset of a fairseq archive (URL or file): downloaded, extracted and
    converted on first use, in a scratch folder beside the cache that is removed after (and
    by the next run, if this one is killed: archives.scratch_folder)."""
    from keras_posenc.convert.fairseq import from_fairseq_archive

    target = _archive_target(source)
    if _is_preset(target):
        return target
    with archives.scratch_folder(os.path.dirname(target)) as scratch:
        archive = source
        if archives.is_url(source):
            archive = os.path.join(scratch, os.path.basename(target) + ".archive")
            unreachable = reachable(source)
            if unreachable:  # one line, within seconds (_sources.CONNECT_TIMEOUT)
                raise ConnectionError(archive_message(source, unreachable))
            archives.download(source, archive, progress=progress)
        extracted = archives.extract_archive(archive, os.path.join(scratch, "extracted"))
        if progress:
            print(f"converting {source}")
        model, preprocessor, details = from_fairseq_archive(extracted)
        metadata = {
            "source": source,
            "archive_sha256": archives.file_digest(archive),
            "fairseq": details,
        }
        _save_converted(model, target, preprocessor, None, metadata)
    return target


def _hub(who: str) -> Any:
    try:
        hub = importlib.import_module("huggingface_hub")
        # Submodules the package does not import itself (its attributes load lazily).
        importlib.import_module("huggingface_hub.errors")
        importlib.import_module("huggingface_hub.utils")
    except ImportError as error:
        raise ImportError(
            f"{who}: hf:// sources need huggingface_hub; install it with "
            '`pip install "keras-posenc[pretrained]"`.'
        ) from error
    return hub


def _hub_settings() -> dict[str, Any]:
    """huggingface_hub's settings, read now: the library reads its environment variables
    once, when imported, so values set later would otherwise be ignored."""
    cache = os.environ.get("HF_HUB_CACHE")
    if not cache and os.environ.get("HF_HOME"):
        cache = os.path.join(os.environ["HF_HOME"], "hub")
    offline = hub_offline()
    return {
        "endpoint": os.environ.get("HF_ENDPOINT") or None,
        "cache_dir": cache or None,
        "local_files_only": offline,
    }


def _download(repo: str, filename: str, source: str, settings: dict) -> str:
    hub = _hub("preset_path")
    errors = hub.errors
    try:
        options = {key: value for key, value in settings.items() if key != "unreachable"}
        return hub.hf_hub_download(repo, filename, **options)
    except errors.LocalEntryNotFoundError as error:  # offline, or the hub unreachable
        reason = settings.get("unreachable") or (
            "HF_HUB_OFFLINE is set"
            if settings["local_files_only"]
            else f"the hub ({settings['endpoint'] or 'huggingface.co'}) cannot be reached"
        )
        cache = settings["cache_dir"] or hub_cache()
        raise ConnectionError(hub_message(source, filename, cache, reason)) from error
    except errors.RepositoryNotFoundError as error:
        raise ValueError(f"preset_path: {source}: no such repository on the hub.") from error
    except errors.EntryNotFoundError as error:
        raise ValueError(f"preset_path: {source} has no file {filename!r}.") from error
    except OSError as error:  # e.g. huggingface_hub's size check of a download cut short
        raise OSError(
            f"preset_path: downloading {filename} of {source} failed; nothing was cached: "
            f"{excerpt(str(error))}"
        ) from error


def _weights_file(repo: str, source: str, settings: dict) -> str:
    """timm's weights file of the repository: safetensors if it has them."""
    candidates = ("model.safetensors", "pytorch_model.bin")
    if settings["local_files_only"]:  # no listing offline: whichever is cached
        for name in candidates[:-1]:
            try:
                return _download(repo, name, source, settings)
            except ConnectionError:
                pass
        return _download(repo, candidates[-1], source, settings)
    hub = _hub("preset_path")
    try:
        files = hub.HfApi(endpoint=settings["endpoint"]).list_repo_files(repo)
    except hub.errors.RepositoryNotFoundError as error:
        raise ValueError(f"preset_path: {source}: no such repository on the hub.") from error
    except Exception:  # noqa: BLE001  (unreachable: httpx's errors are no OSError)
        # The config came from the cache: take whichever weights are cached, or say offline.
        return _weights_file(repo, source, {**settings, "local_files_only": True})
    name = next((n for n in candidates if n in files), None)
    if name is None:
        raise ValueError(
            f"preset_path: {source} has no timm weights ({' or '.join(candidates)}); its "
            f"files: {excerpt(sorted(files))}."
        )
    return _download(repo, name, source, settings)


def _convert_timm_repo(repo: str, source: str, progress: bool) -> tuple:
    """(model, preprocessor, class names, metadata) of a timm hub repository.

    The config is read and checked before the weights are downloaded, so a repository
    that cannot be converted costs one small file.
    """
    from keras_posenc.zoo.registry import get_spec

    settings = _hub_settings()
    if not settings["local_files_only"]:
        # Without a network, huggingface_hub retries for over a minute before it reads its
        # cache (issue #57): a connection that cannot open within seconds reads the cache now.
        endpoint = settings["endpoint"] or "https://huggingface.co"
        unreachable = reachable(endpoint)
        if unreachable:
            settings["local_files_only"] = True
            settings["unreachable"] = f"the hub ({endpoint}) cannot be reached: {unreachable}"
    if not progress:  # huggingface_hub's own bar class, switched off (a partial is no class)
        settings["tqdm_class"] = functools.partial(_hub("preset_path").utils.tqdm, disable=True)
    config = _read_json(_download(repo, "config.json", source, settings), "preset_path")
    if not isinstance(config, dict) or not isinstance(config.get("architecture"), str):
        raise ValueError(
            f"preset_path: {source}'s config.json is not a timm config (it has no 'architecture')."
        )
    pretrained = config.get("pretrained_cfg") or config
    architecture = config["architecture"]
    try:
        spec = get_spec(architecture)
    except ValueError as error:
        raise ValueError(
            f"preset_path: {source} holds a timm {architecture!r}, which is not a zoo "
            f"model; loadable: {', '.join(_timm_loadable())}."
        ) from error
    if spec.family not in TIMM_CONVERTERS:
        raise ValueError(
            f"preset_path: {source} holds a timm {architecture!r} (zoo family "
            f"{spec.family!r}), for which no timm converter exists; loadable: "
            f"{', '.join(_timm_loadable())}."
        )
    model_args = dict(config.get("model_args") or {})
    unsupported = sorted(set(model_args) - {"img_size", "num_classes"})
    if unsupported:
        raise ValueError(
            f"preset_path: {source}'s config.json has model_args {unsupported} that change "
            f"the {architecture!r} architecture; only img_size and num_classes are supported."
        )
    # The size the weights were trained at (timm's pretrained input_size) wins.
    size = pretrained.get("input_size") or [3, *_pair(model_args.get("img_size", 224))]
    preprocessor = ImagePreprocessor.from_timm_config({**pretrained, "input_size": size})
    weights = _weights_file(repo, source, settings)

    bar = keras.utils.Progbar(3, unit_name="step") if progress else None
    if bar is not None:
        print(f"converting {source} ({architecture})")
    build = {**spec.arguments(), "input_shape": (*preprocessor.image_size, int(size[0]))}
    module, function = TIMM_CONVERTERS[spec.family].split(":")
    converter = getattr(importlib.import_module(module), function)
    if bar is not None:
        bar.update(1)
    model = converter(weights, config=build)
    if bar is not None:
        bar.update(2)
    classes = int(model.output_shape[-1])
    class_names = pretrained.get("label_names") or config.get("label_names")
    if class_names is None and classes == 1000:
        class_names = imagenet_class_names()
    if bar is not None:
        bar.update(3)
    metadata = {
        "source": source,
        "architecture": architecture,
        "converted_from": os.path.basename(weights),
        "commit": _commit_of(weights),
        "pretrained_cfg": pretrained,
    }
    return model, preprocessor, class_names, metadata


def _pair(size: Any) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))


def _commit_of(path: str) -> str | None:
    """The hub commit a cached file came from (its snapshot folder's name)."""
    parent = os.path.basename(os.path.dirname(path))
    return parent if re.fullmatch(r"[0-9a-f]{40}", parent) else None


def _timm_loadable() -> list[str]:
    """The zoo's names of timm's trained CoAtNets and MaxViTs (the zoo's paper
    configurations are not timm's names)."""
    from keras_posenc.zoo import coatnet, maxvit

    return sorted([*coatnet.TIMM_CONFIGS, *maxvit.TIMM_CONFIGS])


def remove_cached(source: str) -> bool:
    """Deletes the converted copy of a hub source or archive (URL or file) from the cache;
    True if there was one.

    >>> remove_cached("hf://nobody/nothing")
    False
    """
    if isinstance(source, str) and (archives.is_url(source) or os.path.isfile(source)):
        target = _archive_target(source)
    else:
        repo = source[len(HUB_PREFIX) :].strip("/") if source.startswith(HUB_PREFIX) else ""
        if not _REPO_PATTERN.match(repo) or ".." in repo:
            raise ValueError(
                "remove_cached: `source` must be hf://ORG/REPO or an archive's URL or file, "
                f"got {source!r}."
            )
        target = os.path.join(cache_folder(), "hf", *repo.split("/"))
    if not os.path.exists(target):
        return False
    shutil.rmtree(target)
    return True
