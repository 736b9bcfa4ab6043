"""Bad inputs and faults a careless or hostile user tries, each with the outcome it must have.

One section per case of the hardening issue (#19); every parametrised id is one bad input
tried, so ``pytest tests/test_bad_inputs.py --collect-only -q`` counts them:

1. a second ``generate`` with another output length (crashed on TensorFlow);
2. export verification of NaN outputs and bad tolerances (passed, or divided by zero);
3. exports that fail verification, or land on an existing target (left or merged files);
4. fairseq layer specs that expand to millions of layers (gigabytes, huge messages);
5. converter tensors of the wrong shape or with zero weight-norm vectors (truncated, NaN);
6. weights of a bigger configuration loaded into a smaller one (silently);
7. beam search with NaN logits or a NaN length penalty (all padding, score -inf);
8. empty batches and sequences, and CLI failures that printed tracebacks;
9. ``backbone_weights="imagenet"`` offline (an unexplained download failure).

Export cases run on TensorFlow only (see ``ONLY_ON_TENSORFLOW``); CLI cases run the
``posenc`` command in subprocesses, started together so they overlap.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.error
import zipfile

import keras
import numpy as np
import pytest
from test_convert_timm import fixture as timm_fixture
from test_convert_timm import write_safetensors

from keras_posenc import cli, layers, zoo
from keras_posenc.convert import (
    config_from_timm,
    from_fairseq_fconv,
    from_timm_coatnet,
    parse_fairseq_layers,
)
from keras_posenc.export import export_model, verification, worker
from keras_posenc.generation import beam_search, greedy_search
from keras_posenc.zoo.convs2s import ConvS2S, ConvS2SLanguageModel
from reference.fairseq_checkpoint import fconv_checkpoint

pytestmark = pytest.mark.contract

ONLY_ON_TENSORFLOW = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="export runs on TensorFlow from every backend (a TensorFlow subprocess from JAX "
    "and PyTorch, 10-50 s a model); its bad-input cases run once, in the TensorFlow suite",
)


def tiny_convs2s() -> ConvS2S:
    """The same tiny ConvS2S at every call (same seed, same weights)."""
    keras.utils.set_random_seed(0)
    return ConvS2S(
        12,
        12,
        embed_dim=8,
        encoder_layers=[(8, 3)],
        decoder_layers=[(8, 3)],
        decoder_out_embed_dim=8,
        max_source_positions=16,
        max_target_positions=32,
        dropout=0.0,
    )


# --------------------------------------------------------------------------- 1. generate twice


def test_generate_again_with_another_output_length_gives_the_right_tokens():
    # 3 source tokens: max_length 16; 5 tokens: 20 (2 * length + 10). A first call is
    # right (the generation tests check it): 5 tokens after 3 must give what a fresh,
    # identical model gives, and 3 tokens again what they gave first.
    short, long = np.array([[5, 6, 2]]), np.array([[5, 6, 7, 8, 2]])
    model = tiny_convs2s()
    first = model.generate(short)
    np.testing.assert_array_equal(model.generate(long), tiny_convs2s().generate(long))
    np.testing.assert_array_equal(model.generate(short), first)


# --------------------------------------------------------------------------- 2. NaN verification


def rescaling_model() -> keras.Model:
    """x -> 2x: exact in any runtime, so even a zero tolerance verifies."""
    inputs = keras.Input((None, 4))
    return keras.Model(inputs, keras.layers.Rescaling(2.0)(inputs))


def nan_model() -> keras.Model:
    inputs = keras.Input((4,))
    dense = keras.layers.Dense(3)
    model = keras.Model(inputs, dense(inputs))
    dense.bias.assign(np.full(3, np.nan, "float32"))
    return model


@ONLY_ON_TENSORFLOW
def test_verification_fails_on_nan_outputs(tmp_path):
    path = tmp_path / "nan.onnx"
    expected = r"not finite \(6 of 6 values are NaN or Inf\) in the Keras model's output 0"
    with pytest.raises(ValueError, match=expected):
        export_model(nan_model(), path)
    assert not path.exists()


@ONLY_ON_TENSORFLOW
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_verification_fails_when_only_the_artifact_is_not_finite(tmp_path, monkeypatch, bad):
    real = verification._run_artifact

    def broken(report, inputs):
        outputs = real(report, inputs)
        outputs[0][0, 0, 0] = bad
        return outputs

    monkeypatch.setattr(verification, "_run_artifact", broken)
    expected = r"not finite \(1 of 56 values are NaN or Inf\) in the artifact's output 0"
    with pytest.raises(ValueError, match=expected):
        export_model(rescaling_model(), tmp_path / "m", format="tf_saved_model")


@ONLY_ON_TENSORFLOW
@pytest.mark.parametrize(
    "atol, rtol, argument",
    [
        (-1e-4, 1e-4, "atol"),
        (np.nan, 1e-4, "atol"),
        (np.inf, 1e-4, "atol"),
        (1e-4, -1.0, "rtol"),
        (1e-4, np.nan, "rtol"),
        (1e-4, "0.1", "rtol"),
    ],
)
@pytest.mark.neutral
def test_tolerances_must_be_finite_and_not_negative(tmp_path, atol, rtol, argument):
    with pytest.raises(ValueError, match=rf"export_model: `{argument}` must be a finite number"):
        export_model(rescaling_model(), tmp_path / "m.onnx", atol=atol, rtol=rtol)
    assert not os.listdir(tmp_path)  # checked before anything is exported


@ONLY_ON_TENSORFLOW
def test_zero_tolerance_is_allowed(tmp_path):
    report = export_model(rescaling_model(), tmp_path / "m.onnx", atol=0, rtol=0)
    assert report.max_abs_difference == 0.0


# --------------------------------------------------------------------------- 3. atomic exports


def reject_the_artifact(monkeypatch):
    """A verification failure injected after a real export: the artifact's outputs are off."""
    real = verification._run_artifact
    monkeypatch.setattr(verification, "_run_artifact", lambda *args: [x + 1 for x in real(*args)])


@ONLY_ON_TENSORFLOW
@pytest.mark.parametrize("format, name", [("onnx", "m.onnx"), ("tf_saved_model", "saved")])
def test_failed_verification_leaves_nothing_at_the_target(tmp_path, monkeypatch, format, name):
    reject_the_artifact(monkeypatch)
    with pytest.raises(ValueError, match="differs from the Keras model"):
        export_model(rescaling_model(), tmp_path / name, format=format)
    assert os.listdir(tmp_path) == []  # no artifact, no temporary folder


@ONLY_ON_TENSORFLOW
def test_failed_overwrite_keeps_the_previous_artifact(tmp_path, monkeypatch):
    target = tmp_path / "saved"
    export_model(rescaling_model(), target, format="tf_saved_model")
    before = sorted(os.listdir(target))
    reject_the_artifact(monkeypatch)
    with pytest.raises(ValueError, match="differs from the Keras model"):
        export_model(rescaling_model(), target, format="tf_saved_model", overwrite=True)
    assert sorted(os.listdir(target)) == before and os.listdir(tmp_path) == ["saved"]


@ONLY_ON_TENSORFLOW
@pytest.mark.parametrize("format, name", [("onnx", "m.onnx"), ("tf_saved_model", "saved")])
def test_existing_target_is_refused_unless_overwrite(tmp_path, format, name):
    target = tmp_path / name
    if format == "onnx":
        target.write_bytes(b"an older file")
    else:
        target.mkdir()
        (target / "notes.txt").write_text("kept")
    with pytest.raises(FileExistsError, match=r"already exists; pass overwrite=True"):
        export_model(rescaling_model(), target, format=format)
    report = export_model(rescaling_model(), target, format=format, overwrite=True)
    assert report.path == str(target) and report.max_abs_difference == 0.0
    if format == "onnx":
        assert target.read_bytes() != b"an older file"
    else:  # replaced, not merged
        assert "notes.txt" not in os.listdir(target) and (target / "saved_model.pb").exists()
    assert sorted(os.listdir(tmp_path)) == [name]


@ONLY_ON_TENSORFLOW
def test_cli_export_refuses_an_existing_target_unless_overwrite(tmp_path, capsys):
    model = tmp_path / "tiny.keras"
    rescaling_model().save(model)
    out = tmp_path / "out"
    out.mkdir()
    (out / "tiny.onnx").write_bytes(b"older")
    argv = ["export", str(model), "--format", "onnx", "--out", str(out)]
    assert cli.main(argv) == 1
    assert "already exists; pass overwrite=True (posenc: --overwrite)" in capsys.readouterr().err
    assert cli.main([*argv, "--overwrite"]) == 0
    assert (out / "tiny.onnx").read_bytes() != b"older"


# --------------------------------------------------------------------------- 4. fairseq specs


@pytest.mark.parametrize(
    "spec",
    [
        "[(8, 3)] * 10000 * 300",  # 3,000,000 layers; each `* n` alone was under the cap
        "[(8, 3)] * 300 * 10000",
        " + ".join(["[(8, 3)] * 900"] * 40),
        " + ".join(["[(8, 3)]"] * 3000),  # nested 3000 deep: Python's parser recursion
        "[" + ", ".join(["(8, 3)"] * 1001) + "]",
    ],
    ids=["repeat-repeat", "repeat-repeat-2", "sum-of-repeats", "deep-sum", "long-literal"],
)
@pytest.mark.neutral
def test_layer_spec_total_is_capped_before_expanding(spec):
    with pytest.raises(ValueError, match="parse_fairseq_layers") as error:
        parse_fairseq_layers(spec)
    assert len(str(error.value)) < 400  # an excerpt of the spec, not all of it
    assert "1000 layers" in str(error.value) or "nested too deeply" in str(error.value)


@pytest.mark.neutral
def test_converter_errors_quote_an_excerpt_of_huge_checkpoints():
    checkpoint = fconv_checkpoint()
    state = dict(checkpoint["model"])
    args = argparse.Namespace(**vars(checkpoint["args"]))
    for index in range(20_000):  # a crafted state dict with 20,000 keys of nothing
        state[f"encoder.junk.{index}.weight"] = np.zeros(1, "float32")
    with pytest.raises(ValueError, match=r"unexpected keys: \[.*\] and 19990 more") as error:
        from_fairseq_fconv(state, args=args)
    assert len(str(error.value)) < 2000
    args.encoder_layers = "[(8, 3)] * 2 + " + " + ".join(["[(8, 3)]"] * 900)
    with pytest.raises(ValueError, match="missing keys") as error:
        from_fairseq_fconv(dict(checkpoint["model"]), args=args)
    assert len(str(error.value)) < 2000


# --------------------------------------------------------------------------- 5. converter shapes


@pytest.fixture(scope="module")
def timm_tiny():
    """A tiny timm CoAtNet's state dict (the converter tests' fixture) and its configuration."""
    state, described, _, _ = timm_fixture("coatnet_nano_rw_tiny")
    return state, config_from_timm(described["cfg"], img_size=tuple(described["img_size"]))


@pytest.mark.parametrize(
    "rows, suffix", [(+3, ".safetensors"), (-3, ".pth")], ids=["3-rows-too-many", "3-rows-too-few"]
)
def test_timm_tensor_of_another_shape_is_refused(tmp_path, timm_tiny, rows, suffix):
    state, config = timm_tiny
    key = "stages.2.blocks.0.attn.qkv.weight"  # (3 * 16, 16, 1, 1): q, k, v of 16 channels
    state = dict(state, **{key: np.zeros((48 + rows, 16, 1, 1), "float32")})
    path = tmp_path / f"model{suffix}"
    if suffix == ".safetensors":
        write_safetensors(path, state)
    else:
        torch = pytest.importorskip("torch", reason="the case is a PyTorch checkpoint file")
        torch.save({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()}, path)
    expected = (
        rf"from_timm_coatnet: '{path}': '{key}' must have shape \(48, 16, 1, 1\) for this "
        rf"architecture, got \({48 + rows}, 16, 1, 1\)"
    )
    with pytest.raises(ValueError, match=expected):
        from_timm_coatnet(path, config=config)


def test_timm_relative_tables_of_another_grid_are_still_resized(timm_tiny):
    state, config = timm_tiny
    model = from_timm_coatnet(state, config=dict(config, input_shape=(96, 96, 3)))
    assert model.input_shape == (None, 96, 96, 3)


@pytest.mark.parametrize(
    "key",
    ["encoder.fc1.weight_v", "decoder.convolutions.1.weight_v", "decoder.fc3.weight_v"],
)
def test_fairseq_zero_weight_norm_vectors_are_refused(key):
    checkpoint = fconv_checkpoint()
    state = dict(checkpoint["model"])
    vectors = np.array(state[key])
    if "convolutions" in key:  # (kernel, in, 2C), normalised per output channel
        vectors[..., 3] = 0.0
    else:  # a Linear's (out, in), normalised per output row
        vectors[3] = 0.0
    state[key] = vectors
    with pytest.raises(ValueError, match=rf"'{key}' has a vector of norm 0"):
        from_fairseq_fconv(state, args=checkpoint["args"])


@pytest.mark.neutral
def test_fairseq_shape_errors_name_the_file(tmp_path):
    torch = pytest.importorskip("torch", reason="the case is a PyTorch checkpoint file")
    checkpoint = fconv_checkpoint()
    key = "encoder.convolutions.1.weight_v"
    checkpoint["model"][key] = checkpoint["model"][key][:2]
    path = tmp_path / "model.pt"
    torch.save(checkpoint, path)
    expected = rf"from_fairseq_fconv: '{path}': '{key}' must have shape \(3, 8, 16\)"
    with pytest.raises(ValueError, match=expected):
        from_fairseq_fconv(path)


# --------------------------------------------------------------------------- 6. bigger weights

TINY_COATNET = dict(channels=(8, 8, 16, 32, 32), input_shape=(32, 32, 3), num_classes=5)


@pytest.fixture(scope="module")
def bigger_coatnet_weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp("coatnet")
    model = zoo.create("coatnet_0", blocks=(1, 1, 1, 2, 1), **TINY_COATNET)
    model.save_weights(folder / "big.weights.h5")
    model.save(folder / "big.keras")
    return folder


@pytest.mark.parametrize("file", ["big.weights.h5", "big.keras"])
def test_weights_of_a_bigger_configuration_are_refused(bigger_coatnet_weights, file):
    path = bigger_coatnet_weights / file
    expected = "holds 13 saved variables this configuration has no place for"
    with pytest.raises(ValueError, match=expected) as error:
        zoo.create("coatnet_0", weights=path, blocks=(1, 1, 1, 1, 1), **TINY_COATNET)
    message = str(error.value)
    assert "layers/relative_transformer_block2d_2/attention_norm/vars/0" in message
    assert str(path) in message


def test_weights_with_optimizer_state_still_load(tmp_path):
    # A .keras file of a compiled model holds the optimizer's variables too: not extra.
    model = zoo.create("coatnet_0", blocks=(1, 1, 1, 1, 1), **TINY_COATNET)
    model.compile(optimizer="adam")
    model.optimizer.build(model.trainable_variables)
    model.save(tmp_path / "trained.keras")
    path = tmp_path / "trained.keras"
    loaded = zoo.create("coatnet_0", weights=path, blocks=(1, 1, 1, 1, 1), **TINY_COATNET)
    np.testing.assert_array_equal(loaded.weights[-1].numpy(), model.weights[-1].numpy())


def test_weights_at_another_input_size_still_load(bigger_coatnet_weights):
    overrides = dict(TINY_COATNET, input_shape=(64, 64, 3))
    model = zoo.create(
        "coatnet_0", weights=bigger_coatnet_weights / "big.weights.h5", blocks=(1, 1, 1, 2, 1),
        **overrides,
    )  # fmt: skip
    assert model.input_shape == (None, 64, 64, 3)


# --------------------------------------------------------------------------- 7. beam search


@pytest.mark.neutral
@pytest.mark.parametrize("penalty", [np.nan, np.inf, -np.inf, -1.0], ids=str)
def test_length_penalty_must_be_finite(penalty):
    model = tiny_convs2s()
    with pytest.raises(ValueError, match="beam_search: `length_penalty` must be a finite number"):
        beam_search(model, np.array([[4, 5, 2]]), length_penalty=penalty)


@pytest.fixture(scope="module")
def nan_convs2s():
    model = tiny_convs2s()
    model.decoder_fc3.bias.assign(np.full(12, np.nan, "float32"))
    return model


@pytest.mark.parametrize("search", ["beam", "greedy", "greedy-no-cache"])
def test_nan_logits_raise(nan_convs2s, search):
    source = np.array([[4, 5, 2], [6, 7, 2]])
    name = "beam_search" if search == "beam" else "greedy_search"
    with pytest.raises(ValueError, match=rf"{name}: the model's logits are not finite"):
        if search == "beam":
            beam_search(nan_convs2s, source, beam_size=2)
        else:
            greedy_search(nan_convs2s, source, use_cache=search == "greedy")


# --------------------------------------------------------------------------- 8. empty inputs


def attention(relative, **options):
    return lambda: layers.MultiHeadRelativeAttention(2, 4, relative=relative, **options)


def encoder():
    return layers.RelativeTransformerEncoder(16, 2)


def glu():
    return layers.GLUConv1D(6, 3)


def muse(block):
    return lambda: block(16, 2)


# The layer, its input shapes and the output shape it must give.
EMPTY_CALLS = {
    "attention-kv-no-queries": (attention("keys_values"), [(2, 0, 8), (2, 3, 8)], (2, 0, 8)),
    "attention-kv-no-keys": (attention("keys_values"), [(2, 3, 8), (2, 0, 8)], (2, 3, 8)),
    "attention-kv-batch-0": (attention("keys_values"), [(0, 3, 8), (0, 3, 8)], (0, 3, 8)),
    "attention-keys-batch-0": (attention("keys"), [(0, 3, 8), (0, 3, 8)], (0, 3, 8)),
    "attention-bias-nothing": (attention("bias", position="t5"), [(2, 0, 8)] * 2, (2, 0, 8)),
    "encoder-no-tokens": (encoder, [(2, 0, 8)], (2, 0, 8)),
    "encoder-batch-0": (encoder, [(0, 3, 8)], (0, 3, 8)),
    "glu-conv-no-tokens": (glu, [(2, 0, 8)], (2, 0, 6)),
    "glu-conv-batch-0": (glu, [(0, 4, 8)], (0, 4, 6)),
    # A reshape with -1 beside an axis of 0 failed on PyTorch and JAX (dynamic convolutions).
    "muse-encoder-batch-0": (muse(layers.MUSEEncoderLayer), [(0, 5, 8)], (0, 5, 8)),
    "muse-decoder-batch-0": (muse(layers.MUSEDecoderLayer), [(0, 5, 8), (0, 4, 8)], (0, 5, 8)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(EMPTY_CALLS))
def test_empty_batches_and_sequences_give_empty_outputs(case):
    make, shapes, expected = EMPTY_CALLS[case]
    output = keras.ops.convert_to_numpy(make()(*[np.zeros(s, "float32") for s in shapes]))
    assert output.shape == expected and np.isfinite(output).all()


def test_generation_of_an_empty_batch_is_empty():
    model = tiny_convs2s()
    assert greedy_search(model, np.zeros((0, 4), "int32")).shape == (0, 18)
    tokens, scores = beam_search(model, np.zeros((0, 4), "int32"), beam_size=2)
    assert tokens.shape == (0, 18) and scores.shape == (0,)
    # A language model's empty batch gave NumPy's "zero-size array to reduction".
    keras.utils.set_random_seed(0)
    lm = ConvS2SLanguageModel(13, embed_dim=8, decoder_layers=[(8, 3)], decoder_out_embed_dim=8)
    assert greedy_search(lm, np.zeros((0, 3), "int32"), max_length=6).shape == (0, 6)
    tokens, scores = beam_search(lm, np.zeros((0, 3), "int32"), beam_size=2, max_length=6)
    assert tokens.shape == (0, 6) and scores.shape == (0,)


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=lambda f: f.__name__)
def test_generation_from_an_empty_source_is_refused(search):
    expected = rf"{search.__name__}: `encoder_token_ids` must hold at least one token per row"
    with pytest.raises(ValueError, match=expected):
        search(tiny_convs2s(), np.zeros((2, 0), "int32"))


def truncated_keras_file(folder) -> str:
    path = os.path.join(folder, "tiny.keras")
    rescaling_model().save(path)
    with open(path, "rb") as handle:
        data = handle.read()
    truncated = os.path.join(folder, "truncated.keras")
    with open(truncated, "wb") as handle:
        handle.write(data[: len(data) // 2])
    return truncated


@pytest.mark.neutral
def test_truncated_keras_weights_are_named(tmp_path):
    path = truncated_keras_file(tmp_path)
    with pytest.raises(ValueError, match=f"not a valid .keras file: '{path}'"):
        zoo.create("coatnet_0", weights=path, blocks=(1, 1, 1, 1, 1), **TINY_COATNET)


class NotRegistered(keras.layers.Layer):
    """A custom layer a TensorFlow subprocess cannot deserialise."""

    def call(self, x):
        return x + 1.0


@ONLY_ON_TENSORFLOW
def test_subprocess_export_failure_shows_the_workers_error_first(tmp_path):
    # The JAX/PyTorch route, run from the TensorFlow suite (it is backend-independent).
    inputs = keras.Input((4,))
    model = keras.Model(inputs, NotRegistered()(inputs))
    specs = [{"shape": [None, 4], "dtype": "float32"}]
    with pytest.raises(RuntimeError) as error:
        worker._export_in_subprocess(model, str(tmp_path / "m.onnx"), "onnx", specs)
    first, *rest = str(error.value).splitlines()
    assert "Could not locate class 'NotRegistered'" in first
    assert "register_keras_serializable" in str(error.value)  # the hint, after the error
    assert len(rest) <= 3 and "Traceback" not in str(error.value)


@pytest.mark.neutral
def test_a_worker_that_died_unheard_shows_its_last_lines(tmp_path):
    # Killed before writing its error (e.g. out of memory): its output is all there is.
    printed = "\n".join(f"line {i}" for i in range(30)) + "\nKilled"
    died = subprocess.CompletedProcess([], -9, "", printed)
    message = worker._worker_failure("onnx", str(tmp_path / "request"), died)
    assert "exit status -9, Killed" in message.splitlines()[0]
    assert message.endswith("Its last lines:\n" + "\n".join(printed.splitlines()[-15:]))
    # Where it named its error, that comes first and its traceback stays hidden.
    with open(tmp_path / "request.error", "w") as handle:
        json.dump({"stage": "export", "error": "ValueError: no"}, handle)
    message = worker._worker_failure("onnx", str(tmp_path / "request"), died)
    assert message.endswith("failed: ValueError: no") and "line 29" not in message


# --------------------------------------------------------------------------- 8. the CLI


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """The CLI cases of the issue that printed a traceback, each run as ``python -m
    keras_posenc.cli``; all start at once (each process spends seconds importing Keras),
    then are collected."""
    folder = tmp_path_factory.mktemp("cli")
    file = folder / "file.txt"
    file.write_text("a file, not a folder")
    (folder / "empty.pt").write_bytes(b"")
    model = str(folder / "tiny.keras")  # a real one: the commands used to load it first
    rescaling_model().save(model)
    cases = {
        "export-out-is-a-file": ["export", model, "--out", str(file)],
        "export-out-below-a-file": ["export", model, "--out", str(file / "sub")],
        "demo-out-is-a-file": ["demo", "--out", str(file)],
        "demo-set-without-a-name": ["demo", "--set", "num_classes=3", "--out", str(folder)],
        "convert-empty-pt": ["convert", "fairseq", str(folder / "empty.pt"), "--out", "x.keras"],
    }
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-m", "keras_posenc.cli", *argv],
            cwd=folder,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, argv in cases.items()
    }
    results = {}
    for name, process in processes.items():
        out, err = process.communicate(timeout=300)
        results[name] = (process.returncode, out, err)
    return results


CLI_CASES = {
    "export-out-is-a-file": r"posenc export: error: --out must be a folder; .*file.txt' is a file",
    "export-out-below-a-file": r"posenc export: error: .*Not a directory: .*file.txt/sub'",
    "demo-out-is-a-file": r"posenc demo: error: --out must be a folder; .*file.txt' is a file",
    "demo-set-without-a-name": r"posenc demo: error: --set changes a zoo model's configuration: "
    r"name the model",
    "convert-empty-pt": r"posenc convert: error: .*'.*empty.pt' is not a PyTorch checkpoint",
}


@pytest.mark.neutral
@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_errors_are_one_line(cli_runs, case):
    code, _, err = cli_runs[case]
    assert code == 1, err
    assert "Traceback" not in err, err
    # TensorFlow's and absl's own start-up lines may precede it: one line is ours.
    lines = [line for line in err.splitlines() if line.startswith("posenc ")]
    assert len(lines) == 1 and re.search(CLI_CASES[case], lines[0]), err


@pytest.mark.neutral
def test_cli_names_a_truncated_keras_file(tmp_path, capsys):
    # One line before too, but "File not found" (cli.main is what the command runs).
    path = truncated_keras_file(tmp_path)
    assert cli.main(["export", path, "--out", str(tmp_path / "out")]) == 1
    expected = f"posenc export: error: not a valid .keras file: '{path}'"
    assert capsys.readouterr().err.startswith(expected)


def attention_model() -> keras.Model:
    inputs = keras.Input((5, 8))
    attention = layers.MultiHeadRelativeAttention(2, 4, name="attention")
    return keras.Model(inputs, attention(inputs, inputs))


def edit_config(text: str) -> str:
    """A hand edit: a value the layer refuses (num_heads = -3)."""
    assert '"num_heads": 2' in text
    return text.replace('"num_heads": 2', '"num_heads": -3')


@pytest.mark.neutral
def test_a_refused_value_in_a_saved_config_is_named_first(tmp_path, capsys):
    # Keras wrapped the layer's message under three "could not be deserialized properly"
    # paragraphs, each quoting the whole config; it now comes first, in one line.
    path = str(tmp_path / "model.keras")
    attention_model().save(path)
    with zipfile.ZipFile(path) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    files["config.json"] = edit_config(files["config.json"].decode()).encode()
    edited = str(tmp_path / "edited.keras")
    with zipfile.ZipFile(edited, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    refused = "ValueError: MultiHeadRelativeAttention: `num_heads` must be an integer >= 1, got -3."
    with pytest.raises(ValueError, match=re.escape(f"cannot be loaded: {refused}")):
        zoo.registry.load_keras_file(edited)
    assert cli.main(["export", edited, "--out", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"posenc export: error: the configuration in '{edited}'")
    assert refused in error and "could not be deserialized" not in error
    # A preset folder's config.json: the same.
    folder = zoo.save_preset(attention_model(), str(tmp_path / "preset"))
    config = os.path.join(folder, "config.json")
    with open(config) as handle:
        text = handle.read()
    with open(config, "w") as handle:
        handle.write(edit_config(text))
    with pytest.raises(
        ValueError, match=r"load_preset: the configuration in .*" + re.escape(refused)
    ):
        zoo.load_preset(folder)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", " is not valid JSON: Expecting"),
        (json.dumps({"embed_dim": [16, 32]}), r": config_from_timm: `cfg` has no 'depths'"),
    ],
    ids=["broken", "no-depths"],  # the second was a KeyError and a traceback
)
@pytest.mark.neutral
def test_cli_names_a_bad_json_file(tmp_path, capsys, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    argv = ["convert", "timm", "m.safetensors", "--out", "x.keras", "--timm-config", str(path)]
    assert cli.main(argv) == 1
    expected = f"posenc convert: error: --timm-config '{re.escape(str(path))}'{message}"
    assert re.match(expected, capsys.readouterr().err)


# --------------------------------------------------------------------------- 9. downloads


@pytest.mark.neutral
def test_imagenet_backbone_offline_failure_is_explained(tmp_path, monkeypatch):
    # Offline as a machine without network is: the cache is empty and fetching the URL fails
    # the way urllib fails without a name server. Nothing here reaches the network.
    from keras.src.backend import config
    from keras.src.utils import file_utils

    def offline(url, *args, **kwargs):
        raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(config, "keras_home", lambda: str(tmp_path))
    monkeypatch.setattr(file_utils, "urlretrieve", offline)
    with pytest.raises(ConnectionError) as error:
        zoo.create("posenet_vgg16", input_shape=(32, 32, 3), backbone_weights="imagenet")
    message = str(error.value)
    assert "backbone_weights='imagenet' downloads the ImageNet weights of VGG16" in message
    assert "Temporary failure in name resolution" in message and "backbone_weights=None" in message
