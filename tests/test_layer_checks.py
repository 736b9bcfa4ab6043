"""The shared layer checks pass a correct layer and fail layers broken on purpose.

``CausalMixer`` is a small correct sequence layer: position t gets a dense
projection of itself plus the mean of the projected real tokens up to t. Each
broken subclass breaks one property; the check that guards that property must
raise ``AssertionError`` on it. Without these tests a check could pass
vacuously.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

import layer_checks

pytestmark = pytest.mark.contract

TEST_PACKAGE = "keras_posenc_checks"


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class CausalMixer(keras.layers.Layer):
    def __init__(self, units: int, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.scale = scale
        self.supports_masking = True

    def build(self, input_shape):
        channels = input_shape[-1]
        self.self_kernel = self.add_weight(name="self_kernel", shape=(channels, self.units))
        self.mix_kernel = self.add_weight(name="mix_kernel", shape=(channels, self.units))
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="ones")

    def call(self, inputs, mask=None):
        if mask is None:
            mask = ops.ones(ops.shape(inputs)[:2], dtype="bool")
        weights = ops.cast(mask, self.compute_dtype)[..., None]
        mixed = ops.cumsum(ops.matmul(inputs, self.mix_kernel) * weights, axis=1)
        count = ops.maximum(ops.cumsum(weights, axis=1), 1.0)
        return self.scale * (ops.matmul(inputs, self.self_kernel) + mixed / count) + self.bias

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "scale": self.scale}


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class ConfigWithoutScale(CausalMixer):
    def get_config(self):
        config = super().get_config()
        del config["scale"]
        return config


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class ConfigWithWrongScale(CausalMixer):
    def get_config(self):
        return {**super().get_config(), "scale": 1.0}


class Unregistered(CausalMixer):
    pass


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class UntrackedState(CausalMixer):
    """Keeps a random matrix outside Keras variables: it is not saved."""

    def build(self, input_shape):
        super().build(input_shape)
        self.hidden = np.random.standard_normal((self.units, self.units)).astype("float32")

    def call(self, inputs, mask=None):
        return ops.matmul(super().call(inputs, mask), self.hidden)


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class DeadWeight(CausalMixer):
    """Its mix kernel never reaches the output's gradient."""

    def call(self, inputs, mask=None):
        frozen = ops.stop_gradient(self.mix_kernel)
        return ops.matmul(inputs, self.self_kernel) + 0.0 * ops.matmul(inputs, frozen) + self.bias


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class BreaksInBfloat16(CausalMixer):
    """Stands for any computation that overflows or cancels only in low precision."""

    def call(self, inputs, mask=None):
        outputs = super().call(inputs, mask)
        if self.compute_dtype == "bfloat16":
            outputs = outputs / ops.zeros_like(outputs)
        return outputs


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class DriftsInBfloat16(CausalMixer):
    """Stands for a finite result that low precision moves far from float32's."""

    def call(self, inputs, mask=None):
        outputs = super().call(inputs, mask)
        if self.compute_dtype == "bfloat16":
            outputs = outputs + ops.ones_like(outputs)
        return outputs


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class IgnoresMask(CausalMixer):
    def call(self, inputs, mask=None):
        return super().call(inputs, mask=None)


@keras.saving.register_keras_serializable(package=TEST_PACKAGE)
class SeesTheFuture(CausalMixer):
    """Mixes in the mean over the whole sequence, later positions included."""

    def call(self, inputs, mask=None):
        outputs = super().call(inputs, mask)
        return outputs + ops.mean(ops.matmul(inputs, self.mix_kernel), axis=1, keepdims=True)


class SharesInitializer(CausalMixer):
    """Hands one initializer instance to both kernels, which then start equal."""

    def build(self, input_shape):
        channels = input_shape[-1]
        shared = keras.initializers.GlorotUniform()
        self.self_kernel = self.add_weight(
            name="self_kernel", shape=(channels, self.units), initializer=shared
        )
        self.mix_kernel = self.add_weight(
            name="mix_kernel", shape=(channels, self.units), initializer=shared
        )
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="ones")


class TwoBiases(CausalMixer):
    """A second constant-initialised bias, equal to the first: allowed."""

    def build(self, input_shape):
        super().build(input_shape)
        self.second_bias = self.add_weight(name="second_bias", shape=(4,), initializer="ones")


@pytest.fixture
def sequence():
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((2, 6, 3)).astype("float32")
    mask = np.array([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=bool)
    return inputs, mask


# --------------------------------------------------------------- the correct layer passes


def test_correct_layer_passes_every_check(sequence, tmp_path):
    inputs, mask = sequence
    layer_checks.run_standard_checks(lambda: CausalMixer(4, scale=0.5), inputs)
    layer_checks.check_padding_invariance(CausalMixer(4), inputs, mask)
    layer_checks.check_causal(CausalMixer(4), inputs)
    layer_checks.check_save_load(CausalMixer(4), inputs, {"mask": mask}, directory=tmp_path)


def test_correct_layer_passes_with_several_inputs_and_call_kwargs(sequence):
    """Two positional inputs and a call keyword argument travel through save/load and fit."""

    @keras.saving.register_keras_serializable(package=TEST_PACKAGE)
    class AddThenMix(CausalMixer):
        def call(self, inputs, other, mask=None, factor=1.0):
            return super().call(inputs + factor * other, mask)

        def build(self, inputs_shape, other_shape):
            super().build(inputs_shape)

    inputs, _ = sequence
    other = np.ones_like(inputs)
    layer_checks.run_standard_checks(lambda: AddThenMix(4), [inputs, other], {"factor": 2.0})


# --------------------------------------------------------------- each broken layer is caught


def test_config_check_catches_a_missing_argument(sequence):
    with pytest.raises(AssertionError, match="lacks constructor arguments \\['scale'\\]"):
        layer_checks.check_config_roundtrip(ConfigWithoutScale(4, scale=2.0))


def test_config_check_catches_a_config_that_changes_behaviour(sequence):
    inputs, _ = sequence
    with pytest.raises(AssertionError, match="outputs after from_config"):
        layer_checks.check_config_roundtrip(ConfigWithWrongScale(4, scale=2.0), inputs)


def test_config_check_catches_an_unregistered_layer(sequence):
    with pytest.raises(AssertionError, match="deseriali"):
        layer_checks.check_config_roundtrip(Unregistered(4))


def test_save_load_check_catches_state_outside_variables(sequence):
    inputs, _ = sequence
    with pytest.raises(AssertionError, match="after .keras save/load"):
        layer_checks.check_save_load(UntrackedState(4), inputs)


def test_save_load_check_catches_an_unregistered_layer(sequence):
    inputs, _ = sequence
    with pytest.raises(AssertionError, match="loading the .keras file failed"):
        layer_checks.check_save_load(Unregistered(4), inputs)


def test_training_check_catches_a_weight_without_gradient(sequence):
    inputs, _ = sequence
    with pytest.raises(AssertionError, match="unchanged: .*mix_kernel"):
        layer_checks.check_training_step(DeadWeight(4), inputs)


def test_mixed_precision_check_catches_nan(sequence):
    inputs, _ = sequence
    layer = CausalMixer(4)
    low = layer_checks.check_mixed_precision(layer, inputs)
    # It runs the original layer's weights, so it matches float32 to bfloat16 precision.
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras.ops.cast(low, "float32")),
        keras.ops.convert_to_numpy(layer(inputs)),
        atol=5e-2,
    )
    with pytest.raises(AssertionError, match="NaN/Inf"):
        layer_checks.check_mixed_precision(BreaksInBfloat16(4), inputs)


def test_mixed_precision_check_catches_a_wrong_dtype_and_drift(sequence):
    inputs, _ = sequence
    check = layer_checks.check_mixed_precision
    check(CausalMixer(4), inputs, dtypes="compute", tolerance=5e-2)
    with pytest.raises(AssertionError, match=r"output dtypes \['bfloat16'\] != \['float32'\]"):
        check(CausalMixer(4), inputs, dtypes="float32")
    with pytest.raises(AssertionError, match="differs from float32"):
        check(DriftsInBfloat16(4), inputs, tolerance=5e-2)


def test_padding_check_catches_a_layer_that_ignores_the_mask(sequence):
    inputs, mask = sequence
    with pytest.raises(AssertionError, match="depend on padding"):
        layer_checks.check_padding_invariance(IgnoresMask(4), inputs, mask)


def test_causal_check_catches_a_layer_that_sees_the_future(sequence):
    inputs, _ = sequence
    with pytest.raises(AssertionError, match="see later positions"):
        layer_checks.check_causal(SeesTheFuture(4), inputs)


def test_padding_check_refuses_a_mask_without_padding(sequence):
    inputs, _ = sequence
    with pytest.raises(AssertionError, match="at least one padded position"):
        layer_checks.check_padding_invariance(CausalMixer(4), inputs, np.ones((2, 6), bool))


def test_initial_weights_check_catches_a_shared_initializer(sequence):
    inputs, _ = sequence
    layer = SharesInitializer(4)
    layer(inputs)
    with pytest.raises(AssertionError, match="start identical.*self_kernel.*mix_kernel"):
        layer_checks.assert_distinct_initial_weights(layer)


def test_initial_weights_check_passes_distinct_kernels_and_constant_biases(sequence):
    inputs, _ = sequence
    layer = TwoBiases(4)
    layer(inputs)
    layer_checks.assert_distinct_initial_weights(layer)
