"""Allocation estimates against the settable memory limit (keras_posenc.layers._memory):
a huge table, projection or attention gives one clear error before anything of its
size is allocated (before, a raw out-of-memory error of each backend's allocator, or
on JAX sometimes none). Tested with a small limit, not with real memory."""

from __future__ import annotations

import numpy as np
import pytest

from keras_posenc import layers, zoo
from keras_posenc.layers import EstimateTooLarge, memory_limit, set_memory_limit

pytestmark = pytest.mark.neutral


@pytest.fixture
def limit():
    set_memory_limit("1M")
    yield
    set_memory_limit(None)


def test_huge_weights_and_tables_are_refused_before_building(limit):
    x = np.zeros((2, 5, 8), "float32")
    # 8 x 1000 x 100 float32 kernels: 3.2 MB each.
    expected = (
        r"MultiHeadRelativeAttention\('.*'\): its projection kernels would take about "
        r"12.2 MiB \(float32; the largest of shape \(8, 1000, 100\)\), more than the memory "
        r"limit of 1 MiB\. .*set_memory_limit"
    )
    with pytest.raises(EstimateTooLarge, match=expected):
        layers.MultiHeadRelativeAttention(1000, 100)(x, x)
    with pytest.raises(EstimateTooLarge, match=r"RelativePositionEmbedding\('.*'\): its table"):
        layers.RelativePositionEmbedding(4096, position=layers.ClipPositions(100))(5, 5)
    with pytest.raises(EstimateTooLarge, match=r"RelativePositionBias2D\('.*'\): its table"):
        layers.RelativePositionBias2D(64, position=layers.Grid2DPositions((64, 64))).build()
    # Within the limit, the same layers build.
    assert layers.MultiHeadRelativeAttention(2, 4)(x, x).shape == (2, 5, 8)


def test_zoo_models_with_huge_tables_are_refused_before_building(limit):
    # 40,000 x 512 float32 = 78 MiB of token embedding.
    tables = r": its (token embedding|embedding tables) would take about"
    vocabularies = {"src_vocab_size": 40000, "tgt_vocab_size": 40000}
    with pytest.raises(EstimateTooLarge, match=r"ConvS2SEmbedding" + tables):
        zoo.create("convs2s_small", **vocabularies)
    with pytest.raises(EstimateTooLarge, match=r"MUSEEmbedding" + tables):
        zoo.create("muse_tiny", **vocabularies)
    with pytest.raises(EstimateTooLarge, match=r"T5" + tables):
        zoo.create("t5_small")


def test_attention_logits_beyond_the_limit_are_refused(limit):
    attention = layers.MultiHeadRelativeAttention(2, 4, relative="bias", fused_attention=False)
    short = np.zeros((1, 16, 8), "float32")
    attention(short, short)
    long = np.zeros((1, 512, 8), "float32")  # 3 x 2 x 512 x 512 x 4 bytes = 6 MiB
    with pytest.raises(EstimateTooLarge, match=r"attention: its logits, bias and their sum"):
        attention(long, long)


def test_the_limit_is_read_from_the_environment_and_checked(monkeypatch):
    set_memory_limit(None)
    monkeypatch.setenv("KERAS_POSENC_MEMORY_LIMIT", "2G")
    assert memory_limit() == 2 * 2**30
    monkeypatch.setenv("KERAS_POSENC_MEMORY_LIMIT", "1.5 GiB")
    assert memory_limit() == int(1.5 * 2**30)
    monkeypatch.delenv("KERAS_POSENC_MEMORY_LIMIT")
    assert memory_limit() > 2**30  # the machine's memory
    for bad in ("lots", "-1G", 0):
        with pytest.raises(ValueError, match="set_memory_limit: the limit must be a positive"):
            set_memory_limit(bad)
    with pytest.raises(TypeError, match="set_memory_limit: the limit must be a number"):
        set_memory_limit(True)
