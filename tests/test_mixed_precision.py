"""Mixed precision (issue #44): every public layer family under ``mixed_float16`` and
``mixed_bfloat16``, and one zoo model per family (large).

Each layer is rebuilt from its config with ``dtype=policy`` (no global policy, so no
state leaks), given the float32 layer's weights and called on inputs uniform in
``[-RANGE, RANGE]`` (`layer_checks.check_mixed_precision`): every floating output must
be finite, of the policy's compute dtype (float16 or bfloat16, as every layer's outputs
are: docs/backends.md, "Mixed precision") and within `TOLERANCE` of the float32 output
(times its largest magnitude, at least 1). The computed biases (ALiBi, KERPLE, FIRE, the
continuous bias, T5's buckets) are read at distances up to `FAR`, and xPos rotates
positions up to `FAR` - 1 (it overflows float16 beyond about 4,500 at ``scale_base=512``:
keras_posenc/layers/rotary.py). Where a family's cases take one code path in several
settings (each computed bias inside attention, RoPE's scalings, MaxViT's partitions), one
case runs on every backend and the others are `matrix` cases (tests/tiers.py).
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops
from test_export_zoo import SMALL_VARIANTS
from tiers import matrix

from keras_posenc import layers, zoo
from keras_posenc.layers import _attention
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from layer_checks import check_mixed_precision, floating_outputs

pytestmark = pytest.mark.contract

POLICIES = ("mixed_float16", "mixed_bfloat16")
# Inputs are uniform in [-RANGE, RANGE].
RANGE = 3.0
# The farthest distance read, and the length of the decoding cache (positions FAR - 4 ..
# FAR - 1 decoded).
FAR = 2048
# Largest difference from float32, times the output's largest magnitude (at least 1):
# float16 keeps 11 bits of mantissa, bfloat16 8 (a rounding of 2^-9 per operation), and
# a layer compounds a few dozen roundings. Measured over every case here: at most 3.8e-3
# (float16) and 2.8e-2 (bfloat16) on the three backends, both in attention.
TOLERANCE = {"mixed_float16": 1e-2, "mixed_bfloat16": 6e-2}


def uniform(rng, *shape):
    return rng.uniform(-RANGE, RANGE, shape).astype("float32")


def check(layer, inputs, call_kwargs=None, compare=True):
    """`check_mixed_precision` under both policies: finite outputs of the compute dtype,
    and (``compare``) within `TOLERANCE` of float32."""
    for policy in POLICIES:
        tolerance = TOLERANCE[policy] if compare else None
        check_mixed_precision(layer, inputs, call_kwargs, policy, "compute", tolerance)


def test_activations(rng):
    x = uniform(rng, 4, 64)
    for function in (layers.exact_gelu, layers.tanh_gelu):
        expected = ops.convert_to_numpy(function(x))
        for policy in POLICIES:
            dtype = keras.dtype_policies.get(policy).compute_dtype
            output = function(ops.cast(x, dtype))
            assert keras.backend.standardize_dtype(output.dtype) == dtype, (function, policy)
            array = ops.convert_to_numpy(ops.cast(output, "float32"))
            assert np.isfinite(array).all(), (function, policy)
            np.testing.assert_allclose(array, expected, atol=TOLERANCE[policy] * RANGE)


# The computed biases (T5's buckets too) at distances up to FAR (run everywhere); the
# tables, which are their weights cast to the compute dtype (matrix).
BIAS_SCHEMES = {
    "computed": (
        layers.LogBuckets(8, 64),  # T5's buckets
        layers.ALiBi(),
        layers.KERPLE("log"),
        layers.FIRE(hidden_dim=8),
        layers.ContinuousBias(hidden_dim=8),
    ),
    "tables": (layers.ClipPositions(4), layers.PiecewiseBuckets(8)),
}


@pytest.mark.parametrize(*matrix("schemes", list(BIAS_SCHEMES)))
def test_relative_position_layers(schemes):
    lengths = {"query_length": 2, "key_length": FAR}
    for scheme in BIAS_SCHEMES[schemes]:
        check(layers.RelativePositionBias(2, position=scheme), [], lengths)
    if schemes == "tables":
        short = {"query_length": 3, "key_length": 5}
        check(layers.RelativePositionEmbedding(4, position=layers.ClipPositions(4)), [], short)
        check(layers.MultiScaleRelativePositionEmbedding(4, scales=(2, 4)), [], short)
        check(layers.RelativePositionBias2D(2, size=(3, 4)), [])
        return
    check(layers.ContinuousPositionBias2D(2, size=(3, 4), hidden_dim=8), [])

    # KERPLE's power kernel at its largest exponent reaches -r1 * 2048^2, beyond float16:
    # there the bias is clipped at -3e4 (_attention.cast_bias), finite and still masking.
    layer = layers.RelativePositionBias(2, position=layers.KERPLE("power"))
    layer.build()
    layer.set_weights([np.array([0.5, 1.0], "float32"), np.array([1.0, 2.0], "float32")])
    expected = ops.convert_to_numpy(layer(**lengths))
    assert expected.min() < -1e6
    low = check_mixed_precision(layer, [], lengths, "mixed_float16", "compute")
    clipped = np.maximum(expected, _attention.FLOAT16_MASK_FILL)
    np.testing.assert_allclose(floating_outputs(low)[0], clipped, rtol=TOLERANCE["mixed_float16"])
    tolerance = TOLERANCE["mixed_bfloat16"]
    check_mixed_precision(layer, [], lengths, "mixed_bfloat16", "compute", tolerance)


# Masks, scores, an additive bias and the fused path (run everywhere); each computed bias
# and T5's buckets in attention (matrix: their numbers are checked above, and finite under
# mixed_bfloat16 in attention by tests/layers/test_position_biases.py on every backend).
ATTENTION_SCHEMES = {
    "masks": None,
    "t5": layers.LogBuckets(8, 16),
    "alibi": layers.ALiBi(),
    "kerple": layers.KERPLE("power"),
    "fire": layers.FIRE(hidden_dim=8),
    "continuous": layers.ContinuousBias(hidden_dim=8),
}


@pytest.mark.parametrize(*matrix("case", list(ATTENTION_SCHEMES)))
def test_relative_attention(case, rng):
    x, memory = uniform(rng, 2, 6, 8), uniform(rng, 2, 5, 8)
    if case != "masks":
        layer = layers.MultiHeadRelativeAttention(
            2, 4, relative="bias", position=ATTENTION_SCHEMES[case]
        )
        check(layer, [x, x], {"use_causal_mask": True})
        return
    padding = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)  # the second row all padding
    additive = np.where(rng.random((2, 1, 6, 6)) < 0.3, -1e9, 0.0).astype("float32")
    additive[..., 0] = 0.0  # no query row masked whole: its output would be meaningless
    cases = [
        (dict(relative="keys_values", position=layers.ClipPositions(3)),
         {"value_mask": padding, "return_attention_scores": True}),
        (dict(relative="keys", position=layers.LogBuckets(8, 16)), {"attention_bias": additive}),
        (dict(relative="bias", position=layers.ALiBi(), fused_attention=True),
         {"value_mask": padding}),
    ]  # fmt: skip
    for arguments, call_kwargs in cases:
        value = memory if "value_mask" in call_kwargs else x
        check(layers.MultiHeadRelativeAttention(2, 4, **arguments), [x, value], call_kwargs)

    # A row masked whole by an additive -1e9: float16 holds it as -inf, which gave NaN.
    additive[1, :, 2] = -1e9
    for fused in (False, True):
        layer = layers.MultiHeadRelativeAttention(
            2, 4, relative="bias", position=layers.KERPLE(), fused_attention=fused
        )
        check(layer, [x, x], {"attention_bias": additive}, compare=False)


# xPos (run everywhere: its factors grow with the position), RoPE and its scalings (matrix).
ROTARY = {
    "xpos": layers.RotaryPositions(xpos_scale_base=512),
    "rope": layers.RotaryPositions(),
    "yarn": layers.RotaryPositions(scaling="yarn", scaling_factor=4.0, training_length=64),
    "dynamic_ntk": layers.RotaryPositions(scaling="dynamic_ntk", training_length=64),
}


@pytest.mark.parametrize(*matrix("rotary", list(ROTARY)))
def test_rotary_attention(rotary, rng):
    """Through the attention, and decoding with a cache at positions up to FAR."""
    x = uniform(rng, 2, 4, 8)
    cache = np.zeros((2, 2, FAR, 2, 4), "float32")
    cache[:, :, : FAR - 4] = uniform(rng, 2, 2, FAR - 4, 2, 4)
    layer = layers.MultiHeadRelativeAttention(2, 4, relative=None, rotary=ROTARY[rotary])
    check(layer, [x, x], {"use_causal_mask": True})
    decoding = {"use_causal_mask": True, "cache": cache, "cache_update_index": FAR - 4}
    check(layer, [x, x], decoding)


@pytest.mark.parametrize(*matrix("block", ["post_norm", "pre_norm_alibi"]))
def test_relative_transformer(block, rng):
    x, memory = uniform(rng, 2, 6, 8), uniform(rng, 2, 5, 8)
    if block == "pre_norm_alibi":
        arguments = dict(relative="bias", position=layers.ALiBi(), normalize_first=True)
        check(layers.RelativeTransformerEncoder(16, 2, **arguments), [x])
        return
    source = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)  # the second source empty
    check(layers.RelativeTransformerEncoder(16, 2, position=layers.ClipPositions(3)), [x])
    decoder = layers.RelativeTransformerDecoder(16, 2, position=layers.ClipPositions(3))
    check(decoder, [x, memory], {"encoder_padding_mask": source})


def test_convs2s(rng):
    x, embedding = uniform(rng, 2, 4, 6), uniform(rng, 2, 4, 5)
    keys, values = uniform(rng, 2, 7, 5), uniform(rng, 2, 7, 5)
    mask = np.array([[True] * 5 + [False] * 2, [False] * 7])  # the second source empty
    check(layers.ConvS2SAttention(6, 5), [x, embedding, (keys, values), mask])
    check(layers.GLUConv1D(6, 3, causal=True, weight_norm=True), [x], {"mask": mask[:, :4]})
    check(layers.GradMultiply(0.5), [x])


@pytest.mark.parametrize(*matrix("conv", ["static", "dynamic"]))
def test_muse(conv, rng):
    x, memory = uniform(rng, 2, 6, 8), uniform(rng, 2, 5, 8)
    if conv == "dynamic":
        attention = layers.MUSEAttention(
            2, 4, conv="dynamic", kernel_sizes=(3,), causal=True, fused_attention=True
        )
        check(attention, [x])
        return
    padding = np.array([[1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]], bool)
    source = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)  # the second source empty
    attention = layers.MUSEAttention(2, 4, conv="static", kernel_sizes=(1, 3))
    check(attention, [x], {"mask": padding})
    check(layers.MUSEEncoderLayer(16, 2, kernel_sizes=(3,)), [x], {"padding_mask": padding})
    decoder = layers.MUSEDecoderLayer(16, 2, kernel_sizes=(3,))
    check(decoder, [x, memory], {"encoder_padding_mask": source})


# MBConv, squeeze-excite and the transformer block with its table bias (run everywhere);
# the block's MLP bias and MaxViT's partitions (matrix).
TRANSFORMER_2D = {
    "table": {},
    "mlp": {"position_bias": "mlp", "position_bias_dim": 8},
    "block": {"partition": "block", "partition_size": 4},
    "grid": {"partition": "grid", "partition_size": 4},
}


@pytest.mark.parametrize(*matrix("transformer", list(TRANSFORMER_2D)))
def test_coatnet_blocks(transformer, rng):
    images = uniform(rng, 2, 8, 8, 8)
    arguments = TRANSFORMER_2D[transformer]
    check(layers.RelativeTransformerBlock2D(8, head_dim=4, **arguments), [images])
    if transformer == "table":
        check(layers.SqueezeExcite(4), [images])
        check(layers.MBConv(8, strides=2), [images])


def test_padding(rng):
    images = uniform(rng, 2, 5, 5, 3)
    for mode in ("zeros", "circular", "reflect", "replicate"):
        check(layers.SpatialPadding2D(2, mode=mode), [images])


# --------------------------------------------------------------------------- zoo

# One model per zoo family, in its small variant (tests/test_export_zoo.py), and the dtype
# of its output under a mixed policy: the image models' in the compute dtype (as every
# layer's), the sequence models' logits in float32 (zoo/seq2seq.py, zoo/language_model.py).
ZOO = {
    "coatnet_0": "compute",
    "maxvit_t": "compute",
    "posenet_vgg16": "compute",
    "convs2s_small": "float32",
    "muse_tiny": "float32",
    "t5_small": "float32",
    "shaw_transformer_base": "float32",
    "music_transformer_base": "float32",
}


def zoo_inputs(model, rng):
    """Images uniform in [-RANGE, RANGE], or token ids with a padded tail."""
    if isinstance(model, Seq2SeqModel):
        source = rng.integers(3, 50, (2, 6)).astype("int32")
        source[0, 4:] = model.pad_id
        return {"encoder_token_ids": source, "decoder_token_ids": source[:, :4]}
    arrays = []
    for spec in model.inputs:
        if "int" in spec.dtype:
            arrays.append(rng.integers(3, 50, (2, 6)).astype(spec.dtype))
        else:
            arrays.append(uniform(rng, 2, *spec.shape[1:]))
    return arrays[0] if len(arrays) == 1 else arrays


# Large: building the eight models under both policies took over 100 s on JAX, 12 s on
# TensorFlow (2 cores, loaded).
@pytest.mark.large
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_family(name, rng):
    model = zoo.create(name, **SMALL_VARIANTS[name])
    inputs = zoo_inputs(model, rng)
    (expected,) = floating_outputs(model(inputs, training=False))
    weights = model.get_weights()
    for policy in POLICIES:
        keras.config.set_dtype_policy(policy)  # conftest restores float32 after the test
        low = zoo.create(name, **SMALL_VARIANTS[name])
        low.set_weights(weights)
        output = low(inputs, training=False)
        dtype = (
            keras.dtype_policies.get(policy).compute_dtype if ZOO[name] == "compute" else ZOO[name]
        )
        assert keras.backend.standardize_dtype(output.dtype) == dtype, (name, policy)
        (actual,) = floating_outputs(output)
        assert np.isfinite(actual).all(), (name, policy)
        # Measured on TensorFlow: at most 1.8e-3 (float16) and 1.2e-2 (bfloat16).
        scale = max(float(np.abs(expected).max()), 1.0)
        np.testing.assert_allclose(actual, expected, atol=TOLERANCE[policy] * scale, rtol=0)
