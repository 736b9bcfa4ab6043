"""CoAtNet's blocks (SqueezeExcite, MBConv, RelativeTransformerBlock2D) against the numpy
references, stochastic depth, resizing the relative table, the shared checks and errors."""

from __future__ import annotations

import os
import re

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D, SqueezeExcite
from reference import coatnet as ref
from reference.relative_position_2d import resize_table_for_grid

ATOL = 1e-5


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def randomize(layer, seed=0):
    """Random values in every weight (biases, norms and moving statistics included)."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        shape = tuple(weight.shape)
        if weight.path.endswith("moving_variance"):
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = 0.5 * rng.standard_normal(shape)
        weight.assign(value.astype("float32"))


def images(rng, shape):
    return rng.standard_normal(shape).astype("float32")


def dense(layer):
    return to_numpy(layer.kernel), to_numpy(layer.bias)


def batch_norm(layer):
    return tuple(
        to_numpy(w) for w in (layer.gamma, layer.beta, layer.moving_mean, layer.moving_variance)
    )


def shortcut_weights(layer):
    projection = layer.shortcut_projection
    if projection is None:
        return {"shortcut_kernel": None, "shortcut_bias": None}
    return {
        "shortcut_kernel": to_numpy(projection.kernel),
        "shortcut_bias": to_numpy(projection.bias),
    }


def se_weights(layer):
    if layer is None:
        return None
    return (*dense(layer.squeeze), *dense(layer.excite))


def mbconv_weights(layer):
    return {
        "pre_norm": batch_norm(layer.pre_norm),
        "expand_norm": batch_norm(layer.expand_norm),
        "depthwise_norm": batch_norm(layer.depthwise_norm),
        "expand_kernel": to_numpy(layer.expand_conv.kernel),
        "depthwise_kernel": to_numpy(layer.depthwise_conv.kernel),
        "se": se_weights(layer.squeeze_excite),
        "project_kernel": to_numpy(layer.project_conv.kernel),
        "project_bias": to_numpy(layer.project_conv.bias),
        **shortcut_weights(layer),
    }


def transformer_weights(layer):
    return {
        "attention_norm": (
            to_numpy(layer.attention_norm.gamma),
            to_numpy(layer.attention_norm.beta),
        ),
        "ffn_norm": (to_numpy(layer.ffn_norm.gamma), to_numpy(layer.ffn_norm.beta)),
        "qkv": dense(layer.qkv_dense),
        "attention_output": dense(layer.output_dense),
        "ffn_hidden": dense(layer.ffn_hidden),
        "ffn_output": dense(layer.ffn_output),
        "table": to_numpy(layer.relative_bias.table),
        **shortcut_weights(layer),
    }


# --------------------------------------------------------------------------- SqueezeExcite


def test_squeeze_excite_matches_reference(rng):
    x = images(rng, (2, 3, 4, 6))
    layer = SqueezeExcite(3)
    layer(x)
    randomize(layer)
    expected = ref.squeeze_excite(x.astype("float64"), *se_weights(layer))
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=ATOL, rtol=0)
    assert layer.compute_output_shape(x.shape) == x.shape


def test_squeeze_excite_standard_checks(rng):
    layer_checks.run_standard_checks(lambda: SqueezeExcite(2), images(rng, (2, 3, 3, 4)))


# --------------------------------------------------------------------------- MBConv

MBCONV_CASES = [
    # (input shape, filters, strides, stride_on, se_ratio)
    ((2, 4, 4, 8), 8, 1, "expand", 0.25),  # identity shortcut
    ((2, 4, 4, 8), 12, 1, "depthwise", 0.0),  # width change at stride 1: Proj(x); no SE
    ((2, 5, 7, 8), 12, 2, "expand", 0.25),  # odd sizes: ceil(size / 2); Proj(Pool(x))
    ((2, 6, 6, 8), 8, 2, "depthwise", 0.5),  # same width at stride 2: Pool(x) only
]


@pytest.mark.parametrize("shape, filters, strides, stride_on, se_ratio", MBCONV_CASES)
def test_mbconv_matches_reference(rng, shape, filters, strides, stride_on, se_ratio):
    x = images(rng, shape)
    layer = MBConv(filters, strides=strides, stride_on=stride_on, se_ratio=se_ratio)
    layer(x)
    randomize(layer)
    expected = ref.mbconv(x.astype("float64"), mbconv_weights(layer), strides, stride_on)
    actual = to_numpy(layer(x, training=False))
    assert actual.shape == expected.shape == layer.compute_output_shape(shape)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


def test_mbconv_widths_and_parameters():
    layer = MBConv(12, strides=2, expansion_rate=4, se_ratio=0.25)  # shapes of a case above
    layer.build((None, 5, 7, 8))
    assert layer.expand_conv.filters == 48 and layer.squeeze_excite.squeeze_filters == 3
    assert layer.expand_conv.use_bias is False and layer.depthwise_conv.use_bias is False
    # pre BN 2*8 + 1x1 8*48 + BN 2*48 + dw 9*48 + BN 2*48 + SE (48*3+3 + 3*48+48)
    # + 1x1 48*12+12 + shortcut 8*12+12 (trainable only; BN moving stats are not)
    expected = 16 + 384 + 96 + 432 + 96 + 339 + 588 + 108
    assert sum(int(np.prod(w.shape)) for w in layer.trainable_weights) == expected


def test_mbconv_standard_checks(rng):
    layer_checks.run_standard_checks(
        lambda: MBConv(8, strides=2, stride_on="depthwise"), images(rng, (2, 4, 4, 4))
    )


def test_mbconv_synchronized_batch_norm():
    if keras.backend.backend() != "tensorflow":
        # Keras synchronises BatchNorm only on TensorFlow; elsewhere say so, never ignore it.
        with pytest.raises(ValueError, match=r"`synchronized=True` needs the TensorFlow backend"):
            MBConv(8, synchronized=True)
        return
    layer = MBConv(8, synchronized=True)
    layer.build((None, 4, 4, 8))
    norms = [layer.pre_norm, layer.expand_norm, layer.depthwise_norm]
    assert all(norm.synchronized for norm in norms)
    assert MBConv.from_config(layer.get_config()).synchronized is True


# --------------------------------------------------------------------------- Transformer

TRANSFORMER_CASES = [
    # (input shape, filters, head_dim, strides)
    ((2, 3, 4, 8), 8, 4, 1),  # identity shortcut
    ((2, 3, 4, 8), 16, 4, 1),  # width change at stride 1: Proj(x)
    ((2, 5, 3, 8), 16, 8, 2),  # odd sizes: ceil(size / 2); Proj(Pool(x))
    ((2, 6, 4, 8), 8, 4, 2),  # same width at stride 2: Pool(x) only
]


@pytest.mark.parametrize("shape, filters, head_dim, strides", TRANSFORMER_CASES)
def test_transformer_matches_reference(rng, shape, filters, head_dim, strides):
    x = images(rng, shape)
    layer = RelativeTransformerBlock2D(filters, head_dim=head_dim, strides=strides)
    layer(x)
    randomize(layer)
    expected = ref.relative_transformer_block(
        x.astype("float64"), transformer_weights(layer), filters // head_dim, strides
    )
    actual = to_numpy(layer(x))
    assert actual.shape == expected.shape == layer.compute_output_shape(shape)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


def test_transformer_table_follows_pooled_size():
    layer = RelativeTransformerBlock2D(16, head_dim=8, strides=2)  # shapes of a case above
    layer.build((None, 5, 3, 8))
    assert layer.num_heads == 2
    assert layer.relative_bias.size == (3, 2)
    assert tuple(layer.relative_bias.table.shape) == (2, 5, 3)


def test_transformer_called_at_another_size_resizes_the_table(rng):
    layer = RelativeTransformerBlock2D(8, head_dim=4)
    layer(images(rng, (2, 3, 4, 8)))
    randomize(layer)
    x = images(rng, (2, 4, 5, 8))
    weights = transformer_weights(layer)
    weights["table"] = resize_table_for_grid(weights["table"], 4, 5)
    expected = ref.relative_transformer_block(x.astype("float64"), weights, 2)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=ATOL, rtol=0)


def test_transformer_weights_load_at_another_size(rng, tmp_path):
    def model(size):
        inputs = keras.Input((*size, 8))
        block = RelativeTransformerBlock2D(8, head_dim=4, strides=2, name="block")
        return keras.Model(inputs, block(inputs))

    small = model((6, 6))
    randomize(small)
    path = os.path.join(tmp_path, "small.weights.h5")
    small.save_weights(path)
    large = model((10, 8))
    large.load_weights(path)
    table = to_numpy(large.get_layer("block").relative_bias.table)
    expected = resize_table_for_grid(to_numpy(small.get_layer("block").relative_bias.table), 5, 4)
    np.testing.assert_allclose(table, expected, atol=ATOL, rtol=0)
    dense_before = to_numpy(small.get_layer("block").qkv_dense.kernel)
    np.testing.assert_array_equal(to_numpy(large.get_layer("block").qkv_dense.kernel), dense_before)
    assert np.all(np.isfinite(to_numpy(large(images(rng, (1, 10, 8, 8))))))


def test_transformer_softmax_runs_in_float32(rng):
    # Logits far beyond bfloat16's resolution still give a finite, normalised softmax.
    keras.config.set_dtype_policy("mixed_bfloat16")
    layer = RelativeTransformerBlock2D(8, head_dim=4)
    x = 50.0 * images(rng, (1, 3, 3, 8))
    layer(x)
    randomize(layer)
    assert np.all(np.isfinite(to_numpy(layer(x))))


def test_transformer_standard_checks(rng):
    layer_checks.run_standard_checks(
        lambda: RelativeTransformerBlock2D(8, head_dim=4, strides=2), images(rng, (2, 4, 4, 4))
    )


# --------------------------------------------------------------------------- stochastic depth


@pytest.mark.parametrize(
    "make",
    [
        lambda rate: MBConv(4, drop_path_rate=rate, seed=3),
        lambda rate: RelativeTransformerBlock2D(4, head_dim=2, drop_path_rate=rate, seed=3),
    ],
)
def test_drop_path_drops_whole_samples_only_in_training(rng, make):
    x = images(rng, (32, 3, 3, 4))
    layer = make(0.5)
    layer(x)
    randomize(layer)
    inference = to_numpy(layer(x, training=False))
    per_sample_same = np.all(np.abs(inference - x) < 1e-6, axis=(1, 2, 3))
    assert not per_sample_same.any(), "no residual branch may be dropped at inference"
    trained = to_numpy(layer(x, training=True))
    dropped = np.all(np.abs(trained - x) < 1e-6, axis=(1, 2, 3))
    # Identity shortcut: a sample whose branches are all dropped is returned unchanged.
    assert 0 < dropped.sum() < len(x), f"dropped {dropped.sum()} of {len(x)} samples"


def test_mbconv_drop_path_rescales_kept_samples(rng):
    x = images(rng, (32, 3, 3, 4))
    layer = MBConv(4, drop_path_rate=0.25, seed=5)
    layer(x)
    randomize(layer)
    trained = to_numpy(layer(x, training=True)) - x
    layer.drop_path_rate = 0.0  # the same weights and batch statistics, nothing dropped
    full = to_numpy(layer(x, training=True)) - x
    kept = ~np.all(np.abs(trained) < 1e-6, axis=(1, 2, 3))
    assert kept.any() and not kept.all()
    np.testing.assert_allclose(trained[kept] * 0.75, full[kept], atol=1e-4, rtol=1e-5)


# --------------------------------------------------------------------------- configuration


def test_configs_hold_every_argument():
    layer = MBConv(
        8,
        strides=2,
        expansion_rate=6,
        se_ratio=0.5,
        stride_on="depthwise",
        drop_path_rate=0.1,
        synchronized=keras.backend.backend() == "tensorflow",
        kernel_size=5,
        norm_epsilon=1e-5,
        norm_momentum=0.9,
        seed=7,
    )
    restored = layer_checks.check_config_roundtrip(layer)
    assert restored.get_config() == layer.get_config()
    block = RelativeTransformerBlock2D(
        16, head_dim=8, strides=2, expansion_rate=2, drop_path_rate=0.2, norm_epsilon=1e-6, seed=1
    )
    layer_checks.check_config_roundtrip(block)
    layer_checks.check_config_roundtrip(SqueezeExcite(4, activation="relu"))


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"filters": 0}, "filters"),
        ({"filters": "8"}, "filters"),
        ({"filters": True}, "filters"),
        ({"filters": 8, "strides": 3}, "strides"),
        ({"filters": 8, "expansion_rate": 0}, "expansion_rate"),
        ({"filters": 8, "se_ratio": 1.5}, "se_ratio"),
        ({"filters": 8, "stride_on": "pool"}, "stride_on"),
        ({"filters": 8, "drop_path_rate": 1.0}, "drop_path_rate"),
        ({"filters": 8, "kernel_size": 0}, "kernel_size"),
    ],
)
def test_mbconv_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=rf"MBConv '.*': `{argument}` must be .*received"):
        MBConv(**kwargs)


def test_mbconv_synchronized_must_be_bool():
    with pytest.raises(
        TypeError, match=r"MBConv '.*': `synchronized` must be a bool; received str"
    ):
        MBConv(8, synchronized="yes")


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"filters": -4}, "filters"),
        ({"filters": 8, "head_dim": 0}, "head_dim"),
        ({"filters": 8, "head_dim": 4, "strides": 0}, "strides"),
        ({"filters": 8, "head_dim": 4, "drop_path_rate": -0.1}, "drop_path_rate"),
        ({"filters": 8, "head_dim": 4, "expansion_rate": 1.5}, "expansion_rate"),
    ],
)
def test_transformer_bad_arguments(kwargs, argument):
    pattern = rf"RelativeTransformerBlock2D '.*': `{argument}` must be .*received"
    with pytest.raises(ValueError, match=pattern):
        RelativeTransformerBlock2D(**kwargs)


def test_transformer_filters_must_be_a_multiple_of_head_dim():
    message = "`filters` must be a multiple of `head_dim`; received filters=40, head_dim=32"
    with pytest.raises(ValueError, match=re.escape(message)):
        RelativeTransformerBlock2D(40)


def test_squeeze_excite_bad_arguments():
    with pytest.raises(ValueError, match=r"SqueezeExcite '.*': `squeeze_filters` must be"):
        SqueezeExcite(0)
    with pytest.raises(ValueError, match=r"SqueezeExcite '.*': `activation` must be"):
        SqueezeExcite(2, activation="no_such_activation")


@pytest.mark.parametrize(
    "layer",
    [SqueezeExcite(2), MBConv(4), RelativeTransformerBlock2D(4, head_dim=2)],
    ids=["squeeze_excite", "mbconv", "transformer"],
)
def test_inputs_must_be_feature_maps(layer):
    with pytest.raises(
        ValueError, match=r"expected a feature map of rank 4 .*received input of shape"
    ):
        layer(np.zeros((2, 9, 4), "float32"))


def test_transformer_needs_a_known_spatial_size():
    block = RelativeTransformerBlock2D(8, head_dim=4)
    with pytest.raises(ValueError, match=r"spatial size must be known .*\(None, None, None, 8\)"):
        block.build((None, None, None, 8))
