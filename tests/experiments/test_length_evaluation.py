"""The length evaluation: next-token loss and accuracy by context length and position,
against the numpy reference (tests/reference/next_token.py), and its table, CSV and figure.

A table lookup stands in for a language model in the neutral tests (`Bigram`: the logits
at a position are a row of a fixed table, chosen by that position's token), so their
numbers do not depend on a backend; the contract test runs a zoo model.
"""

from __future__ import annotations

import csv
import os
import pathlib

import numpy as np
import pytest
from keras import ops

from keras_posenc import zoo
from keras_posenc.experiments.length_evaluation import (
    LENGTH_COLUMNS,
    POSITION_COLUMNS,
    LengthEvaluation,
    evaluate_lengths,
)
from keras_posenc.experiments.length_generalization import TASK_SETTINGS, task_data
from keras_posenc.tokenizers import ByteTokenizer, text_ids
from reference.next_token import log2_buckets, next_token_scores, summary

pytestmark = pytest.mark.neutral

TEXT = (
    "Position encodings tell attention where each token stands; a model trained on short "
    "windows meets longer ones at test time, and its loss by position shows where the "
    "encoding stops helping. "
) * 2


class Bigram:
    """``model(ids) -> logits``: row ``ids[t]`` of a fixed random table at each position."""

    name = "bigram"
    variables: list = []

    def __init__(self, vocab_size=259, max_length=None, tokenizer=None, seed=0):
        rng = np.random.default_rng(seed)
        self.table = rng.normal(size=(vocab_size, vocab_size)).astype("float32")
        self.vocab_size, self.max_length, self.tokenizer = vocab_size, max_length, tokenizer

    def __call__(self, ids, training=False):
        return ops.take(ops.convert_to_tensor(self.table), ids, axis=0)


def expected_numbers(windows, logits, weights=None):
    """The reference's summary of ``windows`` (inputs then the next token) and logits."""
    loss, hit = next_token_scores(logits, windows[:, 1:])
    return summary(loss, hit, weights)


def check_against(evaluation, length, expected, windows, model="bigram"):
    """The evaluation's row and buckets of ``length`` equal the reference's ``expected``."""
    (row,) = [r for r in evaluation.rows if r["length"] == length and r["model"] == model]
    assert row["windows"] == windows and row["tokens"] == expected["tokens"]
    for key in ("loss", "loss_last_half", "perplexity"):
        assert row[key] == pytest.approx(expected[key], rel=1e-5), key
    for key in ("accuracy", "accuracy_last_half"):
        assert row[key] == pytest.approx(expected[key], abs=1e-12), key
    buckets = {
        (p["position_start"], p["position_end"]): p
        for p in evaluation.positions
        if p["length"] == length and p["model"] == model
    }
    assert list(buckets) == list(expected["buckets"])
    for bucket, (loss, accuracy, count) in expected["buckets"].items():
        assert buckets[bucket]["tokens"] == count
        if loss is None:  # no answer there (a task's first positions)
            assert buckets[bucket]["loss"] is buckets[bucket]["accuracy"] is None
            continue
        assert buckets[bucket]["loss"] == pytest.approx(loss, rel=1e-5)
        assert buckets[bucket]["accuracy"] == pytest.approx(accuracy, abs=1e-12)


def text_windows(ids, length):
    """Windows of ``length + 1`` ids every ``length`` ids, written out."""
    return np.stack([ids[s : s + length + 1] for s in range(0, len(ids) - length, length)])


@pytest.mark.contract
def test_a_tiny_decoder_lm_matches_the_numpy_reference():
    model = zoo.create("decoder_lm_tiny", num_layers=1)  # the byte tokenizer
    lengths = (4, 16, 64)
    # batch_size 3: every length ends on a partial batch.
    evaluation = evaluate_lengths(model, TEXT, lengths, batch_size=3)
    ids = np.array([1] + [b + 3 for b in TEXT.encode()])
    for length in lengths:
        windows = text_windows(ids, length)
        logits = ops.convert_to_numpy(model(windows[:, :-1]))
        check_against(evaluation, length, expected_numbers(windows, logits), len(windows),
                      model=model.name)  # fmt: skip
    assert [r["note"] for r in evaluation.rows] == ["", "", ""]
    assert evaluation.rows[0]["data"] == f"text, {len(ids)} tokens"


def test_text_file_and_token_ids_give_the_text_s_numbers(tmp_path):
    model = Bigram(tokenizer=ByteTokenizer())
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    ids = text_ids(ByteTokenizer(), TEXT)
    results = {
        "text": evaluate_lengths(model, TEXT, (8, 32), batch_size=4),
        "file": evaluate_lengths(model, pathlib.Path(path), (8, 32), batch_size=4),
        "ids": evaluate_lengths(model, ids, (8, 32), batch_size=4),
        "list": evaluate_lengths(model, ids.tolist(), (8, 32), batch_size=4),
    }
    for length in (8, 32):
        windows = text_windows(ids, length)
        expected = expected_numbers(windows, model.table[windows[:, :-1]])
        for evaluation in results.values():
            check_against(evaluation, length, expected, len(windows))
    assert results["file"].rows[0]["data"] == f"file text.txt, {ids.size} tokens"
    assert results["ids"].rows[0]["data"] == f"token ids, {ids.size} tokens"


def test_a_tokenizer_given_is_used_for_a_model_without_one():
    evaluation = evaluate_lengths(Bigram(), TEXT, (16,), tokenizer="byte")
    windows = text_windows(text_ids(ByteTokenizer(), TEXT), 16)
    check_against(evaluation, 16, expected_numbers(windows, Bigram().table[windows[:, :-1]]),
                  len(windows))  # fmt: skip


def test_max_windows_spreads_the_windows_over_the_data():
    model = Bigram(tokenizer=ByteTokenizer())
    ids = text_ids(ByteTokenizer(), TEXT)
    every = text_windows(ids, 8)
    evaluation = evaluate_lengths(model, TEXT, (8,), max_windows=3)
    chosen = every[np.linspace(0, len(every) - 1, 3).round().astype(int)]
    assert len(every) > 3
    check_against(evaluation, 8, expected_numbers(chosen, model.table[chosen[:, :-1]]), 3)


@pytest.mark.parametrize("task", ["copy_back", "copy_position", "copy_recent"])
def test_a_synthetic_task_scores_its_answers(task):
    model = Bigram(vocab_size=10)
    evaluation = evaluate_lengths(model, task, (8, 16), max_windows=5, seed=3)
    for length in (8, 16):
        tokens, labels, weights = task_data(task, 5, length, (3, length), 10, **TASK_SETTINGS)
        loss, hit = next_token_scores(model.table[tokens], labels)
        check_against(evaluation, length, summary(loss, hit, weights), 5)
    assert evaluation.rows[0]["data"] == f"task {task}, seed 3"
    assert evaluate_lengths(model, task, (8,)).rows[0]["windows"] == 32  # the default


def test_a_length_past_max_length_is_skipped_with_its_reason():
    model = Bigram(max_length=16, tokenizer=ByteTokenizer())
    short = "twenty bytes of text"  # 21 ids: enough for L = 8, not for L = 32
    evaluation = evaluate_lengths(model, short, (8, 32))
    skipped = evaluation.rows[1]
    assert skipped["length"] == 32 and skipped["windows"] == skipped["tokens"] == 0
    assert skipped["note"] == "not run: L = 32 is beyond the model's max_length (16)"
    assert all(skipped[k] is None for k in ("loss", "accuracy", "perplexity", "loss_last_half"))
    assert {p["length"] for p in evaluation.positions} == {8}
    table = evaluation.markdown()
    assert "| 32 | 0 | 0 | n/a |" in table and "max_length (16)" in table


def test_custom_bins():
    model = Bigram(tokenizer=ByteTokenizer())
    evaluation = evaluate_lengths(model, TEXT, (8, 4), bins=(0, 3))
    assert [(p["length"], p["bucket"]) for p in evaluation.positions] == [
        (4, "0-2"), (4, "3"), (8, "0-2"), (8, "3-7"),
    ]  # fmt: skip
    assert [r["length"] for r in evaluation.rows] == [4, 8]  # sorted


def test_the_reference_s_log2_buckets():
    assert log2_buckets(1) == [(0, 0)]
    assert log2_buckets(8) == [(0, 1), (2, 3), (4, 7)]
    assert log2_buckets(12) == [(0, 1), (2, 3), (4, 7), (8, 11)]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(data=TEXT, lengths=(8,), model=Bigram()), ValueError,
         "evaluate_lengths: `tokenizer` must be given for text `data`, as the model has none"),
        (dict(lengths=(0, 8)), ValueError,
         "evaluate_lengths: `lengths` must be a sequence of integers >= 1 (context lengths), "
         "got (0, 8)."),
        (dict(lengths=()), ValueError, "evaluate_lengths: `lengths` must name at least one"),
        (dict(data="abc", lengths=(2, 64)), ValueError,
         "evaluate_lengths: `data` must give at least L + 1 = 65 tokens for the length "
         "L = 64, got 4 tokens."),
        (dict(data=np.array([0, 300, 5])), ValueError,
         "evaluate_lengths: `data` must be token ids in [0, 259) (the model's vocab_size), "
         "got ids from 0 to 300."),
        (dict(data=np.zeros((2, 40), int)), ValueError,
         "evaluate_lengths: token ids in `data` must be a 1-D array of integers, got shape "
         "(2, 40)"),
        (dict(data=3.5), TypeError, "evaluate_lengths: `data` must be a text (str), a text"),
        (dict(model=Bigram(vocab_size=5), data="copy_back"), ValueError,
         "evaluate_lengths: `model` must predict the 10 token ids of the task "
         "data='copy_back' (vocab_size >= 10), got vocab_size 5."),
        (dict(bins=(1, 4)), ValueError, "evaluate_lengths: `bins` must be 'log2' or the first"),
        (dict(bins="linear"), ValueError, "evaluate_lengths: `bins` must be 'log2'"),
        (dict(tokenizer=42, model=Bigram()), TypeError, "evaluate_lengths: `tokenizer` must be"),
        (dict(batch_size=0), ValueError, "evaluate_lengths: `batch_size` must be an integer >= 1"),
        (dict(model="decoder_lm_tiny"), TypeError,
         "evaluate_lengths: `model` must be a language model (called as model(token_ids) -> "
         "logits), got str."),
    ],
)  # fmt: skip
def test_errors_name_the_function_the_argument_and_what_was_given(kwargs, error, message):
    arguments = {"model": Bigram(tokenizer=ByteTokenizer()), "data": TEXT, "lengths": (8,)}
    with pytest.raises(error) as raised:
        evaluate_lengths(**{**arguments, **kwargs})
    assert str(raised.value).startswith(message), str(raised.value)


# --------------------------------------------------------------------------- outputs


def two_models():
    short = Bigram(max_length=16, tokenizer=ByteTokenizer(), seed=1)
    results = {
        "free": evaluate_lengths(Bigram(tokenizer=ByteTokenizer()), TEXT, (8, 32)),
        "short": evaluate_lengths(short, TEXT, (8, 32)),
    }
    return LengthEvaluation.compare(results)


def test_one_csv_and_table_for_several_models(tmp_path):
    both = two_models()
    assert both.models == ["free", "short"]
    path = both.to_csv(tmp_path / "out" / "lengths.csv")
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == LENGTH_COLUMNS
    assert [(r["model"], r["length"], r["loss"] == "") for r in rows] == [
        ("free", "8", False), ("free", "32", False), ("short", "8", False), ("short", "32", True),
    ]  # fmt: skip
    assert float(rows[0]["loss"]) == pytest.approx(both.rows[0]["loss"], rel=1e-12)
    positions = both.to_csv(tmp_path / "positions.csv", positions=True)
    with open(positions, newline="") as handle:
        buckets = list(csv.DictReader(handle))
    assert tuple(buckets[0]) == POSITION_COLUMNS and len(buckets) == 3 + 5 + 3
    assert sorted(os.listdir(tmp_path / "out")) == ["lengths.csv"]  # no partial file left

    table = both.markdown().splitlines()
    assert table[2].startswith("| model | L | windows |") and len(table) == 4 + 4
    pivot = both.markdown(positions=True).splitlines()
    assert pivot[2] == "| model | positions | L = 8 | L = 32 |"
    assert pivot[-1].startswith("| short | 4-7 | ") and pivot[-1].endswith(" |  |")


def test_a_failed_csv_write_keeps_the_previous_file(tmp_path):
    evaluation = two_models()
    path = tmp_path / "lengths.csv"
    evaluation.to_csv(path)
    before = path.read_text()
    broken = LengthEvaluation([{"model": "m"}], [])  # no `length` column: the write fails
    with pytest.raises(KeyError):
        broken.to_csv(path)
    assert path.read_text() == before and sorted(os.listdir(tmp_path)) == ["lengths.csv"]


def test_compare_takes_a_mapping_of_evaluations():
    with pytest.raises(TypeError, match=r"LengthEvaluation.compare: `evaluations` must map"):
        LengthEvaluation.compare([two_models()])


def test_figures_of_one_model_and_of_several(tmp_path):
    pytest.importorskip("matplotlib")
    from keras_posenc.experiments._figures import save_figure

    both = two_models()
    one = LengthEvaluation([r for r in both.rows if r["model"] == "free"],
                           [p for p in both.positions if p["model"] == "free"])  # fmt: skip
    for evaluation, lines in ((one, 2), (both, 2)):
        figure = evaluation.figure()
        assert [int(v) for v in figure.get_size_inches() * figure.dpi] == [1200, 450]
        assert len(figure.axes[0].get_lines()) == lines  # per length / per model
        assert save_figure(figure, tmp_path / "lengths.png").endswith("lengths.png")
    # The skipped length is marked on the length panels.
    assert "n/a" in [t.get_text() for t in both.figure().axes[1].texts]
