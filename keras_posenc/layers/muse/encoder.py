"""`MUSEEncoderLayer`: MUSE's encoder block (attention + convolutions, feed-forward)."""

from __future__ import annotations

from typing import Any

import keras

from keras_posenc.layers._checks import shape_of
from keras_posenc.layers.muse.block import _MUSEBlock

__all__ = ["MUSEEncoderLayer"]


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
        remat: recompute the block in the backward pass of training calls (Keras'
            ``keras.remat``; dropout draws the same masks again) instead of keeping its
            activations: less memory, about one more forward pass of time. Default False.
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
        if self._remats(training):
            if padding_mask is None:  # read here: the recomputed inputs carry no Keras mask
                padding_mask = self._mask_reader(inputs)
            return self._remat_call(
                lambda x: self.call(x, padding_mask, training), (inputs,), training
            )
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
