"""Transformer encoder/decoder blocks with relative self-attention, in numpy.

Written from Vaswani et al. (2017), section 3: each sub-layer is wrapped as
``LayerNorm(x + Sublayer(x))`` (post-norm), or ``x + Sublayer(LayerNorm(x))``
(pre-norm, GPT-2 / Xiong et al. 2020); the feed-forward network is
``FFN(x) = act(x W1 + b1) W2 + b2``; layer normalisation is
``(x - mean) / sqrt(var + eps) * gamma + beta`` over the feature axis.
The self-attention is the relative attention of ``reference.relative_attention``
(Shaw et al. / T5); the decoder's cross-attention is plain scaled dot-product
multi-head attention with no relative term. Dropout is not modelled
(inference). Everything runs in float64. Does not import keras_posenc.
"""

from __future__ import annotations

import numpy as np
from scipy.special import erf

from reference.relative_attention import masked_softmax, project, relative_attention


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, epsilon: float) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + erf(x / np.sqrt(2.0))),  # exact (erf) GELU
}


def feedforward(x: np.ndarray, weights: dict, activation: str) -> np.ndarray:
    """``act(x W1 + b1) W2 + b2``; biases may be None."""
    hidden = x.astype(np.float64) @ weights["intermediate_kernel"]
    if weights.get("intermediate_bias") is not None:
        hidden = hidden + weights["intermediate_bias"]
    out = ACTIVATIONS[activation](hidden) @ weights["output_kernel"]
    if weights.get("output_bias") is not None:
        out = out + weights["output_bias"]
    return out


def multi_head_attention(
    query: np.ndarray, value: np.ndarray, weights: dict, mask: np.ndarray | None = None
) -> np.ndarray:
    """Scaled dot-product multi-head attention (Vaswani et al., eq. 1), no positions.

    ``weights`` as in ``relative_attention`` (query/key/value/output kernels and
    biases); ``mask`` bool broadcastable to (batch, q_len, k_len), True = may
    attend. A fully masked row gets zero weights (``masked_softmax``), as in the
    decoder's cross-attention, which attends through the library's core.
    """
    q = project(query, weights["query_kernel"], weights.get("query_bias"))
    k = project(value, weights["key_kernel"], weights.get("key_bias"))
    v = project(value, weights["value_kernel"], weights.get("value_bias"))
    logits = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[-1])
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)[:, None]
    probabilities = masked_softmax(logits, mask)
    z = np.einsum("bhij,bjhd->bihd", probabilities, v)
    output = np.einsum("bihd,hde->bie", z, weights["output_kernel"].astype(np.float64))
    if weights.get("output_bias") is not None:
        output = output + weights["output_bias"]
    return output


def _sublayer(x: np.ndarray, norm: tuple, function, normalize_first: bool, epsilon: float):
    if normalize_first:
        return x + function(layer_norm(x, *norm, epsilon))
    return layer_norm(x + function(x), *norm, epsilon)


def encoder_block(
    x: np.ndarray,
    weights: dict,
    relative: str,
    index: np.ndarray,
    normalize_first: bool,
    epsilon: float = 1e-5,
    activation: str = "relu",
    mask: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
) -> np.ndarray:
    """One encoder block.

    Args:
        x: (batch, length, hidden).
        weights: ``self_attention`` (the dict of ``relative_attention``),
            ``self_attention_norm`` and ``feedforward_norm`` ((gamma, beta)),
            ``feedforward`` (``intermediate_kernel``, ``intermediate_bias``,
            ``output_kernel``, ``output_bias``).
        relative: "keys_values", "keys" or "bias".
        index: (length, length) relative table row of every (query, key) pair.
        normalize_first: pre-norm if True, post-norm if False.
        mask: bool broadcastable to (batch, length, length); True = may attend.
        attention_bias: added to the self-attention logits.
    """
    x = x.astype(np.float64)

    def attend(h):
        out, _ = relative_attention(
            h, h, None, weights["self_attention"], relative, index, mask, attention_bias
        )
        return out

    x = _sublayer(x, weights["self_attention_norm"], attend, normalize_first, epsilon)

    def ffn(h):
        return feedforward(h, weights["feedforward"], activation)

    return _sublayer(x, weights["feedforward_norm"], ffn, normalize_first, epsilon)


def decoder_block(
    x: np.ndarray,
    encoder: np.ndarray | None,
    weights: dict,
    relative: str,
    index: np.ndarray,
    normalize_first: bool,
    epsilon: float = 1e-5,
    activation: str = "relu",
    self_mask: np.ndarray | None = None,
    cross_mask: np.ndarray | None = None,
) -> np.ndarray:
    """One decoder block: self-attention (with ``self_mask``, e.g. causal), cross-attention
    over ``encoder`` (if not None, with ``cross_mask``), feed-forward.

    ``weights`` as for ``encoder_block`` plus ``cross_attention`` and
    ``cross_attention_norm``.
    """
    x = x.astype(np.float64)

    def attend(h):
        out, _ = relative_attention(
            h, h, None, weights["self_attention"], relative, index, self_mask
        )
        return out

    x = _sublayer(x, weights["self_attention_norm"], attend, normalize_first, epsilon)
    if encoder is not None:

        def cross(h):
            return multi_head_attention(h, encoder, weights["cross_attention"], cross_mask)

        x = _sublayer(x, weights["cross_attention_norm"], cross, normalize_first, epsilon)

    def ffn(h):
        return feedforward(h, weights["feedforward"], activation)

    return _sublayer(x, weights["feedforward_norm"], ffn, normalize_first, epsilon)
