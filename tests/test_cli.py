"""The posenc command's start: no backend for --help, quiet commands, one naming scheme,
and the lazy ``import keras_posenc`` that still registers every class."""

from __future__ import annotations

import csv
import json
import logging
import os
import subprocess
import sys
import textwrap

import keras
import pytest
from repository import docs_path

from keras_posenc import cli, cli_studies, layers, zoo

pytestmark = pytest.mark.contract

HEAVY = ("tensorflow", "jax", "torch", "keras", "keras_hub")


def _python(code: str, *, drop: tuple[str, ...] = (), timeout: int = 300):
    """Runs ``code`` in a fresh interpreter with this run's environment less ``drop``."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.neutral
def test_help_and_argument_errors_import_no_backend():
    # One process: --help, a subcommand's --help, a missing argument and an unknown option;
    # then the heavy packages found in sys.modules.
    result = _python(
        f"""
        import json, sys
        from keras_posenc import cli
        codes = []
        for argv in (["--help"], ["probe", "padding", "--help"], ["export"], ["demo", "--nope"]):
            try:
                cli.main(argv)
            except SystemExit as exit:
                codes.append(exit.code)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        print(json.dumps({{"codes": codes, "heavy": heavy}}))
        """
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"codes": [0, 0, 2, 2], "heavy": []}
    assert "the following arguments are required: model, --out" in result.stderr


def test_info_prints_no_third_party_log_lines():
    # TF_CPP_MIN_LOG_LEVEL is dropped: the command's own default must do the work.
    result = _python(
        "import sys; from keras_posenc.cli import main; sys.exit(main(['info']))",
        drop=("TF_CPP_MIN_LOG_LEVEL",),
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert f"backend       {keras.backend.backend()}" in result.stdout
    for noise in ("absl", "cuInit", "I0000", "E0000", "W0000", "Warning"):
        assert noise not in result.stdout


@pytest.mark.large
def test_verbose_shows_what_the_default_hides():
    # Importing TensorFlow prints lines before its log level applies (absl); --verbose keeps
    # them. keras_hub imports TensorFlow on every backend.
    plain = _python("import tensorflow", drop=("TF_CPP_MIN_LOG_LEVEL",))
    assert plain.stderr, "this TensorFlow prints nothing at import: nothing to hide here"
    result = _python(
        "import sys; from keras_posenc.cli import main; sys.exit(main(['info', '--verbose']))",
        drop=("TF_CPP_MIN_LOG_LEVEL",),
    )
    assert result.returncode == 0
    assert plain.stderr.splitlines()[0] in result.stderr


def test_import_keras_posenc_registers_every_class_when_keras_loads(tmp_path):
    # `import keras_posenc` alone imports no Keras; once Keras is imported, every class is
    # registered (the same set as importing the three subpackages) and a .keras file of
    # relative layers (their position schemes in their configs) loads.
    inputs = keras.Input((None, 8))
    x = layers.RelativeTransformerEncoder(16, 2, relative="bias", position="t5")(inputs)
    x = layers.MultiHeadRelativeAttention(2, 4, position="irpe")(x, x)
    fixture = tmp_path / "relative_layers.keras"
    keras.Model(inputs, x).save(fixture)
    result = _python(
        f"""
        import json, sys
        import keras_posenc
        before = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        import keras
        ours = lambda: sorted(k for k in keras.saving.get_custom_objects() if "keras_posenc>" in k)
        names = ours()
        model = keras.saving.load_model({str(fixture)!r})
        import keras_posenc.layers, keras_posenc.probe, keras_posenc.zoo
        after = ours()
        print(json.dumps({{"before": before, "names": names, "after": after,
                           "layers": len(model.layers)}}))
        """
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["before"] == []
    assert report["names"] == report["after"]
    assert {"keras_posenc>ClipPositions", "keras_posenc>PosENet"} <= set(report["names"])
    assert report["layers"] > 1


@pytest.mark.large
def test_importing_a_submodule_first_still_registers_the_zoo():
    # Keras imported from inside keras_posenc.layers: registration waits for that import to
    # finish, then brings in the zoo and probe too.
    result = _python(
        """
        from keras_posenc.layers import ClipPositions
        import keras
        names = keras.saving.get_custom_objects()
        print(sorted(n for n in names if n.startswith("keras_posenc>")))
        """
    )
    assert result.returncode == 0, result.stderr
    names = result.stdout.strip().splitlines()[-1]
    assert "keras_posenc>ClipPositions" in names
    assert "keras_posenc>PosENet" in names  # a zoo class: registered without importing the zoo


@pytest.mark.neutral
def test_keras_hubs_classes_register_when_keras_hub_is_imported():
    # keras_posenc.models imports keras_hub, and keras_hub TensorFlow: a user of the zoo alone
    # does not pay for it; keras-hub's from_preset, which needs the classes, comes with it.
    result = _python(
        """
        import sys, keras_posenc, keras
        from keras_posenc import zoo
        before = ["keras_hub" in sys.modules, "keras_posenc.models" in sys.modules]
        import keras_hub
        found = keras.saving.get_registered_object("keras_posenc>CoAtNetBackbone")
        print(before, found.__name__)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[False, False] CoAtNetBackbone"
    result = _python(  # keras_hub first
        """
        import keras_hub, keras_posenc, keras
        print(keras.saving.get_registered_object("keras_posenc>ShawTransformerSeq2SeqLM"))
        """,
    )
    assert result.returncode == 0, result.stderr
    assert "ShawTransformerSeq2SeqLM" in result.stdout.strip().splitlines()[-1]


@pytest.mark.neutral
def test_registered_classes_are_the_same_in_this_process():
    from keras_posenc import _registration

    for name in _registration.REGISTERING:
        assert name in sys.modules
    registered = {k for k in keras.saving.get_custom_objects() if k.startswith("keras_posenc>")}
    assert {"keras_posenc>ClipPositions", "keras_posenc>PosENet"} <= registered


@pytest.mark.neutral
def test_output_names_follow_one_scheme():
    assert cli.output_path("out", "m", "keras") == os.path.join("out", "m.keras")
    assert cli.output_path("out", "m", "onnx") == os.path.join("out", "m.onnx")
    assert cli.output_path("out", "m", "tf_saved_model") == os.path.join("out", "m.savedmodel")
    assert cli.output_path("out", "m", "litert") == os.path.join("out", "m.tflite")
    for word in ("NAME.keras", "NAME.onnx", "NAME.savedmodel/", "NAME.tflite",
                 "decoder_step.savedmodel/", "decoder_step.tflite"):  # fmt: skip
        assert word in cli.NAMING
    parser = cli.build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    for command in ("export", "demo"):
        assert cli.NAMING in " ".join(subcommands[command].format_help().split())


def _build_tiny(units: int = 3) -> keras.Model:
    inputs = keras.Input((None, 4))
    return keras.Model(inputs, keras.layers.Dense(units)(inputs))


@pytest.mark.large
def test_demo_saves_the_keras_file_and_names_outputs_by_the_scheme(tmp_path, capsys):
    zoo.register_model("test_cli_demo_tiny", _build_tiny, family="test_cli")
    try:
        assert cli.main(["demo", "test_cli_demo_tiny", "--out", str(tmp_path)]) == 0
        # A second run refuses to replace the .keras file before any work...
        assert cli.main(["demo", "test_cli_demo_tiny", "--out", str(tmp_path)]) == 1
        assert "test_cli_demo_tiny.keras' already exists" in capsys.readouterr().err
    finally:
        zoo.unregister_model("test_cli_demo_tiny")
    assert sorted(os.listdir(tmp_path)) == [
        "test_cli_demo_tiny.keras",
        "test_cli_demo_tiny.onnx",
        "test_cli_demo_tiny.savedmodel",
        "test_cli_demo_tiny.tflite",
    ]
    loaded = keras.saving.load_model(tmp_path / "test_cli_demo_tiny.keras")
    assert loaded.output_shape == (None, None, 3)


@pytest.mark.neutral
def test_quiet_runtime_restores_what_it_changed(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    logger = logging.getLogger("tensorflow")
    level = logger.level
    with cli.quiet_runtime():
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
        assert logger.level == logging.ERROR
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    assert logger.level == level
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")  # a user's own value wins
    with cli.quiet_runtime():
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"


def _timings() -> list[dict[str, str]]:
    with open(docs_path("data", "cli_timings.csv"), newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.neutral
def test_help_quotes_the_recorded_timings():
    """Every time --help states is a row of docs/data/cli_timings.csv (benchmarks/cli_quick.py)."""
    rows = {(r["command"], r["backend"]): r for r in _timings()}
    for command, (wall, cpu, load) in cli.MEASURED.items():
        row = rows[command, "tensorflow"]
        assert row["exit_status"] == "0" and row["cores"] == "2"
        assert (float(row["wall_s"]), float(row["cpu_s"]), float(row["load_start"])) == (
            pytest.approx(wall, abs=0.05),
            pytest.approx(cpu, abs=0.05),
            pytest.approx(load, abs=0.005),
        )
    parser_text = cli.build_parser().format_help()
    assert "minute" not in parser_text  # no unmeasured claim in the top-level help


@pytest.mark.neutral
def test_quick_runs_print_no_progress_bar_estimates(capsys):
    """The experiments' fit runs without Keras' progress bar unless --verbose (verbose=2)."""
    calls = []

    def fake_study(**kwargs):
        calls.append(kwargs)
        return []

    args = cli.build_parser().parse_args(["experiment", "length", "--quick"])
    cli_studies.run_study(fake_study, lambda rows: "", args, {})
    args = cli.build_parser().parse_args(["experiment", "length", "--quick", "--verbose"])
    cli_studies.run_study(fake_study, lambda rows: "", args, {})
    assert [c["verbose"] for c in calls] == [1, 2]
