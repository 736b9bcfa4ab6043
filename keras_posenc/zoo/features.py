"""Feature pyramids: the zoo's image backbones as keras-hub's and timm's feature extractors.

A :class:`FeaturePyramidModel` is a functional model that also says which of its tensors
are its stage outputs, in keras-hub's convention (``FeaturePyramidBackbone``):

- ``pyramid_outputs``: a dict of stage outputs by level, ``"P1"``, ``"P2"``, ..., where
  level ``k`` has stride ``2 ** k`` (its map is ``2 ** k`` times smaller than the image,
  rounded as the model rounds); ``keras.Model(model.inputs, model.pyramid_outputs)`` is
  a features model;
- ``feature_info``: each level's ``level``, ``stride``, ``channels`` and ``name`` (the
  layer whose output it is), as timm's ``feature_info`` lists ``reduction``, ``num_chs``
  and ``module``.

CoAtNet, MaxViT and MaxxViT (CoAtNeXt) models are feature pyramids, whatever their head:
levels P1..P5 are their stages S0..S4 (the stem at stride 2, then one stage per halving). With
``features=True`` their outputs are still the list of those five maps. Two functions make
the features-only models, as timm's ``features_only=True`` and ``out_indices`` do:

- :func:`create_features`: a zoo model by name, with the weights ``zoo.create`` takes
  (a classifier's: the head is dropped), keeping the chosen ``levels``; also PosENet's
  ``keras.applications`` backbones, ``"vgg16"`` and ``"resnet50"``;
- :func:`feature_pyramid`: any image model (``keras.applications``, a model of one's own)
  and the layers to tap, the strides read from the shapes.

A ``.keras`` file keeps ``feature_info`` (the model's configuration) and so
``pyramid_outputs``. The models take images of any size where they do (a CoAtNet built
with ``input_shape=(None, None, 3)``; a MaxViT in whole windows, and one built with
``pad_to_multiple=True`` gives the maps of the zero-padded image, whose sides are those of
the image rounded up to whole windows).

Examples:

    >>> import numpy as np
    >>> from keras_posenc import zoo
    >>> tiny = dict(blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16)
    >>> backbone = zoo.create_features(
    ...     "coatnet_0", levels=("P3", "P4", "P5"), input_shape=(64, 96, 3), **tiny)
    >>> [(i["level"], i["stride"], i["channels"]) for i in backbone.feature_info]
    [('P3', 8, 16), ('P4', 16, 32), ('P5', 32, 32)]
    >>> maps = backbone.predict(np.zeros((1, 64, 96, 3), "float32"), verbose=0)
    >>> {level: m.shape[1:3] for level, m in maps.items()}
    {'P3': (8, 12), 'P4': (4, 6), 'P5': (2, 3)}
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import keras

from keras_posenc.layers._checks import excerpt
from keras_posenc.zoo.adapt import ZooFunctional
from keras_posenc.zoo.posenet import KNOWN_TAP_LAYERS, default_tap_layers, posenet_backbone
from keras_posenc.zoo.registry import create, get_spec

__all__ = [
    "FeaturePyramidModel",
    "create_features",
    "feature_pyramid",
    "stage_pyramid",
]

_INFO_KEYS = ("level", "stride", "channels", "name")
#: PosENet's backbones that are no zoo names (``zoo.posenet.BACKBONES``), from
#: ``keras.applications`` without the top: their stage outputs (``KNOWN_TAP_LAYERS``).
APPLICATIONS = ("vgg16", "resnet50")


def _level(stride: int) -> str:
    return f"P{int(math.log2(stride))}"


def _check_info(who: str, feature_info: Any) -> list[dict]:
    """``feature_info`` as a list of plain dicts, each with a power-of-two ``stride``, its
    ``level`` (``"P{log2(stride)}"``), ``channels`` and a layer ``name``."""
    if isinstance(feature_info, Mapping | str) or not isinstance(feature_info, Sequence):
        raise TypeError(
            f"{who}: `feature_info` must be a list of dicts with keys {list(_INFO_KEYS)}; "
            f"received {type(feature_info).__name__}"
        )
    entries = []
    for entry in feature_info:
        if not isinstance(entry, Mapping) or not {"stride", "channels", "name"} <= set(entry):
            raise ValueError(
                f"{who}: each entry of `feature_info` must be a dict with keys "
                f"{list(_INFO_KEYS)} ('level' may be left out); received {excerpt(entry)}"
            )
        stride, channels = entry["stride"], entry["channels"]
        valid = all(isinstance(v, int) and not isinstance(v, bool) for v in (stride, channels))
        if not valid or stride < 1 or stride & (stride - 1) or channels < 1:
            raise ValueError(
                f"{who}: a level's `stride` must be a power of two and its `channels` a "
                f"positive int; received {dict(entry)}"
            )
        level = entry.get("level", _level(stride))
        if level != _level(stride):
            raise ValueError(
                f"{who}: level {level!r} has stride {stride}; level 'Pk' has stride 2 ** k "
                f"({_level(stride)!r} for stride {stride})"
            )
        entries.append(
            {"level": level, "stride": stride, "channels": channels, "name": str(entry["name"])}
        )
    strides = [entry["stride"] for entry in entries]
    if not entries or strides != sorted(set(strides)):
        raise ValueError(
            f"{who}: `feature_info` must list one or more levels by increasing stride, each "
            f"once; received strides {strides}"
        )
    return entries


def _fits(side: int | None, level_side: int | None, stride: int) -> bool:
    """Whether a map of ``level_side`` cells is ``side / stride``, rounded either way."""
    if side is None or level_side is None:
        return True
    return level_side in (side // stride, -(-side // stride))


@keras.saving.register_keras_serializable(package="keras_posenc")
class FeaturePyramidModel(ZooFunctional):
    """A functional zoo model with ``pyramid_outputs`` and ``feature_info``.

    Built as a functional model, ``FeaturePyramidModel(inputs, outputs,
    feature_info=...)``; its outputs are whatever the graph ends in (logits, the list of
    stage maps, or the dict of the levels themselves), and ``feature_info`` names the
    layers whose outputs are its levels. The builders of CoAtNet, MaxViT and MaxxViT return one
    (:func:`stage_pyramid`); :func:`create_features` and :func:`feature_pyramid` make the
    features-only ones.

    Args:
        *args: ``inputs`` and ``outputs``, as ``keras.Model``'s.
        feature_info: the levels, by increasing stride: dicts with ``stride`` (a power
            of two), ``channels``, ``name`` (a layer of the model, called once, whose
            output is the level) and, optionally, ``level`` (``"P{log2(stride)}"``).
            Checked against the graph: the layer's channels, and its height and width
            against the image's divided by the stride (rounded either way) where both
            are known.
        **kwargs: ``keras.Model``'s (``name``, ``trainable``).

    Attributes:
        pyramid_outputs: ``{level: KerasTensor}``, keras-hub's ``pyramid_outputs``.
        feature_info: a copy of the checked levels (dicts with ``level``, ``stride``,
            ``channels`` and ``name``).

    Raises:
        ValueError: for ``feature_info`` that is not by increasing powers of two, names a
            layer the model does not have or one called more than once, or disagrees with
            the layer's channels or size.
        TypeError: for ``feature_info`` that is no list of dicts.

    Examples:

        >>> import keras
        >>> from keras_posenc.zoo.features import FeaturePyramidModel
        >>> images = keras.Input((32, 32, 3))
        >>> x = keras.layers.Conv2D(8, 3, strides=2, padding="same", name="down1")(images)
        >>> y = keras.layers.Conv2D(16, 3, strides=2, padding="same", name="down2")(x)
        >>> model = FeaturePyramidModel(images, y, feature_info=[
        ...     {"stride": 2, "channels": 8, "name": "down1"},
        ...     {"stride": 4, "channels": 16, "name": "down2"}])
        >>> {level: tuple(t.shape) for level, t in model.pyramid_outputs.items()}
        {'P1': (None, 16, 16, 8), 'P2': (None, 8, 8, 16)}
    """

    def __init__(self, *args: Any, feature_info: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        who = f"FeaturePyramidModel({self.name!r})"
        info = _check_info(who, feature_info)
        names = {layer.name for layer in self.layers}
        image = tuple(self.inputs[0].shape)
        pyramid = {}
        for entry in info:
            if entry["name"] not in names:
                raise ValueError(
                    f"{who}: `feature_info` names layer {entry['name']!r}, which the model "
                    f"does not have; its layers: {excerpt(sorted(names))}"
                )
            try:
                tensor = self.get_layer(entry["name"]).output
            except (AttributeError, ValueError) as error:
                raise ValueError(
                    f"{who}: layer {entry['name']!r} has no one output (called more than "
                    f"once?), so it cannot be a level: {error}"
                ) from error
            shape = tuple(tensor.shape)
            fits = len(shape) == 4 and len(image) == 4 and shape[-1] == entry["channels"]
            if not fits or not all(
                _fits(side, level_side, entry["stride"])
                for side, level_side in zip(image[1:3], shape[1:3])
            ):
                raise ValueError(
                    f"{who}: level {entry['level']} says stride {entry['stride']} and "
                    f"{entry['channels']} channels, but layer {entry['name']!r} gives "
                    f"{shape} for images of shape {image}"
                )
            pyramid[entry["level"]] = tensor
        self._feature_levels = tuple(info)
        self._pyramid_outputs = pyramid

    @property
    def pyramid_outputs(self) -> dict[str, Any]:
        """The stage outputs by level: ``{"P1": KerasTensor, ...}`` (keras-hub's)."""
        return dict(self._pyramid_outputs)

    @property
    def feature_info(self) -> list[dict]:
        """Each level's ``level``, ``stride``, ``channels`` and ``name``, by stride."""
        return [dict(entry) for entry in self._feature_levels]

    def get_config(self) -> dict:
        return {**super().get_config(), "feature_info": self.feature_info}


def stage_pyramid(
    inputs: Any, outputs: Any, names: Sequence[str], channels: Sequence[int], name: str
) -> FeaturePyramidModel:
    """The model of a builder whose stages halve the resolution one after another: the
    layers ``names`` (first at stride 2) are levels P1, P2, ... with ``channels``.

    What ``build_coatnet`` and ``build_maxvit`` return (their S0..S4 are P1..P5).
    """
    info = [
        {"stride": 2 ** (index + 1), "channels": int(width), "name": layer}
        for index, (layer, width) in enumerate(zip(names, channels, strict=True))
    ]
    return FeaturePyramidModel(inputs, outputs, feature_info=info, name=name)


def _select(who: str, info: list[dict], levels: Any) -> list[dict]:
    """The entries of ``info`` at ``levels`` (level names; None: all), by stride."""
    if levels is None:
        return info
    available = [entry["level"] for entry in info]
    if isinstance(levels, str) or not isinstance(levels, Sequence) or not levels:
        raise TypeError(
            f"{who}: `levels` must be a non-empty list of level names such as "
            f"{available}; received {levels!r}"
        )
    unknown = [level for level in levels if level not in available]
    if unknown or len(set(levels)) != len(levels):
        raise ValueError(
            f"{who}: `levels` must be distinct names of the model's levels {available}; "
            f"received {list(levels)}"
        )
    return [entry for entry in info if entry["level"] in levels]


def _pruned(model: keras.Model, info: list[dict], name: str | None) -> FeaturePyramidModel:
    """A features-only model of ``model``'s layers: its outputs the dict of ``info``'s levels."""
    outputs = {entry["level"]: model.get_layer(entry["name"]).output for entry in info}
    return FeaturePyramidModel(
        model.inputs, outputs, feature_info=info, name=name or f"{model.name}_features"
    )


def feature_pyramid(
    model: keras.Model,
    tap_layers: Sequence[str] | None = None,
    levels: Sequence[str] | None = None,
    name: str | None = None,
) -> FeaturePyramidModel:
    """A features-only :class:`FeaturePyramidModel` of ``model``'s layers (its weights).

    Its outputs are the dict of its levels (``pyramid_outputs``). Each tapped layer's
    stride is the image's height over the layer's, rounded to a power of two, and must
    agree with the width's: the model's input size must be known (build
    ``keras.applications`` models with ``input_shape``), unless ``model`` is already a
    :class:`FeaturePyramidModel`, whose ``feature_info`` is used.

    Args:
        model: a ``keras.Model`` with one image input, channels last.
        tap_layers: the layers whose outputs are the levels, distinct strides; None: the
            model's levels if it is a :class:`FeaturePyramidModel`, else PosENet's
            default taps (``zoo.posenet.default_tap_layers``: ``keras.applications``'
            VGG and ResNet stages, the outputs of a multi-output model).
        levels: the level names to keep (``"P3"``, ...); None keeps every one.
        name: the model's name; default ``"{model.name}_features"``.

    Returns:
        The :class:`FeaturePyramidModel`.

    Raises:
        ValueError: a layer the model does not have, sizes that are unknown or give no
            power-of-two stride, two layers at one stride, or unknown ``levels``.

    Examples:

        >>> import keras
        >>> from keras_posenc.zoo.features import feature_pyramid
        >>> vgg = keras.applications.VGG16(weights=None, include_top=False,
        ...                                input_shape=(64, 96, 3))
        >>> pyramid = feature_pyramid(vgg, levels=["P2", "P3", "P4"])
        >>> [(i["name"], i["stride"], i["channels"]) for i in pyramid.feature_info]
        [('block3_conv3', 4, 256), ('block4_conv3', 8, 512), ('block5_conv3', 16, 512)]
    """
    who = "feature_pyramid"
    if not isinstance(model, keras.Model) or len(model.inputs) != 1:
        raise ValueError(
            f"{who}: `model` must be a keras.Model with one image input; received "
            f"{type(model).__name__}"
        )
    if tap_layers is None and isinstance(model, FeaturePyramidModel):
        return _pruned(model, _select(who, model.feature_info, levels), name)
    names = default_tap_layers(model) if tap_layers is None else tap_layers
    if isinstance(names, str) or not names:
        raise ValueError(
            f"{who}: `tap_layers` must be a non-empty list of layer names; received {tap_layers!r}"
        )
    available = {layer.name for layer in model.layers}
    image = tuple(model.inputs[0].shape)
    info = []
    for layer_name in names:
        if layer_name not in available:
            raise ValueError(
                f"{who}: model {model.name!r} has no layer {layer_name!r}; its layers: "
                f"{excerpt(sorted(available))}"
            )
        shape = tuple(model.get_layer(layer_name).output.shape)
        if len(image) != 4 or len(shape) != 4 or None in (*image[1:3], *shape[1:3]):
            raise ValueError(
                f"{who}: the stride of layer {layer_name!r} is read from the shapes, which "
                f"must be known: images {image}, the layer's output {shape}. Build the "
                "model with a known input size."
            )
        level = round(math.log2(image[1] / shape[1]))
        info.append({"stride": 2**level, "channels": shape[-1], "name": layer_name})
    info = _check_info(who, sorted(info, key=lambda entry: entry["stride"]))
    return _pruned(model, _select(who, info, levels), name)


def create_features(
    name: str,
    levels: Sequence[str] | None = None,
    weights: str | os.PathLike | None = None,
    **overrides: Any,
) -> FeaturePyramidModel:
    """A features-only model by name: timm's ``features_only=True`` with ``out_indices``.

    ``zoo.create(name, weights=weights, **overrides)`` (a classifier, unless the
    overrides say otherwise, so a classifier's weights file or preset loads), with only the
    layers up to the chosen levels kept: the outputs are the dict ``{level: map}``. For
    PosENet's backbones that are no zoo names, ``"vgg16"`` and ``"resnet50"``, the
    ``keras.applications`` model without its top (its ``weights``: None, ``"imagenet"``,
    which downloads them, or a file) tapped at its stages (``zoo.posenet.KNOWN_TAP_LAYERS``).

    Args:
        name: a zoo name of the CoAtNet or MaxViT families (P1..P5 at strides 2..32), or
            ``"vgg16"`` (P0..P4) or ``"resnet50"`` (P2..P5).
        levels: the level names to keep, such as ``("P3", "P4", "P5")``; None keeps all.
        weights: what ``zoo.create`` takes (a ``.weights.h5`` or ``.keras`` file of the
            model, a preset, ``hf://...``); for ``"vgg16"`` and ``"resnet50"``,
            ``keras.applications``' ``weights``.
        **overrides: configuration fields, as ``zoo.create`` takes them
            (``input_shape``, ``blocks``, ...); for ``"vgg16"`` and ``"resnet50"`` only
            ``input_shape`` (default 224 x 224 x 3).

    Returns:
        The :class:`FeaturePyramidModel`, named ``"{model name}_features"``.

    Raises:
        ValueError: a model with no feature pyramid, unknown ``levels``, and what
            ``zoo.create`` raises.
    """
    who = f"create_features({name!r})"
    if name in APPLICATIONS:
        unknown = sorted(set(overrides) - {"input_shape"})
        if unknown:
            raise ValueError(
                f"{who}: the keras.applications backbones take `input_shape` and "
                f"`weights` only; received {unknown}"
            )
        shape = tuple(overrides.get("input_shape", (224, 224, 3)))
        model = posenet_backbone(name, shape, weights)
        return feature_pyramid(model, KNOWN_TAP_LAYERS[name], levels=levels)
    model = create(name, weights=weights, **overrides)
    if not isinstance(model, FeaturePyramidModel):
        raise ValueError(
            f"{who}: zoo model {name!r} (family {get_spec(name).family!r}) has no feature "
            "pyramid; the CoAtNet, MaxViT and MaxxViT families have, and PosENet's backbones "
            f"{', '.join(map(repr, APPLICATIONS))}. feature_pyramid(model, tap_layers) "
            "taps any image model."
        )
    return _pruned(model, _select(who, model.feature_info, levels), None)
