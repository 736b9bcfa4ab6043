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
    "llama3": layers.RotaryPositions(scaling="llama3", scaling_factor=4.0, training_length=8),
    # Length 6 > 3: the long factors in a full pass; a decoding step switches at 4.
    "longrope": layers.RotaryPositions(
        scaling="longrope",
        scaling_factor=2.0,
        training_length=3,
        short_factor=(1.0, 1.5),
        long_factor=(1.0, 4.0),
    ),
    "partial_interleaved": layers.RotaryPositions(
        max_wavelength=100.0, partial_rotary_factor=0.5, interleaved=True
    ),
}
# The matrix of variants x relative modes runs its new variants on the matrix backend.
MATRIX_ONLY = ("llama3", "longrope", "partial_interleaved")


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

        turned = rotary_reference.rotary(q, positions(q), "query", length, None, **config)
        q = rotary_reference.rotary(q, positions(q), "query", length, xpos, **config)
        k = rotary_reference.rotary(k, positions(k), "key", length, xpos, **config)
        return q, k, turned  # the relative key term reads the query without xPos' factor

    return rotate


def built(rng, **arguments):
    layer = layers.MultiHeadRelativeAttention(2, 4, **arguments)
    x = rng.standard_normal((2, 6, 8)).astype("float32")
    layer(x, x, use_causal_mask=True)
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(tuple(weight.shape))).astype("float32"))
    return layer, x


@pytest.mark.parametrize("relative", ["keys_values", "keys", "bias", None])
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.matrix) if n in MATRIX_ONLY else n for n in ROTARIES],
)
def test_every_rotary_with_every_relative_mode(name, relative, rng):
    # The matrix of rotary variants x relative modes (None: rotary alone, or NoPE).
    rotary = ROTARIES[name]
    position = None if relative is None else layers.ClipPositions(2)
    layer, x = built(rng, relative=relative, position=position, rotary=rotary)
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


@pytest.mark.parametrize("name", ["rope", "yarn", "xpos", "llama3", "partial_interleaved"])
def test_decoding_equals_the_full_pass(name, rng):
    layer, x = built(rng, relative="keys", position=layers.ClipPositions(2), rotary=ROTARIES[name])
    full = to_numpy(layer(x, x, use_causal_mask=True))
    for t, step in enumerate(decode_step_by_step(layer, x)[0]):
        np.testing.assert_allclose(step, full[:, t], atol=ATOL, err_msg=f"t={t}")


@pytest.mark.parametrize("name", ["dynamic_ntk", "longrope"])
def test_dynamic_scalings_decode_like_the_full_pass_over_each_prefix(name, rng):
    # dynamic NTK's s = max(1, length / 3) changes with every step beyond 3, and LongRoPE
    # switches to its long factors at length 4, so the cache keeps the keys before
    # rotation: step t equals the full pass over tokens 0..t at its last position.
    layer, x = built(rng, relative=None, rotary=ROTARIES[name])
    steps, cache = decode_step_by_step(layer, x)
    for t, step in enumerate(steps):
        prefix = to_numpy(layer(x[:, : t + 1], x[:, : t + 1], use_causal_mask=True))
        np.testing.assert_allclose(step, prefix[:, t], atol=ATOL, err_msg=f"t={t}")
    # The cached keys are the projected keys, not rotated ones.
    keys = to_numpy(layer.key_dense(x))
    np.testing.assert_allclose(to_numpy(cache)[:, 0], keys, atol=ATOL)


@pytest.mark.parametrize(
    "dtype, position, atol", [("float32", 40_000, ATOL), ("float16", 5_000, 2e-2)]
)
def test_xpos_decoding_far_out_stays_finite_and_exact(dtype, position, atol, rng):
    """Issue 44: with xPos' key factors taken from position 0, keys overflowed float32
    beyond about 36,000 positions (float16 beyond 4,500) and such a step gave NaN. A few
    steps are written just before ``position`` into a cache of ``position + 1`` rows (the
    rows never written are masked) and the last step is compared with the reference."""
    rotary = layers.RotaryPositions(xpos_scale_base=512.0)
    layer = layers.MultiHeadRelativeAttention(1, 4, relative=None, rotary=rotary, dtype=dtype)
    x = rng.standard_normal((1, 6, 8)).astype("float32")
    layer(x, x, use_causal_mask=True)
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(tuple(weight.shape))).astype(dtype))
    written = np.arange(position - 5, position + 1)
    cache = np.zeros((1, 2, position + 1, 1, 4), dtype)
    mask = np.zeros((1, 1, position + 1), bool)
    for t, at in enumerate(written):
        mask[0, 0, at] = True
        step, cache = layer(
            x[:, t : t + 1].astype(dtype),
            x[:, t : t + 1].astype(dtype),
            cache=cache,
            cache_update_index=at,
            attention_mask=mask,
            use_causal_mask=True,
        )
    got = to_numpy(step)
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(to_numpy(cache)))

    def rotate(q, k):  # float64, factors from position 0: e^(1.25 * 40000 / 512) is finite
        q = rotary_reference.rotary(q, written[-1:], "query", xpos_scale_base=512.0)
        return q, rotary_reference.rotary(k, written, "key", xpos_scale_base=512.0)

    weights = relative_attention_weights(layer)
    want, _ = relative_attention(
        x[:, -1:].astype(dtype), x.astype(dtype), None, weights, None, None, rotate=rotate
    )
    np.testing.assert_allclose(got, want, atol=atol)


def test_xpos_needs_the_causal_mask(rng):
    layer, x = built(rng, relative=None, rotary=ROTARIES["xpos"])
    with pytest.raises(ValueError, match=r"rotary=RotaryPositions\(.*xpos_scale_base=8.0\) is "):
        layer(x, x)


# Head size 8 (one head), half of it turning in interleaved pairs: two LongRoPE factors a set.
LONGROPE = layers.RotaryPositions(
    scaling="longrope",
    scaling_factor=2.0,
    training_length=3,
    short_factor=(1.0, 1.5),
    long_factor=(1.0, 4.0),
    partial_rotary_factor=0.5,
    interleaved=True,
)


def test_rotary_round_trips_through_keras_files(tmp_path, rng):
    inputs = keras.Input((None, 8))
    x = layers.RelativeTransformerDecoder(
        16, 2, relative=None, rotary=ROTARIES["yarn"], name="yarn"
    )(inputs)
    x = layers.RelativeTransformerEncoder(
        16, 2, relative="bias", position=layers.KERPLE(), rotary=ROTARIES["ntk"], name="ntk"
    )(x)
    plain = layers.RotaryPositions(max_wavelength=50.0)
    x = layers.RelativeTransformerDecoder(16, 2, rotary=plain, name="plain")(x)
    x = layers.RelativeTransformerDecoder(16, 1, relative=None, rotary=LONGROPE, name="long")(x)
    model = keras.Model(inputs, x)
    data = rng.standard_normal((2, 5, 8)).astype("float32")
    path = os.path.join(tmp_path, "rotary.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert restored.get_layer("yarn").rotary == ROTARIES["yarn"]
    assert restored.get_layer("ntk").rotary == ROTARIES["ntk"]
    assert restored.get_layer("long").rotary == LONGROPE  # its factors: tuples again
    assert restored.get_layer("plain").rotary == plain
    np.testing.assert_allclose(to_numpy(restored(data)), to_numpy(model(data)), atol=ATOL)


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"rotary": "yarn"}, TypeError, r"`rotary` must be None or a RotaryPositions"),
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
