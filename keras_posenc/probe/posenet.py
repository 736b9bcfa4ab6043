"""PosENet: a readout trained to decode absolute position from a frozen network's features.

The model class :class:`PosENet` (with :func:`default_tap_layers` and
``KNOWN_TAP_LAYERS``) lives in :mod:`keras_posenc.zoo.posenet`, where the zoo
registers it on VGG16, ResNet50 and CoAtNet-0; it is re-exported here. This
module adds what the probe needs around it: the targets a model predicts, and
training and evaluation helpers.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import position_patterns
from keras_posenc.probe.readout import default_learning_rate, feature_statistics
from keras_posenc.zoo.posenet import PosENet


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
    learning_rate: float | None = None,
    optimizer: keras.optimizers.Optimizer | None = None,
    verbose: str | int = "auto",
) -> keras.callbacks.History:
    """Trains PosENet's readout with ``fit``: pixel-wise MSE against the position targets.

    The backbone is frozen, so its features are computed once
    (:meth:`~keras_posenc.probe.PosENet.feature_model`) and ``fit`` trains
    :meth:`~keras_posenc.probe.PosENet.readout_model`, which shares the
    model's weights. Before fitting, the model's ``FeatureStandardization``
    layer is set to the training features' per-channel mean and inverse
    standard deviation (:func:`~keras_posenc.probe.readout.feature_statistics`):
    raw features of random networks are all positive and differ ~50 x in scale
    between stages, which otherwise drives Adam into the sigmoid's flat tails
    and gives constant maps. The targets do not depend on the image: the same
    :func:`~keras_posenc.probe.position_patterns` for every image.

    Args:
        model: a :class:`PosENet`.
        images: ``(count, height, width, channels)`` training images.
        epochs: passes over ``images``.
        batch_size: images per step.
        learning_rate: of the default optimizer; None scales it with the first
            readout convolution's fan-in
            (:func:`~keras_posenc.probe.readout.default_learning_rate`).
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
    features = np.asarray(
        model.feature_model().predict(images, batch_size=batch_size, verbose=0), np.float32
    )
    model.get_layer("feature_standardization").set_statistics(
        *feature_statistics(features, model.readout_padding)
    )
    if optimizer is None:
        if learning_rate is None:
            learning_rate = default_learning_rate(model.kernel_size, features.shape[-1])
        optimizer = keras.optimizers.Adam(learning_rate)
    readout = model.readout_model()
    readout.compile(optimizer=optimizer, loss="mse")
    return readout.fit(
        features,
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
