"""The length-generalisation experiment: its data, its models and its outputs."""

from __future__ import annotations

import csv
import os
import struct

import numpy as np
import pytest

from keras_posenc import cli
from keras_posenc.experiments.length_generalization import (
    COLUMNS,
    ENCODINGS,
    build_model,
    evaluate,
    length_generalization_experiment,
    markdown_table,
    task_data,
)


def expected_answers(tokens, task, shift, position):
    """Labels and weights written out position by position, from the task's definition."""
    labels = np.zeros(tokens.shape, np.int64)
    weights = np.zeros(tokens.shape, np.float64)
    for n, sequence in enumerate(tokens):
        for i in range(len(sequence)):
            source = i - shift if task == "copy_back" else position
            if 0 <= source <= i:  # an answer exists and lies in the past (causal)
                labels[n, i] = sequence[source]
                weights[n, i] = 1.0
    return labels, weights


@pytest.mark.parametrize(
    "task, length, shift, position",
    [
        ("copy_back", 64, 4, 3),
        ("copy_back", 9, 7, 3),
        ("copy_back", 3, 5, 3),  # shorter than the shift: no answers
        ("copy_position", 64, 4, 3),
        ("copy_position", 12, 4, 0),
        ("copy_position", 3, 4, 5),  # the position lies beyond the sequence
    ],
)
def test_task_data_labels(task, length, shift, position):
    tokens, labels, weights = task_data(
        task, 5, length, seed=7, vocabulary_size=6, shift=shift, position=position
    )
    assert tokens.shape == labels.shape == weights.shape == (5, length)
    assert tokens.dtype == labels.dtype == np.int32 and weights.dtype == np.float32
    assert tokens.min() >= 0 and tokens.max() < 6
    expected_labels, expected_weights = expected_answers(tokens, task, shift, position)
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


def test_task_data_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"task_data: `task` must be one of .*got 'reverse'"):
        task_data("reverse", 2, 8)
    with pytest.raises(ValueError, match=r"task_data: `length` must be an integer >= 1, got 0"):
        task_data("copy_back", 2, 0)


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


def test_every_encoding_builds_with_the_same_backbone():
    """Same size for all: the parameter counts differ only by the encodings' own tables."""
    names = ("none", "learned_absolute", "rope", "relative_bias_log", "shaw_keys_values")
    counts = {name: build_model(name, seed=0).count_params() for name in names}
    base = counts["none"]
    assert counts["rope"] == base  # rotation has no weights
    assert counts["learned_absolute"] == base + 64 * 32  # one row of width 32 per position
    assert counts["relative_bias_log"] == base + 32 * 2  # one shared table: 32 buckets x 2 heads
    # Shaw: per block, key and value tables of 33 x 16 instead of the one-bucket bias (1 x 2).
    assert counts["shaw_keys_values"] == base + 2 * (2 * 33 * 16 - 2)


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


def test_cli_reports_a_bad_selection(capsys):
    """The command is wired to the experiment; a bad choice fails before any training."""
    assert cli.main(["experiment", "length", "--quick", "--encodings", "bert"]) == 1
    error = capsys.readouterr().err
    assert "posenc experiment: error: length_generalization_experiment: `encodings`" in error


@pytest.mark.large
def test_quick_cli_run(tmp_path, capsys):
    """`posenc experiment length --quick`: every encoding on the relative task, one seed."""
    assert cli.main(["experiment", "length", "--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for name in ENCODINGS:
        assert f"\n{name}: copy_back 64: " in "\n" + printed  # the summary line per encoding
    with open(os.path.join(tmp_path, "length_generalization.csv")) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(ENCODINGS) * 4
    accuracy = {(r["encoding"], r["test_length"]): r["accuracy"] for r in rows}
    for name in ("relative_bias_clip", "shaw_keys_values"):
        assert float(accuracy[name, "64"]) > 0.6  # chance is 0.10
    assert accuracy["learned_absolute", "512"] == ""
