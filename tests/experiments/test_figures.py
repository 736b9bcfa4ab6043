"""The experiments' figures: matplotlib, at least 800 px wide, redrawn from their data alone.

Tiny hand-made results stand in for the studies' (no training here). The docs' figures are
found through POSENC_DOCS (set by .ci/run, whose tests run from a copy of tests/) or next to
this file in a checkout, as in tests/test_guides.py.
"""

from __future__ import annotations

import os
import pathlib
import struct
import sys

import numpy as np
import pytest
from repository import docs_path

from keras_posenc.experiments import (
    coatnet_layouts,
    length_evaluation,
    length_generalization,
    padding,
)
from keras_posenc.probe import position_patterns

pytestmark = pytest.mark.neutral

INSTALL = 'pip install "keras-posenc[experiments]"'


def png_size(path):
    """(width, height) from a PNG's IHDR chunk."""
    data = open(path, "rb").read(24)
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def length_rows():
    rows = []
    for encoding, accuracies in (("rope", (1.0, 0.75)), ("learned_absolute", (0.5, None))):
        for length, accuracy in zip((64, 128), accuracies):
            measured = accuracy is not None
            rows.append(
                {
                    "task": "copy_back",
                    "encoding": encoding,
                    "test_length": length,
                    "accuracy": accuracy,
                    "accuracy_std": 0.05 if measured else None,
                    "accuracy_min": accuracy - 0.1 if measured else None,
                    "accuracy_max": accuracy if measured else None,
                    "seeds": 3,
                    "params": 17806,
                    "num_layers": 2,
                    "train_steps": 1000,
                    "note": "" if measured else "n/a",
                }
            )
    return rows


def coatnet_rows():
    return [
        {
            "layout": layout,
            "positions": "table",
            "params": 150000 + 1000 * i,
            "test_accuracy": accuracy,
            "test_accuracy_std": 0.02,
            "test_accuracy_min": accuracy - 0.03,
            "test_accuracy_max": accuracy + 0.01,
            "train_accuracy": 0.99,
            "train_accuracy_std": 0.005,
            "seeds": 3,
            "train_images": 2048,
            "epochs": 8,
            "seconds": 12.5,
        }
        for i, (layout, accuracy) in enumerate((("C-C-C-C", 0.95), ("C-T-T-T", 0.4)))
    ]


def padding_figures(rng):
    """Two figures of 8 x 8 maps for the targets H and G: the first of two rows."""
    maps = {
        "padding_maps": {
            "zeros": rng.uniform(-0.2, 1.2, (8, 8, 2)).astype(np.float32),
            "circular": rng.uniform(0, 1, (8, 8, 2)).astype(np.float32),
        },
        "stages_maps": {"f1": rng.uniform(0, 1, (8, 8, 2)).astype(np.float32)},
    }
    return maps, ["H", "G"]


# --------------------------------------------------------------------------- write and redraw


def test_length_figure_is_wide_and_redraws_from_its_csv(tmp_path):
    rows = length_rows()
    paths = length_generalization.write_results(rows, tmp_path)
    assert [os.path.basename(p) for p in paths] == [
        "length_generalization.csv",
        "length_generalization.md",
        "length_generalization_claims.md",
        "length_generalization.png",
    ]
    assert png_size(paths[3])[0] >= 800
    assert length_generalization.read_results(tmp_path) == rows  # n/a cells come back as None
    again = length_generalization.redraw(tmp_path, out=tmp_path / "again")
    assert open(again, "rb").read() == open(paths[3], "rb").read()  # the CSV is all it needs
    # render: every file but the CSV again, from the CSV alone, byte for byte.
    rendered = length_generalization.render(tmp_path, out=tmp_path / "rendered")
    assert [os.path.basename(p) for p in rendered] == [os.path.basename(p) for p in paths[1:]]
    for new, old in zip(rendered, paths[1:]):
        assert open(new, "rb").read() == open(old, "rb").read(), new


def test_coatnet_figure_is_wide_and_redraws_from_its_csv(tmp_path):
    rows = coatnet_rows()
    paths = coatnet_layouts.write_results(rows, tmp_path)
    assert png_size(paths[2]) == (1000, 500)
    assert coatnet_layouts.read_results(paths[0]) == rows
    os.remove(paths[2])
    assert coatnet_layouts.redraw(tmp_path) == paths[2] and png_size(paths[2])[0] >= 800


def test_padding_figures_redraw_from_their_npz(tmp_path, rng):
    figures, targets = padding_figures(rng)
    paths = padding.write_results([], tmp_path, figures, targets)
    names = sorted(os.path.basename(p) for p in paths)
    assert names == sorted(
        ["padding.csv", "padding.md", "summary.md", "figures.md"]
        + [f"{stem}.{kind}" for stem in figures for kind in ("png", "npz")]
    )
    for stem, maps_by_label in figures.items():
        assert png_size(tmp_path / f"{stem}.png")[0] >= 800
        maps, read_targets = padding.read_figure_data(tmp_path / f"{stem}.npz")
        assert read_targets == targets and list(maps) == list(maps_by_label)
        for label, values in maps_by_label.items():
            np.testing.assert_array_equal(maps[label], values)  # unclipped, float32
    again = padding.redraw(tmp_path, out=tmp_path / "again")
    assert [os.path.basename(p) for p in again] == [
        "padding_maps.png",
        "stages_maps.png",
        "figures.md",
    ]
    for path in again:
        name = os.path.basename(path)
        assert open(path, "rb").read() == (tmp_path / name).read_bytes(), name
    listing = (tmp_path / "figures.md").read_text()
    assert "- `padding_maps.png`: the probe network" in listing
    assert "Rows, top to bottom: zeros; circular (8 x 8 px per map)." in listing


def test_eight_bit_figure_data_reads_as_fractions_of_255(tmp_path):
    """The docs' maps, recovered from 8-bit figures, are stored as uint8."""
    path = tmp_path / "maps.npz"
    np.savez(path, maps=np.array([[[[0], [255]]]], np.uint8), labels=["a"], targets=["H"])
    maps, targets = padding.read_figure_data(path)
    assert targets == ["H"] and maps["a"].dtype == np.float32
    np.testing.assert_array_equal(maps["a"][..., 0], [[0.0, 1.0]])


def test_plot_maps_rejects_maps_that_do_not_fit():
    maps = np.stack([position_patterns(6, 6)["H"]] * 2, -1)
    with pytest.raises(ValueError, match=r"plot_maps: `maps_by_label` must hold at least one"):
        padding.plot_maps({}, ["H"])
    with pytest.raises(ValueError, match=r"plot_maps: every map .* \(height, width, 1\)"):
        padding.plot_maps({"zeros": maps}, ["H"])
    with pytest.raises(ValueError, match=r"write_figure_data: every map .*'b': \(5, 6, 2\)"):
        padding.write_figure_data("unused.npz", {"a": maps, "b": maps[1:]}, ["H", "G"])


def test_redraw_without_data_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"padding.redraw: no figure data \(\*.npz\)"):
        padding.redraw(tmp_path)
    np.savez(tmp_path / "broken.npz", maps=np.zeros((1, 2, 2, 1)))
    with pytest.raises(ValueError, match=r"read_figure_data: .* lacks \['labels', 'targets'\]"):
        padding.read_figure_data(tmp_path / "broken.npz")
    (tmp_path / "length_generalization.csv").write_text("task,encoding\ncopy_back,rope\n")
    with pytest.raises(ValueError, match=r"read_results: .* lacks the column\(s\) \['test_len"):
        length_generalization.redraw(tmp_path)


# --------------------------------------------------------------------------- without matplotlib


@pytest.fixture
def no_matplotlib(monkeypatch):
    """``import matplotlib`` fails, as where the extra is not installed (undone afterwards)."""
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


MISSING = {
    "length_generalization.plot": lambda out: length_generalization.plot(length_rows()),
    "length_generalization.redraw": lambda out: length_generalization.redraw(out),
    "coatnet_layouts.plot": lambda out: coatnet_layouts.plot(coatnet_rows()),
    "coatnet_layouts.write_results": lambda out: coatnet_layouts.write_results(coatnet_rows(), out),
    "LengthEvaluation.figure": lambda out: length_evaluation.LengthEvaluation(
        [{"model": "m", "length": 8, "loss": 1.0, "accuracy": 0.5}], []
    ).figure(),
    "plot_maps": lambda out: padding.plot_maps({"a": np.zeros((4, 4, 1))}, ["H"]),
    "padding.redraw": lambda out: padding.redraw(out),
    # The studies check before they train or probe anything, not when they write.
    "length_generalization_experiment": lambda out: (
        length_generalization.length_generalization_experiment(out=out, verbose=0)
    ),
    "layout_experiment": lambda out: coatnet_layouts.layout_experiment(out=out, verbose=0),
    "padding_experiment": lambda out: padding.padding_experiment(out=out),
}


@pytest.mark.parametrize("caller", list(MISSING))
def test_without_matplotlib_the_error_names_the_extra(caller, no_matplotlib, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ImportError) as raised:
        MISSING[caller](out)
    message = str(raised.value)
    assert message.startswith(f"{caller}: drawing the experiments' figures needs matplotlib")
    assert INSTALL in message
    assert isinstance(raised.value.__cause__, ImportError)
    assert not out.exists()  # nothing half-written


def test_without_matplotlib_a_study_still_returns_its_numbers(no_matplotlib):
    rows = padding.padding_experiment(paddings=["zeros"], inputs=["grey"], targets=["H"])
    assert [(r["padding"], r["target"]) for r in rows] == [("zeros", "H")]
    assert "matplotlib" not in {name.split(".")[0] for name in sys.modules if sys.modules[name]}


# --------------------------------------------------------------------------- the docs' figures


def docs_folder() -> pathlib.Path:
    docs_path("experiments")
    return docs_path()


def test_committed_figures_are_wide_and_keep_their_data():
    """Every PNG of the experiments pages: at least 800 px wide, its data beside it."""
    figures = sorted((docs_folder() / "experiments").rglob("*.png"))
    assert len(figures) >= 10, figures  # 1 length, 1 layouts, 8 position-information
    for path in figures:
        assert png_size(path)[0] >= 800, path
        data = [path.with_suffix(".npz"), path.with_suffix(".csv")]
        assert any(p.exists() for p in data), f"{path}: no {data[0].name} or {data[1].name}"


def test_a_figure_narrower_than_800_px_is_refused():
    from keras_posenc.experiments._figures import new_figure

    with pytest.raises(ValueError, match=r"caller: a figure must be at least 800 px wide; got "):
        new_figure("caller", height=3.0, width=7.0)
