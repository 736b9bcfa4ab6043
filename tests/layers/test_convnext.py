"""ConvNeXtBlock against its NumPy reference (tests/reference/convnext.py), its shapes,
parameters, options, errors and the standard layer checks. Its equality with timm's
ConvNeXtBlock is tests/test_convert_timm_maxxvit.py's (the maxxvit and coatnext fixtures)."""

from __future__ import annotations

import numpy as np
import pytest
from keras import ops
from tiers import matrix

import layer_checks
from keras_posenc.layers.coatnet import ConvNeXtBlock
from reference import convnext as ref

pytestmark = pytest.mark.contract

ATOL = 1e-5


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def optional(tensor):
    return None if tensor is None else to_numpy(tensor)


def randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(tuple(weight.shape))).astype("float32"))


def weights(layer):
    projection = layer.shortcut_projection
    return {
        "shortcut_kernel": None if projection is None else to_numpy(projection.kernel),
        "shortcut_bias": None if projection is None else optional(projection.bias),
        "depthwise_kernel": to_numpy(layer.depthwise_conv.kernel),
        "depthwise_bias": optional(layer.depthwise_conv.bias),
        "norm_gamma": to_numpy(layer.norm.gamma),
        "norm_beta": to_numpy(layer.norm.beta),
        "epsilon": layer.norm_epsilon,
        "hidden_kernel": to_numpy(layer.mlp_hidden.kernel),
        "hidden_bias": optional(layer.mlp_hidden.bias),
        "output_kernel": to_numpy(layer.mlp_output.kernel),
        "output_bias": optional(layer.mlp_output.bias),
        "gamma": optional(layer.gamma),
    }


CASES = [
    # (input shape, filters, strides, options)
    ((2, 5, 5, 4), 4, 1, {}),  # identity shortcut, 7 x 7 kernel over a smaller map
    ((2, 5, 7, 4), 8, 2, {}),  # odd sizes, two outputs per channel, Proj(Pool(x))
    ((1, 6, 6, 4), 4, 2, {"kernel_size": 3, "layer_scale": None}),  # Pool(x) only, no gamma
    ((1, 6, 4, 4), 8, 2, {"stride_on": "pool", "pool": "max", "output_bias": False}),
    ((1, 4, 4, 4), 12, 1, {"kernel_size": 5, "activation": "silu"}),  # Proj(x), m = 3
]


@pytest.mark.parametrize(*matrix("shape, filters, strides, options", CASES))
def test_convnext_matches_reference(shape, filters, strides, options):
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    layer = ConvNeXtBlock(filters, strides=strides, **options)
    layer(x)
    randomize(layer)
    expected = ref.convnext_block(
        x.astype("float64"),
        weights(layer),
        strides,
        stride_on=options.get("stride_on", "depthwise"),
        pool=options.get("pool", "avg"),
        activation=options.get("activation", "gelu"),
    )
    actual = to_numpy(layer(x))
    assert actual.shape == expected.shape == layer.compute_output_shape(shape)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


def test_convnext_widths_and_parameters():
    layer = ConvNeXtBlock(8, strides=2)
    layer.build((None, 5, 7, 4))
    assert tuple(layer.depthwise_conv.kernel.shape) == (7, 7, 4, 2)
    # depthwise 7*7*8 + 8, norm 16, MLP 8*32 + 32 + 32*8 + 8, gamma 8, shortcut 4*8 + 8
    expected = 392 + 8 + 16 + 288 + 264 + 8 + 40
    assert sum(int(np.prod(w.shape)) for w in layer.trainable_weights) == expected == 1016
    assert ConvNeXtBlock(8).get_config()["layer_scale"] == 1e-6


def test_convnext_standard_checks():
    x = np.random.default_rng(2).standard_normal((2, 4, 4, 4)).astype("float32")
    layer_checks.run_standard_checks(lambda: ConvNeXtBlock(8, strides=2, kernel_size=3), x)


def test_convnext_drop_path_is_active_only_in_training():
    x = np.random.default_rng(3).standard_normal((64, 2, 2, 4)).astype("float32")
    layer = ConvNeXtBlock(4, kernel_size=3, drop_path_rate=0.5, seed=1)
    layer(x)
    randomize(layer)
    branch = to_numpy(layer(x)) - x
    dropped = to_numpy(layer(x, training=True)) - x
    kept = np.abs(dropped).reshape(64, -1).max(axis=1) > 0
    assert 0 < kept.sum() < 64
    np.testing.assert_allclose(dropped[kept], 2 * branch[kept], atol=1e-4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"filters": 0}, "filters"),
        ({"strides": 3}, "strides"),
        ({"kernel_size": 4}, "kernel_size.*odd"),
        ({"layer_scale": 0.0}, "layer_scale"),
        ({"stride_on": "expand"}, "stride_on"),
        ({"pool": "sum"}, "pool"),
        ({"drop_path_rate": 1.0}, "drop_path_rate"),
        ({"activation": "nope"}, "activation"),
    ],
)
def test_convnext_bad_arguments(kwargs, message):
    arguments = {"filters": 8, **kwargs}
    with pytest.raises(ValueError, match=f"ConvNeXtBlock .*{message}"):
        ConvNeXtBlock(**arguments)


def test_convnext_bad_inputs():
    with pytest.raises(TypeError, match="ConvNeXtBlock .*output_bias"):
        ConvNeXtBlock(8, output_bias=1)
    with pytest.raises(ValueError, match=r"ConvNeXtBlock .*multiple of the input's channels"):
        ConvNeXtBlock(6)(np.zeros((1, 4, 4, 4), "float32"))
    with pytest.raises(ValueError, match="ConvNeXtBlock .*rank 4"):
        ConvNeXtBlock(8)(np.zeros((1, 4, 4), "float32"))
