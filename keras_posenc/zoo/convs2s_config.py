"""ConvS2S's named configurations: :class:`ConvS2SConfig`, :class:`ConvS2SLMConfig` and the
table ``zoo.convs2s`` registers.

Their builders, ``build_convs2s`` and ``build_convs2s_lm``, are in keras_posenc/zoo/convs2s.py,
which registers the table and re-exports the names here.

Examples:

    >>> from keras_posenc.zoo.convs2s_config import CONFIGS
    >>> config = CONFIGS["convs2s_wmt_en_ro"]
    >>> config.embed_dim, len(config.encoder_layers)
    (512, 20)
"""

from __future__ import annotations

import dataclasses

from keras_posenc.zoo.config import REQUIRED, ZooConfig, by_name
from keras_posenc.zoo.convs2s_layers import parse_layer_specs

__all__ = ["CONFIGS", "ConvS2SConfig", "ConvS2SLMConfig"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvS2SConfig(ZooConfig):
    """A named ConvS2S: :func:`build_convs2s`'s arguments (:class:`ConvS2S` says what each
    does), with its defaults; the vocabularies are left to ``zoo.create``. Layer specs
    (``(channels, kernel_size[, residual])`` each) are checked when made."""

    # The vocabularies (required) and the special ids.
    src_vocab_size: int = REQUIRED
    tgt_vocab_size: int = REQUIRED
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    # Widths and layers.
    embed_dim: int = 256
    encoder_layers: tuple[tuple[int, ...], ...] = ((256, 3),) * 4
    decoder_layers: tuple[tuple[int, ...], ...] = ((256, 3),) * 3
    decoder_out_embed_dim: int = 256
    # The position tables, regularisation and the model.
    max_source_positions: int = 1024
    max_target_positions: int = 1024
    dropout: float = 0.1
    weight_norm: bool = True
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("encoder_layers", "decoder_layers"):
            parse_layer_specs(type(self).__name__, field, getattr(self, field))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvS2SLMConfig(ZooConfig):
    """A named ConvS2S language model: :func:`build_convs2s_lm`'s arguments, with its
    defaults; the vocabulary is left to ``zoo.create``."""

    # The vocabulary (required) and the special ids.
    vocab_size: int = REQUIRED
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    # Widths and layers, regularisation and the model.
    embed_dim: int = 128
    decoder_layers: tuple[tuple[int, ...], ...] = ((1268, 4),) * 13
    decoder_out_embed_dim: int = 128
    dropout: float = 0.1
    weight_norm: bool = True
    name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_layer_specs(type(self).__name__, "decoder_layers", self.decoder_layers)


_EN_DE = ((512, 3),) * 9 + ((1024, 3),) * 4 + ((2048, 1),) * 2
_EN_FR = ((512, 3),) * 6 + ((768, 3),) * 4 + ((1024, 3),) * 3 + ((2048, 1),) + ((4096, 1),)
#: Every registered ConvS2S: zoo name -> :class:`ConvS2SConfig` (``convs2s_lm``:
#: :class:`ConvS2SLMConfig`), fairseq's ``fconv_*`` architectures.
CONFIGS: dict[str, ConvS2SConfig | ConvS2SLMConfig] = by_name([
    # Not a paper configuration: the small model of the training example and the tests.
    ConvS2SConfig(zoo_name="convs2s_small", embed_dim=64, encoder_layers=((64, 3),) * 4,
                  decoder_layers=((64, 3),) * 4, decoder_out_embed_dim=64,
                  max_source_positions=256, max_target_positions=256, dropout=0.1),
    ConvS2SConfig(zoo_name="convs2s_iwslt_de_en", embed_dim=256,
                  encoder_layers=((256, 3),) * 4, decoder_layers=((256, 3),) * 3,
                  decoder_out_embed_dim=256, dropout=0.2),
    ConvS2SConfig(zoo_name="convs2s_wmt_en_ro", embed_dim=512,
                  encoder_layers=((512, 3),) * 20, decoder_layers=((512, 3),) * 20,
                  decoder_out_embed_dim=512, dropout=0.1),
    ConvS2SConfig(zoo_name="convs2s_wmt_en_de", embed_dim=768, encoder_layers=_EN_DE,
                  decoder_layers=_EN_DE, decoder_out_embed_dim=512, dropout=0.2),
    ConvS2SConfig(zoo_name="convs2s_wmt_en_fr", embed_dim=768, encoder_layers=_EN_FR,
                  decoder_layers=_EN_FR, decoder_out_embed_dim=512, dropout=0.1),
    ConvS2SLMConfig(zoo_name="convs2s_lm", embed_dim=128, decoder_layers=((1268, 4),) * 13,
                    decoder_out_embed_dim=128, dropout=0.1),
])  # fmt: skip
