"""PosENet: a readout trained to decode absolute position from a frozen network's features."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.layers.padding import SpatialPadding2D
from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns

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


def default_tap_layers(backbone: keras.Model) -> list[str]:
    """The layers PosENet reads by default: each stage's output.

    Known for ``keras.applications`` VGG16/VGG19 and ResNet50/101/152 (by model
    name) and for :func:`~keras_posenc.probe.probe_backbone` (the last
    ``stage{s}_conv{j}`` of each stage).

    Raises:
        ValueError: for any other backbone; pass ``tap_layers`` explicitly then.
    """
    if backbone.name in KNOWN_TAP_LAYERS:
        return list(KNOWN_TAP_LAYERS[backbone.name])
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
        f"{', '.join(sorted(KNOWN_TAP_LAYERS))} and probe_backbone)"
    )


def _positive_int(value: Any, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"PosENet: `{argument}` must be a positive int; received {value!r}")
    return int(value)


@keras.saving.register_keras_serializable(package="keras_posenc")
class PosENet(keras.Model):
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
        readout_layers = _positive_int(readout_layers, "readout_layers")
        kernel_size = _positive_int(kernel_size, "kernel_size")
        feature_size = _positive_int(feature_size, "feature_size")
        readout_filters = _positive_int(readout_filters, "readout_filters")
        if isinstance(readout_padding, bool) or not isinstance(readout_padding, int | np.integer):
            raise ValueError(
                f"PosENet: `readout_padding` must be a non-negative int; received "
                f"{readout_padding!r}"
            )
        targets = [targets] if isinstance(targets, str) else list(targets)
        unknown = [t for t in targets if t not in PATTERN_NAMES]
        if not targets or unknown or len(set(targets)) != len(targets):
            raise ValueError(
                f"PosENet: `targets` must be distinct names from {list(PATTERN_NAMES)}; "
                f"received {targets!r}"
            )
        shape = self._image_shape(backbone, image_shape)
        remaining = feature_size - readout_layers * (kernel_size - 1 - 2 * int(readout_padding))
        if readout_padding < 0 or remaining < 1:
            raise ValueError(
                f"PosENet: {readout_layers} readout convolution(s) of kernel {kernel_size} with "
                f"readout_padding={readout_padding} leave no output of a {feature_size} x "
                f"{feature_size} feature grid; enlarge feature_size"
            )

        inputs = keras.Input(shape, name="images")
        if backbone is None:
            tap_layers, taps = [], [inputs]
        else:
            tap_layers = self._tap_names(backbone, tap_layers)
            backbone.trainable = False
            extractor = keras.Model(
                backbone.inputs,
                [backbone.get_layer(name).output for name in tap_layers],
                name=f"{backbone.name}_taps",
            )
            taps = keras.tree.flatten(extractor(inputs))
        resized = [
            keras.layers.Resizing(
                feature_size, feature_size, interpolation="bilinear", name=f"resize_{index}"
            )(tap)
            for index, tap in enumerate(taps)
        ]
        if len(resized) > 1:
            x = keras.layers.Concatenate(axis=-1, name="features")(resized)
        else:
            x = keras.layers.Identity(name="features")(resized[0])
        for index in range(readout_layers):
            last = index == readout_layers - 1
            if readout_padding:
                x = SpatialPadding2D(int(readout_padding), name=f"readout_pad_{index}")(x)
            x = keras.layers.Conv2D(
                len(targets) if last else readout_filters,
                kernel_size,
                padding="valid",
                activation=None if last else "relu",
                name=f"readout_conv_{index}",
            )(x)
        x = keras.layers.Activation("sigmoid", name="sigmoid")(x)
        outputs = keras.layers.Resizing(
            shape[0], shape[1], interpolation="bilinear", name="position_maps"
        )(x)
        super().__init__(inputs, outputs, name=kwargs.pop("name", "posenet"), **kwargs)

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


def target_maps(model: PosENet, count: int) -> np.ndarray:
    """The targets ``model`` predicts, ``(count, height, width, targets)`` float32."""
    height, width = model.image_shape[:2]
    maps = position_patterns(height, width)
    stacked = np.stack([maps[name] for name in model.target_names], axis=-1)
    return np.broadcast_to(stacked[None], (count, *stacked.shape)).astype(np.float32)


def _check_images(model: PosENet, images: Any, who: str) -> np.ndarray:
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or tuple(images.shape[1:]) != tuple(model.image_shape):
        raise ValueError(
            f"{who}: `images` must have shape (count, {', '.join(map(str, model.image_shape))}); "
            f"received {images.shape}"
        )
    return images


def train(
    model: PosENet,
    images: Any,
    epochs: int = 10,
    batch_size: int = 16,
    learning_rate: float = 1e-2,
    optimizer: keras.optimizers.Optimizer | None = None,
    verbose: str | int = "auto",
) -> keras.callbacks.History:
    """Trains PosENet's readout with ``fit``: pixel-wise MSE against the position targets.

    The targets do not depend on the image, so they are the same
    :func:`~keras_posenc.probe.position_patterns` for every image. The
    backbone stays frozen; only the readout learns.

    Args:
        model: a :class:`PosENet`.
        images: ``(count, height, width, channels)`` training images.
        epochs: passes over ``images``.
        batch_size: images per step.
        learning_rate: of the default optimizer.
        optimizer: default Adam (the paper uses SGD with momentum 0.9 for 15
            epochs on DUT-S; Adam reaches a stable readout in fewer steps on CPU).
        verbose: ``fit``'s verbosity; ``"auto"`` shows a progress bar.

    Returns:
        The ``keras.callbacks.History`` of ``fit``.

    Examples:

        >>> from keras_posenc import probe
        >>> net = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=2, width=4)
        >>> posenet = probe.PosENet(net, feature_size=8, targets=["H"])
        >>> images = probe.content_free_images("noise", 4, 16, 16)
        >>> history = probe.train(posenet, images, epochs=2, verbose=0)
        >>> len(history.history["loss"])
        2
    """
    images = _check_images(model, images, "probe.train")
    model.compile(optimizer=optimizer or keras.optimizers.Adam(learning_rate), loss="mse")
    return model.fit(
        images,
        target_maps(model, len(images)),
        epochs=epochs,
        batch_size=batch_size,
        verbose=verbose,
    )


def evaluate(
    model: PosENet, images: Any, batch_size: int = 16, verbose: str | int = "auto"
) -> dict[str, dict[str, float | bool]]:
    """SPC and MAE of PosENet's predicted maps for each target.

    Args:
        model: a :class:`PosENet`.
        images: ``(count, height, width, channels)`` test images.
        batch_size: images per prediction step.
        verbose: ``predict``'s verbosity; ``"auto"`` shows a progress bar.

    Returns:
        ``{target: {"spc": float, "mae": float, "constant": bool}}``, where
        ``constant`` flags that some predicted map was constant and scored SPC 0.

    Examples:

        >>> from keras_posenc import probe
        >>> alone = probe.PosENet(None, image_shape=(16, 16, 1), feature_size=8, targets=["H"])
        >>> grey = probe.content_free_images("grey", 2, 16, 16, channels=1)
        >>> probe.evaluate(alone, grey, verbose=0)["H"]["constant"]
        True
    """
    images = _check_images(model, images, "probe.evaluate")
    predictions = np.asarray(model.predict(images, batch_size=batch_size, verbose=verbose))
    targets = position_patterns(*model.image_shape[:2])
    results: dict[str, dict[str, float | bool]] = {}
    for channel, name in enumerate(model.target_names):
        value, flagged = spc(predictions[..., channel], targets[name], return_flag=True)
        results[name] = {
            "spc": value,
            "mae": mae(predictions[..., channel], targets[name]),
            "constant": flagged,
        }
    return results
