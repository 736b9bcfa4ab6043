"""RelativePositionBias, RelativePositionEmbedding and MultiScaleRelativePositionEmbedding."""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers import (
    ClipPositions,
    LogBuckets,
    MultiScaleRelativePositionEmbedding,
    PiecewiseBuckets,
    RelativePositionBias,
    RelativePositionEmbedding,
    relative_index,
)
from reference import relative_index as ref_index
from reference import relative_position as ref

pytestmark = pytest.mark.contract

ATOL = 1e-5
BF16_ATOL = 2e-2  # bfloat16 keeps 8 bits of mantissa; the tables are ~0.05 in size


@keras.saving.register_keras_serializable(package="keras_posenc_tests")
class LengthsAdapter(keras.layers.Layer):
    """Calls a length-driven layer with lengths read off a (batch, length, ...) tensor.

    The queries are the input's positions; the keys are ``offset`` cached
    positions followed by the queries, as in step-by-step decoding. The shared
    layer checks feed layers tensors; this lets them exercise layers that take ints.
    """

    def __init__(self, inner, offset=0, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner
        self.offset = offset

    def build(self, input_shape):
        if not self.inner.built:
            self.inner.build()

    def call(self, x):
        length = ops.shape(x)[1]
        return self.inner(length, length + self.offset, offset=self.offset)

    def compute_output_shape(self, input_shape):
        length = input_shape[1]
        keys = None if length is None else length + self.offset
        return self.inner.compute_output_shape(length, keys, self.offset)

    def get_config(self):
        return {
            **super().get_config(),
            "inner": keras.saving.serialize_keras_object(self.inner),
            "offset": self.offset,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["inner"] = keras.saving.deserialize_keras_object(config["inner"])
        return cls(**config)


def randomize(layer, rng):
    """Replaces every table with random values, so index mistakes change outputs."""
    if not layer.built:
        layer.build()
    for weight in layer.weights:
        weight.assign(rng.standard_normal(tuple(weight.shape)).astype("float32"))
    return layer


def numpy(x):
    return ops.convert_to_numpy(x)


def scheme_of(kind, max_distance, num_buckets, bidirectional):
    """The scheme a test case describes (the layer's), beside its numpy reference `index_fn`."""
    if kind == "clip":
        return ClipPositions(max_distance)
    if kind == "log":
        return LogBuckets(num_buckets, max_distance, bidirectional)
    return PiecewiseBuckets(num_buckets)


def index_fn(kind, max_distance, num_buckets, bidirectional):
    if kind == "clip":
        return functools.partial(ref_index.clip_index, k=max_distance)
    if kind == "log":
        return functools.partial(
            ref_index.t5_relative_position_bucket,
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )
    return functools.partial(ref_index.piecewise_index, num_buckets=num_buckets)


LENGTHS = [(1, 1, 0), (3, 5, 0), (5, 3, 0), (4, 9, 5), (1, 5000, 4999), (5000, 1, 0)]
BIAS_SETTINGS = [
    ("log", 32, 128, True),  # T5 encoder
    ("log", 32, 128, False),  # T5 decoder
    ("log", 8, 20, True),
    ("clip", 32, 3, True),
    ("piecewise", 9, 128, True),
]


# --------------------------------------------------------------------------- vs reference


@pytest.mark.parametrize("kind, num_buckets, max_distance, bidirectional", BIAS_SETTINGS)
def test_bias_matches_reference(rng, kind, num_buckets, max_distance, bidirectional):
    layer = RelativePositionBias(
        3, position=scheme_of(kind, max_distance, num_buckets, bidirectional)
    )
    randomize(layer, rng)
    table = numpy(layer.embeddings)
    fn = index_fn(kind, max_distance, num_buckets, bidirectional)
    for q, k, offset in LENGTHS:
        actual = numpy(layer(q, k, offset=offset))
        assert actual.shape == (1, 3, q, k) == layer.compute_output_shape(q, k, offset)
        np.testing.assert_allclose(
            actual, ref.relative_position_bias(table, fn, q, k, offset), atol=ATOL
        )


@pytest.mark.parametrize(
    "kind, max_distance, num_buckets, bidirectional",
    [
        ("clip", 16, 32, True),
        ("clip", 2, 32, True),
        ("log", 64, 16, False),
        ("piecewise", 16, 12, True),
    ],
)
def test_embedding_matches_reference(rng, kind, max_distance, num_buckets, bidirectional):
    layer = RelativePositionEmbedding(
        4, position=scheme_of(kind, max_distance, num_buckets, bidirectional)
    )
    randomize(layer, rng)
    table = numpy(layer.embeddings)
    fn = index_fn(kind, max_distance, num_buckets, bidirectional)
    for q, k, offset in LENGTHS:
        actual = numpy(layer(q, k, offset=offset))
        assert actual.shape == (q, k, 4) == layer.compute_output_shape(q, k, offset)
        np.testing.assert_allclose(
            actual, ref.relative_position_embedding(table, fn, q, k, offset), atol=ATOL
        )


def test_embedding_table_and_indices_gather_to_the_output(rng):
    layer = randomize(RelativePositionEmbedding(4, position=ClipPositions(3)), rng)
    table, index = layer.table(), layer.indices(6, 9, offset=3)
    assert tuple(table.shape) == (7, 4)
    np.testing.assert_array_equal(
        numpy(index), ref_index.clip_index(ref_index.relative_positions(6, 9, 3), 3)
    )
    np.testing.assert_allclose(numpy(ops.take(table, index, axis=0)), numpy(layer(6, 9, offset=3)))
    bias = randomize(RelativePositionBias(2, position=LogBuckets(16, 50)), rng)
    assert tuple(bias.table().shape) == (16, 2)
    np.testing.assert_array_equal(
        numpy(bias.indices(4, 4)),
        numpy(relative_index.log_bucket_index(relative_index.relative_positions(4, 4), 16, 50)),
    )


@pytest.mark.parametrize(
    "scales, combine",
    [((5, 10, 20), "mean"), ((2, 7), "sum"), ((3, 4, 64), "concat"), ((6,), "mean")],
)
def test_multiscale_matches_reference(rng, scales, combine):
    layer = randomize(MultiScaleRelativePositionEmbedding(6, scales=scales, combine=combine), rng)
    tables = [numpy(t) for t in layer.embeddings]
    for table, scale in zip(tables, scales):
        width = 6 // len(scales) if combine == "concat" else 6
        assert table.shape == (2 * (scale // 2) + 1, width)
    for q, k, offset in [(1, 1, 0), (4, 7, 3), (9, 9, 0), (1, 5000, 4999)]:
        actual = numpy(layer(q, k, offset=offset))
        assert actual.shape == (q, k, 6) == layer.compute_output_shape(q, k, offset)
        expected = ref.multiscale_relative_position_embedding(tables, scales, combine, q, k, offset)
        np.testing.assert_allclose(actual, expected, atol=ATOL)


# --------------------------------------------------------------------------- lengths


@pytest.mark.parametrize(
    "make",
    [
        lambda: RelativePositionBias(2, position=LogBuckets(8, 20)),
        lambda: RelativePositionEmbedding(3, position=ClipPositions(2)),
        lambda: MultiScaleRelativePositionEmbedding(4, scales=(2, 6)),
    ],
)
def test_scalar_tensor_lengths_equal_int_lengths(rng, make):
    layer = randomize(make(), rng)
    q, k, offset = (ops.convert_to_tensor(n, dtype="int32") for n in (3, 8, 5))
    np.testing.assert_allclose(numpy(layer(q, k, offset=offset)), numpy(layer(3, 8, offset=5)))
    np.testing.assert_allclose(numpy(layer(np.int64(3), 8)), numpy(layer(3, 8)))


def test_traced_lengths_in_a_compiled_model(rng):
    inner = randomize(RelativePositionBias(2, position=LogBuckets(8, 20)), rng)
    inputs = keras.Input((None, 1))
    model = keras.Model(inputs, LengthsAdapter(inner, offset=2)(inputs))
    table = numpy(inner.embeddings)
    fn = index_fn("log", 20, 8, True)
    for length in (3, 10, 6):  # TensorFlow retraces with an unknown length
        out = model.predict(np.zeros((1, length, 1), "float32"), verbose=0)
        expected = ref.relative_position_bias(table, fn, length, length + 2, 2)
        np.testing.assert_allclose(out, expected, atol=ATOL)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # An input_signature with an unknown length makes the lengths symbolic tensors.
        adapter = LengthsAdapter(inner, offset=2)
        traced = tf.function(adapter.call, input_signature=[tf.TensorSpec((None, None, 1))])
        out = traced(np.zeros((1, 7, 1), "float32")).numpy()
        np.testing.assert_allclose(out, ref.relative_position_bias(table, fn, 7, 9, 2), atol=ATOL)


def test_symbolic_lengths_give_unknown_output_dims():
    layer = RelativePositionEmbedding(3)
    spec = layer.compute_output_spec(keras.KerasTensor((), dtype="int32"), 5)
    assert tuple(spec.shape) == (None, 5, 3)
    assert RelativePositionBias(4).compute_output_shape(None, 7) == (1, 4, None, 7)


# --------------------------------------------------------------------------- shared checks

LAYERS = {
    "bias_log": lambda: RelativePositionBias(2, position=LogBuckets(8, 20)),
    "bias_clip": lambda: RelativePositionBias(2, position=ClipPositions(3)),
    "embedding_clip": lambda: RelativePositionEmbedding(3, position=ClipPositions(2)),
    "embedding_piecewise": lambda: RelativePositionEmbedding(3, position=PiecewiseBuckets(6)),
    "embedding_named": lambda: RelativePositionEmbedding(3, position="irpe"),
    "multiscale_concat": lambda: MultiScaleRelativePositionEmbedding(
        4, scales=(2, 6), combine="concat"
    ),
    "multiscale_mean": lambda: MultiScaleRelativePositionEmbedding(4, scales=(3, 5)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_config_roundtrip(name):
    restored = layer_checks.check_config_roundtrip(LAYERS[name](), [3, 5], {"offset": 2})
    assert restored.built


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_save_load(name, tmp_path):
    x = np.zeros((2, 4, 1), "float32")
    layer_checks.check_save_load(LengthsAdapter(LAYERS[name](), offset=3), x, directory=tmp_path)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_training_step(name):
    x = np.zeros((2, 4, 1), "float32")
    layer_checks.check_training_step(LengthsAdapter(LAYERS[name](), offset=1), x)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_mixed_precision(name):
    layer = LAYERS[name]()
    expected = numpy(layer(4, 6, offset=2))
    outputs = layer_checks.check_mixed_precision(layer, [4, 6], {"offset": 2})
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"
    # The rebuilt layer has its own random tables; compare after copying ours in.
    rebuilt = type(layer).from_config({**layer.get_config(), "dtype": "mixed_bfloat16"})
    rebuilt(4, 6)
    rebuilt.set_weights(layer.get_weights())
    low = ops.convert_to_numpy(ops.cast(rebuilt(4, 6, offset=2), "float32"))
    np.testing.assert_allclose(low, expected, atol=BF16_ATOL)


def test_weights_exist_before_any_call_and_survive_set_weights(rng):
    layer = RelativePositionBias(2, position=LogBuckets(8, 20))
    table = layer.table()  # builds on demand
    assert layer.built and tuple(table.shape) == (8, 2)
    other = RelativePositionBias(2, position=LogBuckets(8, 20))
    randomize(layer, rng)
    other.build()
    other.set_weights(layer.get_weights())
    np.testing.assert_allclose(numpy(other(3, 3)), numpy(layer(3, 3)))


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "make, error, message",
    [
        (
            lambda: RelativePositionBias(0),
            ValueError,
            r"RelativePositionBias: `num_heads` must be an integer >= 1, got 0",
        ),
        (
            lambda: RelativePositionBias(2.0),
            TypeError,
            r"RelativePositionBias: `num_heads` must be an integer",
        ),
        (
            lambda: RelativePositionBias(2, position="linear"),
            ValueError,
            r"RelativePositionBias: `position` must be a PositionScheme, its config or one of "
            r"the registered names \(.*\), got 'linear'\.",
        ),
        (
            lambda: RelativePositionBias(2, position=LogBuckets(num_buckets=2)),
            ValueError,
            r"LogBuckets: `num_buckets` must be >= 4 for bidirectional .* got 2",
        ),
        (
            lambda: RelativePositionBias(2, position=LogBuckets(max_distance=-1)),
            ValueError,
            r"LogBuckets: `max_distance` must be an integer >= 0, got -1",
        ),
        (
            lambda: RelativePositionBias(2, position=LogBuckets(bidirectional=1)),
            TypeError,
            r"LogBuckets: `bidirectional` must be True or False, got 1",
        ),
        (
            lambda: RelativePositionEmbedding(4, position=ClipPositions(max_distance=-2)),
            ValueError,
            r"ClipPositions: `max_distance` must be an integer >= 0, got -2",
        ),
        (
            lambda: RelativePositionEmbedding(0),
            ValueError,
            r"RelativePositionEmbedding: `output_dim` must be an integer >= 1, got 0",
        ),
        (
            lambda: RelativePositionEmbedding(4, position=PiecewiseBuckets(num_buckets=1)),
            ValueError,
            r"PiecewiseBuckets: `num_buckets` must be an integer >= 2, got 1",
        ),
        (
            lambda: MultiScaleRelativePositionEmbedding(4, combine="max"),
            ValueError,
            r"MultiScaleRelativePositionEmbedding: `combine` must be one of 'mean', 'sum', "
            r"'concat', got 'max'",
        ),
        (
            lambda: MultiScaleRelativePositionEmbedding(4, scales=()),
            ValueError,
            r"MultiScaleRelativePositionEmbedding: `scales` must be a non-empty sequence",
        ),
        (
            lambda: MultiScaleRelativePositionEmbedding(4, scales=(5, 1)),
            ValueError,
            r"MultiScaleRelativePositionEmbedding: `scales` must be an integer >= 2, got 1",
        ),
        (
            lambda: MultiScaleRelativePositionEmbedding(4, scales=5),
            ValueError,
            r"MultiScaleRelativePositionEmbedding: `scales` must be a non-empty sequence .* got 5",
        ),
        (
            lambda: MultiScaleRelativePositionEmbedding(4, combine="concat"),
            ValueError,
            r"MultiScaleRelativePositionEmbedding: with combine='concat', `output_dim` must be "
            r"divisible by len\(scales\)=3, got 4",
        ),
    ],
)
def test_constructor_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        ((-1, 3), {}, ValueError, r"`query_length` must be an integer >= 0, got -1"),
        ((3, 2.5), {}, TypeError, r"`key_length` must be a non-negative integer or an "),
        ((3, 3), {"offset": 1.5}, TypeError, r"`offset` must be an integer"),
    ],
)
def test_call_errors(args, kwargs, error, message):
    layers = (
        RelativePositionBias(2),
        RelativePositionEmbedding(2),
        MultiScaleRelativePositionEmbedding(2),
    )
    for layer in layers:
        with pytest.raises(error, match=f"{type(layer).__name__}: {message}"):
            layer(*args, **kwargs)
