"""The package imports on every backend, and the CLI reports what it should."""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import pytest

import keras_posenc
from keras_posenc import cli, export, layers, probe, zoo


def test_public_modules_import():
    assert keras_posenc.layers is layers and keras_posenc.zoo is zoo and keras_posenc.probe is probe
    assert keras_posenc.__version__.count(".") >= 2


def test_info_reports_versions_backend_exporters_and_zoo():
    lines = cli.info_lines()
    text = "\n".join(lines)
    assert f"keras         {keras.__version__}" in lines
    assert f"backend       {keras.backend.backend()}" in text
    assert "export tf_saved_model" in text and "export onnx" in text
    assert f"zoo models    {len(zoo.list_models())}" in text


def test_info_names_a_missing_exporter_package(monkeypatch):
    monkeypatch.setitem(export.EXPORTER_PACKAGES, "onnx", ("tensorflow", "no_such_exporter_pkg"))
    text = "\n".join(cli.info_lines())
    assert "export onnx            unavailable" in text
    assert "no_such_exporter_pkg MISSING (ModuleNotFoundError" in text


def test_cli_main_runs_info(capsys):
    assert cli.main(["info"]) == 0
    assert "keras-posenc" in capsys.readouterr().out


def test_cli_without_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "usage: posenc" in capsys.readouterr().out


def test_cli_rejects_unknown_command(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["no-such-command"])
    assert raised.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def test_console_script_help_in_a_fresh_process():
    """The installed `posenc` entry point starts, on the backend of this test run."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from keras_posenc.cli import main; sys.exit(main())",
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert "usage: posenc" in result.stdout and "info" in result.stdout
