"""The zoo's image families as keras-hub classes: CoAtNet, MaxViT, MaxxViT and Swin.

Per family a backbone (the network up to its last feature map, with ``pyramid_outputs``),
an ``ImageClassifier`` whose head is the zoo builder's own head code, its
``ImageClassifierPreprocessor`` and ``ImageConverter``. ``Classifier.from_zoo(name,
weights=...)`` builds a named configuration with the weights ``zoo.create`` loads (equal
outputs); ``classifier.to_zoo()`` gives the zoo's model back; ``save_to_preset`` writes
keras-hub's preset format, which keras-hub's ``from_preset`` loads as ours.

Examples:

    >>> import numpy as np
    >>> from keras_posenc import models
    >>> tiny = dict(blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16,
    ...             input_shape=(32, 32, 3), num_classes=3)
    >>> classifier = models.CoAtNetImageClassifier.from_zoo("coatnet_0", **tiny)
    >>> sorted(classifier.backbone.pyramid_outputs)
    ['P1', 'P2', 'P3', 'P4', 'P5']
    >>> classifier.predict(np.zeros((1, 32, 32, 3), "float32"), verbose=0).shape
    (1, 3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import keras

from keras_posenc.models.image_base import (
    ZooImageBackbone,
    ZooImageClassifier,
    ZooImageClassifierPreprocessor,
    ZooImageConverter,
)
from keras_posenc.zoo.coatnet import build_coatnet, check_head, classifier_head
from keras_posenc.zoo.maxvit import build_maxvit
from keras_posenc.zoo.maxxvit import build_maxxvit
from keras_posenc.zoo.swin import build_swin, swin_head

__all__ = [
    "CLASSIFIERS",
    "CoAtNetBackbone",
    "CoAtNetImageClassifier",
    "CoAtNetImageClassifierPreprocessor",
    "CoAtNetImageConverter",
    "MaxViTBackbone",
    "MaxViTImageClassifier",
    "MaxViTImageClassifierPreprocessor",
    "MaxViTImageConverter",
    "MaxxViTBackbone",
    "MaxxViTImageClassifier",
    "MaxxViTImageClassifierPreprocessor",
    "MaxxViTImageConverter",
    "SwinBackbone",
    "SwinImageClassifier",
    "SwinImageClassifierPreprocessor",
    "SwinImageConverter",
]

_register = keras.saving.register_keras_serializable(package="keras_posenc")
# The classifier's head of the CoAtNet-like builders (zoo/coatnet.py classifier_head); the
# backbone is built without it: the S4 map.
_CLASSIFIER_HEAD = (
    "include_top",
    "features",
    "pooling",
    "num_classes",
    "pre_logits",
    "head",
    "head_norm_epsilon",
    "classifier_activation",
)
_WITHOUT_HEAD = {"include_top": False, "pooling": None, "features": False}


def _stage_head(
    who: str,
    features: Any,
    config: Mapping[str, Any],
    options: Mapping[str, Any],
    norm_momentum: float = 0.99,
) -> Any:
    """The CoAtNet-like head (zoo/coatnet.py ``check_head`` and ``classifier_head``) on the
    S4 map, with the checks its builder makes."""
    if not options.get("include_top", True) or options.get("features", False):
        raise ValueError(
            f"{who}: a classifier has include_top=True and features=False; received "
            f"include_top={options.get('include_top')!r}, "
            f"features={options.get('features')!r}."
        )
    checked = check_head(
        who,
        include_top=True,
        features=False,
        synchronized=config.get("synchronized", False),
        pooling=options.get("pooling", "avg"),
        num_classes=options["num_classes"],
        drop_path_rate=config.get("drop_path_rate", 0.0),
        pre_logits=options["pre_logits"],
        head=options["head"],
        head_norm=options.get("head_norm", "layer"),
        head_norm_epsilon=options["head_norm_epsilon"],
        classifier_activation=options["classifier_activation"],
        norm_momentum=norm_momentum,
    )
    return classifier_head(features, int(config["channels"][-1]), **checked)


# --------------------------------------------------------------------------- CoAtNet


@_register
class CoAtNetBackbone(ZooImageBackbone):
    """CoAtNet (zoo/coatnet.py ``build_coatnet``) up to its S4 map; levels P1..P5 are
    its stages S0..S4.

    Examples:

        >>> backbone = CoAtNetBackbone.from_zoo(
        ...     "coatnet_0", blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32),
        ...     head_dim=16, input_shape=(32, 32, 3))
        >>> backbone.output_shape, tuple(backbone.pyramid_outputs["P3"].shape)
        ((None, 1, 1, 32), (None, 4, 4, 16))
    """

    family = "coatnet"
    builder = staticmethod(build_coatnet)
    head_arguments = (*_CLASSIFIER_HEAD, "head_norm")
    network_arguments = _WITHOUT_HEAD


@_register
class CoAtNetImageConverter(ZooImageConverter):
    """CoAtNet's image converter (:class:`~keras_posenc.models.ZooImageConverter`)."""

    backbone_cls = CoAtNetBackbone


@_register
class CoAtNetImageClassifierPreprocessor(ZooImageClassifierPreprocessor):
    """CoAtNet's ``ImageClassifierPreprocessor``."""

    backbone_cls = CoAtNetBackbone
    image_converter_cls = CoAtNetImageConverter


@_register
class CoAtNetImageClassifier(ZooImageClassifier):
    """CoAtNet as keras-hub's ``ImageClassifier``: its head the zoo's (global pool, norm,
    ``tanh`` pre-logits where configured, classifier; zoo/coatnet.py ``classifier_head``).

    Examples:

        >>> classifier = CoAtNetImageClassifier.from_zoo(
        ...     "coatnet_0", blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32),
        ...     head_dim=16, input_shape=(32, 32, 3), num_classes=4)
        >>> classifier.output_shape
        (None, 4)
    """

    backbone_cls = CoAtNetBackbone
    preprocessor_cls = CoAtNetImageClassifierPreprocessor

    @classmethod
    def head(cls, features: Any, backbone: ZooImageBackbone, options: Mapping[str, Any]) -> Any:
        config = backbone.network_config
        momentum = (config.get("transformer_options") or {}).get("norm_momentum", 0.99)
        return _stage_head(cls.__name__, features, config, options, momentum)


# --------------------------------------------------------------------------- MaxViT


@_register
class MaxViTBackbone(ZooImageBackbone):
    """MaxViT (zoo/maxvit.py ``build_maxvit``) up to its S4 map; levels P1..P5 are its
    stages S0..S4."""

    family = "maxvit"
    builder = staticmethod(build_maxvit)
    head_arguments = _CLASSIFIER_HEAD
    network_arguments = _WITHOUT_HEAD


@_register
class MaxViTImageConverter(ZooImageConverter):
    """MaxViT's image converter."""

    backbone_cls = MaxViTBackbone


@_register
class MaxViTImageClassifierPreprocessor(ZooImageClassifierPreprocessor):
    """MaxViT's ``ImageClassifierPreprocessor``."""

    backbone_cls = MaxViTBackbone
    image_converter_cls = MaxViTImageConverter


@_register
class MaxViTImageClassifier(ZooImageClassifier):
    """MaxViT as keras-hub's ``ImageClassifier``, its head the zoo's."""

    backbone_cls = MaxViTBackbone
    preprocessor_cls = MaxViTImageClassifierPreprocessor

    @classmethod
    def head(cls, features: Any, backbone: ZooImageBackbone, options: Mapping[str, Any]) -> Any:
        return _stage_head(cls.__name__, features, backbone.network_config, options)


# --------------------------------------------------------------------------- MaxxViT


@_register
class MaxxViTBackbone(ZooImageBackbone):
    """MaxxViT / CoAtNeXt (zoo/maxxvit.py ``build_maxxvit``) up to its S4 map; levels
    P1..P5 are its stages S0..S4."""

    family = "maxxvit"
    builder = staticmethod(build_maxxvit)
    head_arguments = _CLASSIFIER_HEAD
    network_arguments = _WITHOUT_HEAD


@_register
class MaxxViTImageConverter(ZooImageConverter):
    """MaxxViT's image converter."""

    backbone_cls = MaxxViTBackbone


@_register
class MaxxViTImageClassifierPreprocessor(ZooImageClassifierPreprocessor):
    """MaxxViT's ``ImageClassifierPreprocessor``."""

    backbone_cls = MaxxViTBackbone
    image_converter_cls = MaxxViTImageConverter


@_register
class MaxxViTImageClassifier(ZooImageClassifier):
    """MaxxViT as keras-hub's ``ImageClassifier``, its head the zoo's."""

    backbone_cls = MaxxViTBackbone
    preprocessor_cls = MaxxViTImageClassifierPreprocessor

    @classmethod
    def head(cls, features: Any, backbone: ZooImageBackbone, options: Mapping[str, Any]) -> Any:
        return _stage_head(cls.__name__, features, backbone.network_config, options)


# --------------------------------------------------------------------------- Swin


@_register
class SwinBackbone(ZooImageBackbone):
    """Swin Transformer v1 (zoo/swin.py ``build_swin``): its output the last stage's
    normalised cells ``(batch, tokens, channels)`` (keras-hub's
    ``SwinTransformerBackbone``'s); ``pyramid_outputs`` each stage's last block's map,
    level ``k`` at stride ``patch_size * 2 ** stage`` (a power of two's patches).

    Examples:

        >>> backbone = SwinBackbone.from_zoo(
        ...     "swin_tiny_patch4_window7_224", input_shape=(32, 32, 3), embed_dim=8,
        ...     depths=(2, 2), num_heads=(1, 2), window_size=4)
        >>> backbone.output_shape, sorted(backbone.pyramid_outputs)
        ((None, 16, 16), ['P2', 'P3'])
    """

    family = "swin"
    builder = staticmethod(build_swin)
    head_arguments = ("num_classes", "head_dropout")
    network_arguments = {"num_classes": None}

    def pyramid_of(self, network: keras.Model) -> dict[str, Any]:
        config = self.network_config
        patch = int(config.get("patch_size", 4))
        if patch & (patch - 1):  # no power of two: no level "Pk"
            return {}
        depths = config.get("depths", (2, 2, 6, 2))
        return {
            f"P{int(math.log2(patch)) + stage}": network.get_layer(
                f"stage_{stage}_block_{depth - 1}"
            ).output
            for stage, depth in enumerate(depths)
        }


@_register
class SwinImageConverter(ZooImageConverter):
    """Swin's image converter."""

    backbone_cls = SwinBackbone


@_register
class SwinImageClassifierPreprocessor(ZooImageClassifierPreprocessor):
    """Swin's ``ImageClassifierPreprocessor``."""

    backbone_cls = SwinBackbone
    image_converter_cls = SwinImageConverter


@_register
class SwinImageClassifier(ZooImageClassifier):
    """Swin as keras-hub's ``ImageClassifier``: the mean of the last map's cells, dropout
    and the classifier (zoo/swin.py ``swin_head``). The zoo's Swins are backbones: give
    ``num_classes`` to :meth:`from_zoo`."""

    backbone_cls = SwinBackbone
    preprocessor_cls = SwinImageClassifierPreprocessor

    @classmethod
    def head(cls, features: Any, backbone: ZooImageBackbone, options: Mapping[str, Any]) -> Any:
        if options["num_classes"] is None:
            raise ValueError(
                f"{cls.__name__}: `num_classes` must be a positive int (the zoo's Swins are "
                "backbones: give num_classes=...); received None."
            )
        return swin_head(features, options["num_classes"], options["head_dropout"])

    @classmethod
    def check_classifier(cls, name: str, head: Mapping[str, Any]) -> None:
        if head.get("num_classes") is None:
            raise ValueError(
                f"{cls.__name__}.from_zoo({name!r}): the zoo's Swins are backbones "
                "(num_classes=None); give num_classes=... for a classifier."
            )


#: The image classifier of each zoo family: family -> class.
CLASSIFIERS: dict[str, type[ZooImageClassifier]] = {
    cls.backbone_cls.family: cls
    for cls in (
        CoAtNetImageClassifier,
        MaxViTImageClassifier,
        MaxxViTImageClassifier,
        SwinImageClassifier,
    )
}
