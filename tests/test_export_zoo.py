"""Every registered zoo model, in a small variant, exported to both formats on TensorFlow
and verified, and checked for distinct initial weights (large: CI runs it on TensorFlow
only). A model registered without a small variant here fails the coverage test, so the
list grows with the zoo."""

from __future__ import annotations

import keras
import pytest

import layer_checks
from keras_posenc import zoo
from keras_posenc.export import FORMATS, export_model, export_seq2seq
from keras_posenc.zoo.seq2seq import Seq2SeqModel

SMALL_COATNET = {
    "blocks": (1, 1, 1, 1, 1),
    "channels": (16, 16, 32, 64, 64),
    "input_shape": (64, 64, 3),
    "num_classes": 10,
}
SMALL_CONVS2S = {
    "src_vocab_size": 50,
    "tgt_vocab_size": 60,
    "embed_dim": 32,
    "max_source_positions": 64,
    "max_target_positions": 64,
}
SMALL_MUSE = {
    "src_vocab_size": 50,
    "tgt_vocab_size": 50,
    "hidden_dim": 32,
    "intermediate_dim": 64,
    "num_heads": 4,
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
}
SMALL_MUSE_ENCODER = {"vocab_size": 50, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2}
# Each registered name and the overrides that make it small (about 5M parameters or fewer)
# while keeping its family's structure.
SMALL_VARIANTS = {
    **{f"coatnet_{n}": SMALL_COATNET for n in range(5)},
    **{f"coatnet_{n}_rw_224": {**SMALL_COATNET, "blocks": (2, 1, 1, 1, 1), "stem_channels": (8, 16)}
       for n in ("nano", 0, 1, 2, 3)},
    "convs2s_small": {"src_vocab_size": 50, "tgt_vocab_size": 60},
    "convs2s_iwslt_de_en": SMALL_CONVS2S,
    "convs2s_wmt_en_ro": {**SMALL_CONVS2S, "encoder_layers": [(32, 3)] * 3,
                          "decoder_layers": [(32, 3)] * 3, "decoder_out_embed_dim": 32},
    "convs2s_wmt_en_de": {**SMALL_CONVS2S, "encoder_layers": [(32, 3), (64, 3), (128, 1)],
                          "decoder_layers": [(32, 3), (64, 3), (128, 1)],
                          "decoder_out_embed_dim": 32},
    "convs2s_wmt_en_fr": {**SMALL_CONVS2S, "encoder_layers": [(32, 3), (48, 3), (64, 1)],
                          "decoder_layers": [(32, 3), (48, 3), (64, 1)],
                          "decoder_out_embed_dim": 32},
    "convs2s_lm": {"vocab_size": 50, "embed_dim": 16, "decoder_layers": [(32, 4)] * 2,
                   "decoder_out_embed_dim": 16},
    **{name: SMALL_MUSE for name in ("muse_iwslt_de_en", "muse_wmt_large", "muse_small")},
    "muse_tiny": {"src_vocab_size": 50, "tgt_vocab_size": 60},
    **{name: SMALL_MUSE_ENCODER for name in ("muse_encoder_small", "muse_encoder_base")},
    **{name: {"src_vocab_size": 60, "tgt_vocab_size": 60, "hidden_dim": 32,
              "intermediate_dim": 64, "num_heads": 4, "num_encoder_layers": 1,
              "num_decoder_layers": 1}
       for name in ("muse_iwslt_de_en", "muse_wmt_large", "muse_small", "muse_tiny")},
    **{name: {"vocab_size": 50, "hidden_dim": 32, "intermediate_dim": 64, "num_heads": 4,
              "num_layers": 1}
       for name in ("muse_encoder_small", "muse_encoder_base")},
    # PosENet's backbones are fixed networks (keras.applications, CoAtNet-0): only the
    # input size shrinks, so these stay at the backbones' sizes (15M, 24M, 25M).
    **{f"posenet_{b}": {"backbone": b, "input_shape": (32, 32, 3), "feature_size": 8}
       for b in ("vgg16", "resnet50", "coatnet_0")},
}  # fmt: skip
MAX_PARAMETERS = 5_000_000
FIXED_BACKBONES = {"posenet_vgg16", "posenet_resnet50", "posenet_coatnet_0"}


def test_every_registered_model_has_a_small_variant():
    missing = sorted(set(zoo.list_models()) - set(SMALL_VARIANTS))
    assert not missing, f"add a small variant for {missing} to SMALL_VARIANTS"


@pytest.mark.large
@pytest.mark.parametrize("name", sorted(SMALL_VARIANTS))
def test_small_variant_weights_start_distinct(name):
    model = zoo.create(name, **SMALL_VARIANTS[name])
    layer_checks.assert_distinct_initial_weights(model)


@pytest.mark.large
@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("name", sorted(SMALL_VARIANTS))
def test_small_variant_exports(name, format, tmp_path):
    keras.utils.set_random_seed(0)
    model = zoo.create(name, **SMALL_VARIANTS[name])
    if name not in FIXED_BACKBONES:
        assert model.count_params() <= MAX_PARAMETERS
    suffix = ".onnx" if format == "onnx" else ""
    if isinstance(model, Seq2SeqModel):
        reports = export_seq2seq(model, tmp_path / name, format=format)
    else:
        reports = {"model": export_model(model, str(tmp_path / name) + suffix, format=format)}
    for report in reports.values():
        assert report.max_abs_difference <= 1e-4, (name, report.max_abs_difference)
