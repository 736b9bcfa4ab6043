"""Weight converters: checkpoints of other libraries as keras-posenc models.

- :func:`from_fairseq_fconv`: fairseq ``fconv`` (ConvS2S) checkpoints ->
  :class:`~keras_posenc.zoo.convs2s.ConvS2S` (PyTorch needed only to read ``.pt`` files).
"""

from keras_posenc.convert.fairseq import (
    fairseq_to_posenc_ids,
    from_fairseq_fconv,
    load_fairseq_checkpoint,
    parse_fairseq_layers,
    posenc_to_fairseq_ids,
    read_fairseq_dictionary,
)

__all__ = [
    "fairseq_to_posenc_ids",
    "from_fairseq_fconv",
    "load_fairseq_checkpoint",
    "parse_fairseq_layers",
    "posenc_to_fairseq_ids",
    "read_fairseq_dictionary",
]
