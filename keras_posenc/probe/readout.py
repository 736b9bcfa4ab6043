"""PosENet readouts fitted on features computed once: least squares, or trained like the paper's.

A frozen backbone gives the same features at every training step, so the
experiments compute them once (:meth:`~keras_posenc.probe.PosENet.feature_model`)
and fit only the readout:

- :class:`LinearReadout`: one k x k 'valid' convolution in closed form (ridge
  least squares in numpy): fast, deterministic, no sigmoid;
- :class:`TrainedReadout`: PosENet's own readout (``readout_layers``
  convolutions, sigmoid, bilinear upsampling to the image) trained with Adam on
  pixel-wise MSE, as the paper trains it (it uses SGD; see :func:`~keras_posenc.probe.train`).

Both read the features exactly as a :class:`~keras_posenc.probe.PosENet`
readout does, including ``readout_padding`` (zeros around the raw features).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc.probe.patterns import position_patterns
from keras_posenc.zoo.posenet import PATTERN_NAMES, PosENet

# Features whose spread over the training set is below this fraction of the mean feature
# magnitude count as constant: float rounding in a feature that should be constant (a
# circular network on a grey image) must not be read as position.
CONSTANT_FEATURE = 1e-4


def _patches(features: np.ndarray, kernel_size: int) -> np.ndarray:
    """``(n, h, w, c)`` -> ``(n, h-k+1, w-k+1, k*k*c)``: the inputs of a 'valid' k x k conv."""
    windows = np.lib.stride_tricks.sliding_window_view(
        features, (kernel_size, kernel_size), axis=(1, 2)
    )
    count, rows, cols = windows.shape[:3]
    return windows.reshape(count, rows, cols, -1)


def _zero_pad(features: np.ndarray, padding: int) -> np.ndarray:
    if not padding:
        return features
    return np.pad(features, ((0, 0), (padding, padding), (padding, padding), (0, 0)))


def default_learning_rate(kernel_size: int, channels: int) -> float:
    """Adam's learning rate for a readout: ``0.1 / sqrt(kernel_size**2 * channels)``.

    Adam moves every weight by about the learning rate per step, so a fixed
    rate moves the output of a wide readout (VGG16: 13,248 inputs per output)
    far more than a narrow one (the image alone: 27) and saturates the sigmoid;
    scaling by the first convolution's fan-in keeps the first steps alike.
    """
    return 0.1 / math.sqrt(kernel_size**2 * channels)


def feature_statistics(features: Any, padding: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and inverse standard deviation of features, for standardising them.

    Computed over ``features`` ``(n, h, w, c)`` after ``padding`` zeros around
    each map (what a zero-padded first readout convolution reads). Channels
    whose spread is below ``1e-4`` times the mean feature magnitude count as
    constant and get an inverse scale of 0, so float rounding in a feature
    that should be constant is not read as position.

    Returns:
        ``(mean, inverse_scale)``, two float32 vectors of length ``c``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.probe.readout import feature_statistics
        >>> features = np.stack([np.full((2, 2, 2), v) for v in (1.0, 3.0)])
        >>> features[..., 1] = 7.0  # a constant channel
        >>> mean, inverse_scale = feature_statistics(features)
        >>> mean.tolist(), inverse_scale.tolist()
        ([2.0, 7.0], [1.0, 0.0])
    """
    features = np.asarray(features, np.float32)
    # Moments image by image in float64: a float64 copy of all features (ResNet50: 3840
    # channels) would need gigabytes.
    total = squares = magnitude = 0.0
    for image in features:
        flat = _zero_pad(image[None].astype(np.float64), padding)
        flat = flat.reshape(-1, flat.shape[-1])
        total = total + flat.sum(axis=0)
        squares = squares + (flat**2).sum(axis=0)
        magnitude += np.abs(flat).sum()
    count = len(features) * flat.shape[0]
    mean = total / count
    spread = np.sqrt(np.maximum(squares / count - mean**2, 0.0))
    varies = spread > CONSTANT_FEATURE * (magnitude / (count * flat.shape[1]) + 1e-12)
    inverse_scale = np.where(varies, 1.0 / np.maximum(spread, 1e-30), 0.0)
    return mean.astype(np.float32), inverse_scale.astype(np.float32)


class LinearReadout:
    """A k x k 'valid' convolution fitted by ridge-regularised least squares.

    Features that do not vary over the training set (standard deviation below
    ``1e-4`` times the mean feature magnitude) are dropped before fitting, so
    float rounding in a feature that should be constant is not read as signal;
    if none vary, the readout predicts the mean target (a constant map, which
    :func:`~keras_posenc.probe.spc` flags). The other features are standardised
    (a reparameterisation: the fitted function is still a convolution of the
    raw features).

    Args:
        kernel_size: side of the convolution.
        ridge: the ridge penalty on the standardised features.
        padding: zeros around the raw features before the convolution (0: a
            'valid' readout that adds no position of its own).

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.probe import LinearReadout
        >>> features = np.random.default_rng(0).random((4, 6, 6, 2))
        >>> targets = features[:, 1:-1, 1:-1, :1] * 2.0 + 1.0  # the centre tap of channel 0
        >>> readout = LinearReadout(kernel_size=3, ridge=0.0).fit(features, targets)
        >>> bool(np.allclose(readout.predict(features), targets))
        True
    """

    def __init__(self, kernel_size: int = 3, ridge: float = 1e-3, padding: int = 0) -> None:
        self.kernel_size = kernel_size
        self.ridge = ridge
        self.padding = padding

    def fit(self, features: np.ndarray, targets: np.ndarray) -> LinearReadout:
        """``features`` ``(n, h, w, c)``; ``targets`` ``(n, h+2p-k+1, w+2p-k+1, t)``.

        The normal equations are accumulated image by image, so memory stays at
        one image's patches whatever the number of images.
        """
        gram = cross = total = target_total = None
        count = 0
        for image, goal in zip(features, targets):
            x = _patches(_zero_pad(image[None].astype(np.float64), self.padding), self.kernel_size)
            x = x.reshape(-1, x.shape[-1])
            y = np.asarray(goal, dtype=np.float64).reshape(-1, goal.shape[-1])
            if gram is None:
                gram, cross = x.T @ x, x.T @ y
                total, target_total = x.sum(axis=0), y.sum(axis=0)
            else:
                gram += x.T @ x
                cross += x.T @ y
                total += x.sum(axis=0)
                target_total += y.sum(axis=0)
            count += len(x)
        self.mean, self.offset = total / count, target_total / count
        covariance = gram / count - np.outer(self.mean, self.mean)
        self.scale = np.sqrt(np.maximum(np.diag(covariance), 0.0))
        self.keep = self.scale > CONSTANT_FEATURE * (np.abs(self.mean).mean() + 1e-12)
        if not self.keep.any():
            self.weights = np.zeros((0, cross.shape[1]))
            return self
        keep, scale = self.keep, self.scale[self.keep]
        # Standardised features: correlation matrix plus ridge; cross-covariance with targets.
        normal = covariance[np.ix_(keep, keep)] / np.outer(scale, scale)
        normal += self.ridge * np.eye(len(normal))
        cross_covariance = cross[keep] / count - np.outer(self.mean[keep], self.offset)
        self.weights = np.linalg.solve(normal, cross_covariance / scale[:, None])
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        """The readout's maps ``(n, h+2p-k+1, w+2p-k+1, t)`` for ``features`` ``(n, h, w, c)``."""
        x = _patches(_zero_pad(features.astype(np.float64), self.padding), self.kernel_size)
        shape = x.shape[:3]
        z = (x[..., self.keep] - self.mean[self.keep]) / self.scale[self.keep]
        return (z @ self.weights + self.offset).reshape(*shape, -1)


class TrainedReadout:
    """PosENet's readout trained by Adam on pixel-wise MSE, on features computed once.

    The readout is :meth:`PosENet.readout_model` of a backbone-free
    ``PosENet(None, image_shape=(height, width, channels), feature_size=...)``:
    its input is a ``(feature_size, feature_size, channels)`` feature grid, its
    output the sigmoid maps upsampled to ``height x width``, and the loss is
    taken there, as in the paper. It is built and compiled once and refitted
    from fresh weights by every :meth:`fit` (same feature shape, any data), so
    a study of many networks compiles it once.

    The features are standardised per channel with the training features'
    mean and standard deviation (channels that do not vary, as in
    :class:`LinearReadout`, are zeroed). Random networks give channels of very
    different scales (VGG16's first stage is ~50 x its last) and all of them
    positive after ReLU, which drives Adam's first steps into the sigmoid's flat
    tails; standardising is an affine reparameterisation of the first
    convolution, so the readout can express the same maps. ``readout_padding``
    pads the raw features with zeros before they are standardised, exactly
    what a zero-padded first convolution of PosENet sees; for that reason it
    is supported with one readout layer only.

    Initial weights are drawn with numpy from ``seed`` (Glorot-uniform kernels,
    zero biases) and batches are taken in order, so a fit is the same on every
    run of a backend.

    Args:
        channels: feature channels.
        image_size: ``(height, width)`` of the images, the size of the output maps.
        feature_size: side of the feature grid.
        targets: target names, one output channel each.
        readout_layers: convolutions (all but the last with ``readout_filters`` and ReLU).
        kernel_size: their kernel size.
        readout_filters: channels of the hidden convolutions.
        readout_padding: zeros around the raw features (one readout layer only).
        steps: optimizer steps per fit (batches taken in order, cycling over the data).
        batch_size: features per step.
        learning_rate: Adam's; None scales it with the first convolution's fan-in,
            ``0.1 / sqrt(kernel_size**2 * channels)``: Adam moves every weight by
            about the learning rate per step, so a fixed rate moves the output of
            a wide readout (VGG16: 13,248 inputs per output) far more than a
            narrow one (the image alone: 27) and saturates the sigmoid.

    Raises:
        ValueError: for ``readout_padding`` with more than one readout layer.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc import probe
        >>> net = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=2, width=4)
        >>> posenet = probe.PosENet(net, feature_size=8, targets=["H"])
        >>> images = probe.content_free_images("noise", 8, 16, 16)
        >>> features = np.asarray(posenet.feature_model().predict(images, verbose=0))
        >>> readout = probe.TrainedReadout(12, (16, 16), 8, targets=["H"], steps=20)
        >>> readout.fit(features).predict(features).shape
        (8, 16, 16, 1)
    """

    def __init__(
        self,
        channels: int,
        image_size: Sequence[int],
        feature_size: int,
        targets: Sequence[str] = PATTERN_NAMES,
        readout_layers: int = 1,
        kernel_size: int = 3,
        readout_filters: int = 64,
        readout_padding: int = 0,
        steps: int = 150,
        batch_size: int = 8,
        learning_rate: float | None = None,
    ) -> None:
        if readout_padding and readout_layers != 1:
            raise ValueError(
                "TrainedReadout: `readout_padding` pads the raw features of the first "
                f"convolution, so it needs readout_layers=1; received readout_layers="
                f"{readout_layers!r}, readout_padding={readout_padding!r}"
            )
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.targets = tuple(targets)
        self.padding = int(readout_padding)
        self.steps, self.batch_size = int(steps), int(batch_size)
        # The zero padding happens in numpy on the raw features (see the class docstring), so
        # the Keras readout sees a grid 2 * padding larger and pads nothing itself.
        self.posenet = PosENet(
            None,
            image_shape=(*self.image_size, int(channels)),
            feature_size=int(feature_size) + 2 * self.padding,
            targets=self.targets,
            readout_layers=readout_layers,
            kernel_size=kernel_size,
            readout_filters=readout_filters,
            name="trained_readout",
        )
        self.model = self.posenet.readout_model()
        if learning_rate is None:
            learning_rate = default_learning_rate(kernel_size, int(channels))
        self.learning_rate = float(learning_rate)
        self.optimizer = keras.optimizers.Adam(self.learning_rate)
        self.model.compile(optimizer=self.optimizer, loss="mse")
        self.optimizer.build(self.model.trainable_variables)
        self._fresh_optimizer = [keras.ops.convert_to_numpy(v) for v in self.optimizer.variables]
        maps = position_patterns(*self.image_size)
        self._targets = np.stack([maps[name] for name in self.targets], axis=-1)[None]

    def _initialise(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        for variable in self.model.trainable_variables:
            shape = tuple(variable.shape)
            if len(shape) == 4:  # Glorot uniform over the receptive field, as Keras' Conv2D
                receptive = shape[0] * shape[1]
                limit = math.sqrt(6.0 / (receptive * (shape[2] + shape[3])))
                variable.assign(rng.uniform(-limit, limit, shape).astype("float32"))
            else:
                variable.assign(np.zeros(shape, "float32"))
        for variable, value in zip(self.optimizer.variables, self._fresh_optimizer):
            variable.assign(value)

    def _padded(self, features: np.ndarray) -> np.ndarray:
        # The readout's FeatureStandardization layer standardises after this padding.
        return _zero_pad(np.asarray(features, np.float32), self.padding)

    def fit(self, features: Any, seed: int = 0) -> TrainedReadout:
        """Fits fresh readout weights to ``features`` ``(n, size, size, channels)``."""
        features = np.asarray(features, np.float32)
        self.mean, self.inverse_scale = feature_statistics(features, self.padding)
        self.posenet.get_layer("feature_standardization").set_statistics(
            self.mean, self.inverse_scale
        )
        self._initialise(seed)
        inputs = self._padded(features)
        count, size = len(inputs), self.batch_size
        target = np.broadcast_to(self._targets, (max(size, 2), *self._targets.shape[1:]))

        def batches() -> Any:
            # Exactly `steps` batches in order, cycling over the data: one epoch, so a fit on
            # one image does not pay Keras' per-epoch overhead `steps` times.
            while True:
                for start in range(0, count, size):
                    batch = inputs[start : start + size]
                    if len(batch) == 1:
                        # The same image twice: the same mean loss and gradient, and PyTorch's
                        # CPU convolution cannot take the weight gradient of a one-image batch
                        # with one output channel ("slow_conv2d: grad_weight must be contiguous").
                        batch = np.concatenate([batch, batch])
                    yield batch, target[: len(batch)]

        self.model.fit(batches(), steps_per_epoch=self.steps, epochs=1, shuffle=False, verbose=0)
        return self

    def predict(self, features: Any) -> np.ndarray:
        """The predicted maps ``(n, height, width, targets)`` in ``[0, 1]``."""
        scaled = self._padded(features)
        return np.asarray(self.model.predict(scaled, batch_size=self.batch_size, verbose=0))
