"""benchmarks/macs.py's `count_macs` against counts by hand, and the MACs the cards list
(tests/fixtures/timm_maxxvit/macs.json, which that script writes) against the counter."""

from __future__ import annotations

import importlib.util
import json
import re

import keras
import pytest
from keras.src.backend.common import global_state
from repository import benchmarks_path, fixtures_path, repository_path

from keras_posenc import layers, zoo

pytestmark = pytest.mark.contract

CARDS = ("coatnet", "maxvit", "maxxvit")
jax_only = pytest.mark.skipif(
    keras.backend.backend() != "jax", reason="count_macs traces the model with JAX"
)


def count_macs(model):
    """benchmarks/macs.py's counter (the benchmarks travel beside the tests, or not)."""
    path = benchmarks_path("macs.py")
    if path is None:
        pytest.skip("no benchmarks/ folder")
    spec = importlib.util.spec_from_file_location("benchmarks_macs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.count_macs(model)


def model_of(shape, *blocks):
    inputs = keras.Input(shape)
    x = inputs
    for block in blocks:
        x = block(x)
    return keras.Model(inputs, x)


@jax_only
def test_counts_equal_counts_by_hand():
    # Conv2D 3 x 3, 3 -> 4 on 8 x 8 ("valid": 6 x 6 out), then Dense 144 -> 10.
    convolution = model_of(
        (8, 8, 3), keras.layers.Conv2D(4, 3), keras.layers.Flatten(), keras.layers.Dense(10)
    )
    assert count_macs(convolution) == 6 * 6 * 4 * 27 + 144 * 10
    # Attention over 16 cells, 2 heads of 4: qkv, QK^T, AV, the output projection, the MLP
    # (the relative bias is a table lookup: no products).
    attention = model_of((4, 4, 8), layers.RelativeTransformerBlock2D(8, head_dim=4))
    assert count_macs(attention) == 16 * 8 * 24 + 2 * (2 * 16 * 16 * 4) + 16 * 8 * 8 + (
        2 * 16 * 8 * 32
    )
    # ConvNeXt, 4 -> 8 at stride 2 (4 x 4 out): depthwise 7 x 7 with two outputs per
    # channel, the MLP, the shortcut's 1 x 1 projection.
    convnext = model_of((8, 8, 4), layers.ConvNeXtBlock(8, strides=2))
    assert count_macs(convnext) == 16 * 8 * 49 + 2 * 16 * 8 * 32 + 16 * 4 * 8
    # MBConv's depthwise conv counts as the convolution it is (not as JAX's shifts).
    mbconv = model_of((4, 4, 8), layers.MBConv(8, se_ratio=0.0))
    assert count_macs(mbconv) == 16 * 8 * 32 + 16 * 32 * 9 + 16 * 32 * 8


@jax_only
def test_the_smallest_model_counts_as_the_table_says():
    counts = json.loads(fixtures_path("timm_maxxvit", "macs.json").read_text())["macs"]
    for name in ("maxvit_rmlp_pico_rw_256",):
        with keras.StatelessScope(initialize_variables=False):
            model = zoo.create(name, input_shape=(224, 224, 3))
        global_state.set_global_attribute("uninitialized_variables", [])
        assert count_macs(model) == counts[name], name


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="the other backends' error")
def test_other_backends_are_refused():
    with pytest.raises(ValueError, match="count_macs: needs the JAX backend"):
        count_macs(model_of((4, 4, 3), keras.layers.Conv2D(2, 1)))


def test_cards_list_every_model_with_its_macs():
    counts = json.loads(fixtures_path("timm_maxxvit", "macs.json").read_text())["macs"]
    listed = {}
    for card in CARDS:
        text = repository_path("zoo", card, "README.md").read_text()
        for name, gmacs in re.findall(r"^\| `(\w+)` \| [\d,]+ \| ([\d.]+) \|$", text, re.M):
            listed[name] = float(gmacs)
    family = {n for n in zoo.list_models() if zoo.get_spec(n).family in CARDS}
    assert set(listed) == set(counts) == family
    for name, gmacs in listed.items():
        assert gmacs == round(counts[name] / 1e9, 2), name
