"""The ways relative logits are read from their tables, each against the numpy reference.

The backend kernels (`keras_posenc.backend`) read them by the reference or by a
backend's override, and `keras_posenc.backend.algorithms` holds the portable variants
the overrides choose: every way must give the same numbers on every backend, so each
is run here (layers with the backend's kernels and with `backend.references_only`).
PyTorch's fused path with a strided Toeplitz bias (`backend.toeplitz_attention`) runs
only on PyTorch's CPU without gradients; its tests say so.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
from keras import ops
from test_relative_attention import assert_close, built_layer, inputs, layer_weights, to_numpy
from tiers import matrix

from keras_posenc import backend
from keras_posenc.backend import algorithms, common
from keras_posenc.layers import RotaryPositions, position_schemes, relative_index
from keras_posenc.layers.relative_position import RelativePositionBias
from reference import relative_index as reference_index
from reference.relative_attention import causal_mask, clip_index_matrix, relative_attention
from reference.relative_position import relative_position_bias

pytestmark = pytest.mark.contract

# Lengths around the 64-row strips and the 16-key windows of `relative_index.toeplitz`:
# one strip, exactly two, two with a padded last strip, fewer keys than queries, a single
# query or key; one window exactly, one and one key, three exactly.
LENGTHS = [
    (1, 1),
    (1, 9),
    (9, 1),
    (3, 8),
    (64, 64),
    (65, 70),
    (130, 20),
    (20, 130),
    (5, 16),
    (16, 17),
    (2, 48),
]
ON_TORCH = keras.backend.backend() == "torch"


def kernels(mode):
    """The backend's kernels (``"backend"``) or only their references (``"reference"``)."""
    return backend.references_only() if mode == "reference" else contextlib.nullcontext()


KERNELS = ["backend", "reference"]
TOEPLITZ_WAYS = {
    "reference": common.toeplitz,
    "windows": algorithms.toeplitz_by_windows,
    "kernel": relative_index.toeplitz,
}


def no_gradients():
    """Inference as Keras' ``predict`` runs it: on PyTorch ``torch.no_grad``."""
    if ON_TORCH:
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


@pytest.mark.parametrize("way", list(TOEPLITZ_WAYS))
@pytest.mark.parametrize(*matrix("lengths", LENGTHS, keep=[0, 1, 2]), ids=str)
def test_toeplitz_matches_reference(lengths, way, rng):
    query_length, key_length = lengths
    diagonals = rng.standard_normal((2, 3, query_length + key_length - 1)).astype("float32")
    actual = TOEPLITZ_WAYS[way](ops.convert_to_tensor(diagonals), query_length, key_length)
    expected = reference_index.toeplitz(diagonals, query_length, key_length)
    assert tuple(actual.shape) == expected.shape
    np.testing.assert_array_equal(ops.convert_to_numpy(actual), expected)


@pytest.mark.parametrize("offset", [0, 4, "tensor"])
def test_distances_in_order_are_the_diagonals(offset):
    value = 3 if offset == "tensor" else offset
    given = ops.convert_to_tensor(3, "int32") if offset == "tensor" else offset
    distances = ops.convert_to_numpy(relative_index.distances_in_order(5, 9, given))
    expected = reference_index.relative_positions(5, 9, value)
    np.testing.assert_array_equal(reference_index.toeplitz(distances, 5, 9), expected)


@pytest.mark.parametrize("mode", KERNELS)
@pytest.mark.parametrize(
    # Both kernels on every backend; the other index tables go down the same paths.
    *matrix(
        "position",
        [
            position_schemes.ClipPositions(5),
            position_schemes.LogBuckets(8, 40, bidirectional=True),
            position_schemes.LogBuckets(8, 40, bidirectional=False),
            position_schemes.PiecewiseBuckets(9),
        ],
    ),
    ids=["clip", "log", "log_causal", "piecewise"],
)
def test_bias_kernels_match_reference(mode, position, rng):
    layer = RelativePositionBias(num_heads=3, position=position)
    layer(2, 2)
    layer.embeddings.assign(rng.standard_normal(tuple(layer.embeddings.shape)).astype("float32"))
    table = ops.convert_to_numpy(layer.embeddings)
    for query_length, key_length, offset in [(65, 70, 0), (130, 20, 0), (1, 40, 39), (7, 12, 5)]:
        expected = relative_position_bias(
            table, lambda r: reference_bucket(position, r), query_length, key_length, offset
        )
        with kernels(mode):
            actual = layer(query_length, key_length, offset=offset)
        np.testing.assert_array_equal(ops.convert_to_numpy(actual), expected)


def reference_bucket(position, r):
    """The reference index of a scheme (independent of keras_posenc's)."""
    if isinstance(position, position_schemes.ClipPositions):
        return reference_index.clip_index(r, position.max_distance)
    if isinstance(position, position_schemes.LogBuckets):
        return reference_index.t5_relative_position_bucket(
            r, position.bidirectional, position.num_buckets, position.max_distance
        )
    return reference_index.piecewise_index(r, position.num_buckets)


@pytest.mark.parametrize("mode", KERNELS)
@pytest.mark.parametrize("relative", ["keys_values", "keys", "bias"])
def test_gather_kernels_match_reference(relative, mode, rng):
    query, value = inputs(rng, 2, 70, 6), inputs(rng, 2, 66, 6)
    layer = built_layer(query, value, relative=relative)
    query_mask = np.ones((2, 70), bool)
    query_mask[0, 5] = False
    value_mask = np.ones((2, 66), bool)
    value_mask[1, 60:] = False
    with kernels(mode):
        output, scores = layer(
            query, value, query_mask=query_mask, value_mask=value_mask, return_attention_scores=True
        )
        blocked = to_numpy(layer(query, value, query_mask=query_mask, value_mask=value_mask))
    expected, probabilities = relative_attention(
        query,
        value,
        None,
        layer_weights(layer),
        relative,
        clip_index_matrix(70, 66, 3),
        query_mask[:, :, None] & value_mask[:, None, :],
    )
    assert_close(output, expected, what=f"{relative}, {mode} kernels")
    assert_close(scores, probabilities, what=f"{relative} scores, {mode} kernels")
    assert_close(blocked, expected, what="without scores")


def test_fused_attention_preferred_only_on_torch_without_gradients():
    with no_gradients():
        assert backend.prefers_fused_attention() is ON_TORCH
    assert backend.prefers_fused_attention() is False


def test_toeplitz_attention_preferred_only_where_it_pays(rng):
    q, k, v = (ops.convert_to_tensor(inputs(rng, 1, 4, 8).reshape(1, 4, 2, 4)) for _ in range(3))
    diagonals = ops.convert_to_tensor(rng.standard_normal((2, 7)).astype("float32"))
    assert backend.prefers_toeplitz_attention(q, k, v, diagonals) is False  # gradients on
    with no_gradients():
        assert backend.prefers_toeplitz_attention(q, k, v, diagonals) is ON_TORCH
        half = [ops.cast(x, "float16") for x in (q, k, v)]
        assert backend.prefers_toeplitz_attention(*half, diagonals) is False


def _count_toeplitz_attention(monkeypatch):
    taken = []
    original = backend.toeplitz_attention

    def counting(*args):
        taken.append(True)
        return original(*args)

    monkeypatch.setattr(backend, "toeplitz_attention", counting)
    return taken


@pytest.mark.skipif(
    not ON_TORCH,
    reason="a strided (Toeplitz) bias view is what PyTorch's scaled_dot_product_attention "
    "takes; elsewhere prefers_toeplitz_attention is False (tested above)",
)
@pytest.mark.parametrize("lengths", [(70, 70), (3, 8), (9, 4), (1, 1)], ids=str)
def test_toeplitz_attention_matches_reference(lengths, rng, monkeypatch):
    query_length, key_length = lengths
    query, value = inputs(rng, 2, query_length, 6), inputs(rng, 2, key_length, 6)
    layer = built_layer(query, value, relative="bias", position=position_schemes.LogBuckets(8, 3))
    taken = _count_toeplitz_attention(monkeypatch)
    index = reference_index.t5_relative_position_bucket(
        reference_index.relative_positions(query_length, key_length), True, 8, 3
    )
    weights = layer_weights(layer)
    with no_gradients():
        output = layer(query, value)
        causal = layer(query, value, use_causal_mask=True)
        masked = layer(query, value, value_mask=np.ones((2, key_length), bool))
    assert taken == [True, True], "no padding mask: the strided path; a mask: the general one"
    expected, _ = relative_attention(query, value, None, weights, "bias", index)
    assert_close(output, expected, what="strided Toeplitz bias")
    assert_close(masked, expected, what="general path with an all-true mask")
    expected, _ = relative_attention(
        query, value, None, weights, "bias", index, causal_mask(query_length, key_length)
    )
    assert_close(causal, expected, what="strided Toeplitz bias, causal")


@pytest.mark.skipif(
    not ON_TORCH,
    reason="a strided (Toeplitz) bias view is what PyTorch's scaled_dot_product_attention "
    "takes; elsewhere prefers_toeplitz_attention is False (tested above)",
)
def test_toeplitz_attention_decodes_like_the_full_pass(rng, monkeypatch):
    x = inputs(rng, 2, 6, 6)
    layer = built_layer(x, x, relative="bias")
    full = to_numpy(layer(x, x, use_causal_mask=True))
    taken = _count_toeplitz_attention(monkeypatch)
    cache = np.zeros((2, 2, 6, 2, 4), "float32")
    steps = []
    with no_gradients():
        for t in range(6):
            step = x[:, t : t + 1]
            index = ops.convert_to_tensor(t, "int32")
            output, cache = layer(
                step, step, cache=cache, cache_update_index=index, use_causal_mask=True
            )
            steps.append(to_numpy(output))
    assert taken == [True] * 6
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


@pytest.mark.skipif(
    not ON_TORCH,
    reason="a strided (Toeplitz) bias view is what PyTorch's scaled_dot_product_attention "
    "takes; elsewhere prefers_toeplitz_attention is False (tested above)",
)
@pytest.mark.parametrize("lengths", [(70, 70), (3, 8), (9, 4)], ids=str)
def test_no_relative_term_under_a_causal_mask_is_toeplitz_too(lengths, rng, monkeypatch):
    # RoPE's decoders: the causal mask alone, as diagonals (zeros, then the fill), equal to
    # the general path that builds the mask; without the causal mask nothing is Toeplitz.
    query_length, key_length = lengths
    query, value = inputs(rng, 2, query_length, 6), inputs(rng, 2, key_length, 6)
    layer = built_layer(query, value, relative=None, rotary=RotaryPositions())
    taken = _count_toeplitz_attention(monkeypatch)
    with no_gradients():
        causal = layer(query, value, use_causal_mask=True)
        general = layer(
            query, value, use_causal_mask=True, value_mask=np.ones((2, key_length), bool)
        )
        layer(query, value)
    assert taken == [True], "causal: the strided path; with a mask or no causal mask: not"
    assert_close(causal, to_numpy(general), what="causal mask as Toeplitz diagonals")


@pytest.mark.skipif(
    not ON_TORCH,
    reason="a strided (Toeplitz) bias view is what PyTorch's scaled_dot_product_attention "
    "takes; elsewhere prefers_toeplitz_attention is False (tested above)",
)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("relative", [None, "bias"])
def test_a_short_window_without_sinks_is_a_band_of_diagonals(relative, causal, rng, monkeypatch):
    # Up to 2 W keys a window's blocks would read every key: the band goes to the Toeplitz
    # route, equal to the masked pass (asking for the scores takes the general path).
    x = inputs(rng, 2, 12, 6)
    kwargs = {} if relative is None else {"position": position_schemes.LogBuckets(8, 3)}
    layer = built_layer(x, x, relative=relative, sliding_window=6, **kwargs)
    taken = _count_toeplitz_attention(monkeypatch)
    with no_gradients():
        band = layer(x, x, use_causal_mask=causal)
        general, _ = layer(x, x, use_causal_mask=causal, return_attention_scores=True)
    assert taken == [True]
    assert_close(band, to_numpy(general), what="a window as Toeplitz diagonals")
