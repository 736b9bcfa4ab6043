"""ConvS2S building blocks: GLU convolutions, the ConvS2S attention and GradMultiply.

The layers of Gehring et al.'s convolutional sequence-to-sequence model, with
the semantics of the reference implementation (fairseq's ``fconv``): its
padding of even kernels, its initialisation, weight normalisation, the
``sqrt(0.5)`` scaling of every residual sum and the attention's context
scaling. Tensors are batch-major, ``(batch, time, channels)``; masks follow
Keras (``True`` = real token), fairseq's padding masks are their negation.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    SequenceChecks,
    check_bool,
    check_int,
    check_mask,
    check_rate,
    has_empty_axis,
    shape_of,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._specs import CachedSequenceSpec

__all__ = ["ConvS2SAttention", "GLUConv1D", "GradMultiply", "folded_weight_norm"]

_SQRT_HALF = math.sqrt(0.5)


def _optional_initializer(value: Any) -> Any:
    return None if value is None else keras.initializers.get(value)


def _serialize_initializer(value: Any) -> Any:
    return None if value is None else keras.initializers.serialize(value)


def _as_shape(value: Any) -> tuple | None:
    """``value`` as a shape tuple (ints and None), or None if it is not a shape."""
    try:
        shape = tuple(value)
    except TypeError:
        return None
    if all(
        d is None or (isinstance(d, int | np.integer) and not isinstance(d, bool)) for d in shape
    ):
        return tuple(None if d is None else int(d) for d in shape)
    return None


# --------------------------------------------------------------------------- GradMultiply


@keras.saving.register_keras_serializable(package="keras_posenc")
class GradMultiply(keras.layers.Layer):
    """Identity in the forward pass; multiplies the gradient by ``scale`` in the backward pass.

    ConvS2S scales the gradient that flows from the decoder's attention layers
    into the encoder by ``1 / (2 * number_of_attention_layers)``, so the encoder
    is not updated once per attention layer (fairseq's ``GradMultiply``).

    The layer computes ``stop_gradient(x) + (x - stop_gradient(x)) * scale``:
    the forward value is exactly ``x`` (``x - x`` is exactly zero) and the
    derivative is ``scale``. It uses only ``keras.ops.stop_gradient``, so it runs
    unchanged on every backend, inside compiled functions and in exported
    graphs (``keras.ops.custom_gradient`` needs a different gradient-function
    signature on PyTorch, and exporters do not all support it).

    Args:
        scale: the factor applied to the gradient (a finite number; ``0``
            stops the gradient, ``1`` is a plain identity).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: a floating tensor of any shape. A Keras mask passes through.

    Returns:
        ``inputs`` unchanged (cast to the layer's compute dtype).

    Examples:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers.convs2s import GradMultiply
        >>> x = np.arange(6, dtype="float32").reshape(1, 2, 3)
        >>> y = GradMultiply(scale=0.25)(x)
        >>> tuple(y.shape), bool(np.array_equal(ops.convert_to_numpy(y), x))
        ((1, 2, 3), True)

    Reference:
        Gehring, Auli, Grangier, Yarats, Dauphin, "Convolutional Sequence to
        Sequence Learning", ICML 2017 (section 3.4).
    """

    def __init__(self, scale: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        if isinstance(scale, bool) or not isinstance(scale, int | float | np.integer | np.floating):
            raise TypeError(
                f"{caller}: `scale` must be a finite number, got {scale!r} "
                f"(type {type(scale).__name__})."
            )
        if not math.isfinite(scale):
            raise ValueError(f"{caller}: `scale` must be a finite number, got {scale!r}.")
        self.scale = float(scale)
        self.supports_masking = True

    def call(self, inputs: Any) -> Any:
        frozen = ops.stop_gradient(inputs)
        return frozen + (inputs - frozen) * ops.cast(self.scale, inputs.dtype)

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        return previous_mask

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return tuple(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(scale=self.scale)
        return config


# --------------------------------------------------------------------------- GLUConv1D


@keras.saving.register_keras_serializable(package="keras_posenc")
class GLUConv1D(CachedSequenceSpec, SequenceChecks, keras.layers.Layer):
    """A 1D convolution to ``2 * filters`` channels followed by a gated linear unit.

    ``y = conv(x)`` has ``2 * filters`` channels and the output is
    ``y[..., :filters] * sigmoid(y[..., filters:])`` (GLU, Dauphin et al.).
    The output has the input's length:

    - ``causal=False`` (the ConvS2S encoder) pads as fairseq: an odd kernel
      ``k`` gets ``k // 2`` zeros on both sides, an even one ``(k - 1) // 2``
      on the left and ``k // 2`` on the right;
    - ``causal=True`` (the decoder) pads ``k - 1`` zeros on the left, so output
      ``t`` sees inputs ``t - k + 1 .. t`` only.

    Padded positions (``mask`` False) are zeroed before the convolution, as in
    fairseq's encoder, so outputs at real positions do not depend on what the
    padding holds. Dropout (rate ``dropout``) is applied to the input of the
    convolution, as in fairseq; the rate also enters the reference
    initialisation.

    **Decoding** (``causal=True``): the cache is a buffer of the last
    ``kernel_size`` inputs, ``(batch, kernel_size, input_channels)``, zeros at
    the start (they play the part of the left padding). A call with a cache
    shifts the buffer by the input's length, appends the input and applies the
    convolution to the buffer only; a one-step input is one matrix product, so
    the cost of a step does not depend on the prefix length. The outputs equal
    the full causal computation. The buffer is batch-first, so beam search
    reorders it with ``ops.take(cache, beam_indices, axis=0)``. The cache is
    kept in the layer's compute dtype (Keras casts floating call arguments to it).

    Args:
        filters: number of output channels (the convolution has ``2 * filters``).
        kernel_size: width of the convolution.
        causal: whether output ``t`` may only see inputs up to ``t``.
        dropout: dropout rate on the convolution's input.
        weight_norm: reparametrise the kernel as ``g * v / ||v||`` (norm over
            the kernel width and input channels, one ``g`` per output
            channel), with ``g`` initialised to ``||v||`` so the initial kernel
            equals ``v`` (fairseq's ``weight_norm(conv, dim=2)``). The weights
            are then ``kernel_v`` and ``kernel_g``; the ``kernel`` property
            gives the effective kernel either way. Decoding computes it once
            per search instead of once per step (:func:`folded_weight_norm`).
        kernel_initializer: ``None`` (default) for the reference
            initialisation ``N(0, sqrt(4 (1 - dropout) / (kernel_size *
            input_channels)))``, or any Keras initializer.
        bias_initializer: initializer of the bias (reference: zeros).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``(batch, time, input_channels)``.
        mask: optional ``(batch, time)`` boolean or integer 0/1, True for real tokens; by default
            the input's Keras mask (e.g. from ``Embedding(mask_zero=True)``).
            The output carries the same mask. A float mask is refused (an additive
            0 / -1e9 mask would be misread); padded positions are selected away, so
            whatever they hold, NaN included, never reaches a real output.
        training: whether dropout is active.
        cache: ``(batch, kernel_size, input_channels)``, the buffer of the last
            inputs (``causal=True`` only). With a cache the call returns
            ``(output, cache)``.
        cache_update_index: position of ``inputs`` in the sequence (the
            decoding signature shared with keras_hub's
            ``CachedMultiHeadAttention``). The buffer shifts, so the result
            does not depend on it.

    Returns:
        ``(batch, time, filters)``; with a cache, ``(output, new_cache)``. An
        empty batch or sequence gives an empty output.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.convs2s import GLUConv1D
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> conv = GLUConv1D(filters=6, kernel_size=3, causal=True)
        >>> tuple(conv(x).shape)
        (2, 5, 6)
        >>> cache = np.zeros((2, 3, 8), "float32")
        >>> output, cache = conv(x[:, :1], cache=cache, cache_update_index=0)
        >>> tuple(output.shape), tuple(cache.shape)
        ((2, 1, 6), (2, 3, 8))

    Reference:
        Gehring, Auli, Grangier, Yarats, Dauphin, "Convolutional Sequence to
        Sequence Learning", ICML 2017.
        Dauphin, Fan, Auli, Grangier, "Language Modeling with Gated
        Convolutional Networks", ICML 2017 (the GLU).
        Salimans, Kingma, "Weight Normalization", NeurIPS 2016.
    """

    def __init__(
        self,
        filters: int,
        kernel_size: int,
        causal: bool = False,
        dropout: float = 0.0,
        weight_norm: bool = False,
        kernel_initializer: Any = None,
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.filters = check_int(caller, "filters", filters, minimum=1)
        self.kernel_size = check_int(caller, "kernel_size", kernel_size, minimum=1)
        self.causal = check_bool(caller, "causal", causal)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.weight_norm = check_bool(caller, "weight_norm", weight_norm)
        self.kernel_initializer = _optional_initializer(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        # The effective kernel while folded_weight_norm is active, else None.
        self._folded_kernel = None

    @property
    def padding(self) -> tuple[int, int]:
        """Zeros added on the (left, right) of the time axis before the convolution."""
        k = self.kernel_size
        if self.causal:
            return k - 1, 0
        return (k - 1) // 2, k // 2  # odd k: k // 2 on both sides

    # ------------------------------------------------------------------ build

    def _check_input_shape(self, value: Any) -> None:
        # A shape (build) or the inputs themselves (call: their dtype is checked too).
        self._check_sequence("inputs", value)

    def build(self, input_shape: Any) -> None:
        input_shape = tuple(input_shape)
        self._check_input_shape(input_shape)
        channels = int(input_shape[-1])
        initializer = self.kernel_initializer
        if initializer is None:
            stddev = math.sqrt(4.0 * (1.0 - self.dropout) / (self.kernel_size * channels))
            initializer = keras.initializers.RandomNormal(mean=0.0, stddev=stddev)
        kernel_shape = (self.kernel_size, channels, 2 * self.filters)
        if self.weight_norm:
            self.kernel_v = self.add_weight(
                name="kernel_v", shape=kernel_shape, initializer=initializer
            )
            # g = ||v||, so the initial kernel g * v / ||v|| equals v.
            if _draws_repeatably(initializer):
                # As an initializer that draws v again: no value is read while building
                # (a model built shape-only, in a keras.StatelessScope, reads none).
                self.kernel_g = self.add_weight(
                    name="kernel_g",
                    shape=(2 * self.filters,),
                    initializer=_ColumnNormOf(initializer, kernel_shape),
                )
            else:  # a SeedGenerator or a plain function: read what v drew
                self.kernel_g = self.add_weight(
                    name="kernel_g", shape=(2 * self.filters,), initializer="ones"
                )
                self.kernel_g.assign(_column_norm(ops.convert_to_tensor(self.kernel_v)))
        else:
            self._kernel = self.add_weight(
                name="kernel", shape=kernel_shape, initializer=initializer
            )
        self.bias = self.add_weight(
            name="bias", shape=(2 * self.filters,), initializer=self.bias_initializer
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.dropout_layer.build(input_shape)
        self._input_channels = channels
        self._built_features = {"inputs": channels}  # checked by `_check_sequence`
        self.built = True

    @property
    def kernel(self) -> Any:
        """The effective kernel ``(kernel_size, input_channels, 2 * filters)``."""
        if not self.weight_norm:
            return self._kernel
        if self._folded_kernel is not None:
            return self._folded_kernel
        v = ops.convert_to_tensor(self.kernel_v)
        g = ops.convert_to_tensor(self.kernel_g)
        return v * ops.cast(g / _column_norm(v), v.dtype)

    # ------------------------------------------------------------------ call

    def call(
        self,
        inputs: Any,
        mask: Any = None,
        training: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
    ) -> Any:
        self._check_input_shape(inputs)
        x = inputs
        # The one mask check (boolean or integer 0/1; a float mask, perhaps additive, is
        # refused), then a select: multiplying by the mask kept NaN in padding and scaled
        # the input by an int mask of 2s.
        mask = check_mask(
            self._describe(), "mask", mask, tuple(shape_of(inputs)[:2]), ("batch", "time")
        )
        if mask is not None:
            x = _attention.zero_invalid(x, mask)
        x = self.dropout_layer(x, training=training)
        kernel = ops.cast(self.kernel, x.dtype)
        bias = ops.cast(self.bias, x.dtype)
        if cache is not None:
            return self._decode(x, kernel, bias, cache)
        if has_empty_axis(x):
            batch, time = ops.shape(x)[:2]
            return ops.zeros((batch, time, self.filters), x.dtype)
        left, right = self.padding
        x = ops.pad(x, ((0, 0), (left, right), (0, 0)))
        return self._glu(ops.conv(x, kernel, padding="valid") + bias)

    def _decode(self, x: Any, kernel: Any, bias: Any, cache: Any) -> tuple:
        k = self.kernel_size
        shape = shape_of(cache)
        if not self.causal:
            raise ValueError(
                f"{self._describe()}: a `cache` needs causal=True (decoding sees no future "
                f"inputs), but the layer has causal=False."
            )
        if len(shape) != 3 or shape[1] != k or shape[2] != self._input_channels:
            raise ValueError(
                f"{self._describe()}: `cache` must have shape (batch, {k}, "
                f"{self._input_channels}) (= (batch, kernel_size, input_channels)), got shape "
                f"{shape}."
            )
        # The buffer followed by the new inputs; its last k - 1 + length rows
        # are all a valid convolution over the new positions needs.
        window = ops.concatenate([ops.cast(cache, x.dtype), x], axis=1)
        length = shape_of(x)[1]
        if length == 1:
            # One step: the buffer (shifted by one) times the kernel, one matrix product.
            channels = self._input_channels
            flat_window = ops.reshape(window[:, 1:], (-1, k * channels))
            flat_kernel = ops.reshape(kernel, (k * channels, 2 * self.filters))
            y = ops.expand_dims(ops.matmul(flat_window, flat_kernel) + bias, 1)
        else:
            y = ops.conv(window[:, 1:], kernel, padding="valid") + bias
        new_cache = ops.cast(window[:, -k:], cache.dtype)
        return self._glu(y), new_cache

    def _glu(self, y: Any) -> Any:
        return y[..., : self.filters] * ops.sigmoid(y[..., self.filters :])

    # ------------------------------------------------------------------ shapes, masks, config

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        """The output has one row per input position and carries the input's mask."""
        return previous_mask

    def compute_output_shape(self, input_shape: Any) -> tuple:
        input_shape = tuple(input_shape)
        self._check_input_shape(input_shape)
        return input_shape[:-1] + (self.filters,)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            filters=self.filters,
            kernel_size=self.kernel_size,
            causal=self.causal,
            dropout=self.dropout,
            weight_norm=self.weight_norm,
            kernel_initializer=_serialize_initializer(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


@contextlib.contextmanager
def folded_weight_norm(layers: Sequence[GLUConv1D], kernels: Sequence[Any]) -> Iterator[None]:
    """Inside the block, each layer uses its kernel from ``kernels`` instead of ``g * v / ||v||``.

    A weight-normalised convolution recomputes ``g * v / ||v||`` on every call;
    a decoding step is one small matrix product per layer, and for one sequence
    that normalisation costs as much as the product itself. The searches of
    :mod:`keras_posenc.generation` compute every effective kernel once per
    search (``[layer.kernel for layer in layers]``, while the weights cannot
    change) and run the steps inside this block. Nothing is assigned: the
    weights stay as they are, and the layers compute their kernels again once
    the block ends (also on an error).

    Args:
        layers: the weight-normalised ``GLUConv1D`` layers to fold.
        kernels: one effective kernel per layer, in the same order (tensors of
            the kernel's shape; inside a compiled function, its traced values).

    Example:

        >>> import numpy as np
        >>> from keras import ops
        >>> from keras_posenc.layers.convs2s import GLUConv1D, folded_weight_norm
        >>> conv = GLUConv1D(4, 3, causal=True, weight_norm=True)
        >>> x = np.ones((1, 1, 2), "float32")
        >>> cache = np.zeros((1, 3, 2), "float32")
        >>> before, _ = conv(x, cache=cache)
        >>> with folded_weight_norm([conv], [conv.kernel]):
        ...     folded, _ = conv(x, cache=cache)
        >>> bool(np.allclose(ops.convert_to_numpy(before), ops.convert_to_numpy(folded)))
        True
    """
    layers, kernels = list(layers), list(kernels)
    if len(layers) != len(kernels):
        raise ValueError(
            f"folded_weight_norm: one kernel per layer is needed, got {len(kernels)} kernels "
            f"for {len(layers)} layers."
        )
    for layer in layers:
        if not (isinstance(layer, GLUConv1D) and layer.weight_norm):
            raise TypeError(
                "folded_weight_norm: `layers` must be GLUConv1D layers with weight_norm=True, "
                f"got {type(layer).__name__}({getattr(layer, 'name', '?')!r})."
            )
    try:
        for layer, kernel in zip(layers, kernels, strict=True):
            layer._folded_kernel = kernel
        yield
    finally:
        for layer in layers:
            layer._folded_kernel = None


def _column_norm(v: Any) -> Any:
    """``||v||`` over the kernel width and input channels: one norm per output channel."""
    return ops.sqrt(ops.sum(ops.square(v), axis=(0, 1)))


def _draws_repeatably(initializer: Any) -> bool:
    """Whether ``initializer`` draws the same values at every call: a Keras initializer
    with an int seed that its config carries (so `_ColumnNormOf` can make it again with
    that seed), or one with no seed at all (``Ones``, ``Constant``)."""
    if not isinstance(initializer, keras.initializers.Initializer):
        return False
    seed = getattr(initializer, "seed", None)
    if "seed" not in initializer.get_config():
        return seed is None
    return isinstance(seed, int)


class _ColumnNormOf(keras.initializers.Initializer):
    """The column norms ``||v||`` of what ``initializer`` draws for the kernel ``v``.

    Weight normalisation's ``g`` starts at ``||v||``. Its draw of ``v`` repeats the
    kernel's: the same initializer with the same seed, held here as ``seed`` so that a
    caller may draw it from a ``keras.random.SeedGenerator`` whose state is that seed, as
    it may for the kernel's own initializer.
    """

    def __init__(self, initializer: Any, kernel_shape: tuple) -> None:
        self.initializer = initializer
        self.kernel_shape = tuple(kernel_shape)
        seed = getattr(initializer, "seed", None)
        if isinstance(seed, int):
            self.seed = seed

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        initializer = self.initializer
        if hasattr(self, "seed"):
            config = dict(initializer.get_config(), seed=self.seed)
            initializer = type(initializer).from_config(config)
        return _column_norm(initializer(self.kernel_shape, dtype=dtype))

    def get_config(self) -> dict:
        # Not keras.initializers.serialize: on JAX and PyTorch it imports TensorFlow (4 s).
        inner = self.initializer
        config = {
            "initializer": {"class_name": type(inner).__name__, "config": inner.get_config()},
            "kernel_shape": list(self.kernel_shape),
        }
        if hasattr(self, "seed"):
            config["seed"] = self.seed
        return config


# --------------------------------------------------------------------------- attention


@keras.saving.register_keras_serializable(package="keras_posenc")
class ConvS2SAttention(keras.layers.Layer):
    """The ConvS2S decoder attention: decoder state plus target embedding attend to the source.

    With ``x`` the decoder layer's output (``conv_channels`` wide), ``g`` the
    target embedding and ``(z, u) = encoder_out`` (the encoder's keys and
    values, ``embed_dim`` wide), exactly as fairseq's ``AttentionLayer``:

    - ``d = (in_projection(x) + g) * sqrt(0.5)``
    - ``a = softmax_s(d . z_s)`` over the real source positions only
    - ``c = (sum_s a_s u_s) * sqrt(S)``, ``S`` = number of real source positions
      of the sequence (the full source length without a mask)
    - ``out = (out_projection(c) + x) * sqrt(0.5)``

    Masks: ``encoder_mask`` is True for **real** source tokens (the Keras
    convention); fairseq's ``encoder_padding_mask`` is its negation (True for
    padding). The logits and the softmax run in float32 with a large finite
    negative fill for padded positions (fairseq runs its softmax in the input
    dtype with ``-inf``), and a source that is all padding gives attention
    scores of zero and a zero context, so ``out = (out_projection.bias + x) *
    sqrt(0.5)``, where fairseq gives NaN.

    The projections are the Dense sublayers ``in_projection`` (``conv_channels
    -> embed_dim``) and ``out_projection`` (``embed_dim -> conv_channels``).
    fairseq weight-normalises them; that reparametrisation does not change
    what they compute (only how training moves them) and is not applied here.

    Args:
        conv_channels: channels of ``x`` (and of the output).
        embed_dim: channels of the target embedding and of the encoder's keys
            and values.
        kernel_initializer: ``None`` (default) for the reference
            initialisation ``N(0, sqrt(1 / fan_in))`` of each projection, or
            any Keras initializer (each projection draws from its own copy, with a
            seed derived per projection when it is seeded).
        bias_initializer: initializer of the projection biases (reference: zeros).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        x: ``(batch, target_time, conv_channels)``, the decoder state. Its
            Keras mask, if any, is carried to the output.
        target_embedding: ``(batch, target_time, embed_dim)``.
        encoder_out: the pair ``(keys, values)``, each ``(batch, source_time,
            embed_dim)``.
        encoder_mask: optional ``(batch, source_time)`` boolean or integer 0/1, True for real
            source tokens.

    Returns:
        ``(out, attention_scores)``: ``(batch, target_time, conv_channels)`` and
        ``(batch, target_time, source_time)``; scores are zero at padded source
        positions.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.convs2s import ConvS2SAttention
        >>> rng = np.random.default_rng(0)
        >>> x = rng.standard_normal((2, 4, 6)).astype("float32")
        >>> target_embedding = rng.standard_normal((2, 4, 5)).astype("float32")
        >>> keys = rng.standard_normal((2, 7, 5)).astype("float32")
        >>> values = rng.standard_normal((2, 7, 5)).astype("float32")
        >>> encoder_mask = np.array([[True] * 7, [True] * 5 + [False] * 2])
        >>> attention = ConvS2SAttention(conv_channels=6, embed_dim=5)
        >>> out, scores = attention(x, target_embedding, (keys, values), encoder_mask)
        >>> tuple(out.shape), tuple(scores.shape)
        ((2, 4, 6), (2, 4, 7))

    Reference:
        Gehring, Auli, Grangier, Yarats, Dauphin, "Convolutional Sequence to
        Sequence Learning", ICML 2017 (section 3.3).
    """

    def __init__(
        self,
        conv_channels: int,
        embed_dim: int,
        kernel_initializer: Any = None,
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.conv_channels = check_int(caller, "conv_channels", conv_channels, minimum=1)
        self.embed_dim = check_int(caller, "embed_dim", embed_dim, minimum=1)
        self.kernel_initializer = _optional_initializer(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _describe(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _projection(self, units: int, fan_in: int, name: str) -> keras.layers.Dense:
        initializer = sublayer_initializer(self.kernel_initializer, name)
        if initializer is None:
            initializer = keras.initializers.RandomNormal(mean=0.0, stddev=math.sqrt(1.0 / fan_in))
        return keras.layers.Dense(
            units,
            kernel_initializer=initializer,
            bias_initializer=sublayer_initializer(self.bias_initializer, name),
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, x_shape: Any, target_embedding_shape: Any, encoder_out_shape: Any) -> None:
        x_shape = tuple(x_shape)
        keys_shape, values_shape = self._unpack_shapes(encoder_out_shape)
        self._check_shapes(x_shape, tuple(target_embedding_shape), keys_shape, values_shape)
        self.in_projection = self._projection(self.embed_dim, self.conv_channels, "in_projection")
        self.in_projection.build(x_shape)
        self.out_projection = self._projection(self.conv_channels, self.embed_dim, "out_projection")
        self.out_projection.build(x_shape[:-1] + (self.embed_dim,))
        self.built = True

    def _unpack(self, encoder_out: Any) -> tuple:
        """``(keys, values)`` from ``encoder_out`` (tensors, or their shapes in ``build``)."""
        if not isinstance(encoder_out, tuple | list) or len(encoder_out) != 2:
            given = type(encoder_out).__name__
            if isinstance(encoder_out, tuple | list):
                given += f" of length {len(encoder_out)}"
            raise TypeError(
                f"{self._describe()}: `encoder_out` must be a pair (keys, values) of "
                f"(batch, source_time, {self.embed_dim}) tensors, got a {given}."
            )
        return encoder_out[0], encoder_out[1]

    def _unpack_shapes(self, encoder_out_shape: Any) -> tuple:
        shapes = tuple(_as_shape(s) for s in self._unpack(encoder_out_shape))
        if None in shapes:
            raise TypeError(
                f"{self._describe()}: `encoder_out` must be a pair (keys, values) of "
                f"(batch, source_time, {self.embed_dim}) tensors, got a structure of shape "
                f"{encoder_out_shape}."
            )
        return shapes

    def _check_shapes(
        self, x_shape: tuple, target_shape: tuple, keys_shape: tuple, values_shape: tuple
    ) -> None:
        name = self._describe()
        expected = (
            ("x", x_shape, self.conv_channels, "target_time, conv_channels"),
            ("target_embedding", target_shape, self.embed_dim, "target_time, embed_dim"),
            ("keys", keys_shape, self.embed_dim, "source_time, embed_dim"),
            ("values", values_shape, self.embed_dim, "source_time, embed_dim"),
        )
        for argument, shape, channels, axes in expected:
            if len(shape) != 3 or shape[-1] != channels:
                raise ValueError(
                    f"{name}: `{argument}` must have shape (batch, {axes}) with last axis "
                    f"{channels}, got shape {shape}."
                )
        if None not in (x_shape[1], target_shape[1]) and x_shape[1] != target_shape[1]:
            raise ValueError(
                f"{name}: `x` and `target_embedding` must have the same length (axis 1), got "
                f"shapes {x_shape} and {target_shape}."
            )
        if None not in (keys_shape[1], values_shape[1]) and keys_shape[1] != values_shape[1]:
            raise ValueError(
                f"{name}: the keys and values of `encoder_out` must have the same source length "
                f"(axis 1), got shapes {keys_shape} and {values_shape}."
            )

    def call(
        self, x: Any, target_embedding: Any, encoder_out: Any, encoder_mask: Any = None
    ) -> tuple:
        keys, values = self._unpack(encoder_out)
        keys_shape = shape_of(keys)
        self._check_shapes(shape_of(x), shape_of(target_embedding), keys_shape, shape_of(values))
        encoder_mask = check_mask(
            self._describe(),
            "encoder_mask",
            encoder_mask,
            keys_shape[:2],
            ("batch", "source_time"),
        )
        scale = ops.cast(_SQRT_HALF, x.dtype)
        d = (self.in_projection(x) + target_embedding) * scale
        logits = ops.cast(ops.einsum("bte,bse->bts", d, keys), "float32")
        if encoder_mask is None:
            scores = _attention.masked_softmax(logits)
            real = ops.cast(ops.shape(keys)[1], "float32")  # every source position is real
            context_scale = ops.reshape(ops.sqrt(real), (1, 1, 1))
        else:
            # The core's masked softmax: float32, one finite fill, an all-padding
            # source gives a zero row; padded values are zeroed (no NaN from padding).
            scores = _attention.masked_softmax(logits, ops.expand_dims(encoder_mask, 1))
            values = _attention.zero_invalid(values, encoder_mask)
            real = ops.sum(ops.cast(encoder_mask, "float32"), axis=-1)  # (batch,)
            context_scale = ops.sqrt(real)[:, None, None]
        context = ops.einsum("bts,bse->bte", ops.cast(scores, values.dtype), values)
        context = context * ops.cast(context_scale, context.dtype)
        out = (self.out_projection(context) + x) * scale
        return out, ops.cast(scores, self.compute_dtype)

    def compute_mask(self, x: Any, previous_mask: Any = None) -> Any:
        """The output has one row per target position and carries ``x``'s mask."""
        return previous_mask

    def compute_output_shape(
        self, x_shape: Any, target_embedding_shape: Any, encoder_out_shape: Any
    ) -> tuple:
        x_shape = tuple(x_shape)
        keys_shape, values_shape = self._unpack_shapes(encoder_out_shape)
        self._check_shapes(x_shape, tuple(target_embedding_shape), keys_shape, values_shape)
        return x_shape, (x_shape[0], x_shape[1], keys_shape[1])

    def compute_output_spec(
        self, x: Any, target_embedding: Any, encoder_out: Any, encoder_mask: Any = None
    ) -> tuple:
        keys, values = self._unpack(encoder_out)
        out_shape, scores_shape = self.compute_output_shape(
            x.shape, target_embedding.shape, (keys.shape, values.shape)
        )
        return (
            keras.KerasTensor(out_shape, dtype=self.compute_dtype),
            keras.KerasTensor(scores_shape, dtype=self.compute_dtype),
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            conv_channels=self.conv_channels,
            embed_dim=self.embed_dim,
            kernel_initializer=_serialize_initializer(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
