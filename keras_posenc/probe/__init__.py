"""PosENet: measure how much absolute position a network's features encode.

- :func:`position_patterns`: the five targets (H, V, G, HS, VS);
- :func:`spc`, :func:`mae`: the paper's metrics, per image and averaged;
- :func:`content_free_images`: noise, grey and white inputs with no position prior;
- :func:`probe_backbone`: a VGG-like network whose padding mode is its only source of position;
- :class:`PosENet`, :func:`train`, :func:`evaluate`: the probe itself.

Reference: Islam, Jia and Bruce, "How Much Position Information Do
Convolutional Neural Networks Encode?", ICLR 2020.
"""

from keras_posenc.probe.backbone import BACKBONE_PADDINGS, probe_backbone, probe_tap_layers
from keras_posenc.probe.inputs import INPUT_KINDS, content_free_images
from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns
from keras_posenc.probe.posenet import (
    KNOWN_TAP_LAYERS,
    PosENet,
    default_tap_layers,
    evaluate,
    target_maps,
    train,
)

__all__ = [
    "BACKBONE_PADDINGS",
    "INPUT_KINDS",
    "KNOWN_TAP_LAYERS",
    "PATTERN_NAMES",
    "PosENet",
    "content_free_images",
    "default_tap_layers",
    "evaluate",
    "mae",
    "position_patterns",
    "probe_backbone",
    "probe_tap_layers",
    "spc",
    "target_maps",
    "train",
]
