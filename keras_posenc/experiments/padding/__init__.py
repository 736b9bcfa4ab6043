"""Where does position information come from? Padding modes, content-free inputs, PosENet.

A frozen network sees inputs with no content (uniform noise, constant grey,
constant white); a PosENet readout with 'valid' support then tries to decode
the position maps from its features. With circular padding (or none) the
network is shift-equivariant and nothing is decoded; with zero padding the
border marks every position (Islam et al. 2020; Kayhan and van Gemert 2020).

The study has parts (``studies``), each a set of rows of one long table:

- ``"padding"``: the small VGG-like :func:`~keras_posenc.probe.probe_backbone`
  with random frozen weights, every padding mode, a least-squares readout
  (:class:`~keras_posenc.probe.LinearReadout`: PosENet's one k x k 'valid'
  convolution fitted in closed form; fast and deterministic);
- ``"trained_readout"``: the same networks read by PosENet's own readout
  trained with Adam on pixel-wise MSE (:class:`~keras_posenc.probe.TrainedReadout`);
- ``"trained_backbone"``: the same networks trained from scratch on a task
  that needs no position (:func:`~keras_posenc.probe.pretrain_backbone`), then
  frozen and read both ways;
- ``"applications"``: keras.applications VGG16 and ResNet50 with
  ``weights=None`` (random, zero 'same' padding), one seed, trained readout;
- ``"readout_alone"``: the paper's Table 4, "PosENet alone" on the image
  with readout padding 0, 1 and 2;
- ``"readout_shape"``: the paper's Table 2, readout depth and kernel size
  (zero-padded probe network and VGG16, trained readout);
- ``"stages"``: the paper's Table 3, which stage's features (zero-padded
  probe network, VGG16, ResNet50).

Frozen features are computed once per network and input set and every readout
is fitted on them; one compiled trained readout serves every network with the
same feature shape.

The package has one module per job (docs/development.md, "Architecture"):
``settings`` (the columns, parts and budgets), ``features`` (the content-free
images, the networks and their frozen features), ``readouts`` (least-squares
and trained readouts, scored), ``study`` (the runs of every part, their rows and
maps), ``experiment`` (`probe_padding_mode` and `padding_experiment`),
``tables`` (markdown), ``figures`` (the maps' figures and their data) and
``results`` (everything a run writes).
"""

from keras_posenc.experiments.padding.experiment import padding_experiment, probe_padding_mode
from keras_posenc.experiments.padding.figures import (
    plot_maps,
    read_figure_data,
    redraw,
    write_figure_data,
)
from keras_posenc.experiments.padding.results import write_results
from keras_posenc.experiments.padding.settings import (
    APPLICATIONS,
    COLUMNS,
    FULL_SETTINGS,
    QUICK_SETTINGS,
    READOUT_PADDINGS,
    READOUT_SHAPES,
    STUDIES,
)
from keras_posenc.experiments.padding.tables import markdown_table, summary_markdown

# In the order of the API page (docs/api/experiments.md orders the members by this list):
# the study's entry points, its tables, its figures, then its constants.
__all__ = [
    "probe_padding_mode",
    "padding_experiment",
    "markdown_table",
    "summary_markdown",
    "write_results",
    "write_figure_data",
    "read_figure_data",
    "plot_maps",
    "redraw",
    "APPLICATIONS",
    "COLUMNS",
    "FULL_SETTINGS",
    "QUICK_SETTINGS",
    "READOUT_PADDINGS",
    "READOUT_SHAPES",
    "STUDIES",
]
