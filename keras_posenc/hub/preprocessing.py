"""timm's image preprocessing as a Keras layer, and ImageNet's class names.

The :class:`ImagePreprocessor` of a hub preset is built from the repository's
pretrained config (:mod:`keras_posenc.hub.timm`) and saved in the preset folder
(:mod:`keras_posenc.hub.folder`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc._quiet import quiet_import
from keras_posenc.layers._checks import check_choice, check_ints, check_positive_number, excerpt

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "ImagePreprocessor", "imagenet_class_names"]

# timm's interpolation names -> keras.ops.image.resize's (both antialias when shrinking).
_INTERPOLATIONS = {"bicubic": "bicubic", "bilinear": "bilinear", "nearest": "nearest"}
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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
