"""Numpy reference for the 2D relative position bias of CoAtNet (Dai et al. 2021) and Swin.

Written from the formulas with explicit loops, independent of keras_posenc:

- bias[h, q, k] = P[h, i - i' + H - 1, j - j' + W - 1] for query q = i * W + j and
  key k = i' * W + j' (row-major flattening of an H x W grid);
- bilinear resizing with half-pixel centres and no antialiasing, the sampling of
  ``torch.nn.functional.interpolate(mode="bilinear", align_corners=False)`` that
  timm's ``resize_rel_pos_bias_table`` uses.
"""

from __future__ import annotations

import math

import numpy as np


def relative_position_bias_2d(table: np.ndarray, height: int, width: int) -> np.ndarray:
    """The bias (1, heads, H*W, H*W) of a table (heads, 2H-1, 2W-1), one entry at a time."""
    heads = table.shape[0]
    assert table.shape == (heads, 2 * height - 1, 2 * width - 1), table.shape
    positions = height * width
    bias = np.zeros((1, heads, positions, positions), dtype=np.float64)
    for h in range(heads):
        for i in range(height):
            for j in range(width):
                for i2 in range(height):
                    for j2 in range(width):
                        value = table[h, i - i2 + height - 1, j - j2 + width - 1]
                        bias[0, h, i * width + j, i2 * width + j2] = value
    return bias


def _source(out_index: int, in_size: int, out_size: int) -> tuple[int, int, float]:
    """Neighbours and weight of output sample ``out_index`` (half-pixel centres)."""
    coordinate = (out_index + 0.5) * in_size / out_size - 0.5
    coordinate = max(coordinate, 0.0)
    low = min(int(math.floor(coordinate)), in_size - 1)
    high = min(low + 1, in_size - 1)
    return low, high, coordinate - low


def bilinear_resize(table: np.ndarray, out_rows: int, out_cols: int) -> np.ndarray:
    """Each (rows, cols) slice of ``table`` (heads, rows, cols) resized bilinearly, per pixel."""
    heads, in_rows, in_cols = table.shape
    out = np.zeros((heads, out_rows, out_cols), dtype=np.float64)
    for r in range(out_rows):
        r0, r1, dr = _source(r, in_rows, out_rows)
        for c in range(out_cols):
            c0, c1, dc = _source(c, in_cols, out_cols)
            out[:, r, c] = (
                (1 - dr) * (1 - dc) * table[:, r0, c0]
                + (1 - dr) * dc * table[:, r0, c1]
                + dr * (1 - dc) * table[:, r1, c0]
                + dr * dc * table[:, r1, c1]
            )
    return out


def resize_table_for_grid(table: np.ndarray, height: int, width: int) -> np.ndarray:
    """A table (heads, 2H-1, 2W-1) resized for an ``height`` x ``width`` grid."""
    return bilinear_resize(table, 2 * height - 1, 2 * width - 1)
