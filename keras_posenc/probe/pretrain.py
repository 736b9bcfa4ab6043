"""Train a probe backbone from scratch on a task that needs no position, then probe it frozen.

Islam et al. probe networks trained on ImageNet. Without pretrained weights
(and without a network connection for data), the closest offline analogue is a
network trained from scratch on a synthetic task in which position plays no
part: classify the orientation of a texture that fills the whole image (a
grating mixed with uniform noise, statistically the same at every position).
Any absolute position the trained network then encodes comes from its
architecture (the padding), not from the task.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from keras_posenc.layers._checks import check_int

GRATING_ORIENTATIONS = 4  # 0, 45, 90 and 135 degrees


def grating_images(count: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Orientation-classification images in which nothing depends on position.

    Each image is ``a * grating + (1 - a) * noise``: a grey-level grating
    ``0.5 + 0.5 cos(2 pi f (x cos t + y sin t) + phase)`` over the whole image,
    with ``t`` one of four orientations (0, 45, 90, 135 degrees: the label),
    ``f`` uniform in 0.08 to 0.2 cycles per pixel and a uniform random phase,
    mixed with uniform noise in ``[0, 1)`` (independent per channel) at a
    contrast ``a`` uniform in 0.15 to 0.5. The texture is stationary: every
    position has the same distribution, so the label says nothing about where
    anything is.

    Args:
        count: images, at least 1.
        size: side of the square images, at least 8.
        seed: numpy seed; same seed, same images.

    Returns:
        ``(images, labels)``: float32 ``(count, size, size, 3)`` in ``[0, 1)``
        and int32 ``(count,)`` in ``0 .. 3``.

    Raises:
        ValueError: for a count below 1 or a size below 8.

    Examples:

        >>> from keras_posenc.probe.pretrain import grating_images
        >>> images, labels = grating_images(4, 16, seed=1)
        >>> images.shape, labels.shape, set(labels.tolist()) <= {0, 1, 2, 3}
        ((4, 16, 16, 3), (4,), True)
    """
    for argument, value, least in (("count", count, 1), ("size", size, 8)):
        check_int("probe.grating_images", argument, value, least)
    rng = np.random.default_rng(seed)
    noise = rng.random((count, size, size, 3))
    labels = rng.integers(0, GRATING_ORIENTATIONS, count).astype(np.int32)
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    images = np.empty((count, size, size, 3), np.float32)
    for index in range(count):
        angle = labels[index] * np.pi / GRATING_ORIENTATIONS
        frequency = rng.uniform(0.08, 0.2)
        phase = rng.uniform(0.0, 2.0 * np.pi)
        contrast = rng.uniform(0.15, 0.5)
        grating = 0.5 + 0.5 * np.cos(
            2.0 * np.pi * frequency * (x * np.cos(angle) + y * np.sin(angle)) + phase
        )
        images[index] = contrast * grating[..., None] + (1.0 - contrast) * noise[index]
    return images, labels


def pretrain_backbone(
    backbone: keras.Model,
    images: int = 1024,
    epochs: int = 3,
    batch_size: int = 16,
    learning_rate: float = 1e-3,
    seed: int = 0,
    verbose: Any = 0,
) -> float:
    """Trains ``backbone`` in place on :func:`grating_images`; returns held-out accuracy.

    A global average pool and a dense classifier go on top of the backbone's
    output; Adam minimises the cross-entropy over ``images`` training images of
    the backbone's input size (drawn from ``seed``), batches in order. The
    backbone's weights change in place (freeze it afterwards to probe it); the
    classifier is discarded.

    Args:
        backbone: a ``keras.Model`` with one square image input of known size.
        images: training images.
        epochs: passes over them.
        batch_size: images per step.
        learning_rate: Adam's.
        seed: seed of the images (the held-out images use ``seed + 1``).
        verbose: ``fit``'s verbosity.

    Returns:
        The classification accuracy on 256 held-out images (chance: 0.25).

    Examples:

        >>> from keras_posenc import probe
        >>> net = probe.probe_backbone("zeros", input_shape=(16, 16, 3), stages=1, width=4)
        >>> accuracy = probe.pretrain_backbone(net, images=32, epochs=1)
        >>> 0.0 <= accuracy <= 1.0
        True
    """
    size = int(backbone.inputs[0].shape[1])
    classifier = keras.Model(
        backbone.inputs,
        keras.layers.Dense(
            GRATING_ORIENTATIONS,
            kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
            name="pretrain_logits",
        )(keras.layers.GlobalAveragePooling2D(name="pretrain_pool")(backbone.outputs[0])),
        name=f"{backbone.name}_pretrain",
    )
    classifier.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    train_images, train_labels = grating_images(images, size, seed=seed)
    classifier.fit(
        train_images,
        train_labels,
        batch_size=batch_size,
        epochs=epochs,
        shuffle=False,
        verbose=verbose,
    )
    test_images, test_labels = grating_images(256, size, seed=seed + 1)
    logits = np.asarray(classifier.predict(test_images, batch_size=64, verbose=0))
    return float(np.mean(np.argmax(logits, axis=-1) == test_labels))
