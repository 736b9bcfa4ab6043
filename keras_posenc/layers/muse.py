"""MUSE: parallel multi-scale attention (self-attention and convolutions from one projection).

Zhao et al.'s MUSE layer runs, in parallel from the same input, a global
multi-head self-attention and local convolutions of several widths. The
convolutions read the attention's value projection (shared parameters), are
weighted by a learned softmax gate and concatenated with the attention output
before one output projection, as in the official code. Tensors are
batch-major, ``(batch, time, channels)``; masks follow Keras (``True`` = real
token).

`MUSEEncoderLayer` and `MUSEDecoderLayer` are the official code's blocks: the
attention + convolution branch, the feed-forward branch (and, in the decoder,
the cross-attention) run in parallel from the same input and are summed with
the residual before one layer normalisation (post-norm).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    KerasMask,
    SequenceChecks,
    check_activation,
    check_bool,
    check_bool_or_auto,
    check_int,
    check_mask,
    check_positive_number,
    check_rate,
    shape_of,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._specs import CachedSequenceSpec
from keras_posenc.layers.relative_transformer import feedforward_denses

__all__ = ["MUSEAttention", "MUSEDecoderLayer", "MUSEEncoderLayer"]

_CONV_MODES = ("static", "dynamic")
_DEFAULT_KERNEL_SIZES = {"static": (1, 3, 7), "dynamic": (3, 15)}


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
    sizes = tuple(check_int(caller, "kernel_sizes", k) for k in kernel_sizes)
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


def _attend_heads(
    layer: keras.layers.Layer, q: Any, k: Any, v: Any, attention_mask: Any, training: Any
) -> Any:
    """The core's attention of (batch, time, heads, head_dim) tensors, same layout out."""
    fused = _attention.use_fused_attention(layer.fused_attention, layer.dropout, training)
    output, _ = _attention.attend(
        _attention.scale_queries(q, layer.key_dim),
        k,
        v,
        mask=attention_mask,
        dropout=layer.dropout_layer,
        training=training,
        fused=fused,
    )
    return output


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSEAttention(CachedSequenceSpec, SequenceChecks, keras.layers.Layer):
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

    Dropout (rate ``dropout``) applies to the attention probabilities;
    ``weight_dropout`` (``conv="dynamic"`` only) drops predicted taps after
    their softmax (DropConnect on the per-position kernels, the official
    code's "weight dropout", 0.1 there), with the usual ``1 / (1 - rate)``
    scaling, so a training step's kernels no longer sum to exactly 1.

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
        weight_dropout: dropout rate on the dynamic convolutions' predicted
            taps (after the softmax); must be 0 for ``conv="static"``, whose
            kernels are weights, not predictions.
        fused_attention: ``"auto"`` (default), ``True`` or ``False``: compute
            the attention with ``keras.ops.dot_product_attention`` (PyTorch's
            ``scaled_dot_product_attention``, ``jax.nn.dot_product_attention``)
            when attention dropout is inactive (the rule every attention layer
            here shares); the same results within float32 rounding. ``"auto"``
            uses it where it was measured to pay, as `MultiHeadRelativeAttention`
            does: on PyTorch when no gradient is recorded (``predict``); on CPU
            it was slower on JAX (``benchmarks/muse.py``). Under mixed
            precision the fused function computes in the compute dtype (e.g.
            bfloat16), so results differ from the float32 softmax by that
            dtype's rounding.
        use_bias: whether the projections (query, key, value, pointwise,
            kernel predictors, output) have biases.
        kernel_initializer: initializer of every kernel (depthwise filters
            included); each kernel draws from its own copy (a seeded initializer
            gets one seed per kernel, derived from its seed), so no two start equal.
        bias_initializer: initializer of every bias (copied the same way).
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``(batch, time, num_heads * key_dim)``.
        mask: optional ``(batch, time)`` boolean or integer 0/1, True for real tokens; by default
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
        weight_dropout: float = 0.0,
        fused_attention: bool | str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.num_heads = check_int(caller, "num_heads", num_heads, minimum=1)
        self.key_dim = check_int(caller, "key_dim", key_dim, minimum=1)
        if conv not in _CONV_MODES:
            raise ValueError(
                f"{caller}: `conv` must be one of {', '.join(map(repr, _CONV_MODES))}, "
                f"got {conv!r}."
            )
        self.conv = conv
        self.kernel_sizes = _check_kernel_sizes(caller, conv, kernel_sizes)
        self.causal = check_bool(caller, "causal", causal)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.weight_dropout = check_rate(caller, "weight_dropout", weight_dropout)
        if self.weight_dropout and conv == "static":
            raise ValueError(
                f"{caller}: `weight_dropout` drops the taps that conv='dynamic' predicts; "
                f"conv='static' has none, so it must be 0, got {weight_dropout!r}."
            )
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    @property
    def channels(self) -> int:
        """The input and output width, ``num_heads * key_dim``."""
        return self.num_heads * self.key_dim

    # ------------------------------------------------------------------ build

    def _check_input_shape(self, value: Any) -> None:
        # A shape (build) or the inputs themselves (call: their dtype is checked too).
        shape = self._check_sequence("inputs", value)
        if shape[-1] != self.channels:
            raise ValueError(
                f"{self._describe()}: the last axis of `inputs` must be num_heads * key_dim = "
                f"{self.num_heads} * {self.key_dim} = {self.channels}, got shape {shape}."
            )

    def _dense(self, equation: str, output_shape: tuple, bias_axes: str, name: str) -> Any:
        return _attention.projection(self, equation, output_shape, bias_axes, name)

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
                        initializer=sublayer_initializer(
                            self.kernel_initializer, f"depthwise_kernel_{k}"
                        ),
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
        self.weight_dropout_layer = keras.layers.Dropout(
            self.weight_dropout, dtype=self.dtype_policy, name="weight_dropout"
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
        input_shape = shape_of(inputs)
        self._check_input_shape(inputs)
        x = inputs
        mask = check_mask(self._describe(), "mask", mask, input_shape[:2], ("batch", "time"))
        if mask is not None:
            # A fresh tensor: the projections (which do not support masking)
            # must not receive the input's Keras mask.
            x = _attention.unmasked(x)
        if cache is not None:
            return self._decode(x, mask, training, cache, cache_update_index)

        q = self.query_dense(x)  # (batch, time, heads, key_dim)
        k = self.key_dense(x)
        v = self.value_dense(x)
        length = ops.shape(x)[1]
        attention_mask = None
        if mask is not None:
            # expand_dims, not mask[:, None]: LiteRT has no builtin for a slice adding an axis.
            attention_mask = ops.expand_dims(mask, 1)  # (batch, 1, keys)
            # Padded values are zeroed for the convolutions (a select, so a NaN
            # there is gone too); attention excludes padded keys anyway.
            v = _attention.zero_invalid(v, mask)
        if self.causal:
            causal = _attention.causal_mask(length, length, 0)
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
        convolved = self._convolve(padded, values, training)
        return self.output_dense(ops.concatenate([attended, convolved], axis=-1))

    def _attend(self, q: Any, k: Any, v: Any, attention_mask: Any, training: Any) -> Any:
        """Multi-head attention (the core's), (batch, q_len, C)."""
        output = _attend_heads(self, q, k, v, attention_mask, training)
        shape = ops.shape(output)
        return ops.reshape(output, (shape[0], shape[1], self.channels))

    def _branch_window(self, padded: Any, k: int) -> Any:
        """The rows of ``padded`` (padded for the largest kernel) that a ``k``-tap conv reads."""
        extra = max(self.kernel_sizes) - k
        left, right = (extra, 0) if self.causal else (extra // 2, extra // 2)
        return padded[:, left:] if right == 0 else padded[:, left:-right]

    def _convolve(self, padded: Any, values: Any, training: Any = None) -> Any:
        """``sum_k softmax(gamma)_k D_k`` over the convolution branches, (batch, time, C).

        ``padded`` holds the (masked) values with ``max(k) - 1`` extra rows,
        placed as the largest kernel needs; ``values`` the rows of the outputs.
        """
        gate = None
        if self.gamma is not None:
            gate = ops.cast(ops.softmax(ops.cast(self.gamma, "float32")), values.dtype)
        if self.conv == "dynamic":
            return self._dynamic_convolution(padded, values, gate, training)
        total = None
        for index, k in enumerate(self.kernel_sizes):
            branch = self._static_branch(self._branch_window(padded, k), values, index, k)
            if gate is not None:
                branch = branch * gate[index]
            total = branch if total is None else total + branch
        return total

    def _static_branch(self, window: Any, values: Any, index: int, k: int) -> Any:
        filtered = values
        if k > 1:
            # The depthwise convolution as k shifted multiply-adds: the same on every
            # backend, and much faster than ops.depthwise_conv under JAX on CPU
            # (XLA's grouped convolution; benchmarks/muse.py).
            kernel = ops.cast(self.depthwise_kernels[index], window.dtype)  # (k, C)
            filtered = None
            for j in range(k):
                shifted = window[:, j:] if j == k - 1 else window[:, j : j - (k - 1)]
                term = shifted * kernel[j]
                filtered = term if filtered is None else filtered + term
        return self.pointwise_denses[index](filtered)

    def _dynamic_taps(self, values: Any, gate: Any, training: Any) -> Any:
        """``sum_k gate_k taps_k``, (batch, time, heads, max(k)): every branch's taps at once.

        Each branch predicts per-position taps from V (softmax over its ``k``
        taps in float32, one set per head, then weight dropout). A convolution
        is linear in its kernel, so the gated sum of the branches equals one
        convolution with the gated sum of their kernels, each placed in the
        widest window where its taps read (centred, or right-aligned when
        causal): one pass over V instead of one per branch.
        """
        largest = max(self.kernel_sizes)
        total = None
        for index, k in enumerate(self.kernel_sizes):
            logits = ops.cast(self.kernel_predictors[index](values), "float32")  # (b, t, h, k)
            taps = ops.cast(ops.softmax(logits, axis=-1), values.dtype)
            taps = self.weight_dropout_layer(taps, training=training)
            if gate is not None:
                taps = taps * gate[index]
            extra = largest - k
            if extra:
                left, right = (extra, 0) if self.causal else (extra // 2, extra // 2)
                taps = ops.pad(taps, ((0, 0), (0, 0), (0, 0), (left, right)))
            total = taps if total is None else total + taps
        return total

    def _dynamic_convolution(self, padded: Any, values: Any, gate: Any, training: Any) -> Any:
        taps = self._dynamic_taps(values, gate, training)
        shape = ops.shape(values)
        batch, length = shape[0], shape[1]
        # Every size explicit: a -1 cannot be inferred from a batch of 0 rows (PyTorch, JAX).
        window = ops.reshape(padded, (batch, ops.shape(padded)[1], self.num_heads, self.key_dim))
        largest = max(self.kernel_sizes)
        output = None
        for j in range(largest):
            # Tap j of output t reads window row t + j; the heads' channels share it.
            shifted = window[:, j:] if j == largest - 1 else window[:, j : j - (largest - 1)]
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
        _attention.check_cache(name, "cache", cache, self.num_heads, self.key_dim)
        q = self.query_dense(x)
        key_cache, value_cache, cache = _attention.write_key_value_cache(
            cache, self.key_dense(x), self.value_dense(x), cache_update_index, caller=name
        )
        k = ops.cast(key_cache, q.dtype)
        v = ops.cast(value_cache, q.dtype)
        length = ops.shape(x)[1]
        attention_mask = _attention.causal_mask(length, ops.shape(k)[1], cache_update_index)
        attended = self._attend(q, k, v, attention_mask, training)

        # The convolutions' history: cached values at positions i - (K - 1) ..
        # i + length - 1; positions before 0 are the causal left padding (zeros).
        largest = max(self.kernel_sizes)
        positions = ops.arange(shape_of(x)[1] + largest - 1) + (
            ops.cast(cache_update_index, "int32") - (largest - 1)
        )
        valid = ops.cast(ops.greater_equal(positions, 0), v.dtype)
        window = ops.take(v, ops.maximum(positions, 0), axis=1)
        window = window * valid[None, :, None, None]
        batch = ops.shape(window)[0]
        window = ops.reshape(window, (batch, ops.shape(window)[1], self.channels))
        values = window[:, largest - 1 :]
        convolved = self._convolve(window, values, training)
        output = self.output_dense(ops.concatenate([attended, convolved], axis=-1))
        return output, cache

    # ------------------------------------------------------------------ shapes, masks, config

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        """The output has one row per input position and carries the input's mask."""
        return previous_mask

    def compute_output_shape(self, input_shape: Any) -> tuple:
        input_shape = tuple(input_shape)
        self._check_input_shape(input_shape)
        return input_shape

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
            weight_dropout=self.weight_dropout,
            fused_attention=self.fused_attention,
        )
        return config


# --------------------------------------------------------------------------- blocks


class _CrossAttention(keras.layers.Layer):
    """Multi-head attention of decoder queries over encoder keys/values (MUSE's decoder).

    Not called through ``__call__``: the decoder block builds it, projects the
    encoder output once with :meth:`key_values` (which is also the decoding
    cache, ``(batch, 2, source_time, heads, head_dim)``) and attends with
    :meth:`attend`. The softmax runs in float32 and a query whose source is
    all padding gets zeros, as in `MUSEAttention`.
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        dropout: float,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        fused_attention: bool | str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.dropout = dropout
        self.fused_attention = fused_attention
        self.use_bias = use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer

    def _dense(self, equation: str, output_shape: tuple, bias_axes: str, name: str) -> Any:
        return _attention.projection(self, equation, output_shape, bias_axes, name)

    def build(self, query_shape: Any, source_shape: Any) -> None:
        heads = (None, self.num_heads, self.key_dim)
        self.query_dense = self._dense("abc,cde->abde", heads, "de", "query")
        self.query_dense.build(query_shape)
        self.key_dense = self._dense("abc,cde->abde", heads, "de", "key")
        self.key_dense.build(source_shape)
        self.value_dense = self._dense("abc,cde->abde", heads, "de", "value")
        self.value_dense.build(source_shape)
        self.output_dense = self._dense("abde,dec->abc", (None, query_shape[-1]), "c", "output")
        self.output_dense.build(tuple(query_shape[:2]) + (self.num_heads, self.key_dim))
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.built = True

    def key_values(self, source: Any) -> Any:
        """The projected keys and values, stacked: ``(batch, 2, source_time, heads, head_dim)``."""
        return ops.stack((self.key_dense(source), self.value_dense(source)), axis=1)

    def attend(self, query: Any, key_values: Any, source_mask: Any, training: Any) -> Any:
        q = self.query_dense(query)
        k = ops.cast(key_values[:, 0], q.dtype)
        v = ops.cast(key_values[:, 1], q.dtype)
        # (batch, 1, source); expand_dims, as above, for LiteRT.
        mask = None if source_mask is None else ops.expand_dims(source_mask, 1)
        return self.output_dense(_attend_heads(self, q, k, v, mask, training))


class _MUSEBlock(SequenceChecks, keras.layers.Layer):
    """Arguments, validation and the sublayers the encoder and decoder blocks share."""

    _causal = False

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        conv: str = "dynamic",
        kernel_sizes: Any = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        weight_dropout: float = 0.0,
        activation: Any = "relu",
        layer_norm_epsilon: float = 1e-5,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        fused_attention: bool | str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        caller = type(self).__name__
        self.intermediate_dim = check_int(caller, "intermediate_dim", intermediate_dim, 1)
        self.num_heads = check_int(caller, "num_heads", num_heads, 1)
        if conv not in _CONV_MODES:
            raise ValueError(
                f"{caller}: `conv` must be one of {', '.join(map(repr, _CONV_MODES))}, "
                f"got {conv!r}."
            )
        self.conv = conv
        self.kernel_sizes = _check_kernel_sizes(caller, conv, kernel_sizes)
        self.dropout = check_rate(caller, "dropout", dropout)
        self.attention_dropout = check_rate(caller, "attention_dropout", attention_dropout)
        self.activation_dropout = check_rate(caller, "activation_dropout", activation_dropout)
        self.weight_dropout = check_rate(caller, "weight_dropout", weight_dropout)
        if self.weight_dropout and conv == "static":
            raise ValueError(
                f"{caller}: `weight_dropout` drops the taps that conv='dynamic' predicts; "
                f"conv='static' has none, so it must be 0, got {weight_dropout!r}."
            )
        self.activation = check_activation(caller, activation)
        self.layer_norm_epsilon = check_positive_number(
            caller, "layer_norm_epsilon", layer_norm_epsilon
        )
        self.use_bias = check_bool(caller, "use_bias", use_bias)
        self.fused_attention = check_bool_or_auto(caller, "fused_attention", fused_attention)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True
        self._mask_reader = KerasMask(dtype=self.dtype_policy, name="keras_mask")

    # ------------------------------------------------------------------ helpers

    def _key_dim(self, hidden: int) -> int:
        if hidden % self.num_heads:
            raise ValueError(
                f"{self._describe()}: the inputs' last axis must be a multiple of `num_heads` "
                f"(the head size is hidden / num_heads, as in the official code): "
                f"{hidden} is not a multiple of {self.num_heads}."
            )
        return hidden // self.num_heads

    def _build_common(self, shape: tuple) -> None:
        """The self-attention, the feed-forward branch, the layer norm and the dropouts."""
        hidden = shape[-1]
        self.key_dim = self._key_dim(hidden)
        self.self_attention = MUSEAttention(
            self.num_heads,
            self.key_dim,
            conv=self.conv,
            kernel_sizes=self.kernel_sizes,
            causal=self._causal,
            dropout=self.attention_dropout,
            weight_dropout=self.weight_dropout,
            use_bias=self.use_bias,
            kernel_initializer=sublayer_initializer(self.kernel_initializer, "self_attention"),
            bias_initializer=sublayer_initializer(self.bias_initializer, "self_attention"),
            fused_attention=self.fused_attention,
            dtype=self.dtype_policy,
            name="self_attention",
        )
        self.self_attention.build(shape)

        self.feedforward_intermediate_dense, self.feedforward_output_dense = feedforward_denses(
            self, shape
        )
        self.activation_dropout_layer = keras.layers.Dropout(
            self.activation_dropout, dtype=self.dtype_policy, name="activation_dropout"
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build(shape)

    def _feedforward(self, x: Any, training: Any) -> Any:
        hidden = self.feedforward_intermediate_dense(x)
        hidden = self.activation_dropout_layer(hidden, training=training)
        return self.feedforward_output_dense(hidden)

    def _combine(self, x: Any, branches: list, training: Any) -> Any:
        """``LayerNorm(x + sum(dropout(branch)))``: parallel branches, post-norm."""
        total = x
        for branch in branches:
            total = total + self.dropout_layer(branch, training=training)
        return self.layer_norm(total)

    _unmasked = staticmethod(_attention.unmasked)

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        """The output carries the (decoder) input's Keras mask."""
        return previous_mask

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            conv=self.conv,
            kernel_sizes=list(self.kernel_sizes),
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation_dropout=self.activation_dropout,
            weight_dropout=self.weight_dropout,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            fused_attention=self.fused_attention,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSEEncoderLayer(_MUSEBlock):
    """MUSE encoder block: attention + convolutions and a feed-forward network in parallel.

    With ``x`` of width ``C`` (the official code's ``TransformerCombineEncoderLayer``)::

        Y  = MUSEAttention(x)                      # attention and convs of V, one projection
        F  = fc2(activation_dropout(relu(fc1(x))))
        x' = LayerNorm(x + dropout(Y) + dropout(F))

    The branches read the same input and are summed with the residual before
    one layer normalisation (post-norm, the official default). The
    convolutions are centred ("same"); see `MUSEAttention` for the gate,
    the masks and the dynamic or static convolutions.

    Masks follow Keras: ``True`` marks a real token. The padding mask is
    ``padding_mask`` when given, else the inputs' Keras mask (e.g. from
    ``Embedding(mask_zero=True)``); real positions never depend on padded
    ones (attention skips padded keys, convolutions see zeros there). Padded
    positions' outputs are meaningless; the output carries the inputs' Keras
    mask.

    Args:
        intermediate_dim: width of the feed-forward branch (768 for IWSLT, 3072
            for the large WMT model).
        num_heads: attention heads; the inputs' width must be a multiple of it
            (head size = width / num_heads).
        conv: ``"dynamic"`` (default, the official code: per-position kernels
            predicted from V) or ``"static"`` (depthwise-separable, the
            paper's description); see `MUSEAttention`.
        kernel_sizes: odd kernel sizes, one convolution branch each; ``None``
            for `MUSEAttention`'s defaults, ``(3, 15)`` dynamic (the official
            code) and ``(1, 3, 7)`` static.
        dropout: dropout on every branch's output before the sum (0.4 for
            IWSLT, 0.3 for WMT En-De in the official runs).
        attention_dropout: dropout on the attention probabilities.
        activation_dropout: dropout after the feed-forward activation.
        weight_dropout: dropout on the dynamic convolutions' predicted taps
            (0.1, hard-coded, in the official code); must be 0 for static.
        activation: activation of the feed-forward branch (``"relu"``).
        layer_norm_epsilon: epsilon of the layer normalisation.
        use_bias: whether the projections and the feed-forward layers have
            biases (the layer norm always has scale and offset).
        kernel_initializer: initializer of every kernel; each kernel draws from its
            own copy (a seeded initializer gets one seed per kernel, derived from its
            seed), so no two start equal.
        bias_initializer: initializer of every bias (copied the same way).
        fused_attention: ``"auto"`` (default), ``True`` or ``False``: self- (and
            cross-) attention through ``keras.ops.dot_product_attention`` without
            active attention dropout; see `MUSEAttention`.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        inputs: ``(batch, time, hidden)``.
        padding_mask: ``(batch, time)`` boolean or integer 0/1, True for real tokens; default
            the inputs' Keras mask.
        training: whether dropout is active.

    Returns:
        ``(batch, time, hidden)``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.muse import MUSEEncoderLayer
        >>> encoder = MUSEEncoderLayer(intermediate_dim=16, num_heads=2, kernel_sizes=(3, 5))
        >>> x = np.random.default_rng(0).standard_normal((2, 6, 8)).astype("float32")
        >>> mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
        >>> tuple(encoder(x, padding_mask=mask).shape)
        (2, 6, 8)

    Reference:
        Zhao, Sun, Xu, Zhang, Luo, "MUSE: Parallel Multi-Scale Attention for
        Sequence to Sequence Learning", arXiv:1911.09483, 2019.
    """

    def build(self, inputs_shape: Any) -> None:
        shape = self._check_sequence("inputs", inputs_shape)
        self._build_common(shape)
        self._built_features = {"inputs": shape[-1]}
        self.built = True

    def call(self, inputs: Any, padding_mask: Any = None, training: Any = None) -> Any:
        self._check_sequence("inputs", inputs)
        padding_mask = self._check_mask("padding_mask", padding_mask, like=shape_of(inputs)[:2])
        if padding_mask is None:
            padding_mask = self._mask_reader(inputs)
        x = self._unmasked(inputs)
        attended = self.self_attention(x, mask=padding_mask, training=training)
        return self._combine(x, [attended, self._feedforward(x, training)], training)

    def compute_output_shape(self, inputs_shape: Any) -> tuple:
        shape = self._check_sequence("inputs", inputs_shape)
        self._key_dim(shape[-1])
        return shape


@keras.saving.register_keras_serializable(package="keras_posenc")
class MUSEDecoderLayer(_MUSEBlock):
    """MUSE decoder block: causal attention + convolutions, cross-attention, feed-forward.

    With ``x`` of width ``C`` and the encoder output ``h`` (the official
    code's ``TransformerCombineDecoderLayer``)::

        Y  = MUSEAttention(x, causal=True)   # attention and causal convs of V
        X  = CrossAttention(x, h)            # plain multi-head attention over h
        F  = fc2(activation_dropout(relu(fc1(x))))
        x' = LayerNorm(x + dropout(Y) + dropout(X) + dropout(F))

    All three branches read the same input (post-norm, one layer norm). The
    convolutions pad ``k - 1`` zeros on the left, so output ``t`` sees
    decoder positions ``<= t`` only. (The official layer also creates an
    ``encoder_attn_layer_norm`` that its forward pass never uses; it is not
    created here.) The cross-attention's softmax runs in float32 and a
    query whose source is all padding gets zeros from it, never NaN.

    **Decoding**: ``cache`` is a pair ``(self_attention_cache,
    cross_attention_cache)``, both batch-first and of fixed shape, so beam
    search reorders them with ``ops.take(t, beam_indices, axis=0)``:

    - ``self_attention_cache``: ``(batch, 2, max_length, num_heads,
      head_dim)``, `MUSEAttention`'s keys/values buffer (zeros to start);
    - ``cross_attention_cache``: ``(batch, 2, source_time, num_heads,
      head_dim)``, the encoder output's projected keys and values, computed
      once with :meth:`cross_attention_cache` before the first step.

    A call with ``cache`` and ``cache_update_index=i`` writes the new
    self-attention keys/values at positions ``i ..``, reads the encoder side
    from the cross-attention cache (``encoder_sequence`` must then be
    None; its mask is ``encoder_padding_mask``) and returns ``(output,
    (new_self_attention_cache, cross_attention_cache))``; step by step it
    equals the full causal computation.

    Masks follow Keras: ``True`` marks a real token. Without a cache the
    decoder padding mask is ``decoder_padding_mask`` when given, else the
    decoder sequence's Keras mask; the encoder padding mask is
    ``encoder_padding_mask``, else the encoder sequence's Keras mask.

    Args:
        intermediate_dim: width of the feed-forward branch (768 for IWSLT, 3072
            for the large WMT model).
        num_heads: attention heads; the inputs' width must be a multiple of it
            (head size = width / num_heads).
        conv: ``"dynamic"`` (default, the official code: per-position kernels
            predicted from V) or ``"static"`` (depthwise-separable, the
            paper's description); see `MUSEAttention`.
        kernel_sizes: odd kernel sizes, one convolution branch each; ``None``
            for `MUSEAttention`'s defaults, ``(3, 15)`` dynamic (the official
            code) and ``(1, 3, 7)`` static.
        dropout: dropout on every branch's output before the sum (0.4 for
            IWSLT, 0.3 for WMT En-De in the official runs).
        attention_dropout: dropout on the attention probabilities.
        activation_dropout: dropout after the feed-forward activation.
        weight_dropout: dropout on the dynamic convolutions' predicted taps
            (0.1, hard-coded, in the official code); must be 0 for static.
        activation: activation of the feed-forward branch (``"relu"``).
        layer_norm_epsilon: epsilon of the layer normalisation.
        use_bias: whether the projections and the feed-forward layers have
            biases (the layer norm always has scale and offset).
        kernel_initializer: initializer of every kernel; each kernel draws from its
            own copy (a seeded initializer gets one seed per kernel, derived from its
            seed), so no two start equal.
        bias_initializer: initializer of every bias (copied the same way).
        fused_attention: ``"auto"`` (default), ``True`` or ``False``: self- (and
            cross-) attention through ``keras.ops.dot_product_attention`` without
            active attention dropout; see `MUSEAttention`.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        decoder_sequence: ``(batch, time, hidden)``.
        encoder_sequence: ``(batch, source_time, encoder_hidden)``; required
            without a cache (and on the first call, which builds the
            cross-attention), None with one.
        decoder_padding_mask: ``(batch, time)`` boolean or integer 0/1, True for real tokens;
            not with a cache.
        encoder_padding_mask: ``(batch, source_time)`` boolean or integer 0/1, True for real
            tokens.
        cache: ``(self_attention_cache, cross_attention_cache)``, see above.
        cache_update_index: position of ``decoder_sequence[:, 0]`` in the
            target (an int or a scalar integer tensor); required with a cache.
        training: whether dropout is active.

    Returns:
        ``(batch, time, hidden)``; with a cache, ``(output, (self_attention_cache,
        cross_attention_cache))``.

    Examples:

        >>> import numpy as np
        >>> from keras_posenc.layers.muse import MUSEDecoderLayer
        >>> decoder = MUSEDecoderLayer(intermediate_dim=16, num_heads=2, kernel_sizes=(3, 5))
        >>> rng = np.random.default_rng(0)
        >>> x = rng.standard_normal((2, 4, 8)).astype("float32")
        >>> encoded = rng.standard_normal((2, 7, 8)).astype("float32")
        >>> tuple(decoder(x, encoded).shape)
        (2, 4, 8)
        >>> cache = (np.zeros((2, 2, 4, 2, 4), "float32"), decoder.cross_attention_cache(encoded))
        >>> output, cache = decoder(x[:, :1], cache=cache, cache_update_index=0)
        >>> tuple(output.shape), [tuple(c.shape) for c in cache]
        ((2, 1, 8), [(2, 2, 4, 2, 4), (2, 2, 7, 2, 4)])

    Reference:
        Zhao, Sun, Xu, Zhang, Luo, "MUSE: Parallel Multi-Scale Attention for
        Sequence to Sequence Learning", arXiv:1911.09483, 2019.
    """

    _causal = True

    def build(self, decoder_sequence_shape: Any, encoder_sequence_shape: Any = None) -> None:
        shape = self._check_sequence("decoder_sequence", decoder_sequence_shape)
        if encoder_sequence_shape is None:
            raise ValueError(
                f"{self._describe()}: the first call must pass `encoder_sequence` (it builds "
                "the cross-attention, which every MUSE decoder block has); got None."
            )
        encoder_shape = self._check_sequence("encoder_sequence", encoder_sequence_shape)
        self._build_common(shape)
        self.cross_attention = _CrossAttention(
            self.num_heads,
            self.key_dim,
            self.attention_dropout,
            self.use_bias,
            sublayer_initializer(self.kernel_initializer, "cross_attention"),
            sublayer_initializer(self.bias_initializer, "cross_attention"),
            self.fused_attention,
            dtype=self.dtype_policy,
            name="cross_attention",
        )
        self.cross_attention.build(shape, encoder_shape)
        self._built_features = {
            "decoder_sequence": shape[-1],
            "encoder_sequence": encoder_shape[-1],
        }
        self.built = True

    def cross_attention_cache(self, encoder_sequence: Any) -> Any:
        """The cross-attention cache of an encoder output: its projected keys and values.

        Args:
            encoder_sequence: ``(batch, source_time, encoder_hidden)``.

        Returns:
            ``(batch, 2, source_time, num_heads, head_dim)``; ``[:, 0]`` the
            keys, ``[:, 1]`` the values.

        Raises:
            ValueError: if the layer is not built yet (call it once, or
                ``build(decoder_shape, encoder_shape)``), or for a wrong shape.
        """
        if not self.built:
            raise ValueError(
                f"{self._describe()}: build the layer first (call it once on a decoder and an "
                "encoder sequence, or `build(decoder_shape, encoder_shape)`) before computing "
                "a cross-attention cache."
            )
        self._check_sequence("encoder_sequence", encoder_sequence)
        return self.cross_attention.key_values(self._unmasked(encoder_sequence))

    def _check_cache(
        self, cache: Any, encoder_sequence: Any, decoder_padding_mask: Any, index: Any
    ) -> tuple:
        name = self._describe()
        if not isinstance(cache, tuple | list) or len(cache) != 2:
            raise ValueError(
                f"{name}: `cache` must be a pair (self_attention_cache, cross_attention_cache), "
                f"got {type(cache).__name__}."
            )
        if encoder_sequence is not None:
            raise ValueError(
                f"{name}: with a `cache` the encoder side comes from the cross-attention cache "
                "(`cross_attention_cache(encoder_sequence)`), so `encoder_sequence` must be None; "
                f"got a tensor of shape {shape_of(encoder_sequence)}."
            )
        if decoder_padding_mask is not None:
            raise ValueError(
                f"{name}: `decoder_padding_mask` cannot be combined with a `cache` (decoding "
                "attends to every cached position up to the current one); call without it."
            )
        if index is None:
            raise ValueError(
                f"{name}: a `cache` needs `cache_update_index` (the position of the inputs in "
                "the target), got None."
            )
        self_cache, cross_cache = cache
        heads = (self.num_heads, self.key_dim)
        for argument, tensor in (("cache[0]", self_cache), ("cache[1]", cross_cache)):
            shape = shape_of(tensor)
            if len(shape) != 5 or shape[1] != 2 or shape[3:] != heads:
                raise ValueError(
                    f"{name}: `{argument}` must have shape (batch, 2, length, {heads[0]}, "
                    f"{heads[1]}) (= (batch, 2, length, num_heads, head_dim)), got shape {shape}."
                )
        return self_cache, cross_cache

    def call(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any = None,
        decoder_padding_mask: Any = None,
        encoder_padding_mask: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        self._check_sequence("decoder_sequence", decoder_sequence)
        decoder_padding_mask = self._check_mask(
            "decoder_padding_mask", decoder_padding_mask, like=shape_of(decoder_sequence)[:2]
        )
        if cache is not None:
            self_cache, key_values = self._check_cache(
                cache, encoder_sequence, decoder_padding_mask, cache_update_index
            )
            encoder_padding_mask = self._check_mask("encoder_padding_mask", encoder_padding_mask)
        else:
            if encoder_sequence is None:
                raise ValueError(
                    f"{self._describe()}: `encoder_sequence` is required without a `cache` "
                    "(the cross-attention reads it); got None."
                )
            if cache_update_index is not None:
                raise ValueError(
                    f"{self._describe()}: `cache_update_index` needs a `cache`; got cache=None."
                )
            encoder_shape = self._check_sequence("encoder_sequence", encoder_sequence)
            encoder_padding_mask = self._check_mask(
                "encoder_padding_mask", encoder_padding_mask, like=encoder_shape[:2]
            )
            if decoder_padding_mask is None:
                decoder_padding_mask = self._mask_reader(decoder_sequence)
            if encoder_padding_mask is None:
                encoder_padding_mask = self._mask_reader(encoder_sequence)
            key_values = self.cross_attention.key_values(self._unmasked(encoder_sequence))

        x = self._unmasked(decoder_sequence)
        if cache is not None:
            attended, self_cache = self.self_attention(
                x, training=training, cache=self_cache, cache_update_index=cache_update_index
            )
        else:
            attended = self.self_attention(x, mask=decoder_padding_mask, training=training)
        crossed = self.cross_attention.attend(x, key_values, encoder_padding_mask, training)
        output = self._combine(x, [attended, crossed, self._feedforward(x, training)], training)
        if cache is None:
            return output
        return output, (self_cache, key_values)

    def compute_output_shape(self, decoder_sequence_shape: Any, *args: Any, **kwargs: Any) -> tuple:
        shape = self._check_sequence("decoder_sequence", decoder_sequence_shape)
        self._key_dim(shape[-1])
        return shape

    def compute_output_spec(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any = None,
        decoder_padding_mask: Any = None,
        encoder_padding_mask: Any = None,
        cache: Any = None,
        cache_update_index: Any = None,
        training: Any = None,
    ) -> Any:
        output = keras.KerasTensor(
            self.compute_output_shape(decoder_sequence.shape), dtype=self.compute_dtype
        )
        if cache is None:
            return output
        return output, tuple(keras.KerasTensor(c.shape, dtype=c.dtype) for c in cache)
