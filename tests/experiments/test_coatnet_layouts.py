"""The CoAtNet layout study: its task generator, its model and its outputs."""

from __future__ import annotations

import csv
import os
import struct

import numpy as np
import pytest

from keras_posenc import cli
from keras_posenc.experiments.coatnet_layouts import (
    CLASSES,
    COLUMNS,
    LAYOUTS,
    POSITION_OPTIONS,
    POSITIONS,
    layout_experiment,
    layout_label,
    markdown_table,
    merge_results,
    read_results,
    texture_layout_data,
    train_and_evaluate,
)

pytestmark = pytest.mark.contract

SIZE, PATCH = 32, 6


def expected_class(first, second):
    """The class written out from its definition: where A's centre lies relative to B's."""
    rows, cols = second[0] - first[0], second[1] - first[1]
    if abs(cols) > abs(rows):
        return CLASSES.index("A left of B" if cols > 0 else "A right of B")
    return CLASSES.index("A above B" if rows > 0 else "A below B")


def stripe_orientation(patch):
    """'A' for horizontal stripes (rows constant, alternating down), 'B' for vertical."""
    rows_constant = np.allclose(patch, patch[:, :1]) and np.allclose(patch[1:], -patch[:-1])
    cols_constant = np.allclose(patch, patch[:1, :]) and np.allclose(patch[:, 1:], -patch[:, :-1])
    if rows_constant == cols_constant:
        return None
    return "A" if rows_constant else "B"


def test_shapes_dtypes_and_determinism():
    images, labels = texture_layout_data(16, SIZE, PATCH, seed=3)
    assert images.shape == (16, SIZE, SIZE, 3) and images.dtype == np.float32
    assert labels.shape == (16,) and labels.dtype == np.int32
    again, again_labels = texture_layout_data(16, SIZE, PATCH, seed=3)
    other, _ = texture_layout_data(16, SIZE, PATCH, seed=4)
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(labels, again_labels)
    assert not np.array_equal(images, other)
    _, many = texture_layout_data(2000, 16, 4, seed=0)
    assert np.bincount(many, minlength=4).min() > 400  # classes uniform (500 each)


def test_each_image_holds_one_patch_of_each_texture_where_the_label_says():
    """Without noise the pixels show the patches exactly; the class follows from them."""
    images, labels, first, second = texture_layout_data(
        200, SIZE, PATCH, noise=0.0, seed=1, return_positions=True
    )
    for image, label, a, b in zip(images, labels, first, second):
        inside = np.zeros((SIZE, SIZE), bool)
        for corner, texture in ((a, "A"), (b, "B")):
            window = (slice(corner[0], corner[0] + PATCH), slice(corner[1], corner[1] + PATCH))
            assert stripe_orientation(image[window][..., 0]) == texture
            inside[window] = True
            # The two textures look alike at a coarser scale: every 2 x 2 average is 0.
            r, c = corner
            assert image[r : r + 2, c : c + 2].mean() == pytest.approx(0, abs=1e-6)
        assert not np.any(image[~inside])  # nothing outside the two patches
        assert label == expected_class(a, b)
        # The colour is the same on both patches: channels are one pattern times a gain.
        ratio = image[inside][:, 1] / image[inside][:, 0]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-5)


def test_label_needs_texture_and_layout_together():
    """Swapping which patch has which texture keeps every patch position and the bag
    of textures and flips the class: neither the layout nor the textures decide it."""
    _, labels, first, second = texture_layout_data(500, SIZE, PATCH, seed=2, return_positions=True)
    np.testing.assert_array_equal(layout_label(first, second), labels)
    swapped = layout_label(second, first)
    np.testing.assert_array_equal(swapped, labels ^ 1)  # left <-> right, above <-> below
    # Both orders of every unordered layout class are drawn about equally often, so the
    # positions alone (without knowing which patch is A) give at most the axis.
    axis = labels // 2
    for value in (0, 1):
        counts = np.bincount(labels[axis == value] % 2, minlength=2)
        assert abs(counts[0] - counts[1]) < 0.25 * counts.sum(), counts
    # Never ambiguous: the offset along the class's axis exceeds the one across it and
    # the patches do not overlap.
    rows, cols = np.abs(second - first).T
    assert np.all(np.maximum(rows, cols) >= PATCH) and np.all(rows != cols)


def test_layout_label_examples():
    a = np.array([[10, 10]] * 4)
    b = np.array([[12, 30], [8, -5], [30, 12], [-9, 8]])
    assert layout_label(a, b).tolist() == [0, 1, 2, 3]
    assert [expected_class(x, y) for x, y in zip(a, b)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"layout_label: .*shape \(n, 2\).*got \(4, 3\)"):
        layout_label(np.zeros((4, 3)), np.zeros((4, 3)))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"num_images": 0}, r"`num_images` must be an integer >= 1, got 0"),
        ({"patch_size": 1}, r"`patch_size` must be an integer >= 2, got 1"),
        ({"image_size": 20, "patch_size": 12}, r"`image_size` must be at least 2 \* patch_size"),
        ({"noise": -0.1}, r"`noise` must be a finite number >= 0, got -0.1"),
    ],
)
def test_bad_arguments(overrides, message):
    arguments = {"num_images": 4, "image_size": SIZE, "patch_size": PATCH, **overrides}
    with pytest.raises(ValueError, match=r"texture_layout_data: " + message):
        texture_layout_data(**arguments)


def test_a_float_size_is_a_type_error():
    with pytest.raises(TypeError, match=r"`image_size` must be an integer, got 32.0 \(type float"):
        texture_layout_data(num_images=4, image_size=32.0, patch_size=PATCH)


def test_experiment_rejects_bad_selections():
    with pytest.raises(ValueError, match=r"layout_experiment: unknown setting 'steps'"):
        layout_experiment(steps=3, verbose=0)
    with pytest.raises(ValueError, match=r"layout_experiment: `layouts` .*'C-C-X-T'"):
        layout_experiment(layouts=["C-C-X-T"], verbose=0)
    with pytest.raises(ValueError, match=r"layout_experiment: `seeds` must not be empty"):
        layout_experiment(seeds=(), verbose=0)


def test_experiment_rejects_bad_positions():
    with pytest.raises(ValueError, match=r"layout_experiment: `positions` must be some of"):
        layout_experiment(positions=["rope"], verbose=0)
    with pytest.raises(ValueError, match=r"positions='swin' .* layout 'C-C-C-C' has none"):
        layout_experiment(layouts=["C-C-C-C", "C-C-T-T"], positions=["swin"], verbose=0)
    with pytest.raises(ValueError, match=r"layout_experiment: `positions` must not be empty"):
        layout_experiment(positions=(), verbose=0)


def test_the_positions_and_their_options(capsys):
    assert POSITIONS[0] == "table" and POSITION_OPTIONS["table"] == {}
    assert set(POSITIONS) == {"table", "rotary_axial", "rotary_mixed", "rotary_mixed_table", "swin"}
    assert POSITION_OPTIONS["rotary_mixed"] == {"rotary": "mixed", "position_bias": "none"}
    # The command's help names every one.
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["experiment", "layouts", "--help"])
    printed = capsys.readouterr().out
    assert all(name in printed for name in POSITIONS)


def row(layout, positions, accuracy):
    return {
        "layout": layout, "positions": positions, "params": 100, "test_accuracy": accuracy,
        "test_accuracy_std": 0.0, "test_accuracy_min": accuracy, "test_accuracy_max": accuracy,
        "train_accuracy": 1.0, "train_accuracy_std": 0.0, "seeds": 3, "train_images": 2048,
        "epochs": 8, "seconds": 1.0,
    }  # fmt: skip


def test_merged_rows_replace_their_own_and_keep_the_others(tmp_path):
    pytest.importorskip("matplotlib")
    from keras_posenc.experiments.coatnet_layouts import write_results

    write_results([row("C-C-C-C", "table", 0.9), row("C-C-T-T", "table", 0.8)], tmp_path)
    merged = merge_results(tmp_path, [row("C-C-T-T", "swin", 0.7), row("C-C-T-T", "table", 0.5)])
    assert [(r["layout"], r["positions"], r["test_accuracy"]) for r in merged] == [
        ("C-C-C-C", "table", 0.9),
        ("C-C-T-T", "table", 0.5),
        ("C-C-T-T", "swin", 0.7),
    ]
    write_results(merged, tmp_path)
    assert read_results(tmp_path) == merged
    assert "| C-C-T-T | swin | 100 | 0.700 ± 0.000 |" in markdown_table(merged)


def test_cli_reports_a_bad_selection(capsys):
    """The command is wired to the experiment; a bad choice fails before any training."""
    assert cli.main(["experiment", "layouts", "--quick", "--layouts", "CCTT"]) == 1
    error = capsys.readouterr().err
    assert "posenc experiment: error: layout_experiment: `layouts`" in error
    assert cli.main(["experiment", "layouts", "--quick", "--positions", "rope"]) == 1
    assert "layout_experiment: `positions` must be some of" in capsys.readouterr().err


TINY_MODEL = {"blocks": (1, 1, 1, 1, 1), "channels": (8, 16, 16, 32, 32)}


@pytest.mark.full
def test_tiny_run_writes_its_outputs(tmp_path, capsys):
    """End to end on a tiny setting: two layouts, two seeds, two steps each."""
    settings = {**TINY_MODEL, "train_images": 64, "test_images": 32}
    layouts = ["C-C-C-C", "C-T-T-T"]
    rows = layout_experiment(quick=True, out=tmp_path, seeds=(0, 1), layouts=layouts, **settings)
    printed = capsys.readouterr().out
    assert [r["layout"] for r in rows] == layouts and all(set(r) == set(COLUMNS) for r in rows)
    for row in rows:
        assert f"\n{row['layout']} table: test accuracy " in "\n" + printed  # a line per row
        assert 0 <= row["test_accuracy_min"] <= row["test_accuracy"] <= row["test_accuracy_max"]
        assert row["test_accuracy_max"] <= 1 and row["seeds"] == 2 and row["epochs"] == 1
    # Attention stages have more parameters than MBConv stages of the same width.
    assert rows[1]["params"] > rows[0]["params"] > 0

    with open(os.path.join(tmp_path, "coatnet_layouts.csv")) as handle:
        written = list(csv.DictReader(handle))
    assert [r["layout"] for r in written] == layouts
    assert float(written[1]["test_accuracy"]) == pytest.approx(rows[1]["test_accuracy"])
    markdown = open(os.path.join(tmp_path, "coatnet_layouts.md")).read()
    assert markdown == markdown_table(rows)
    assert f"| C-T-T-T | table | {rows[1]['params']:,} | " in markdown
    png = open(os.path.join(tmp_path, "coatnet_layouts.png"), "rb").read()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1000, 500)  # matplotlib, 10 x 5 inches at 100 dpi

    # The positions axis, merged beside those rows: 2D rotary alone and Swin's windows.
    more = layout_experiment(
        quick=True, out=tmp_path, layouts=["C-T-T-T"], positions=["rotary_mixed", "swin"],
        merge=True, **{**settings, "blocks": (1, 1, 1, 2, 1)},
    )  # fmt: skip
    assert [r["positions"] for r in more] == ["rotary_mixed", "swin"]
    written = read_results(tmp_path)
    assert [(r["layout"], r["positions"]) for r in written] == [
        ("C-C-C-C", "table"), ("C-T-T-T", "table"), ("C-T-T-T", "rotary_mixed"),
        ("C-T-T-T", "swin"),
    ]  # fmt: skip
    assert written[2]["params"] != written[1]["params"]  # mixed's frequencies, no table


@pytest.mark.full
def test_seeds_sharing_a_compiled_model_train_as_from_scratch():
    """The second seed on the first seed's compiled model (weights set to a fresh build's,
    optimizer zeroed) trains exactly as that seed alone on a new model."""
    budget = {"train_images": 64, "test_images": 32, "epochs": 2, "batch_size": 32}
    shared = train_and_evaluate("C-C-T-T", seeds=(0, 1), model_settings=TINY_MODEL, **budget)
    alone = train_and_evaluate("C-C-T-T", seeds=(1,), model_settings=TINY_MODEL, **budget)
    assert shared[1]["seed"] == alone[0]["seed"] == 1
    assert shared[1]["loss"] == pytest.approx(alone[0]["loss"], rel=1e-4)
    assert shared[1]["test_accuracy"] == alone[0]["test_accuracy"]
    assert shared[0]["loss"] != pytest.approx(shared[1]["loss"], rel=1e-4)  # seeds differ


def test_the_four_layouts_are_the_papers():
    assert LAYOUTS == ("C-C-C-C", "C-C-C-T", "C-C-T-T", "C-T-T-T")
