"""Small models of every zoo family and their inputs, shared by the tests of what every
family must do (tests/zoo/test_adapt_and_ship.py, tests/zoo/test_mixed_precision_training.py).

The sizes follow each family's own tests in tests/zoo/.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_posenc import zoo
from keras_posenc.zoo.convs2s import ConvS2S
from keras_posenc.zoo.muse import MUSE, build_muse_encoder
from keras_posenc.zoo.posenet import PosENet
from keras_posenc.zoo.relative_transformers import MusicTransformer, ShawTransformer
from keras_posenc.zoo.t5 import T5

VOCAB = 31
SEQ = dict(hidden_dim=8, intermediate_dim=12, num_heads=2, dropout=0.0)
TINY_COATNET = dict(blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16)


def numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def _coatnet():
    return zoo.create("coatnet_0", **TINY_COATNET, num_classes=5, input_shape=(32, 32, 3))


def _maxvit():
    return zoo.create(
        "maxvit_t",
        blocks=(2, 1, 1, 1, 1),
        channels=(8, 8, 16, 16, 32),
        head_dim=8,
        num_classes=5,
        input_shape=(64, 64, 3),
    )


def _posenet():
    backbone = zoo.create("coatnet_0", **TINY_COATNET, input_shape=(32, 32, 3), features=True)
    return PosENet(backbone, feature_size=8, targets=("H", "G"))


def _deberta():
    model = zoo.create("deberta_v3_extra_small", vocabulary_size=VOCAB, num_layers=1,
                       hidden_dim=8, num_heads=2, intermediate_dim=12, bucket_size=4,
                       max_sequence_length=12, dropout=0.0)  # fmt: skip
    # DeBERTa's N(0, 0.02) kernels make the relative terms' gradients ~1e-15 in a model this
    # small, so one step moves the table's norm by nothing, even in float32: larger weights.
    rng = np.random.default_rng(0)
    for weight in model.weights:
        if len(weight.shape) > 1:
            weight.assign(rng.normal(size=tuple(weight.shape)).astype("float32") * 0.5)
    return model


# Each family's small model, with its inputs and the layers `enable_lora` adapts by default.
FAMILIES = {
    "shaw": (lambda: ShawTransformer(VOCAB, num_layers=1, num_decoder_layers=2, max_distance=3,
                                     **SEQ), "seq2seq", {"query", "value"}),
    "coatnet": (_coatnet, "image32", {"qkv"}),
    "maxvit": (_maxvit, "image64", {"qkv"}),
    "convs2s": (lambda: ConvS2S(VOCAB, VOCAB, embed_dim=12, encoder_layers=[(12, 3), (16, 2)],
                                decoder_layers=[(12, 3), (16, 2)], decoder_out_embed_dim=10,
                                max_source_positions=16, max_target_positions=16, dropout=0.0),
                "seq2seq", {"in_projection", "out_projection"}),
    "muse": (lambda: MUSE(VOCAB, VOCAB, num_encoder_layers=1, num_decoder_layers=1,
                          kernel_sizes=(3, 5), weight_dropout=0.0, max_source_positions=16,
                          max_target_positions=16, **SEQ), "seq2seq", {"query", "value"}),
    "muse_encoder": (lambda: build_muse_encoder(VOCAB, num_classes=3, num_layers=1,
                                                kernel_sizes=(3, 5), weight_dropout=0.0, **SEQ),
                     "tokens", {"query", "value"}),
    "t5": (lambda: T5(VOCAB, num_layers=1, num_decoder_layers=1, num_buckets=8, max_distance=12,
                      **SEQ), "seq2seq", {"query", "value"}),
    "music": (lambda: MusicTransformer(num_events=VOCAB - 3, num_layers=1, max_distance=16, **SEQ),
              "tokens", {"query", "value"}),
    "posenet": (_posenet, "image32", {"qkv"}),
    "deberta": (_deberta, "deberta", {"query", "value"}),
    "roformer": (lambda: zoo.create("roformer_v2_small", vocabulary_size=VOCAB, num_layers=1,
                                    hidden_dim=8, num_heads=2, intermediate_dim=12, dropout=0.0),
                 "roformer", {"query", "value"}),
}  # fmt: skip
# The backbones: their outputs are hidden states (trained here against zeros, mean squared).
BACKBONES = ("deberta", "roformer")


def inputs(kind):
    rng = np.random.default_rng(0)
    if kind.startswith("image"):
        size = int(kind[len("image") :])
        return rng.standard_normal((2, size, size, 3)).astype("float32")
    source = np.array([[5, 6, 7, 8, 2, 0], [9, 10, 2, 0, 0, 0]], "int32")
    target = np.array([[1, 11, 12, 13, 0], [1, 14, 15, 16, 17]], "int32")
    if kind == "tokens":
        return target
    if kind == "deberta":
        return {"token_ids": target, "padding_mask": (target != 0).astype("int32")}
    if kind == "roformer":
        return {"token_ids": target, "segment_ids": np.zeros_like(target)}
    return {"encoder_token_ids": source, "decoder_token_ids": target}


def make(family, seed=0):
    """The family's small model (weights drawn from `seed`) and its inputs."""
    keras.utils.set_random_seed(seed)
    builder, kind, _ = FAMILIES[family]
    return builder(), inputs(kind)


def labels(family, x):
    """Training targets for one step: the next token of each target position, the class
    of each example, or position maps in [0, 1] for PosENet."""
    rng = np.random.default_rng(1)
    kind = FAMILIES[family][1]
    if family == "posenet":
        return rng.uniform(size=(2, 32, 32, 2)).astype("float32")
    if family in BACKBONES:
        return np.zeros((2, x["token_ids"].shape[1], 8), "float32")
    if kind.startswith("image") or family == "muse_encoder":
        return np.array([1, 2], "int32")
    tokens = x["decoder_token_ids"] if isinstance(x, dict) else x
    return np.roll(tokens, -1, axis=1)
