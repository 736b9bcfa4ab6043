"""Reproducible studies behind the ``posenc`` CLI.

Planned studies: length generalisation of position encodings (train on short
sequences, test on longer ones) and where position information comes from
(zero padding versus circular, reflect and replicate padding). Each study is a
public function returning its measurements, so the CLI, the docs' figures and
the tests all run the same code.
"""

__all__: list[str] = []
