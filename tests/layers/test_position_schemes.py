"""Position schemes: every scheme x every relative mode against the numpy references,
serialisation, the registry of names, and the one way the layers take a position."""

from __future__ import annotations

import functools
import inspect

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from keras_posenc.layers import position_schemes
from layer_checks import relative_attention_weights
from reference import position_biases as bias_reference
from reference import relative_index as reference
from reference.relative_attention import causal_mask, relative_attention
from reference.relative_position_2d import relative_position_bias_2d

pytestmark = pytest.mark.contract

ATOL = 1e-5
MODES = position_schemes.RELATIVE_MODES

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


# --------------------------------------------------------------------------- the one way


LOOSE = ("bucketing", "max_distance", "num_buckets", "bidirectional", "rotary_max_wavelength")


@pytest.mark.neutral
def test_no_public_layer_takes_a_loose_position_argument():
    # The schemes keep their own arguments (LogBuckets(num_buckets=...) is the scheme), as
    # do the index functions they are built on; every layer and block says a position once.
    public = [getattr(layers, name) for name in layers.__all__]
    classes = [value for value in public if inspect.isclass(value)]
    found = [value for value in classes if issubclass(value, keras.layers.Layer)]
    assert len(found) >= 18 and layers.RelativeTransformerDecoder in found
    for layer in found:
        parameters = set(inspect.signature(layer).parameters)
        assert not parameters & set(LOOSE), f"{layer.__name__} takes {parameters & set(LOOSE)}"
    for block in (layers.MultiHeadRelativeAttention, layers.RelativeTransformerDecoder):
        assert {"position", "rotary"} <= set(inspect.signature(block).parameters)
    for table in (layers.RelativePositionBias, layers.RelativePositionEmbedding):
        assert "position" in inspect.signature(table).parameters


@pytest.mark.neutral
def test_registered_names_give_the_papers_schemes():
    get = position_schemes.get
    assert get("shaw") == get("clip") == layers.ClipPositions(max_distance=16)
    assert get("t5") == get("log") == layers.LogBuckets(32, 128, bidirectional=True)
    assert get("t5_decoder") == layers.LogBuckets(32, 128, bidirectional=False)
    assert get("irpe") == get("piecewise") == layers.PiecewiseBuckets()
    assert get("multiscale") == layers.MultiScaleBins()
    assert get("grid2d") == layers.Grid2DPositions()
    computed = {"alibi": layers.ALiBi, "kerple": layers.KERPLE, "fire": layers.FIRE}
    computed["continuous"] = layers.ContinuousBias
    for name, scheme in computed.items():
        assert get(name) == scheme()
    assert set(computed) | {"shaw", "t5", "irpe", "grid2d"} <= set(position_schemes.names())
    scheme = layers.LogBuckets(8, 10)
    assert get(scheme) is scheme
    assert get(keras.saving.serialize_keras_object(scheme)) == scheme


@pytest.mark.neutral
def test_unknown_names_and_other_values_are_refused():
    with pytest.raises(
        ValueError, match=r"registered names \('alibi', .*got 'tt5'\. Did you mean 't5'"
    ):
        position_schemes.get("tt5")
    with pytest.raises(ValueError, match=r"RelativePositionBias: `position` .* got 'Shaw'.*'shaw'"):
        layers.RelativePositionBias(2, position="Shaw")
    with pytest.raises(TypeError, match=r"MultiHeadRelativeAttention: `position` must be a Pos"):
        layers.MultiHeadRelativeAttention(2, 4, position=16)
    with pytest.raises(TypeError, match=r"RelativePositionEmbedding: `position` .* gives"):
        layers.RelativePositionEmbedding(
            2, position=keras.saving.serialize_keras_object(layers.RotaryPositions())
        )
    with pytest.raises(ValueError, match=r"does not support relative='keys'"):
        layers.RelativePositionEmbedding(2, position="alibi")
    with pytest.raises(ValueError, match=r"relative=None adds no relative term"):
        layers.MultiHeadRelativeAttention(2, 4, relative=None, position="t5")


@pytest.mark.neutral
def test_a_name_round_trips_through_the_config():
    for layer in (
        layers.MultiHeadRelativeAttention(2, 4, relative="bias", position="t5_decoder"),
        layers.RelativeTransformerEncoder(8, 2, relative="keys", position="irpe"),
        layers.RelativePositionBias(2, position="alibi"),
        layers.RelativePositionEmbedding(3),
    ):
        config = layer.get_config()
        assert config["position"]["class_name"] == type(layer.position).__name__
        restored = type(layer).from_config(config)
        assert restored.position == layer.position and restored.get_config() == config
    assert layers.RelativePositionBias(2).position == layers.LogBuckets()  # "t5"
    none = layers.MultiHeadRelativeAttention(2, 4, relative=None)
    assert none.position is None and none.get_config()["position"] is None
    assert layers.RelativePositionBias2D(2, position="grid2d").size == (7, 7)


@pytest.mark.neutral
def test_register_scheme():
    name = "test_clip_3"
    position_schemes.register_scheme(name, functools.partial(layers.ClipPositions, 3))
    try:
        assert name in position_schemes.names()
        layer = layers.RelativePositionEmbedding(4, position=name)
        assert layer.position == layers.ClipPositions(3) and layer.table_size == 7
        with pytest.raises(ValueError, match=r"register_scheme: `name` 'test_clip_3' is regis"):
            position_schemes.register_scheme(name, layers.ClipPositions)
    finally:
        del position_schemes._REGISTRY[name]
    with pytest.raises(ValueError, match=r"register_scheme: `name` must be a lower-case"):
        position_schemes.register_scheme("Shaw 2", layers.ClipPositions)
    with pytest.raises(TypeError, match=r"register_scheme: `factory` must be"):
        position_schemes.register_scheme("test_not_callable", 3)
    position_schemes.register_scheme("test_not_a_scheme", lambda: 3)
    try:
        with pytest.raises(TypeError, match=r"got 'test_not_a_scheme', which gives 3"):
            layers.RelativePositionBias(2, position="test_not_a_scheme")
    finally:
        del position_schemes._REGISTRY["test_not_a_scheme"]
