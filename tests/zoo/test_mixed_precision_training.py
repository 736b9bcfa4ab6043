"""Mixed-precision training of every zoo family (issue 55): one `fit` step of a small
model under `mixed_float16` with loss scaling and under `mixed_bfloat16` gives a finite
loss and finite gradients.

Keras' `LossScaleOptimizer` skips a step whose gradients are not finite (and halves its
scale), so under `mixed_float16` a weight that moved is a step taken with finite
gradients; under `mixed_bfloat16` (no scaling) one NaN gradient would make Adam's update
NaN. Every trainable weight must therefore move and stay finite. Inference under mixed
precision is tests/test_mixed_precision.py's part.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from tiers import matrix
from zoo_families import BACKBONES, FAMILIES, labels, make, numpy

pytestmark = pytest.mark.contract

POLICIES = ("mixed_float16", "mixed_bfloat16")
CASES = [(family, policy) for policy in POLICIES for family in FAMILIES]


# Representatives on every backend: CoAtNet under float16 (an image model, batch norms and
# a 2D table) and Shaw's Transformer under bfloat16 (an encoder-decoder with relative keys
# and values); the rest on the matrix backend, and everywhere in `full`. Shaw's
# Transformer under float16 failed to compile on JAX on a CPU while its decoder's
# cross-attention was Keras' (jax.nn.dot_product_attention asked XLA for the float16 dot
# algorithm F16_F16_F32); the core computes it now, and
# tests/layers/test_cross_attention.py trains that block under float16 on every backend.
@pytest.mark.parametrize(
    *matrix(
        "family, policy",
        CASES,
        keep=[CASES.index(("coatnet", "mixed_float16")), CASES.index(("shaw", "mixed_bfloat16"))],
    )
)
def test_one_fit_step_is_finite(family, policy):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model, x = make(family)
        y = labels(family, x)
        optimizer = keras.optimizers.Adam(1e-3)
        if policy == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        loss = (
            "mse"
            if family == "posenet" or family in BACKBONES
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        model.compile(optimizer=optimizer, loss=loss)
        variables = model.trainable_variables
        before = [numpy(v) for v in variables]
        assert any(v.dtype == "float32" for v in variables)  # the weights stay float32
        history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    finally:
        keras.config.set_dtype_policy(previous)
    assert np.isfinite(history.history["loss"][0]), history.history
    for variable, value in zip(variables, before):
        after = numpy(variable)
        assert np.isfinite(after).all(), f"{variable.path} is not finite after the step"
        # A 2D table of a 1 x 1 map (CoAtNet's last stage at 32 x 32) adds one constant
        # to every logit of a head, which the softmax cancels: its gradient is zero.
        if variable.name != "table" or after[0].size > 1:
            assert np.abs(after - value).max() > 0, f"{variable.path} did not move: step skipped?"


# Backend-neutral: which policy each layer is rebuilt with is Keras' saving logic and the
# zoo's configs, the same on every backend.
@pytest.mark.neutral
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_mixed_precision_model_reloads_mixed(family, tmp_path):
    """A `.keras` file of a model built under `mixed_bfloat16` reloads with every layer's
    policy as saved, under a float32 global policy (the encoder-decoders and the language
    models record their layers' policy in their configs: a functional model keeps none)."""
    keras.config.set_dtype_policy("mixed_bfloat16")  # conftest restores float32 after the test
    model, _ = make(family)
    keras.config.set_dtype_policy("float32")
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)

    def policies(m):
        # Input layers and nested models (PosENet's backbone) compute nothing themselves
        # (keras' Functional casts no input to its own policy): left out.
        layers = m._flatten_layers(include_self=False)
        return [
            (type(x).__name__, x.dtype_policy.name)
            for x in layers
            if not isinstance(x, (keras.layers.InputLayer, keras.Model))
        ]

    assert any(name == "mixed_bfloat16" for _, name in policies(model))
    assert policies(loaded) == policies(model)
