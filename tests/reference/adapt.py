"""Numpy references for adapting models: LoRA and decoupled weight decay.

Written from the papers, independent of keras_posenc and of Keras' layers:

- LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", eq. 3 and
  section 4.1): ``h = W0 x + (alpha / r) B A x``, ``W0`` frozen. In the row-vector layout
  of Keras' kernels (``x @ W``, ``W`` of shape ``(..., in, out)``) the update is
  ``A @ B`` with ``A`` of shape ``(..., in, r)`` and ``B`` of ``(r, out)``.
- Decoupled weight decay (Loshchilov and Hutter 2019, "Decoupled Weight Decay
  Regularization", Algorithm 2, line 12): ``theta <- theta - lr * (adam_step + wd *
  theta)``; with zero gradients Adam's step is zero, so a decayed weight becomes
  ``theta * (1 - lr * wd)`` and an excluded one stays.
"""

from __future__ import annotations

import numpy as np


def lora_kernel(kernel: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """``W0 + (alpha / r) * A @ B``: the kernel a LoRA-adapted projection computes with."""
    rank = b.shape[0]
    assert a.shape == kernel.shape[:-1] + (rank,) and b.shape == (rank, kernel.shape[-1])
    return kernel + (alpha / rank) * np.einsum("...ir,ro->...io", a, b)


def head_projection(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``(batch, length, features) @ (features, heads, units) + (heads, units)``, one
    output at a time in float64: the attention's query, key and value projections."""
    batch, length, _ = x.shape
    heads, units = kernel.shape[1:]
    out = np.zeros((batch, length, heads, units))
    for n in range(batch):
        for t in range(length):
            out[n, t] = np.tensordot(x[n, t].astype("float64"), kernel, axes=(0, 0))
    return out if bias is None else out + bias


def decayed(value: np.ndarray, learning_rate: float, weight_decay: float) -> np.ndarray:
    """A weight after one AdamW step with zero gradients, when weight decay applies to it."""
    return value * (1.0 - learning_rate * weight_decay)
