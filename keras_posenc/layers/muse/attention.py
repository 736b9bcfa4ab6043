"""`MUSEAttention`: self-attention and convolutions of its values, gated and projected.

The layer of the MUSE package (``keras_posenc.layers.muse``, whose docstring
describes MUSE); the argument checks here (the convolution modes and kernel
sizes, the heads' attention) are shared with the blocks built from it.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers import _attention
from keras_posenc.layers._checks import (
    SequenceChecks,
    check_bool,
    check_bool_or_auto,
    check_int,
    check_mask,
    check_rate,
    shape_of,
)
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._specs import CachedSequenceSpec

__all__ = ["MUSEAttention"]

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
