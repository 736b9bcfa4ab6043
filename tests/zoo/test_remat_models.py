"""``remat=True`` on the zoo's Transformer models: every block recomputed in the backward
pass of training (keras_posenc/layers/_remat.py), with the gradients of the same model
without it.

One tiny model per family, dropout (or stochastic depth) active: the recomputation draws
the masks of the first pass, those the model draws without remat, so the outputs and every
gradient agree (1e-5). The argument reaches every block and its config, and
``zoo.create(name, remat=True)`` takes it.

The families' blocks take one code path (the `Remat` mixin's ``_remat_call``): T5's (a
bias and cross-attention), the decoder LM's and CoAtNet's (stochastic depth) represent it
on every backend, the others run on the matrix backend (tests/tiers.py).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from remat_gradients import assert_same, counting_remat, gradients, reseed
from tiers import matrix
from zoo_families import VOCAB, inputs

from keras_posenc import zoo
from keras_posenc.layers._remat import Remat

pytestmark = pytest.mark.contract

TEXT = dict(hidden_dim=8, intermediate_dim=12, num_heads=2, dropout=0.2)
TINY_COATNET = dict(blocks=(1, 1, 1, 1, 1), channels=(8, 8, 16, 32, 32), head_dim=16)
TINY_MAXVIT = dict(blocks=(2, 1, 1, 1, 1), channels=(8, 8, 16, 16, 32), head_dim=8)

# family -> (zoo name, overrides, inputs' kind, blocks recomputed)
CASES = {
    "t5": ("t5_small", dict(vocabulary_size=VOCAB, num_layers=1, key_value_dim=4,
                            num_buckets=8, max_distance=12, **TEXT), "seq2seq", 2),
    "deberta": ("deberta_v3_extra_small", dict(vocabulary_size=VOCAB, num_layers=2,
                                               bucket_size=4, max_sequence_length=12, **TEXT),
                "deberta", 2),
    "roformer": ("roformer_v2_small", dict(vocabulary_size=VOCAB, num_layers=1, **TEXT),
                 "roformer", 1),
    "muse": ("muse_tiny", dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, num_encoder_layers=1,
                               num_decoder_layers=1, kernel_sizes=(3, 5), max_source_positions=16,
                               max_target_positions=16, **TEXT), "seq2seq", 2),
    "decoder_lm": ("decoder_lm_tiny", dict(vocab_size=VOCAB, tokenizer=None, num_layers=2,
                                           num_key_value_heads=1, **TEXT), "tokens", 2),
    "coatnet": ("coatnet_0", dict(TINY_COATNET, num_classes=5, input_shape=(32, 32, 3),
                                  drop_path_rate=0.3), "image32", 2),
    "maxvit": ("maxvit_t", dict(TINY_MAXVIT, num_classes=5, input_shape=(64, 64, 3),
                                drop_path_rate=0.3), "image64", 8),
}  # fmt: skip


@pytest.fixture
def remat_calls(monkeypatch):
    return counting_remat(monkeypatch)


def _pair(family):
    """The family's tiny model with ``remat=True`` and the same model without, equal
    weights and seed generators."""
    name, overrides, kind, _ = CASES[family]
    remat = zoo.create(name, remat=True, **overrides)
    plain = zoo.create(name, **overrides)
    plain.set_weights(remat.get_weights())
    for variable, state in zip(
        plain.non_trainable_variables, remat.non_trainable_variables, strict=True
    ):
        variable.assign(state.value)
    return remat, plain, inputs(kind)


# T5, the decoder LM and CoAtNet on every backend (JAX compiles each case's gradients: 3-18 s).
@pytest.mark.parametrize(*matrix("family", list(CASES), keep=(0, 4, 5)))
def test_remat_gives_the_same_gradients(family, remat_calls):
    remat, plain, x = _pair(family)
    blocks = [layer for layer in remat._flatten_layers() if isinstance(layer, Remat)]
    assert len(blocks) == CASES[family][3]
    assert all(block.remat and block.get_config()["remat"] is True for block in blocks)
    assert remat.get_config().get("remat", True) is True  # the subclassed models' own
    assert not any(layer.remat for layer in plain._flatten_layers() if isinstance(layer, Remat))

    def call(model):
        return model(x, training=True)

    reset = reseed(remat)
    reset()
    got = gradients(remat, (), call)
    assert len(remat_calls) >= len(blocks)
    remat_calls.clear()
    reset()
    expected = gradients(plain, (), call)
    assert not remat_calls
    # Dropout (stochastic depth) was active: the inference output differs.
    assert not np.allclose(got[0], keras.ops.convert_to_numpy(plain(x)), atol=1e-4)
    assert_same(got, expected, scaled=True)


IMAGES = ["maxxvit_rmlp_nano_rw_256", "swin_tiny_patch4_window7_224"]


@pytest.mark.neutral
@pytest.mark.parametrize(
    "name, overrides",
    [
        ("maxxvit_rmlp_nano_rw_256", dict(blocks=(2, 1, 1, 1, 1), channels=(8, 8, 16, 32, 64),
                                          head_dim=8, stem_channels=(8, 8),
                                          input_shape=(64, 64, 3), num_classes=3)),
        ("swin_tiny_patch4_window7_224", dict(input_shape=(32, 32, 3), embed_dim=8,
                                              depths=(2, 2), num_heads=(1, 2), window_size=4)),
    ],
)  # fmt: skip
def test_remat_reaches_every_transformer_block(name, overrides):
    """The image families whose blocks the gradient test above covers (CoAtNet's and
    MaxViT's `RelativeTransformerBlock2D`): the argument reaches each, and its config."""
    model = zoo.create(name, remat=True, **overrides)
    blocks = [layer for layer in model._flatten_layers() if isinstance(layer, Remat)]
    assert blocks and all(block.get_config()["remat"] is True for block in blocks)
    plain = zoo.create(name, **overrides)
    assert not any(layer.remat for layer in plain._flatten_layers() if isinstance(layer, Remat))


@pytest.mark.neutral
@pytest.mark.parametrize("name", [CASES[family][0] for family in CASES] + IMAGES)
def test_remat_must_be_a_bool(name):
    with pytest.raises(TypeError, match=r"`remat` must be True or False, got 'yes'"):
        zoo.create(name, remat="yes")
