"""Relative position index functions against independent numpy references."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from keras_posenc.layers import relative_index as ri
from reference import relative_index as ref

pytestmark = pytest.mark.contract

# Every distance the issue asks for, once: r in [-10000, 10000].
R = np.arange(-10_000, 10_001, dtype=np.int32)

# (num_buckets, max_distance, bidirectional): T5's defaults (both directions), the
# docstrings' examples, odd bucket counts, the smallest legal tables and a large one.
LOG_CASES = [
    (32, 128, True),
    (32, 128, False),
    (64, 256, True),
    (33, 100, True),
    (4, 2, True),
    (2, 2, False),
    (8, 20, True),
    (16, 32, False),
    (320, 1000, False),
]
# 6, 18, 30: exact float32 ties (2.5 -> 2 half-to-even); 2: the smallest table.
PIECEWISE_CASES = [2, 3, 6, 7, 8, 16, 18, 19, 30, 32, 50, 64, 255]
MULTISCALE_CASES = [2, 3, 5, 10, 20, 64]


def numpy(x):
    return ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    "query_length, key_length, offset",
    [(1, 1, 0), (2, 4, 0), (4, 2, 0), (1, 7, 6), (3, 9, 6), (5, 5, -2), (0, 3, 0)],
)
def test_relative_positions_match_reference(query_length, key_length, offset):
    actual = numpy(ri.relative_positions(query_length, key_length, offset))
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, ref.relative_positions(query_length, key_length, offset))


def test_long_sequences_length_1_and_5000():
    expected = ref.relative_positions(5000, 5000)
    actual = ri.relative_positions(5000, 5000)
    np.testing.assert_array_equal(numpy(actual), expected)
    # The T5 bucket of every (i, j) of a 5000 x 5000 matrix, via the reference's values on R.
    buckets = numpy(ri.log_bucket_index(actual, 32, 128))
    lookup = ref.t5_relative_position_bucket(R, True, 32, 128)
    np.testing.assert_array_equal(buckets, lookup[expected + 10_000])
    decoding = numpy(ri.relative_positions(1, 5000, offset=4999))
    np.testing.assert_array_equal(decoding, ref.relative_positions(1, 5000, 4999))
    np.testing.assert_array_equal(
        numpy(ri.relative_positions(5000, 1)), ref.relative_positions(5000, 1)
    )


@pytest.mark.parametrize("max_distance", [0, 1, 2, 16, 20])
def test_clip_index_matches_reference(max_distance):
    actual = numpy(ri.clip_index(R, max_distance))
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, ref.clip_index(R, max_distance))


@pytest.mark.parametrize("num_buckets, max_distance, bidirectional", LOG_CASES)
def test_log_bucket_index_matches_t5(num_buckets, max_distance, bidirectional):
    actual = numpy(ri.log_bucket_index(R, num_buckets, max_distance, bidirectional))
    expected = ref.t5_relative_position_bucket(R, bidirectional, num_buckets, max_distance)
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, expected)
    assert actual.min() >= 0 and actual.max() < num_buckets


def test_log_bucket_index_t5_landmarks():
    # Published behaviour: |r| < 8 exact, positive r in the upper half, clamp past 128.
    r = np.array([-1000, -128, -127, -8, -7, -1, 0, 1, 7, 8, 127, 128, 1000])
    both = numpy(ri.log_bucket_index(r, 32, 128, True))
    np.testing.assert_array_equal(both, [15, 15, 15, 8, 7, 1, 0, 17, 23, 24, 31, 31, 31])
    causal = numpy(ri.log_bucket_index(r, 32, 128, False))
    np.testing.assert_array_equal(causal, [31, 31, 31, 8, 7, 1, 0, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("num_buckets", PIECEWISE_CASES)
def test_piecewise_index_matches_irpe(num_buckets):
    actual = numpy(ri.piecewise_index(R, num_buckets))
    beta = num_buckets // 2
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, ref.piecewise_index(R, num_buckets))
    assert actual.min() == 0 and actual.max() == 2 * beta


def test_piecewise_rounds_half_to_even():
    # beta = 3, alpha = 1.5, gamma = 12: g(6) = 1.5 + ln(4) / ln(8) * 1.5 = 2.5 exactly in float32.
    np.testing.assert_array_equal(numpy(ri.piecewise_index([-6, 6], 6)), [3 - 2, 3 + 2])


@pytest.mark.parametrize("scale", MULTISCALE_CASES)
def test_multiscale_index_matches_reference_and_stays_in_table(scale):
    actual = numpy(ri.multiscale_index(R, scale))
    assert actual.dtype == np.int32
    np.testing.assert_array_equal(actual, ref.multiscale_index(R, scale))
    assert actual.min() == 0 and actual.max() == ri.multiscale_table_size(scale) - 1


@pytest.mark.parametrize(
    "scheme, direct",
    [
        (layers.ClipPositions(max_distance=5), lambda r: ri.clip_index(r, 5)),
        (
            layers.LogBuckets(num_buckets=16, max_distance=64, bidirectional=False),
            lambda r: ri.log_bucket_index(r, 16, 64, False),
        ),
        (layers.PiecewiseBuckets(num_buckets=12), lambda r: ri.piecewise_index(r, 12)),
        (layers.MultiScaleBins(scale=10), lambda r: ri.multiscale_index(r, 10)),
    ],
)
def test_scheme_index_is_its_function_and_fills_its_table(scheme, direct):
    actual = numpy(scheme.index(R))
    np.testing.assert_array_equal(actual, numpy(direct(R)))
    # Every row of the table is reachable and none beyond it.
    np.testing.assert_array_equal(np.unique(actual), np.arange(scheme.table_size))


def test_table_sizes():
    assert layers.ClipPositions(max_distance=16).table_size == 33
    assert layers.LogBuckets(num_buckets=32).table_size == 32
    assert layers.PiecewiseBuckets(num_buckets=32).table_size == 33
    assert layers.PiecewiseBuckets(num_buckets=33).table_size == 33
    assert layers.MultiScaleBins(scale=5).table_size == 5
    assert ri.multiscale_table_size(20) == 21


def test_scalar_tensor_lengths_and_offset():
    q, k, offset = (ops.convert_to_tensor(n, dtype="int32") for n in (3, 7, 4))
    np.testing.assert_array_equal(
        numpy(ri.relative_positions(q, k, offset)), ref.relative_positions(3, 7, 4)
    )
    np.testing.assert_array_equal(
        numpy(ri.relative_positions(np.int64(3), np.int32(7))), ref.relative_positions(3, 7)
    )


class IndexProbe(keras.Model):
    """Builds indices from its input's (possibly symbolic) length inside a compiled predict."""

    def call(self, x):
        length = ops.shape(x)[1]
        r = ri.relative_positions(length, length + 2, offset=2)
        index = layers.LogBuckets(num_buckets=8, max_distance=20).index(r)
        return ops.zeros_like(x[:, :, :1]) + ops.cast(index, x.dtype)[None]


def test_traced_lengths_in_compiled_predict():
    model = IndexProbe()
    for length in (3, 11, 6):  # TensorFlow retraces with an unknown length
        out = model.predict(np.zeros((1, length, 1), "float32"), verbose=0)
        expected = ref.t5_relative_position_bucket(
            ref.relative_positions(length, length + 2, 2), True, 8, 20
        )
        np.testing.assert_array_equal(out[0].astype(np.int64), expected)


def test_symbolic_length_on_tensorflow_or_static_elsewhere():
    x = np.zeros((1, 5, 1), "float32")
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # An input_signature with an unknown length makes ops.shape(x)[1] a symbolic tensor.
        probe = tf.function(IndexProbe().call, input_signature=[tf.TensorSpec((None, None, 1))])
        out = probe(x).numpy()
    else:
        out = numpy(IndexProbe()(x))
    expected = ref.t5_relative_position_bucket(ref.relative_positions(5, 7, 2), True, 8, 20)
    np.testing.assert_array_equal(out[0].astype(np.int64), expected)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: ri.clip_index(R, -1),
            ValueError,
            r"clip_index: `max_distance` must be an integer >= 0, got -1",
        ),
        (
            lambda: ri.clip_index(R, 2.5),
            TypeError,
            r"clip_index: `max_distance` must be an integer",
        ),
        (
            lambda: ri.clip_index(R, True),
            TypeError,
            r"clip_index: `max_distance` must be an integer",
        ),
        (
            lambda: ri.log_bucket_index(R, 3, 128),
            ValueError,
            r"log_bucket_index: `num_buckets` must be >= 4 for bidirectional .* got 3",
        ),
        (
            lambda: ri.log_bucket_index(R, 1, 128, False),
            ValueError,
            r"log_bucket_index: `num_buckets` must be >= 2 for unidirectional .* got 1",
        ),
        (
            lambda: ri.log_bucket_index(R, 32, -5),
            ValueError,
            r"log_bucket_index: `max_distance` must be an integer >= 0, got -5",
        ),
        (
            lambda: ri.log_bucket_index(R, 32, 8),
            ValueError,
            r"log_bucket_index: `max_distance` must be > 8 .* got 8",
        ),
        (
            lambda: ri.log_bucket_index(R, 32, 128, "yes"),
            TypeError,
            r"log_bucket_index: `bidirectional` must be True or False, got 'yes'",
        ),
        (
            lambda: ri.piecewise_index(R, 1),
            ValueError,
            r"piecewise_index: `num_buckets` must be an integer >= 2, got 1",
        ),
        (
            lambda: ri.multiscale_index(R, 1),
            ValueError,
            r"multiscale_index: `scale` must be an integer >= 2, got 1",
        ),
        (
            lambda: ri.multiscale_table_size(0),
            ValueError,
            r"multiscale_table_size: `scale` must be an integer >= 2, got 0",
        ),
        (
            lambda: layers.ClipPositions(max_distance=-3),
            ValueError,
            r"ClipPositions: `max_distance` must be an integer >= 0, got -3",
        ),
        (
            lambda: layers.LogBuckets(num_buckets=32, max_distance=4),
            ValueError,
            r"LogBuckets: `max_distance` must be > 8",
        ),
        (
            lambda: ri.relative_positions(-1, 3),
            ValueError,
            r"relative_positions: `query_length` must be an integer >= 0, got -1",
        ),
        (
            lambda: ri.relative_positions(3, 2.0),
            TypeError,
            r"relative_positions: `key_length` must be a non-negative integer or an integer scalar",
        ),
        (lambda: ri.relative_positions(None, 2), TypeError, r"relative_positions: `query_length`"),
        (
            lambda: ri.relative_positions(ops.ones((2,), "int32"), 2),
            TypeError,
            r"relative_positions: `query_length` .* got a tensor of shape \(2,\)",
        ),
        (
            lambda: ri.relative_positions(ops.ones((), "float32"), 2),
            TypeError,
            r"relative_positions: `query_length` .* dtype float32",
        ),
        (
            lambda: ri.relative_positions(2, 2, offset=0.5),
            TypeError,
            r"relative_positions: `offset` must be an integer",
        ),
    ],
)
def test_bad_input_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: ri.toeplitz([1, 2, 3], 0, 4), ValueError, r"toeplitz: `query_length`"),
        (
            lambda: ri.toeplitz([1, 2, 3], 2.0, 2),
            TypeError,
            r"toeplitz: `query_length`",
        ),
        (
            lambda: ri.toeplitz([1, 2, 3], 2, 3),
            ValueError,
            r"toeplitz: the last axis of `diagonals` must have .* = 4 entries, got shape \(3,\)",
        ),
        (
            lambda: ri.distances_in_order(-1, 3),
            ValueError,
            r"distances_in_order: `query_length`",
        ),
        (
            lambda: ri.distances_in_order(2, 3, offset=0.5),
            TypeError,
            r"distances_in_order: `offset` must be an integer",
        ),
    ],
)
def test_toeplitz_and_distances_check_their_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()
