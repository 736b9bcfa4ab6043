"""The memory a tf2onnx conversion needs, estimated before converting."""

from __future__ import annotations

import os

import keras

# tf2onnx holds the whole graph, weights included, several times over while it
# converts. Peak memory measured on a 2-core, 24 GB machine: about 8 GB for a
# 25M-parameter CNN (CoAtNet-0) and 24 GB for a 200M-parameter model. The line
# through both points, 5.7 GB + 91 bytes per parameter, is the estimate
# checked before converting.
TF2ONNX_BASE_BYTES = 5.7e9
TF2ONNX_BYTES_PER_PARAMETER = (24e9 - 8e9) / (200e6 - 25e6)  # 91.4


def available_memory() -> int | None:
    """Bytes of memory available to a new process now (None if unknown).

    ``MemAvailable`` from ``/proc/meminfo`` (Linux: free memory plus what the
    kernel can reclaim), else free physical pages from ``os.sysconf``.

    Examples:

        >>> memory = available_memory()
        >>> memory is None or memory > 0
        True
    """
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def tf2onnx_memory_estimate(parameters: int) -> float:
    """Bytes tf2onnx is estimated to need to convert a model of ``parameters`` weights.

    ``TF2ONNX_BASE_BYTES + TF2ONNX_BYTES_PER_PARAMETER * parameters``: the line
    through the two peaks measured on a 24 GB machine (about 8 GB for 25M
    parameters, 24 GB for 200M).

    Examples:

        >>> round(tf2onnx_memory_estimate(25_000_000) / 1e9, 1)
        8.0
        >>> round(tf2onnx_memory_estimate(200_000_000) / 1e9, 1)
        24.0
    """
    return TF2ONNX_BASE_BYTES + TF2ONNX_BYTES_PER_PARAMETER * parameters


def check_tf2onnx_memory(model: keras.Model) -> None:
    """Raises ``MemoryError`` if converting ``model`` with tf2onnx will not fit in memory.

    Args:
        model: a built ``keras.Model``.

    Raises:
        MemoryError: naming the model's size, the estimate and the memory
            available, and what to do instead.
    """
    parameters = model.count_params()
    needed = tf2onnx_memory_estimate(parameters)
    available = available_memory()
    if available is not None and needed > available:
        raise MemoryError(
            f"export_model: converting {model.name!r} ({parameters / 1e6:.1f}M parameters) "
            f"to ONNX with tf2onnx needs about {needed / 1e9:.1f} GB of memory "
            f"(5.7 GB + 91 bytes per parameter, measured), and {available / 1e9:.1f} GB is "
            "available. Export it with format='tf_saved_model' (which needs far less), "
            "on a machine with more memory, or pass check_memory=False "
            "(`posenc export --no-memory-check`) to try anyway."
        )
