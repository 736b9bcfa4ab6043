"""Reproducible studies behind the ``posenc`` CLI.

Each study is a public function returning its measurements, so the CLI, the
docs' figures and the tests all run the same code.

- :func:`padding_experiment`: where position information comes from (zero
  padding versus circular, reflect, replicate and no padding), probed with
  PosENet on content-free inputs.

Planned: length generalisation of position encodings (train on short
sequences, test on longer ones).
"""

from keras_posenc.experiments.padding import padding_experiment, probe_padding_mode

__all__ = ["padding_experiment", "probe_padding_mode"]
