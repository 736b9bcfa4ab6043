"""export_model: SavedModel and ONNX from every backend, verified against the Keras model."""

from __future__ import annotations

import os

import keras
import numpy as np
import pytest

from keras_posenc import export, layers
from keras_posenc.export import export_model


def relative_model() -> keras.Model:
    """A small sequence model with every relative attention mode (and their index functions)."""
    inputs = keras.Input((None, 16), name="tokens")
    x = layers.MultiHeadRelativeAttention(2, 8, relative="keys_values", max_distance=3)(
        inputs, inputs
    )
    x = layers.MultiHeadRelativeAttention(2, 8, relative="keys", bucketing="piecewise")(x, x)
    x = layers.MultiHeadRelativeAttention(
        2,
        8,
        relative="bias",
        bucketing="log",
        num_buckets=8,
        max_distance=20,
        rotary_max_wavelength=100,
    )(x, x, use_causal_mask=True)
    return keras.Model(inputs, x)


def every_layer_model() -> keras.Model:
    """A small two-input model holding every public layer that takes tensors."""
    seq = keras.Input((None, 16), name="sequence")
    x = layers.GLUConv1D(16, 3)(seq)
    x = layers.MUSEAttention(2, 8, conv="static")(x)
    x = layers.MUSEAttention(2, 8, conv="dynamic", kernel_sizes=(3, 5))(x)
    x = layers.MUSEEncoderLayer(32, 2, kernel_sizes=(3, 5))(x)
    x = layers.MUSEDecoderLayer(32, 2, conv="static", kernel_sizes=(1, 3))(x, x)
    x = layers.MultiHeadRelativeAttention(2, 8, relative="keys_values")(x, x)
    x = layers.RelativeTransformerEncoder(
        32, 2, relative="bias", bucketing="log", num_buckets=8, max_distance=16
    )(x)
    x = layers.RelativeTransformerDecoder(32, 2, relative="keys", bucketing="piecewise")(x, x)
    x, _ = layers.ConvS2SAttention(16, 16)(x, x, (x, x))
    x = layers.GradMultiply(0.5)(x)
    image = keras.Input((16, 16, 3), name="image")
    y = layers.SpatialPadding2D(1, mode="reflect")(image)
    y = keras.layers.Conv2D(8, 3)(y)
    y = layers.MBConv(16, strides=2)(y)  # with SqueezeExcite inside
    y = layers.RelativeTransformerBlock2D(32, head_dim=8, strides=2)(y)  # RelativePositionBias2D
    y = keras.layers.GlobalAveragePooling2D()(y)
    return keras.Model([seq, image], [x, y])


# Called with lengths rather than tensors and used by no tensor layer of the library, so
# it cannot sit in a functional graph; its index functions are exported through the others.
NOT_IN_EVERY_LAYER_MODEL = {"MultiScaleRelativePositionEmbedding"}


def test_every_layer_model_holds_every_public_layer():
    public = {
        name
        for name in layers.__all__
        if isinstance(getattr(layers, name), type)
        and issubclass(getattr(layers, name), keras.layers.Layer)
    }
    used = {type(layer).__name__ for layer in every_layer_model()._flatten_layers()}
    assert public - used == NOT_IN_EVERY_LAYER_MODEL


@pytest.mark.parametrize("format", ["onnx", "tf_saved_model"])
def test_every_public_layer_exports(tmp_path, format):
    path = os.path.join(tmp_path, "every.onnx" if format == "onnx" else "every")
    report = export_model(every_layer_model(), path, format=format)
    assert report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, 16), (2, 16, 16, 3)], [(2, 11, 16), (2, 16, 16, 3)]]


@pytest.mark.parametrize("format", ["onnx", "tf_saved_model"])
def test_export_and_verify_at_two_lengths(tmp_path, format):
    model = relative_model()
    path = os.path.join(tmp_path, "model.onnx" if format == "onnx" else "saved")
    report = export_model(model, path, format=format)
    assert report.max_abs_difference is not None and report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, 16)], [(2, 11, 16)]]
    expected_route = "direct" if keras.backend.backend() == "tensorflow" else "subprocess"
    assert expected_route in report.route
    assert list(report.inputs[0][1]) == [None, None, 16]
    assert (report.opset is not None) == (format == "onnx")
    assert os.path.exists(path)
    text = report.table()
    assert "max |difference|" in text and format in text


def test_mixed_precision_model_is_exported_in_float32(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = relative_model()
    keras.config.set_dtype_policy("float32")
    report = export_model(model, os.path.join(tmp_path, "m.onnx"), atol=0.1)
    assert any("exported in float32" in note for note in report.notes)
    assert report.outputs[0][2] == "tensor(float)"


def test_verification_failure_names_the_difference(tmp_path, monkeypatch):
    def wrong(report, inputs):
        arrays = inputs if isinstance(inputs, list) else [inputs]
        return [np.zeros((*arrays[0].shape[:2], 16), "float32") + 1.0]

    monkeypatch.setattr(export, "_run_artifact", wrong)
    with pytest.raises(ValueError, match=r"differs from the Keras model by .* > atol=0.0001"):
        export_model(relative_model(), os.path.join(tmp_path, "m.onnx"))


def test_unknown_format_and_missing_packages(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="`format` must be one of 'onnx', 'tf_saved_model'"):
        export_model(relative_model(), os.path.join(tmp_path, "m"), format="tflite")
    monkeypatch.setitem(export.EXPORTER_PACKAGES, "onnx", ("no_such_onnx_package",))
    with pytest.raises(
        ImportError, match=r'no_such_onnx_package.*pip install "keras-posenc\[export\]"'
    ):
        export_model(relative_model(), os.path.join(tmp_path, "m.onnx"))


def test_subclassed_model_needs_an_input_signature(tmp_path):
    class Plain(keras.Model):
        def call(self, x):
            return x * 2.0

    with pytest.raises(ValueError, match="pass `input_signature"):
        export_model(Plain(), os.path.join(tmp_path, "m.onnx"))


class NotRegistered(keras.layers.Layer):
    def call(self, x):
        return x + 1.0


def test_unregistered_custom_layer(tmp_path):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, NotRegistered()(inputs))
    path = os.path.join(tmp_path, "m.onnx")
    if keras.backend.backend() == "tensorflow":
        # Exported directly: nothing is deserialised, so an unregistered layer is fine.
        assert export_model(model, path).max_abs_difference == 0.0
    else:
        with pytest.raises(RuntimeError, match="register_keras_serializable"):
            export_model(model, path)
