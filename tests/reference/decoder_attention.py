"""Decoder self-attention's options in numpy, written from the formulas, in float64.

On top of tests/reference/relative_attention.py (projections, Shaw's and T5's relative
terms, the masked softmax; reused from there) and tests/reference/rotary.py (the rotation):

- Grouped key/value heads (Ainslie et al. 2023, GQA; multi-query with one head, Shazeer
  2019): the keys and values have ``g`` heads, ``g`` dividing the ``h`` query heads; query
  head ``n`` reads key/value head ``n // (h / g)`` (each key/value head repeated ``h / g``
  times on the head axis, as keras_hub's Llama, Mistral and Gemma do).
- Local attention (Longformer, Beltagy et al. 2020; Mistral, Jiang et al. 2023): with a
  window ``W`` the query at position ``p_i`` sees the key at ``p_j`` when ``|p_i - p_j| <
  W``; under the causal rule ``p_i - W < p_j <= p_i``.
- Attention sinks (StreamingLLM, Xiao et al. 2023): the keys at positions ``p_j < k`` are
  seen whatever the window (still under the causal rule).
- QK normalisation (Dehghani et al. 2023, ViT-22B; Qwen 3, Gemma 3): RMS norm
  ``x / sqrt(mean(x^2) + eps) * s`` or layer norm ``(x - mean) / sqrt(var + eps) * s + b``
  over the head dimension of every projected query and key head, before the rotation.
- Logit soft-capping (Gemma 2, Team Gemma 2024): ``e -> c tanh(e / c)`` on the logits
  (scaled content plus relative terms); an additive attention bias and the masks come after.
- Query scale: the logits' ``1 / sqrt(d)`` with another dimension (Gemma 2's
  ``query_head_dim_normalize=False``: ``hidden_dim / heads``); it scales the query, so the
  relative key term too, not a T5 bias.

Positions are true positions: the queries sit at ``query_offset + i``, the keys at ``j``,
and the relative index, the rotation, the window and the sinks read those. Nothing here
imports keras_posenc.
"""

from __future__ import annotations

import numpy as np

from reference import rotary as rotary_reference
from reference.relative_attention import masked_softmax, project, relative_vectors


def repeat_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """``(batch, length, g, d) -> (batch, length, num_heads, d)``: head ``n`` is ``x``'s head
    ``n // (num_heads / g)``, by an explicit loop."""
    groups = x.shape[2]
    assert num_heads % groups == 0, (num_heads, groups)
    per_group = num_heads // groups
    return np.stack([x[:, :, n // per_group] for n in range(num_heads)], axis=2)


def rms_norm(x: np.ndarray, scale: np.ndarray, epsilon: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * scale`` over the last axis."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + epsilon) * scale


def layer_norm(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float
) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis."""
    x = np.asarray(x, np.float64)
    centred = x - np.mean(x, axis=-1, keepdims=True)
    out = centred / np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True) + epsilon)
    out = out * scale
    return out if bias is None else out + bias


def soft_cap(logits: np.ndarray, cap: float | None) -> np.ndarray:
    """``c tanh(e / c)``; the logits unchanged without a cap."""
    return logits if cap is None else cap * np.tanh(logits / cap)


def local_mask(
    query_positions: np.ndarray,
    key_positions: np.ndarray,
    window: int | None = None,
    sinks: int = 0,
    causal: bool = False,
) -> np.ndarray:
    """(q_len, k_len) bool, True where query ``i`` may see key ``j``, pair by pair."""
    mask = np.zeros((len(query_positions), len(key_positions)), dtype=bool)
    for i, p in enumerate(query_positions):
        for j, r in enumerate(key_positions):
            seen = True
            if window is not None:
                seen = abs(int(p) - int(r)) < window or int(r) < sinks
            if causal and r > p:
                seen = False
            mask[i, j] = seen
    return mask


def _normalise(x: np.ndarray, weights: dict, role: str, kind: str | None, epsilon: float):
    if kind is None:
        return x
    scale = np.asarray(weights[f"{role}_norm_scale"], np.float64)
    if kind == "rms":
        return rms_norm(x, scale, epsilon)
    if kind == "layer":
        bias = weights.get(f"{role}_norm_bias")
        return layer_norm(x, scale, None if bias is None else np.asarray(bias, np.float64), epsilon)
    raise ValueError(kind)


def decoder_attention(
    query: np.ndarray,
    value: np.ndarray | None = None,
    key: np.ndarray | None = None,
    *,
    weights: dict,
    relative: str | None = None,
    index: np.ndarray | None = None,
    rotary: dict | None = None,
    causal: bool = False,
    window: int | None = None,
    sinks: int = 0,
    query_key_norm: str | None = None,
    norm_epsilon: float = 1e-6,
    logit_soft_cap: float | None = None,
    query_scale_dim: int | None = None,
    mask: np.ndarray | None = None,
    attention_bias: np.ndarray | None = None,
    query_offset: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The whole layer: projections, options, attention, output projection.

    Args:
        query: (batch, q_len, query_dim). value: (batch, k_len, in), default ``query``
            (self-attention). key: default ``value``.
        weights: ``query_kernel`` (query_dim, h, dk), ``key_kernel`` (in, g, dk),
            ``value_kernel`` (in, g, dv), ``output_kernel`` (h, dv, out); optional
            ``*_bias`` of each (None or absent: no bias); with ``query_key_norm``
            ``query_norm_scale`` and ``key_norm_scale`` (dk,) (and ``*_norm_bias`` for
            ``"layer"``); the relative tables of tests/reference/relative_attention.py.
        relative: None, ``"bias"``, ``"keys"`` or ``"keys_values"`` (Shaw / T5 terms).
        index: (q_len, k_len) table row of every pair (at the true positions).
        rotary: None, or tests/reference/rotary.py's ``rotary`` keyword arguments
            (``max_wavelength``, ``scaling``, ``interleaved``, ...; no xPos): queries
            turned at ``query_offset + i``, keys at ``j``.
        causal: the causal rule. window, sinks: local attention (`local_mask`).
        query_key_norm: None, ``"rms"`` or ``"layer"``; norm_epsilon its epsilon.
        logit_soft_cap: ``c`` of ``c tanh(e / c)``, or None.
        query_scale_dim: the ``d`` of ``1 / sqrt(d)``; default dk.
        mask: bool, broadcastable to (batch, q_len, k_len), True = may attend (padding).
        attention_bias: float, broadcastable to (batch, h, q_len, k_len), added after the cap.
        query_offset: the position of the first query.

    Returns:
        (output (batch, q_len, out), probabilities (batch, h, q_len, k_len)).
    """
    value = query if value is None else value
    key = value if key is None else key
    num_heads = weights["query_kernel"].shape[1]
    q = project(query, weights["query_kernel"], weights.get("query_bias"))
    k = project(key, weights["key_kernel"], weights.get("key_bias"))
    v = project(value, weights["value_kernel"], weights.get("value_bias"))
    q = _normalise(q, weights, "query", query_key_norm, norm_epsilon)
    k = _normalise(k, weights, "key", query_key_norm, norm_epsilon)
    query_positions = query_offset + np.arange(q.shape[1])
    key_positions = np.arange(k.shape[1])
    if rotary is not None:
        length = k.shape[1]
        q = rotary_reference.rotary(q, query_positions, "query", length, **rotary)
        k = rotary_reference.rotary(k, key_positions, "key", length, **rotary)
    k, v = repeat_heads(k, num_heads), repeat_heads(v, num_heads)
    scale = 1.0 / np.sqrt(q.shape[-1] if query_scale_dim is None else query_scale_dim)

    logits = np.einsum("bihd,bjhd->bhij", q, k)
    if relative in ("keys", "keys_values"):
        a_key = relative_vectors(np.asarray(weights["relative_keys"], np.float64), index)
        logits = logits + np.einsum("bihd,ijd->bhij", q, a_key)
    logits = logits * scale
    if relative == "bias":
        table = np.asarray(weights["relative_bias"], np.float64)
        logits = logits + np.transpose(table[index], (2, 0, 1))[None]
    elif relative not in (None, "keys", "keys_values"):
        raise ValueError(relative)
    logits = soft_cap(logits, logit_soft_cap)
    if attention_bias is not None:
        logits = logits + attention_bias
    visible = local_mask(query_positions, key_positions, window, sinks, causal)[None]
    if mask is not None:
        visible = np.logical_and(visible, np.asarray(mask, dtype=bool))
    probabilities = masked_softmax(logits, visible[:, None])

    if relative == "keys_values":
        a_value = relative_vectors(np.asarray(weights["relative_values"], np.float64), index)
        values_plus = v[:, None, :, :, :] + a_value[None, :, :, None, :]  # (b, i, j, h, d)
        z = np.einsum("bhij,bijhd->bihd", probabilities, values_plus)
    else:
        z = np.einsum("bhij,bjhd->bihd", probabilities, v)
    output = np.einsum("bihd,hde->bie", z, np.asarray(weights["output_kernel"], np.float64))
    if weights.get("output_bias") is not None:
        output = output + weights["output_bias"]
    return output, probabilities
