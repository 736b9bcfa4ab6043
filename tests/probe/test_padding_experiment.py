"""The padding experiment: zero padding creates position, circular padding does not."""

from __future__ import annotations

import csv
import os
import struct

import numpy as np
import pytest

from keras_posenc.experiments import padding_experiment
from keras_posenc.experiments.padding import COLUMNS, read_figure_data
from keras_posenc.experiments.padding.tables import _cell
from keras_posenc.probe import LinearReadout

pytestmark = pytest.mark.contract


def png_size(path):
    """(width, height) from a PNG's IHDR chunk."""
    data = open(path, "rb").read(24)
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def by_key(rows):
    return {(r["padding"], r["input"], r["target"]): r for r in rows}


def test_zero_padding_encodes_position_and_circular_does_not():
    """Deterministic: a tiny frozen random network, a least-squares readout, noise input.

    A constant (grey) input through circular padding gives exactly constant
    features, so the readout's map is constant and flagged.
    """
    rows = by_key(
        padding_experiment(
            paddings=["zeros", "circular"], inputs=["noise", "grey"], targets=["H", "G"]
        )
    )
    zeros, circular = rows["zeros", "noise", "H"], rows["circular", "noise", "H"]
    assert zeros["spc"] > 0.8, zeros
    assert -0.2 < circular["spc"] < 0.2, circular
    assert rows["zeros", "noise", "G"]["spc"] > 0.8
    assert abs(rows["circular", "noise", "G"]["spc"]) < 0.2
    assert zeros["mae"] < circular["mae"]
    assert not zeros["constant"] and not circular["constant"]
    grey_circular, grey_zeros = rows["circular", "grey", "H"], rows["zeros", "grey", "H"]
    assert grey_circular["constant"] and grey_circular["spc"] == 0.0
    assert not grey_zeros["constant"] and grey_zeros["spc"] > 0.9


def test_outputs_are_written(tmp_path):
    rows = padding_experiment(
        out=tmp_path, paddings=["valid"], inputs=["white"], targets=["H", "HS"]
    )
    assert [(r["padding"], r["target"]) for r in rows] == [("valid", "H"), ("valid", "HS")]
    assert all(set(r) == set(COLUMNS) and r["seeds"] == 1 for r in rows)
    with open(os.path.join(tmp_path, "padding.csv")) as handle:
        written = list(csv.DictReader(handle))
    assert [float(r["spc"]) for r in written] == pytest.approx([r["spc"] for r in rows])
    markdown = open(os.path.join(tmp_path, "padding.md")).read()
    assert markdown.startswith("| padding | input | target | SPC |")
    assert "| valid | white | H | 0.000* |" in markdown  # no padding, constant input
    assert png_size(os.path.join(tmp_path, "padding_maps.png"))[0] >= 800
    # The figure's data: one row (valid) of 32 x 32 maps for the two targets.
    maps, targets = read_figure_data(os.path.join(tmp_path, "padding_maps.npz"))
    assert list(maps) == ["valid"] and targets == ["H", "HS"]
    assert maps["valid"].shape == (32, 32, 2) and maps["valid"].dtype == np.float32


def test_linear_readout_recovers_a_valid_convolution(rng):
    features = rng.standard_normal((6, 9, 9, 2))
    kernel = rng.standard_normal((3, 3, 2))
    windows = np.lib.stride_tricks.sliding_window_view(features, (3, 3), axis=(1, 2))
    targets = (np.einsum("nhwcab,abc->nhw", windows, kernel) + 0.25)[..., None]
    readout = LinearReadout(kernel_size=3, ridge=0.0).fit(features[:4], targets[:4])
    np.testing.assert_allclose(readout.predict(features[4:]), targets[4:], atol=1e-8)


def test_linear_readout_drops_constant_features():
    features = np.full((2, 5, 5, 3), 0.7) + 1e-12 * np.arange(75).reshape(1, 5, 5, 3)
    targets = np.random.default_rng(0).random((2, 3, 3, 1))
    readout = LinearReadout().fit(features, targets)
    assert not readout.keep.any()
    prediction = readout.predict(features)
    assert np.ptp(prediction) == 0.0 and prediction[0, 0, 0, 0] == pytest.approx(targets.mean())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"paddings": ["same"]}, r"`paddings` must be a non-empty selection"),
        ({"inputs": []}, r"`inputs` must be a non-empty selection"),
        ({"targets": ["D"]}, r"`targets` must be a non-empty selection"),
        ({"seeds": []}, r"`seeds` must not be empty"),
        ({"feature_size": 4}, r"leaves a 2 x 2 readout"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        padding_experiment(**kwargs)


# --------------------------------------------------------------------------- the full study

# Tiny versions of every part; keras.applications networks are the large test below.
TINY = {
    "image_size": 24,
    "width": 4,
    "feature_size": 12,
    "train_images": 16,
    "test_images": 8,
    "readout_steps": 25,
    "pretrain_size": 24,
    "pretrain_images": 64,
    "applications": (),
}


def check_padding_rows(rows, weights):
    found = {(r["readout"], r["padding"]): r for r in rows}
    assert set(found) == {
        (readout, padding)
        for readout in ("least_squares", "trained")
        for padding in ("zeros", "circular")
    }
    for (_, padding), row in found.items():
        assert row["table"] == "padding" and row["network"] == "probe"
        assert row["weights"] == weights
        if padding == "zeros":
            assert row["spc"] > 0.8, row
        else:
            assert abs(row["spc"]) < 0.3, row
        if weights == "trained":
            assert 0.0 <= row["task_accuracy"] <= 1.0
        else:
            assert row["task_accuracy"] is None


def test_trained_readouts_see_zero_padding_only():
    rows = padding_experiment(
        paddings=["zeros", "circular"],
        inputs=["noise"],
        targets=["H"],
        studies=["padding", "trained_readout"],
        **TINY,
    )
    check_padding_rows(rows, "random")


@pytest.mark.large
def test_networks_trained_from_scratch_see_zero_padding_only():
    """Large: trains two small networks (about 10 s on JAX on 2 cores)."""
    rows = padding_experiment(
        paddings=["zeros", "circular"],
        inputs=["noise"],
        targets=["H"],
        studies=["trained_backbone"],
        **TINY,
    )
    check_padding_rows(rows, "trained")


def test_readout_alone_needs_padding_to_see_position():
    """Table 4's analogue: the readout on the image itself, with 0, 1, 2 pixels of zeros."""
    rows = padding_experiment(
        inputs=["grey", "noise"], targets=["H"], studies="readout_alone", **TINY
    )
    assert {r["table"] for r in rows} == {"readout_alone"}
    found = {(r["readout"], r["input"], r["readout_padding"]): r for r in rows}
    assert len(found) == 2 * 2 * 3
    for readout in ("least_squares", "trained"):
        grey = [found[readout, "grey", padding] for padding in (0, 1, 2)]
        assert grey[0]["constant"] and grey[0]["spc"] == 0.0
        assert 0.3 < grey[1]["spc"] < grey[2]["spc"], grey
        noise = [found[readout, "noise", padding] for padding in (0, 1, 2)]
        assert abs(noise[0]["spc"]) < 0.2 and noise[1]["spc"] > 0.3, noise


def test_stages_on_the_probe_network():
    rows = padding_experiment(
        paddings=["zeros"], inputs=["noise"], targets=["H"], studies=["padding", "stages"], **TINY
    )
    stages = {(r["readout"], r["taps"]): r for r in rows if r["table"] == "stages"}
    assert set(stages) == {
        (readout, taps)
        for readout in ("least_squares", "trained")
        for taps in ("f1", "f2", "f3", "all")
    }
    # All taps with least squares is exactly the padding table's zero-padding row.
    padding_row = next(r for r in rows if r["table"] == "padding")
    assert stages["least_squares", "all"]["spc"] == padding_row["spc"]
    # Deeper stages see the border from further in (Islam et al., Table 3).
    assert stages["least_squares", "f1"]["spc"] < stages["least_squares", "f3"]["spc"]


@pytest.mark.large
def test_readout_shapes_on_the_probe_network():
    """Large: five readouts, each compiled (about 15 s on JAX on 2 cores)."""
    rows = padding_experiment(inputs=["noise"], targets=["H"], studies="readout_shape", **TINY)
    shapes = {(r["readout_layers"], r["kernel_size"]): r for r in rows}
    assert set(shapes) == {(1, 1), (1, 3), (1, 7), (2, 3), (3, 3)}
    assert all(r["table"] == "readout_shape" and r["spc"] > 0.5 for r in rows), rows


def test_every_output_of_a_multi_part_run_is_written(tmp_path):
    rows = padding_experiment(
        out=tmp_path,
        paddings=["zeros"],
        inputs=["grey"],
        targets=["G"],
        studies=["padding", "trained_readout", "readout_alone"],
        **TINY,
    )
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "padding.csv",
        "padding.md",
        "summary.md",
        "figures.md",
        "padding_maps.png",
        "padding_maps.npz",
        "padding_maps_trained_readout.png",
        "padding_maps_trained_readout.npz",
        "readout_alone_maps.png",
        "readout_alone_maps.npz",
    }
    with open(os.path.join(tmp_path, "padding.csv")) as handle:
        written = list(csv.DictReader(handle))
    assert len(written) == len(rows) == 2 + 6 and set(written[0]) == set(COLUMNS)
    summary = open(os.path.join(tmp_path, "summary.md")).read()
    assert "### Padding, grey input" in summary and "### Readout alone (Table 4)" in summary
    assert "| probe | random | trained | zeros | " in summary
    figures = open(os.path.join(tmp_path, "figures.md")).read()
    assert "Rows, top to bottom: grey input, readout padding 0; grey input, readout" in figures
    width, height = png_size(os.path.join(tmp_path, "readout_alone_maps.png"))
    assert width >= 800 and height > 3 * 100  # three rows of maps
    maps, targets = read_figure_data(os.path.join(tmp_path, "readout_alone_maps.npz"))
    assert targets == ["G"] and [m.shape for m in maps.values()] == [(24, 24, 1)] * 3


def test_summary_cells_follow_the_paper():
    row = {"spc": 0.7421, "spc_std": 0.0123, "mae": 0.149, "constant": False, "seeds": 3}
    assert _cell(row) == ".742±.012 / .149"
    assert _cell({**row, "spc": -0.011, "seeds": 1}) == "-.011 / .149"
    assert _cell({**row, "spc": 0.0, "constant": True, "seeds": 1}) == ".000* / .149"
    assert _cell({**row, "spc": 1.0, "seeds": 1}) == "1.000 / .149"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"studies": ["everything"]}, r"`studies` must be a non-empty selection of .* or 'all'"),
        ({"applications": ["vgg19"]}, r"`applications` must be a non-empty selection"),
        ({"image_sise": 32}, r"unknown setting\(s\) \['image_sise'\]"),
    ],
)
def test_bad_study_arguments_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        padding_experiment(**kwargs)


@pytest.mark.full
def test_applications_encode_position_through_zero_padding():
    """Large: VGG16 and ResNet50 (weights=None) at 32 px, one seed, trained readouts."""
    rows = padding_experiment(
        inputs=["noise"], targets=["H"], studies=["applications", "stages"], readout_steps=40
    )
    padding = {r["network"]: r for r in rows if r["table"] == "padding"}
    assert set(padding) == {"vgg16", "resnet50"}
    assert all(r["padding"] == "zeros" and r["readout"] == "trained" for r in padding.values())
    assert padding["vgg16"]["spc"] > 0.5 and padding["resnet50"]["spc"] > 0.5
    stages = {(r["network"], r["taps"]) for r in rows if r["table"] == "stages"}
    assert {("vgg16", f"f{i}") for i in range(1, 6)} <= stages
    assert {("resnet50", f"f{i}") for i in range(1, 5)} <= stages
