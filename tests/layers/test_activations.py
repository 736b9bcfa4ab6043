"""exact_gelu equals the erf GELU, tanh_gelu its tanh approximation, and "gelu" /
"gelu_tanh" resolve to them in the library's blocks."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from scipy.special import erf

from keras_posenc.layers.activations import exact_gelu, get_activation, tanh_gelu

pytestmark = pytest.mark.contract


def test_exact_gelu_matches_its_formula_and_keras():
    x = np.linspace(-6, 6, 101).astype("float32")
    expected = 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    actual = keras.ops.convert_to_numpy(exact_gelu(x))
    np.testing.assert_allclose(actual, expected, atol=1e-6)
    keras_exact = keras.ops.convert_to_numpy(keras.activations.gelu(x, approximate=False))
    np.testing.assert_allclose(actual, keras_exact, atol=1e-6)


def test_tanh_gelu_matches_its_formula_and_keras():
    x = np.linspace(-6, 6, 101).astype("float32")
    expected = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    actual = keras.ops.convert_to_numpy(tanh_gelu(x))
    np.testing.assert_allclose(actual, expected, atol=1e-6)
    keras_tanh = keras.ops.convert_to_numpy(keras.activations.gelu(x, approximate=True))
    np.testing.assert_allclose(actual, keras_tanh, atol=1e-6)


def test_get_activation_maps_gelu_and_passes_others_through():
    assert get_activation("gelu") is exact_gelu
    assert get_activation("gelu_tanh") is tanh_gelu
    assert get_activation("relu") is keras.activations.relu
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(exact_gelu)
    )
    assert restored is exact_gelu
