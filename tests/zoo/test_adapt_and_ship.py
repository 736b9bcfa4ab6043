"""Adapting and shipping zoo models (issue 55): LoRA (`ZooModel.enable_lora`), Keras'
int8 quantization with `.keras` files, the variables weight decay leaves alone
(`ZooModel.no_weight_decay_names` with Keras' AdamW), and ONNX export of an int8 model.

Truth from outside the code: the LoRA update against `reference.adapt.lora_kernel` (Hu et
al.'s formula) and against the same model with the merged kernels written in; weight decay
by Keras' own AdamW against `reference.adapt.decayed` (Loshchilov and Hutter), with the
variables to exclude chosen here by the layers that own them, not by their names.
"""

from __future__ import annotations

import re

import keras
import numpy as np
import pytest
from keras import ops
from zoo_families import FAMILIES, make, numpy

from keras_posenc import zoo
from keras_posenc.layers.relative_position import (
    MultiScaleRelativePositionEmbedding,
    RelativePositionBias,
    RelativePositionEmbedding,
)
from keras_posenc.layers.relative_position_2d import RelativePositionBias2D
from keras_posenc.zoo.convs2s_layers import ConvS2SEmbedding, PositionEmbedding
from keras_posenc.zoo.deberta import DebertaRelativeEmbedding
from reference.adapt import decayed, head_projection, lora_kernel

pytestmark = pytest.mark.contract

# int8 outputs (Keras' weights and activations, abs-max scales) within this fraction of
# the largest float32 output on the fixed inputs below; measured 0.005-0.018 on PyTorch.
INT8_TOLERANCE = 0.05


def outputs(model, x):
    return numpy(model(x))


# ------------------------------------------------------------------------------ LoRA


def test_lora_adds_b_a_to_the_frozen_projections(tmp_path):
    model, x = make("shaw")
    base = [numpy(v) for v in model.weights]
    before = outputs(model, x)
    model.enable_lora(2)
    # keras-hub's convention: every weight frozen but the adapted projections' LoRA
    # factors and biases; the relative tables (`table`) stay frozen.
    trainable = {v.path for v in model.trainable_variables}
    adapted = re.compile(r"attention/(query|value)/(lora_kernel_a|lora_kernel_b|bias)$")
    assert trainable == {v.path for v in model.weights if adapted.search(v.path)}
    assert len(trainable) == 5 * 2 * 3  # 5 attentions, query and value, A, B and bias
    assert any(v.name == "table" for v in model.weights)
    np.testing.assert_allclose(outputs(model, x), before, atol=1e-6)  # B starts at zero

    rng = np.random.default_rng(1)
    for variable in model.weights:
        if variable.name.startswith("lora_kernel"):
            variable.assign(0.3 * rng.standard_normal(variable.shape).astype("float32"))
    query = next(layer for layer in model._flatten_layers() if layer.name == "query")
    features = rng.standard_normal((2, 3, 8)).astype("float32")
    expected = head_projection(
        features,
        lora_kernel(numpy(query._kernel), numpy(query.lora_kernel_a),
                    numpy(query.lora_kernel_b), alpha=2),
        numpy(query.bias),
    )  # fmt: skip
    np.testing.assert_allclose(numpy(query(features)), expected, atol=1e-5)

    # The whole model equals the base model with every adapted kernel merged by the
    # reference: only the query and value projections changed.
    adapted_outputs = outputs(model, x)
    peer, _ = make("shaw")
    merged = {}
    for layer in model._flatten_layers():
        if getattr(layer, "lora_enabled", False):
            merged[layer.path + "/kernel"] = lora_kernel(
                numpy(layer._kernel), numpy(layer.lora_kernel_a), numpy(layer.lora_kernel_b), 2
            )
    for variable, value in zip(peer.weights, base):
        variable.assign(merged.get(variable.path, value).astype("float32"))
    assert len(merged) == 10
    np.testing.assert_allclose(outputs(peer, x), adapted_outputs, atol=1e-5)
    assert np.abs(adapted_outputs - before).max() > 1e-2

    path = tmp_path / "adapted.keras"
    model.save(path)
    np.testing.assert_allclose(
        outputs(keras.saving.load_model(path), x), adapted_outputs, atol=1e-5
    )

    # One training step moves the LoRA factors and the adapted biases, nothing else.
    frozen = {v.path: numpy(v) for v in model.weights if not v.trainable}
    moved = {v.path: numpy(v) for v in model.trainable_variables}
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    model.fit(x, np.roll(x["decoder_token_ids"], -1, axis=1), batch_size=2, epochs=1, verbose=0)
    for variable in model.weights:
        if variable.path in frozen:
            np.testing.assert_array_equal(numpy(variable), frozen[variable.path])
        else:
            assert np.abs(numpy(variable) - moved[variable.path]).max() > 0, variable.path


def test_enable_lora_refuses_bad_arguments():
    model, _ = make("t5")
    with pytest.raises(ValueError, match=r"enable_lora: `rank` must be an integer >= 1, got 0"):
        model.enable_lora(0)
    with pytest.raises(TypeError, match=r"`rank` must be an integer, got 2.0"):
        model.enable_lora(2.0)
    with pytest.raises(TypeError, match=r"`target_layer_names` must be a list of layer names"):
        model.enable_lora(2, target_layer_names="query")
    with pytest.raises(ValueError, match=r"no layer named \['qkv'\] has `enable_lora`; .*'query'"):
        model.enable_lora(2, target_layer_names=["qkv"])
    model.enable_lora(2, target_layer_names=["query"])
    with pytest.raises(ValueError, match=r"LoRA is already enabled on .*query"):
        model.enable_lora(2, target_layer_names=["query"])


# -------------------------------------------------------------------- weight decay


# The layers whose weights are relative position tables, and those whose weight is a
# learned absolute position table (ConvS2S's).
RELATIVE_TABLES = (
    RelativePositionBias2D,
    RelativePositionBias,
    RelativePositionEmbedding,
    MultiScaleRelativePositionEmbedding,
    DebertaRelativeEmbedding,
)
ABSOLUTE_TABLES = (PositionEmbedding,)
TABLES = RELATIVE_TABLES + ABSOLUTE_TABLES


def _no_decay_by_owner(model):
    """The paths of the variables to exclude, chosen by the layers that own them: timm's
    `param_groups_weight_decay` (one dimension or fewer, or a bias) and the position
    tables (timm's `no_weight_decay`: CoAtNet's and MaxViT's relative tables, the ViTs'
    learned absolute `pos_embed`)."""
    excluded = set()
    for layer in model._flatten_layers():
        own = layer._trainable_variables
        if isinstance(layer, TABLES):
            excluded |= {v.path for v in own}
        excluded |= {v.path for v in own if len(v.shape) <= 1 or v is getattr(layer, "bias", 0)}
    return excluded


def _check_weight_decay(model):
    names = model.no_weight_decay_names()
    optimizer = keras.optimizers.AdamW(learning_rate=0.1, weight_decay=0.5)
    optimizer.exclude_from_weight_decay(var_names=names)
    variables = model.trainable_variables
    before = [numpy(v) for v in variables]
    optimizer.apply_gradients([(ops.zeros(v.shape, v.dtype), v) for v in variables])
    excluded = _no_decay_by_owner(model) & {v.path for v in variables}
    assert 0 < len(excluded) < len(variables)
    for variable, value in zip(variables, before):
        expected = value if variable.path in excluded else decayed(value, 0.1, 0.5)
        np.testing.assert_allclose(numpy(variable), expected, rtol=1e-6, err_msg=variable.path)
    return names


@pytest.mark.neutral
def test_convs2s_position_tables_are_excluded_by_name():
    """ConvS2S's learned absolute position tables are named apart from its token tables
    (`position_embeddings`, `embeddings`), so the no-decay names keep Keras' AdamW off
    the position tables and on the token tables (timm's `no_weight_decay`: `pos_embed`).
    Before, both were `embeddings` and the position tables were decayed."""
    model = zoo.create("convs2s_small", src_vocab_size=20, tgt_vocab_size=20)
    names = model.no_weight_decay_names()
    assert "position_embeddings" in names
    optimizer = keras.optimizers.AdamW(learning_rate=0.1, weight_decay=0.5)
    optimizer.exclude_from_weight_decay(var_names=names)
    embeddings = [layer for layer in model._flatten_layers() if isinstance(layer, ConvS2SEmbedding)]
    assert len(embeddings) == 2  # the encoder's and the decoder's
    for layer in embeddings:
        positions, tokens = layer.position_embedding.embeddings, layer.token_embedding.embeddings
        assert not optimizer._use_weight_decay(positions), positions.path
        assert optimizer._use_weight_decay(tokens), tokens.path
    # And every other variable as its owning layer says.
    excluded = _no_decay_by_owner(model)
    for variable in model.trainable_variables:
        assert optimizer._use_weight_decay(variable) is (variable.path not in excluded), (
            variable.path
        )


def test_convs2s_files_saved_before_the_position_table_rename_load(tmp_path, monkeypatch):
    """A `.keras` file of a ConvS2S model whose position tables were plain Embedding
    layers (variable `embeddings`, before the rename) loads into `PositionEmbedding`:
    Keras stores a layer's variables by their order, not by their names. Float and int8
    (the int8 file lists the position tables among the quantized layers, which the new
    class must quantize again)."""
    from keras_posenc.zoo import convs2s_layers

    monkeypatch.setattr(convs2s_layers, "PositionEmbedding", keras.layers.Embedding)
    old, x = make("convs2s", seed=1)
    paths = [v.path for v in old.weights if "position_embedding/" in v.path]
    assert [path.rsplit("/", 1)[1] for path in paths] == ["embeddings"] * 2
    tables = [numpy(v) for v in old.weights if v.path in paths]
    float_outputs = outputs(old, x)
    old.save(tmp_path / "float.keras")
    old.quantize("int8")
    int8_outputs = outputs(old, x)
    old.save(tmp_path / "int8.keras")
    monkeypatch.undo()

    for file, expected, dtype in (
        ("float.keras", float_outputs, "float32"),
        ("int8.keras", int8_outputs, "int8"),
    ):
        loaded = keras.saving.load_model(tmp_path / file)
        layers = [
            layer for layer in loaded._flatten_layers() if isinstance(layer, PositionEmbedding)
        ]
        assert len(layers) == 2
        for layer, table in zip(layers, tables):
            variable = layer.embeddings
            assert variable.name == "position_embeddings" and variable.dtype == dtype, file
            if dtype == "float32":
                np.testing.assert_array_equal(numpy(variable), table)
        np.testing.assert_allclose(outputs(loaded, x), expected, atol=1e-6, err_msg=file)


# ----------------------------------------------------------------- every family


# CoAtNet on every backend; the other families on TensorFlow in the large tier (MaxViT's
# case alone took 34 s on a loaded 2-core machine on PyTorch).
@pytest.mark.parametrize(
    "family",
    [f if f == "coatnet" else pytest.param(f, marks=pytest.mark.large) for f in FAMILIES],
)
def test_family_adapts_and_ships(family, tmp_path):
    """Per family: the no-decay names exclude exactly the biases, norms and position
    tables from Keras' AdamW; LoRA adapts the default targets and leaves the outputs
    as they were; int8 outputs are within INT8_TOLERANCE of float32 and a `.keras` file
    of the int8 model reloads them exactly."""
    model, x = make(family)
    names = _check_weight_decay(model)
    for kinds, name in ((RELATIVE_TABLES, "table"), (ABSOLUTE_TABLES, "position_embeddings")):
        owners = [layer for layer in model._flatten_layers() if isinstance(layer, kinds)]
        assert (name in names) is any(layer.trainable for layer in owners), name

    reference = outputs(model, x)
    model.enable_lora(2)
    adapted = {layer.name for layer in model._flatten_layers() if getattr(layer, "lora_enabled", 0)}
    assert adapted == FAMILIES[family][2]
    np.testing.assert_allclose(outputs(model, x), reference, atol=1e-5)

    model, x = make(family, seed=1)
    reference = outputs(model, x)
    model.quantize("int8")
    quantized = outputs(model, x)
    assert np.abs(quantized - reference).max() <= INT8_TOLERANCE * np.abs(reference).max()
    assert np.abs(quantized - reference).max() > 0  # the model did change
    path = tmp_path / f"{family}_int8.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model)
    modes = {layer.quantization_mode for layer in loaded._flatten_layers() if layer.weights}
    assert "int8" in modes
    np.testing.assert_allclose(outputs(loaded, x), quantized, atol=1e-6)


# ------------------------------------------------------------------------ export


@pytest.mark.large
def test_int8_model_exports_to_onnx(tmp_path):
    onnx = pytest.importorskip("onnx")
    from keras_posenc.export import export_model

    model, x = make("coatnet")
    model.quantize("int8")
    path = tmp_path / "coatnet_int8.onnx"
    # export_model checks the ONNX graph against the int8 Keras model (1e-4 by default).
    report = export_model(model, path, verify_inputs=[x])
    assert report.max_abs_difference <= 1e-4
    graph = onnx.load(str(path)).graph
    integer = [t.name for t in graph.initializer if t.data_type == onnx.TensorProto.INT8]
    assert integer, "the int8 kernels were not stored as int8 in the ONNX file"
