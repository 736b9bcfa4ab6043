"""Rotary embeddings inside attention: rotary alone (``relative=None``), every scaling and
xPos against the numpy references, decoding (dynamic NTK's cache of unrotated keys),
saving, and the causal-only rule."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import layers
from layer_checks import decode_step_by_step, relative_attention_weights
from reference import position_biases as bias_reference
from reference import rotary as rotary_reference
from reference.relative_attention import causal_mask, relative_attention

pytestmark = pytest.mark.contract

ATOL = 1e-5

# Each rotary variant with the reference's arguments (None: the attention has no rotary).
ROTARIES = {
    "none": None,
    "rope": layers.RotaryPositions(max_wavelength=100.0),
    "linear": layers.RotaryPositions(scaling="linear", scaling_factor=2.0),
    "ntk": layers.RotaryPositions(scaling="ntk", scaling_factor=4.0),
    "dynamic_ntk": layers.RotaryPositions(scaling="dynamic_ntk", training_length=3),
    "yarn": layers.RotaryPositions(scaling="yarn", scaling_factor=4.0, training_length=8),
    "xpos": layers.RotaryPositions(max_wavelength=100.0, xpos_scale_base=8.0),
}


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def reference_rotation(rotary, length):
    """``(q, k) -> (q, k)`` rotated by the numpy reference (queries and keys from 0)."""
    if rotary is None:
        return None
    config = rotary.get_config()
    xpos = config.pop("xpos_scale_base")

    def rotate(q, k):
        def positions(x):
            return np.arange(x.shape[1])

        q = rotary_reference.rotary(q, positions(q), "query", length, xpos, **config)
        k = rotary_reference.rotary(k, positions(k), "key", length, xpos, **config)
        return q, k

    return rotate


def built(rng, **arguments):
    layer = layers.MultiHeadRelativeAttention(2, 4, **arguments)
    x = rng.standard_normal((2, 6, 8)).astype("float32")
    layer(x, x, use_causal_mask=True)
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(tuple(weight.shape))).astype("float32"))
    return layer, x


@pytest.mark.parametrize("relative", ["keys_values", "keys", "bias", None])
@pytest.mark.parametrize("name", list(ROTARIES))
def test_every_rotary_with_every_relative_mode(name, relative, rng):
    # The matrix of rotary variants x relative modes (None: rotary alone, or NoPE).
    rotary = ROTARIES[name]
    layer, x = built(rng, relative=relative, max_distance=2, rotary=rotary)
    if relative is None:
        assert layer.relative_bias is None and layer.relative_keys is None
    output, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    weights = relative_attention_weights(layer)
    index = np.clip(np.arange(6)[None, :] - np.arange(6)[:, None], -2, 2) + 2
    expected, probabilities = relative_attention(
        x,
        x,
        None,
        weights,
        relative,
        index,
        mask=causal_mask(6, 6),
        rotate=reference_rotation(rotary, 6),
    )
    np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL, err_msg=name)
    np.testing.assert_allclose(to_numpy(scores), probabilities, atol=ATOL)


def test_rotary_with_a_computed_bias_matches_reference(rng):
    rotary = ROTARIES["yarn"]
    layer, x = built(rng, relative="bias", position=layers.ALiBi(), rotary=rotary)
    output = layer(x, x)  # bidirectional: ALiBi's symmetric form, YaRN on both sides
    bias = bias_reference.alibi(2, 6, 6)
    expected, _ = relative_attention(
        x,
        x,
        None,
        relative_attention_weights(layer),
        None,
        None,
        attention_bias=bias[None],
        rotate=reference_rotation(rotary, 6),
    )
    np.testing.assert_allclose(to_numpy(output), expected, atol=ATOL)


@pytest.mark.parametrize("name", ["rope", "yarn", "xpos"])
def test_decoding_equals_the_full_pass(name, rng):
    layer, x = built(rng, relative="keys", max_distance=2, rotary=ROTARIES[name])
    full = to_numpy(layer(x, x, use_causal_mask=True))
    for t, step in enumerate(decode_step_by_step(layer, x)[0]):
        np.testing.assert_allclose(step, full[:, t], atol=ATOL, err_msg=f"t={t}")


def test_dynamic_ntk_decodes_like_the_full_pass_over_each_prefix(rng):
    # s = max(1, length / 3) changes with every step beyond 3, so the cache keeps the keys
    # before rotation: step t equals the full pass over tokens 0..t at its last position.
    layer, x = built(rng, relative=None, rotary=ROTARIES["dynamic_ntk"])
    steps, cache = decode_step_by_step(layer, x)
    for t, step in enumerate(steps):
        prefix = to_numpy(layer(x[:, : t + 1], x[:, : t + 1], use_causal_mask=True))
        np.testing.assert_allclose(step, prefix[:, t], atol=ATOL, err_msg=f"t={t}")
    # The cached keys are the projected keys, not rotated ones.
    keys = to_numpy(layer.key_dense(x))
    np.testing.assert_allclose(to_numpy(cache)[:, 0], keys, atol=ATOL)


def test_xpos_needs_the_causal_mask(rng):
    layer, x = built(rng, relative=None, rotary=ROTARIES["xpos"])
    with pytest.raises(ValueError, match=r"rotary=RotaryPositions\(.*xpos_scale_base=8.0\) is "):
        layer(x, x)


def test_rotary_round_trips_through_keras_files(tmp_path, rng):
    inputs = keras.Input((None, 8))
    x = layers.RelativeTransformerDecoder(
        16, 2, relative=None, rotary=ROTARIES["yarn"], name="yarn"
    )(inputs)
    x = layers.RelativeTransformerEncoder(
        16, 2, relative="bias", position=layers.KERPLE(), rotary=ROTARIES["ntk"], name="ntk"
    )(x)
    x = layers.RelativeTransformerDecoder(16, 2, rotary_max_wavelength=50.0, name="older")(x)
    model = keras.Model(inputs, x)
    data = rng.standard_normal((2, 5, 8)).astype("float32")
    path = os.path.join(tmp_path, "rotary.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.get_layer("yarn").rotary == ROTARIES["yarn"]
    assert restored.get_layer("ntk").rotary == ROTARIES["ntk"]
    # The older argument still writes the config older releases wrote, and means plain RoPE.
    older = restored.get_layer("older")
    assert older.get_config()["rotary"] is None and older.rotary_max_wavelength == 50.0
    assert older.rotary == layers.RotaryPositions(max_wavelength=50.0)
    np.testing.assert_allclose(to_numpy(restored(data)), to_numpy(model(data)), atol=ATOL)


def test_rotary_max_wavelength_is_plain_rope(rng):
    old, x = built(rng, relative="bias", rotary_max_wavelength=100.0)
    new = layers.MultiHeadRelativeAttention(
        2, 4, relative="bias", rotary=layers.RotaryPositions(max_wavelength=100.0)
    )
    new(x, x)
    new.set_weights(old.get_weights())
    np.testing.assert_allclose(to_numpy(new(x, x)), to_numpy(old(x, x)), atol=ATOL)


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"rotary": "yarn"}, TypeError, r"`rotary` must be None or a RotaryPositions"),
        (
            {"rotary": layers.RotaryPositions(max_wavelength=10.0), "rotary_max_wavelength": 20.0},
            ValueError,
            r"pass either `rotary` or `rotary_max_wavelength`, not both",
        ),
        (
            {"key_dim": 3, "rotary": layers.RotaryPositions()},
            ValueError,
            r"even `key_dim`, got 3",
        ),
        ({"relative": "none"}, ValueError, r"`relative` must be one of .*None, got 'none'"),
    ],
)
def test_bad_arguments(arguments, error, message):
    arguments = {"key_dim": 4, **arguments}
    with pytest.raises(error, match=message):
        layers.MultiHeadRelativeAttention(2, **arguments)
