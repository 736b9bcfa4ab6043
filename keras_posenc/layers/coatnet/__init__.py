"""CoAtNet's blocks (Dai et al. 2021): MBConv with squeeze-excitation, and the
relative-attention Transformer block over a 2D feature map.

Both blocks are pre-normalised residual blocks, ``x <- x + Module(Norm(x))``,
that can downsample by 2 in their first block of a stage. When they do (or when
they change the width) the shortcut becomes ``Proj(Pool(x))``: a 2 x 2, stride-2
max pool followed by a 1 x 1 projection (with bias), each only where needed.
Feature maps are channels-last, ``(batch, height, width, channels)``.
"""

# The package has one module per job, importing each other one way (``shared``,
# ``partitions`` -> ``shifted`` -> ``mbconv``, ``transformer``), none of them this
# ``__init__``, which re-exports the public names (docs/development.md, "Architecture"):
#
# - ``shared``: what both blocks share: the feature-map checks, the downsampling
#   pools (``POOLS``), the ``Proj(Pool(x))`` shortcut and stochastic depth;
# - ``mbconv``: `MBConv` and its `SqueezeExcite`, with PyTorch's padding
#   (`symmetric_pad`);
# - ``convnext``: `ConvNeXtBlock`, the ConvNeXt block of timm's MaxxViT and CoAtNeXt;
# - ``partitions``: MaxViT's block and grid windows (`partition_windows`,
#   `merge_windows`);
# - ``shifted``: Swin's shifted windows: the cyclic shift (`roll_map`) and the mask
#   between the regions it brings together (`shifted_window_mask`);
# - ``transformer``: `RelativeTransformerBlock2D`.

from keras_posenc.layers.coatnet.convnext import CONVNEXT_STRIDE_ON, ConvNeXtBlock
from keras_posenc.layers.coatnet.mbconv import (
    EXPAND_FROM,
    PADDINGS,
    SE_FROM,
    SE_POSITIONS,
    STRIDE_ON,
    MBConv,
    SqueezeExcite,
    symmetric_pad,
)
from keras_posenc.layers.coatnet.partitions import PARTITIONS, merge_windows, partition_windows
from keras_posenc.layers.coatnet.shared import POOLS, drop_path, make_pool
from keras_posenc.layers.coatnet.shifted import roll_map, shifted_window_mask
from keras_posenc.layers.coatnet.transformer import (
    ATTENTION_WIDTHS,
    NORMS,
    POSITION_BIASES,
    RelativeTransformerBlock2D,
)

# The layers first, in the order of the API page (docs/api/layers.md), then the helpers
# and the choices of the blocks' arguments.
__all__ = [
    "SqueezeExcite",
    "MBConv",
    "ConvNeXtBlock",
    "RelativeTransformerBlock2D",
    "make_pool",
    "symmetric_pad",
    "partition_windows",
    "merge_windows",
    "roll_map",
    "shifted_window_mask",
    "drop_path",
    "ATTENTION_WIDTHS",
    "CONVNEXT_STRIDE_ON",
    "EXPAND_FROM",
    "NORMS",
    "PADDINGS",
    "PARTITIONS",
    "POOLS",
    "POSITION_BIASES",
    "SE_FROM",
    "SE_POSITIONS",
    "STRIDE_ON",
]
