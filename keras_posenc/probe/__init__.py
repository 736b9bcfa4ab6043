"""PosENet: measure how much absolute position a network's features encode.

- :func:`position_patterns`: the five targets (H, V, G, HS, VS);
- :func:`spc`, :func:`mae`: the paper's metrics, per image and averaged;
- :func:`content_free_images`: noise, grey and white inputs with no position prior;
- :func:`probe_backbone`: a VGG-like network whose padding mode is its only source of position;
- :class:`PosENet`, :func:`train`, :func:`evaluate`: the probe itself (the model class
  lives in :mod:`keras_posenc.zoo.posenet`, which registers it on VGG16, ResNet50, CoAtNet-0);
- :class:`LinearReadout`, :class:`TrainedReadout`: readouts fitted on features computed once;
- :func:`grating_images`, :func:`pretrain_backbone`: a backbone trained from scratch on a task
  that needs no position.

Reference: Islam, Jia and Bruce, "How Much Position Information Do
Convolutional Neural Networks Encode?", ICLR 2020.
"""

from keras_posenc.probe.backbone import BACKBONE_PADDINGS, probe_backbone, probe_tap_layers
from keras_posenc.probe.inputs import INPUT_KINDS, content_free_images
from keras_posenc.probe.metrics import mae, spc
from keras_posenc.probe.patterns import PATTERN_NAMES, position_patterns
from keras_posenc.probe.posenet import evaluate, target_maps, train
from keras_posenc.probe.pretrain import grating_images, pretrain_backbone
from keras_posenc.probe.readout import LinearReadout, TrainedReadout
from keras_posenc.zoo.posenet import KNOWN_TAP_LAYERS, PosENet, default_tap_layers

__all__ = [
    "BACKBONE_PADDINGS",
    "INPUT_KINDS",
    "KNOWN_TAP_LAYERS",
    "LinearReadout",
    "PATTERN_NAMES",
    "PosENet",
    "TrainedReadout",
    "content_free_images",
    "default_tap_layers",
    "evaluate",
    "grating_images",
    "mae",
    "position_patterns",
    "pretrain_backbone",
    "probe_backbone",
    "probe_tap_layers",
    "spc",
    "target_maps",
    "train",
]
