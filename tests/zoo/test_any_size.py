"""CoAtNet and MaxViT built for images of any size (input_shape=(None, None, 3)).

Numerical truth: a model built for the concrete size with the same weights copied in
(``set_weights``). Where the concrete model's relative tables have another size than the
any-size model's, they are the any-size model's tables resized by
`RelativePositionBias2D.resize_table` (timm's rule for a new image size), so the any-size
model must resize in its call exactly as a checkpoint is resized for a model built at that
size. The sizes a graph sees only at run time (exports) go through the same code as tensor
sizes, checked here against the int-size path at the layer level."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from tiers import matrix

from keras_posenc import zoo
from keras_posenc.layers import ContinuousPositionBias2D, RelativePositionBias2D
from keras_posenc.layers.relative_index import relative_index_2d, relative_index_2d_tensor
from keras_posenc.layers.relative_position_2d import bilinear_matrix, bilinear_matrix_tensor

pytestmark = pytest.mark.contract

# Built through zoo.create (on JAX it initialises all weights in one compiled program).
TINY_COATNET = {"blocks": (1, 1, 1, 1, 1), "channels": (8, 8, 16, 32, 32), "head_dim": 16,
                "num_classes": 5, "pre_logits": False}  # fmt: skip
TINY_MAXVIT = {"blocks": (2, 1, 1, 1, 1), "channels": (8, 8, 16, 16, 32), "head_dim": 8,
               "num_classes": 5}  # fmt: skip


def build_coatnet(**options):
    return zoo.create("coatnet_0", **options)


def build_maxvit(**options):
    return zoo.create("maxvit_t", **options)


@pytest.fixture(scope="module")
def any_size_maxvit():
    return build_maxvit(input_shape=(None, None, 3), base_size=BASE, **TINY_MAXVIT)


# The tables are sized for 64 x 64 images: one size equal to it (no resizing), one not.
BASE = 64
SIZES = ((64, 64), (96, 64))


def images(height, width, seed=1):
    return np.random.default_rng(seed).standard_normal((2, height, width, 3)).astype("float32")


def numpy_out(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def copied_weights(source, target):
    """``source``'s weights for ``target``: relative tables resized to ``target``'s."""
    values = []
    for value, variable in zip(source.get_weights(), target.weights):
        if variable.path.endswith("relative_bias/table"):
            height, width = ((n + 1) // 2 for n in variable.shape[1:])
            value = RelativePositionBias2D.resize_table(value, (height, width))
        values.append(value)
    return values


@pytest.mark.parametrize("position_bias", ["table", "mlp"])
def test_coatnet_any_size_gives_the_logits_of_a_model_built_for_the_size(position_bias):
    options = {"transformer_options": {"position_bias": position_bias, "position_bias_dim": 16}}
    any_size = build_coatnet(input_shape=(None, None, 3), base_size=BASE, **TINY_COATNET,
                             **options)  # fmt: skip
    assert any_size.get_layer("stage3_block1").relative_bias.size == (4, 4)
    for height, width in SIZES:
        built = build_coatnet(input_shape=(height, width, 3), **TINY_COATNET, **options)
        built.set_weights(copied_weights(any_size, built))
        x = images(height, width)
        expected = numpy_out(built, x)
        np.testing.assert_allclose(numpy_out(any_size, x), expected, atol=1e-5, rtol=1e-5)
    # The resized table matters: without resizing the 96 x 64 model's table differs.
    assert built.get_layer("stage3_block1").relative_bias.size == (6, 4)


def test_maxvit_any_size_gives_the_logits_of_a_model_built_for_the_size(any_size_maxvit):
    any_size = any_size_maxvit
    window = any_size.get_layer("stage1_block1_block_attention").partition_size
    assert window == (2, 2)
    for height, width in ((64, 64), (128, 64)):
        built = build_maxvit(input_shape=(height, width, 3), partition_size=window,
                             **TINY_MAXVIT)  # fmt: skip
        built.set_weights(any_size.get_weights())
        x = images(height, width)
        np.testing.assert_allclose(
            numpy_out(any_size, x), numpy_out(built, x), atol=1e-5, rtol=1e-5
        )


def test_maxvit_any_size_refuses_or_pads_sizes_off_its_windows(any_size_maxvit, tmp_path):
    any_size = any_size_maxvit
    with pytest.raises(ValueError, match=r"build_maxvit: the images' height must be a multiple "
                       r"of 64 .*\(1, 96, 64, 3\).*pad_to_multiple=True"):  # fmt: skip
        any_size(np.zeros((1, 96, 64, 3), "float32"))
    padding = build_maxvit(input_shape=(None, None, 3), base_size=BASE, pad_to_multiple=True,
                           **TINY_MAXVIT)  # fmt: skip
    padding.set_weights(any_size.get_weights())
    x = images(100, 64)
    padded = np.pad(x, ((0, 0), (0, 28), (0, 0), (0, 0)))
    np.testing.assert_allclose(numpy_out(padding, x), numpy_out(any_size, padded), atol=1e-6)
    # Saved and loaded (the route of exports from JAX and PyTorch), it still pads.
    padding.save(tmp_path / "padding.keras")
    loaded = keras.saving.load_model(tmp_path / "padding.keras")
    np.testing.assert_allclose(numpy_out(loaded, x), numpy_out(padding, x), atol=1e-6)


def test_any_size_bad_arguments():
    with pytest.raises(ValueError, match=r"build_coatnet: `base_size` .* divisible by 32"):
        build_coatnet(input_shape=(None, None, 3), base_size=(64, 70), **TINY_COATNET)
    shape = r"(build_coatnet|CoAtNetConfig): `input_shape` .*received \(None, 64\)"
    with pytest.raises(ValueError, match=shape):
        build_coatnet(input_shape=(None, 64), **TINY_COATNET)
    with pytest.raises(TypeError, match="build_maxvit: `pad_to_multiple`"):
        build_maxvit(input_shape=(None, None, 3), pad_to_multiple="yes", **TINY_MAXVIT)
    from keras_posenc.layers.coatnet import RelativeTransformerBlock2D

    with pytest.raises(ValueError, match=r"'b'.*`bias_size` is for attention over the whole"):
        RelativeTransformerBlock2D(16, head_dim=8, partition="block", partition_size=2,
                                   bias_size=4, name="b")  # fmt: skip
    block = RelativeTransformerBlock2D(16, head_dim=8, name="c")
    with pytest.raises(ValueError, match=r"'c'.*spatial size must be known.*`bias_size`"):
        block.build((None, None, None, 8))


@pytest.mark.parametrize(*matrix("height, width", [(1, 1), (3, 5), (6, 4)], keep=[0, 1]))
def test_tensor_sizes_compute_what_int_sizes_do(height, width):
    """The in-graph path of sizes known at run time only, against the int-size path."""
    h, w = (keras.ops.convert_to_tensor(v, "int32") for v in (height, width))
    index = keras.ops.convert_to_numpy(relative_index_2d_tensor(h, w))
    np.testing.assert_array_equal(index, relative_index_2d(height, width).reshape(-1))
    for in_size in (3, 7):
        matrix = keras.ops.convert_to_numpy(bilinear_matrix_tensor(in_size, 2 * h - 1))
        np.testing.assert_allclose(matrix, bilinear_matrix(in_size, 2 * height - 1), atol=1e-6)
    table = RelativePositionBias2D(num_heads=2, size=(2, 3))
    mlp = ContinuousPositionBias2D(num_heads=2, size=(2, 3), hidden_dim=8)
    swin = ContinuousPositionBias2D(num_heads=2, size=(2, 3), hidden_dim=8, mode="swin",
                                    pretrained_size=(4, 4))  # fmt: skip
    for layer in (table, mlp, swin):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(layer(size=(h, w))),
            keras.ops.convert_to_numpy(layer(size=(height, width))),
            atol=1e-6,
        )


@pytest.mark.full
@pytest.mark.parametrize("format", ["tf_saved_model", "onnx", "litert"])
def test_any_size_models_export_with_dynamic_height_and_width(tmp_path, format):
    """Exported with unknown height and width, the artifact computes the relative bias in
    its graph: verified against Keras at two sizes, neither the tables' own."""
    from keras_posenc.export import export_model

    coatnet = build_coatnet(input_shape=(None, None, 3), base_size=BASE, **TINY_COATNET)
    maxvit = build_maxvit(input_shape=(None, None, 3), base_size=BASE, **TINY_MAXVIT)
    for name, model, sizes in (("coatnet", coatnet, ((96, 64), (128, 160))),
                               ("maxvit", maxvit, ((128, 64), (64, 192)))):  # fmt: skip
        suffix = {"onnx": ".onnx", "litert": ".tflite"}.get(format, "")
        report = export_model(
            model, str(tmp_path / name) + suffix, format=format,
            verify_inputs=[images(*size) for size in sizes],
        )  # fmt: skip
        assert report.inputs[0][1][1:3] == [None, None], report.inputs
        assert [shapes[0][1:3] for shapes in report.verified_shapes] == list(sizes)
