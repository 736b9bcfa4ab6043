"""Reading other libraries' weight files without executing code from them (shared by the
converters): PyTorch pickles through ``torch.load(weights_only=True)``, safetensors files
with the ``safetensors`` library's numpy API, and tensors as numpy arrays."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from keras_posenc.layers._checks import excerpt


def torch_module(who: str) -> Any:
    """``torch``, or an ImportError saying that ``who`` needs it to read checkpoint files."""
    try:
        import torch
    except ImportError as error:
        raise ImportError(
            f"{who}: reading a PyTorch checkpoint file needs PyTorch; install it with "
            '`pip install "keras-posenc[torch]"` (or pass the state dict as numpy arrays).'
        ) from error
    return torch


def to_numpy(value: Any) -> np.ndarray:
    """A torch tensor (any float dtype, as float32) or array-like as a numpy array."""
    if hasattr(value, "detach"):  # a torch tensor; float() also covers half checkpoints
        value = value.detach().cpu()
        value = value.float() if value.is_floating_point() else value
        return value.numpy()
    return np.asarray(value)


def torch_load(path: str | os.PathLike, who: str, allowed: Iterable[type] = ()) -> Any:
    """``torch.load(path, weights_only=True)``: no pickled code runs; ``allowed`` classes
    are the only ones accepted beyond tensors and plain containers.

    Raises:
        ValueError: the file holds other pickled objects, or is not a PyTorch
            checkpoint at all (empty, truncated, another format).
        OSError: the file cannot be read (missing, a folder, no permission).
    """
    torch = torch_module(who)
    allowed = list(allowed)
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except OSError:
        raise  # names the file already
    except Exception as error:  # torch raises UnpicklingError or RuntimeError, by version
        text = str(error)
        if "weights_only" not in text and "Unsupported global" not in text:
            # EOFError (empty), RuntimeError (a zip that is not torch's), KeyError, ...
            raise ValueError(
                f"{who}: {os.fspath(path)!r} is not a PyTorch checkpoint that can be read "
                f"({type(error).__name__}: {excerpt(text.splitlines()[0] if text else '')})."
            ) from error
        extra = "".join(f", {cls.__module__}.{cls.__qualname__}" for cls in allowed)
        raise ValueError(
            f"{who}: {os.fspath(path)!r} holds pickled objects other than tensors, plain "
            f"containers{extra}, so it is not read (loading it would run code from the "
            "file). If the file is trusted, save just the tensors the converter needs. "
            f"torch said: {text.splitlines()[0] if text else error!r}"
        ) from error


def read_safetensors(path: str | os.PathLike, who: str) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as numpy arrays (BF16 and F16 as float32).

    Read by the ``safetensors`` library's numpy API, which checks the header and
    that the tensors cover the data exactly and executes nothing from the file.
    bfloat16 tensors need numpy's ``bfloat16`` type, which ``ml_dtypes`` (a
    dependency of Keras) registers when imported.

    Raises:
        ValueError: the file is not a well-formed safetensors file.
        OSError: the file cannot be read (missing, a folder, no permission).
    """
    import ml_dtypes
    import safetensors
    import safetensors.numpy

    path = os.fspath(path)
    if not os.path.isfile(path):  # the library reports a folder as a bad header
        with open(path, "rb"):
            pass
    try:
        tensors = safetensors.numpy.load_file(path)
    except safetensors.SafetensorError as error:
        raise ValueError(
            f"{who}: {path!r} is not a safetensors file: {excerpt(str(error))}."
        ) from error
    widened = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
    return {
        key: value.astype(np.float32) if value.dtype in widened else value
        for key, value in tensors.items()
    }
