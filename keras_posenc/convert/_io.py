"""Reading other libraries' weight files without executing code from them (shared by the
converters): PyTorch pickles through ``torch.load(weights_only=True)``, safetensors files
with a small reader of their documented layout (a JSON header, then raw little-endian
arrays), and tensors as numpy arrays."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from typing import Any

import numpy as np

from keras_posenc.layers._checks import excerpt

# safetensors dtype names -> numpy; BF16 is read as uint16 and widened (numpy has no bfloat16).
_SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
}


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

    Raises:
        ValueError: the file is not a well-formed safetensors file.
    """
    with open(path, "rb") as handle:
        data = handle.read()

    def bad(reason: str) -> ValueError:
        return ValueError(f"{who}: {os.fspath(path)!r} is not a safetensors file: {reason}.")

    if len(data) < 8:
        raise bad("shorter than its 8-byte header length")
    (length,) = struct.unpack("<Q", data[:8])
    if 8 + length > len(data):
        raise bad(f"its header claims {length} bytes, more than the file holds")
    try:
        header = json.loads(data[8 : 8 + length])
    except ValueError as error:
        raise bad(f"the header is not JSON ({error})") from error
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    body = memoryview(data)[8 + length :]
    tensors = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype = np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]])
            start, end = (int(v) for v in entry["data_offsets"])
            shape = tuple(int(v) for v in entry["shape"])
        except (KeyError, TypeError, ValueError) as error:
            raise bad(f"entry {key!r} is malformed or of an unknown dtype ({entry!r})") from error
        if not 0 <= start <= end <= len(body) or (end - start) != dtype.itemsize * int(
            np.prod(shape, dtype=np.int64)
        ):
            raise bad(f"entry {key!r} has offsets {entry['data_offsets']} that do not fit")
        array = np.frombuffer(body[start:end], dtype=dtype).reshape(shape)
        if entry["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        elif entry["dtype"] == "F16":
            array = array.astype(np.float32)
        tensors[key] = array
    return tensors
