"""Position schemes: every scheme x every relative mode against the numpy references,
serialisation, the loose arguments, and ``.keras`` files written before the scheme type."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from keras_posenc.layers import position_schemes, relative_index
from layer_checks import relative_attention_weights
from reference import position_biases as bias_reference
from reference import relative_index as reference
from reference.relative_attention import causal_mask, relative_attention
from reference.relative_position_2d import relative_position_bias_2d

pytestmark = pytest.mark.contract

ATOL = 1e-5
FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "position_schemes")
MODES = ("keys_values", "keys", "bias")

# Every scheme with its numpy reference (r -> table row); a new scheme adds one entry.
SCHEMES = {
    "clip": (layers.ClipPositions(max_distance=2), lambda r: reference.clip_index(r, 2)),
    "log": (
        layers.LogBuckets(num_buckets=8, max_distance=10),
        lambda r: reference.t5_relative_position_bucket(r, True, 8, 10),
    ),
    "log_causal": (
        layers.LogBuckets(num_buckets=6, max_distance=10, bidirectional=False),
        lambda r: reference.t5_relative_position_bucket(r, False, 6, 10),
    ),
    "piecewise": (
        layers.PiecewiseBuckets(num_buckets=6),
        lambda r: reference.piecewise_index(r, 6),
    ),
    "multiscale": (layers.MultiScaleBins(scale=4), lambda r: reference.multiscale_index(r, 4)),
    "grid2d": (layers.Grid2DPositions(size=(2, 3)), None),
}

# The computed biases (`position_biases`): their reference is the bias itself.
COMPUTED = {
    "alibi": layers.ALiBi(),
    "kerple_log": layers.KERPLE("log"),
    "kerple_power": layers.KERPLE("power"),
    "fire": layers.FIRE(hidden_dim=4, initial_threshold=2.0),
    "continuous": layers.ContinuousBias(hidden_dim=4),
    "continuous_swin": layers.ContinuousBias(hidden_dim=4, mode="swin", window=5),
}


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SCHEMES) + list(COMPUTED))
def test_every_scheme_and_mode(name, mode, rng):
    if name in COMPUTED:
        scheme, index_reference = COMPUTED[name], None
    else:
        scheme, index_reference = SCHEMES[name]
    if mode not in scheme.modes:
        with pytest.raises(ValueError, match=r"MultiHeadRelativeAttention.*does not support "):
            layers.MultiHeadRelativeAttention(2, 3, relative=mode, position=scheme)
        return
    assert index_reference is not None or scheme.computed, f"{name} needs a numpy reference"
    layer = layers.MultiHeadRelativeAttention(2, 3, relative=mode, position=scheme)
    query, value = rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 7, 5))
    query, value = query.astype("float32"), value.astype("float32")
    causal = scheme.causal_only  # FIRE: keys after the query have no bias
    layer(query, value, use_causal_mask=causal)
    for weight in layer.weights:  # random values everywhere, tables included
        values = 0.5 * rng.standard_normal(tuple(weight.shape))
        if weight.name in ("r1", "r2", "c", "threshold"):  # positive by definition
            values = np.abs(values) + 0.1
        weight.assign(values.astype("float32"))
    mask = rng.random((2, 4, 7)) > 0.3
    output, scores = layer(
        query, value, attention_mask=mask, return_attention_scores=True, use_causal_mask=causal
    )
    if causal:
        mask = np.logical_and(mask, causal_mask(4, 7))
    if scheme.computed:
        weights = {
            name.removeprefix("mlp_"): to_numpy(weight)
            for name, weight in layer.relative_bias.bias_weights.items()
        }
        bias = bias_reference.scheme_bias(
            type(scheme).__name__, scheme.get_config(), weights, 2, 4, 7
        )
        expected, probabilities = relative_attention(
            query,
            value,
            None,
            relative_attention_weights(layer),
            None,
            None,
            mask=mask,
            attention_bias=bias[None],
        )
    else:
        index = index_reference(reference.relative_positions(4, 7))
        expected, probabilities = relative_attention(
            query, value, None, relative_attention_weights(layer), mode, index, mask=mask
        )
    np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL, err_msg=f"{name} {mode}")
    np.testing.assert_allclose(to_numpy(scores), probabilities, atol=ATOL)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_schemes_serialise_and_index_like_the_reference(name):
    scheme, index_reference = SCHEMES[name]
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(scheme))
    assert restored == scheme and restored is not scheme
    if index_reference is None:  # the 2D table: pairs of grid cells, row-major
        cells = [(i, j) for i in range(2) for j in range(3)]
        expected = [[(a - c + 1) * 5 + (b - d + 2) for c, d in cells] for a, b in cells]
        np.testing.assert_array_equal(scheme.index_matrix(), expected)
        assert scheme.table_size == 3 * 5 and not scheme.contiguous
        return
    r = np.arange(-40, 41)
    np.testing.assert_array_equal(ops.convert_to_numpy(scheme.index(r)), index_reference(r))
    assert int(np.max(index_reference(r))) == scheme.table_size - 1
    assert scheme.contiguous


@pytest.mark.parametrize("name", list(COMPUTED))
def test_computed_schemes_serialise(name):
    scheme = COMPUTED[name]
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(scheme))
    assert restored == scheme and restored is not scheme and hash(restored) == hash(scheme)
    assert scheme.modes == ("bias",) and scheme.computed
    assert scheme.toeplitz is not scheme.causal_only  # FIRE alone depends on i and is causal


def test_loose_arguments_build_the_same_scheme():
    layer = layers.MultiHeadRelativeAttention(
        2, 4, relative="bias", bucketing="log", num_buckets=8, max_distance=10
    )
    assert layer.position == layers.LogBuckets(num_buckets=8, max_distance=10)
    assert layer.get_config()["position"] is None  # the config older releases wrote
    given = layers.RelativeTransformerDecoder(
        8, 2, relative="bias", position=layers.LogBuckets(8, 10, bidirectional=False)
    )
    config = given.get_config()
    assert config["bucketing"] == "log" and config["num_buckets"] == 8
    restored = layers.RelativeTransformerDecoder.from_config(config)
    assert restored.position == given.position
    with pytest.raises(ValueError, match=r"either `position` or the loose `num_buckets`"):
        layers.MultiHeadRelativeAttention(2, 4, num_buckets=9, position=layers.LogBuckets(8, 10))
    with pytest.raises(TypeError, match=r"MultiHeadRelativeAttention: `position` must be None"):
        layers.MultiHeadRelativeAttention(2, 4, position="log")


def test_scheme_arguments_are_checked():
    with pytest.raises(ValueError, match=r"LogBuckets: `max_distance` must be > 2"):
        layers.LogBuckets(num_buckets=8, max_distance=2)
    with pytest.raises(TypeError, match=r"ClipPositions: `max_distance` must be an integer"):
        layers.ClipPositions(max_distance=2.5)
    with pytest.raises(
        ValueError, match=r"PiecewiseBuckets: `num_buckets` must be an integer >= 2"
    ):
        layers.PiecewiseBuckets(num_buckets=1)


class _Alternating(position_schemes.PositionScheme):
    """Even and odd distances in different rows: rows that are not intervals."""

    bucketing = "alternating"

    @classmethod
    def _check(cls, caller):
        return {}

    def index(self, r):
        return ops.cast(ops.mod(ops.convert_to_tensor(r), 2), "int32")

    @property
    def table_size(self):
        return 2

    def _saturation(self):
        return 4


def test_contiguity_is_a_checked_property():
    scheme = _Alternating()
    assert not scheme.contiguous
    layer = layers.MultiHeadRelativeAttention(2, 4, relative="keys", position=scheme)
    assert layer.relative_keys.table_size == 2
    with pytest.raises(ValueError, match=r"'keys_values' needs every table row to cover"):
        layers.MultiHeadRelativeAttention(2, 4, relative="keys_values", position=scheme)


def test_keras_file_written_before_the_scheme_type_loads():
    model = keras.models.load_model(os.path.join(FIXTURES, "relative_layers.keras"))
    data = np.load(os.path.join(FIXTURES, "relative_layers.npz"))
    np.testing.assert_allclose(to_numpy(model(data["x"])), data["y"], atol=ATOL)
    assert model.get_layer("t5").position == layers.LogBuckets(8, 10)
    assert model.get_layer("irpe").position == layers.PiecewiseBuckets(6)
    assert model.get_layer("decoder").position == layers.LogBuckets(8, 10, bidirectional=False)


def test_the_2d_bias_takes_the_grid_scheme(rng):
    grid = layers.Grid2DPositions(size=(2, 3))
    layer = layers.RelativePositionBias2D(num_heads=2, position=grid)
    assert layer.size == (2, 3) and layer.position == grid
    table = rng.normal(size=(2, 3, 5)).astype("float32")
    layer.table.assign(table)
    np.testing.assert_allclose(to_numpy(layer()), relative_position_bias_2d(table, 2, 3), atol=ATOL)
    config = layer.get_config()
    restored = layers.RelativePositionBias2D.from_config(config)
    assert restored.position == grid and restored.size == (2, 3)
    # Without `position` the config is the one older releases wrote, plus position=None.
    assert layers.RelativePositionBias2D(2, size=(2, 3)).get_config()["position"] is None
    with pytest.raises(TypeError, match=r"RelativePositionBias2D '.*': `position` must be None"):
        layers.RelativePositionBias2D(2, position=layers.ClipPositions(3))
    with pytest.raises(ValueError, match=r"either `position` or `size`, not both"):
        layers.RelativePositionBias2D(2, size=(4, 4), position=grid)


def test_one_allow_list_of_scheme_names():
    assert relative_index.BUCKETINGS == tuple(position_schemes.BY_NAME)
    assert set(position_schemes.SCHEMES) < set(position_schemes.BY_NAME)
    for name, scheme in position_schemes.BY_NAME.items():
        assert scheme.bucketing == name
    with pytest.raises(ValueError, match=r"bucket_index: `bucketing` must be one of 'clip'"):
        relative_index.bucket_index([0], "grid2d")
