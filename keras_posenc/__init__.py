"""keras-posenc: position information in neural networks, for Keras 3.

Layers for relative position encodings and for architectures that mix
convolution and attention (ConvS2S, MUSE, CoAtNet), a zoo of complete models
built from them, and PosENet, a probe of how much absolute position a network
encodes. Everything runs unchanged on TensorFlow, JAX and PyTorch; the backend
is chosen by ``KERAS_BACKEND`` before ``keras`` is first imported.

``import keras_posenc`` itself does not import Keras (so ``posenc --help`` starts
fast); ``layers``, ``zoo``, ``probe`` and ``hub`` (presets) are imported on first use, and as soon
as Keras is imported every keras-posenc class is registered for loading
``.keras`` files ("Import time" in docs/development.md).

Examples:

    >>> from keras_posenc import layers, zoo, probe
    >>> isinstance(zoo.list_models(), list)
    True
"""

from importlib import metadata as _metadata
from typing import Any as _Any

from keras_posenc import _registration

try:
    __version__ = _metadata.version("keras-posenc")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "hub", "layers", "probe", "zoo"]


def __getattr__(name: str) -> _Any:
    """``keras_posenc.layers`` (``zoo``, ``probe``, ``hub``): imported, with Keras, on first use."""
    if name in ("hub", "layers", "probe", "zoo"):
        _registration.register_all()
        return globals()[name]  # the import system set it on this package
    raise AttributeError(f"module 'keras_posenc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_registration.watch()
