"""PosENet models: a frozen backbone and a readout trained to decode absolute position.

:class:`PosENet` is the probe model of Islam et al. (ICLR 2020); the zoo
registers it on three backbones, each with weights=None (no pretrained weights
are downloaded; pass ``backbone_weights`` to probe your own, or
``backbone_weights="imagenet"`` to download keras.applications' ImageNet weights):

    name               backbone (frozen)                   taps (stages)       readout (trainable)
    posenet_vgg16      keras.applications VGG16            5: block1..5 conv   66,245
    posenet_resnet50   keras.applications ResNet50         4: conv2..5         172,805
    posenet_coatnet_0  the zoo's coatnet_0, features mode  5: S0..S4           67,685

Readout parameters are for the named configurations (one 3 x 3 convolution with
5 output channels on all stages, 9 * channels * 5 + 5). The model class lives in
the zoo, below the probe, so the import direction stays probe -> zoo -> layers:
``keras_posenc.probe`` re-exports it with the targets, metrics and training
helpers. The model card (zoo/posenet/README.md in the repository) has the details.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.layers._checks import check_choice, check_int
from keras_posenc.layers.padding import SpatialPadding2D
from keras_posenc.zoo.adapt import ZooModel
from keras_posenc.zoo.config import ZooConfig, by_name
from keras_posenc.zoo.registry import create, register_model

# The five target maps of the paper (H, V, G, HS, VS), one output channel each. The names are
# part of a PosENet's configuration, so they live with the model; keras_posenc.probe computes
# the maps themselves (probe.position_patterns) and re-exports this tuple.
PATTERN_NAMES = ("H", "V", "G", "HS", "VS")

# Stage outputs of the keras.applications backbones (Islam et al. tap VGG16's relu1_2 ...
# relu5_3, i.e. the last convolution of each block, and ResNet's four stages).
KNOWN_TAP_LAYERS = {
    "vgg16": ["block1_conv2", "block2_conv2", "block3_conv3", "block4_conv3", "block5_conv3"],
    "vgg19": ["block1_conv2", "block2_conv2", "block3_conv4", "block4_conv4", "block5_conv4"],
    "resnet50": ["conv2_block3_out", "conv3_block4_out", "conv4_block6_out", "conv5_block3_out"],
    "resnet101": ["conv2_block3_out", "conv3_block4_out", "conv4_block23_out", "conv5_block3_out"],
    "resnet152": ["conv2_block3_out", "conv3_block8_out", "conv4_block36_out", "conv5_block3_out"],
}
_PROBE_CONV = re.compile(r"^stage(\d+)_conv(\d+)$")


def _output_layers(backbone: keras.Model) -> list[str]:
    """Names of the layers whose outputs are the backbone's outputs, in output order."""
    producers = {}
    for layer in backbone.layers:
        try:
            output = layer.output
        except (AttributeError, ValueError):  # a layer called more than once has no one output
            continue
        for tensor in keras.tree.flatten(output):
            producers[id(tensor)] = layer.name
    return [producers.get(id(tensor)) for tensor in backbone.outputs]


def default_tap_layers(backbone: keras.Model) -> list[str]:
    """The layers PosENet reads by default: each stage's output.

    Known for ``keras.applications`` VGG16/VGG19 and ResNet50/101/152 (by model
    name), for a feature pyramid (the levels of a CoAtNet, MaxViT or
    ``zoo.create_features`` model), for a backbone with several outputs (the layers
    that produce them),
    and for :func:`~keras_posenc.probe.probe_backbone` (the last
    ``stage{s}_conv{j}`` of each stage).

    Raises:
        ValueError: for any other backbone; pass ``tap_layers`` explicitly then.

    Examples:

        >>> from keras_posenc.zoo.coatnet import build_coatnet
        >>> from keras_posenc.zoo.posenet import default_tap_layers
        >>> features = build_coatnet(
        ...     blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16,
        ...     input_shape=(32, 32, 3), features=True)
        >>> default_tap_layers(features)
        ['stem_conv1', 'stage1_block1', 'stage2_block1', 'stage3_block1', 'stage4_block1']
    """
    if backbone.name in KNOWN_TAP_LAYERS:
        return list(KNOWN_TAP_LAYERS[backbone.name])
    levels = getattr(backbone, "feature_info", None)  # a feature pyramid (zoo/features.py)
    if levels:
        return [level["name"] for level in levels]
    if len(backbone.outputs) > 1:
        names = _output_layers(backbone)
        if None not in names and len(set(names)) == len(names):
            return names
    last_conv: dict[int, tuple[int, str]] = {}
    for layer in backbone.layers:
        match = _PROBE_CONV.match(layer.name)
        if match:
            stage, conv = int(match.group(1)), int(match.group(2))
            if stage not in last_conv or conv > last_conv[stage][0]:
                last_conv[stage] = (conv, layer.name)
    if last_conv:
        return [last_conv[stage][1] for stage in sorted(last_conv)]
    raise ValueError(
        f"PosENet: no default tap layers for backbone {backbone.name!r}; pass `tap_layers`, "
        f"the names of the layers whose outputs to read (known backbones: "
        f"{', '.join(sorted(KNOWN_TAP_LAYERS))}, multi-output feature models and "
        "probe_backbone)"
    )


@keras.saving.register_keras_serializable(package="keras_posenc")
class FeatureStandardization(keras.layers.Layer):
    """``(x - mean) * inverse_scale`` per channel, with frozen statistics: PosENet's input scaling.

    PosENet's readout reads features of very different scales (a random VGG16's
    first stage is ~50 x its last) that are all positive after ReLU; trained
    on them as they are, Adam's first steps push the sigmoid into its flat
    tails and the maps come out constant. :func:`~keras_posenc.probe.train`
    therefore sets these statistics from the training features before it fits
    the readout. The layer is an affine reparameterisation of the first readout
    convolution (what it can express does not change) and acts on each
    position alike, so it adds no position. It sits after the readout's zero
    padding, so the padding is still zeros of the raw features. Until
    :meth:`set_statistics` is called it is the identity.

    Args:
        **kwargs: base ``keras.layers.Layer`` arguments (``name``, ``dtype``).

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.zoo.posenet import FeatureStandardization
        >>> layer = FeatureStandardization()
        >>> x = np.array([[[[1.0, 5.0], [3.0, 5.0]]]], "float32")  # (1, 1, 2, 2)
        >>> layer.build(x.shape)
        >>> layer.set_statistics(mean=[2.0, 5.0], inverse_scale=[1.0, 0.0])
        >>> np.asarray(layer(x))[0, 0].tolist()
        [[-1.0, 0.0], [1.0, 0.0]]
    """

    def build(self, input_shape: Sequence[int | None]) -> None:
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(
                "FeatureStandardization: the channel axis must be known; received input "
                f"shape {tuple(input_shape)}"
            )
        self.mean = self.add_weight(
            shape=(channels,), initializer="zeros", trainable=False, name="mean"
        )
        self.inverse_scale = self.add_weight(
            shape=(channels,), initializer="ones", trainable=False, name="inverse_scale"
        )

    def call(self, inputs: Any) -> Any:
        mean = keras.ops.cast(self.mean, inputs.dtype)
        return (inputs - mean) * keras.ops.cast(self.inverse_scale, inputs.dtype)

    def set_statistics(self, mean: Any, inverse_scale: Any) -> None:
        """Sets the per-channel ``mean`` and ``inverse_scale`` (0 silences a channel).

        Raises:
            ValueError: if the layer is not built or a vector has the wrong length.
        """
        if not self.built:
            raise ValueError(f"FeatureStandardization {self.name!r}: call or build it first.")
        channels = int(self.mean.shape[0])
        for value, argument in ((mean, "mean"), (inverse_scale, "inverse_scale")):
            if np.shape(value) != (channels,):
                raise ValueError(
                    f"FeatureStandardization: `{argument}` must have shape ({channels},); "
                    f"received {np.shape(value)}"
                )
        self.mean.assign(np.asarray(mean, "float32"))
        self.inverse_scale.assign(np.asarray(inverse_scale, "float32"))

    def compute_output_shape(self, input_shape: Sequence[int | None]) -> tuple:
        return tuple(input_shape)


def check_readout(
    who: str,
    *,
    readout_layers: int,
    kernel_size: int,
    feature_size: int,
    targets: Sequence[str] | str,
    readout_filters: int,
    readout_padding: int,
) -> tuple[int, int, list[str], int, int]:
    """PosENet's readout arguments checked (``who`` names the caller in the messages):
    ``(readout_layers, kernel_size, targets, readout_filters, readout_padding)``.

    Raises:
        ValueError: a count below its minimum, targets that are not distinct names of
            ``PATTERN_NAMES``, or convolutions that leave nothing of the feature grid.
    """
    readout_layers = check_int(who, "readout_layers", readout_layers, 1)
    kernel_size = check_int(who, "kernel_size", kernel_size, 1)
    feature_size = check_int(who, "feature_size", feature_size, 1)
    readout_filters = check_int(who, "readout_filters", readout_filters, 1)
    readout_padding = check_int(who, "readout_padding", readout_padding, 0)
    targets = [targets] if isinstance(targets, str) else list(targets)
    unknown = [t for t in targets if t not in PATTERN_NAMES]
    if not targets or unknown or len(set(targets)) != len(targets):
        raise ValueError(
            f"{who}: `targets` must be distinct names from {list(PATTERN_NAMES)}; "
            f"received {targets!r}"
        )
    remaining = feature_size - readout_layers * (kernel_size - 1 - 2 * int(readout_padding))
    if remaining < 1:
        raise ValueError(
            f"{who}: {readout_layers} readout convolution(s) of kernel {kernel_size} with "
            f"readout_padding={readout_padding} leave no output of a {feature_size} x "
            f"{feature_size} feature grid; enlarge feature_size"
        )
    return readout_layers, kernel_size, targets, readout_filters, int(readout_padding)


def posenet_features(
    inputs: Any,
    backbone: keras.Model | None,
    tap_layers: Sequence[str] | None,
    feature_size: int,
    policy: Any,
) -> tuple[list[str], Any]:
    """PosENet's features of the ``inputs`` (a ``keras.Input``): the frozen ``backbone``'s
    taps (the image itself without one) resized to ``feature_size`` and concatenated
    (layer ``"features"``). Returns the tap layers' names and the features.

    The one implementation of PosENet's feature side: :class:`PosENet` and
    ``keras_posenc.models.PosENetBackbone`` build it."""
    if backbone is None:
        tap_layers, taps = [], [inputs]
    else:
        tap_layers = PosENet._tap_names(backbone, tap_layers)
        backbone.trainable = False
        extractor = keras.Model(
            backbone.inputs,
            [backbone.get_layer(name).output for name in tap_layers],
            name=f"{backbone.name}_taps",
        )
        taps = keras.tree.flatten(extractor(inputs))
    resized = [
        keras.layers.Resizing(
            feature_size,
            feature_size,
            interpolation="bilinear",
            dtype=policy,
            name=f"resize_{index}",
        )(tap)
        for index, tap in enumerate(taps)
    ]
    if len(resized) > 1:
        x = keras.layers.Concatenate(axis=-1, dtype=policy, name="features")(resized)
    else:
        x = keras.layers.Identity(dtype=policy, name="features")(resized[0])
    return list(tap_layers), x


def posenet_readout(
    features: Any,
    image_size: Sequence[int],
    *,
    targets: Sequence[str],
    readout_layers: int,
    kernel_size: int,
    readout_filters: int,
    readout_padding: int,
    policy: Any,
) -> Any:
    """PosENet's readout on its ``features`` (checked arguments: :func:`check_readout`):
    the statistics, ``readout_layers`` convolutions with ``'valid'`` padding, the sigmoid
    and the bilinear upsampling to ``image_size`` (layer ``"position_maps"``).

    The one implementation of PosENet's readout: :class:`PosENet` and
    ``keras_posenc.models.PosENetDepthEstimator`` build it."""
    x = features
    for index in range(readout_layers):
        last = index == readout_layers - 1
        if readout_padding:
            x = SpatialPadding2D(int(readout_padding), dtype=policy, name=f"readout_pad_{index}")(x)
        if index == 0:
            x = FeatureStandardization(dtype=policy, name="feature_standardization")(x)
        x = keras.layers.Conv2D(
            len(targets) if last else readout_filters,
            kernel_size,
            padding="valid",
            activation=None if last else "relu",
            dtype=policy,
            name=f"readout_conv_{index}",
        )(x)
    x = keras.layers.Activation("sigmoid", dtype=policy, name="sigmoid")(x)
    return keras.layers.Resizing(
        int(image_size[0]),
        int(image_size[1]),
        interpolation="bilinear",
        dtype=policy,
        name="position_maps",
    )(x)


@keras.saving.register_keras_serializable(package="keras_posenc")
class PosENet(ZooModel, keras.Model):
    """PosENet: how much absolute position do a network's features encode?

    The backbone is frozen (in place: its layers become non-trainable). The
    outputs of its ``tap_layers`` are resized bilinearly to ``feature_size x
    feature_size`` and concatenated; a readout of ``readout_layers``
    convolutions with ``'valid'`` padding (so the readout adds no position of
    its own) maps them to one channel per target; a sigmoid and a bilinear
    upsampling to the input size give the predicted position maps. Train it
    with :func:`~keras_posenc.probe.train` (pixel-wise MSE against
    :func:`~keras_posenc.probe.position_patterns`) and score it with
    :func:`~keras_posenc.probe.evaluate` (SPC and MAE per target).

    The paper trains one readout per target; here one model predicts all
    ``targets`` as channels. With one readout layer the channels have separate
    weights, so this is the same as separate readouts; with more layers they
    share the hidden convolutions.

    ``PosENet(None, image_shape=...)`` is the paper's "PosENet alone": the
    readout on the raw image, with no backbone.

    Keras' ``trainable`` cascades: ``posenet.trainable = True`` unfreezes the
    backbone too (set ``posenet.backbone.trainable = False`` again to refreeze).

    The model is a functional ``keras.Model`` built from public Keras layers; it
    saves to and loads from ``.keras`` files when its backbone does (any
    functional or Sequential model, and keras.applications models, do).

    Args:
        backbone: a ``keras.Model`` with one image input (channels last), or None.
        tap_layers: names of the backbone layers to read; None means
            :func:`default_tap_layers`. Ignored without a backbone.
        readout_layers: number of readout convolutions; all but the last have
            ``readout_filters`` channels and ReLU.
        kernel_size: kernel size of the readout convolutions.
        feature_size: side of the square grid every tap is resized to (28 in
            the paper's code).
        targets: names from ``PATTERN_NAMES`` to predict, one output channel each.
        readout_filters: channels of the hidden readout convolutions.
        readout_padding: zero padding before each readout convolution; 0 (the
            default) keeps the readout free of position. The paper's Table 4
            sets it to 1 or 2 to show padding alone creates position.
        image_shape: ``(height, width, channels)``; needed when the backbone's
            input has unknown spatial size, or without a backbone.
        **kwargs: ``keras.Model`` arguments (``name``).

    Call arguments:
        images: ``(batch, height, width, channels)``, as the backbone expects
            them (apply the backbone's own preprocessing first, if any).

    Returns:
        ``(batch, height, width, len(targets))`` maps in ``[0, 1]``.

    Examples:

        >>> import keras
        >>> from keras_posenc import probe
        >>> backbone = probe.probe_backbone("zeros", input_shape=(32, 32, 3), width=4)
        >>> posenet = probe.PosENet(backbone, feature_size=14, targets=("H", "G"))
        >>> posenet.tap_layers
        ['stage1_conv2', 'stage2_conv2', 'stage3_conv2']
        >>> posenet.output_shape
        (None, 32, 32, 2)
        >>> backbone.trainable_weights
        []
        >>> vgg = keras.applications.VGG16(weights=None, include_top=False)
        >>> tuple(probe.PosENet(vgg, image_shape=(64, 64, 3)).output.shape)
        (None, 64, 64, 5)

    Reference:
        - [Islam, Jia and Bruce, 2020. How Much Position Information Do
          Convolutional Neural Networks Encode?](https://arxiv.org/abs/2001.08248)
    """

    def __init__(
        self,
        backbone: keras.Model | None,
        tap_layers: Sequence[str] | None = None,
        readout_layers: int = 1,
        kernel_size: int = 3,
        feature_size: int = 28,
        targets: Sequence[str] = PATTERN_NAMES,
        readout_filters: int = 64,
        readout_padding: int = 0,
        image_shape: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:
        readout_layers, kernel_size, targets, readout_filters, readout_padding = check_readout(
            "PosENet",
            readout_layers=readout_layers,
            kernel_size=kernel_size,
            feature_size=feature_size,
            targets=targets,
            readout_filters=readout_filters,
            readout_padding=readout_padding,
        )
        feature_size = check_int("PosENet", "feature_size", feature_size, 1)
        shape = self._image_shape(backbone, image_shape)
        # The readout's layers take the model's policy (a .keras file records it: ZooModel).
        policy = keras.dtype_policies.get(kwargs.pop("dtype", None) or keras.config.dtype_policy())
        inputs = keras.Input(shape, name="images")
        tap_layers, x = posenet_features(inputs, backbone, tap_layers, feature_size, policy)
        outputs = posenet_readout(
            x,
            shape[:2],
            targets=targets,
            readout_layers=readout_layers,
            kernel_size=kernel_size,
            readout_filters=readout_filters,
            readout_padding=readout_padding,
            policy=policy,
        )
        super().__init__(inputs, outputs, name=kwargs.pop("name", "posenet"), **kwargs)
        self.layers_dtype = policy.name

        self.backbone = backbone
        self.tap_layers = list(tap_layers)
        self.readout_layers = readout_layers
        self.kernel_size = kernel_size
        self.feature_size = feature_size
        self.target_names = tuple(targets)
        self.readout_filters = readout_filters
        self.readout_padding = int(readout_padding)
        self.image_shape = shape

    @staticmethod
    def _image_shape(
        backbone: keras.Model | None, image_shape: Sequence[int] | None
    ) -> tuple[int, int, int]:
        if backbone is not None:
            if not isinstance(backbone, keras.Model) or len(backbone.inputs) != 1:
                raise ValueError(
                    "PosENet: `backbone` must be a keras.Model with one image input, or None; "
                    f"received {type(backbone).__name__}"
                )
            backbone_shape = tuple(backbone.inputs[0].shape[1:])
            if len(backbone_shape) != 3:
                raise ValueError(
                    "PosENet: the backbone's input must be (height, width, channels); "
                    f"received {backbone_shape}"
                )
        else:
            backbone_shape = (None, None, None)
        if image_shape is None:
            shape = backbone_shape
        else:
            shape = tuple(image_shape)
            compatible = len(shape) == 3 and all(
                known is None or known == given for known, given in zip(backbone_shape, shape)
            )
            if not compatible:
                raise ValueError(
                    f"PosENet: `image_shape` {tuple(image_shape)!r} must be (height, width, "
                    f"channels) and agree with the backbone's input {backbone_shape}"
                )
        if any(v is None or isinstance(v, bool) or int(v) < 1 for v in shape):
            raise ValueError(
                "PosENet: the image size must be known to upsample the maps to it; pass "
                f"`image_shape=(height, width, channels)` (backbone input: {backbone_shape})"
            )
        return tuple(int(v) for v in shape)

    @staticmethod
    def _tap_names(backbone: keras.Model, tap_layers: Sequence[str] | None) -> list[str]:
        names = default_tap_layers(backbone) if tap_layers is None else list(tap_layers)
        if isinstance(tap_layers, str) or not names:
            raise ValueError(
                f"PosENet: `tap_layers` must be a non-empty list of layer names; received "
                f"{tap_layers!r}"
            )
        available = [layer.name for layer in backbone.layers]
        for name in names:
            if name not in available:
                close = difflib.get_close_matches(str(name), available, n=3)
                hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
                raise ValueError(
                    f"PosENet: backbone {backbone.name!r} has no layer {name!r}.{hint}"
                )
        return names

    def feature_model(self) -> keras.Model:
        """A model from the images to the resized, concatenated features the readout reads."""
        return keras.Model(
            self.inputs[0], self.get_layer("features").output, name="posenet_features"
        )

    def readout_model(self) -> keras.Model:
        """The readout alone: from features to position maps, sharing this model's weights.

        Its input is what :meth:`feature_model` returns, ``(batch, feature_size,
        feature_size, channels)``; its output is this model's. With a frozen
        backbone, training the readout on features computed once is the same
        as training this model on the images, without running the backbone at
        every step.

        Examples:

            >>> from keras_posenc import probe
            >>> net = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=2, width=4)
            >>> posenet = probe.PosENet(net, feature_size=8, targets=["H"])
            >>> readout = posenet.readout_model()
            >>> readout.input_shape, readout.output_shape
            ((None, 8, 8, 12), (None, 16, 16, 1))
            >>> readout.trainable_weights[0] is posenet.trainable_weights[0]
            True
        """
        features = self.get_layer("features").output
        inputs = keras.Input(tuple(features.shape[1:]), name="features")
        x = inputs
        # The layers after "features" in the order __init__ applied them.
        names = []
        for index in range(self.readout_layers):
            if self.readout_padding:
                names.append(f"readout_pad_{index}")
            if index == 0:
                names.append("feature_standardization")
            names.append(f"readout_conv_{index}")
        for name in (*names, "sigmoid", "position_maps"):
            x = self.get_layer(name)(x)
        return keras.Model(inputs, x, name=f"{self.name}_readout")

    def get_config(self) -> dict:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": None
            if self.backbone is None
            else keras.saving.serialize_keras_object(self.backbone),
            "tap_layers": list(self.tap_layers) if self.backbone is not None else None,
            "readout_layers": self.readout_layers,
            "kernel_size": self.kernel_size,
            "feature_size": self.feature_size,
            "targets": list(self.target_names),
            "readout_filters": self.readout_filters,
            "readout_padding": self.readout_padding,
            "image_shape": list(self.image_shape),
        }

    @classmethod
    def from_config(cls, config: dict) -> PosENet:
        config = dict(config)
        if config.get("backbone") is not None:
            config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        trainable = config.pop("trainable", True)
        model = cls(**config)
        if not trainable:  # setting True would cascade into the backbone and unfreeze it
            model.trainable = False
        return model


# --------------------------------------------------------------------------- zoo entries

BACKBONES = ("vgg16", "resnet50", "coatnet_0")
REFERENCE = (
    "Islam, Jia and Bruce 2020, How Much Position Information Do Convolutional Neural "
    "Networks Encode? (ICLR 2020, arXiv:2001.08248)"
)


# keras.applications' ImageNet weights without the top, as the Keras cache stores them.
_IMAGENET_DOWNLOADS = {"vgg16": ("VGG16", "58.9 MB"), "resnet50": ("ResNet50", "94.8 MB")}


def posenet_backbone(name: str, input_shape: tuple[int, int, int], weights: Any) -> keras.Model:
    """The network PosENet reads, by ``build_posenet``'s ``backbone`` name: ``"vgg16"`` or
    ``"resnet50"`` (keras.applications' without the top; ``weights="imagenet"``
    downloads theirs) or ``"coatnet_0"`` (the zoo's, its five stage outputs).

    Raises:
        ConnectionError: ImageNet weights to download and no network.
    """
    if name == "coatnet_0":
        # The zoo's CoAtNet-0 in features mode: its five stage outputs S0..S4 are the taps.
        return create(name, weights=weights, input_shape=input_shape, features=True)
    application, size = _IMAGENET_DOWNLOADS[name]
    try:
        return getattr(keras.applications, application)(
            include_top=False, weights=weights, input_shape=input_shape
        )
    except Exception as error:
        # keras.utils.get_file raises a bare Exception ("URL fetch failure on ...") when
        # the download fails; anything more specific is not about the download.
        if weights != "imagenet" or type(error) is not Exception:
            raise
        raise ConnectionError(
            f"build_posenet: backbone_weights='imagenet' downloads the ImageNet weights of "
            f"{application} ({size}, once, into the Keras cache folder, ~/.keras/models by "
            f"default), and the download failed: {error}. Without network access, copy the "
            "file into that folder from a machine that has it, pass its path as "
            "backbone_weights, or use backbone_weights=None (random weights)."
        ) from error


def build_posenet(
    backbone: str = "vgg16",
    input_shape: Sequence[int] = (224, 224, 3),
    backbone_weights: str | None = None,
    tap_layers: Sequence[str] | None = None,
    readout_layers: int = 1,
    kernel_size: int = 3,
    feature_size: int = 28,
    targets: Sequence[str] = PATTERN_NAMES,
    readout_filters: int = 64,
    readout_padding: int = 0,
    name: str | None = None,
) -> PosENet:
    """A :class:`PosENet` on a named backbone, frozen, with a fresh readout.

    Args:
        backbone: ``"vgg16"`` or ``"resnet50"`` (``keras.applications``, without
            the top) or ``"coatnet_0"`` (the zoo's, in features mode).
        input_shape: ``(height, width, channels)`` of the images; at least 32 x
            32 for the keras.applications backbones, a multiple of 32 for CoAtNet.
        backbone_weights: None (random initialisation: nothing is downloaded),
            ``"imagenet"`` (VGG16 and ResNet50 only: **downloads** keras.applications'
            ImageNet weights, 58.9 MB for VGG16 and 94.8 MB for ResNet50, from
            Google's storage into the Keras cache folder, ``~/.keras/models`` by
            default, the first time; later calls read the cached file), or a
            weights file for the backbone (for keras.applications a path as
            their ``weights`` argument takes; for CoAtNet a ``.weights.h5`` or
            ``.keras`` file of ``coatnet_0`` with ``features=True``).
            ``zoo.create(name, weights=...)`` instead loads a whole saved PosENet.
        tap_layers: layers to read; None reads every stage (:func:`default_tap_layers`).
        readout_layers: readout convolutions (1 in the paper's default).
        kernel_size: their kernel size (3 in the paper's default).
        feature_size: the grid every tap is resized to (28 in the paper's code).
        targets: the maps to predict, names from ``PATTERN_NAMES``.
        readout_filters: channels of hidden readout convolutions.
        readout_padding: zero padding before each readout convolution (0: none).
        name: the model's name; default ``"posenet_{backbone}"``.

    Returns:
        The :class:`PosENet`, whose only trainable weights are the readout's.
        Inputs go in as the backbone expects them: for VGG16 and ResNet50
        ``keras.applications.vgg16.preprocess_input`` /
        ``resnet50.preprocess_input`` of 0..255 pixels.

    Raises:
        ValueError: for an unknown backbone or invalid readout arguments.
        ConnectionError: ``backbone_weights="imagenet"`` and the download
            failed (e.g. no network); the message says what to do offline.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc import zoo
        >>> posenet = zoo.create("posenet_vgg16", input_shape=(32, 32, 3), feature_size=8)
        >>> posenet.tap_layers[-1], posenet.output_shape
        ('block5_conv3', (None, 32, 32, 5))
        >>> sum(int(np.prod(w.shape)) for w in posenet.trainable_weights)  # 3*3*1472*5 + 5
        66245
    """
    if backbone not in BACKBONES:
        raise ValueError(
            f"build_posenet: `backbone` must be one of {', '.join(map(repr, BACKBONES))}; "
            f"received backbone={backbone!r}"
        )
    shape = tuple(input_shape)
    if len(shape) != 3 or not all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in shape
    ):
        raise ValueError(
            "build_posenet: `input_shape` must be (height, width, channels) of positive ints; "
            f"received input_shape={input_shape!r}"
        )
    network = posenet_backbone(backbone, tuple(int(v) for v in shape), backbone_weights)
    return PosENet(
        network,
        tap_layers=tap_layers,
        readout_layers=readout_layers,
        kernel_size=kernel_size,
        feature_size=feature_size,
        targets=targets,
        readout_filters=readout_filters,
        readout_padding=readout_padding,
        name=name or f"posenet_{backbone}",
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class PosENetConfig(ZooConfig):
    """A named PosENet: :func:`build_posenet`'s arguments (its docstring says what each
    does), with its defaults; ``backbone`` is checked when made."""

    # The frozen backbone, its input and where the readout taps it.
    backbone: str = "vgg16"
    input_shape: tuple[int, ...] = (224, 224, 3)
    backbone_weights: str | None = None
    tap_layers: tuple[str, ...] | None = None
    # The trained readout and what it decodes.
    readout_layers: int = 1
    kernel_size: int = 3
    feature_size: int = 28
    targets: tuple[str, ...] = PATTERN_NAMES
    readout_filters: int = 64
    readout_padding: int = 0
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(type(self).__name__, "backbone", self.backbone, BACKBONES)


#: Every registered PosENet: zoo name -> :class:`PosENetConfig`.
CONFIGS: dict[str, PosENetConfig] = by_name(
    PosENetConfig(zoo_name=f"posenet_{backbone}", backbone=backbone) for backbone in BACKBONES
)
_DESCRIPTIONS = {
    "vgg16": "PosENet on VGG16 (keras.applications, weights=None), 5 stages, 224 x 224",
    "resnet50": "PosENet on ResNet50 (keras.applications, weights=None), 4 stages, 224 x 224",
    "coatnet_0": "PosENet on the zoo's CoAtNet-0 (features mode), 5 stages, 224 x 224",
}
for _name, _config in CONFIGS.items():
    register_model(
        _name,
        build_posenet,
        family="posenet",
        config=_config,
        description=_DESCRIPTIONS[_config.backbone],
        reference=REFERENCE,
    )
