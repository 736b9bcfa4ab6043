"""The padding experiment: zero padding creates position, circular padding does not."""

from __future__ import annotations

import csv
import os
import struct
import zlib

import numpy as np
import pytest

from keras_posenc.experiments import padding_experiment
from keras_posenc.experiments.padding import COLUMNS, LinearReadout, write_png


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
    png = open(os.path.join(tmp_path, "padding_maps.png"), "rb").read()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert (height, width) == (1 * (32 + 2) + 2, 4 * (32 + 2) + 2)  # 1 padding x 2 targets


def test_write_png_round_trip(tmp_path):
    image = (np.arange(12 * 7) % 256).astype(np.uint8).reshape(12, 7)
    path = os.path.join(tmp_path, "map.png")
    write_png(path, image)
    data = open(path, "rb").read()
    length = struct.unpack(">I", data[33:37])[0]
    assert data[37:41] == b"IDAT"
    raw = np.frombuffer(zlib.decompress(data[41 : 41 + length]), np.uint8).reshape(12, 8)
    assert not raw[:, 0].any()  # filter type 0 on every row
    np.testing.assert_array_equal(raw[:, 1:], image)


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
