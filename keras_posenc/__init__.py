"""keras-posenc: position information in neural networks, for Keras 3.

Layers for relative position encodings and for architectures that mix
convolution and attention (ConvS2S, MUSE, CoAtNet), a zoo of complete models
built from them, and PosENet, a probe of how much absolute position a network
encodes. Everything runs unchanged on TensorFlow, JAX and PyTorch; the backend
is chosen by ``KERAS_BACKEND`` before ``keras`` is first imported.

Examples:

    >>> from keras_posenc import layers, zoo, probe
    >>> isinstance(zoo.list_models(), list)
    True
"""

from importlib import metadata as _metadata

from keras_posenc import layers, probe, zoo

try:
    __version__ = _metadata.version("keras-posenc")
except _metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "layers", "probe", "zoo"]
