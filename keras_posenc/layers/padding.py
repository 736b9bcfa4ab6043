"""Spatial padding of images with zeros, circular wrap, reflection or edge replication."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

_CLASS = "SpatialPadding2D"
PADDING_MODES = ("zeros", "circular", "reflect", "replicate")


def _is_count(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 0


def normalize_padding(padding: Any, who: str = _CLASS) -> tuple[tuple[int, int], tuple[int, int]]:
    """``padding`` as ``((top, bottom), (left, right))`` of non-negative ints.

    Accepts what ``keras.layers.ZeroPadding2D`` accepts: one int (every side),
    a pair ``(rows, columns)`` (symmetric per axis), or
    ``((top, bottom), (left, right))``.

    Raises:
        ValueError: for anything else, naming ``who`` and the value received.
    """
    error = ValueError(
        f"{who}: `padding` must be a non-negative int, a pair (rows, columns) of them or "
        f"((top, bottom), (left, right)); received padding={padding!r}"
    )
    if _is_count(padding):
        return (int(padding), int(padding)), (int(padding), int(padding))
    if not isinstance(padding, list | tuple) or len(padding) != 2:
        raise error
    pairs = []
    for axis in padding:
        if _is_count(axis):
            pairs.append((int(axis), int(axis)))
        elif isinstance(axis, list | tuple) and len(axis) == 2 and all(_is_count(v) for v in axis):
            pairs.append((int(axis[0]), int(axis[1])))
        else:
            raise error
    return pairs[0], pairs[1]


def _slice(x: Any, axis: int, start: int | None, stop: int | None) -> Any:
    index = [slice(None)] * 4
    index[axis] = slice(start, stop)
    return x[tuple(index)]


@keras.saving.register_keras_serializable(package="keras_posenc")
class SpatialPadding2D(keras.layers.Layer):
    """Pads the two spatial axes of an image batch with zeros, wrap, reflection or edge copies.

    ``keras.layers.ZeroPadding2D`` only pads with zeros, and backends disagree
    on the other modes (TensorFlow has no circular padding, PyTorch's ``pad``
    has no reflect for some ranks). This layer builds the border from slices of
    the input joined with ``ops.concatenate`` (``ops.pad`` only for zeros), so
    every backend gives the same values, and gradients flow to the copied
    pixels. The modes are those of ``numpy.pad``:

    - ``"zeros"``: ``np.pad(mode="constant")`` — the border is 0;
    - ``"circular"``: ``mode="wrap"`` — the opposite edge continues the image
      (a convolution becomes exactly shift-equivariant on the torus);
    - ``"reflect"``: ``mode="reflect"`` — mirrored without repeating the edge
      pixel (``d c b | a b c d``);
    - ``"replicate"``: ``mode="edge"`` — the edge pixel repeated.

    Rows are padded first, then columns, so corners follow ``np.pad``.

    Args:
        padding: an int (every side), a pair ``(rows, columns)`` (both sides
            of an axis), or ``((top, bottom), (left, right))``; non-negative ints.
        mode: ``"zeros"``, ``"circular"``, ``"reflect"`` or ``"replicate"``.
            ``"circular"`` needs each padding <= the padded axis' size and
            ``"reflect"`` needs it < the size (there is nothing further to
            mirror); ``"replicate"`` and ``"zeros"`` take any padding.
        data_format: ``"channels_last"`` (``(batch, height, width, channels)``)
            or ``"channels_first"``; None means ``keras.config.image_data_format()``.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a rank-4 tensor in ``data_format``.

    Returns:
        The padded tensor, ``height + top + bottom`` rows and
        ``width + left + right`` columns, in the input's dtype.

    Raises:
        ValueError: for an unknown mode, malformed padding, a non rank-4 input,
            or (when the spatial size is known) a padding too large for the mode.

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc import layers
        >>> image = np.arange(1, 5, dtype="float32").reshape(1, 1, 4, 1)  # one row: 1 2 3 4
        >>> for mode in ("zeros", "circular", "reflect", "replicate"):
        ...     padded = layers.SpatialPadding2D(((0, 0), (2, 2)), mode=mode)(image)
        ...     print(mode, ops.convert_to_numpy(padded)[0, 0, :, 0].tolist())
        zeros [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0]
        circular [3.0, 4.0, 1.0, 2.0, 3.0, 4.0, 1.0, 2.0]
        reflect [3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0]
        replicate [1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 4.0, 4.0]
        >>> layers.SpatialPadding2D(1, mode="reflect").compute_output_shape((2, 28, 28, 3))
        (2, 30, 30, 3)

    Reference:
        - [Islam et al., 2020. How Much Position Information Do Convolutional
          Neural Networks Encode?](https://arxiv.org/abs/2001.08248)
        - [Kayhan and van Gemert, 2020. On Translation Invariance in CNNs:
          Convolutional Layers can Exploit Absolute Spatial
          Location](https://arxiv.org/abs/2003.07064)
    """

    def __init__(
        self,
        padding: int | tuple = 1,
        mode: str = "zeros",
        data_format: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if mode not in PADDING_MODES:
            raise ValueError(
                f"{self._who()}: `mode` must be one of {', '.join(map(repr, PADDING_MODES))}; "
                f"received mode={mode!r}"
            )
        self.mode = mode
        self.padding = normalize_padding(padding, self._who())
        data_format = keras.config.image_data_format() if data_format is None else data_format
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(
                f"{self._who()}: `data_format` must be 'channels_last', 'channels_first' or "
                f"None; received data_format={data_format!r}"
            )
        self.data_format = data_format
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def _who(self) -> str:
        return f"{_CLASS} '{self.name}'"

    def _spatial_axes(self) -> tuple[int, int]:
        return (1, 2) if self.data_format == "channels_last" else (2, 3)

    def _check_sizes(self, shape: Any) -> None:
        if self.mode not in ("circular", "reflect"):
            return
        for axis, (before, after), axis_name in zip(
            self._spatial_axes(), self.padding, ("height", "width")
        ):
            size = shape[axis]
            if size is None or not isinstance(size, int | np.integer):
                continue  # unknown until run time
            largest = max(before, after)
            if self.mode == "reflect" and largest >= size:
                raise ValueError(
                    f"{self._who()}: mode='reflect' needs padding < the input {axis_name} "
                    f"(there is nothing further to mirror); received padding {largest} for "
                    f"{axis_name} {size}"
                )
            if self.mode == "circular" and largest > size:
                raise ValueError(
                    f"{self._who()}: mode='circular' needs padding <= the input {axis_name}; "
                    f"received padding {largest} for {axis_name} {size}"
                )

    def build(self, input_shape: Any) -> None:
        self._check_sizes(tuple(input_shape))
        self.built = True

    def _pad_axis(self, x: Any, axis: int, before: int, after: int) -> Any:
        if before == 0 and after == 0:
            return x
        pieces = []
        if self.mode == "circular":
            if before:
                pieces.append(_slice(x, axis, -before, None))
            pieces.append(x)
            if after:
                pieces.append(_slice(x, axis, 0, after))
        elif self.mode == "reflect":
            if before:
                pieces.append(ops.flip(_slice(x, axis, 1, before + 1), axis=axis))
            pieces.append(x)
            if after:
                pieces.append(ops.flip(_slice(x, axis, -after - 1, -1), axis=axis))
        else:  # replicate
            if before:
                pieces.append(ops.repeat(_slice(x, axis, 0, 1), before, axis=axis))
            pieces.append(x)
            if after:
                pieces.append(ops.repeat(_slice(x, axis, -1, None), after, axis=axis))
        return ops.concatenate(pieces, axis=axis)

    def call(self, inputs: Any) -> Any:
        self._check_sizes(tuple(inputs.shape))
        if self.mode == "zeros":
            widths = [[0, 0]] * 4
            for axis, pair in zip(self._spatial_axes(), self.padding):
                widths[axis] = list(pair)
            return ops.pad(inputs, widths)
        x = inputs
        for axis, (before, after) in zip(self._spatial_axes(), self.padding):
            x = self._pad_axis(x, axis, before, after)
        return x

    def compute_output_shape(self, input_shape: Any) -> tuple:
        shape = list(input_shape)
        if len(shape) != 4:
            raise ValueError(
                f"{self._who()}: expected a rank-4 input shape; received {tuple(input_shape)}"
            )
        self._check_sizes(tuple(shape))
        for axis, (before, after) in zip(self._spatial_axes(), self.padding):
            if shape[axis] is not None:
                shape[axis] = shape[axis] + before + after
        return tuple(shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            padding=[list(pair) for pair in self.padding],
            mode=self.mode,
            data_format=self.data_format,
        )
        return config
