"""Reproducible studies behind the ``posenc`` CLI.

Each study is a public function returning its measurements, so the CLI, the
docs' figures and the tests all run the same code.

- :func:`padding_experiment`: where position information comes from (zero
  padding versus circular, reflect, replicate and no padding), probed with
  PosENet on content-free inputs.

- :func:`length_generalization_experiment`: which position encodings keep
  working on sequences longer than those they were trained on.

- :func:`~keras_posenc.experiments.coatnet_layouts.layout_experiment`:
  CoAtNet's four stage layouts (C-C-C-C ... C-T-T-T) trained on a synthetic
  task that needs both local texture and global layout.

- :func:`~keras_posenc.experiments.transplant_study.transplant_study`: a trained RoPE
  model's position encoding rescaled or replaced (``keras_posenc.zoo.transplant``),
  fine-tuned, and tested at 1x-16x its training length.

:func:`evaluate_lengths` (:mod:`~keras_posenc.experiments.length_evaluation`) measures any
zoo language model's next-token loss and accuracy by context length and position, on a text
or on the length study's tasks, with :class:`LengthEvaluation` comparing several models.

The synthetic sequence tasks the zoo's recipes (the repository's ``zoo/*/train_*.py``)
train on are exported here too, from :mod:`~keras_posenc.experiments.seq2seq_tasks`:
:func:`reverse_task` with :func:`train_reverse` and :func:`exact_match` (encoder-decoders),
:func:`periodic_task` with :func:`train_periodic` (language models).
"""

from keras_posenc.experiments.digits import digits_split, load_digits
from keras_posenc.experiments.length_evaluation import LengthEvaluation, evaluate_lengths
from keras_posenc.experiments.length_generalization import length_generalization_experiment
from keras_posenc.experiments.padding import padding_experiment, probe_padding_mode
from keras_posenc.experiments.seq2seq_tasks import (
    exact_match,
    periodic_task,
    reverse_task,
    train_periodic,
    train_reverse,
)

__all__ = [
    "LengthEvaluation",
    "digits_split",
    "evaluate_lengths",
    "exact_match",
    "length_generalization_experiment",
    "load_digits",
    "padding_experiment",
    "periodic_task",
    "probe_padding_mode",
    "reverse_task",
    "train_periodic",
    "train_reverse",
]
