"""The length-generalisation experiment: its data, its models and its outputs."""

from __future__ import annotations

import csv
import os
import struct

import numpy as np
import pytest
from keras import ops

from keras_posenc import cli
from keras_posenc.experiments.length_generalization import (
    CLAIMS,
    COLUMNS,
    ENCODINGS,
    SCALED_ROPE,
    build_model,
    chance,
    claims_table,
    evaluate,
    length_generalization_experiment,
    markdown_table,
    scaled_rope,
    task_data,
)

pytestmark = pytest.mark.contract


def source_position(sequence, i, task, shift, position, marked):
    """Where the answer at position ``i`` lies, from the task's definition; None if nowhere."""
    if task == "copy_back":
        source = i - shift
    elif task == "copy_position":
        source = position
    else:  # the nearest earlier marked token, searched backwards one position at a time
        source = next((j for j in range(i - 1, -1, -1) if sequence[j] < marked), None)
    # An answer exists and lies in the past (causal).
    return source if source is not None and 0 <= source <= i else None


def expected_answers(tokens, task, shift, position, marked=3):
    """Labels and weights written out position by position."""
    labels = np.zeros(tokens.shape, np.int64)
    weights = np.zeros(tokens.shape, np.float64)
    for n, sequence in enumerate(tokens):
        for i in range(len(sequence)):
            source = source_position(sequence, i, task, shift, position, marked)
            if source is not None:
                labels[n, i] = sequence[source]
                weights[n, i] = 1.0
    return labels, weights


@pytest.mark.parametrize(
    "task, length, shift, position, marked",
    [
        ("copy_back", 64, 4, 3, 3),
        ("copy_back", 9, 7, 3, 3),
        ("copy_back", 3, 5, 3, 3),  # shorter than the shift: no answers
        ("copy_position", 64, 4, 3, 3),
        ("copy_position", 12, 4, 0, 3),
        ("copy_position", 3, 4, 5, 3),  # the position lies beyond the sequence
        ("copy_recent", 64, 4, 3, 3),
        ("copy_recent", 40, 4, 3, 1),  # one marked token: long gaps, often no answer yet
        ("copy_recent", 1, 4, 3, 5),  # a single position never has an earlier token
    ],
)
def test_task_data_labels(task, length, shift, position, marked):
    tokens, labels, weights = task_data(
        task,
        5,
        length,
        seed=7,
        vocabulary_size=6,
        shift=shift,
        position=position,
        marked=marked,
    )
    assert tokens.shape == labels.shape == weights.shape == (5, length)
    assert tokens.dtype == labels.dtype == np.int32 and weights.dtype == np.float32
    assert tokens.min() >= 0 and tokens.max() < 6
    expected_labels, expected_weights = expected_answers(tokens, task, shift, position, marked)
    np.testing.assert_array_equal(weights, expected_weights)
    # Only positions with an answer are scored; their labels must match exactly.
    np.testing.assert_array_equal(labels * weights, expected_labels * expected_weights)


def test_task_data_is_seeded_and_uses_every_token():
    first, _, _ = task_data("copy_back", 64, 64, seed=3)
    again, _, _ = task_data("copy_back", 64, 64, seed=3)
    other, _, _ = task_data("copy_back", 64, 64, seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    counts = np.bincount(first.ravel(), minlength=10)
    assert len(counts) == 10 and counts.min() > 300  # uniform over the 10 tokens (409.6 each)


def test_recency_answers_lie_at_varying_distances():
    """No one offset answers "copy_recent": the distances spread like a geometric law."""
    tokens, labels, weights = task_data("copy_recent", 200, 64, seed=5)
    distances = [
        i - source_position(tokens[n], i, "copy_recent", 4, 3, 3)
        for n in range(200)
        for i in range(64)
        if weights[n, i]
    ]
    counts = np.bincount(distances)
    assert counts[0] == 0 and counts[1] > counts[2] > counts[3] > counts[5] > 0
    # 3 of 10 tokens marked: the mean distance is 1 / 0.3 = 3.3 (the tail is cut at 64).
    assert np.mean(distances) == pytest.approx(1 / 0.3, abs=0.15)
    assert set(labels[weights > 0].tolist()) == {0, 1, 2}  # answers are marked tokens
    assert chance("copy_recent") == pytest.approx(1 / 3) and chance("copy_back") == 0.1


def test_task_data_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"task_data: `task` must be one of .*got 'reverse'"):
        task_data("reverse", 2, 8)
    with pytest.raises(ValueError, match=r"task_data: `length` must be an integer >= 1, got 0"):
        task_data("copy_back", 2, 0)
    with pytest.raises(ValueError, match=r"task_data: `marked` must be below `vocabulary_size`"):
        task_data("copy_recent", 2, 8, vocabulary_size=4, marked=4)
    with pytest.raises(ValueError, match=r"task_data: `marked` must be an integer >= 1, got 0"):
        task_data("copy_recent", 2, 8, marked=0)


def test_learned_absolute_refuses_lengths_beyond_its_table():
    model = build_model("learned_absolute", seed=0)
    assert model.max_length == 64
    assert model(np.zeros((1, 64), "int32")).shape == (1, 64, 10)
    message = r"learned absolute positions have a table of 64 rows .* length 65"
    with pytest.raises(ValueError, match=message):
        model(np.zeros((1, 65), "int32"))
    with pytest.raises(ValueError, match=r"table of 64 rows .* length 128"):
        evaluate(model, "copy_back", 128)
    # Every other encoding runs any length.
    assert build_model("relative_bias_log", seed=0).max_length is None


def test_experiment_rejects_bad_selections():
    with pytest.raises(ValueError, match=r"`encodings` must be a non-empty selection"):
        length_generalization_experiment(encodings=["bert"], verbose=0)
    with pytest.raises(ValueError, match=r"unknown setting 'epochs'"):
        length_generalization_experiment(epochs=3, verbose=0)
    with pytest.raises(ValueError, match=r"`workers` must be an integer >= 1, got 0"):
        length_generalization_experiment(workers=0, verbose=0)
    with pytest.raises(ValueError, match=r"`scaling_factor` is for the encodings 'rope_pi'"):
        build_model("rope", scaling_factor=2.0)
    with pytest.raises(ValueError, match=r"`scaling_factor` must be a finite number >= 1"):
        build_model("rope_pi", scaling_factor=0.5)
    with pytest.raises(ValueError, match=r"scaled_rope: `trained` must be a model of encoding"):
        scaled_rope(build_model("xpos"), "rope_pi", 128)


def test_every_encoding_builds_with_the_same_backbone():
    """Same size for all: the parameter counts differ only by the encodings' own tables."""
    counts = {name: build_model(name, seed=0).count_params() for name in ENCODINGS}
    base = counts["none"]
    for name in ("rope", "xpos", *SCALED_ROPE):
        assert counts[name] == base  # rotation has no weights
    # The computed schemes replace each block's one-bucket bias (1 x 2 heads) by their own:
    assert counts["alibi_scheme"] == base - 2 * 2  # none
    assert counts["kerple_log"] == counts["kerple_power"] == base + 2 * (2 * 2 - 2)  # r1, r2
    assert counts["fire"] == base + 2 * (2 + (32 + 32) + (32 * 2 + 2) - 2)  # c, L and the MLP
    assert counts["continuous_bias"] == base + 2 * ((512 + 512) + (512 * 2 + 2) - 2)
    assert counts["learned_absolute"] == base + 64 * 32  # one row of width 32 per position
    assert counts["relative_bias_log"] == base + 32 * 2  # one shared table: 32 buckets x 2 heads
    # Shaw: per block, key and value tables of 33 x 16 instead of the one-bucket bias (1 x 2).
    assert counts["shaw_keys_values"] == base + 2 * (2 * 33 * 16 - 2)
    # DeBERTa: one shared table of 2 x 32 buckets of width 32 and its layer norm; CoPE: a
    # table of 16 x 64 per block; neither has the one-bucket bias.
    assert counts["deberta"] == base - 2 * 2 + 64 * 32 + 2 * 32
    assert counts["cope"] == base + 2 * (16 * 64 - 2)


@pytest.mark.parametrize("encoding", ["deberta", "cope"])
def test_own_attention_blocks_are_causal(encoding):
    """DeBERTa's (an encoder's attention under the study's causal mask) and CoPE's blocks see
    the past only: changing token 40 changes no output before it, and changes outputs after.
    """
    model = build_model(encoding, seed=0)
    tokens = np.random.default_rng(1).integers(0, 10, (2, 80)).astype("int32")
    changed = tokens.copy()
    changed[:, 40] = (changed[:, 40] + 1) % 10
    before, after = (ops.convert_to_numpy(model(t)) for t in (tokens, changed))
    np.testing.assert_array_equal(before[:, :40], after[:, :40])
    assert np.abs(before[:, 40:] - after[:, 40:]).max() > 1e-3


def test_scaled_rope_rows_reuse_the_trained_rope_weights():
    """The scaled rows are the rope model's weights under another rotation, nothing retrained.

    At the training length every scaling is the identity (s = 1; dynamic NTK
    does not scale up to its training length), so the outputs equal rope's;
    at 4x the length they differ from rope's and from each other, except
    dynamic NTK, which over a whole sequence of length L is NTK-aware with
    s = L / 64.
    """
    rope = build_model("rope", seed=3, num_layers=1)
    tokens = np.random.default_rng(0).integers(0, 10, (2, 256)).astype("int32")
    expected = ops.convert_to_numpy(rope(tokens[:, :64]))
    for name in SCALED_ROPE:
        model = scaled_rope(rope, name, 64)
        for ours, theirs in zip(model.get_weights(), rope.get_weights()):
            np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_allclose(ops.convert_to_numpy(model(tokens[:, :64])), expected, atol=1e-5)
    outputs = {
        name: ops.convert_to_numpy(scaled_rope(rope, name, 256)(tokens)) for name in SCALED_ROPE
    }
    outputs["rope"] = ops.convert_to_numpy(rope(tokens))
    np.testing.assert_allclose(outputs["rope_dynamic_ntk"], outputs["rope_ntk"], atol=1e-5)
    pairs = [("rope", "rope_pi"), ("rope", "rope_ntk"), ("rope_pi", "rope_yarn")]
    pairs += [("rope", "rope_llama3"), ("rope_yarn", "rope_llama3"), ("rope_ntk", "rope_longrope")]
    for first, second in pairs:
        assert np.abs(outputs[first] - outputs[second]).max() > 1e-3, (first, second)
    # LongRoPE's long factors are NTK-aware's divisors (its frequencies), with its own
    # attention factor; YaRN keeps the paper's ramp, with which the published rows were run.
    longrope, ntk = (
        scaled_rope(rope, name, 256).blocks[0].rotary for name in ("rope_longrope", "rope_ntk")
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(longrope.frequencies(16, 256)),
        ops.convert_to_numpy(ntk.frequencies(16)),
        rtol=1e-6,
    )
    assert scaled_rope(rope, "rope_yarn", 256).blocks[0].rotary.yarn_convention == "paper"
    assert scaled_rope(rope, "rope_pi", 256).blocks[0].rotary.scaling_factor == 4.0


# Large: two spawned workers each import TensorFlow and train (28 s on JAX, about 5 % of its
# default suite); what the workers run does not depend on the backend.
@pytest.mark.full
def test_parallel_workers_give_the_numbers_of_one_process(capfd):
    """Two spawned worker processes reproduce the one-process run (every job seeds itself).

    The workers import TensorFlow (keras_hub does, on every backend) quietly,
    as the command line does: none of the lines it writes to file descriptor 2
    while it is imported reach the terminal.
    """
    settings = {
        "encodings": ["rope_yarn", "alibi_scheme"],
        "tasks": ["copy_recent"],
        "seeds": (1,),
        "train_steps": 4,
        "train_length": 16,
        "test_lengths": (16, 32),
        "eval_positions": 64,
        "verbose": 0,
    }
    alone = length_generalization_experiment(workers=1, **settings)
    capfd.readouterr()
    parallel = length_generalization_experiment(workers=2, **settings)
    assert "absl::InitializeLog" not in capfd.readouterr().err
    assert [(r["encoding"], r["test_length"]) for r in parallel] == [
        ("rope_yarn", 16),
        ("rope_yarn", 32),
        ("alibi_scheme", 16),
        ("alibi_scheme", 32),
    ]
    for one, two in zip(alone, parallel):
        # At most one of the >= 64 scored positions may flip on a rounding difference.
        assert two["accuracy"] == pytest.approx(one["accuracy"], abs=1 / 64 + 1e-9), (one, two)
        assert (two["params"], two["seeds"]) == (one["params"], 1)


@pytest.mark.large
def test_tiny_run_learns_the_relative_task_and_writes_its_outputs(tmp_path):
    """The suite's size of the run: two encodings, one seed, a short training.

    A relative bias learns "the token 4 back" at the training length far above
    chance (0.10); learned absolute positions report n/a beyond their table.
    """
    rows = length_generalization_experiment(
        quick=True,
        out=tmp_path,
        encodings=["relative_bias_clip", "learned_absolute"],
        tasks=["copy_back"],
        test_lengths=(64, 128),
        verbose=0,
    )
    cells = {(r["encoding"], r["test_length"]): r for r in rows}
    assert len(rows) == 4 and all(set(r) == set(COLUMNS) for r in rows)
    assert cells["relative_bias_clip", 64]["accuracy"] > 0.6, cells
    assert cells["relative_bias_clip", 128]["note"] == ""
    beyond = cells["learned_absolute", 128]
    assert beyond["accuracy"] is None and beyond["note"] == "n/a"
    assert cells["learned_absolute", 64]["accuracy"] is not None

    with open(os.path.join(tmp_path, "length_generalization.csv")) as handle:
        written = list(csv.DictReader(handle))
    assert [(r["encoding"], r["test_length"], r["note"]) for r in written] == [
        ("relative_bias_clip", "64", ""),
        ("relative_bias_clip", "128", ""),
        ("learned_absolute", "64", ""),
        ("learned_absolute", "128", "n/a"),
    ]
    assert written[3]["accuracy"] == ""  # no number where the model cannot run
    assert float(written[0]["accuracy"]) == pytest.approx(
        cells["relative_bias_clip", 64]["accuracy"]
    )
    markdown = open(os.path.join(tmp_path, "length_generalization.md")).read()
    assert markdown == markdown_table(rows)
    params = cells["learned_absolute", 64]["params"]
    # One block; the position table (64 x 32) instead of the shared clip table (33 x 2).
    assert params == cells["relative_bias_clip", 64]["params"] + 64 * 32 - 33 * 2
    assert f"| learned_absolute | {params:,} | " in markdown and markdown.count("n/a") == 2
    png = open(os.path.join(tmp_path, "length_generalization.png"), "rb").read()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1200, 500)  # matplotlib: 12 x 5 inches at 100 dpi


def test_claims_table_sets_each_claim_next_to_the_measured_verdict():
    assert set(CLAIMS) == set(ENCODINGS) - {"sinusoidal_relative_bias"}  # no paper claims it

    def series(encoding, task, accuracies):
        return [
            {"task": task, "encoding": encoding, "test_length": n, "accuracy": a, "seeds": 3}
            for n, a in zip((64, 128, 256), accuracies)
        ]

    rows = (
        series("rope", "copy_back", (1.0, 0.96, 0.5))
        + series("rope", "copy_recent", (0.9, 0.3, 0.3))
        + series("learned_absolute", "copy_back", (1.0, None, None))
        + series("alibi", "copy_back", (0.5, 0.5, 0.5))  # below 0.55, half way from 0.1 to 1
        + series("alibi", "copy_recent", (0.7, 0.7, 0.68))  # above 0.67 (chance 1/3)
        + series("sinusoidal_relative_bias", "copy_back", (1.0, 1.0, 1.0))
    )
    table = claims_table(rows).splitlines()
    assert table[2] == "| encoding | claim | copy_back: L=64 -> 256 | copy_recent: L=64 -> 256 |"
    assert table[4] == f"| rope | {CLAIMS['rope']} | 1.00 -> 0.50: holds to 128 | " + (
        "0.90 -> 0.30: falls at 128 |"
    )
    assert table[5] == f"| learned_absolute | {CLAIMS['learned_absolute']} | " + (
        "1.00 -> n/a: cannot run past 64 |  |"
    )
    assert table[6] == f"| alibi | {CLAIMS['alibi']} | 0.50 -> 0.50: not learned | " + (
        "0.70 -> 0.68: holds to 256 |"
    )
    assert len(table) == 7  # no claim, no line


def test_cli_reports_a_bad_selection(capsys):
    """The command is wired to the experiment; a bad choice fails before any training."""
    assert cli.main(["experiment", "length", "--quick", "--encodings", "bert"]) == 1
    error = capsys.readouterr().err
    assert "posenc experiment: error: length_generalization_experiment: `encodings`" in error


@pytest.mark.full
@pytest.mark.long
def test_quick_cli_run(tmp_path, capsys):
    """`posenc experiment length --quick`: every encoding on the relative task, one seed."""
    assert cli.main(["experiment", "length", "--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for name in ENCODINGS:
        assert f"\n{name}: copy_back 64: " in "\n" + printed  # the summary line per encoding
    assert "19 trainings (1 seed(s))" in printed  # the scaled rows are the rope model's
    with open(os.path.join(tmp_path, "length_generalization.csv")) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(ENCODINGS) * 5
    accuracy = {(r["encoding"], r["test_length"]): r["accuracy"] for r in rows}
    for name in ("relative_bias_clip", "shaw_keys_values"):
        assert float(accuracy[name, "64"]) > 0.6  # chance is 0.10
    for name in SCALED_ROPE:  # s = 1 at the training length: rope's number
        assert accuracy[name, "64"] == accuracy["rope", "64"]
    assert accuracy["learned_absolute", "1024"] == ""
