"""A small VGG-like backbone whose padding mode is its only possible source of position."""

from __future__ import annotations

import keras
import numpy as np

from keras_posenc.layers._checks import check_int
from keras_posenc.layers.padding import PADDING_MODES, SpatialPadding2D

BACKBONE_PADDINGS = (*PADDING_MODES, "valid")


def _positive_int(value: object, argument: str) -> int:
    return check_int("probe.probe_backbone", argument, value, 1)


def probe_tap_layers(stages: int, convs_per_stage: int = 2) -> list[str]:
    """Names of the last convolution of each stage of a :func:`probe_backbone`."""
    return [f"stage{stage}_conv{convs_per_stage}" for stage in range(1, stages + 1)]


def probe_backbone(
    padding: str = "zeros",
    input_shape: tuple[int, int, int] = (64, 64, 3),
    stages: int = 3,
    width: int = 16,
    convs_per_stage: int = 2,
    kernel_size: int = 3,
    seed: int | None = 0,
    name: str | None = None,
) -> keras.Model:
    """A VGG-like convolutional network in which the padding mode is the only source of position.

    Every convolution has ``'valid'`` padding and, unless ``padding="valid"``,
    is preceded by a :class:`~keras_posenc.layers.SpatialPadding2D` of
    ``kernel_size // 2`` pixels in the chosen mode, so the feature maps keep
    their size ("same" convolution) and the border is the only thing that
    differs between positions. Stage ``s`` has ``convs_per_stage``
    convolutions of ``width * 2 ** (s - 1)`` filters with ReLU, named
    ``stage{s}_conv{j}``; stages are separated by 2 x 2 max pooling. With
    ``"circular"`` padding (or ``"valid"``) every layer is shift-equivariant,
    so on content-free inputs the features hold no absolute position.

    Weights are drawn with numpy (He-normal kernels, zero biases) from
    ``seed``, so the same seed gives the same network on every backend; with
    ``seed=None`` they come from fresh entropy. Freeze the network for a
    random-features probe, or train it like any ``keras.Model``.

    Args:
        padding: ``"zeros"``, ``"circular"``, ``"reflect"``, ``"replicate"``
            or ``"valid"`` (no padding: maps shrink by ``kernel_size - 1`` per
            convolution).
        input_shape: ``(height, width, channels)`` of the images.
        stages: number of stages.
        width: filters of the first stage; doubled at each later stage.
        convs_per_stage: convolutions per stage.
        kernel_size: odd kernel size of every convolution.
        seed: seed of the weights, or None.
        name: the model's name; default ``"probe_backbone_{padding}"``.

    Returns:
        A functional ``keras.Model``; :func:`probe_tap_layers` names each
        stage's output (PosENet finds them by itself).

    Raises:
        ValueError: for an unknown padding, a non-positive size, an even
            kernel, or ``"valid"`` convolutions that would shrink the image to
            nothing.

    Examples:

        >>> from keras_posenc import probe
        >>> net = probe.probe_backbone("circular", input_shape=(32, 32, 3), width=8)
        >>> [tuple(net.get_layer(n).output.shape) for n in probe.probe_tap_layers(3)]
        [(None, 32, 32, 8), (None, 16, 16, 16), (None, 8, 8, 32)]
        >>> valid = probe.probe_backbone("valid", input_shape=(32, 32, 3), width=8)
        >>> tuple(valid.output.shape)
        (None, 1, 1, 32)
    """
    if padding not in BACKBONE_PADDINGS:
        raise ValueError(
            f"probe.probe_backbone: `padding` must be one of "
            f"{', '.join(map(repr, BACKBONE_PADDINGS))}; received padding={padding!r}"
        )
    stages = _positive_int(stages, "stages")
    width = _positive_int(width, "width")
    convs_per_stage = _positive_int(convs_per_stage, "convs_per_stage")
    kernel_size = _positive_int(kernel_size, "kernel_size")
    if kernel_size % 2 == 0:
        raise ValueError(
            "probe.probe_backbone: `kernel_size` must be odd, so 'same' padding is symmetric; "
            f"received kernel_size={kernel_size}"
        )
    if len(tuple(input_shape)) != 3:
        raise ValueError(
            "probe.probe_backbone: `input_shape` must be (height, width, channels); "
            f"received input_shape={input_shape!r}"
        )
    for index, argument in enumerate(("input_shape[0]", "input_shape[1]", "input_shape[2]")):
        _positive_int(input_shape[index], argument)

    inputs = keras.Input(tuple(int(v) for v in input_shape), name="images")
    x = inputs
    size = min(int(input_shape[0]), int(input_shape[1]))
    for stage in range(1, stages + 1):
        filters = width * 2 ** (stage - 1)
        if stage > 1:
            x = keras.layers.MaxPooling2D(2, name=f"stage{stage - 1}_pool")(x)
            size //= 2
        for conv in range(1, convs_per_stage + 1):
            if padding != "valid":
                pad = SpatialPadding2D(
                    kernel_size // 2, mode=padding, name=f"stage{stage}_pad{conv}"
                )
                x = pad(x)
            else:
                size -= kernel_size - 1
            if size < 1:
                raise ValueError(
                    f"probe.probe_backbone: with padding='valid', stage {stage} conv {conv} "
                    f"would shrink the {tuple(input_shape[:2])} input to nothing; use a larger "
                    "input, fewer stages or fewer convolutions"
                )
            x = keras.layers.Conv2D(
                filters,
                kernel_size,
                padding="valid",
                activation="relu",
                # Replaced by _initialise's numpy draw (identical on every backend).
                kernel_initializer="zeros",
                name=f"stage{stage}_conv{conv}",
            )(x)
    model = keras.Model(inputs, x, name=name or f"probe_backbone_{padding}")
    _initialise(model, seed)
    return model


def _initialise(model: keras.Model, seed: int | None) -> None:
    """He-normal kernels and zero biases from numpy, identical on every backend."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kernel_shape = tuple(layer.kernel.shape)
            fan_in = int(np.prod(kernel_shape[:-1]))
            kernel = rng.standard_normal(kernel_shape) * np.sqrt(2.0 / fan_in)
            layer.set_weights([kernel.astype("float32"), np.zeros(kernel_shape[-1], "float32")])
