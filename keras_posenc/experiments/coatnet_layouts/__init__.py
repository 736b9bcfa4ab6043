"""Which CoAtNet layout works best on a small task that needs texture and layout?

A small analogue of Dai et al. (2021)'s layout study: the same small CoAtNet,
built with the zoo's builder, with its stages S1..S4 as convolution (``C``,
MBConv) or relative-attention Transformer (``T``) stages in the four layouts
the paper compares (`LAYOUTS`: C-C-C-C, C-C-C-T, C-C-T-T, C-T-T-T), trained
with ``fit`` on one synthetic image task and tested on held-out images.

**The task** (`texture_layout_data`): each image holds two square textured
patches on a noisy background, one of horizontal stripes (texture ``A``) and
one of vertical stripes (texture ``B``), both of period 2 pixels with a random
phase, under the same random colour. The class says where ``A`` lies relative
to ``B`` (`CLASSES`: left of, right of, above, below; `layout_label`). The
label needs both kinds of information:

- **texture alone does not suffice**: every image holds exactly one patch of
  each texture, so which textures are present says nothing (chance, 0.25);
- **layout alone does not suffice**: swapping the two textures keeps every
  pixel position of the patches and flips the class (left <-> right, above
  <-> below), and both orders are equally likely, so the patches' positions
  alone give at best the axis (0.50);
- **the textures differ only at the finest scale**: a 2 x 2 average of
  either stripe pattern is flat, so an early stage at full resolution must
  tell them apart, while relating the two patches needs a receptive field
  spanning the image: local texture first, global layout later, the split
  that CoAtNet's convolution-then-attention design is built for.

**The model** (`MODEL_SETTINGS`): ``zoo.create("coatnet_0", layout=...,
input_shape=(64, 64, 3), num_classes=4, blocks=(1, 1, 1, 2, 1),
channels=(16, 32, 32, 64, 64), head_dim=16, pre_logits=False)``: the stem and
stages at 32, 16, 8, 4 and 2 pixels per side. A Transformer stage of the same
width has somewhat more parameters than an MBConv stage; the ``params``
column reports each layout's count.

**Training** (`FULL_SETTINGS`): AdamW (weight decay 0.05, gradient norm
clipped at 1, learning rate warmed up over the first tenth of the steps,
then cosine decay to zero), batches of 32, on a fixed training set of 2048
images for 8 epochs (a fixed, small set, so that how well a layout
generalises from limited data shows, as in the paper's comparison), then
the accuracy on the training set (capacity: how well it fits) and on
1024 held-out images (generalisation), for each seed (the seed
sets the initial weights, the training images and their order; the test
images are the same for every run). The seeds of a layout share one compiled
model, reset to the seed's fresh initial weights and a zeroed optimizer
(`train_and_evaluate`): training from scratch without compiling 12 times.
"""

from keras_posenc.experiments.coatnet_layouts.figure import plot
from keras_posenc.experiments.coatnet_layouts.models import build_model, trainable_parameters
from keras_posenc.experiments.coatnet_layouts.results import (
    CSV_NAME,
    FIGURE_NAME,
    markdown_table,
    merge_results,
    read_results,
    redraw,
    write_results,
)
from keras_posenc.experiments.coatnet_layouts.runs import layout_experiment, train_and_evaluate
from keras_posenc.experiments.coatnet_layouts.settings import (
    CLASSES,
    COLUMNS,
    FULL_SETTINGS,
    LAYOUTS,
    MODEL_SETTINGS,
    POSITION_OPTIONS,
    POSITIONS,
    QUICK_SETTINGS,
    TASK_SETTINGS,
)
from keras_posenc.experiments.coatnet_layouts.task import layout_label, texture_layout_data

__all__ = [
    "CLASSES",
    "COLUMNS",
    "CSV_NAME",
    "FIGURE_NAME",
    "FULL_SETTINGS",
    "LAYOUTS",
    "MODEL_SETTINGS",
    "POSITIONS",
    "POSITION_OPTIONS",
    "QUICK_SETTINGS",
    "TASK_SETTINGS",
    "build_model",
    "layout_experiment",
    "layout_label",
    "markdown_table",
    "merge_results",
    "plot",
    "read_results",
    "redraw",
    "texture_layout_data",
    "train_and_evaluate",
    "trainable_parameters",
    "write_results",
]
