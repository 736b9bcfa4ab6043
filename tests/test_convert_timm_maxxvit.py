"""timm's other CoAtNets (coatnet_rmlp_*, coatnet_bn_*), its MaxViTs and its ConvNeXt models
(maxxvit_rmlp_*, maxxvitv2_*, coatnext_*) -> the zoo's models.

The truth is timm itself: tests/fixtures/timm_maxxvit/ holds eight tiny timm ``MaxxVit``
models with random weights, one per family of options (coatnet_rmlp_1_rw's, coatnet_bn_0_rw's,
the maxvit_*_tf ports', timm's maxvit_*_rw and maxvit_rmlp_*, maxxvit_rmlp_*, maxxvitv2_* and
coatnext_*), each with its state dict, an input and timm's logits, written by that folder's
generate.py where timm is installed. The tests need neither timm nor torch.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops
from test_convert_timm import write_safetensors

from keras_posenc import cli, zoo
from keras_posenc.convert import (
    config_from_timm,
    from_timm_coatnet,
    from_timm_maxvit,
    from_timm_maxxvit,
    maxvit_config_from_timm,
    maxxvit_config_from_timm,
    to_timm_state_dict,
)
from keras_posenc.convert.timm.checkpoint import _infer_name
from keras_posenc.convert.timm.conversion import _MAXVIT_CONFIGS, _MAXXVIT_CONFIGS
from keras_posenc.hub.timm import TIMM_CONVERTERS
from keras_posenc.layers import ContinuousPositionBias2D, ConvNeXtBlock
from keras_posenc.zoo import coatnet, maxvit, maxxvit

pytestmark = pytest.mark.contract

FIXTURES = Path(__file__).parent / "fixtures" / "timm_maxxvit"
NAMES = ("coatnet_rmlp_tiny", "coatnet_bn_tiny", "maxvit_tf_tiny", "maxvit_rw_tiny")
# The ConvNeXt models and the rmlp MaxViT: one of each kind timm's family adds.
NEW_KINDS = ("maxvit_rmlp_tiny", "maxxvit_tiny", "maxxvitv2_tiny", "coatnext_tiny")
ATOL = 1e-4


def fixture(name):
    """(state dict, the timm description, NHWC input, timm's logits)."""
    with open(FIXTURES / f"{name}.json", encoding="utf-8") as handle:
        described = json.load(handle)
    arrays = np.load(FIXTURES / f"{name}.npz", allow_pickle=False)
    state = {k[len("state/") :]: arrays[k] for k in arrays.files if k.startswith("state/")}
    return state, described, arrays["input"].transpose(0, 2, 3, 1), arrays["logits"]


def _kind(name):
    """The converter's family of a fixture: ConvNeXt models, MaxViTs or CoAtNets."""
    return "maxxvit" if name.startswith(("maxxvit", "coatnext")) else name[:6]


def config_of(name):
    _, described, _, _ = fixture(name)
    to_config = {"maxxvit": maxxvit_config_from_timm, "maxvit": maxvit_config_from_timm}.get(
        _kind(name), config_from_timm
    )
    return to_config(described["cfg"], img_size=tuple(described["img_size"]))


@functools.cache  # the converted models are only read: convert each fixture once
def convert(name):
    state, _, images, logits = fixture(name)
    convert_with = {"maxxvit": from_timm_maxxvit, "maxvit": from_timm_maxvit}.get(
        _kind(name), from_timm_coatnet
    )
    return convert_with(state, config=config_of(name)), images, logits


def predict(model, images):
    # The compiled predict step: one compilation of the whole model, faster on JAX than
    # eager op-by-op dispatch.
    return ops.convert_to_numpy(model.predict_on_batch(images))


@pytest.mark.parametrize("name", NAMES + NEW_KINDS)
def test_logits_counts_and_state_dict_match_timm(name):
    """timm's logits (1e-4), timm's parameter count, and back to the exact state dict."""
    state, described, _, _ = fixture(name)
    model, images, logits = convert(name)
    np.testing.assert_allclose(predict(model, images), logits, atol=ATOL, rtol=0)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == described["num_params"]
    back = to_timm_state_dict(model)
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        assert back[key].dtype == np.float32 and back[key].shape == value.shape, key
        np.testing.assert_array_equal(back[key], value, err_msg=key)


def test_fixtures_cover_the_options():
    """What each fixture exercises, so a regenerated fixture cannot silently lose it."""
    rmlp, bn, tf, rw = (config_of(name) for name in NAMES)
    assert rmlp["transformer_options"]["position_bias"] == "mlp"
    assert (rmlp["conv_options"]["pool"], rmlp["conv_options"]["stride_pool"]) == ("max3", "avg")
    assert rmlp["stride_on"] == "pool" and rmlp["input_shape"] == (64, 96, 3)  # not square
    assert bn["transformer_options"]["norm"] == "batch" and bn["head_norm"] == "batch"
    assert tf["conv_options"]["padding"] == "same" and tf["stem_bias"] and tf["pre_logits"]
    assert tf["transformer_options"]["activation"] == "gelu_tanh"
    assert tf["partition_size"] == (2, 3)  # windows of a 64 x 96 image
    assert rw["conv_options"]["padding"] == "symmetric" and rw["head"] == "norm_pool"
    tables = {n: fixture(n)[0] for n in ("maxvit_tf_tiny", "maxvit_rw_tiny")}
    assert {v.ndim for k, v in tables["maxvit_tf_tiny"].items() if k.endswith("bias_table")} == {3}
    assert {v.ndim for k, v in tables["maxvit_rw_tiny"].items() if k.endswith("bias_table")} == {2}
    size = sum(os.path.getsize(path) for path in FIXTURES.iterdir())
    assert size < 2_100_000


def test_new_fixtures_cover_the_options():
    """What each fixture of the kinds timm's ConvNeXt models add exercises."""
    rmlp, maxxvit, v2, coatnext = (config_of(name) for name in NEW_KINDS)
    assert rmlp["transformer_options"]["position_bias"] == "mlp" and rmlp["pre_logits"]
    assert rmlp["transformer_options"]["layer_scale"] == 1e-6
    assert rmlp["partition_size"] == (2, 3) and rmlp["conv_options"]["padding"] == "symmetric"
    assert maxxvit["layout"] == "M-M-M-M" and maxxvit["conv_options"]["layer_scale"] == 1e-6
    assert maxxvit["transformer_options"]["position_bias"] == "mlp"
    assert v2["layout"] == "G-G-G-G" and v2["pre_logits"] and v2["partition_size"] == (2, 3)
    assert "position_bias" not in v2["transformer_options"]
    assert coatnext["layout"] == "C-C-T-T" and coatnext["conv_options"]["layer_scale"] == 1e-5
    assert coatnext["transformer_options"]["layer_scale"] is None
    # Each kind of ConvNeXt shortcut: pool only (8 -> 8), pool and projection with a
    # widening depthwise conv (8 -> 16), the identity.
    model, _, _ = convert("maxxvit_tiny")
    blocks = [layer for layer in model.layers if isinstance(layer, ConvNeXtBlock)]
    kinds = {
        (block.shortcut_pool is not None, block.shortcut_projection is not None,
         int(block.depthwise_conv.kernel.shape[-1]))
        for block in blocks
    }  # fmt: skip
    assert {(True, False, 1), (True, True, 2), (False, False, 1)} <= kinds


def test_maxxvit_variants_are_inferred_from_their_tensors():
    """Stem, depths, widths and the relative bias single out each ConvNeXt variant (of
    variants that differ only in their image size the first wins)."""
    for name, named in _MAXXVIT_CONFIGS.items():
        config = named.arguments()
        blocks, channels = config["blocks"], config["channels"]
        stem = config["stem_channels"]
        keys = {"stem.conv1.weight": np.empty((stem[0], 0)),
                "stem.conv2.weight": np.empty((stem[1], 0))}  # fmt: skip
        for stage, (depth, width) in enumerate(zip(blocks[1:], channels[1:])):
            last = f"stages.{stage}.blocks.{depth - 1}"
            kind = config["layout"].split("-")[stage]
            leaf = "mlp.fc2.weight" if kind in "CT" else "attn_grid.mlp.fc2.weight"
            keys[f"{last}.{leaf}"] = np.empty((width, 0))
        if config["transformer_options"].get("position_bias") == "mlp":
            keys["stages.3.blocks.0.attn_grid.attn.rel_pos.mlp.fc1.weight"] = np.empty((512, 2))
        assert _infer_name(keys, _MAXXVIT_CONFIGS, "from_timm_maxxvit") == first_of_its_sizes(
            name, _MAXXVIT_CONFIGS
        )


def test_mlp_bias_is_computed_from_timms_weights():
    """The converted RelPosMlp: ContinuousPositionBias2D with timm's fc1 / fc2 weights."""
    model, _, _ = convert("coatnet_rmlp_tiny")
    bias = model.get_layer("stage3_block1").relative_bias
    assert isinstance(bias, ContinuousPositionBias2D) and bias.hidden_dim == 16
    assert bias.mode == "cr" and bias.dropout == 0.125
    state = fixture("coatnet_rmlp_tiny")[0]
    np.testing.assert_array_equal(
        ops.convert_to_numpy(bias.mlp_weights["mlp_hidden_kernel"]),
        state["stages.2.blocks.0.attn.rel_pos.mlp.fc1.weight"].T,
    )


def test_maxvit_variants_are_inferred_from_their_tensors():
    """Stem, depths, widths and the stem's bias (the _tf ports') single out each variant."""
    for name, named in _MAXVIT_CONFIGS.items():
        config = named.arguments()
        blocks, channels = config["blocks"], config["channels"]
        stem = config.get("stem_channels") or (channels[0],) * 2
        keys = {"stem.conv1.weight": np.empty((stem[0], 0)),
                "stem.conv2.weight": np.empty((stem[1], 0))}  # fmt: skip
        if config.get("stem_bias", True):
            keys["stem.conv1.bias"] = np.empty((stem[0],))
        for stage, (depth, width) in enumerate(zip(blocks[1:], channels[1:])):
            keys[f"stages.{stage}.blocks.{depth - 1}.attn_grid.mlp.fc2.weight"] = np.empty(
                (width, 0)
            )
        if config["transformer_options"].get("position_bias") == "mlp":  # maxvit_rmlp_*
            keys["stages.3.blocks.0.attn_grid.attn.rel_pos.mlp.fc1.weight"] = np.empty((512, 2))
        assert _infer_name(keys, _MAXVIT_CONFIGS) == first_of_its_sizes(name, _MAXVIT_CONFIGS)


def first_of_its_sizes(name, configs):
    """Of the variants that differ only in their image size (``_224`` / ``_384`` / ``_512``)
    the first registered, which inference picks."""
    stem = name.rsplit("_", 1)[0]
    return next(other for other in configs if other.rsplit("_", 1)[0] == stem)


def test_maxvit_errors():
    state, described, _, _ = fixture("maxvit_rw_tiny")
    config = maxvit_config_from_timm(described["cfg"], img_size=64)
    with pytest.raises(ValueError, match="from_timm_maxvit: the state dict .* none of the"):
        from_timm_maxvit(state)
    with pytest.raises(ValueError, match="from_timm_maxvit: unknown timm variant 'maxvit_x'"):
        from_timm_maxvit(state, "maxvit_x")
    broken = dict(state)
    del broken["stages.0.blocks.0.attn_grid.attn.qkv.bias"]
    with pytest.raises(ValueError, match=r"missing keys: \['stages.0.blocks.0.attn_grid.attn.qkv"):
        from_timm_maxvit(broken, config=config)
    cfg = json.loads(json.dumps(described["cfg"]))
    cfg["transformer_cfg"].update(head_first=False, use_nchw_attn=True)
    with pytest.raises(ValueError, match=r"use_nchw_attn=True.*head_first=False"):
        maxvit_config_from_timm(cfg, img_size=64)
    cfg["block_type"] = ["M", "M", "T", "M"]
    with pytest.raises(ValueError, match=r"block_type 'T' \(supported: 'M' in every stage\)"):
        maxvit_config_from_timm(cfg, img_size=64)
    with pytest.raises(ValueError, match=r"block_type 'M'.*maxvit_config_from_timm"):
        config_from_timm(cfg, img_size=64)


def test_maxxvit_errors():
    state, described, _, _ = fixture("maxxvit_tiny")
    # The MaxViT converter names the ConvNeXt blocks' keys and the converter that reads them.
    with pytest.raises(ValueError, match=r"ConvNeXt blocks .*from_timm_maxxvit"):
        from_timm_maxvit(state, config=config_of("maxvit_rw_tiny"))
    with pytest.raises(ValueError, match="from_timm_maxxvit: the state dict .* none of the"):
        from_timm_maxxvit(state)
    cfg = json.loads(json.dumps(described["cfg"]))
    cfg["block_type"] = ["M", "PM", "M", "M"]
    cfg["conv_cfg"]["stride_mode"] = "1x1"
    with pytest.raises(ValueError, match=r"block_type 'PM'.*stride_mode='1x1'"):
        maxxvit_config_from_timm(cfg, img_size=64)
    cfg = json.loads(json.dumps(described["cfg"]))
    cfg["conv_cfg"]["block_type"] = "mbconv"
    with pytest.raises(ValueError, match=r"conv_cfg.block_type='mbconv'"):
        maxxvit_config_from_timm(cfg, img_size=64)


def test_cli_converts_a_maxvit_checkpoint(tmp_path, capsys):
    """`posenc convert timm` tells a MaxViT from a CoAtNet, and the .keras file it writes
    loads with timm's outputs (the MaxViT's save/load round trip)."""
    state, described, images, logits = fixture("maxvit_tf_tiny")
    source = write_safetensors(tmp_path / "model.safetensors", state)
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"cfg": described["cfg"], "img_size": described["img_size"]}))
    out = str(tmp_path / "maxvit.keras")
    assert cli.main(["convert", "timm", source, "--timm-config", str(config), "--out", out]) == 0
    assert "to " + out in capsys.readouterr().out
    np.testing.assert_allclose(predict(keras.models.load_model(out), images), logits, atol=ATOL)
    # Without a configuration the variant is inferred: none of the registered ones here.
    assert cli.main(["convert", "timm", source, "--out", out]) == 1
    assert "from_timm_maxvit: the state dict" in capsys.readouterr().err


@pytest.mark.large  # the default tier's CLI case is the MaxViT's above
def test_cli_sends_convnext_checkpoints_to_the_maxxvit_converter(tmp_path, capsys):
    """`posenc convert timm` reads ConvNeXt blocks (conv_dw keys) as a MaxxViT's, with or
    without a timm configuration."""
    state, described, images, logits = fixture("coatnext_tiny")
    source = write_safetensors(tmp_path / "model.safetensors", state)
    out = str(tmp_path / "coatnext.keras")
    assert cli.main(["convert", "timm", source, "--out", out]) == 1
    assert "from_timm_maxxvit: the state dict" in capsys.readouterr().err
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"cfg": described["cfg"], "img_size": described["img_size"]}))
    assert cli.main(["convert", "timm", source, "--timm-config", str(config), "--out", out]) == 0
    np.testing.assert_allclose(predict(keras.models.load_model(out), images), logits, atol=ATOL)


def test_every_checkpoint_of_the_family_on_the_hub_has_a_zoo_name():
    """timm's hub checkpoints of maxxvit.py (NAME.TAG, listed by full_size.py) load by name:
    NAME is a zoo model whose parameter count is timm's."""
    document = json.loads((FIXTURES / "parameters.json").read_text())
    assert len(document["hf_hub_ids"]) == 52
    for checkpoint in document["hf_hub_ids"]:
        name = checkpoint.split(".")[0]
        spec = zoo.get_spec(name)
        assert spec.family in ("coatnet", "maxvit", "maxxvit"), checkpoint
        assert spec.family in TIMM_CONVERTERS, checkpoint
    counted = {**coatnet.TIMM_PARAMETERS, **maxvit.TIMM_PARAMETERS, **maxxvit.TIMM_PARAMETERS}
    for name, count in counted.items():
        assert document["parameters"][name] == count, name
