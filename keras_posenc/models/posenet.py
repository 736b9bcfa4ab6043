"""PosENet as keras-hub classes: a backbone of frozen features and a ``DepthEstimator``.

keras-hub's dense-prediction tasks are ``ImageSegmenter`` and ``DepthEstimator``. A
segmenter's contract is a class per pixel: softmax scores, categorical cross-entropy
and accuracy by default, masks resized with ``"nearest"``. PosENet predicts, per target
(``H``, ``V``, ``G``, ``HS``, ``VS``), a continuous map in ``[0, 1]`` through a
sigmoid, trained with pixel-wise mean squared error: the contract of a metric
``DepthEstimator`` (a sigmoid map, ``MeanSquaredError`` and ``RootMeanSquaredError``
by default, targets passed through the preprocessor unchanged). So PosENet's task is
:class:`PosENetDepthEstimator`; its output is keras-hub's ``{"depths": maps}``, the
maps of ``zoo.create``'s PosENet, one channel per target.

The split follows PosENet's own: the backbone is what the probe freezes (the zoo's
backbone read at its tap layers, each tap resized to ``feature_size`` and
concatenated: ``PosENet.feature_model``), the task's head what the probe trains (the
readout: ``PosENet.readout_model``). Both are built by zoo/posenet.py's
``posenet_features`` and ``posenet_readout``, the code ``PosENet`` runs, so
``PosENetDepthEstimator.from_zoo(name, weights=...)`` gives ``zoo.create``'s maps and
``to_zoo()`` the zoo's model back. ``backbone=None`` is the paper's "PosENet alone",
the readout on the image itself.

Examples:

    >>> import numpy as np
    >>> from keras_posenc import models
    >>> backbone = models.PosENetBackbone(backbone=None, input_shape=(16, 16, 3),
    ...                                   feature_size=8)
    >>> task = models.PosENetDepthEstimator(backbone, targets=("H", "V"))
    >>> task.predict(np.zeros((1, 16, 16, 3), "float32"), verbose=0)["depths"].shape
    (1, 16, 16, 2)
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

import keras
import keras_hub

from keras_posenc.layers._checks import check_int
from keras_posenc.models._backbone import ZooBackbone, copy_weights, dtype_policy
from keras_posenc.models.image_base import ZooImageConverter
from keras_posenc.zoo.posenet import (
    BACKBONES,
    PATTERN_NAMES,
    PosENet,
    build_posenet,
    check_readout,
    posenet_backbone,
    posenet_features,
    posenet_readout,
)
from keras_posenc.zoo.registry import create, create_arguments, get_spec

__all__ = [
    "PosENetBackbone",
    "PosENetDepthEstimator",
    "PosENetDepthEstimatorPreprocessor",
    "PosENetImageConverter",
    "build_posenet_features",
]

_register = keras.saving.register_keras_serializable(package="keras_posenc")
# build_posenet's readout arguments: the task's head.
_READOUT = ("readout_layers", "kernel_size", "targets", "readout_filters", "readout_padding")


def build_posenet_features(
    backbone: str | None = "vgg16",
    input_shape: Sequence[int] = (224, 224, 3),
    backbone_weights: str | None = None,
    tap_layers: Sequence[str] | None = None,
    feature_size: int = 28,
    name: str | None = None,
) -> keras.Model:
    """PosENet's frozen features (``PosENet.feature_model``) of a named backbone, as
    ``build_posenet`` builds them (its docstring says what each argument does);
    ``backbone=None`` reads the image itself ("PosENet alone").

    Raises:
        ValueError: an unknown backbone, a bad ``input_shape`` or ``feature_size``, or
            tap layers the backbone does not have.
    """
    who = "build_posenet_features"
    if backbone is not None and backbone not in BACKBONES:
        raise ValueError(
            f"{who}: `backbone` must be one of {', '.join(map(repr, BACKBONES))} or None; "
            f"received backbone={backbone!r}"
        )
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                  for v in shape):  # fmt: skip
        raise ValueError(
            f"{who}: `input_shape` must be (height, width, channels) of positive ints; "
            f"received input_shape={input_shape!r}"
        )
    feature_size = check_int(who, "feature_size", feature_size, 1)
    network = None if backbone is None else posenet_backbone(backbone, shape, backbone_weights)
    policy = keras.config.dtype_policy()  # ZooBackbone sets keras-hub's dtype meanwhile
    inputs = keras.Input(PosENet._image_shape(network, shape), name="images")
    _, features = posenet_features(inputs, network, tap_layers, feature_size, policy)
    return keras.Model(inputs, features, name=name or f"posenet_{backbone or 'alone'}_features")


@_register
class PosENetBackbone(ZooBackbone):
    """PosENet's frozen features as a keras-hub ``Backbone``: the zoo's backbone (VGG16,
    ResNet50, CoAtNet-0, or none) read at its tap layers, each tap resized bilinearly to
    ``feature_size x feature_size`` and concatenated, ``(batch, feature_size,
    feature_size, channels)``. The backbone's layers are frozen, as in the zoo's PosENet.

    Args:
        **arguments: :func:`build_posenet_features`'s (``backbone``, ``input_shape``,
            ``backbone_weights``, ``tap_layers``, ``feature_size``), and ``name``,
            ``trainable``, ``dtype``. Its configuration records
            ``backbone_weights=None``: a preset carries the weights.

    Examples:

        >>> backbone = PosENetBackbone.from_zoo("posenet_vgg16", input_shape=(32, 32, 3),
        ...                                     feature_size=8)
        >>> backbone.output_shape, backbone.trainable_weights
        ((None, 8, 8, 1472), [])
    """

    family = "posenet"
    builder = staticmethod(build_posenet_features)
    head_arguments = _READOUT

    def get_config(self) -> dict[str, Any]:
        # The weights a preset or .keras file holds, not a file or download to repeat.
        return {**super().get_config(), "backbone_weights": None}


@_register
class PosENetImageConverter(ZooImageConverter):
    """PosENet's image converter (:class:`~keras_posenc.models.ZooImageConverter`: resize,
    ``pixels * scale + offset``). keras.applications' VGG16 and ResNet50 preprocessing
    (``"caffe"``: BGR, mean subtracted) is no scale and offset; give their inputs as
    ``preprocess_input`` makes them, or random backbones any scaling."""

    backbone_cls = PosENetBackbone


@_register
class PosENetDepthEstimatorPreprocessor(keras_hub.models.DepthEstimatorPreprocessor):
    """PosENet's ``DepthEstimatorPreprocessor``: the converter on the images, the target
    maps passed through."""

    backbone_cls = PosENetBackbone
    image_converter_cls = PosENetImageConverter


@_register
class PosENetDepthEstimator(keras_hub.models.DepthEstimator):
    """PosENet as keras-hub's ``DepthEstimator``: its head the zoo's readout (frozen
    feature statistics, ``readout_layers`` convolutions with ``'valid'`` padding, sigmoid,
    bilinear upsampling to the image: zoo/posenet.py ``posenet_readout``); outputs
    ``{"depths": maps}``, ``(batch, height, width, len(targets))`` in ``[0, 1]``
    (keras-hub's metric estimation with no ``max_depth``). ``compile()`` takes keras-hub's
    defaults: mean squared error, PosENet's loss.

    Args:
        backbone: a :class:`PosENetBackbone`.
        preprocessor: a :class:`PosENetDepthEstimatorPreprocessor`, or None.
        readout_layers: the readout's convolutions (as ``zoo.create("posenet_...")``).
        kernel_size: their kernel size.
        targets: the position patterns predicted, one channel each.
        readout_filters: the hidden convolutions' width.
        readout_padding: the readout's zero padding.
        **kwargs: ``name``, ``trainable``, ``dtype``, and keras-hub's ``compile``.

    Raises:
        TypeError: a backbone of another class.
        ValueError: unknown arguments, or readout arguments PosENet refuses.

    Examples:

        >>> task = PosENetDepthEstimator.from_zoo("posenet_vgg16", input_shape=(32, 32, 3),
        ...                                       feature_size=8, targets=("G",))
        >>> tuple(task.output["depths"].shape), [w.path for w in task.trainable_weights]
        ((None, 32, 32, 1), ['readout_conv_0/kernel', 'readout_conv_0/bias'])
        >>> type(task.to_zoo()).__name__
        'PosENet'
    """

    backbone_cls = PosENetBackbone
    preprocessor_cls = PosENetDepthEstimatorPreprocessor

    def __init__(
        self,
        backbone: PosENetBackbone,
        preprocessor: Any = None,
        *,
        readout_layers: int = 1,
        kernel_size: int = 3,
        targets: Sequence[str] = PATTERN_NAMES,
        readout_filters: int = 64,
        readout_padding: int = 0,
        **kwargs: Any,
    ) -> None:
        who = type(self).__name__
        if not isinstance(backbone, PosENetBackbone):
            raise TypeError(
                f"{who}: `backbone` must be a PosENetBackbone, got {type(backbone).__name__}."
            )
        compile_now = kwargs.pop("compile", True)
        unknown = sorted(set(kwargs) - {"name", "trainable", "dtype"})
        if unknown:
            raise ValueError(
                f"{who}: unknown argument(s) {', '.join(map(repr, unknown))}; the readout "
                f"takes {list(_READOUT)}, and keras.Model's name, trainable and dtype."
            )
        checked = check_readout(
            who,
            readout_layers=readout_layers,
            kernel_size=kernel_size,
            feature_size=int(backbone.output.shape[1]),
            targets=targets,
            readout_filters=readout_filters,
            readout_padding=readout_padding,
        )
        head = dict(zip(_READOUT, checked))
        self.backbone = backbone
        self.preprocessor = preprocessor
        inputs = backbone.input
        policy = backbone.dtype_policy  # keras-hub's head dtype: the backbone's
        with dtype_policy(policy):
            maps = posenet_readout(
                backbone(inputs), tuple(inputs.shape[1:3]), policy=policy, **head
            )
            depths = keras.layers.Identity(dtype=policy, name="depths")(maps)
        keras_hub.models.Task.__init__(
            self, inputs=inputs, outputs={"depths": depths}, compile=False, **kwargs
        )
        self.head_config = {**head, "targets": list(head["targets"])}
        # What keras-hub's DepthEstimator reads of itself: sigmoid maps, no scaling.
        self.depth_estimation_type = "metric"
        self.min_depth = keras.config.epsilon()
        self.max_depth = None
        if compile_now:
            self.compile()

    def get_config(self) -> dict[str, Any]:
        return {**keras_hub.models.Task.get_config(self), **self.head_config}

    @classmethod
    def from_zoo(
        cls,
        name: str,
        weights: str | os.PathLike | None = None,
        preprocessor: Any = None,
        **overrides: Any,
    ) -> PosENetDepthEstimator:
        """The task of the zoo's PosENet ``name`` (``posenet_vgg16``, ...), with the
        weights ``zoo.create(name, weights=weights, **overrides)`` loads (a ``.keras`` or
        ``.weights.h5`` file of a PosENet, a preset source) or fresh ones.

        Raises:
            ValueError: what ``zoo.create`` raises; a name of another family.
        """
        family = get_spec(name).family
        if family != PosENetBackbone.family:
            raise ValueError(
                f"{cls.__name__}.from_zoo: {name!r} is a {family!r} model; this task builds "
                f"the 'posenet' family's."
            )
        arguments, _ = create_arguments(name, weights, **overrides)
        backbone_arguments, head = PosENetBackbone.split_arguments(arguments)
        task = cls(PosENetBackbone(**backbone_arguments), preprocessor=preprocessor, **head)
        if weights is not None:
            model = create(name, weights=weights, **overrides)
            copy_weights(model, task, f"{cls.__name__}.from_zoo")
        return task

    def to_zoo(self) -> PosENet:
        """The zoo's :class:`~keras_posenc.probe.PosENet` of this configuration (what
        ``zoo.create`` builds; ``PosENet(None, ...)`` without a backbone) with this task's
        weights: ``probe.train`` and ``probe.evaluate`` take it."""
        parameters = inspect.signature(build_posenet_features).parameters
        config = {key: parameters[key].default for key in parameters}
        config.update(self.backbone.network_config)
        config.update(self.head_config, backbone_weights=None)
        backbone = config.pop("backbone")
        config.pop("name")
        if backbone is None:
            config.pop("backbone_weights")
            config.pop("tap_layers")
            model = PosENet(None, image_shape=config.pop("input_shape"), **config)
        else:
            model = build_posenet(backbone=backbone, **config)
        copy_weights(self, model, f"{type(self).__name__}.to_zoo")
        return model
