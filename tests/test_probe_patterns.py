"""PosENet's target maps against their definitions (Islam et al. 2020)."""

from __future__ import annotations

import numpy as np
import pytest

from keras_posenc import probe

pytestmark = pytest.mark.neutral


def _normalised(values):
    values = np.asarray(values, dtype=np.float64)
    return (values - values.min()) / (values.max() - values.min())


@pytest.mark.parametrize("height,width", [(3, 3), (3, 8), (7, 5), (28, 28), (224, 224)])
def test_patterns_match_their_formulas(height, width):
    maps = probe.position_patterns(height, width)
    assert list(maps) == list(probe.PATTERN_NAMES)
    for name, values in maps.items():
        assert values.shape == (height, width) and values.dtype == np.float32, name
        assert values.min() == pytest.approx(0.0, abs=1e-6) and values.max() == pytest.approx(1.0)
    ys = np.arange(height)[:, None] * np.ones((1, width))
    xs = np.ones((height, 1)) * np.arange(width)[None, :]
    expected = {
        "H": _normalised(xs),
        "V": _normalised(ys),
        "G": _normalised(
            np.exp(
                -((xs - (width - 1) / 2) ** 2 + (ys - (height - 1) / 2) ** 2)
                / (2 * (width / 2) ** 2)
            )
        ),
        "HS": _normalised(np.cos(2 * np.pi * 2.5 * ys / height)),
        "VS": _normalised(np.cos(2 * np.pi * 2.5 * xs / width)),
    }
    for name in probe.PATTERN_NAMES:
        np.testing.assert_allclose(maps[name], expected[name], atol=1e-6, err_msg=name)


def test_square_patterns_are_transposes():
    maps = probe.position_patterns(16, 16)
    np.testing.assert_array_equal(maps["H"], maps["V"].T)
    np.testing.assert_array_equal(maps["HS"], maps["VS"].T)
    np.testing.assert_allclose(maps["G"], maps["G"].T)
    assert np.unravel_index(np.argmax(probe.position_patterns(15, 15)["G"]), (15, 15)) == (7, 7)


@pytest.mark.parametrize("bad", [2, 1, 0, -3])
def test_bad_sizes_raise(bad):
    with pytest.raises(ValueError, match=r"position_patterns: `height` must be an integer >= 3"):
        probe.position_patterns(bad, 8)


@pytest.mark.parametrize("bad", [2.5, "8", True])
def test_sizes_of_another_type_raise(bad):
    with pytest.raises(TypeError, match=r"position_patterns: `height` must be an integer, got"):
        probe.position_patterns(bad, 8)
