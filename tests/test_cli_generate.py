"""``posenc generate`` and ``posenc translate`` with keras-hub T5 presets (issue 52): the
command's lines equal ``model.generate`` of the same model (a keras-hub T5 preset folder with
a SentencePiece tokenizer trained here, a ``.keras`` DecoderLM with the byte tokenizer), for
greedy, beam, n-best and sampling; every error is one line on standard error, and the
argument errors come before Keras is imported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import keras
import keras_hub
import numpy as np
import pytest
from test_decoder_text import causal_lm
from test_t5_text import SOURCES, t5_seq2seq_lm

from keras_posenc import cli, zoo
from keras_posenc.convert import from_keras_hub_preset

pytestmark = pytest.mark.contract


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    """``posenc ARGV`` in this process: its exit status, its output lines, its stderr."""
    status = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    # Split on "\n" alone: str.splitlines also splits at "\x1c" and other separators that a
    # random byte-level model prints (the command escapes only "\n" and "\r").
    return status, captured.out.split("\n")[:-1], captured.err


def flattened(outputs: list) -> list[str]:
    return [text for output in outputs for text in output]


@pytest.fixture(scope="module")
def t5_preset(tmp_path_factory) -> str:
    folder = str(tmp_path_factory.mktemp("t5") / "preset")
    t5_seq2seq_lm().save_to_preset(folder)
    return folder


def test_a_t5_preset_folder_generates_what_the_converted_model_generates(
    t5_preset, tmp_path, capsys
):
    model = from_keras_hub_preset(t5_preset)
    status, lines, err = run(
        capsys, "generate", "--model", t5_preset, *SOURCES, "--max-length", 11, "--batch-size", 2
    )
    assert status == 0, err
    assert lines == model.generate(SOURCES, max_length=11)
    inputs = tmp_path / "sources.txt"
    inputs.write_text("\n".join(SOURCES[1:]) + "\n")
    status, lines, err = run(
        capsys, "generate", "--model", t5_preset, SOURCES[0], "--file", inputs,
        "--max-length", 8, "--beam", 3, "--n-best", 2,
    )  # fmt: skip
    assert status == 0, err
    assert lines == flattened(model.generate(SOURCES, max_length=8, beam_size=3, return_n_best=2))
    # translate hands a keras-hub T5 preset to the same loading, with its beam search.
    status, lines, err = run(
        capsys, "translate", "--model", t5_preset, *SOURCES, "--beam", 2, "--max-length", 8
    )
    assert status == 0, err
    assert lines == model.generate(SOURCES, max_length=8, beam_size=2)


def test_a_keras_decoder_lm_generates_greedily_and_samples_with_a_seed(tmp_path, capsys):
    keras.utils.set_random_seed(0)
    model = zoo.create("decoder_lm_tiny")
    model.save(tmp_path / "lm.keras")
    prompts = ["The quick", "Hello"]
    status, lines, err = run(capsys, "generate", "--model", tmp_path / "lm.keras", *prompts)
    assert status == 0, err
    # The default length: the longest prompt (with the start token) and 64 more.
    expected = [text.replace("\n", "\\n") for text in model.generate(prompts, max_length=74)]
    assert lines == expected and all(line.startswith(p) for line, p in zip(lines, prompts))
    status, lines, err = run(
        capsys, "generate", "--model", tmp_path / "lm.keras", *prompts, "--max-length", 16,
        "--sample", "top_k", "--top-k", 3, "--temperature", 0.7, "--seed", 5,
    )  # fmt: skip
    assert status == 0, err
    sampler = keras_hub.samplers.TopKSampler(k=3, temperature=0.7)
    sampled = model.generate(prompts, max_length=16, sampler=sampler, seed=5)
    assert lines == [text.replace("\n", "\\n") for text in sampled]


@pytest.mark.neutral
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--beam", "0", "hi"], "--beam must be at least 1, got 0."),
        (["--n-best", "3", "--beam", "2", "hi"], "--n-best 3 needs --beam of at least 3."),
        (["--sample", "top_k", "--beam", "2", "hi"], "--sample cannot be combined with --beam"),
        (["--sample", "top_k", "--length-penalty", "0.6", "hi"], "--length-penalty applies to"),
        (["--top-p", "0.5", "hi"], "--top-p: for sampling only; add --sample."),
        (["--sample", "top_k", "--top-p", "0.5", "hi"], "--top-p applies to --sample top_p"),
        (["--sample", "random", "--temperature", "0", "hi"], "--temperature must be above 0"),
        ([], "nothing to generate from: give texts or --file."),
        (["--file", "no_such_file.txt"], "No such file or directory: 'no_such_file.txt'"),
    ],
)
def test_argument_errors_are_one_line_before_keras(argv, message, tmp_path, capsys):
    status, lines, err = run(capsys, "generate", "--model", tmp_path / "lm.keras", *argv)
    assert status == 1 and lines == []
    assert err.count("\n") == 1 and err.startswith("posenc generate: error: ") and message in err


@pytest.mark.neutral
def test_help_and_argument_errors_import_no_backend():
    code = (
        "import json, sys\n"
        "from keras_posenc import cli\n"
        "codes = []\n"
        "for argv in (['generate', '--help'], ['generate', '--model', 'x.keras', '--beam', '0',"
        " 'hi'], ['generate', '--model', 'hf://org/repo', 'hi']):\n"
        "    try:\n"
        "        codes.append(cli.main(argv))\n"
        "    except SystemExit as exit:\n"
        "        codes.append(exit.code)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'jax', 'torch', 'keras', 'keras_hub'))\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"codes": [0, 1, 1], "heavy": []}
    assert "the keras-hub preset hf://org/repo is not in huggingface_hub's cache" in result.stderr
    assert "HF_HUB_OFFLINE is set" in result.stderr


def test_model_errors_are_one_line(t5_preset, tmp_path, capsys):
    def error(*argv) -> str:
        status, lines, err = run(capsys, *argv)
        assert status == 1 and lines == [] and err.count("\n") == 1, (status, lines, err)
        return err

    zoo.create("decoder_lm_tiny", vocab_size=40, tokenizer=None).save(tmp_path / "ids.keras")
    assert "holds a DecoderLM without a tokenizer" in error(
        "generate", "--model", tmp_path / "ids.keras", "hi"
    )
    keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]).save(tmp_path / "dense.keras")
    assert "holds a Sequential, which does not generate text" in error(
        "generate", "--model", tmp_path / "dense.keras", "hi"
    )
    lm = zoo.create("decoder_lm_tiny", max_length=12)
    lm.save(tmp_path / "lm.keras")
    long_prompt = "a prompt longer than the twelve positions of the model"
    assert (
        f"DecoderLM.generate: text 1 ('{long_prompt[:40]}...') gives {len(long_prompt) + 1} "
        "tokens (with the start token), more than the model's max_length = 12; shorten it."
    ) in error("generate", "--model", tmp_path / "lm.keras", "hi", long_prompt)
    assert (
        "DecoderLM.generate: text 0 ('hello') gives 6 tokens (with the start token), which "
        "leaves no room to generate within max_length = 5; give max_length > 6"
    ) in error("generate", "--model", tmp_path / "lm.keras", "hello", "--max-length", 5)
    assert "--model: no such file: 'missing.keras'" in error(
        "generate", "--model", "missing.keras", "a"
    )
    assert "--model: no such folder: './no/such/folder'" in error(
        "generate", "--model", "./no/such/folder", "a"
    )
    assert "from_keras_hub_preset: `preset` must be a folder" in error(
        "generate", "--model", "no_such_preset_here", "a"
    )
    # A keras-hub language model is no translator: translate says to use generate.
    causal_lm("llama").save_to_preset(str(tmp_path / "llama"))
    assert "is a language model (DecoderLM), which continues prompts: use `posenc generate" in (
        error("translate", "--model", tmp_path / "llama", "hi")
    )
    # A preset whose tokenizer lost its vocabulary file does not load as a model of ids only.
    broken = tmp_path / "broken"
    shutil.copytree(t5_preset, broken)
    os.remove(broken / "assets" / "tokenizer" / "vocabulary.spm")
    assert "needs 'assets/tokenizer/vocabulary.spm', which is missing" in error(
        "generate", "--model", broken, "a"
    )


def test_a_text_too_long_for_t5_names_the_text(tmp_path, capsys):
    model = zoo.create(
        "t5_small", vocabulary_size=259, hidden_dim=16, intermediate_dim=32, num_heads=2,
        num_layers=1, max_source_length=8, eos_id=2, tokenizer="byte",
    )  # fmt: skip
    model.save(tmp_path / "t5.keras")
    status, lines, err = run(capsys, "generate", "--model", tmp_path / "t5.keras", "ok", "too long")
    assert status == 1 and lines == []
    assert err == (
        "posenc generate: error: T5.generate: text 1 ('too long') gives 9 tokens (with the end "
        "token), more than the model's max_source_length = 8; shorten it.\n"
    )
    assert np.asarray(model.encode_texts(["ok"], "generate")).tolist() == [[114, 110, 2]]
