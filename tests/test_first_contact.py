"""A new user's first contact (issue #57): the README's install command is CI's, its "Use it"
example prints no third-party line on any backend, every time the docs quote is the CSV's,
and a hub or URL source fails within seconds, in one line, without a network."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
from repository import benchmarks_path, repository_path

from keras_posenc import cli

pytestmark = pytest.mark.neutral

# What TensorFlow, absl, tf2onnx and LiteRT print: "I0000 00:00:...", "WARNING: All log
# messages before absl::InitializeLog()", "INFO: Created TensorFlow Lite XNNPACK delegate",
# a FutureWarning's "file.py:21: FutureWarning: ...".
THIRD_PARTY = re.compile(r"^([IWEF]\d{4} |WARNING|INFO|.*Warning: |.*cuInit|.*absl)")


def _readme_block(heading: str, language: str) -> str:
    text = repository_path("README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_readme_use_it_example_prints_no_third_party_line(backend, tmp_path):
    """The example in a fresh interpreter, as a user runs it: only its own lines."""
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    quiet_settings = ("TF_CPP_MIN_LOG_LEVEL", "KERAS_POSENC_VERBOSE", "PYTHONWARNINGS")
    env = {k: v for k, v in os.environ.items() if k not in quiet_settings}
    result = subprocess.run(
        [sys.executable, "-c", _readme_block("Use it", "python")],
        cwd=tmp_path,
        env=dict(env, KERAS_BACKEND=backend),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    noise = [line for line in result.stdout.splitlines() if THIRD_PARTY.match(line)]
    assert noise == []
    assert "max |difference|" in result.stdout
    # tf2onnx's dynamic axes ("unk__1077") are named: batch, then NAME_axis_I.
    onnx = pytest.importorskip("onnx")
    graph = onnx.load(str(tmp_path / "encoder.onnx")).graph
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output]]  # fmt: skip
    assert dims == [
        ["batch", f"{graph.input[0].name}_axis_1", 64],
        ["batch", f"{graph.output[0].name}_axis_1", 64],
    ]
    assert THIRD_PARTY.match("I0000 00:00:1796406251.62 17743 port.cc:153] oneDNN")


def _cli_quick():
    path = benchmarks_path("cli_quick.py")
    if path is None:
        pytest.skip("no benchmarks/ folder")
    spec = importlib.util.spec_from_file_location("cli_quick", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_documented_times_are_the_csvs(tmp_path):
    """Every quoted time (README, docs, --help's MEASURED) is rendered from
    docs/data/cli_timings.csv; rerun benchmarks/cli_quick.py --update-docs after measuring."""
    quick = _cli_quick()
    csv_path = repository_path("docs", "data", "cli_timings.csv")
    blocks = {}
    for path in quick.quoting_files(str(repository_path())):
        text, wanted, count = quick.stale(path, str(csv_path))
        name = os.path.relpath(path, repository_path())
        assert text == wanted, f"{name}: times differ from the CSV; run cli_quick --update-docs"
        blocks[name] = count
    assert blocks["README.md"] == 1 and blocks[os.path.join("keras_posenc", "cli.py")] == 1
    assert blocks[os.path.join("docs", "api", "cli.md")] == 1
    assert sum(blocks.values()) >= 7
    assert {"cpu_model", "wall_s", "load_start", "nice"} <= set(quick.COLUMNS)
    # The check fails on a number that is not the CSV's.
    changed = tmp_path / "cli_timings.csv"
    rows = list(csv.DictReader(csv_path.open()))
    for row in rows:
        if (row["command"], row["backend"]) == ("demo", "tensorflow"):
            row["wall_s"] = "47.5"
    with changed.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    text, wanted, _ = quick.stale(str(repository_path("README.md")), str(changed))
    assert text != wanted and "| `posenc demo` | 48 s |" in wanted


def test_install_command_is_cis_and_pytorchs_own_index_is_documented():
    readme = repository_path("README.md").read_text().splitlines()
    commands = [line.strip() for line in readme if line.strip().startswith("pip install")]
    pypi = 'pip install -c .ci/constraints.txt ".[all]"'
    assert pypi in commands, commands
    ci = repository_path(".ci", "run").read_text()
    code = [line.strip() for line in ci.splitlines() if not line.lstrip().startswith("#")]
    assert any(line.endswith(pypi + ")") for line in code)  # CI's install stage, as written
    assert not any("download.pytorch.org" in line for line in code)  # unreachable from CI
    # The second situation, PyTorch's CPU or CUDA build, as its own install page names it.
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in commands


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_offline_sources_fail_within_seconds_in_one_line(tmp_path, monkeypatch, capsys):
    """No network (a closed local port): posenc classify and translate fail before Keras
    is imported, in one line naming HF_HUB_OFFLINE=1 and the cache."""
    home, hub = tmp_path / "home", tmp_path / "hf"
    monkeypatch.setenv("KERAS_POSENC_HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(hub))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    port = _closed_port()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    image = tmp_path / "cat.jpg"
    image.write_bytes(b"not read")
    runs = [
        ["classify", str(image), "--model", "hf://timm/coatnet_0_rw_224.sw_in1k"],
        ["translate", "hello", "--model", f"http://127.0.0.1:{port}/wmt.fconv-py.tar.bz2"],
    ]
    for argv in runs:
        start = time.perf_counter()
        assert cli.main(argv) == 1
        assert time.perf_counter() - start < 10
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1, lines
        assert str(home) in lines[0] and "cannot connect to 127.0.0.1" in lines[0]
    assert "HF_HUB_OFFLINE=1" in cli_error(runs[0], capsys)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = cli_error(runs[0], capsys)
    assert "HF_HUB_OFFLINE is set" in message and str(hub) in message
    # A source in the cache is not refused: preset_path reads it (here: an empty folder of
    # huggingface_hub's cache counts as cached, and the library call explains what is missing).
    monkeypatch.delenv("HF_HUB_OFFLINE")
    (hub / "hub" / "models--timm--coatnet_0_rw_224.sw_in1k").mkdir(parents=True)
    from keras_posenc._sources import offline_failure

    assert offline_failure(runs[0][-1]) is None
    if importlib.util.find_spec("huggingface_hub") is not None:
        from keras_posenc.hub import preset_path

        start = time.perf_counter()
        with pytest.raises(ConnectionError, match="HF_HUB_OFFLINE=1") as caught:
            preset_path(runs[0][-1], progress=False)
        assert time.perf_counter() - start < 10 and "\n" not in str(caught.value)
    shutil.rmtree(hub)


def cli_error(argv: list[str], capsys) -> str:
    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    return line
