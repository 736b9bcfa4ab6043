"""Decoder blocks of Llama, Mistral and Gemma 2 in numpy, in float64, as keras_hub 0.32
builds them (``LlamaTransformerDecoder``, ``MistralTransformerDecoder``,
``GemmaDecoderBlock``), on the attention of tests/reference/decoder_attention.py.

- Llama (Touvron et al. 2023): ``h = x + Attn(RMSNorm(x))``, ``y = h + W_down (silu(W_gate
  n) * W_up n)`` with ``n = RMSNorm(h)``; RMS norm ``x / sqrt(mean(x^2) + eps) * s``;
  causal, rotary (half-split pairs, base 10000), grouped key/value heads, no biases.
- Mistral (Jiang et al. 2023): Llama's block with a causal sliding window
  (``p_i - W < p_j <= p_i``).
- Gemma 2 (Team Gemma 2024): Gemma's RMS norm ``x / sqrt(mean(x^2) + eps) * (1 + s)``
  (its scale starts at zero); ``a = Attn(Norm(x))``, normed again after the attention
  (``use_post_attention_norm``); ``h = x + a``; the feed-forward ``W_lin (gelu_tanh(W_1 n) *
  W_2 n)``, ``n = Norm(h)``, normed after (``use_post_ffw_norm``); ``y = h + f``. The
  attention's logits are soft-capped, and every other layer (even ones, in
  ``GemmaBackbone``) has a causal window. keras_hub's rotary for Gemma interleaves the
  halves after turning them, the same permutation on queries and keys, which leaves the
  logits as with half-split pairs. The embedding's ``sqrt(hidden_dim)`` is the backbone's,
  not the block's. keras_hub 0.32's ``GemmaDecoderBlock`` builds its attention with
  ``query_head_dim_normalize=True`` whatever it is given, so its queries are scaled by
  ``1 / sqrt(head_dim)`` (``query_scale_dim=None`` here); the attention layer alone
  honours ``False`` (``hidden_dim // heads``).

The padding mask hides padded keys only (keras_hub's ``merge_padding_and_attention_mask``).
Weights are numpy arrays named below. Nothing here imports keras_posenc or keras_hub.
"""

from __future__ import annotations

import math

import numpy as np

from reference.decoder_attention import decoder_attention, rms_norm


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation (Hendrycks and Gimpel 2016)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gemma_rms_norm(x: np.ndarray, scale: np.ndarray, epsilon: float) -> np.ndarray:
    return rms_norm(x, 1.0 + np.asarray(scale, np.float64), epsilon)


def _key_mask(padding_mask: np.ndarray | None) -> np.ndarray | None:
    """(batch, length) 0/1 -> (batch, 1, length) bool: padded keys hidden from every query."""
    return None if padding_mask is None else np.asarray(padding_mask, bool)[:, None, :]


def llama_block(
    x: np.ndarray,
    weights: dict,
    padding_mask: np.ndarray | None = None,
    epsilon: float = 1e-6,
    max_wavelength: float = 10000.0,
    sliding_window: int | None = None,
) -> np.ndarray:
    """Llama's (and, with ``sliding_window``, Mistral's) block on ``x`` (batch, length, dim).

    ``weights``: ``attention`` (decoder_attention's weights, no biases),
    ``attention_norm`` and ``feedforward_norm`` (dim,), ``gate_kernel`` and ``up_kernel``
    (dim, intermediate), ``down_kernel`` (intermediate, dim).
    """
    x = np.asarray(x, np.float64)
    normed = rms_norm(x, weights["attention_norm"], epsilon)
    attended, _ = decoder_attention(
        normed,
        weights=weights["attention"],
        rotary={"max_wavelength": max_wavelength},
        causal=True,
        window=sliding_window,
        mask=_key_mask(padding_mask),
    )
    x = x + attended
    normed = rms_norm(x, weights["feedforward_norm"], epsilon)
    gate = silu(normed @ weights["gate_kernel"])
    return x + (gate * (normed @ weights["up_kernel"])) @ weights["down_kernel"]


def gemma_block(
    x: np.ndarray,
    weights: dict,
    padding_mask: np.ndarray | None = None,
    epsilon: float = 1e-6,
    logit_soft_cap: float | None = None,
    sliding_window: int | None = None,
    query_scale_dim: int | None = None,
) -> np.ndarray:
    """Gemma's (Gemma 2's with the soft cap, the window and the post norms) block.

    ``weights``: ``attention``; Gemma norm scales ``pre_attention_norm``,
    ``pre_ffw_norm`` and, where the block has them, ``post_attention_norm`` and
    ``post_ffw_norm`` (absent or None: no such norm); ``ffw_gating`` and ``ffw_gating_2``
    (dim, intermediate / 2), ``ffw_linear`` (intermediate / 2, dim).
    """
    x = np.asarray(x, np.float64)
    normed = gemma_rms_norm(x, weights["pre_attention_norm"], epsilon)
    attended, _ = decoder_attention(
        normed,
        weights=weights["attention"],
        rotary={"max_wavelength": 10000.0},
        causal=True,
        window=sliding_window,
        logit_soft_cap=logit_soft_cap,
        query_scale_dim=query_scale_dim,
        mask=_key_mask(padding_mask),
    )
    if weights.get("post_attention_norm") is not None:
        attended = gemma_rms_norm(attended, weights["post_attention_norm"], epsilon)
    x = x + attended
    normed = gemma_rms_norm(x, weights["pre_ffw_norm"], epsilon)
    hidden = gelu_tanh(normed @ weights["ffw_gating"]) * (normed @ weights["ffw_gating_2"])
    out = hidden @ weights["ffw_linear"]
    if weights.get("post_ffw_norm") is not None:
        out = gemma_rms_norm(out, weights["post_ffw_norm"], epsilon)
    return x + out


def gemma_backbone_windows(num_layers: int, window: int | None) -> list[int | None]:
    """Gemma 2's alternation as ``GemmaBackbone`` builds it: layer ``i`` local when even."""
    return [window if window is not None and i % 2 == 0 else None for i in range(num_layers)]
