"""The MaxViT zoo: registered configurations, parameter counts (the paper's and timm's),
the block structure and errors. Numbers against timm: tests/test_convert_timm_maxxvit.py."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from keras.src.backend.common import global_state  # see shape_only
from repository import fixtures_path

from keras_posenc import zoo
from keras_posenc.layers.coatnet import MBConv, RelativeTransformerBlock2D
from keras_posenc.zoo import maxvit
from keras_posenc.zoo.maxvit import build_maxvit

pytestmark = pytest.mark.contract

# The paper's counts (Tu et al. 2022, Table 1) and timm's, sum(p.numel() for p in
# timm.create_model(name).parameters()) with 1000 classes, timm 1.0.31.
PAPER = {"maxvit_t": 31e6, "maxvit_s": 69e6, "maxvit_b": 120e6, "maxvit_l": 212e6}
TIMM = {
    "maxvit_tiny_tf_224": 30_916_528,
    "maxvit_small_tf_224": 68_927_956,
    "maxvit_base_tf_224": 119_467_708,
    "maxvit_large_tf_224": 211_785_560,
    "maxvit_nano_rw_256": 15_451_148,
    "maxvit_tiny_rw_224": 29_057_312,
}
# The names added with timm's whole family (the rmlp models, the 384 / 512 ports, MaxViT-XL):
# timm's counts as tests/fixtures/timm_maxxvit/full_size.py wrote them.
TIMM.update(
    (name, count)
    for name, count in json.loads(fixtures_path("timm_maxxvit", "parameters.json").read_text())[
        "parameters"
    ].items()
    if name in maxvit.TIMM_CONFIGS and name not in TIMM
)
# The paper's model of each timm port.
PORTS = {"maxvit_t": "maxvit_tiny_tf_224", "maxvit_s": "maxvit_small_tf_224",
         "maxvit_b": "maxvit_base_tf_224", "maxvit_l": "maxvit_large_tf_224"}  # fmt: skip
# Built in the default suite (shape only, about a second); the larger ones in `large`.
SMALL = ("maxvit_t", "maxvit_tiny_tf_224", "maxvit_nano_rw_256", "maxvit_tiny_rw_224")


def shape_only(name):
    """The named model built without initialising its weights (see test_coatnet_models)."""
    with keras.StatelessScope(initialize_variables=False):
        model = zoo.create(name)
    global_state.set_global_attribute("uninitialized_variables", [])
    return model


def trainable_parameters(model):
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def check_count(name):
    model = shape_only(name)
    count = trainable_parameters(model)
    if name in PAPER:
        # Within 1% of the paper; the same architecture as timm's port of the weights.
        assert abs(count - PAPER[name]) / PAPER[name] < 0.01, (name, count)
        assert count == TIMM[PORTS[name]], (name, count)
    else:
        assert count == TIMM[name], (name, count)
        assert zoo.get_spec(name).paper_parameters is None
    assert model.output_shape == (None, 1000)


def test_registered_configurations():
    assert zoo.list_models(family="maxvit") == sorted([*PAPER, *TIMM])
    for name, paper in PAPER.items():
        spec = zoo.get_spec(name)
        assert spec.builder is build_maxvit and spec.paper_parameters == paper
        assert "Tu et al. 2022" in spec.reference


def test_small_models_have_the_papers_and_timms_counts():
    for name in SMALL:
        check_count(name)


@pytest.mark.large
@pytest.mark.parametrize("name", sorted(set(PAPER) | set(TIMM) - set(SMALL)))
def test_large_models_have_the_papers_and_timms_counts(name):
    check_count(name)


def test_blocks_and_windows():
    """Each MaxViT block: an MBConv (the stride), then block and grid attention over windows
    of input / 32 cells; the relative tables are one window's."""
    model = shape_only("maxvit_nano_rw_256")
    assert model.input_shape == (None, 256, 256, 3)
    kinds = [type(layer) for layer in model.layers if layer.name.startswith("stage1_block1")]
    assert kinds == [MBConv, RelativeTransformerBlock2D, RelativeTransformerBlock2D]
    grid = model.get_layer("stage4_block1_grid_attention")
    assert (grid.partition, grid.partition_size) == ("grid", (8, 8))
    assert tuple(grid.relative_bias.table.shape) == (16, 15, 15)  # 512 / 32 heads
    assert model.get_layer("stage2_block1_mbconv").strides == 2


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"input_shape": (96, 96, 3), "partition_size": 2},
         r"the S4 map, 3 x 3 .* cannot be cut into windows of partition_size=\(2, 2\)"),
        ({"input_shape": (100, 96, 3)}, r"divisible by 32"),
        ({"channels": (64, 64, 128, 256, 500)}, r"channels of stage S4 must be a multiple"),
        ({"transformer_options": {"partition": "block"}}, r"not RelativeTransformerBlock2D op"),
        ({"stem_bias": "yes"}, r"`stem_bias` must be True or False"),
    ],
)  # fmt: skip
def test_bad_arguments(overrides, message):
    with pytest.raises((ValueError, TypeError), match=rf"(build_maxvit|MaxViTConfig): .*{message}"):
        zoo.create("maxvit_t", **overrides)
