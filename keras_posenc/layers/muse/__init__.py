"""MUSE: parallel multi-scale attention (self-attention and convolutions from one projection).

Zhao et al.'s MUSE layer runs, in parallel from the same input, a global
multi-head self-attention and local convolutions of several widths. The
convolutions read the attention's value projection (shared parameters), are
weighted by a learned softmax gate and concatenated with the attention output
before one output projection, as in the official code. Tensors are
batch-major, ``(batch, time, channels)``; masks follow Keras (``True`` = real
token).

`MUSEEncoderLayer` and `MUSEDecoderLayer` are the official code's blocks: the
attention + convolution branch, the feed-forward branch (and, in the decoder,
the cross-attention) run in parallel from the same input and are summed with
the residual before one layer normalisation (post-norm).
"""

# The package has one module per job, importing each other one way (``attention``
# -> ``block`` -> ``encoder``, ``decoder``), none of them this ``__init__``, which
# re-exports the public names (docs/development.md, "Architecture"):
#
# - ``attention``: `MUSEAttention` (the attention, the static and dynamic
#   convolutions, the gate, the cache) and the argument checks the blocks share;
# - ``block``: what the encoder and decoder blocks share (arguments, validation,
#   the self-attention, the feed-forward branch, the post-norm sum);
# - ``encoder``: `MUSEEncoderLayer`;
# - ``decoder``: `MUSEDecoderLayer` and its cross-attention over the encoder output.

from keras_posenc.layers.muse.attention import MUSEAttention
from keras_posenc.layers.muse.decoder import MUSEDecoderLayer
from keras_posenc.layers.muse.encoder import MUSEEncoderLayer

# In the order of the API page (docs/api/layers.md): the layer, then the blocks built from it.
__all__ = ["MUSEAttention", "MUSEEncoderLayer", "MUSEDecoderLayer"]
