"""What the zoo's image families share as keras-hub classes: a backbone with
``pyramid_outputs``, an ``ImageConverter`` with our presets' preprocessing, and an
``ImageClassifier`` whose head is the family's own head code.

The family classes (:mod:`keras_posenc.models.image`) set which backbone, head and
converter go together (keras-hub's ``backbone_cls`` / ``preprocessor_cls`` /
``image_converter_cls``); keras-hub's ``from_preset`` finds them by those.

Examples:

    >>> import keras, numpy as np
    >>> from keras_posenc.models.image_base import ZooImageConverter
    >>> converter = ZooImageConverter(image_size=(4, 4), scale=1 / 127.5, offset=-1.0)
    >>> out = keras.ops.convert_to_numpy(converter(np.full((8, 8, 3), 255, "uint8")))
    >>> out.shape, float(out.max())
    ((4, 4, 3), 1.0)
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import keras
import keras_hub
import numpy as np

from keras_posenc.hub.preprocessing import ImagePreprocessor
from keras_posenc.layers._checks import check_positive_number
from keras_posenc.models._backbone import ZooBackbone, copy_weights, dtype_policy
from keras_posenc.zoo.registry import create, create_arguments, get_spec

__all__ = [
    "ZooImageBackbone",
    "ZooImageClassifier",
    "ZooImageClassifierPreprocessor",
    "ZooImageConverter",
]


class ZooImageBackbone(ZooBackbone):
    """A zoo image family's network as a keras-hub image backbone: its output the last
    feature map, its ``pyramid_outputs`` (as keras-hub's ``FeaturePyramidBackbone``'s) the
    stage outputs by level (``"P1"``, ``"P2"``, ...: level ``k`` at stride ``2 ** k``),
    those of the zoo's feature pyramid (keras_posenc/zoo/features.py).

    Not a ``FeaturePyramidBackbone`` subclass: Keras rebases the classes of a functional
    model's subclass (``keras.src.models.model.inject_functional_model_class``), which a
    second keras-hub base makes a cycle; ``keras.Model(backbone.inputs,
    backbone.pyramid_outputs)`` is the features model all the same."""

    def __init__(self, **arguments: Any) -> None:
        super().__init__(**arguments)
        self._levels = self.pyramid_of(self.network)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_levels":  # KerasTensors of the graph, nothing for Keras to track
            object.__setattr__(self, name, value)
            return
        super().__setattr__(name, value)

    @property
    def pyramid_outputs(self) -> dict[str, Any]:
        """The stage outputs by level, ``{"P1": KerasTensor, ...}``."""
        return dict(self._levels)

    def pyramid_of(self, network: keras.Model) -> dict[str, Any]:
        """The levels of the built network (a ``zoo.FeaturePyramidModel``'s)."""
        return dict(network.pyramid_outputs)


@keras.saving.register_keras_serializable(package="keras_posenc")
class ZooImageConverter(keras_hub.layers.ImageConverter):
    """keras-hub's ``ImageConverter`` (resize, then ``pixels * scale + offset``) with the
    center crop of timm's evaluation transform, which our presets use
    (:class:`~keras_posenc.hub.ImagePreprocessor`).

    Args:
        crop_pct: None (keras-hub's resize: the largest region of the output's aspect
            ratio, with ``crop_to_aspect_ratio``), or the fraction of that region (of the
            whole image without ``crop_to_aspect_ratio``) kept around its center before
            the resize, as timm's ``crop_pct``: timm resizes, then crops; cropping first
            keeps the same region of the image.
        **kwargs: keras-hub's ``ImageConverter``'s (``image_size``, ``scale``,
            ``offset``, ``interpolation``, ``antialias``, ``crop_to_aspect_ratio``, ...).

    Raises:
        ValueError: ``crop_pct`` outside (0, 1], or (when called) images whose height
            and width are not known.
    """

    def __init__(self, *, crop_pct: float | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        who = type(self).__name__
        if crop_pct is not None:
            crop_pct = check_positive_number(who, "crop_pct", crop_pct)
            if crop_pct > 1:
                raise ValueError(f"{who}: `crop_pct` must be in (0, 1], got {crop_pct!r}.")
        self.crop_pct = crop_pct

    @classmethod
    def from_image_preprocessor(
        cls, preprocessor: ImagePreprocessor, **kwargs: Any
    ) -> ZooImageConverter:
        """The converter of a preset's :class:`~keras_posenc.hub.ImagePreprocessor`: its
        size, crop, interpolation and ``(pixels / 255 - mean) / std`` as a scale and an
        offset (``scale = 1 / (255 std)``, ``offset = -mean / std``).

        Raises:
            TypeError: ``preprocessor`` is no ``ImagePreprocessor``.
        """
        if not isinstance(preprocessor, ImagePreprocessor):
            raise TypeError(
                f"{cls.__name__}.from_image_preprocessor: `preprocessor` must be an "
                f"ImagePreprocessor, got {type(preprocessor).__name__}."
            )
        squash = preprocessor.crop_mode == "squash"
        arguments = {
            "image_size": tuple(preprocessor.image_size),
            "scale": [1.0 / (255.0 * s) for s in preprocessor.std],
            "offset": [-m / s for m, s in zip(preprocessor.mean, preprocessor.std)],
            "interpolation": preprocessor.interpolation,
            "antialias": True,  # keras.ops.image.resize's, as ImagePreprocessor's
            "crop_to_aspect_ratio": not squash,
            "crop_pct": preprocessor.crop_pct,
        }
        return cls(**{**arguments, **kwargs})

    def _center_crop(self, images: Any) -> Any:
        shape = tuple(images.shape)
        height, width = shape[-3], shape[-2]
        if len(shape) not in (3, 4) or height is None or width is None:
            raise ValueError(
                f"{type(self).__name__}: with `crop_pct` the images' height and width "
                f"must be known, (height, width, channels) or a batch of them; got shape "
                f"{shape}."
            )
        crop_height, crop_width = float(height), float(width)
        if self.crop_to_aspect_ratio:  # the largest region of the output's aspect ratio
            target = self.image_size
            ratio = min(height / target[0], width / target[1])
            crop_height, crop_width = target[0] * ratio, target[1] * ratio
        crop_height = max(1, min(height, round(crop_height * self.crop_pct)))
        crop_width = max(1, min(width, round(crop_width * self.crop_pct)))
        top, left = (height - crop_height) // 2, (width - crop_width) // 2
        return images[..., top : top + crop_height, left : left + crop_width, :]

    def _call_python(self, inputs: Any) -> Any:
        if self.crop_pct is None or self.image_size is None or isinstance(inputs, dict):
            return super()._call_python(inputs)
        if isinstance(inputs, list | tuple):
            shapes = {np.shape(x) for x in inputs}
            if len(shapes) > 1:  # images of several sizes: one at a time
                return type(inputs)(self._call_python(x) for x in inputs)
            inputs = np.asarray(inputs)
        return super()._call_python(self._center_crop(inputs))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "crop_pct": self.crop_pct}


@keras.saving.register_keras_serializable(package="keras_posenc")
class ZooImageClassifierPreprocessor(keras_hub.models.ImageClassifierPreprocessor):
    """keras-hub's ``ImageClassifierPreprocessor`` of a zoo family (its subclasses set
    ``backbone_cls`` and ``image_converter_cls``)."""


class ZooImageClassifier(keras_hub.models.ImageClassifier):
    """keras-hub's ``ImageClassifier`` over a zoo image backbone, whose head is the zoo
    family's own head (the layers ``zoo.create`` builds after the backbone, with their
    names), so a classifier built from a named configuration and given the zoo model's
    weights gives the zoo model's outputs.

    A family's subclass sets ``backbone_cls``, ``preprocessor_cls`` and :meth:`head`.

    Args:
        backbone: the family's backbone (``backbone_cls``).
        num_classes: the classes.
        preprocessor: the family's ``ImageClassifierPreprocessor``, or None.
        **kwargs: the head's arguments (the backbone class's ``head_arguments``, with
            the defaults of the family's zoo builder), and ``keras.Model``'s (``name``)
            and keras-hub's ``compile``.

    Raises:
        TypeError: a backbone of another class.
        ValueError: a head argument the family does not have, or one its head refuses.
    """

    backbone_cls: ClassVar[type[ZooBackbone] | None] = None

    def __init__(
        self, backbone: ZooBackbone, num_classes: int = 1000, preprocessor: Any = None, **kwargs
    ) -> None:
        who = type(self).__name__
        if self.backbone_cls is None or not isinstance(backbone, self.backbone_cls):
            expected = getattr(self.backbone_cls, "__name__", "a family's backbone")
            raise TypeError(
                f"{who}: `backbone` must be a {expected}, got {type(backbone).__name__}."
            )
        head = {**self.head_defaults(), "num_classes": num_classes}
        for key in list(kwargs):
            if key in head:
                head[key] = kwargs.pop(key)
        compile_now = kwargs.pop("compile", True)
        unknown = sorted(set(kwargs) - {"name", "trainable", "dtype"})
        if unknown:
            raise ValueError(
                f"{who}: unknown argument(s) {', '.join(map(repr, unknown))}; the head takes "
                f"{sorted(head)}, and keras.Model's name, trainable and dtype."
            )
        self.backbone = backbone
        self.preprocessor = preprocessor
        inputs = backbone.input
        with dtype_policy(backbone.dtype_policy):  # keras-hub's head_dtype: the backbone's
            outputs = self.head(backbone(inputs), backbone, head)
        keras_hub.models.Task.__init__(
            self, inputs=inputs, outputs=outputs, compile=False, **kwargs
        )
        self.head_config = head
        self.num_classes = head["num_classes"]
        # keras-hub's ImageClassifier.compile reads it (logits or probabilities).
        self.activation = head.get("classifier_activation")
        if compile_now:
            self.compile()

    @classmethod
    def head_defaults(cls) -> dict[str, Any]:
        """The head's arguments with the family's zoo builder's defaults."""
        builder = cls.backbone_cls.builder
        parameters = inspect.signature(builder).parameters
        return {
            name: parameters[name].default
            for name in cls.backbone_cls.head_arguments
            if name in parameters
        }

    @classmethod
    def head(cls, features: Any, backbone: ZooBackbone, options: Mapping[str, Any]) -> Any:
        """The family's head on the backbone's ``features``."""
        raise NotImplementedError(f"{cls.__name__}: a family's classifier sets `head`.")

    def get_config(self) -> dict[str, Any]:
        return {**keras_hub.models.Task.get_config(self), **self.head_config}

    @classmethod
    def from_zoo(
        cls,
        name: str,
        weights: str | os.PathLike | None = None,
        preprocessor: Any = None,
        **overrides: Any,
    ) -> ZooImageClassifier:
        """The classifier of the zoo's named configuration ``name``, with the weights
        ``zoo.create(name, weights=weights, **overrides)`` loads (a shipped tag, a
        ``.weights.h5`` or ``.keras`` file, a preset source) or fresh ones.

        Raises:
            ValueError: what ``zoo.create`` raises; a configuration without a classifier
                (``include_top=False``, ``features=True``, no ``num_classes``).
        """
        backbone_cls = cls.backbone_cls
        family = get_spec(name).family
        if family != backbone_cls.family:
            raise ValueError(
                f"{cls.__name__}.from_zoo: {name!r} is a {family!r} model; this classifier "
                f"builds the {backbone_cls.family!r} family's."
            )
        arguments, _ = create_arguments(name, weights, **overrides)
        backbone_arguments, head = backbone_cls.split_arguments(arguments)
        cls.check_classifier(name, head)
        backbone = backbone_cls(**backbone_arguments)
        task = cls(backbone, preprocessor=preprocessor, **head)
        if weights is not None:
            model = create(name, weights=weights, **overrides)
            copy_weights(model, task, f"{cls.__name__}.from_zoo")
        return task

    @classmethod
    def check_classifier(cls, name: str, head: Mapping[str, Any]) -> None:
        """Refuses a configuration that builds no classifier."""
        if not head.get("include_top", True) or head.get("features", False):
            raise ValueError(
                f"{cls.__name__}.from_zoo({name!r}): the configuration builds no classifier "
                f"(include_top={head.get('include_top')!r}, features="
                f"{head.get('features')!r}); the backbone alone is "
                f"{cls.backbone_cls.__name__}.from_zoo({name!r})."
            )

    def to_zoo(self) -> keras.Model:
        """The zoo's model of this configuration (what ``zoo.create`` builds: the family's
        builder on the backbone's and the head's arguments) with this classifier's weights.
        """
        builder = self.backbone_cls.builder
        model = builder(**self.backbone.network_config, **self.head_config, name=self.backbone.name)
        copy_weights(self, model, f"{type(self).__name__}.to_zoo")
        return model
