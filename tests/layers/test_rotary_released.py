"""RotaryPositions as released checkpoints use it (issue 45): every scaling's frequencies
(`frequencies`) at the sizes of released models against the numpy reference written from
Hugging Face's formulas (tests/reference/rotary.py: ``_compute_yarn_parameters``,
``_compute_llama3_parameters``, ``_compute_longrope_parameters``,
``_compute_dynamic_ntk_parameters``) to 1e-6, the rotated queries at up to 4 times the
training length to 1e-5, the attention factors, and keras_hub's YaRN and its Llama 3
backbone's rope as peers on copied inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from keras import ops

from keras_posenc.layers.rotary import RotaryPositions
from reference import rotary as reference

pytestmark = pytest.mark.contract

RNG = np.random.default_rng(45)
# Phi-3-like LongRoPE factors (one per pair of a head of 96), drawn once.
SHORT = tuple(float(v) for v in np.round(1.0 + 0.1 * RNG.random(48), 4))
LONG = tuple(float(v) for v in np.round(np.linspace(1.0, 40.0, 48) * (1 + 0.1 * RNG.random(48)), 4))

# name: (head size, arguments, lengths to ask the frequencies at). The sizes of released
# models: Llama 2 (128, base 10000, 4096), Llama 3.1 (128, base 500000, 8192, s = 8),
# Phi-3 (96, LongRoPE from 4096 to 131072), GPT-NeoX (a quarter of 80 turns).
RELEASED = {
    "plain": (128, {}, [None]),
    "linear": (128, {"scaling": "linear", "scaling_factor": 4.0}, [None]),
    "ntk": (128, {"scaling": "ntk", "scaling_factor": 8.0}, [None]),
    "dynamic_ntk": (
        128,
        {"scaling": "dynamic_ntk", "scaling_factor": 2.0, "training_length": 4096},
        [100, 4096, 5000, 16384],
    ),
    "yarn_released": (
        128,
        {"scaling": "yarn", "scaling_factor": 8.0, "training_length": 4096},
        [None],
    ),
    "yarn_released_untruncated": (
        128,
        {
            "scaling": "yarn",
            "scaling_factor": 16.0,
            "training_length": 4096,
            "yarn_truncate": False,
            "yarn_mscale": 0.707,
            "yarn_mscale_all_dim": 1.0,
        },
        [None],
    ),
    "yarn_paper": (
        128,
        {
            "scaling": "yarn",
            "scaling_factor": 8.0,
            "training_length": 4096,
            "yarn_convention": "paper",
        },
        [None],
    ),
    "llama3": (
        128,
        {
            "max_wavelength": 500000.0,
            "scaling": "llama3",
            "scaling_factor": 8.0,
            "training_length": 8192,
        },
        [None],
    ),
    "longrope": (
        96,
        {
            "scaling": "longrope",
            "scaling_factor": 32.0,
            "training_length": 4096,
            "short_factor": SHORT,
            "long_factor": LONG,
        },
        [10, 4096, 4097, 131072],
    ),
    "partial_yarn": (
        80,
        {
            "partial_rotary_factor": 0.25,
            "scaling": "yarn",
            "scaling_factor": 4.0,
            "training_length": 2048,
        },
        [None],
    ),
}


def expected_frequencies(head_dim, arguments, length):
    config = RotaryPositions(**arguments).get_config()
    rotary_dim = int(head_dim * config.pop("partial_rotary_factor"))
    for name in ("interleaved", "xpos_scale_base"):
        config.pop(name)
    frequencies, divisor, factor = reference.scaled_frequencies(rotary_dim, length=length, **config)
    return frequencies / divisor, factor


def test_every_released_scaling_equals_the_formulas():
    """Frequencies to 1e-6 (relative: Llama 3.1's slowest is 1e-6 itself) and the
    attention factor to float rounding, at released models' sizes and lengths."""
    for name, (head_dim, arguments, lengths) in RELEASED.items():
        rotary = RotaryPositions(**arguments)
        for length in lengths:
            want, factor = expected_frequencies(head_dim, arguments, length)
            got = ops.convert_to_numpy(rotary.frequencies(head_dim, length)).astype("float64")
            assert got.shape == want.shape, name
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"{name} {length}")
            assert math.isclose(rotary.attention_factor(), factor, rel_tol=1e-12), name
    # A traced length (an int tensor) reads the same as an int.
    rotary = RotaryPositions(**RELEASED["longrope"][1])
    for length in (4096, 4097):
        tensor = ops.convert_to_tensor(length, "int32")
        np.testing.assert_array_equal(
            ops.convert_to_numpy(rotary.frequencies(96, tensor)),
            ops.convert_to_numpy(rotary.frequencies(96, length)),
        )


def test_the_two_yarn_conventions_differ_where_the_docstring_says():
    """Head size 128, training length 4096, s = 8: 25 of 64 pairs differ, by up to 130%."""
    released = RotaryPositions(**RELEASED["yarn_released"][1]).frequencies(128)
    paper = RotaryPositions(**RELEASED["yarn_paper"][1]).frequencies(128)
    released, paper = ops.convert_to_numpy(released), ops.convert_to_numpy(paper)
    relative = np.abs(released - paper) / paper
    assert np.sum(relative > 1e-5) == 25
    assert 1.25 < relative.max() < 1.35


def test_attention_factors():
    def factor(**arguments):
        return RotaryPositions(**arguments).attention_factor()

    yarn = {"scaling": "yarn", "training_length": 64}
    assert factor(**yarn) == 1.0  # s = 1
    assert factor(**yarn, scaling_factor=8.0) == pytest.approx(0.1 * math.log(8) + 1)
    mscale = factor(**yarn, scaling_factor=40.0, yarn_mscale=1.0, yarn_mscale_all_dim=0.707)
    assert mscale == pytest.approx((0.1 * math.log(40) + 1) / (0.0707 * math.log(40) + 1))
    assert factor(**yarn, scaling_factor=8.0, attention_factor=1.5) == 1.5
    longrope = {
        "scaling": "longrope",
        "training_length": 4096,
        "short_factor": (1.0,),
        "long_factor": (2.0,),
    }
    assert factor(**longrope) == 1.0
    want = math.sqrt(1 + math.log(32) / math.log(4096))
    assert factor(**longrope, scaling_factor=32.0) == pytest.approx(want)
    assert factor(**longrope, scaling_factor=32.0, attention_factor=1.0) == 1.0
    assert factor(scaling="llama3", scaling_factor=8.0, training_length=64) == 1.0
    assert factor(scaling="ntk", scaling_factor=8.0) == 1.0


# Small heads and lengths: a float32 angle p theta_k is off by up to about p 1.2e-7 rad in any
# implementation (keras_hub's and Hugging Face's too), so 1e-5 on the rotated values holds at
# 4 x a training length of 16 (positions up to 64), not at 4 x 4096. Head size 16, base 100:
# theta_k from 1 to 0.018, r_k from 2.5 down; every ramp has pairs on both sides.
SMALL = {
    "dynamic_ntk": {"scaling": "dynamic_ntk", "scaling_factor": 2.0, "training_length": 16},
    "yarn_released": {"scaling": "yarn", "scaling_factor": 4.0, "training_length": 16},
    "yarn_paper": {
        "scaling": "yarn",
        "scaling_factor": 4.0,
        "training_length": 16,
        "yarn_convention": "paper",
        "yarn_beta": 4.0,
    },
    "llama3": {"scaling": "llama3", "scaling_factor": 4.0, "training_length": 16},
    "longrope": {
        "scaling": "longrope",
        "scaling_factor": 4.0,
        "training_length": 16,
        "short_factor": (1.0, 1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0),
        "long_factor": (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0),
    },
    "interleaved_yarn": {
        "scaling": "yarn",
        "scaling_factor": 4.0,
        "training_length": 16,
        "interleaved": True,
    },
    "partial_llama3": {
        "scaling": "llama3",
        "scaling_factor": 4.0,
        "training_length": 16,
        "partial_rotary_factor": 0.5,
    },
}


def test_rotated_queries_up_to_four_times_the_training_length():
    x = RNG.standard_normal((1, 64, 2, 16)).astype("float32")
    positions = np.arange(64)
    for name, arguments in SMALL.items():
        rotary = RotaryPositions(max_wavelength=100.0, **arguments)
        config = rotary.get_config()
        config.pop("xpos_scale_base")
        for length in (16, 64):  # within and beyond the training length
            want = reference.rotary(x, positions, "query", length, **config)
            got = ops.convert_to_numpy(rotary.rotate(x, 0, length=length)).astype("float64")
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"{name} {length}")
        if rotary.partial_rotary_factor < 1:  # the dimensions that do not turn pass through
            np.testing.assert_array_equal(got[..., 8:], x[..., 8:])


def test_keras_hub_yarn_equals_the_released_convention():
    """keras_hub's ``RotaryEmbedding(rope_type="yarn")`` on the same settings and copied
    inputs: head size 64, training length 16 (pairs 0 to 4, then 0 to 1, on the ramp),
    s = 4, at positions up to 4 x 16 (float32 angles: see ``SMALL``)."""
    import keras_hub

    x = RNG.standard_normal((1, 64, 1, 64)).astype("float32")
    for beta_fast, beta_slow in ((32.0, 1.0), (16.0, 2.0)):
        hub = keras_hub.layers.RotaryEmbedding(
            max_wavelength=10000.0,
            scaling_factor=4.0,
            rope_type="yarn",
            beta_fast=beta_fast,
            beta_slow=beta_slow,
            original_max_position_embeddings=16,
        )
        ours = RotaryPositions(
            scaling="yarn",
            scaling_factor=4.0,
            training_length=16,
            yarn_alpha=beta_slow,
            yarn_beta=beta_fast,
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(ours.rotate(x, 0)),
            ops.convert_to_numpy(hub(x, start_index=0)),
            atol=1e-5,
            rtol=0,
        )


def test_keras_hub_llama3_backbone_rope_equals_llama3():
    """The rotary layer of keras_hub's ``Llama3Backbone`` built with Llama 3.1's rope
    arguments (at head size 32 and training length 16: pairs 0 and 1 on the ramp) turns
    copied queries as ``scaling="llama3"`` does, at positions up to 4 x 16."""
    import keras_hub

    backbone = keras_hub.models.Llama3Backbone(
        vocabulary_size=10,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=64,
        intermediate_dim=8,
        rope_max_wavelength=10000,
        rope_frequency_adjustment_factor=8.0,
        rope_low_freq_factor=1.0,
        rope_high_freq_factor=4.0,
        rope_pretraining_sequence_length=16,
    )
    hub = backbone.transformer_layers[0]._self_attention_layer.rotary_embedding_layer
    ours = RotaryPositions(scaling="llama3", scaling_factor=8.0, training_length=16)
    x = RNG.standard_normal((1, 62, 2, 32)).astype("float32")
    for start in (0, 2):
        np.testing.assert_allclose(
            ops.convert_to_numpy(ours.rotate(x, start)),
            ops.convert_to_numpy(hub(x, start_index=start)),
            atol=1e-5,
            rtol=0,
        )
