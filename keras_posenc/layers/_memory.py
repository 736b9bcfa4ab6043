"""The one estimate of what a layer is about to allocate, checked against a limit.

A huge ``num_heads``, table or sequence used to fail inside the backend's allocator
("OOM when allocating tensor with shape[8,100000,10000]", "DefaultCPUAllocator: can't
allocate memory", or on JAX sometimes not at all until later). Layers now estimate the
weights they create and the attention logits they compute from static shapes, before
allocating, and raise one `MemoryError`-like `ValueError` naming the layer, what, the
shape, the estimate and the limit.

The limit is the machine's physical memory by default (64 GiB where that cannot be
read); set it with :func:`set_memory_limit` or the ``KERAS_POSENC_MEMORY_LIMIT``
environment variable (bytes, or a number with ``K``/``M``/``G``/``T``: ``"512M"``).
An accelerator's memory is not read: set the limit to it when it is smaller.

Examples:

    >>> from keras_posenc.layers import memory_limit, set_memory_limit
    >>> set_memory_limit("1G"); memory_limit()
    1073741824
    >>> set_memory_limit(None)  # back to the default
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import numpy as np

__all__ = ["EstimateTooLarge", "check_allocation", "memory_limit", "set_memory_limit"]

ENVIRONMENT_VARIABLE = "KERAS_POSENC_MEMORY_LIMIT"
_FALLBACK = 64 * 2**30
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_limit: int | None = None


class EstimateTooLarge(ValueError):
    """A layer's estimated allocation is over :func:`memory_limit`."""


def _parse(caller: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{caller}: the limit must be a number of bytes, got {value!r}.")
    if isinstance(value, int | np.integer) and value > 0:
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.IGNORECASE)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"{caller}: the limit must be a positive number of bytes, or a number with "
            f"K, M, G or T (e.g. '512M'), got {value!r}."
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX, or not reported
        return _FALLBACK


def memory_limit() -> int:
    """The limit in bytes: :func:`set_memory_limit`'s, else the environment variable's,
    else the machine's physical memory."""
    if _limit is not None:
        return _limit
    value = os.environ.get(ENVIRONMENT_VARIABLE)
    if value:
        return _parse(ENVIRONMENT_VARIABLE, value)
    return _physical_memory()


def set_memory_limit(limit: int | str | None) -> None:
    """Sets the limit (bytes, or ``"512M"``-style text); None restores the default."""
    global _limit
    _limit = None if limit is None else _parse("set_memory_limit", limit)


def _bytes(shape: tuple, dtype: Any) -> int | None:
    # None, or a symbolic size (JAX's shape polymorphism in exports), is not counted.
    if not all(isinstance(size, int | np.integer) for size in shape):
        return None
    return math.prod(int(size) for size in shape) * np.dtype(dtype).itemsize


def _text(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.3g} TiB"  # not reached


def check_allocation(caller: str, what: str, shapes: list, dtype: Any = "float32") -> None:
    """Raises `EstimateTooLarge` when the tensors of ``shapes`` together exceed the limit.

    Args:
        caller: the layer, as errors name it.
        what: what is allocated ("weights", "attention logits").
        shapes: the shapes; one with an unknown (None) size is not counted.
        dtype: their dtype (its item size).
    """
    sizes = [(tuple(shape), _bytes(tuple(shape), dtype)) for shape in shapes]
    total = sum(size for _, size in sizes if size is not None)
    limit = memory_limit()
    if total <= limit:
        return
    largest = max((s for s in sizes if s[1] is not None), key=lambda s: s[1])[0]
    raise EstimateTooLarge(
        f"{caller}: its {what} would take about {_text(total)} ({dtype}; the largest of "
        f"shape {largest}), more than the memory limit of {_text(limit)}. Use smaller "
        f"settings, or raise the limit with keras_posenc.layers.set_memory_limit(...) or "
        f"{ENVIRONMENT_VARIABLE}."
    )
