"""MUSE: parallel multi-scale attention (self-attention and convolutions from one projection).

Zhao et al.'s MUSE layer runs, in parallel from the same input, a global
multi-head self-attention and local convolutions of several widths. The
convolutions read the attention's value projection (shared parameters), are
weighted by a learned softmax gate and concatenated with the attention output
before one output projection, as in the official code. Tensors are
batch-major, ``(batch, time, channels)``; masks follow Keras (``True`` = real
token).
"""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers._specs import output_with_cache_spec
from keras_posenc.layers.relative_index import _check_bool, _check_int

__all__ = ["MUSEAttention"]

# Logits of masked keys: finite, so a fully masked row gives a finite softmax
# (then zeroed), never NaN; far below any real float32 logit, so exp() is 0.
_MASK_FILL = -1e9
_CONV_MODES = ("static", "dynamic")
_DEFAULT_KERNEL_SIZES = {"static": (1, 3, 7), "dynamic": (3, 15)}


def _shape(value: Any) -> tuple:
    return tuple(getattr(value, "shape", np.shape(value)))


def _check_rate(caller: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{caller}: `{name}` must be a float in [0, 1), got {value!r}.")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{caller}: `{name}` must be in [0, 1), got {value!r}.")
    return float(value)


def _check_kernel_sizes(caller: str, conv: str, kernel_sizes: Any) -> tuple[int, ...]:
    if kernel_sizes is None:
        return _DEFAULT_KERNEL_SIZES[conv]
    if isinstance(kernel_sizes, int | np.integer) and not isinstance(kernel_sizes, bool):
        kernel_sizes = (kernel_sizes,)
    if not isinstance(kernel_sizes, list | tuple) or not kernel_sizes:
        raise TypeError(
            f"{caller}: `kernel_sizes` must be None or a non-empty list/tuple of odd positive "
            f"integers, got {kernel_sizes!r}."
        )
    sizes = tuple(_check_int(caller, "kernel_sizes", k) for k in kernel_sizes)
    for k in sizes:
        if k < 1:
            raise ValueError(
                f"{caller}: `kernel_sizes` must hold positive integers, got {k} in {sizes}."
            )
        if k % 2 == 0:
            raise ValueError(
                f"{caller}: `kernel_sizes` must hold odd integers (a 'same' convolution pads "
                f"k // 2 on both sides, which is only centred for odd k), got {k} in {sizes}."
            )
        if k == 1 and conv == "dynamic":
            raise ValueError(
                f"{caller}: conv='dynamic' needs kernel sizes >= 3 (a softmax over one tap is "
                f"the constant 1, so the kernel predictor would never train), got 1 in {sizes}."
            )
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"{caller}: `kernel_sizes` must not repeat a size, got {sizes}.")
    return sizes


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSEAttention(keras.layers.Layer):
    """Parallel multi-scale attention: self-attention and convolutions of V, gated and projected.

    With ``x`` of width ``C = num_heads * key_dim`` (a multiple of the heads,
    as in the official code, where the head size is ``C / heads``):

    - ``Q, K, V = x W_q, x W_k, x W_v`` (per head), ``Q *= key_dim ** -0.5``;
    - ``A = softmax(Q K^T) V`` per head, padded keys (and, with
      ``causal=True``, later keys) excluded; the logits and the softmax run in
      float32 with a large finite fill, and a query with no key to attend to
      gives zeros, never NaN;
    - ``D_k = conv_k(V)`` for each kernel size ``k``: the convolutions read the
      attention's value projection ``V`` (shared parameters, no second
      projection). Padded positions of ``V`` are zeroed first, so real
      positions never depend on padding;

      * ``conv="static"`` (the paper's description): a depthwise
        convolution over time (one ``k``-tap filter per channel, no bias),
        then the branch's own pointwise projection ``C -> C``; ``k = 1`` is
        the identity followed by the pointwise projection. Default
        ``(1, 3, 7)``.
      * ``conv="dynamic"`` (the official code, fairseq's dynamic
        convolution): at every position a linear layer of ``V`` predicts
        ``num_heads * k`` taps, softmax-normalised over the ``k`` taps and
        shared by the ``key_dim`` channels of a head. Default ``(3, 15)``.

    - ``D = sum_k softmax(gamma)_k D_k``, ``gamma`` a trainable vector
      initialised to zeros (equal weights). (The widely copied PyTorch version
      re-creates its gate on every forward pass, so it never trains; here it
      is a weight of the layer.) With a single kernel size there is no gate
      (``gamma`` is None): its softmax would be the constant 1.
    - ``output = concat[A ; D] W_O + b_O``, one projection ``2C -> C``.

    Convolutions are "same" convolutions (``k // 2`` zeros on both sides);
    even kernel sizes, which cannot be centred, are rejected. With
    ``causal=True`` (MUSE's decoder) attention is causal and every convolution
    pads ``k - 1`` zeros on the left, so output ``t`` sees positions ``<= t``
    only.

    **Decoding** (``causal=True``): the cache is one tensor ``(batch, 2,
    max_len, num_heads, key_dim)``, keras_hub's ``CachedMultiHeadAttention``
    layout: ``cache[:, 0]`` the keys, ``cache[:, 1]`` the values (unscaled
    projections). A call with ``cache`` and ``cache_update_index=i`` writes the
    new keys and values at positions ``i ..``, attends over the cache with a
    causal mask offset by ``i``, and reads the convolutions' history (the last
    ``max(kernel_sizes) - 1`` value vectors) from the cached values, so no
    second buffer is needed; positions before 0 count as the left zero
    padding. The result equals the full causal computation. The cache has a
    fixed shape and batch first, so beam search reorders it with
    ``ops.take(cache, beam_indices, axis=0)``. A ``mask`` cannot be combined
    with a cache (decoded sequences have no padding before their end).

    Dropout (rate ``dropout``) applies to the attention probabilities.

    Args:
        num_heads: number of attention heads (also the heads that share a
            dynamic kernel).
        key_dim: size of each head; the input width must be
            ``num_heads * key_dim``.
        conv: ``"static"`` (default) or ``"dynamic"``, see above.
        kernel_sizes: odd positive kernel sizes, one branch each, or ``None``
            for the defaults ``(1, 3, 7)`` (static) and ``(3, 15)`` (dynamic).
            ``"dynamic"`` needs sizes ``>= 3``.
        causal: whether output ``t`` may only see positions up to ``t``.
        dropout: dropout rate on the attention probabilities.
        use_bias: whether the projections (query, key, value, pointwise,
            kernel predictors, output) have biases.
        kernel_initializer: initializer of every kernel (depthwise filters
            included).
        bias_initializer: initializer of every bias.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``(batch, time, num_heads * key_dim)``.
        mask: optional ``(batch, time)`` bool, True for real tokens; by default
            the input's Keras mask (e.g. from ``Embedding(mask_zero=True)``).
            The output carries the same mask.
        training: whether dropout is active.
        cache: ``(batch, 2, max_len, num_heads, key_dim)`` (``causal=True``
            only); the call then returns ``(output, cache)``.
        cache_update_index: position of ``inputs[:, 0]`` in the sequence
            (an int or a scalar integer tensor); required with a cache.

    Returns:
        ``(batch, time, num_heads * key_dim)``; with a cache, ``(output,
        new_cache)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.muse import MUSEAttention
        >>> x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype("float32")
        >>> layer = MUSEAttention(num_heads=2, key_dim=4)
        >>> tuple(layer(x).shape)
        (2, 5, 8)
        >>> dynamic = MUSEAttention(2, 4, conv="dynamic", kernel_sizes=(3, 5), causal=True)
        >>> tuple(dynamic(x, mask=np.array([[1, 1, 1, 0, 0]] * 2, bool)).shape)
        (2, 5, 8)
        >>> cache = np.zeros((2, 2, 5, 2, 4), "float32")
        >>> output, cache = dynamic(x[:, :1], cache=cache, cache_update_index=0)
        >>> tuple(output.shape), tuple(cache.shape)
        ((2, 1, 8), (2, 2, 5, 2, 4))

    Reference:
        Zhao, Sun, Xu, Zhang, Luo, "MUSE: Parallel Multi-Scale Attention for
        Sequence to Sequence Learning", arXiv:1911.09483, 2019.
        Wu, Fan, Baevski, Dauphin, Auli, "Pay Less Attention with Lightweight
        and Dynamic Convolutions", ICLR 2019 (the dynamic convolution).
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        conv: str = "static",
        kernel_sizes: Any = None,
        causal: bool = False,
        dropout: float = 0.0,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_heads = _check_int(caller, "num_heads", num_heads, minimum=1)
        self.key_dim = _check_int(caller, "key_dim", key_dim, minimum=1)
        if conv not in _CONV_MODES:
            raise ValueError(
                f"{caller}: `conv` must be one of {', '.join(map(repr, _CONV_MODES))}, "
                f"got {conv!r}."
            )
        self.conv = conv
        self.kernel_sizes = _check_kernel_sizes(caller, conv, kernel_sizes)
        self.causal = _check_bool(caller, "causal", causal)
        self.dropout = _check_rate(caller, "dropout", dropout)
        self.use_bias = _check_bool(caller, "use_bias", use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    @property
    def channels(self) -> int:
        """The input and output width, ``num_heads * key_dim``."""
        return self.num_heads * self.key_dim

    # ------------------------------------------------------------------ build

    def _describe(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _check_input_shape(self, shape: tuple) -> None:
        if len(shape) != 3:
            raise ValueError(
                f"{self._describe()}: `inputs` must have rank 3 (batch, time, channels), "
                f"got shape {shape}."
            )
        if shape[-1] != self.channels:
            raise ValueError(
                f"{self._describe()}: the last axis of `inputs` must be num_heads * key_dim = "
                f"{self.num_heads} * {self.key_dim} = {self.channels}, got shape {shape}."
            )

    def _dense(self, equation: str, output_shape: tuple, bias_axes: str, name: str) -> Any:
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if self.use_bias else None,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape: Any) -> None:
        input_shape = tuple(input_shape)
        self._check_input_shape(input_shape)
        heads, head_dim, channels = self.num_heads, self.key_dim, self.channels
        head_shape = (None, heads, head_dim)
        self.query_dense = self._dense("abc,cde->abde", head_shape, "de", "query")
        self.key_dense = self._dense("abc,cde->abde", head_shape, "de", "key")
        self.value_dense = self._dense("abc,cde->abde", head_shape, "de", "value")
        for dense in (self.query_dense, self.key_dense, self.value_dense):
            dense.build(input_shape)
        sequence_shape = input_shape[:2] + (channels,)
        self.depthwise_kernels = []
        self.pointwise_denses = []
        self.kernel_predictors = []
        for k in self.kernel_sizes:
            if self.conv == "static":
                # k = 1 is the identity before the pointwise projection: no filter.
                self.depthwise_kernels.append(
                    None
                    if k == 1
                    else self.add_weight(
                        name=f"depthwise_kernel_{k}",
                        shape=(k, channels),
                        initializer=self.kernel_initializer,
                    )
                )
                pointwise = self._dense("abc,cd->abd", (None, channels), "d", f"pointwise_{k}")
                pointwise.build(sequence_shape)
                self.pointwise_denses.append(pointwise)
            else:
                predictor = self._dense(
                    "abc,cde->abde", (None, heads, k), "de", f"kernel_predictor_{k}"
                )
                predictor.build(sequence_shape)
                self.kernel_predictors.append(predictor)
        # One branch needs no gate (softmax over one value is the constant 1,
        # whose weight would never train).
        self.gamma = None
        if len(self.kernel_sizes) > 1:
            self.gamma = self.add_weight(
                name="gamma", shape=(len(self.kernel_sizes),), initializer="zeros"
            )
        self.output_dense = self._dense("abc,cd->abd", (None, channels), "d", "output")
        self.output_dense.build(input_shape[:2] + (2 * channels,))
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.built = True

    # ------------------------------------------------------------------ call

    def call(
        self,
        inputs: Any,
        mask: Any = None,
        training: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
    ) -> Any:
        self._check_input_shape(_shape(inputs))
        x = inputs
        if mask is not None:
            mask_shape = _shape(mask)
            if len(mask_shape) != 2:
                raise ValueError(
                    f"{self._describe()}: `mask` must have shape (batch, time), got shape "
                    f"{mask_shape} for inputs of shape {_shape(inputs)}."
                )
            # A fresh tensor: the projections (which do not support masking)
            # must not receive the input's Keras mask.
            x = ops.add(x, ops.zeros((), x.dtype))
            mask = ops.cast(mask, "bool")
        if cache is not None:
            return self._decode(x, mask, training, cache, cache_update_index)

        q = self.query_dense(x)  # (batch, time, heads, key_dim)
        k = self.key_dense(x)
        v = self.value_dense(x)
        length = ops.shape(x)[1]
        attention_mask = None
        if mask is not None:
            attention_mask = mask[:, None, :]  # (batch, 1, keys)
            # Padded values are zeroed for the convolutions; attention excludes
            # padded keys anyway, so its output does not change.
            v = v * ops.cast(mask[:, :, None, None], v.dtype)
        if self.causal:
            causal = self._causal_mask(length, length, 0)
            attention_mask = (
                causal if attention_mask is None else ops.logical_and(attention_mask, causal)
            )
        attended = self._attend(q, k, v, attention_mask, training)
        values = ops.reshape(v, (ops.shape(v)[0], length, self.channels))
        largest = max(self.kernel_sizes)
        if self.causal:
            padded = ops.pad(values, ((0, 0), (largest - 1, 0), (0, 0)))
        else:
            padded = ops.pad(values, ((0, 0), (largest // 2, largest // 2), (0, 0)))
        convolved = self._convolve(padded, values)
        return self.output_dense(ops.concatenate([attended, convolved], axis=-1))

    def _causal_mask(self, query_length: Any, key_length: Any, offset: Any) -> Any:
        """(1, q_len, k_len) bool: query ``offset + i`` sees key ``j`` iff ``j <= offset + i``."""
        queries = ops.arange(query_length) + offset
        keys = ops.arange(key_length)
        return ops.expand_dims(ops.less_equal(keys[None, :], queries[:, None]), 0)

    def _attend(self, q: Any, k: Any, v: Any, attention_mask: Any, training: Any) -> Any:
        """Multi-head attention, (batch, q_len, C); float32 softmax, masked rows give zeros."""
        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q, k), "float32")
        row_valid = None
        if attention_mask is not None:
            fill = ops.where(
                attention_mask, ops.zeros((), "float32"), ops.cast(_MASK_FILL, "float32")
            )
            logits = logits + ops.expand_dims(fill, 1)
            row_valid = ops.cast(ops.any(attention_mask, axis=-1), "float32")  # (b or 1, q)
        probabilities = ops.softmax(logits, axis=-1)
        probabilities = self.dropout_layer(probabilities, training=training)
        output = ops.einsum("bhqk,bkhd->bqhd", ops.cast(probabilities, v.dtype), v)
        if row_valid is not None:
            output = output * ops.cast(row_valid[:, :, None, None], output.dtype)
        shape = ops.shape(output)
        return ops.reshape(output, (shape[0], shape[1], self.channels))

    def _branch_window(self, padded: Any, k: int) -> Any:
        """The rows of ``padded`` (padded for the largest kernel) that a ``k``-tap conv reads."""
        extra = max(self.kernel_sizes) - k
        left, right = (extra, 0) if self.causal else (extra // 2, extra // 2)
        return padded[:, left:] if right == 0 else padded[:, left:-right]

    def _convolve(self, padded: Any, values: Any) -> Any:
        """``sum_k softmax(gamma)_k D_k`` over the convolution branches, (batch, time, C).

        ``padded`` holds the (masked) values with ``max(k) - 1`` extra rows,
        placed as the largest kernel needs; ``values`` the rows of the outputs.
        """
        gate = None
        if self.gamma is not None:
            gate = ops.cast(ops.softmax(ops.cast(self.gamma, "float32")), values.dtype)
        total = None
        for index, k in enumerate(self.kernel_sizes):
            window = self._branch_window(padded, k)
            if self.conv == "static":
                branch = self._static_branch(window, values, index, k)
            else:
                branch = self._dynamic_branch(window, values, index, k)
            if gate is not None:
                branch = branch * gate[index]
            total = branch if total is None else total + branch
        return total

    def _static_branch(self, window: Any, values: Any, index: int, k: int) -> Any:
        if k == 1:
            filtered = values
        else:
            kernel = ops.cast(self.depthwise_kernels[index], window.dtype)
            filtered = ops.depthwise_conv(
                window, ops.expand_dims(kernel, -1), strides=1, padding="valid"
            )
        return self.pointwise_denses[index](filtered)

    def _dynamic_branch(self, window: Any, values: Any, index: int, k: int) -> Any:
        # Per-position taps predicted from V, softmax over taps (float32), one set per head.
        logits = ops.cast(self.kernel_predictors[index](values), "float32")  # (b, t, heads, k)
        taps = ops.cast(ops.softmax(logits, axis=-1), values.dtype)
        shape = ops.shape(values)
        batch, length = shape[0], shape[1]
        output = None
        for j in range(k):
            # Tap j of output t reads window row t + j.
            shifted = window[:, j:] if j == k - 1 else window[:, j : j - (k - 1)]
            shifted = ops.reshape(shifted, (batch, length, self.num_heads, self.key_dim))
            term = shifted * taps[..., j : j + 1]
            output = term if output is None else output + term
        return ops.reshape(output, (batch, length, self.channels))

    def _decode(
        self, x: Any, mask: Any, training: Any, cache: Any, cache_update_index: Any
    ) -> tuple:
        name = self._describe()
        if not self.causal:
            raise ValueError(
                f"{name}: a `cache` needs causal=True (decoding sees no future positions), "
                f"but the layer has causal=False."
            )
        if mask is not None:
            raise ValueError(
                f"{name}: `mask` cannot be combined with a `cache` (decoding attends to every "
                f"cached position up to the current one); call without a mask."
            )
        if cache_update_index is None:
            raise ValueError(
                f"{name}: a `cache` needs `cache_update_index` (the position of the inputs in "
                f"the sequence), got None."
            )
        shape = _shape(cache)
        if len(shape) != 5 or shape[1] != 2 or shape[3:] != (self.num_heads, self.key_dim):
            raise ValueError(
                f"{name}: `cache` must have shape (batch, 2, max_len, {self.num_heads}, "
                f"{self.key_dim}) (= (batch, 2, max_len, num_heads, key_dim)), got shape {shape}."
            )
        q = self.query_dense(x)
        start = [0, cache_update_index, 0, 0]
        key_cache = ops.slice_update(cache[:, 0], start, ops.cast(self.key_dense(x), cache.dtype))
        value_cache = ops.slice_update(
            cache[:, 1], start, ops.cast(self.value_dense(x), cache.dtype)
        )
        k = ops.cast(key_cache, q.dtype)
        v = ops.cast(value_cache, q.dtype)
        length = ops.shape(x)[1]
        attention_mask = self._causal_mask(length, ops.shape(k)[1], cache_update_index)
        attended = self._attend(q, k, v, attention_mask, training)

        # The convolutions' history: cached values at positions i - (K - 1) ..
        # i + length - 1; positions before 0 are the causal left padding (zeros).
        largest = max(self.kernel_sizes)
        positions = ops.arange(_shape(x)[1] + largest - 1) + (
            ops.cast(cache_update_index, "int32") - (largest - 1)
        )
        valid = ops.cast(ops.greater_equal(positions, 0), v.dtype)
        window = ops.take(v, ops.maximum(positions, 0), axis=1)
        window = window * valid[None, :, None, None]
        batch = ops.shape(window)[0]
        window = ops.reshape(window, (batch, -1, self.channels))
        values = window[:, largest - 1 :]
        convolved = self._convolve(window, values)
        output = self.output_dense(ops.concatenate([attended, convolved], axis=-1))
        return output, ops.stack((key_cache, value_cache), axis=1)

    # ------------------------------------------------------------------ shapes, masks, config

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        """The output has one row per input position and carries the input's mask."""
        return previous_mask

    def compute_output_shape(self, input_shape: Any) -> tuple:
        input_shape = tuple(input_shape)
        self._check_input_shape(input_shape)
        return input_shape

    def compute_output_spec(
        self,
        inputs: Any,
        mask: Any = None,
        training: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
    ) -> Any:
        return output_with_cache_spec(
            self.compute_output_shape(inputs.shape), self.compute_dtype, cache
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            conv=self.conv,
            kernel_sizes=list(self.kernel_sizes),
            causal=self.causal,
            dropout=self.dropout,
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
