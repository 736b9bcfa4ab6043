"""Every public layer starts with distinct weights: no two trainable weights of the same
shape are equal at initialisation (constant-initialised biases, norms and layer scales
aside), with default initializers and with a seeded one.

A sublayer gets its own initializer (``layers._initializers.sublayer_initializer``):
an unseeded Keras initializer instance repeats its values, and a plain clone of a
seeded one repeats its seed. The zoo models' small variants get the same check in
``tests/test_export_zoo.py`` (large stage).
"""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest

import layer_checks
from keras_posenc import layers
from keras_posenc.layers._initializers import sublayer_initializer

pytestmark = pytest.mark.contract


def _sequence(width: int = 8, length: int = 5) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, length, width)).astype("float32")


def _image(channels: int = 8) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 4, 4, channels)).astype("float32")


# Each public layer class: (a factory taking the layer's keyword arguments, a function that
# builds it by calling it on small inputs). Every class in keras_posenc.layers must be
# listed (see test_every_public_layer_is_covered). Variants of one class get their own key.
def _call(layer, *args, **kwargs):
    layer(*args, **kwargs)
    return layer


CASES = {
    "ConvS2SAttention": (
        lambda **kw: layers.ConvS2SAttention(8, 8, **kw),
        lambda layer: _call(layer, _sequence(8), _sequence(8), (_sequence(8), _sequence(8))),
    ),
    "GLUConv1D": (
        lambda **kw: layers.GLUConv1D(8, 3, **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "GradMultiply": (
        lambda **kw: layers.GradMultiply(0.5),
        lambda layer: _call(layer, _sequence()),
    ),
    "DecoderBlock": (
        lambda **kw: layers.DecoderBlock(16, 2, rotary=layers.RotaryPositions(), **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "ContextualPositionAttention": (
        lambda **kw: layers.ContextualPositionAttention(2, 4, **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "DisentangledSelfAttention": (
        lambda **kw: layers.DisentangledSelfAttention(
            2, 4, position=layers.DebertaBuckets(4, 8), **kw
        ),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "DisentangledSelfAttention/separate": (
        lambda **kw: layers.DisentangledSelfAttention(
            2, 4, position=layers.DebertaBuckets(4, 8), share_position_projections=False, **kw
        ),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "MBConv": (lambda **kw: layers.MBConv(8), lambda layer: _call(layer, _image(8))),
    # Widening: the depthwise conv's two outputs per channel, the shortcut's projection.
    "ConvNeXtBlock": (
        lambda **kw: layers.ConvNeXtBlock(16, strides=2),
        lambda layer: _call(layer, _image(8)),
    ),
    "MUSEAttention": (
        lambda **kw: layers.MUSEAttention(2, 4, **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "MUSEAttention/dynamic": (
        lambda **kw: layers.MUSEAttention(2, 4, conv="dynamic", **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "MUSEDecoderLayer": (
        lambda **kw: layers.MUSEDecoderLayer(16, 2, **kw),
        lambda layer: _call(layer, _sequence(8), _sequence(8)),
    ),
    "MUSEEncoderLayer": (
        lambda **kw: layers.MUSEEncoderLayer(16, 2, **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "MultiHeadRelativeAttention": (
        lambda **kw: layers.MultiHeadRelativeAttention(2, 4, **kw),
        lambda layer: _call(layer, _sequence(8), _sequence(8)),
    ),
    "MultiHeadRelativeAttention/bias": (
        lambda **kw: layers.MultiHeadRelativeAttention(2, 4, relative="bias", **kw),
        lambda layer: _call(layer, _sequence(8), _sequence(8)),
    ),
    "MultiScaleRelativePositionEmbedding": (
        lambda **kw: layers.MultiScaleRelativePositionEmbedding(4, scales=(4, 4), **kw),
        lambda layer: _call(layer, 5, 5),
    ),
    "RelativePositionBias": (
        lambda **kw: layers.RelativePositionBias(2, **kw),
        lambda layer: _call(layer, 5, 5),
    ),
    "RelativePositionBias2D": (
        lambda **kw: layers.RelativePositionBias2D(2, (3, 3), **kw),
        lambda layer: _call(layer),
    ),
    # The computed biases' own weights (position_biases): KERPLE's r1 and r2 have one
    # shape, FIRE's and the continuous bias's MLPs have a kernel each.
    "RelativePositionBias/kerple": (
        lambda **kw: layers.RelativePositionBias(2, position=layers.KERPLE("power")),
        lambda layer: _call(layer, 5, 5),
    ),
    "RelativePositionBias/fire": (
        lambda **kw: layers.RelativePositionBias(2, position=layers.FIRE(hidden_dim=2)),
        lambda layer: _call(layer, 5, 5),
    ),
    "RelativePositionBias/continuous": (
        lambda **kw: layers.RelativePositionBias(2, position=layers.ContinuousBias(2)),
        lambda layer: _call(layer, 5, 5),
    ),
    "ContinuousPositionBias2D": (
        lambda **kw: layers.ContinuousPositionBias2D(2, (3, 3), hidden_dim=2),
        lambda layer: _call(layer),
    ),
    "RelativePositionEmbedding": (
        lambda **kw: layers.RelativePositionEmbedding(4, **kw),
        lambda layer: _call(layer, 5, 5),
    ),
    "RelativeTransformerBlock2D": (
        lambda **kw: layers.RelativeTransformerBlock2D(8, head_dim=4),
        lambda layer: _call(layer, _image(8)),
    ),
    "RelativeTransformerBlock2D/mlp": (
        lambda **kw: layers.RelativeTransformerBlock2D(8, head_dim=4, position_bias="mlp"),
        lambda layer: _call(layer, _image(8)),
    ),
    "RelativeTransformerBlock2D/rotary_mixed": (
        lambda **kw: layers.RelativeTransformerBlock2D(
            8, head_dim=4, rotary=layers.RotaryPositions2D(kind="mixed"), position_bias=None
        ),
        lambda layer: _call(layer, _image(8)),
    ),
    "RelativeTransformerDecoder": (
        lambda **kw: layers.RelativeTransformerDecoder(intermediate_dim=16, num_heads=2, **kw),
        lambda layer: _call(layer, _sequence(8), _sequence(8)),
    ),
    "RelativeTransformerEncoder": (
        lambda **kw: layers.RelativeTransformerEncoder(intermediate_dim=16, num_heads=2, **kw),
        lambda layer: _call(layer, _sequence(8)),
    ),
    "SpatialPadding2D": (
        lambda **kw: layers.SpatialPadding2D(1),
        lambda layer: _call(layer, _image()),
    ),
    "SqueezeExcite": (lambda **kw: layers.SqueezeExcite(2), lambda layer: _call(layer, _image(8))),
}
# Layers with a user-facing initializer argument, and its name: they get the seeded check.
SEEDED = {
    "ConvS2SAttention": "kernel_initializer",
    "DecoderBlock": "kernel_initializer",
    "ContextualPositionAttention": "kernel_initializer",
    "DisentangledSelfAttention": "kernel_initializer",
    "DisentangledSelfAttention/separate": "kernel_initializer",
    "GLUConv1D": "kernel_initializer",
    "MUSEAttention": "kernel_initializer",
    "MUSEAttention/dynamic": "kernel_initializer",
    "MUSEDecoderLayer": "kernel_initializer",
    "MUSEEncoderLayer": "kernel_initializer",
    "MultiHeadRelativeAttention": "kernel_initializer",
    "MultiHeadRelativeAttention/bias": "kernel_initializer",
    "MultiScaleRelativePositionEmbedding": "embeddings_initializer",
    "RelativePositionBias": "embeddings_initializer",
    "RelativePositionBias2D": "embeddings_initializer",
    # Unused by the computed biases (their schemes draw their own weights): still distinct.
    "RelativePositionBias/kerple": "embeddings_initializer",
    "RelativePositionBias/fire": "embeddings_initializer",
    "RelativePositionBias/continuous": "embeddings_initializer",
    "RelativePositionEmbedding": "embeddings_initializer",
    "RelativeTransformerDecoder": "kernel_initializer",
    "RelativeTransformerEncoder": "kernel_initializer",
}


def test_every_public_layer_is_covered():
    public = {
        name
        for name, value in vars(layers).items()
        if inspect.isclass(value) and issubclass(value, keras.layers.Layer)
    }
    covered = {key.split("/")[0] for key in CASES}
    assert public == covered, (
        f"missing: {sorted(public - covered)}, extra: {sorted(covered - public)}"
    )


def test_every_layer_with_an_initializer_argument_gets_the_seeded_check():
    expected = set()
    for key in CASES:
        cls = getattr(layers, key.split("/")[0])
        arguments = inspect.signature(cls.__init__).parameters
        if any(name.endswith("initializer") and name != "bias_initializer" for name in arguments):
            expected.add(key)
    assert expected == set(SEEDED)


@pytest.mark.parametrize("key", sorted(CASES))
def test_weights_start_distinct(key):
    make, build = CASES[key]
    layer_checks.assert_distinct_initial_weights(build(make()))


@pytest.mark.parametrize("key", sorted(SEEDED))
def test_weights_start_distinct_with_a_seeded_initializer(key):
    make, build = CASES[key]
    initializer = keras.initializers.RandomNormal(stddev=0.5, seed=7)
    bias = keras.initializers.RandomUniform(seed=7)
    kwargs = {SEEDED[key]: initializer}
    if "bias_initializer" in inspect.signature(getattr(layers, key.split("/")[0])).parameters:
        kwargs["bias_initializer"] = bias
    layer_checks.assert_distinct_initial_weights(build(make(**kwargs)))


def test_a_seeded_layer_is_reproducible():
    def weights():
        layer = layers.MultiHeadRelativeAttention(
            2, 4, kernel_initializer=keras.initializers.GlorotUniform(seed=3)
        )
        layer(_sequence(8), _sequence(8))
        # The relative table has its own (unseeded) embeddings_initializer.
        kernels = [w for w in layer.trainable_weights if w.name == "kernel"]
        assert len(kernels) == 4
        return [keras.ops.convert_to_numpy(w) for w in kernels]

    first, second = weights(), weights()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_sublayer_initializer_copies():
    unseeded = keras.initializers.GlorotUniform()
    seeded = keras.initializers.GlorotUniform(seed=5)
    generator = keras.initializers.GlorotUniform(seed=keras.random.SeedGenerator(5))
    zeros = keras.initializers.Zeros()
    assert sublayer_initializer(unseeded, "a") is not unseeded
    assert sublayer_initializer(seeded, "a").get_config()["seed"] != 5
    assert (
        sublayer_initializer(seeded, "a").get_config()
        == sublayer_initializer(seeded, "a").get_config()
    )
    assert (
        sublayer_initializer(seeded, "a").get_config()["seed"]
        != sublayer_initializer(seeded, "b").get_config()["seed"]
    )
    assert sublayer_initializer(generator, "a") is generator
    assert sublayer_initializer(zeros, "a") is zeros
    assert sublayer_initializer(None, "a") is None
