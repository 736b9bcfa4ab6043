"""keras_posenc.convert.from_timm_coatnet: timm CoAtNet state dicts -> the zoo's CoAtNet.

The truth is timm itself: tests/fixtures/timm_coatnet/ holds three tiny timm CoAtNets with
random weights, one per family of timm's `_rw` options (coatnet_0_rw / coatnet_3_rw /
coatnet_nano_rw), each with its state dict, an input and timm's logits, written by that
folder's generate.py where timm is installed. The tests need neither timm nor torch for
the comparison.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops
from tiers import matrix

from keras_posenc import cli, zoo
from keras_posenc.convert import (
    config_from_timm,
    from_timm_coatnet,
    load_timm_state_dict,
    to_timm_state_dict,
)
from keras_posenc.convert.timm.checkpoint import _infer_name
from keras_posenc.zoo.coatnet import TIMM_CONFIGS

pytestmark = pytest.mark.contract

FIXTURES = Path(__file__).parent / "fixtures" / "timm_coatnet"
NAMES = ("coatnet_0_rw_tiny", "coatnet_2_rw_tiny", "coatnet_nano_rw_tiny")
ATOL = 1e-4


def fixture(name):
    """(state dict, the timm description, NHWC input, timm's logits)."""
    with open(FIXTURES / f"{name}.json", encoding="utf-8") as handle:
        described = json.load(handle)
    arrays = np.load(FIXTURES / f"{name}.npz", allow_pickle=False)
    state = {k[len("state/") :]: arrays[k] for k in arrays.files if k.startswith("state/")}
    return state, described, arrays["input"].transpose(0, 2, 3, 1), arrays["logits"]


@functools.cache  # the converted models are only read: convert each fixture once
def convert(name):
    state, described, images, logits = fixture(name)
    config = config_from_timm(described["cfg"], img_size=tuple(described["img_size"]))
    return from_timm_coatnet(state, config=config), images, logits


def predict(model, images):
    return ops.convert_to_numpy(model(images, training=False))


def write_safetensors(path, tensors, dtype="F32"):
    """The safetensors layout (8-byte little-endian header length, JSON header, raw data),
    written here independently of the library's reader."""
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for key, value in tensors.items():
        value = np.ascontiguousarray(value, dtype="<f4")
        if dtype == "BF16":  # keep the high 16 bits of each float32 (truncation)
            data = (value.view("<u4") >> 16).astype("<u2").tobytes()
        else:
            data = value.tobytes()
        header[key] = {"dtype": dtype, "shape": list(value.shape),
                       "data_offsets": [offset, offset + len(data)]}  # fmt: skip
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))
    return str(path)


# --------------------------------------------------------------------------- timm's outputs


# One converter down one path: the other variants (sizes, nano's options) on the matrix backend.
@pytest.mark.parametrize(*matrix("name", NAMES))
def test_logits_match_timm(name):
    model, images, logits = convert(name)
    assert model.output_shape == (None, 10)
    np.testing.assert_allclose(predict(model, images), logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_back_to_timm_gives_the_checkpoint(name):
    """to_timm_state_dict inverts the conversion exactly: every key, shape and value."""
    state = fixture(name)[0]
    model, _, _ = convert(name)
    back = to_timm_state_dict(model)
    assert sorted(back) == sorted(state)
    for key, value in state.items():
        assert back[key].dtype == np.float32 and back[key].shape == value.shape, key
        np.testing.assert_array_equal(back[key], value, err_msg=key)


@pytest.mark.neutral
def test_back_to_timm_needs_a_coatnet():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="predictions")])
    with pytest.raises(ValueError, match="to_timm_state_dict: expected a CoAtNet"):
        to_timm_state_dict(model)


@pytest.mark.neutral
def test_fixtures_cover_the_rw_options():
    """What each fixture exercises, so a regenerated fixture cannot silently lose it."""
    configs = {}
    for name in NAMES:
        state, described, images, _ = fixture(name)
        configs[name] = config_from_timm(described["cfg"], img_size=described["img_size"])
    conv = {n: c["conv_options"] for n, c in configs.items()}
    assert {c["stride_on"] for c in configs.values()} == {"pool", "depthwise"}
    assert {c["se_position"] for c in conv.values()} == {"before_norm", "after_activation"}
    assert {c["output_bias"] for c in conv.values()} == {True, False}
    assert {c["pre_activation"] for c in conv.values()} == {True, False}
    layer_scales = {c["transformer_options"]["layer_scale"] for c in configs.values()}
    assert layer_scales == {None, 1e-6}
    assert configs["coatnet_2_rw_tiny"]["input_shape"] == (64, 96, 3)  # not square
    assert all(c["transformer_options"]["attention_width"] == "input" for c in configs.values())
    size = sum(os.path.getsize(path) for path in FIXTURES.iterdir())
    assert size < 1_000_000


def test_save_load_round_trip(tmp_path):
    model, images, logits = convert("coatnet_2_rw_tiny")
    path = str(tmp_path / "timm.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(predict(loaded, images), predict(model, images), atol=1e-6)


@pytest.mark.large
def test_other_input_size_resizes_the_relative_tables():
    state, described, images, _ = fixture("coatnet_0_rw_tiny")
    config = config_from_timm(described["cfg"], img_size=64)
    model = from_timm_coatnet(state, config=config, input_shape=(128, 96, 3))
    table = model.get_layer("stage3_block1").relative_bias.table
    assert tuple(table.shape) == (2, 15, 11)  # 8 x 6 grid; the checkpoint's was 4 x 4
    assert predict(model, np.zeros((1, 128, 96, 3), "float32")).shape == (1, 10)


@pytest.mark.large
@pytest.mark.parametrize("format", ["onnx", "tf_saved_model"])
def test_converted_model_exports(format, tmp_path):
    from keras_posenc.export import export_model

    model, images, logits = convert("coatnet_nano_rw_tiny")
    suffix = ".onnx" if format == "onnx" else ""
    report = export_model(model, str(tmp_path / "nano") + suffix, format=format)
    assert report.max_abs_difference <= 1e-4


# --------------------------------------------------------------------------- files


def test_safetensors_and_torch_files(tmp_path):
    state, described, images, logits = fixture("coatnet_nano_rw_tiny")
    config = config_from_timm(described["cfg"], img_size=described["img_size"])
    path = write_safetensors(tmp_path / "model.safetensors", state)
    model = from_timm_coatnet(path, config=config)
    np.testing.assert_allclose(predict(model, images), logits, atol=ATOL, rtol=0)

    torch = pytest.importorskip("torch", reason="reading .pth files needs PyTorch")
    tensors = {f"module.{k}": torch.from_numpy(np.array(v)) for k, v in state.items()}
    tensors["module.stem.norm1.num_batches_tracked"] = torch.tensor(7)
    torch.save({"epoch": 3, "state_dict": tensors}, tmp_path / "checkpoint.pth")
    loaded = load_timm_state_dict(tmp_path / "checkpoint.pth")
    assert sorted(loaded) == sorted(state)
    np.testing.assert_array_equal(loaded["head.fc.weight"], state["head.fc.weight"])


def test_bfloat16_safetensors_are_widened(tmp_path):
    values = np.array([[1.0, -2.5], [3.140625, 1e-3]], "float32")
    path = write_safetensors(tmp_path / "bf16.safetensors", {"w": values}, dtype="BF16")
    loaded = load_timm_state_dict(path)["w"]
    assert loaded.dtype == np.float32
    np.testing.assert_allclose(loaded, values, rtol=2**-7)  # bfloat16 keeps 8 bits


@pytest.mark.neutral
def test_malformed_safetensors_are_rejected(tmp_path):
    path = tmp_path / "broken.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ValueError, match="not a safetensors file"):
        load_timm_state_dict(path)
    good = write_safetensors(tmp_path / "good.safetensors", {"w": np.zeros(4, "float32")})
    data = bytearray(Path(good).read_bytes())
    path.write_bytes(bytes(data[:-4]))  # the tensor's data cut short
    with pytest.raises(ValueError, match="not a safetensors file: .*not fully covered"):
        load_timm_state_dict(path)


class _Payload:
    def __reduce__(self):
        return (print, ("pickled code ran",))


@pytest.mark.neutral
def test_pickled_objects_are_rejected(tmp_path):
    torch = pytest.importorskip("torch", reason="writing .pth files needs PyTorch")
    torch.save({"state_dict": {"w": torch.zeros(2)}, "extra": _Payload()}, tmp_path / "x.pth")
    with pytest.raises(ValueError, match="holds pickled objects other than"):
        load_timm_state_dict(tmp_path / "x.pth")


@pytest.mark.neutral
def test_missing_torch_gives_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "keras-posenc\[torch\]"'):
        load_timm_state_dict(tmp_path / "model.pth")


# --------------------------------------------------------------------------- errors


def test_missing_unexpected_and_misshaped_keys():
    state, described, _, _ = fixture("coatnet_0_rw_tiny")
    config = config_from_timm(described["cfg"], img_size=64)
    broken = dict(state)
    del broken["stages.1.blocks.0.conv1_1x1.weight"]
    broken["stages.2.blocks.0.attn.rel_pos.mlp.fc1.weight"] = np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"missing keys: \['stages.1.blocks.0.conv1_1x1.weight'\]"
                       r"; unexpected keys: \['stages.2.blocks.0.attn.rel_pos.mlp"):  # fmt: skip
        from_timm_coatnet(broken, config=config)
    broken = dict(state)
    broken["stages.3.blocks.1.attn_grid.attn.qkv.weight"] = np.zeros((72, 24), "float32")
    with pytest.raises(ValueError, match=r"The checkpoint is a MaxViT: convert it with from_timm_"):
        from_timm_coatnet(broken, config=config)
    broken = dict(state)
    broken["stages.0.blocks.0.conv_dw.weight"] = np.zeros((16, 1, 7, 7), "float32")
    with pytest.raises(ValueError, match=r"ConvNeXt blocks .*: convert it with from_timm_maxxvit"):
        from_timm_coatnet(broken, config=config)
    broken = dict(state, **{"head.fc.bias": np.zeros(11, "float32")})
    with pytest.raises(ValueError, match=r"'head.fc.bias' must have shape \(10,\) .*got \(11,\)"):
        from_timm_coatnet(broken, config=config)
    with pytest.raises(ValueError, match="none of the supported timm variants"):
        from_timm_coatnet(state)
    with pytest.raises(ValueError, match="pass `name` or `config`, not both"):
        from_timm_coatnet(state, "coatnet_0_rw_224", config=config)
    with pytest.raises(ValueError, match="unknown timm variant 'coatnet_9_rw'"):
        from_timm_coatnet(state, "coatnet_9_rw")
    headless = {k: v for k, v in state.items() if not k.startswith("head.")}
    with pytest.raises(ValueError, match="no classifier"):
        from_timm_coatnet(headless, config=config)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rel_pos_type": "bias_tf"}, "rel_pos_type='bias_tf'"),
        ({"norm_layer": "rmsnorm2d"}, "norm_layer='rmsnorm2d'"),
        ({"head_first": False}, "head_first=False"),
        ({"window_size": [7, 7]}, r"window_size=\(7, 7\)"),
    ],
)
@pytest.mark.neutral
def test_unsupported_timm_options_are_named(change, message):
    _, described, _, _ = fixture("coatnet_0_rw_tiny")
    cfg = json.loads(json.dumps(described["cfg"]))
    cfg["transformer_cfg"].update(change)
    with pytest.raises(ValueError, match=rf"config_from_timm: .* transformer_cfg\.{message}"):
        config_from_timm(cfg, img_size=64)
    cfg = json.loads(json.dumps(described["cfg"]))
    cfg["conv_cfg"]["block_type"] = "convnext"
    cfg["block_type"] = ["C", "C", "T", "M"]
    with pytest.raises(ValueError, match=r"block_type 'M'.*conv_cfg.block_type='convnext'"):
        config_from_timm(cfg, img_size=64)


# --------------------------------------------------------------------------- the variants


def test_variants_are_inferred_from_their_tensors():
    """The stem, depths, widths, relative-bias MLP and final norm single out each registered
    variant (shapes only); of variants that differ only in their input size, the first."""
    for name, named in TIMM_CONFIGS.items():
        config = named.arguments()
        stem, blocks, channels = config["stem_channels"], config["blocks"], config["channels"]
        keys = {"stem.conv1.weight": np.empty((stem[0], 0)),
                "stem.conv2.weight": np.empty((stem[1], 0))}  # fmt: skip
        for stage, (depth, width) in enumerate(zip(blocks[1:], channels[1:])):
            last = "conv3_1x1" if stage < 2 else "mlp.fc2"
            keys[f"stages.{stage}.blocks.{depth - 1}.{last}.weight"] = np.empty((width, 0))
        transformer = config["transformer_options"]
        if transformer.get("position_bias") == "mlp":
            hidden = transformer["position_bias_dim"]
            keys["stages.2.blocks.0.attn.rel_pos.mlp.fc1.weight"] = np.empty((hidden, 2))
        if transformer.get("norm") == "batch":
            keys["norm.running_mean"] = np.empty((channels[-1],))
        expected = name.replace("_384", "_224")  # the same weights as at 224
        assert _infer_name(keys) == expected


@pytest.mark.neutral
def test_registered_variants_follow_timm():
    """The options of timm's _rw_coat_cfg / _rw_max_cfg per variant, as in timm's maxxvit.py."""
    conv = {name: config.conv_options for name, config in TIMM_CONFIGS.items()}
    transformer = {name: config.transformer_options for name, config in TIMM_CONFIGS.items()}
    stride = {name: config.stride_on for name, config in TIMM_CONFIGS.items()}
    assert [n for n in TIMM_CONFIGS if stride[n] == "pool"] == [
        "coatnet_nano_rw_224", "coatnet_0_rw_224", "coatnet_rmlp_1_rw_224"]  # fmt: skip
    assert [n for n in TIMM_CONFIGS if conv[n]["se_position"] == "before_norm"] == [
        "coatnet_0_rw_224", "coatnet_1_rw_224", "coatnet_bn_0_rw_224", "coatnet_rmlp_1_rw_224"
    ]  # fmt: skip
    assert [n for n in TIMM_CONFIGS if transformer[n].get("layer_scale")] == [
        "coatnet_3_rw_224", "coatnet_rmlp_2_rw_224", "coatnet_rmlp_2_rw_384",
        "coatnet_rmlp_3_rw_224"]  # fmt: skip
    assert [n for n in TIMM_CONFIGS if not transformer[n]["shortcut_bias"]] == [
        "coatnet_0_rw_224", "coatnet_1_rw_224", "coatnet_bn_0_rw_224", "coatnet_rmlp_1_rw_224"
    ]  # fmt: skip
    # timm's rel_pos_dim: 384 in coatnet_rmlp_nano_rw and coatnet_rmlp_1_rw ("was supposed
    # to be 512, woops"), 512 in the others; RelPosMlp's dropout 0.125.
    mlp = {n: transformer[n]["position_bias_dim"] for n in TIMM_CONFIGS
           if transformer[n].get("position_bias") == "mlp"}  # fmt: skip
    assert mlp == {"coatnet_rmlp_nano_rw_224": 384, "coatnet_rmlp_0_rw_224": 512,
                   "coatnet_rmlp_1_rw_224": 384, "coatnet_rmlp_1_rw2_224": 512,
                   "coatnet_rmlp_2_rw_224": 512, "coatnet_rmlp_2_rw_384": 512,
                   "coatnet_rmlp_3_rw_224": 512}  # fmt: skip
    assert all(transformer[n]["position_bias_dropout"] == 0.125 for n in mlp)
    assert (conv["coatnet_rmlp_1_rw_224"]["pool"], conv["coatnet_rmlp_1_rw_224"]["stride_pool"],
            transformer["coatnet_rmlp_1_rw_224"]["pool"]) == ("max3", "avg", "max3")  # fmt: skip
    assert [n for n in TIMM_CONFIGS if transformer[n].get("norm") == "batch"] == [
        "coatnet_bn_0_rw_224"]  # fmt: skip
    assert TIMM_CONFIGS["coatnet_bn_0_rw_224"].head_norm == "batch"
    assert TIMM_CONFIGS["coatnet_rmlp_2_rw_384"].input_shape == (384, 384, 3)
    assert all(name in zoo.list_models() for name in TIMM_CONFIGS)


# --------------------------------------------------------------------------- the CLI


def test_cli_converts_a_checkpoint(tmp_path, capsys):
    state, described, images, logits = fixture("coatnet_2_rw_tiny")
    source = write_safetensors(tmp_path / "model.safetensors", state)
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"cfg": described["cfg"], "img_size": described["img_size"]}))
    out = str(tmp_path / "coatnet.keras")
    assert cli.main(["convert", "timm", source, "--timm-config", str(config), "--out", out]) == 0
    assert "to " + out in capsys.readouterr().out
    loaded = keras.models.load_model(out)
    np.testing.assert_allclose(predict(loaded, images), logits, atol=ATOL, rtol=0)
    bad = ["convert", "timm", source, "--out", str(tmp_path / "x.h5")]
    assert cli.main(bad) == 1
