"""RotaryPositions: every scaling and xPos against the numpy reference, keras_hub's
RotaryEmbedding where ours delegates to it (and where keras_hub's scalings differ), the
relative property, traced calls with a symbolic start and length and an unknown sequence
length, bfloat16, serialisation and the argument errors."""

from __future__ import annotations

import copy
import inspect
import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import backend
from keras_posenc.backend import torch_trace
from keras_posenc.layers.rotary import RotaryPositions
from reference import rotary as reference

pytestmark = pytest.mark.contract

ATOL = 1e-5
BATCH, SEQUENCE, HEADS, HEAD_DIM = 2, 7, 3, 8
START = 5

# name: (arguments, length). d = 8, base 10000: theta_k = 1, 0.1, 0.01, 0.001.
CASES = {
    "plain": ({}, None),
    "plain_base_500": ({"max_wavelength": 500.0}, None),
    "linear": ({"scaling": "linear", "scaling_factor": 2.5}, None),
    "ntk": ({"scaling": "ntk", "scaling_factor": 4.0}, None),
    # s = max(1, 12 / 16) = 1: plain RoPE; then s = 40 / 16 = 2.5.
    "dynamic_ntk_short": ({"scaling": "dynamic_ntk", "training_length": 16}, 12),
    "dynamic_ntk_long": ({"scaling": "dynamic_ntk", "training_length": 16}, 40),
    # r_k = 10.2, 1.02, 0.10, 0.01: gamma_k = 0.30, 0.0006, 0, 0.
    "yarn": ({"scaling": "yarn", "scaling_factor": 4.0, "training_length": 64}, None),
    # r_k = 31.8, 3.18, 0.32, 0.03: gamma_k = 1, 0.17, 0, 0 (every part of the ramp).
    "yarn_alpha_beta": (
        {
            "scaling": "yarn",
            "scaling_factor": 3.0,
            "training_length": 200,
            "yarn_alpha": 0.5,
            "yarn_beta": 16.0,
        },
        None,
    ),
    # The paper's ramp, linear in r_k: gamma_k = 1, 0.17, 0, 0 (every part of the ramp).
    "yarn_paper": (
        {
            "scaling": "yarn",
            "scaling_factor": 3.0,
            "training_length": 200,
            "yarn_convention": "paper",
            "yarn_alpha": 0.5,
            "yarn_beta": 16.0,
        },
        None,
    ),
    # s' = 2 * 40 / 16 - 1 = 4.
    "dynamic_ntk_factor": (
        {"scaling": "dynamic_ntk", "scaling_factor": 2.0, "training_length": 16},
        40,
    ),
    # Wavelengths 6.3, 63, 628, 6283 against 64 / 4 and 64 / 1: kept, ramped, divided twice.
    "llama3": ({"scaling": "llama3", "scaling_factor": 4.0, "training_length": 64}, None),
    # The short factors up to the training length (16), the long ones after.
    "longrope_short": (
        {
            "scaling": "longrope",
            "scaling_factor": 4.0,
            "training_length": 16,
            "short_factor": (1.0, 1.1, 1.3, 1.5),
            "long_factor": (1.0, 2.0, 5.0, 9.0),
        },
        12,
    ),
    "longrope_long": (
        {
            "scaling": "longrope",
            "scaling_factor": 4.0,
            "training_length": 16,
            "short_factor": (1.0, 1.1, 1.3, 1.5),
            "long_factor": (1.0, 2.0, 5.0, 9.0),
            "attention_factor": 1.2,
        },
        40,
    ),
    # Half of each head turns (4 of 8 dimensions), through keras_hub; then interleaved.
    "partial": ({"partial_rotary_factor": 0.5}, None),
    "partial_interleaved_ntk": (
        {
            "partial_rotary_factor": 0.5,
            "interleaved": True,
            "scaling": "ntk",
            "scaling_factor": 2.0,
        },
        None,
    ),
    "xpos": ({"xpos_scale_base": 32.0}, None),
    "xpos_linear": ({"xpos_scale_base": 16.0, "scaling": "linear", "scaling_factor": 2.0}, None),
    "xpos_dynamic_ntk": (
        {"xpos_scale_base": 24.0, "scaling": "dynamic_ntk", "training_length": 16},
        40,
    ),
    "xpos_yarn": (
        {"xpos_scale_base": 32.0, "scaling": "yarn", "scaling_factor": 4.0, "training_length": 64},
        None,
    ),
    "xpos_interleaved": ({"xpos_scale_base": 16.0, "interleaved": True}, None),
}


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def inputs(rng, sequence=SEQUENCE, dtype="float32"):
    return rng.standard_normal((BATCH, sequence, HEADS, HEAD_DIM)).astype(dtype)


def expected(arguments, x, positions, role, length):
    arguments = dict(arguments)
    xpos = arguments.pop("xpos_scale_base", None)
    return reference.rotary(x, positions, role, length=length, xpos_scale_base=xpos, **arguments)


@pytest.mark.parametrize("role", ["query", "key"])
@pytest.mark.parametrize("name", list(CASES))
def test_rotate_equals_the_reference(name, role, rng):
    arguments, length = CASES[name]
    rotary = RotaryPositions(**arguments)
    x = inputs(rng)
    positions = np.arange(START, START + SEQUENCE)
    want = expected(arguments, x, positions, role, length)
    got = rotary.rotate(x, START, role=role, length=length)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(got), want, atol=ATOL, err_msg=name)
    # The same with the start as an int tensor, and with every position given (1-D).
    start = ops.convert_to_tensor(START, "int32")
    got = rotary.rotate(x, start, role=role, length=length)
    np.testing.assert_allclose(to_numpy(got), want, atol=ATOL, err_msg=name)
    scattered = np.array([0, 3, 4, 9, 2, 20, 11])
    got = rotary.rotate(x, ops.convert_to_tensor(scattered, "int32"), role=role, length=length)
    want = expected(arguments, x, scattered, role, length)
    np.testing.assert_allclose(to_numpy(got), want, atol=ATOL, err_msg=name)


def test_the_cases_cover_each_part_of_the_yarn_ramps():
    gamma = reference.yarn_ramp(HEAD_DIM, 10000.0, 200, 0.5, 16.0)
    assert gamma[0] == 1.0 and 0 < gamma[1] < 1 and gamma[2] == gamma[3] == 0.0
    gamma = reference.yarn_released_ramp(HEAD_DIM, 10000.0, 200, 0.5, 16.0)
    assert gamma[0] == 1.0 and 0 < gamma[1] < 1 and gamma[2] == gamma[3] == 0.0
    assert list(reference.yarn_released_ramp(HEAD_DIM, 10000.0, 64)) == [1.0, 0.5, 0.0, 0.0]


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"max_wavelength": 500.0},
        {"scaling": "linear", "scaling_factor": 2.5},
    ],
)
def test_plain_and_linear_equal_keras_hub(arguments, rng):
    import keras_hub

    rotary = RotaryPositions(**arguments)
    hub = keras_hub.layers.RotaryEmbedding(
        max_wavelength=arguments.get("max_wavelength", 10000.0),
        scaling_factor=arguments.get("scaling_factor", 1.0),
    )
    x = inputs(rng)
    for start in (0, START, ops.convert_to_tensor(START, "int32")):
        for role in ("query", "key"):
            np.testing.assert_allclose(
                to_numpy(rotary.rotate(x, start, role=role)),
                to_numpy(hub(x, start_index=start)),
                atol=1e-6,
                rtol=0,
            )


def test_ntk_is_keras_hub_plain_rope_with_the_scaled_base(rng):
    import keras_hub

    s, d = 4.0, HEAD_DIM
    hub = keras_hub.layers.RotaryEmbedding(max_wavelength=10000.0 * s ** (d / (d - 2)))
    x = inputs(rng)
    got = RotaryPositions(scaling="ntk", scaling_factor=s).rotate(x, START)
    np.testing.assert_allclose(to_numpy(got), to_numpy(hub(x, start_index=START)), atol=1e-6)


def test_keras_hub_dynamic_differs_and_its_yarn_is_the_released_one(rng):
    """The class docstring's account of keras_hub 0.32's ``rope_type="dynamic"`` and
    ``"yarn"``: if keras_hub changes, this says so (and ours might then delegate)."""
    import keras_hub

    x, d, s = inputs(rng), HEAD_DIM, 4.0
    positions = np.arange(START, START + SEQUENCE)
    # "dynamic": every frequency / s ** (d / (d - 2)), i.e. interpolation by that factor.
    hub = keras_hub.layers.RotaryEmbedding(scaling_factor=s, rope_type="dynamic")
    got = to_numpy(hub(x, start_index=START))
    interpolation = reference.rotary(
        x, positions, scaling="linear", scaling_factor=s ** (d / (d - 2))
    )
    np.testing.assert_allclose(got, interpolation, atol=ATOL)
    ntk = reference.rotary(x, positions, scaling="ntk", scaling_factor=s)
    assert np.max(np.abs(got - ntk)) > 0.1
    # "yarn", training length 200: a ramp linear in k from floor(k at r = 32) = 0 to
    # ceil(k at r = 1) = 2, so gamma = 1 - k / 2 = 1, 0.5, 0, 0: the released convention,
    # ours by default; the paper's is linear in r: 0.994, 0.070, 0, 0. Pairs 2 and 3
    # agree, pairs 0 and 1 do not.
    hub = keras_hub.layers.RotaryEmbedding(
        scaling_factor=3.0, rope_type="yarn", original_max_position_embeddings=200
    )
    got = to_numpy(hub(x, start_index=START))
    theta = reference.rope_frequencies(d)
    gamma = np.array([1.0, 0.5, 0.0, 0.0])
    hub_frequencies = (1 - gamma) * theta / 3.0 + gamma * theta
    factor = 0.1 * math.log(3.0) + 1
    np.testing.assert_allclose(
        got, reference.rotate(x, positions, hub_frequencies, factor=factor), atol=ATOL
    )
    yarn = {"scaling": "yarn", "scaling_factor": 3.0, "training_length": 200}
    released = to_numpy(RotaryPositions(**yarn).rotate(x, START))
    np.testing.assert_allclose(released, got, atol=ATOL)
    paper = to_numpy(RotaryPositions(**yarn, yarn_convention="paper").rotate(x, START))
    pairs_2_3 = [2, 3, 6, 7]
    np.testing.assert_allclose(got[..., pairs_2_3], paper[..., pairs_2_3], atol=ATOL)
    assert np.max(np.abs(got[..., [1, 5]] - paper[..., [1, 5]])) > 1e-2


def logits(rotary, q, k, m, n, length=None):
    """q . k per head (and per pair), the query rotated at m and the key at n."""
    rotated_q = to_numpy(rotary.rotate(q, m, role="query", length=length))
    rotated_k = to_numpy(rotary.rotate(k, n, role="key", length=length))
    return reference.pair_logits(rotated_q, rotated_k)[:, 0]  # (batch, heads, d / 2)


@pytest.mark.parametrize("name", list(CASES))
def test_logits_depend_on_the_distance_only(name, rng):
    arguments, length = CASES[name]
    rotary = RotaryPositions(**arguments)
    q, k = inputs(rng, sequence=1), inputs(rng, sequence=1)
    length = length or 64
    for distance in (0, 3, -2):
        at = [logits(rotary, q, k, n + distance, n, length).sum(-1) for n in (2, 4, 17)]
        for other in at[1:]:
            np.testing.assert_allclose(other, at[0], atol=1e-4, err_msg=f"{name} {distance}")
    # ... and do depend on it (a rotation that did nothing would pass the loop above).
    near, far = logits(rotary, q, k, 4, 4, length), logits(rotary, q, k, 9, 4, length)
    assert np.max(np.abs(near.sum(-1) - far.sum(-1))) > 1e-2


@pytest.mark.parametrize("name", ["xpos", "xpos_linear", "xpos_dynamic_ntk", "xpos_yarn"])
def test_xpos_scales_each_pair_logit_by_zeta_to_the_distance(name, rng):
    arguments, length = CASES[name]
    scale_base = arguments["xpos_scale_base"]
    without = RotaryPositions(**{k: v for k, v in arguments.items() if k != "xpos_scale_base"})
    rotary = RotaryPositions(**arguments)
    assert rotary.causal_only and not without.causal_only
    q, k = inputs(rng, sequence=1), inputs(rng, sequence=1)
    zeta = reference.xpos_zeta(HEAD_DIM)
    for n, m in ((9, 4), (30, 2), (6, 6)):
        factor = zeta ** ((n - m) / scale_base)  # < 1: a decay with n - m
        want = logits(without, q, k, n, m, length) * factor
        np.testing.assert_allclose(logits(rotary, q, k, n, m, length), want, atol=1e-4)


def test_dynamic_ntk_is_plain_up_to_the_training_length_then_ntk(rng):
    dynamic = RotaryPositions(scaling="dynamic_ntk", training_length=16)
    assert dynamic.dynamic and not RotaryPositions(scaling="ntk", scaling_factor=2.0).dynamic
    x = inputs(rng)
    plain = to_numpy(RotaryPositions().rotate(x, START))
    for length in (1, 12, 16, ops.convert_to_tensor(16, "int32")):
        got = to_numpy(dynamic.rotate(x, START, length=length))
        np.testing.assert_allclose(got, plain, atol=1e-6)
    for length, s in ((40, 2.5), (ops.convert_to_tensor(64, "int32"), 4.0)):
        ntk = to_numpy(RotaryPositions(scaling="ntk", scaling_factor=s).rotate(x, START))
        got = to_numpy(dynamic.rotate(x, START, length=length))
        np.testing.assert_allclose(got, ntk, atol=ATOL)
        assert np.max(np.abs(got - plain)) > 1e-2


@pytest.mark.parametrize("s", [1.0, 4.0, 16.0])
def test_yarn_multiplies_the_logits_by_its_temperature(s, rng):
    rotary = RotaryPositions(scaling="yarn", scaling_factor=s, training_length=64)
    q, k = inputs(rng, sequence=1), inputs(rng, sequence=1)
    plain = reference.pair_logits(q, k)[:, 0].sum(-1)
    for m in (0, 13):  # at equal positions the rotations cancel: only the temperature is left
        got = logits(rotary, q, k, m, m).sum(-1)
        np.testing.assert_allclose(got, (0.1 * math.log(s) + 1) ** 2 * plain, rtol=1e-5)


class Rotate(keras.layers.Layer):
    """Rotates ``x`` from the position held in ``start`` (one per example; the first is
    used); the current length is ``start`` plus the sequence length, a symbolic sum."""

    def __init__(self, rotary, role, **kwargs):
        super().__init__(**kwargs)
        self.rotary, self.role = rotary, role

    def call(self, x, start):
        start = start[0]
        length = start + ops.shape(x)[1]
        return self.rotary.rotate(x, start, role=self.role, length=length)


TRACED = ["plain", "xpos_dynamic_ntk", "xpos_yarn", "longrope_long"]


@pytest.mark.parametrize("name", TRACED)
def test_rotate_in_a_model_of_unknown_sequence_length(name, rng):
    arguments, _ = CASES[name]
    x_input = keras.Input((None, HEADS, HEAD_DIM))
    start_input = keras.Input((), dtype="int32")
    output = Rotate(RotaryPositions(**arguments), "key")(x_input, start_input)
    assert tuple(output.shape) == (None, None, HEADS, HEAD_DIM)
    model = keras.Model([x_input, start_input], output)
    for sequence, start in ((SEQUENCE, 30), (4, 2)):  # s = 37 / 16, then plain (6 < 16)
        x = inputs(rng, sequence=sequence)
        got = model.predict([x, np.full((BATCH,), start, "int32")], verbose=0)
        positions = np.arange(start, start + sequence)
        want = expected(arguments, x, positions, "key", start + sequence)
        np.testing.assert_allclose(got, want, atol=ATOL, err_msg=f"{name} {sequence}")


@pytest.mark.parametrize("name", TRACED)
def test_rotate_compiled_with_tensor_start_and_length(name, rng):
    """tf.function (retraced with a relaxed, unknown length), jax.jit, and on PyTorch a
    torch.export trace (after TORCH_TRACE_AFTER eager calls) that must succeed."""
    arguments, _ = CASES[name]
    rotary = RotaryPositions(**arguments)

    def function(x, start, length):
        return rotary.rotate(x, start, role="query", length=length)

    compiled = backend.compile_function(function, [])
    for sequence, start in ((SEQUENCE, 30), (3, 40), (5, 1)):
        x = inputs(rng, sequence=sequence)
        args = (
            ops.convert_to_tensor(x),
            ops.convert_to_tensor(start, "int32"),
            ops.convert_to_tensor(start + sequence, "int32"),
        )
        for _ in range(torch_trace.TORCH_TRACE_AFTER + 1):
            got = compiled(*args)
        want = expected(arguments, x, np.arange(start, start + sequence), "query", start + sequence)
        np.testing.assert_allclose(to_numpy(got), want, atol=ATOL, err_msg=f"{name} {sequence}")
    tracing_count = getattr(compiled, "experimental_get_tracing_count", None)
    if tracing_count is not None:  # tf.function: the 2nd length relaxed it to (2, None, 3, 8)
        assert tracing_count() == 2
    if isinstance(compiled, torch_trace.TorchTracedFunction):
        assert compiled.trace_errors == {} and len(compiled.graphs) == 3


@pytest.mark.parametrize("name", list(CASES))
def test_bfloat16_in_bfloat16_out(name, rng):
    arguments, length = CASES[name]
    x = inputs(rng, dtype="float32")
    x_bf16 = ops.cast(x, "bfloat16")
    got = RotaryPositions(**arguments).rotate(x_bf16, START, role="key", length=length)
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    got = to_numpy(ops.cast(got, "float32"))
    assert np.all(np.isfinite(got))
    rounded = to_numpy(ops.cast(x_bf16, "float32"))
    want = expected(arguments, rounded, np.arange(START, START + SEQUENCE), "key", length)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)  # bfloat16: 8 bits


def test_float32_under_a_mixed_precision_policy(rng):
    """keras_hub's layer is made under the policy; it must still compute in float32."""
    x = inputs(rng)
    want = to_numpy(RotaryPositions(scaling="linear", scaling_factor=2.0).rotate(x, START))
    keras.config.set_dtype_policy("mixed_bfloat16")
    got = RotaryPositions(scaling="linear", scaling_factor=2.0).rotate(x, START)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_array_equal(to_numpy(got), want)


@pytest.mark.parametrize("name", list(CASES))
def test_serialise_compare_hash_repr(name, rng):
    arguments, length = CASES[name]
    rotary = RotaryPositions(**arguments)
    rotary.rotate(inputs(rng), 0, length=length)  # fills the keras_hub cache, if any
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(rotary))
    assert type(restored) is RotaryPositions and restored is not rotary
    assert restored == rotary and hash(restored) == hash(rotary)
    assert restored.get_config() == rotary.get_config()
    assert set(rotary.get_config()) == set(inspect.signature(RotaryPositions).parameters)
    assert eval(repr(rotary), {"RotaryPositions": RotaryPositions}) == rotary
    copied = copy.deepcopy(rotary)
    assert copied == rotary and copied._keras_hub_layers == {}
    x = inputs(rng)
    np.testing.assert_array_equal(
        to_numpy(restored.rotate(x, START, length=length)),
        to_numpy(rotary.rotate(x, START, length=length)),
    )
    distinct = []
    for other, _ in CASES.values():
        if other != arguments and other not in distinct:
            distinct.append(other)
    others = [RotaryPositions(**other) for other in distinct]
    assert others and all(other != rotary for other in others)
    assert len({rotary, *others}) == len(others) + 1
    assert rotary != arguments


def test_repr_shows_the_arguments_that_differ_from_the_defaults():
    assert repr(RotaryPositions()) == "RotaryPositions()"
    assert repr(RotaryPositions(max_wavelength=500, xpos_scale_base=512)) == (
        "RotaryPositions(max_wavelength=500.0, xpos_scale_base=512.0)"
    )


BAD_ARGUMENTS = [
    ({"scaling": "dynamic"}, ValueError, r"`scaling` must be None or one of 'linear', 'ntk'"),
    ({"scaling": 1}, ValueError, r"`scaling` must be None or one of"),
    ({"max_wavelength": 0}, ValueError, r"`max_wavelength` must be a positive number, got 0"),
    ({"max_wavelength": float("inf")}, ValueError, r"`max_wavelength` must be a positive"),
    ({"max_wavelength": "10000"}, ValueError, r"`max_wavelength` must be a positive"),
    (
        {"scaling": "linear", "scaling_factor": 0.5},
        ValueError,
        r"`scaling_factor` must be a finite number >= 1, got 0.5",
    ),
    ({"scaling": "ntk", "scaling_factor": float("nan")}, ValueError, r"`scaling_factor` must"),
    ({"scaling": "yarn", "scaling_factor": True}, ValueError, r"`scaling_factor` must be a"),
    ({"scaling_factor": 2.0}, ValueError, r"`scaling_factor` is read only by scaling='linear'"),
    (
        {"training_length": 8},
        ValueError,
        r"`training_length` is read only by .* with scaling=None leave it at None",
    ),
    ({"scaling": "dynamic_ntk"}, ValueError, r"scaling='dynamic_ntk' needs `training_length`"),
    (
        {"scaling": "yarn", "scaling_factor": 2.0},
        ValueError,
        r"scaling='yarn' needs `training_length`",
    ),
    (
        {"scaling": "yarn", "training_length": 0},
        ValueError,
        r"`training_length` must be an integer >= 1, got 0",
    ),
    ({"scaling": "yarn", "training_length": 2.5}, TypeError, r"`training_length` must be an int"),
    (
        {"scaling": "linear", "scaling_factor": 2.0, "training_length": 2048},
        ValueError,
        r"`training_length` is read only by scaling='dynamic_ntk' or 'yarn' or 'llama3'",
    ),
    (
        {"scaling": "ntk", "scaling_factor": 2.0, "yarn_beta": 16.0},
        ValueError,
        r"`yarn_beta` is read only by scaling='yarn'",
    ),
    ({"yarn_alpha": 2.0}, ValueError, r"`yarn_alpha` is read only by scaling='yarn'"),
    (
        {"scaling": "yarn", "training_length": 8, "yarn_alpha": 0},
        ValueError,
        r"`yarn_alpha` must be a positive number",
    ),
    (
        {"scaling": "yarn", "training_length": 8, "yarn_alpha": 32.0},
        ValueError,
        r"`yarn_alpha` must be smaller than `yarn_beta`, got yarn_alpha=32.0, yarn_beta=32.0",
    ),
    ({"scaling": "llama3"}, ValueError, r"scaling='llama3' needs `training_length`"),
    (
        {"scaling": "longrope", "training_length": 8, "short_factor": (1.0,)},
        ValueError,
        r"scaling='longrope' needs `long_factor` \(one positive factor per pair",
    ),
    (
        {"scaling": "longrope", "training_length": 8, "short_factor": (1,), "long_factor": (0,)},
        ValueError,
        r"`long_factor\[0\]` must be a positive number, got 0",
    ),
    (
        {"scaling": "longrope", "training_length": 8, "short_factor": "1", "long_factor": (1,)},
        ValueError,
        r"`short_factor` must be None or a non-empty sequence of positive numbers",
    ),
    (
        {"scaling": "longrope", "training_length": 1, "short_factor": (1,), "long_factor": (1,)},
        ValueError,
        r"scaling='longrope' needs `training_length` >= 2",
    ),
    ({"short_factor": (1.0,)}, ValueError, r"`short_factor` is read only by scaling='longrope'"),
    (
        {"scaling": "yarn", "training_length": 8, "yarn_convention": "hf"},
        ValueError,
        r"`yarn_convention` must be one of 'released', 'paper', got 'hf'",
    ),
    ({"yarn_convention": "paper"}, ValueError, r"`yarn_convention` is read only by scaling='yarn'"),
    (
        {"scaling": "yarn", "training_length": 8, "yarn_convention": "paper", "yarn_truncate": 0},
        TypeError,
        r"`yarn_truncate` must be True or False, got 0",
    ),
    (
        {
            "scaling": "yarn",
            "training_length": 8,
            "yarn_convention": "paper",
            "yarn_truncate": False,
        },
        ValueError,
        r"`yarn_truncate` is read only by yarn_convention='released'",
    ),
    (
        {"scaling": "yarn", "training_length": 8, "yarn_mscale": 0.7},
        ValueError,
        r"`yarn_mscale` and `yarn_mscale_all_dim` are given together",
    ),
    (
        {"scaling": "ntk", "scaling_factor": 2.0, "attention_factor": 1.1},
        ValueError,
        r"`attention_factor` is read only by scaling='yarn' or 'longrope'",
    ),
    (
        {"scaling": "llama3", "training_length": 8, "low_freq_factor": 4.0},
        ValueError,
        r"`low_freq_factor` must be smaller than `high_freq_factor`, got low_freq_factor=4.0",
    ),
    ({"high_freq_factor": 8.0}, ValueError, r"`high_freq_factor` is read only by scaling='llama3'"),
    ({"partial_rotary_factor": 0}, ValueError, r"`partial_rotary_factor` must be a positive"),
    ({"partial_rotary_factor": 1.5}, ValueError, r"`partial_rotary_factor` must be in \(0, 1\]"),
    ({"interleaved": "yes"}, TypeError, r"`interleaved` must be True or False"),
    ({"xpos_scale_base": 0}, ValueError, r"`xpos_scale_base` must be a positive number"),
    ({"xpos_scale_base": "512"}, ValueError, r"`xpos_scale_base` must be a positive number"),
]


@pytest.mark.parametrize("arguments, error, message", BAD_ARGUMENTS)
def test_bad_arguments(arguments, error, message):
    with pytest.raises(error, match=r"^RotaryPositions: " + message):
        RotaryPositions(**arguments)
    config = dict(RotaryPositions().get_config(), **arguments)
    with pytest.raises(error, match=r"^RotaryPositions: " + message):
        RotaryPositions.from_config(config)


def test_bad_rotate_arguments(rng):
    rotary, x = RotaryPositions(), inputs(rng)
    caller = r"^RotaryPositions\.rotate: "
    with pytest.raises(ValueError, match=caller + r"`role` must be one of 'query', 'key'"):
        rotary.rotate(x, 0, role="value")
    with pytest.raises(ValueError, match=caller + r"`x` must have rank 4"):
        rotary.rotate(x[:, :, 0], 0)
    with pytest.raises(
        ValueError, match=caller + r"rotary embeddings need an even `key_dim`, got 3"
    ):
        rotary.rotate(x[..., :3], 0)
    with pytest.raises(ValueError, match=caller + r"scaling='dynamic_ntk' needs `length`"):
        RotaryPositions(scaling="dynamic_ntk", training_length=8).rotate(x, 0)
    with pytest.raises(ValueError, match=caller + r"`positions` must be an integer >= 0, got -1"):
        rotary.rotate(x, -1)
    with pytest.raises(TypeError, match=caller + r"`positions` must be an int"):
        rotary.rotate(x, 1.5)
    with pytest.raises(TypeError, match=caller + r"`positions` must be an int"):
        rotary.rotate(x, ops.convert_to_tensor(np.arange(SEQUENCE, dtype="float32")))
    with pytest.raises(
        ValueError, match=caller + r"`positions` must be a scalar .* shape \(1, 7\)"
    ):
        rotary.rotate(x, ops.convert_to_tensor(np.arange(SEQUENCE)[None]))
    with pytest.raises(
        ValueError,
        match=caller + r"`positions` .* one position per row of `x` \(7\), got shape \(3,\)",
    ):
        rotary.rotate(x, ops.convert_to_tensor(np.arange(3)))


def test_check_head_dim_reads_the_rotary_dimension_and_the_longrope_factors():
    partial = RotaryPositions(partial_rotary_factor=0.25)
    partial.check_head_dim("Layer", 17)  # int(17 / 4) = 4 dimensions turn
    with pytest.raises(ValueError, match=r"^Layer: the rotary dimension .* int\(12 \* 0.25\) = 3"):
        partial.check_head_dim("Layer", 12)
    longrope = RotaryPositions(
        scaling="longrope", training_length=8, short_factor=(1.0, 1.0), long_factor=(1.0, 2.0)
    )
    longrope.check_head_dim("Layer", 4)
    with pytest.raises(
        ValueError,
        match=r"^Layer: `short_factor` must hold one factor per pair .*"
        r"\(4 for key_dim=8\), got 2",
    ):
        longrope.check_head_dim("Layer", 8)
    with pytest.raises(ValueError, match=r"^RotaryPositions.frequencies: scaling='longrope' needs"):
        longrope.frequencies(4)


def test_check_head_dim_names_the_caller():
    rotary = RotaryPositions()
    rotary.check_head_dim("MultiHeadRelativeAttention", 8)
    with pytest.raises(ValueError, match=r"^MultiHeadRelativeAttention: .* even `key_dim`, got 3"):
        rotary.check_head_dim("MultiHeadRelativeAttention", 3)
    with pytest.raises(TypeError, match=r"^Layer: `key_dim` must be an integer"):
        rotary.check_head_dim("Layer", 8.0)
