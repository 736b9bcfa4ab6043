"""CoAtNet's and MaxViT's named options for the Transformer blocks' positions: 2D rotary
(``rotary``), no bias (``position_bias="none"``) and Swin's shifted windows (``shift``),
built, saved to .keras and loaded, in the configuration's JSON, and their errors."""

from __future__ import annotations

import dataclasses
import json
import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import zoo
from keras_posenc.layers import RotaryPositions2D
from keras_posenc.zoo import coatnet
from keras_posenc.zoo.coatnet import TransformerBlockConfig

pytestmark = pytest.mark.contract

# Tiny: a stride-1 Transformer block in S3 (a 4 x 4 map at 64 x 64), heads of 16 channels.
TINY = {"blocks": (1, 1, 1, 2, 1), "channels": (8, 8, 16, 32, 32), "head_dim": 16}
ROTARY_ALONE = {"rotary": "mixed", "position_bias": "none"}
SWIN = {"partition": "block", "partition_size": 2, "shift": "half"}


def tiny(transformer_options, **overrides):
    arguments = {**TINY, "input_shape": (64, 64, 3), "num_classes": 3, **overrides}
    return zoo.create("coatnet_0", transformer_options=transformer_options, **arguments)


def predict(model, images):
    return ops.convert_to_numpy(model.predict_on_batch(images))


def transformer_blocks(model):
    return [layer for layer in model.layers if layer.name.startswith(("stage3_", "stage4_"))]


def round_trip(model, tmp_path):
    """Outputs before and after a .keras round trip, and the loaded model."""
    images = np.random.default_rng(0).standard_normal((2, 64, 64, 3)).astype("float32")
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    return predict(model, images), predict(loaded, images), loaded


def test_rotary_alone_in_shifted_windows_runs_and_round_trips(tmp_path):
    # One model for both options (each .keras round trip compiles a model per backend).
    model = tiny({**ROTARY_ALONE, **SWIN})
    for block in transformer_blocks(model):
        assert isinstance(block.rotary, RotaryPositions2D) and block.rotary.kind == "mixed"
        assert block.relative_bias is None and block.position_bias is None
        assert tuple(block.rotary_frequencies.shape) == (2, 2, 8)  # per block: its own
    first, second = model.get_layer("stage3_block1"), model.get_layer("stage3_block2")
    # The stage's first block downsamples: the whole map; the second: shifted 2 x 2 windows.
    assert first.partition is None and first.shift is None
    assert second.partition == "block" and second.shift == (1, 1)
    assert model.get_layer("stage4_block1").partition is None
    expected, loaded_out, loaded = round_trip(model, tmp_path)
    np.testing.assert_allclose(loaded_out, expected, atol=1e-5)
    assert loaded.get_layer("stage3_block2").shift == (1, 1)
    assert loaded.get_layer("stage3_block2").rotary.kind == "mixed"


# Build only: the builder's wiring, the same on every backend.
@pytest.mark.neutral
def test_rotary_with_the_table_and_for_images_of_any_size():
    both = tiny({"rotary": RotaryPositions2D(kind="axial")})
    block = both.get_layer("stage3_block1")
    assert block.rotary.kind == "axial" and block.position_bias == "table"
    assert both.get_layer("stage3_block1").bias_size is None
    # Without a bias nothing is sized for the base image (the layer refuses bias_size then).
    any_size = tiny(ROTARY_ALONE, input_shape=(None, None, 3))
    assert any_size.get_layer("stage3_block1").bias_size is None
    table = tiny({}, input_shape=(None, None, 3))
    assert table.get_layer("stage3_block1").bias_size == (14, 14)  # 224 / 16


# Build only: the builder's wiring, the same on every backend.
@pytest.mark.neutral
def test_no_shift_where_the_map_is_one_window():
    # S3's map is 4 x 4: windows of 4 leave one window, which Swin does not shift.
    model = tiny({**SWIN, "partition_size": 4})
    assert model.get_layer("stage3_block2").shift is None
    assert model.get_layer("stage3_block2").partition_size == (4, 4)


# Build only: the builder's wiring, the same on every backend.
@pytest.mark.neutral
def test_maxvit_shifts_the_block_attention_of_every_second_block():
    model = zoo.create(
        "maxvit_t",
        blocks=(1, 1, 2, 1, 1),
        channels=(8, 8, 16, 16, 32),
        head_dim=8,
        input_shape=(64, 64, 3),
        num_classes=3,
        partition_size=2,
        transformer_options={"shift": "half", **ROTARY_ALONE},
    )
    shifts = {layer.name: layer.shift for layer in model.layers if "attention" in layer.name}
    assert shifts.pop("stage2_block2_block_attention") == (1, 1)
    assert set(shifts.values()) == {None}  # grids, first blocks and S4's single window
    block = model.get_layer("stage2_block2_grid_attention")
    assert block.rotary.kind == "mixed" and block.relative_bias is None


@pytest.mark.neutral
def test_maxxvit_takes_rotary_but_no_shift():
    tiny_maxxvit = dict(
        blocks=(2, 1, 1, 1, 1), channels=(8, 8, 16, 32, 64), head_dim=8, stem_channels=(8, 8)
    )
    tiny_maxxvit.update(input_shape=(64, 64, 3), num_classes=3)
    model = zoo.create("maxxvit_rmlp_nano_rw_256", transformer_options=ROTARY_ALONE, **tiny_maxxvit)
    block = model.get_layer("stage2_block1_grid_attention")
    assert block.rotary.kind == "mixed" and block.relative_bias is None
    with pytest.raises(ValueError, match=r"build_maxxvit: transformer_options `shift` .* not Ma"):
        zoo.create(
            "maxxvit_rmlp_nano_rw_256", transformer_options={"shift": "half"}, **tiny_maxxvit
        )


@pytest.mark.neutral
def test_options_in_the_configuration_go_to_json_and_back():
    options = {"rotary": RotaryPositions2D(kind="axial", temperature=100.0), **SWIN}
    config = dataclasses.replace(coatnet.CONFIGS["coatnet_0"], transformer_options=options)
    assert isinstance(config.transformer_options, TransformerBlockConfig)
    assert config.transformer_options.rotary["config"]["temperature"] == 100.0
    back = type(config).from_dict(json.loads(json.dumps(config.to_dict())))
    assert back == config
    assert TransformerBlockConfig(**ROTARY_ALONE)["position_bias"] == "none"


@pytest.mark.neutral
@pytest.mark.parametrize(
    "options, error, pattern",
    [
        ({"position_bias": "none"}, ValueError, r"build_coatnet: .*position_bias='none' leaves"),
        ({"rotary": "spiral"}, ValueError, r"build_coatnet: .*'rotary'\]` must be .* 'mixed'"),
        ({"rotary": 3}, TypeError, r"build_coatnet: .*'rotary'\]` must be a RotaryPositions2D"),
        ({"shift": "half"}, ValueError, r"build_coatnet: .*shift='half' needs partition='block'"),
        (
            {"partition": "grid", "partition_size": 2, "shift": 1},
            ValueError,
            r"shift=1 needs partition='block'",
        ),
    ],
)
def test_bad_combinations_are_named(options, error, pattern):
    with pytest.raises(error, match=pattern):
        coatnet.build_coatnet(**TINY, input_shape=(64, 64, 3), transformer_options=options)


@pytest.mark.neutral
def test_a_bad_rotary_is_refused_by_the_configuration():
    with pytest.raises(ValueError, match=r"TransformerBlockConfig: .*received rotary='spiral'"):
        dataclasses.replace(coatnet.CONFIGS["coatnet_0"], transformer_options={"rotary": "spiral"})
