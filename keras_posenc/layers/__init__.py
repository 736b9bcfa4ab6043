"""Keras layers of keras-posenc, one module per family.

Every public class here is a ``keras.layers.Layer`` written with ``keras.ops``
only, registered for serialisation under the ``keras_posenc`` package, and
runs unchanged on TensorFlow, JAX and PyTorch. Layers never import the zoo
(a ruff rule enforces it); the zoo is assembled from these layers.

The relative index functions are public too, both here and in
``keras_posenc.layers.relative_index``.
"""

from keras_posenc.layers import relative_index
from keras_posenc.layers._memory import EstimateTooLarge, memory_limit, set_memory_limit
from keras_posenc.layers.activations import exact_gelu, tanh_gelu
from keras_posenc.layers.coatnet import (
    ConvNeXtBlock,
    MBConv,
    RelativeTransformerBlock2D,
    SqueezeExcite,
)
from keras_posenc.layers.contextual_attention import ContextualPositionAttention
from keras_posenc.layers.convs2s import ConvS2SAttention, GLUConv1D, GradMultiply
from keras_posenc.layers.decoder_block import DecoderBlock
from keras_posenc.layers.disentangled_attention import DisentangledSelfAttention
from keras_posenc.layers.muse import MUSEAttention, MUSEDecoderLayer, MUSEEncoderLayer
from keras_posenc.layers.padding import SpatialPadding2D
from keras_posenc.layers.position_biases import (
    FIRE,
    KERPLE,
    ALiBi,
    ContinuousBias,
    ContinuousPositionBias2D,
    PositionBias,
)
from keras_posenc.layers.position_schemes import (
    ClipPositions,
    DebertaBuckets,
    Grid2DPositions,
    LogBuckets,
    MultiScaleBins,
    PiecewiseBuckets,
    PositionScheme,
)
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
from keras_posenc.layers.relative_index import (
    clip_index,
    deberta_index,
    log_bucket_index,
    multiscale_index,
    multiscale_table_size,
    piecewise_index,
    relative_positions,
)
from keras_posenc.layers.relative_position import (
    MultiScaleRelativePositionEmbedding,
    RelativePositionBias,
    RelativePositionEmbedding,
)
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D
from keras_posenc.layers.relative_transformer import RelativeTransformerEncoder
from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder
from keras_posenc.layers.rotary import RotaryPositions
from keras_posenc.layers.rotary_2d import MixedRotaryFrequencies, RotaryPositions2D

__all__ = [
    "ALiBi",
    "ClipPositions",
    "ContinuousBias",
    "ContextualPositionAttention",
    "ContinuousPositionBias2D",
    "ConvS2SAttention",
    "DebertaBuckets",
    "DecoderBlock",
    "DisentangledSelfAttention",
    "EstimateTooLarge",
    "FIRE",
    "GLUConv1D",
    "GradMultiply",
    "Grid2DPositions",
    "KERPLE",
    "LogBuckets",
    "MBConv",
    "ConvNeXtBlock",
    "MUSEAttention",
    "MUSEDecoderLayer",
    "MUSEEncoderLayer",
    "MixedRotaryFrequencies",
    "MultiScaleBins",
    "MultiHeadRelativeAttention",
    "MultiScaleRelativePositionEmbedding",
    "PiecewiseBuckets",
    "PositionBias",
    "PositionScheme",
    "RelativePositionBias",
    "RelativePositionBias2D",
    "RelativePositionEmbedding",
    "RelativeTransformerDecoder",
    "RelativeTransformerBlock2D",
    "RelativeTransformerEncoder",
    "RotaryPositions",
    "RotaryPositions2D",
    "SpatialPadding2D",
    "SqueezeExcite",
    "clip_index",
    "deberta_index",
    "exact_gelu",
    "log_bucket_index",
    "memory_limit",
    "multiscale_index",
    "multiscale_table_size",
    "piecewise_index",
    "relative_index",
    "relative_positions",
    "set_memory_limit",
    "tanh_gelu",
]
