"""Presets and pretrained weights by name: keras_posenc.hub and `posenc classify`.

Nothing leaves the machine: hub_server.HubServer serves the hub's file API on 127.0.0.1
(HF_ENDPOINT points at it), and the repositories it serves are written here from the timm
fixtures of tests/fixtures/timm_coatnet/ (random weights with timm's logits), as the hub
holds timm's checkpoints: a timm config.json and model.safetensors. CI runs the suite in a
network namespace of its own with only the loopback interface (.ci/run, `unshare -n`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import safetensors.numpy
from hub_server import HubServer
from keras import ops
from test_convert_timm import fixture

from keras_posenc import cli, zoo
from keras_posenc.convert import config_from_timm
from keras_posenc.hub import ImagePreprocessor, load_preset, preset_path, save_preset
from keras_posenc.zoo.coatnet import build_coatnet

pytestmark = pytest.mark.contract

PIL = pytest.importorskip("PIL.Image", reason="images are decoded by Pillow")
pytest.importorskip("huggingface_hub", reason="hf:// sources download with huggingface_hub")

FIXTURE = "coatnet_nano_rw_tiny"
REPO = "timm/coatnet_nano_rw_tiny.sw_in1k"
SOURCE = "hf://" + REPO
LABELS = [f"label_{i}" for i in range(10)]


def timm_repo(name, labels=None, read=fixture):
    """A timm hub repository's files for a fixture (read by ``read``): timm's config.json
    and model.safetensors."""
    state, described, _, _ = read(name)
    pretrained = {
        "tag": "sw_in1k",
        "input_size": [3, *described["img_size"]],
        "interpolation": "bicubic",
        "crop_pct": 0.9,
        "crop_mode": "center",
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
        "num_classes": described["num_classes"],
        "first_conv": "stem.conv1",
        "classifier": "head.fc",
    }
    if labels is not None:
        pretrained["label_names"] = labels
    config = {
        "architecture": name,
        "num_classes": described["num_classes"],
        "num_features": described["cfg"]["embed_dim"][-1],
        "global_pool": "avg",
        "pretrained_cfg": pretrained,
    }
    weights = safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in state.items()})
    return {"config.json": json.dumps(config).encode(), "model.safetensors": weights}


@pytest.fixture(scope="module")
def registered():
    """The fixture's architecture as a zoo model, as timm's coatnet_*_rw_224 are."""
    _, described, _, _ = fixture(FIXTURE)
    config = config_from_timm(described["cfg"], img_size=tuple(described["img_size"]))
    zoo.register_model(FIXTURE, build_coatnet, family="coatnet", config=config)
    yield
    zoo.unregister_model(FIXTURE)


@pytest.fixture
def hub(tmp_path, monkeypatch, registered):
    """A local hub with the fixture's repository, and empty caches; read at call time."""
    server = HubServer({REPO: timm_repo(FIXTURE, LABELS)}).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()


def images(folder):
    """Three RGB images of different sizes with structure at several scales, as files."""
    rng = np.random.default_rng(7)
    paths = []
    for index, (height, width) in enumerate([(80, 96), (120, 72), (64, 64)]):
        y, x = np.mgrid[0:height, 0:width] / max(height, width)
        base = np.stack([np.sin(7 * x + index), np.cos(5 * y), np.sin(3 * (x + y))], -1)
        pixels = 127.5 * (1 + 0.8 * base + 0.2 * rng.standard_normal((height, width, 3)))
        path = folder / f"image{index}.png"
        PIL.fromarray(np.clip(pixels, 0, 255).astype("uint8")).save(path)
        paths.append(str(path))
    return paths


def predict(model, inputs):
    return ops.convert_to_numpy(model(inputs, training=False))


def run(model, inputs):
    """``model.predict``: on JAX one compiled program, about 3x faster than a first eager call."""
    return model.predict(inputs, verbose=0)


def assert_same_weights(model, other):
    assert len(model.weights) == len(other.weights)
    for mine, theirs in zip(model.weights, other.weights):
        np.testing.assert_array_equal(ops.convert_to_numpy(mine), ops.convert_to_numpy(theirs))


# --------------------------------------------------------------------------- the hub


def test_download_convert_then_cache_hit(hub, tmp_path):
    _, _, inputs, logits = fixture(FIXTURE)
    preset = load_preset(SOURCE, progress=False)
    np.testing.assert_allclose(run(preset.model, inputs), logits, atol=1e-4, rtol=0)
    assert preset.class_names == LABELS
    assert preset.preprocessor.image_size == (64, 64) and preset.preprocessor.crop_pct == 0.9
    assert preset.metadata["source"] == SOURCE and preset.metadata["commit"] == hub.commit(REPO)
    cached = tmp_path / "posenc" / "hf" / "timm" / "coatnet_nano_rw_tiny.sw_in1k"
    assert preset.path == str(cached)
    assert {"config.json", "model.weights.h5", "metadata.json", "preprocessor.json"} <= {
        p.name for p in cached.iterdir()
    }
    assert ("GET", f"/{REPO}/resolve/main/model.safetensors") in hub.requests

    hub.stop()  # a cache hit asks the hub nothing
    hub.requests.clear()
    model = zoo.create(FIXTURE, weights=SOURCE)
    assert_same_weights(model, preset.model)  # a forward pass would compile again on JAX
    assert hub.requests == []


@pytest.mark.neutral
def test_truncated_download_is_rejected_and_not_cached(hub, tmp_path):
    hub.truncated.add((REPO, "model.safetensors"))
    with pytest.raises(OSError, match="downloading model.safetensors of .* nothing was cached"):
        preset_path(SOURCE, progress=False)
    assert not (tmp_path / "posenc" / "hf").exists()
    snapshots = [p.name for p in (tmp_path / "hf").rglob("*") if "snapshots" in p.parts]
    assert "model.safetensors" not in snapshots
    hub.truncated.clear()  # served whole, it converts: nothing bad was kept
    assert os.path.isdir(preset_path(SOURCE, progress=False))


@pytest.mark.neutral
def test_offline_with_an_empty_cache_says_so(hub, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError, match=r"not in the cache .* HF_HUB_OFFLINE is set"):
        zoo.from_preset(SOURCE, progress=False)
    assert cli.main(["classify", images(tmp_path)[0], "--model", SOURCE]) == 1
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err
    assert hub.requests == []


# --------------------------------------------------------------------------- classify


def test_classify_before_and_after_the_preset_round_trip(hub, tmp_path, capsys):
    paths = images(tmp_path)
    assert cli.main(["classify", *paths, "--model", SOURCE, "--top", "5"]) == 0
    printed = capsys.readouterr().out.splitlines()
    # Per image: its path, then "  R. NAME  PROBABILITY" for the 5 classes, most likely first.
    blocks = [printed[printed.index(path) + 1 : printed.index(path) + 6] for path in paths]
    top = [[line.split()[1] for line in block] for block in blocks]
    for block in blocks:
        probabilities = [float(line.split()[2]) for line in block]
        assert probabilities == sorted(probabilities, reverse=True) and len(block) == 5
    # The preset saved again from the loaded model, and loaded from its folder.
    preset = load_preset(SOURCE, progress=False)
    folder = save_preset(
        preset.model,
        tmp_path / "copy",
        preprocessor=preset.preprocessor,
        class_names=preset.class_names,
    )
    again = load_preset(folder)
    assert [[name for name, _ in c] for c in again.classify(paths, top=5)] == top
    assert_same_weights(again.model, preset.model)
    assert again.preprocessor.get_config() == preset.preprocessor.get_config()


@pytest.mark.large
def test_the_same_top5_after_onnx_export(hub, tmp_path):
    import onnxruntime

    from keras_posenc.export import export_model

    preset = load_preset(SOURCE, progress=False)
    paths = images(tmp_path)
    batch = np.concatenate([np.asarray(preset.preprocessor(preset_image(p))) for p in paths])
    export_model(preset.model, str(tmp_path / "model.onnx"), format="onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"))
    exported = session.run(None, {session.get_inputs()[0].name: batch})[0]
    keras_top = np.argsort(-predict(preset.model, batch), -1)[:, :5]
    assert (np.argsort(-exported, -1)[:, :5] == keras_top).all()


@pytest.mark.full
def test_a_preset_loads_on_every_backend(hub, tmp_path):
    """The preset converted here is read by the other backends, in their own processes."""
    preset = load_preset(SOURCE, progress=False)
    paths = images(tmp_path)
    expected = [[name for name, _ in classes] for classes in preset.classify(paths)]
    assert preset.classify(paths[0]) == preset.classify([paths[0]])  # one image alone
    script = (
        "import json, sys\n"
        "from keras_posenc import zoo\n"
        "preset = zoo.load_preset(sys.argv[1])\n"
        "print(json.dumps([[n for n, _ in c] for c in preset.classify(sys.argv[2:])]))\n"
    )
    for other in {"tensorflow", "jax", "torch"} - {keras.backend.backend()}:
        env = dict(os.environ, KERAS_BACKEND=other)
        result = subprocess.run(
            [sys.executable, "-c", script, preset.path, *paths],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout.strip().splitlines()[-1]) == expected, other


@pytest.mark.full
def test_a_registered_timm_name_at_full_size(tmp_path, monkeypatch):
    """hf://timm/coatnet_nano_rw_224.sw_in1k as the hub holds it (timm's config, 1000
    classes at 224 x 224), with random weights written from a zoo model: ImageNet's class
    names, and the same outputs as the model the checkpoint came from."""
    from keras_posenc.convert import to_timm_state_dict

    source_model = zoo.create("coatnet_nano_rw_224")
    state = to_timm_state_dict(source_model)
    config = {
        "architecture": "coatnet_nano_rw_224",
        "num_classes": 1000,
        "pretrained_cfg": {"tag": "sw_in1k", "input_size": [3, 224, 224], "crop_pct": 0.9,
                           "interpolation": "bicubic", "mean": [0.5] * 3, "std": [0.5] * 3},
    }  # fmt: skip
    repo = "timm/coatnet_nano_rw_224.sw_in1k"
    files = {
        "config.json": json.dumps(config).encode(),
        "model.safetensors": safetensors.numpy.save(state),
    }
    with HubServer({repo: files}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
        preset = load_preset("hf://" + repo, progress=False)
    assert preset.class_names[:2] == ["tench", "goldfish"] and len(preset.class_names) == 1000
    batch = np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype("float32")
    np.testing.assert_allclose(
        predict(preset.model, batch), predict(source_model, batch), atol=1e-5, rtol=0
    )
    assert len(preset.classify(images(tmp_path)[:1], top=5)[0]) == 5


def preset_image(path):
    return keras.utils.img_to_array(keras.utils.load_img(path))


# --------------------------------------------------------------------------- preprocessing


def timm_eval_transform(image, size, crop_pct, mean, std):
    """timm's eval transform with Pillow, written from transforms_imagenet_eval: the shorter
    side resized (bicubic) to floor(size / crop_pct), the center cropped, normalised."""
    scale = int(size / crop_pct)
    width, height = image.size
    if height <= width:
        resized = image.resize((int(scale * width / height), scale), PIL.BICUBIC)
    else:
        resized = image.resize((scale, int(scale * height / width)), PIL.BICUBIC)
    top = int(round((resized.size[1] - size) / 2.0))
    left = int(round((resized.size[0] - size) / 2.0))
    crop = np.asarray(resized, "float32")[top : top + size, left : left + size] / 255.0
    return (crop - np.asarray(mean)) / np.asarray(std)


def test_preprocessing_follows_timms_eval_transform(tmp_path):
    """The geometry (which pixels survive) exactly; values within the kernels' difference."""
    path = images(tmp_path)[1]  # 120 x 72: portrait, the crop is vertical
    layer = ImagePreprocessor(56, crop_pct=0.875, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    assert layer.resized_size(120, 72) == (106, 64)
    ours = np.asarray(layer(preset_image(path)))[0]
    reference = timm_eval_transform(PIL.open(path), 56, 0.875, layer.mean, layer.std)
    assert ours.shape == reference.shape == (56, 56, 3)
    # Keras' and Pillow's antialiased bicubic kernels differ a little on noisy pixels
    # (measured: mean 0.0027, at most 0.07, the same on the three backends).
    assert np.abs(ours - reference).mean() < 0.01 and np.abs(ours - reference).max() < 0.2
    white = np.asarray(layer(np.full((30, 200, 3), 255, "uint8")))
    np.testing.assert_allclose(white, np.broadcast_to((1 - np.asarray(layer.mean)) /
                                                      np.asarray(layer.std), white.shape),
                               atol=1e-4)  # fmt: skip
    restored = ImagePreprocessor.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()


# --------------------------------------------------------------------------- errors


@pytest.mark.neutral
def test_bad_sources_are_named(tmp_path, hub):
    with pytest.raises(ValueError, match="not a preset folder: it lacks config.json"):
        preset_path(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        zoo.from_preset(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"must be hf://ORG/REPO"):
        preset_path("hf://timm/../etc")
    with pytest.raises(ValueError, match="no such repository"):
        preset_path("hf://timm/nothing_here", progress=False)
    hub.repos["timm/vit"] = {"config.json": json.dumps({"architecture": "vit_base"}).encode(),
                             "model.safetensors": b""}  # fmt: skip
    with pytest.raises(ValueError, match="'vit_base', which is not a zoo model; loadable: coat"):
        preset_path("hf://timm/vit", progress=False)
    assert ("GET", "/timm/vit/resolve/main/model.safetensors") not in hub.requests  # config first
    with pytest.raises(ValueError, match=r"ImagePreprocessor: `crop_pct` must be in \(0, 1\]"):
        ImagePreprocessor(32, crop_pct=1.5)
    with pytest.raises(ValueError, match="`interpolation` must be one of"):
        ImagePreprocessor(32, interpolation="cubic")
    assert cli.main(["classify", "x.png", "--model", SOURCE, "--top", "0"]) == 1
    assert not Path(os.environ["KERAS_POSENC_HOME"]).exists()  # nothing converted


def test_a_maxvit_repository_converts(tmp_path, monkeypatch):
    """A timm MaxViT repository loads through its own converter (from_timm_maxvit)."""
    from test_convert_timm_maxxvit import config_of
    from test_convert_timm_maxxvit import fixture as maxxvit_fixture

    from keras_posenc.zoo.maxvit import build_maxvit

    name, repo = "maxvit_tf_tiny", "timm/maxvit_tf_tiny.in1k"
    _, _, inputs, logits = maxxvit_fixture(name)
    zoo.register_model(name, build_maxvit, family="maxvit", config=config_of(name))
    server = HubServer({repo: timm_repo(name, read=maxxvit_fixture)}).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
        monkeypatch.setenv("KERAS_POSENC_HOME", str(tmp_path / "posenc"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        preset = load_preset("hf://" + repo, progress=False)
        np.testing.assert_allclose(run(preset.model, inputs), logits, atol=1e-4, rtol=0)
    finally:
        server.stop()
        zoo.unregister_model(name)
