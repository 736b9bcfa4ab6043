"""The attention core's conventions, on every layer that attends through it.

Masks at the boundary (boolean or integer 0/1; a floating mask is refused with a
pointer to ``attention_bias``; shapes checked against the inputs), non-finite
padding that never reaches a real output, and the exportable cache write
(numbers against numpy). The layers' own numbers are checked against the numpy
references in their test files.
"""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops

from keras_posenc.layers import LogBuckets, _attention
from keras_posenc.layers.convs2s import ConvS2SAttention
from keras_posenc.layers.muse import MUSEAttention, MUSEDecoderLayer
from keras_posenc.layers.relative_attention import MultiHeadRelativeAttention
from keras_posenc.layers.relative_transformer import RelativeTransformerEncoder
from keras_posenc.layers.relative_transformer_decoder import RelativeTransformerDecoder

pytestmark = pytest.mark.contract

ATOL = 1e-5
PADDING = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)  # (batch 2, length 5)


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def normal(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def with_nan_padding(x, mask):
    """``x`` (batch, length, ...) with NaN at the positions where ``mask`` is False."""
    x = np.array(x, copy=True)
    x[~mask] = np.nan
    return x


def with_zero_padding(x, mask):
    x = np.array(x, copy=True)
    x[~mask] = 0.0
    return x


def assert_real_rows_unchanged(nan_output, finite_output, mask, what):
    nan_output, finite_output = to_numpy(nan_output), to_numpy(finite_output)
    assert np.isfinite(nan_output[mask]).all(), f"{what}: NaN in padding reached a real output"
    np.testing.assert_allclose(nan_output[mask], finite_output[mask], atol=ATOL, err_msg=what)


# --------------------------------------------------------------------------- NaN in padding


@pytest.mark.parametrize("relative", ["keys_values", "bias"])
def test_relative_attention_nan_in_padding(relative, rng):
    layer = MultiHeadRelativeAttention(2, 3, relative=relative, name="attention")
    x = normal(rng, 2, 5, 4)
    masks = dict(query_mask=PADDING, value_mask=PADDING)
    finite = layer(with_zero_padding(x, PADDING), with_zero_padding(x, PADDING), **masks)
    nan = with_nan_padding(x, PADDING)
    assert_real_rows_unchanged(layer(nan, nan, **masks), finite, PADDING, relative)


def test_relative_transformer_encoder_nan_in_padding(rng):
    layer = RelativeTransformerEncoder(8, 2, relative="bias", position=LogBuckets(8, 16))
    x = normal(rng, 2, 5, 4)
    finite = layer(with_zero_padding(x, PADDING), padding_mask=PADDING)
    nan = layer(with_nan_padding(x, PADDING), padding_mask=PADDING)
    assert_real_rows_unchanged(nan, finite, PADDING, "encoder")


def test_relative_transformer_decoder_cross_attention_nan_in_padding(rng):
    layer = RelativeTransformerDecoder(
        8, 2, relative="bias", position=LogBuckets(8, 16, bidirectional=False)
    )
    target, source = normal(rng, 2, 3, 4), normal(rng, 2, 5, 4)
    finite = layer(target, with_zero_padding(source, PADDING), encoder_padding_mask=PADDING)
    nan = layer(target, with_nan_padding(source, PADDING), encoder_padding_mask=PADDING)
    real = np.ones((2, 3), bool)
    assert_real_rows_unchanged(nan, finite, real, "RelativeTransformerDecoder cross-attention")


@pytest.mark.parametrize("conv", ["static", "dynamic"])
def test_muse_attention_nan_in_padding(conv, rng):
    layer = MUSEAttention(2, 2, conv=conv, kernel_sizes=(3,))
    x = normal(rng, 2, 5, 4)
    finite = layer(with_zero_padding(x, PADDING), mask=PADDING)
    nan = layer(with_nan_padding(x, PADDING), mask=PADDING)
    assert_real_rows_unchanged(nan, finite, PADDING, f"MUSEAttention {conv}")


def test_muse_cross_attention_nan_in_padding(rng):
    layer = MUSEDecoderLayer(8, 2, kernel_sizes=(3,))
    target, source = normal(rng, 2, 3, 4), normal(rng, 2, 5, 4)
    finite = layer(target, with_zero_padding(source, PADDING), encoder_padding_mask=PADDING)
    nan = layer(target, with_nan_padding(source, PADDING), encoder_padding_mask=PADDING)
    real = np.ones((2, 3), bool)
    assert_real_rows_unchanged(nan, finite, real, "MUSE cross-attention")


def test_convs2s_attention_nan_in_padding(rng):
    layer = ConvS2SAttention(conv_channels=4, embed_dim=3)
    x, embedded = normal(rng, 2, 3, 4), normal(rng, 2, 3, 3)
    keys, values = normal(rng, 2, 5, 3), normal(rng, 2, 5, 3)
    finite = (with_zero_padding(keys, PADDING), with_zero_padding(values, PADDING))
    nan = (with_nan_padding(keys, PADDING), with_nan_padding(values, PADDING))
    expected, expected_scores = layer(x, embedded, finite, PADDING)
    output, scores = layer(x, embedded, nan, PADDING)
    real = np.ones((2, 3), bool)
    assert_real_rows_unchanged(output, expected, real, "ConvS2SAttention output")
    assert_real_rows_unchanged(scores, expected_scores, real, "ConvS2SAttention scores")


# --------------------------------------------------------------------------- masks at the boundary


def _attention_users(rng):
    """(layer, call with a mask given as ``mask``, the argument's name) for every user."""
    x, source = normal(rng, 2, 5, 4), normal(rng, 2, 5, 4)
    relative = MultiHeadRelativeAttention(2, 2, name="relative")
    muse = MUSEAttention(2, 2, kernel_sizes=(3,), name="muse")
    decoder = MUSEDecoderLayer(8, 2, kernel_sizes=(3,), name="decoder")
    encoder = RelativeTransformerEncoder(8, 2, name="encoder")
    convs2s = ConvS2SAttention(conv_channels=4, embed_dim=4, name="convs2s")
    return [
        (relative, lambda mask: relative(x, x, value_mask=mask), "value_mask"),
        (relative, lambda mask: relative(x, x, query_mask=mask), "query_mask"),
        (
            relative,
            lambda mask: relative(x, x, attention_mask=mask[:, :, None] * mask[:, None, :]),
            "attention_mask",
        ),
        (muse, lambda mask: muse(x, mask=mask), "mask"),
        (
            decoder,
            lambda mask: decoder(x, source, encoder_padding_mask=mask),
            "encoder_padding_mask",
        ),
        (encoder, lambda mask: encoder(x, padding_mask=mask), "padding_mask"),
        (convs2s, lambda mask: convs2s(x, x, (source, source), mask)[0], "encoder_mask"),
    ]


def test_floating_masks_are_refused_with_a_pointer_to_attention_bias(rng):
    additive = np.where(PADDING, 0.0, -1e9).astype("float32")
    for layer, call, argument in _attention_users(rng):
        with pytest.raises(TypeError, match=rf"'{layer.name}'.*`{argument}` must be boolean or"):
            call(additive)
        with pytest.raises(TypeError, match=r"got dtype float32.*`attention_bias`"):
            call(additive)


def test_integer_masks_equal_boolean_masks(rng):
    for _, call, argument in _attention_users(rng):
        expected = to_numpy(call(PADDING))
        np.testing.assert_allclose(
            to_numpy(call(PADDING.astype("int32"))), expected, atol=ATOL, err_msg=argument
        )
        # The mask matters: without it the outputs differ, so the comparison above counts.
        unmasked = to_numpy(call(np.ones_like(PADDING)))
        assert np.abs(unmasked - expected).max() > 1e-4, argument


def test_mask_shapes_are_checked_against_the_inputs(rng):
    wrong = np.ones((2, 4), bool)  # 4 positions for inputs of length 5
    for layer, call, argument in _attention_users(rng):
        with pytest.raises(ValueError, match=rf"'{layer.name}'.*`{argument}` must have shape"):
            call(wrong)


# --------------------------------------------------------------------------- cache write


def test_write_rows_matches_numpy(rng):
    cache, rows = normal(rng, 2, 6, 3), normal(rng, 2, 2, 3)
    for index in (0, 3, 4):
        expected = cache.copy()
        expected[:, index : index + 2] = rows
        actual = _attention.write_rows(cache, rows, ops.convert_to_tensor(index, "int32"))
        np.testing.assert_array_equal(to_numpy(actual), expected)


@pytest.mark.parametrize("fused", [False, True])
def test_bias_diagonals_equal_the_toeplitz_bias(fused, rng):
    # A bias given by its diagonals is the Toeplitz matrix of them: the same attention
    # whether the backend takes the strided view (PyTorch without gradients) or not.
    q, k, v = (rng.standard_normal((2, n, 3, 4)).astype("float32") for n in (4, 6, 6))
    diagonals = rng.standard_normal((3, 4 + 6 - 1)).astype("float32")
    r = np.arange(6)[None, :] - np.arange(4)[:, None]
    dense = ops.convert_to_tensor(diagonals[:, r + 3][None])  # (1, heads, q_len, k_len)
    output, _ = _attention.attend(q, k, v, bias_diagonals=diagonals, fused=fused)
    expected, _ = _attention.attend(q, k, v, bias=dense)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(expected), atol=1e-5
    )
    # With a mask the diagonals are expanded and added to it.
    mask = rng.random((2, 4, 6)) > 0.3
    output, _ = _attention.attend(q, k, v, mask=mask, bias_diagonals=diagonals, fused=fused)
    expected, _ = _attention.attend(q, k, v, mask=mask, bias=dense)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(expected), atol=1e-5
    )
