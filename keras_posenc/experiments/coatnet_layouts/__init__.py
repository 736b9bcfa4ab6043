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

**The Transformer stages' positions** (`POSITIONS`, ``positions=``): the
same model with another position encoding in every Transformer block
(`POSITION_OPTIONS`, the builder's named ``transformer_options``):
``"table"`` (the default, CoAtNet's learned relative bias), ``"rotary_axial"``
and ``"rotary_mixed"`` (2D rotary alone, ``position_bias="none"``: axial
with fixed frequencies, or RoPE-Mixed with learned ones), ``"rotary_mixed_table"``
(RoPE-Mixed with the table) and ``"swin"`` (the table within 2 x 2 windows,
Swin's shift on every second block of a stage; a stage's first block, which
downsamples, attends over its whole map). A layout without a Transformer
stage takes ``"table"`` only.

The package has one module per job (docs/development.md, "Architecture"),
each importing only those before it: ``settings`` (the layouts, positions,
settings and columns), ``task`` (`texture_layout_data`, `layout_label`),
``models`` (`build_model`), ``figure`` (`plot`), ``results`` (the table and
the CSV: `markdown_table`, `write_results`, `read_results`, `merge_results`,
`redraw`) and ``runs`` (`train_and_evaluate`, `layout_experiment`).
Everything is importable from the package.
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

# The API page lists them in this order (docs/api/experiments.md).
__all__ = [
    "layout_experiment",
    "texture_layout_data",
    "layout_label",
    "build_model",
    "trainable_parameters",
    "train_and_evaluate",
    "markdown_table",
    "write_results",
    "read_results",
    "merge_results",
    "redraw",
    "plot",
    "LAYOUTS",
    "POSITIONS",
    "POSITION_OPTIONS",
    "CLASSES",
    "COLUMNS",
    "MODEL_SETTINGS",
    "TASK_SETTINGS",
    "FULL_SETTINGS",
    "QUICK_SETTINGS",
    "CSV_NAME",
    "FIGURE_NAME",
]
