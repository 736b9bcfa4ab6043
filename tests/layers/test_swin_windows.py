"""Swin's shifted windows in `RelativeTransformerBlock2D` (``partition="block"``, ``shift``):
against the numpy reference written from the paper (tests/reference/swin.py), against
keras-hub's ``SwinTransformerBlock`` on copied weights, the mask of shifted.py, sizes known
at run time only, the config and the errors."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks
from keras_posenc.layers.coatnet import RelativeTransformerBlock2D
from keras_posenc.layers.coatnet.shifted import roll_map, shifted_window_mask
from reference import coatnet as coatnet_ref
from reference import swin as ref

pytestmark = pytest.mark.contract

ATOL = 1e-5


def to_numpy(tensor):
    return ops.convert_to_numpy(tensor).astype("float64")


def images(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign((0.5 * rng.standard_normal(tuple(weight.shape))).astype("float32"))


def block_weights(layer):
    def dense(d):
        return to_numpy(d.kernel), to_numpy(d.bias)

    def norm(n):
        return to_numpy(n.gamma), to_numpy(n.beta)

    return {
        "attention_norm": norm(layer.attention_norm),
        "ffn_norm": norm(layer.ffn_norm),
        "qkv": dense(layer.qkv_dense),
        "attention_output": dense(layer.output_dense),
        "ffn_hidden": dense(layer.ffn_hidden),
        "ffn_output": dense(layer.ffn_output),
        "table": to_numpy(layer.relative_bias.table),
    }


# --------------------------------------------------------------------------- the reference


@pytest.mark.neutral
def test_reference_windows_are_displaced_by_the_shift():
    # 8 cells, windows of 4 shifted by 2: [0, 2), [2, 6), [6, 8); unshifted: [0, 4), [4, 8).
    np.testing.assert_array_equal(ref.displaced_windows(8, 4, 2), [0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(ref.displaced_windows(8, 4, 0), [0, 0, 0, 0, 1, 1, 1, 1])


@pytest.mark.neutral
def test_reference_without_shift_is_the_block_partition():
    """Shift 0: the windows of MaxViT's block attention (reference.coatnet)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 8))
    w = {"qkv": (rng.standard_normal((8, 24)), rng.standard_normal(24)),
         "attention_output": (rng.standard_normal((8, 8)), rng.standard_normal(8))}  # fmt: skip
    table = rng.standard_normal((2, 3, 5))
    np.testing.assert_allclose(
        ref.shifted_window_attention(x, w, 2, table, (2, 3), (0, 0)),
        coatnet_ref.partitioned_attention_2d(x, w, 2, table, "block", (2, 3)),
        atol=1e-12,
    )


# --------------------------------------------------------------------------- the block


@pytest.mark.parametrize(
    "shape, window, shift",
    [
        ((2, 8, 8, 8), 4, 2),  # Swin's: square windows shifted by half
        ((2, 4, 6, 8), (2, 3), (1, 1)),
        ((1, 6, 6, 8), (3, 2), (2, 1)),
        ((1, 4, 6, 8), (2, 3), (0, 2)),  # shifted along the columns only
        ((2, 8, 8, 8), 4, 0),  # no shift: block attention
    ],
)
def test_shifted_block_matches_reference(shape, window, shift):
    x = images(shape)
    layer = RelativeTransformerBlock2D(
        8, head_dim=4, partition="block", partition_size=window, shift=shift
    )
    layer(x)
    randomize(layer)
    window = (window, window) if isinstance(window, int) else window
    shift = (shift, shift) if isinstance(shift, int) else shift
    expected = ref.swin_block(x.astype("float64"), block_weights(layer), 2, window, shift)
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=ATOL, rtol=0)


def test_half_shift_is_half_the_window():
    for size, half in ((7, (3, 3)), ((4, 5), (2, 2))):
        block = RelativeTransformerBlock2D(
            8, 4, partition="block", partition_size=size, shift="half"
        )
        assert block.shift == half
    for no_shift in (None, 0, (0, 0)):
        block = RelativeTransformerBlock2D(8, 4, partition="grid", partition_size=2, shift=no_shift)
        assert block.shift is None


def test_mask_keeps_the_displaced_windows_apart():
    """The mask of the rolled map's windows: True exactly where the cells, rolled back,
    fall in the same displaced window of the reference."""
    height, width, size, shift = 6, 8, (3, 4), (1, 2)
    mask = ops.convert_to_numpy(shifted_window_mask(height, width, size, shift))
    assert mask.shape == (4, 12, 12) and mask.dtype == bool
    rows = ref.displaced_windows(height, size[0], shift[0])
    cols = ref.displaced_windows(width, size[1], shift[1])
    # The original cell at each rolled position: rolled up and left by the shift.
    cells = np.stack(np.meshgrid(np.arange(height), np.arange(width), indexing="ij"), -1)
    rolled = ops.convert_to_numpy(roll_map(cells[None], shift))[0]
    for index, (a, b) in enumerate([(a, b) for a in range(2) for b in range(2)]):
        window = rolled[a * 3 : (a + 1) * 3, b * 4 : (b + 1) * 4].reshape(-1, 2)
        label = rows[window[:, 0]] * 10 + cols[window[:, 1]]
        np.testing.assert_array_equal(mask[index], label[:, None] == label[None, :])
    assert mask[0].all() and not mask[3].all()  # a window in place; the corner window


def test_sizes_unknown_at_build():
    x = images((2, 8, 12, 8))
    block = RelativeTransformerBlock2D(8, 4, partition="block", partition_size=4, shift=2)
    block.build((None, None, None, 8))
    randomize(block)
    expected = ref.swin_block(x.astype("float64"), block_weights(block), 2, (4, 4), (2, 2))
    np.testing.assert_allclose(to_numpy(block(x)), expected, atol=ATOL, rtol=0)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # Height and width known at run time only: the mask is computed in the graph.
        traced = tf.function(block, input_signature=[tf.TensorSpec((None, None, None, 8))])
        np.testing.assert_allclose(to_numpy(traced(x)), expected, atol=ATOL, rtol=0)


def test_config_holds_the_shift():
    block = RelativeTransformerBlock2D(8, 4, partition="block", partition_size=(2, 3), shift=(1, 2))
    restored = layer_checks.check_config_roundtrip(block, images((1, 4, 6, 8)))
    assert restored.shift == (1, 2) and block.get_config()["shift"] == [1, 2]


# --------------------------------------------------------------------------- keras-hub


def copy_into(ours, hub):
    """keras-hub's SwinTransformerBlock weights into our block (timm's table layout)."""
    attention = hub.attn
    pairs = [
        (ours.attention_norm, hub.norm1, ("gamma", "beta")),
        (ours.ffn_norm, hub.norm2, ("gamma", "beta")),
        (ours.qkv_dense, attention.qkv, ("kernel", "bias")),
        (ours.output_dense, attention.proj, ("kernel", "bias")),
        (ours.ffn_hidden, hub.mlp.fc1, ("kernel", "bias")),
        (ours.ffn_output, hub.mlp.fc2, ("kernel", "bias")),
    ]
    for target, source, names in pairs:
        for name in names:
            getattr(target, name).assign(getattr(source, name))
    # ((2h - 1)(2w - 1), heads), row-major over the offsets: ours is (heads, 2h - 1, 2w - 1).
    table = ops.convert_to_numpy(attention.relative_position_bias_table)
    ours.relative_bias.table.assign(table.T.reshape(ours.relative_bias.table.shape))


# keras-hub passes its own mask as a call argument, which Keras takes for an input's.
@pytest.mark.filterwarnings("ignore:Layer 'attn' .* was passed an input with a mask")
@pytest.mark.parametrize("shift", [0, 2])
def test_equal_to_keras_hub_swin_block(shift):
    layers = pytest.importorskip("keras_hub.src.models.swin_transformer.swin_transformer_layers")
    height, width, channels, heads, window = 8, 12, 16, 2, 4
    x = images((2, height, width, channels), seed=1)
    tokens = x.reshape(2, height * width, channels)
    hub = layers.SwinTransformerBlock(
        dim=channels, input_resolution=(height, width), num_heads=heads,
        window_size=window, shift_size=shift,
    )  # fmt: skip
    hub(tokens)
    randomize(hub, seed=2)
    ours = RelativeTransformerBlock2D(
        channels, head_dim=channels // heads, partition="block", partition_size=window,
        shift=shift,
    )  # fmt: skip
    ours(x)
    copy_into(ours, hub)
    expected = to_numpy(hub(tokens)).reshape(x.shape)
    np.testing.assert_allclose(to_numpy(ours(x)), expected, atol=ATOL, rtol=0)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, shape, message",
    [
        ({"partition": "grid", "partition_size": 2, "shift": 1}, None,
         r"'s'.*shifted windows need partition='block'.*partition='grid'"),
        ({"shift": 1}, None, r"'s'.*shifted windows need partition='block'.*partition=None"),
        ({"partition": "grid", "partition_size": 4, "shift": "half"}, None,
         r"'s'.*shift='half' needs partition='block'"),
        ({"partition": "block", "partition_size": 4, "shift": 4}, None,
         r"'s'.*`shift` must be smaller than the window, partition_size=\(4, 4\)"),
        ({"partition": "block", "partition_size": (4, 2), "shift": (1, 2)}, None,
         r"'s'.*`shift` must be smaller than the window"),
        ({"partition": "block", "partition_size": 4, "shift": -1}, None,
         r"'s'.*`shift` must be None, 'half', a non-negative int"),
        ({"partition": "block", "partition_size": 4, "shift": "third"}, None,
         r"'s'.*`shift` must be None, 'half'"),
        ({"partition": "block", "partition_size": 4, "shift": 2}, (1, 4, 8, 8),
         r"'s'.*a side one window long cannot be shifted.*Swin uses shift 0"),
        ({"partition": "block", "partition_size": 4, "shift": 2}, (1, 8, 10, 8),
         r"'s'.*multiples of partition_size=\(4, 4\) \(pad the map first; keras-hub's Swin pads"),
    ],
)  # fmt: skip
def test_shift_errors(kwargs, shape, message):
    with pytest.raises(ValueError, match=message):
        block = RelativeTransformerBlock2D(8, head_dim=4, name="s", **kwargs)
        block.build(shape)


def test_shift_errors_at_call_for_sizes_unknown_at_build():
    block = RelativeTransformerBlock2D(8, 4, partition="block", partition_size=4, shift=2, name="s")
    block.build((None, None, None, 8))
    with pytest.raises(ValueError, match=r"'s'.*a side one window long cannot be shifted"):
        block(images((1, 8, 4, 8)))
