"""The transplant study (issue 51): its tables, CSV and figure from rows, the CSV read back,
a bad selection refused before any training, a tiny run reproduced by its seed, and the quick
run from the command line (large tier)."""

from __future__ import annotations

import os

import pytest

from keras_posenc import cli
from keras_posenc.experiments.transplant_study import (
    TRANSPLANTS,
    markdown_table,
    read_results,
    redraw,
    transplant_study,
    write_results,
)

pytestmark = pytest.mark.neutral


def fake_rows():
    rows = []
    for seed in (0, 1):
        for name, tuned in (("rope", False), ("alibi", True)):
            for n in (32, 64):
                accuracy = 1.0 - (n == 64) * (0.5 if name == "rope" else 0.1) - seed * 0.02
                rows.append({
                    "model": name, "data": "task copy_recent, seed 0", "length": n,
                    "windows": 2, "tokens": 60, "loss": 0.5, "accuracy": accuracy,
                    "loss_last_half": 0.6, "accuracy_last_half": accuracy,
                    "perplexity": 1.6, "note": "", "task": "copy_recent", "seed": seed,
                    "transplant": name, "factor": n / 32, "tuned": tuned,
                    "new_weights": 0,
                })  # fmt: skip
    return rows


def test_the_table_has_a_row_per_transplant_and_the_range_over_seeds():
    lines = markdown_table(fake_rows()).splitlines()
    assert lines[0].startswith("Task copy_recent: accuracy last half by test length")
    assert "mean and range over seeds" in lines[0]
    assert lines[4] == "| rope | 0.990 (0.98-1.00) | 0.490 (0.48-0.50) | 0 | no | RoPE as trained |"
    assert lines[5].startswith("| alibi | 0.990 (0.98-1.00) | 0.890 (0.88-0.90) | 0 | yes |")


def test_results_are_written_read_back_and_redrawn(tmp_path):
    rows = fake_rows()
    paths = write_results(rows, tmp_path)
    assert [os.path.basename(p) for p in paths] == [
        "transplant.csv", "transplant.md", "transplant.png"
    ]  # fmt: skip
    back = read_results(tmp_path)
    assert back == [{**row, "note": ""} for row in rows]
    os.remove(tmp_path / "transplant.png")
    redraw(tmp_path / "transplant.csv")
    assert (tmp_path / "transplant.png").stat().st_size > 10_000
    assert "loss last half" in (tmp_path / "transplant.md").read_text()


def test_a_bad_selection_is_refused_before_any_training(capsys):
    with pytest.raises(ValueError, match=r"transplant_study: `transplants` must be one of"):
        transplant_study(transplants=["rope", "xpos"])
    with pytest.raises(ValueError, match=r"transplant_study: unknown setting 'steps'"):
        transplant_study(steps=3)
    assert cli.main(["experiment", "transplant", "--quick", "--tasks", "copy_everything"]) == 1
    assert "transplant_study: `tasks` must be one of" in capsys.readouterr().err
    assert list(TRANSPLANTS)[:2] == ["rope", "rope_tuned"]


TINY = dict(factors=(1, 2), train_sequences=96, tune_sequences=32, windows=2, num_layers=1)


@pytest.mark.contract
def test_a_run_reproduces_with_its_seed():
    names = ["rope", "pi", "kerple"]
    first = transplant_study(transplants=names, seeds=[3], verbose=0, **TINY)
    again = transplant_study(transplants=names, seeds=[3], verbose=0, **TINY)
    assert [r["accuracy"] for r in first] == [r["accuracy"] for r in again]
    assert [r["loss"] for r in first] == [r["loss"] for r in again]
    assert {r["new_weights"] for r in first if r["transplant"] == "kerple"} == {2}


@pytest.mark.large
def test_the_quick_run_writes_its_table_figure_and_csv(tmp_path, capsys):
    assert cli.main(["experiment", "transplant", "--quick", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "| transplant | L = 32 | L = 64 | L = 128 | L = 256 | L = 512 |" in printed
    rows = read_results(tmp_path)
    assert len(rows) == len(TRANSPLANTS) * 5
    accuracy = {(r["transplant"], r["length"]): r["accuracy_last_half"] for r in rows}
    assert accuracy["rope", 32] > 0.9  # learned at the training length (chance 0.1)
    assert (tmp_path / "transplant.png").exists() and (tmp_path / "transplant.md").exists()


def test_a_model_of_ones_own_goes_through_the_transplants_on_its_text(tmp_path, capsys):
    from keras_posenc import zoo

    text = "Positions tell attention where each token stands. " * 12
    (tmp_path / "text.txt").write_text(text)
    model = zoo.create("decoder_lm_tiny", num_layers=1)  # the byte tokenizer
    model.save(tmp_path / "mine.keras")
    argv = ["experiment", "transplant", "--model", str(tmp_path / "mine.keras"), "--text",
            str(tmp_path / "text.txt"), "--training-length", "16", "--transplants", "rope",
            "ntk", "alibi", "--out", str(tmp_path / "out")]  # fmt: skip
    assert cli.main(argv) == 0
    assert "Task text: accuracy last half by test length." in capsys.readouterr().out
    rows = read_results(tmp_path / "out")
    assert {(r["task"], r["transplant"]) for r in rows} == {
        ("text", "rope"), ("text", "ntk"), ("text", "alibi")
    }  # fmt: skip
    assert sorted({r["length"] for r in rows}) == [16, 32, 64, 128, 256]
    with pytest.raises(ValueError, match=r"a given `model` needs `text`"):
        transplant_study(model=model)
