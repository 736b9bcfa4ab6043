"""export_model: SavedModel and ONNX from every backend, verified against the Keras model."""

from __future__ import annotations

import os
import re

import keras
import numpy as np
import pytest

from keras_posenc import export, layers, zoo
from keras_posenc.export import export_model, export_names, memory, verification
from keras_posenc.export import model as exporting

pytestmark = pytest.mark.contract


def relative_model() -> keras.Model:
    """A small sequence model with every relative attention mode (and their index functions)."""
    inputs = keras.Input((None, 16), name="tokens")
    x = layers.MultiHeadRelativeAttention(
        2, 8, relative="keys_values", position=layers.ClipPositions(3)
    )(inputs, inputs)
    x = layers.MultiHeadRelativeAttention(2, 8, relative="keys", position="irpe")(x, x)
    x = layers.MultiHeadRelativeAttention(
        2,
        8,
        relative="bias",
        position=layers.LogBuckets(num_buckets=8, max_distance=20),
        rotary=layers.RotaryPositions(max_wavelength=100),
    )(x, x, use_causal_mask=True)
    return keras.Model(inputs, x)


def position_schemes_model() -> keras.Model:
    """A small sequence model with every computed bias and every rotary scaling."""
    inputs = keras.Input((None, 16), name="tokens")
    x = inputs

    def attention(x, causal=False, **arguments):
        layer = layers.MultiHeadRelativeAttention(2, 8, **arguments)
        return layer(x, x, use_causal_mask=causal)

    x = attention(x, relative="bias", position=layers.ALiBi())
    x = attention(x, relative="bias", position=layers.KERPLE("log"))
    x = attention(x, relative="bias", position=layers.KERPLE("power"))
    x = attention(x, causal=True, relative="bias", position=layers.FIRE(hidden_dim=8))
    x = attention(x, relative="bias", position=layers.ContinuousBias(16, "swin", window=8))
    rotary = layers.RotaryPositions
    x = attention(x, relative=None, rotary=rotary(scaling="linear", scaling_factor=2.0))
    x = attention(x, relative=None, rotary=rotary(scaling="ntk", scaling_factor=2.0))
    x = attention(x, relative=None, rotary=rotary(scaling="dynamic_ntk", training_length=4))
    yarn = rotary(scaling="yarn", scaling_factor=4.0, training_length=8)
    x = attention(x, relative=None, rotary=yarn)
    x = attention(x, causal=True, relative=None, rotary=rotary(xpos_scale_base=64.0))
    return keras.Model(inputs, x)


# Large: on JAX and PyTorch the export runs TensorFlow on the saved .keras file, the path
# test_every_public_layer_exports covers per backend; the schemes' .keras round trip is
# tested per backend in tests/layers/test_position_biases.py.
@pytest.mark.large
def test_position_schemes_export_to_onnx(tmp_path):
    # Verified at two lengths (7 and 11), both beyond dynamic NTK's training length of 4.
    report = export_model(position_schemes_model(), os.path.join(tmp_path, "schemes.onnx"))
    assert report.max_abs_difference is not None and report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, 16)], [(2, 11, 16)]]


def every_layer_model() -> keras.Model:
    """A small two-input model holding every public layer that takes tensors."""
    seq = keras.Input((None, 16), name="sequence")
    x = layers.GLUConv1D(16, 3)(seq)
    x = layers.MUSEAttention(2, 8, conv="static")(x)
    x = layers.MUSEAttention(2, 8, conv="dynamic", kernel_sizes=(3, 5))(x)
    x = layers.MUSEEncoderLayer(32, 2, kernel_sizes=(3, 5))(x)
    x = layers.MUSEDecoderLayer(32, 2, conv="static", kernel_sizes=(1, 3))(x, x)
    x = layers.MultiHeadRelativeAttention(2, 8, relative="keys_values")(x, x)
    x = layers.DisentangledSelfAttention(2, 8, position=layers.DebertaBuckets(8, 32))(x)
    x = layers.ContextualPositionAttention(2, 8, max_positions=8)(x)
    x = layers.RelativeTransformerEncoder(
        32, 2, relative="bias", position=layers.LogBuckets(num_buckets=8, max_distance=16)
    )(x)
    x = layers.RelativeTransformerDecoder(32, 2, relative="keys", position="irpe")(x, x)
    x = layers.DecoderBlock(32, 2, num_key_value_heads=1, rotary=layers.RotaryPositions())(x)
    x, _ = layers.ConvS2SAttention(16, 16)(x, x, (x, x))
    x = layers.GradMultiply(0.5, name="sequence_features")(x)
    image = keras.Input((16, 16, 3), name="image")
    y = layers.SpatialPadding2D(1, mode="reflect")(image)
    y = keras.layers.Conv2D(8, 3)(y)
    y = layers.MBConv(16, strides=2)(y)  # with SqueezeExcite inside
    y = layers.ConvNeXtBlock(16, kernel_size=3)(y)  # depthwise, LayerNorm, MLP, layer scale
    y = layers.RelativeTransformerBlock2D(32, head_dim=8, strides=2)(y)  # RelativePositionBias2D
    y = layers.RelativeTransformerBlock2D(32, head_dim=8, position_bias="mlp")(y)  # the MLP bias
    y = layers.RelativeTransformerBlock2D(  # 2D rotary: learned mixed frequencies, no bias
        32, head_dim=8, rotary=layers.RotaryPositions2D(kind="mixed"), position_bias=None
    )(y)
    y = keras.layers.GlobalAveragePooling2D(name="image_features")(y)
    return keras.Model([seq, image], [x, y])


def names(described):
    """The names of an ExportReport's inputs or outputs."""
    return [name for name, _, _ in described]


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


# On JAX and PyTorch every format goes the same way: the model is saved as .keras and a
# TensorFlow subprocess loads and exports it (20-60 s each on 2 cores). The ONNX cases
# cover that route there; the SavedModel and LiteRT cases, whose TensorFlow part is the
# same, run once, in the TensorFlow suite (CI's JAX suite was over its time).
def on_tensorflow_only(format: str, label: str):
    return pytest.param(
        format,
        marks=pytest.mark.skipif(
            keras.backend.backend() != "tensorflow",
            reason="on JAX and PyTorch the export is a TensorFlow subprocess on the saved .keras "
            f"file, the route the ONNX case covers; the {label} case runs in the TensorFlow suite",
        ),
    )


SAVED_MODEL_ON_TENSORFLOW = on_tensorflow_only("tf_saved_model", "SavedModel")


@pytest.mark.parametrize("format", ["onnx", SAVED_MODEL_ON_TENSORFLOW])
def test_every_public_layer_exports(tmp_path, format):
    path = os.path.join(tmp_path, "every.onnx" if format == "onnx" else "every")
    report = export_model(every_layer_model(), path, format=format)
    assert report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, 16), (2, 16, 16, 3)], [(2, 11, 16), (2, 16, 16, 3)]]
    # Named after the keras.Input layers and the output layers, in the model's order
    # (tf2onnx writes the outputs sorted by name; export_model puts them back in order).
    assert names(report.inputs) == ["sequence", "image"]
    assert names(report.outputs) == ["sequence_features", "image_features"]


@pytest.mark.parametrize(
    "format", ["onnx", SAVED_MODEL_ON_TENSORFLOW, on_tensorflow_only("litert", "LiteRT")]
)
def test_export_and_verify_at_two_lengths(tmp_path, format):
    # Outputs returned in a dict are named after its keys.
    model = relative_model()
    model = keras.Model(model.inputs[0], {"encoded": model.outputs[0]})
    path = os.path.join(
        tmp_path, {"onnx": "model.onnx", "litert": "model.tflite"}.get(format, "saved")
    )
    report = export_model(model, path, format=format)
    assert names(report.inputs) == ["tokens"] and names(report.outputs) == ["encoded"]
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
    path = os.path.join(tmp_path, "m.onnx")
    report = export_model(model, path, atol=0.1, input_names=["x"], output_names=["y"])
    assert any("exported in float32" in note for note in report.notes)
    assert report.outputs[0][2] == "tensor(float)"
    # Names given replace the model's, in the graph itself.
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [v.name for v in session.get_inputs()] == ["x"]
    assert [v.name for v in session.get_outputs()] == ["y"]


class TwoOutputs(keras.layers.Layer):
    def call(self, x):
        return x + 1.0, x * 2.0


def test_names_come_from_the_model_and_are_made_unique_and_valid():
    x = keras.Input((4,), name="x")
    first, second = TwoOutputs(name="pair")(x)
    model = keras.Model(x, [first, second, keras.layers.Identity(name="feat.map-1")(x), x])
    # Two outputs of one layer, and an output named like an input (one graph value has
    # one name), get a suffix; characters other than letters, digits and _ become _.
    assert export_names(model) == (["x"], ["pair", "pair_1", "feat_map_1", "x_1"])
    # With the input renamed, the output keeps its layer's name.
    assert export_names(model, input_names=["features"]) == (
        ["features"],
        ["pair", "pair_1", "feat_map_1", "x"],
    )
    signature = [keras.InputSpec(shape=(None, 4), name="7up")]
    assert export_names(model, input_signature=signature)[0] == ["input_0_7up"]


def test_names_of_a_subclassed_model_come_from_its_outputs():
    class Keyed(keras.Model):
        def call(self, x):
            return {"scores": x * 2.0, "hidden": x}

    class Plain(keras.Model):
        def call(self, x):
            return [x, x * 2.0]

    signature = [keras.InputSpec(shape=(None, 3), name="values")]
    # Flattened as keras.tree.flatten does: a dict's keys sorted.
    assert export_names(Keyed(), signature) == (["values"], ["hidden", "scores"])
    assert export_names(Plain(), signature) == (["values"], ["output_0", "output_1"])


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"input_names": "x"}, TypeError, r"`input_names` must be a list of names, one per"),
        ({"input_names": ["a", "b"]}, ValueError, r"one name per model input \(1\); got 2"),
        ({"output_names": ["y", "9y"]}, ValueError, r"a letter followed by .* got '9y'"),
        ({"output_names": ["y-1", "z"]}, ValueError, r"got 'y-1'"),
        ({"output_names": ["y", "y"]}, ValueError, r"must be distinct; got 'y' 2 times"),
        ({"output_names": ["x", "y"]}, ValueError, r"must differ from the input names .*'x'"),
    ],
)
def test_bad_names_are_refused_before_exporting(tmp_path, arguments, error, message):
    x = keras.Input((4,), name="x")
    model = keras.Model(x, [keras.layers.Dense(2)(x), keras.layers.Dense(3)(x)])
    with pytest.raises(error, match=message):
        export_names(model, **arguments)
    path = os.path.join(tmp_path, "m.onnx")
    with pytest.raises(error, match="export_model: .*" + message):
        export_model(model, path, **arguments)
    assert not os.path.exists(path)


def skip_the_exporters(monkeypatch):
    """Replaces both export routes by a no-op: tests of what happens around the export
    (verification with a stubbed artifact, checks before it) need no real conversion,
    which takes 10-50 s through the TensorFlow subprocess. The stub writes an empty file
    where the artifact goes, since export_model moves it into place, and describes the
    inputs and outputs with the names it was asked for."""

    def stub(model, path, format, specs, output_names, verbose=False):
        open(path, "wb").close()
        return {
            "inputs": [(s["name"], s["shape"], s["dtype"]) for s in specs],
            "outputs": [(name, [], "float32") for name in output_names],
        }

    monkeypatch.setattr(exporting, "_export_on_tensorflow", stub)
    monkeypatch.setattr(exporting, "_export_in_subprocess", stub)


def test_verification_failure_names_the_difference(tmp_path, monkeypatch):
    skip_the_exporters(monkeypatch)

    def wrong(report, inputs):
        arrays = inputs if isinstance(inputs, list) else [inputs]
        return [np.zeros((*arrays[0].shape[:2], 16), "float32") + 1.0]

    monkeypatch.setattr(verification, "_run_artifact", wrong)
    pattern = r"differs from the Keras model by .*, more than atol=0.0001 \+ rtol=0.0001"
    with pytest.raises(ValueError, match=pattern):
        export_model(relative_model(), os.path.join(tmp_path, "m.onnx"))


def test_verification_tolerance_scales_with_the_output(tmp_path, monkeypatch):
    # The artifact is replaced by the model's own output shifted by a fraction of the
    # tolerance atol + rtol * max|output|: 0.9 of it passes, 1.1 of it fails.
    skip_the_exporters(monkeypatch)
    model = relative_model()

    def shifted(fraction):
        def artifact(report, inputs):
            out = keras.ops.convert_to_numpy(model(inputs))
            tolerance = 1e-4 + 1e-3 * np.max(np.abs(out))
            return [out + fraction * tolerance]

        return artifact

    monkeypatch.setattr(verification, "_run_artifact", shifted(0.9))
    report = export_model(model, os.path.join(tmp_path, "m.onnx"), atol=1e-4, rtol=1e-3)
    assert report.max_abs_difference > 1e-4  # beyond atol alone, accepted through rtol
    monkeypatch.setattr(verification, "_run_artifact", shifted(1.1))
    with pytest.raises(ValueError, match=r"rtol=0.001 \* max\|expected\|"):
        export_model(model, os.path.join(tmp_path, "m2.onnx"), atol=1e-4, rtol=1e-3)


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


def test_too_large_for_memory_names_size_estimate_and_available(tmp_path, monkeypatch):
    # 1.0 GB available: the estimate for any model (5.7 GB + 91 bytes per parameter) is above.
    monkeypatch.setattr(memory, "available_memory", lambda: 1_000_000_000)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    with pytest.raises(MemoryError) as error:
        export_model(model, os.path.join(tmp_path, "m.onnx"))
    message = str(error.value)
    assert f"({model.count_params() / 1e6:.1f}M parameters)" in message
    assert "needs about 5.7 GB" in message and "1.0 GB is available" in message
    assert "format='tf_saved_model'" in message and "check_memory=False" in message
    assert not os.path.exists(os.path.join(tmp_path, "m.onnx"))  # checked before converting
    # SavedModel does not go through tf2onnx, and check_memory=False converts anyway
    # (the exporters are stubbed: what is checked here is that nothing raises before them).
    skip_the_exporters(monkeypatch)
    export_model(model, os.path.join(tmp_path, "m"), format="tf_saved_model", verify=False)
    export_model(model, os.path.join(tmp_path, "m.onnx"), check_memory=False, verify=False)


def test_memory_estimate_follows_the_two_measurements():
    # tf2onnx peaks measured here: about 8 GB at 25M parameters, 24 GB at 200M.
    assert export.tf2onnx_memory_estimate(25_000_000) == pytest.approx(8e9, rel=0.01)
    assert export.tf2onnx_memory_estimate(200_000_000) == pytest.approx(24e9, rel=0.01)
    available = export.available_memory()
    assert available is None or available > 0


def test_native_route_needs_torch_and_onnx(tmp_path):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    with pytest.raises(ValueError, match="`route` must be one of 'tensorflow', 'native'"):
        export_model(model, os.path.join(tmp_path, "m.onnx"), route="torch")
    with pytest.raises(ValueError, match=r"route='native' .* needs format='onnx' on the torch"):
        export_model(model, os.path.join(tmp_path, "m"), "tf_saved_model", route="native")
    backend = keras.backend.backend()
    if backend != "torch":
        with pytest.raises(ValueError, match=f"got format='onnx' on the {backend} backend"):
            export_model(model, os.path.join(tmp_path, "m.onnx"), route="native")


ONLY_ON_TORCH = pytest.mark.skipif(
    keras.backend.backend() != "torch",
    reason="route='native' is torch.onnx.export: it exists only on the torch backend",
)


@ONLY_ON_TORCH
def test_native_torch_route_dynamic_length(tmp_path):
    inputs = keras.Input((None, 8))
    x = layers.MultiHeadRelativeAttention(2, 4, relative="keys", position="irpe")(inputs, inputs)
    model = keras.Model(inputs, keras.layers.LayerNormalization()(x))
    report = export_model(model, os.path.join(tmp_path, "m.onnx"), route="native")
    assert report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, 8)], [(2, 11, 8)]]


# Per-backend (PyTorch). Marked large before, and the large stage ran on TensorFlow only, so
# this case never ran; run on PyTorch (torch 2.13, onnxruntime 1.32) it fails: onnxruntime
# refuses the graph (a Concat node of int64 and int32 inputs). Strict: a fix makes it fail
# until the mark is removed. The default route (a TensorFlow subprocess) is tested above.
@ONLY_ON_TORCH
@pytest.mark.xfail(
    strict=True,
    reason="known defect: torch.onnx.export of every public layer gives a graph onnxruntime "
    "refuses (Concat of int64 and int32)",
)
def test_native_torch_route_every_public_layer(tmp_path):
    # Traced at batch 3, length 5; verified at batch 2, lengths 7 and 11, so a size the
    # tracer froze into the graph fails here.
    report = export_model(every_layer_model(), os.path.join(tmp_path, "m.onnx"), route="native")
    assert report.route.startswith("torch.onnx.export")
    assert report.max_abs_difference <= 1e-4
    assert report.verified_shapes == [[(2, 7, 16), (2, 16, 16, 3)], [(2, 11, 16), (2, 16, 16, 3)]]
    assert [list(shape) for _, shape, _ in report.inputs] == [[None, None, 16], [None, 16, 16, 3]]


@pytest.mark.full
def test_demo_command_creates_runs_exports_and_verifies(tmp_path, capsys):
    from keras_posenc.cli import main

    # A translation model: generation and two graphs per format, with small vocabularies.
    out = str(tmp_path / "demo")
    overrides = ["--set", "src_vocab_size=30", "--set", "tgt_vocab_size=30"]
    assert main(["demo", "convs2s_small", *overrides, "--out", out]) == 0
    text = capsys.readouterr().out
    assert "created convs2s_small" in text and "greedy search" in text
    assert text.count("max |difference|") == 6  # encoder and decoder step, three formats
    assert "every artifact verified" in text
    # The naming scheme (cli.NAMING): NAME.keras, the two graphs in NAME/.
    assert sorted(os.listdir(out)) == ["convs2s_small", "convs2s_small.keras"]
    assert sorted(os.listdir(os.path.join(out, "convs2s_small"))) == [
        "decoder_step.onnx",
        "decoder_step.savedmodel",
        "decoder_step.tflite",
        "encoder.onnx",
        "encoder.savedmodel",
        "encoder.tflite",
    ]
    assert "saved it as " + os.path.join(out, "convs2s_small.keras") in text


@pytest.mark.full
def test_demo_without_a_name_shows_the_shipped_digits_classifier(tmp_path, capsys):
    pytest.importorskip("sklearn")  # the digits
    from keras_posenc.cli import main

    assert main(["demo", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "loaded coatnet_0 with its shipped weights 'digits'" in text
    accuracy = float(re.search(r"held-out accuracy ([\d.]+)% \(", text).group(1))
    card = zoo.shipped_presets()["coatnet_0/digits"]["metrics"]["held_out_accuracy"]
    assert accuracy >= round(card * 100, 1)  # the acceptance: at or above the card
    assert text.count("360 of 360 equal to Keras'") == 3
    assert sorted(os.listdir(tmp_path)) == [
        "coatnet_0_digits.keras",
        "coatnet_0_digits.onnx",
        "coatnet_0_digits.savedmodel",
        "coatnet_0_digits.tflite",
    ]


@pytest.mark.full
def test_demo_command_on_an_image_model(tmp_path, capsys):
    from keras_posenc.cli import main

    overrides = ["blocks=[1,1,1,1,1]", "channels=[8,8,16,32,32]", "input_shape=[32,32,3]"]
    arguments = [item for pair in overrides for item in ("--set", pair)]
    assert main(["demo", "coatnet_0", *arguments, "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "ran it on random inputs ((2, 32, 32, 3)): outputs (2, 1000)" in text
    assert text.count("max |difference|") == 3
    assert sorted(os.listdir(tmp_path)) == [
        "coatnet_0.keras",
        "coatnet_0.onnx",
        "coatnet_0.savedmodel",
        "coatnet_0.tflite",
    ]
