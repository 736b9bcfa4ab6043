"""Numpy reference for 2D rotary position embeddings (axial and RoPE-Mixed), in float64.

From Heo et al. 2024 ("Rotary Position Embedding for Vision Transformer", eqs. 10-13):
the features of a cell at ``p = (p_x, p_y)`` are read as ``head_dim / 2`` complex numbers
``z_t = x_{2t} + i x_{2t + 1}`` and multiplied by ``exp(i phi_t(p))``:

- RoPE-Axial (eq. 10-11): ``phi_t = p_x theta_t`` for the first ``head_dim / 4`` numbers and
  ``p_y theta_t`` for the others, ``theta_t = temperature ** (-t / (head_dim / 4))`` (EVA-02's
  bands over cell indices), or timm's pixel bands ``pi * 2 ** linspace(0, log2(max_res) - 1)``
  (or ``pi * linspace(1, max_res / 2)``) over coordinates ``linspace(-1, 1, side)``; a
  reference grid rescales each coordinate by ``reference_side / side``.
- RoPE-Mixed (eq. 12-13): ``phi_t = theta_x[t] p_x + theta_y[t] p_y`` with learned
  ``theta_x``, ``theta_y`` per head.

``p_x`` is the column and ``p_y`` the row (timm's ``"xy"``) or the other way round
(``"ij"``: row first). Cells are flattened row by row. Nothing here imports keras_posenc.
"""

from __future__ import annotations

import math

import numpy as np


def axis_coordinates(side, pixel=False, reference=None):
    t = np.arange(side, dtype="float64")
    if pixel:
        t = np.linspace(-1.0, 1.0, side)
    if reference is not None:
        t = t / side * reference
    return t


def coordinates(size, indexing, pixel=False, reference=None):
    """``(first, second)`` per cell, row-major: (row, column) for "ij", else (column, row)."""
    height, width = size
    reference = reference or (None, None)
    rows = axis_coordinates(height, pixel, reference[0])
    columns = axis_coordinates(width, pixel, reference[1])
    cells = [(rows[r], columns[c]) for r in range(height) for c in range(width)]
    first = np.array([cell[0] if indexing == "ij" else cell[1] for cell in cells])
    second = np.array([cell[1] if indexing == "ij" else cell[0] for cell in cells])
    return first, second


def axial_bands(head_dim, temperature=10000.0, pixel=False, max_res=224, linear=False):
    count = head_dim // 4
    if not pixel:
        return temperature ** (-np.arange(count) / count)
    if linear:
        return np.pi * np.linspace(1.0, max_res / 2, count)
    return np.pi * 2.0 ** np.linspace(0.0, math.log2(max_res) - 1, count)


def axial_angles(size, head_dim, indexing="ij", reference=None, **bands):
    """``phi`` (N, head_dim / 2) of RoPE-Axial."""
    theta = axial_bands(head_dim, **bands)
    first, second = coordinates(size, indexing, bands.get("pixel", False), reference)
    return np.concatenate([np.outer(first, theta), np.outer(second, theta)], axis=-1)


def mixed_angles(size, frequencies, indexing="xy"):
    """``phi`` (N, heads, head_dim / 2) of RoPE-Mixed; ``frequencies`` (2, heads, head_dim / 2)."""
    first, second = coordinates(size, indexing)
    return (
        first[:, None, None] * frequencies[0][None] + second[:, None, None] * frequencies[1][None]
    )


def rotate(x, angles):
    """``x`` (..., N, heads, head_dim) times ``exp(i phi)`` pair by pair; ``angles``
    broadcast to (N, heads, head_dim / 2)."""
    x = np.asarray(x, "float64")
    z = x[..., 0::2] + 1j * x[..., 1::2]
    if angles.ndim == 2:
        angles = angles[:, None, :]
    turned = z * np.exp(1j * angles)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = turned.real, turned.imag
    return out


def initial_mixed_frequencies(angles, head_dim, temperature=10.0):
    """RoPE-Mixed's initialisation for given per-head angles (heads,): (2, heads, head_dim / 2)."""
    magnitudes = temperature ** (-np.arange(0, head_dim, 4) / head_dim)
    a = np.asarray(angles, "float64")[:, None]
    fx = np.concatenate([magnitudes * np.cos(a), magnitudes * np.cos(a + np.pi / 2)], -1)
    fy = np.concatenate([magnitudes * np.sin(a), magnitudes * np.sin(a + np.pi / 2)], -1)
    return np.stack([fx, fy])
