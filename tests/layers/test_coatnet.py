"""CoAtNet's blocks (SqueezeExcite, MBConv, RelativeTransformerBlock2D) against the numpy
references, stochastic depth, resizing the relative table, the shared checks and errors."""

from __future__ import annotations

import os
import re

import keras
import numpy as np
import pytest
from keras import ops
from tiers import matrix

import layer_checks
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D, SqueezeExcite
from reference import coatnet as ref
from reference.relative_position_2d import resize_table_for_grid

pytestmark = pytest.mark.contract

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


def optional(tensor):
    """A weight that an option may remove (a bias, a layer scale): None when absent."""
    return None if tensor is None else to_numpy(tensor)


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
        "shortcut_bias": optional(projection.bias),
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
        "project_bias": optional(layer.project_conv.bias),
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
        "attention_scale": optional(layer.attention_scale),
        "ffn_scale": optional(layer.ffn_scale),
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


@pytest.mark.parametrize(*matrix("shape, filters, strides, stride_on, se_ratio", MBCONV_CASES))
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


# timm's coatnet_*_rw MBConv: every option away from the paper's default at once.
RW_MBCONV = dict(
    stride_on="pool",
    pool="avg",
    activation="silu",
    pre_activation=True,
    expand_from="input",
    se_from="hidden",
    se_activation="relu",
    se_position="before_norm",
    output_bias=False,
)
# The reference's keyword arguments among the options (the widths and biases show in the
# weights' shapes and presence instead).
REFERENCE_OPTIONS = ("activation", "pre_activation", "pool", "se_activation", "se_position")

MBCONV_OPTION_CASES = [
    # (input shape, filters, options); all at strides=2, shapes of the cases above
    # odd sizes: the average pools see padded cells (excluded), Proj(Pool(x)) without bias
    pytest.param((2, 5, 7, 8), 12, RW_MBCONV, id="rw"),
    # PyTorch's padding; at odd sizes it equals "same", so this one pins the output size
    pytest.param(
        (2, 5, 7, 8),
        12,
        dict(stride_on="depthwise", padding="symmetric", activation="silu", pool="avg"),
        id="symmetric-odd",
    ),
    # at even sizes "symmetric" pads one zero before, "same" one after: other pixels
    pytest.param(
        (2, 6, 6, 8),
        8,
        dict(stride_on="depthwise", padding="symmetric", se_position="after_activation"),
        id="symmetric-even",
    ),
]


@pytest.mark.parametrize("shape, filters, options", MBCONV_OPTION_CASES)
def test_mbconv_options_match_reference(rng, shape, filters, options):
    x = images(rng, shape)
    layer = MBConv(filters, strides=2, se_ratio=0.25, **options)
    layer(x)
    randomize(layer)
    weights = mbconv_weights(layer)
    kwargs = {key: options[key] for key in REFERENCE_OPTIONS if key in options}
    padding = options.get("padding", "same")
    stride_on = options["stride_on"]
    expected = ref.mbconv(x.astype("float64"), weights, 2, stride_on, padding=padding, **kwargs)
    actual = to_numpy(layer(x, training=False))
    assert actual.shape == expected.shape == layer.compute_output_shape(shape)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)
    if padding == "symmetric" and shape[1] % 2 == 0:
        # The test can fail: with the option ignored ("same" padding) the outputs differ.
        same = ref.mbconv(x.astype("float64"), weights, 2, stride_on, padding="same", **kwargs)
        assert np.abs(same - expected).max() > 1e-2
        other = MBConv(filters, strides=2, se_ratio=0.25, **{**options, "padding": "same"})
        other(x)
        other.set_weights(layer.get_weights())
        assert np.abs(to_numpy(other(x, training=False)) - actual).max() > 1e-2


def test_mbconv_rw_widths_and_parameters():
    layer = MBConv(12, strides=2, expansion_rate=4, se_ratio=0.25, **RW_MBCONV)
    layer.build((None, 5, 7, 8))
    # expand_from="input": 4 * 8 input channels; se_from="hidden": int(0.25 * 32)
    assert layer.hidden_filters == 32 and layer.squeeze_filters == 8
    assert layer.squeeze_excite.squeeze_filters == 8
    assert tuple(layer.expand_conv.kernel.shape) == (1, 1, 8, 32)
    assert layer.project_conv.bias is None and layer.shortcut_projection.bias is None
    assert layer.expand_conv.strides == (1, 1) and layer.depthwise_conv.strides == (1, 1)
    # pre BN 2*8 + 1x1 8*32 + BN 2*32 + dw 9*32 + SE (32*8+8 + 8*32+32) + BN 2*32
    # + 1x1 32*12 (no bias) + shortcut 8*12 (no bias); trainable only
    expected = 16 + 256 + 64 + 288 + 552 + 64 + 384 + 96
    assert sum(int(np.prod(w.shape)) for w in layer.trainable_weights) == expected == 1720


def test_mbconv_standard_checks(rng):
    layer_checks.run_standard_checks(
        lambda: MBConv(8, strides=2, stride_on="depthwise"), images(rng, (2, 4, 4, 4))
    )


@pytest.mark.large
def test_mbconv_rw_standard_checks(rng):
    layer_checks.run_standard_checks(
        lambda: MBConv(8, strides=2, **RW_MBCONV), images(rng, (2, 4, 4, 4))
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


@pytest.mark.parametrize(*matrix("shape, filters, head_dim, strides", TRANSFORMER_CASES))
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


TRANSFORMER_OPTION_CASES = [
    # (input shape, filters, head_dim, strides, options); shapes of the cases above
    # timm's _rw: average pool (odd sizes: padded cells excluded), attention at the input
    # width (2 heads of 4, projected 8 -> 16), shortcut without bias, layer scale
    pytest.param(
        (2, 5, 3, 8),
        16,
        4,
        2,
        dict(pool="avg", attention_width="input", shortcut_bias=False, layer_scale=0.5),
        id="rw-stride2",
    ),
    # at stride 1: the shortcut is a projection without bias, no pool
    pytest.param(
        (2, 3, 4, 8),
        16,
        4,
        1,
        dict(attention_width="input", shortcut_bias=False, layer_scale=1e-5),
        id="input-width-stride1",
    ),
]


@pytest.mark.parametrize("shape, filters, head_dim, strides, options", TRANSFORMER_OPTION_CASES)
def test_transformer_options_match_reference(rng, shape, filters, head_dim, strides, options):
    x = images(rng, shape)
    layer = RelativeTransformerBlock2D(filters, head_dim=head_dim, strides=strides, **options)
    layer(x)
    np.testing.assert_array_equal(to_numpy(layer.ffn_scale), np.float32(options["layer_scale"]))
    randomize(layer)  # the layer scales too: one factor per channel, not one for all
    weights = transformer_weights(layer)
    assert weights["shortcut_bias"] is None and weights["attention_scale"].shape == (filters,)
    heads = shape[-1] // head_dim  # attention_width="input"
    expected = ref.relative_transformer_block(
        x.astype("float64"), weights, heads, strides, pool=options.get("pool", "max")
    )
    actual = to_numpy(layer(x))
    assert actual.shape == expected.shape == layer.compute_output_shape(shape)
    np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("partition", ["block", "grid"])
def test_partitioned_transformer_matches_reference(rng, partition):
    # A 4 x 6 map in 2 x 3 windows: 2 x 2 windows of adjacent cells ("block") or cells
    # 2 rows and 2 columns apart ("grid"); the bias table is one window's, (3, 5).
    x = images(rng, (2, 4, 6, 8))
    layer = RelativeTransformerBlock2D(
        8, head_dim=4, partition=partition, partition_size=(2, 3), activation="gelu_tanh"
    )
    layer(x)
    randomize(layer)
    assert tuple(layer.relative_bias.table.shape) == (2, 3, 5)
    expected = ref.relative_transformer_block(
        x.astype("float64"), transformer_weights(layer), 2, partition=partition,
        partition_size=(2, 3), activation=ref.tanh_gelu,
    )  # fmt: skip
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=ATOL, rtol=0)


def test_transformer_input_width_sizes():
    block = RelativeTransformerBlock2D(16, head_dim=4, strides=2, attention_width="input")
    block.build((None, 5, 3, 8))  # shapes of a case above
    assert block.num_heads == 2 and block.attention_dim == 8
    assert tuple(block.qkv_dense.kernel.shape) == (8, 24)
    assert tuple(block.output_dense.kernel.shape) == (8, 16)
    assert tuple(block.relative_bias.table.shape) == (2, 5, 3)
    assert block.attention_scale is None and block.ffn_scale is None
    default = RelativeTransformerBlock2D(16, head_dim=4, strides=2)
    default.build((None, 5, 3, 8))
    assert default.num_heads == 4 and tuple(default.qkv_dense.kernel.shape) == (8, 48)


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


@pytest.mark.large
def test_transformer_rw_standard_checks(rng):
    def make():
        return RelativeTransformerBlock2D(
            8,
            head_dim=2,
            strides=2,
            pool="avg",
            attention_width="input",
            shortcut_bias=False,
            layer_scale=0.5,
        )

    layer_checks.run_standard_checks(make, images(rng, (2, 4, 4, 4)))


@pytest.mark.large
@pytest.mark.parametrize(
    "options",
    [
        dict(partition="grid", partition_size=2, activation="gelu_tanh"),  # MaxViT
        dict(norm="batch", norm_momentum=0.9, strides=2, pool="max3"),  # coatnet_bn / rmlp_1
        dict(position_bias="mlp", position_bias_dim=4, position_bias_dropout=0.125),  # rmlp
    ],
)
def test_transformer_timm_option_standard_checks(rng, options):
    def make():
        return RelativeTransformerBlock2D(8, head_dim=4, **options)

    layer_checks.run_standard_checks(make, images(rng, (2, 4, 4, 8)))


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


def test_configs_hold_the_rw_options(rng):
    layer = MBConv(8, strides=2, kernel_size=5, padding="symmetric", **RW_MBCONV)
    restored = layer_checks.check_config_roundtrip(layer)
    for key, value in {**RW_MBCONV, "padding": "symmetric"}.items():
        assert getattr(restored, key) == value, key
    block = RelativeTransformerBlock2D(
        16, head_dim=4, pool="avg", attention_width="input", shortcut_bias=False, layer_scale=0.5
    )
    restored = layer_checks.check_config_roundtrip(block)
    assert (restored.pool, restored.attention_width) == ("avg", "input")
    assert (restored.shortcut_bias, restored.layer_scale) == (False, 0.5)
    # timm's coatnet_bn / coatnet_rmlp / MaxViT options.
    options = dict(norm="batch", norm_momentum=0.9, position_bias="mlp", position_bias_dim=8,
                   position_bias_dropout=0.125, activation="gelu_tanh", partition="grid",
                   partition_size=(2, 2))  # fmt: skip
    block = RelativeTransformerBlock2D(16, head_dim=8, **options)
    restored = layer_checks.check_config_roundtrip(block, images(rng, (1, 4, 4, 16)))
    for key, value in {**options, "partition_size": (2, 2)}.items():
        assert getattr(restored, key) == value, key
    assert isinstance(restored.attention_norm, keras.layers.BatchNormalization)
    layer_checks.check_config_roundtrip(MBConv(8, strides=2, stride_on="pool", stride_pool="avg"))
    # A callable activation round-trips through its registered name.
    se = MBConv(8, activation=keras.activations.silu, se_activation=keras.activations.relu)
    restored = layer_checks.check_config_roundtrip(se)
    assert restored.get_config()["activation"] == se.get_config()["activation"]
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
        ({"filters": 8, "stride_on": "conv"}, "stride_on"),
        ({"filters": 8, "drop_path_rate": 1.0}, "drop_path_rate"),
        ({"filters": 8, "kernel_size": 0}, "kernel_size"),
        ({"filters": 8, "pool": "min"}, "pool"),
        ({"filters": 8, "pool": None}, "pool"),
        ({"filters": 8, "stride_on": "Pool"}, "stride_on"),
        ({"filters": 8, "expand_from": "hidden"}, "expand_from"),
        ({"filters": 8, "se_from": "input"}, "se_from"),
        ({"filters": 8, "se_position": "after_norm"}, "se_position"),
        ({"filters": 8, "padding": "valid"}, "padding"),
    ],
)
def test_mbconv_bad_arguments(kwargs, argument):
    # Types (an int given as 1.5) are TypeErrors, values ValueErrors; both name the argument
    # and what was given (the shared checks of layers._checks, or "received" in the rest).
    with pytest.raises(
        (ValueError, TypeError), match=rf"MBConv '.*': `{argument}` must be .*(received|got)"
    ):
        MBConv(**kwargs)


@pytest.mark.parametrize("argument", ["activation", "se_activation"])
def test_mbconv_bad_activations(argument):
    # The shared activation check (layers._checks) names the argument and the value given.
    expected = rf"MBConv '.*': `{argument}` must be a Keras activation.*got 'no_such_activation'"
    with pytest.raises(ValueError, match=expected):
        MBConv(8, **{argument: "no_such_activation"})


@pytest.mark.parametrize("argument", ["synchronized", "pre_activation", "output_bias"])
def test_mbconv_flags_must_be_bools(argument):
    with pytest.raises(
        TypeError, match=rf"MBConv '.*': `{argument}` must be True or False, got 'yes'"
    ):
        MBConv(8, **{argument: "yes"})


def test_mbconv_symmetric_padding_needs_an_odd_kernel():
    with pytest.raises(
        ValueError,
        match=r"MBConv '.*': `padding='symmetric'` needs an odd `kernel_size`.*kernel_size=4",
    ):
        MBConv(8, kernel_size=4, padding="symmetric")


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"filters": -4}, "filters"),
        ({"filters": 8, "head_dim": 0}, "head_dim"),
        ({"filters": 8, "head_dim": 4, "strides": 0}, "strides"),
        ({"filters": 8, "head_dim": 4, "drop_path_rate": -0.1}, "drop_path_rate"),
        ({"filters": 8, "head_dim": 4, "expansion_rate": 1.5}, "expansion_rate"),
        ({"filters": 8, "head_dim": 4, "pool": "min"}, "pool"),
        ({"filters": 8, "head_dim": 4, "attention_width": "both"}, "attention_width"),
        ({"filters": 8, "head_dim": 4, "norm": "group"}, "norm"),
        ({"filters": 8, "head_dim": 4, "partition": "window", "partition_size": 2}, "partition"),
        ({"filters": 8, "head_dim": 4, "partition": "grid", "partition_size": 0}, "partition_size"),
    ],
)
def test_transformer_bad_arguments(kwargs, argument):
    pattern = rf"RelativeTransformerBlock2D '.*': `{argument}` must be .*(received|got)"
    with pytest.raises((ValueError, TypeError), match=pattern):
        RelativeTransformerBlock2D(**kwargs)


@pytest.mark.parametrize(
    "kwargs, shape, message",
    [
        ({"partition": "grid"}, None, r"partition='grid' needs `partition_size`"),
        ({"partition_size": 2}, None, r"`partition_size` is used with partition="),
        ({"partition": "block", "partition_size": 2, "strides": 2}, None,
         r"`strides` must be 1; received strides=2"),
        ({"partition": "block", "partition_size": 3}, (1, 4, 6, 8),
         r"multiples of partition_size=\(3, 3\); received input shape \(1, 4, 6, 8\)"),
        ({"partition": "grid", "partition_size": 2}, (1, 4, 6, 4),
         r"input channels must equal filters=8; received input shape \(1, 4, 6, 4\)"),
    ],
)  # fmt: skip
def test_partition_errors(kwargs, shape, message):
    with pytest.raises(ValueError, match=rf"RelativeTransformerBlock2D '.*': .*{message}"):
        RelativeTransformerBlock2D(8, head_dim=4, **kwargs).build(shape)


@pytest.mark.parametrize("value", [0, -0.5, True, "0.5"])
def test_transformer_layer_scale_must_be_positive(value):
    given = re.escape(repr(value))
    pattern = (
        rf"RelativeTransformerBlock2D '.*': `layer_scale` must be a positive number, got {given}"
    )
    with pytest.raises(ValueError, match=pattern):
        RelativeTransformerBlock2D(8, head_dim=4, layer_scale=value)


def test_transformer_shortcut_bias_must_be_bool():
    with pytest.raises(
        TypeError, match=r"RelativeTransformerBlock2D '.*': `shortcut_bias` must be True or False"
    ):
        RelativeTransformerBlock2D(8, head_dim=4, shortcut_bias="no")


def test_transformer_input_width_needs_channels_a_multiple_of_head_dim():
    block = RelativeTransformerBlock2D(8, head_dim=4, attention_width="input")
    with pytest.raises(
        ValueError,
        match=r"attention_width='input' the input channels must be a multiple of head_dim=4"
        r".*\(None, 3, 3, 6\)",
    ):
        block.build((None, 3, 3, 6))


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


def test_layer_scale_accepts_numpy_scalars():
    block = RelativeTransformerBlock2D(16, head_dim=8, layer_scale=np.float32(0.5))
    assert block.layer_scale == 0.5 and type(block.layer_scale) is float
    with pytest.raises(ValueError, match="`layer_scale` must be a positive number"):
        RelativeTransformerBlock2D(16, head_dim=8, layer_scale=np.bool_(True))


# --------------------------------------------------------------------------- fast paths


@pytest.mark.parametrize(
    "size, kernel, strides", [(9, 3, 1), (8, 3, 2), (9, 3, 2), (7, 5, 1), (6, 5, 2)], ids=str
)
def test_depthwise_by_shifts_matches_reference(rng, size, kernel, strides):
    """JAX's depthwise override (keras_posenc/backend/jax.py), checked on every backend."""
    from keras_posenc.backend.algorithms import depthwise_by_shifts

    x = images(rng, (2, size, size, 5))
    weights = rng.standard_normal((kernel, kernel, 5, 1)).astype("float32")
    pad = ((strides - 1) + (kernel - 1)) // 2
    actual = depthwise_by_shifts(
        ops.convert_to_tensor(x), ops.convert_to_tensor(weights), strides, pad
    )
    expected = ref.depthwise_conv2d(
        x.astype("float64"), weights.astype("float64"), strides, padding="symmetric"
    )
    np.testing.assert_allclose(ops.convert_to_numpy(actual), expected, atol=1e-5)
