"""Gradients of a layer or model call on every backend, for the tests of recomputation
(``remat=True`` and the attention core's recomputed query blocks: tests/layers/test_remat.py,
tests/zoo/test_remat_models.py): the output and the gradients of a fixed weighted sum of it
with respect to the float inputs and the trainable weights, as NumPy arrays."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

BACKEND = keras.backend.backend()


def gradients(layer, inputs, call):
    """``call(layer, *inputs)`` and the gradients of a fixed weighted sum of it with respect
    to the float inputs and the layer's trainable weights (NumPy arrays)."""
    weights = None

    def total(output):
        nonlocal weights
        if weights is None:
            rng = np.random.default_rng(1)
            weights = rng.standard_normal(tuple(output.shape)).astype("float32")
        return ops.sum(output * ops.convert_to_tensor(weights))

    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(x) for x in inputs]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            output = call(layer, *tensors)
            loss = total(output)
        grads = tape.gradient(loss, tensors + [v.value for v in layer.trainable_variables])
    elif BACKEND == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss(trainable, *tensors):
            state = list(zip(layer.trainable_variables, trainable, strict=True))
            state += list(zip(layer.non_trainable_variables, non_trainable, strict=True))
            with keras.StatelessScope(state_mapping=state):
                output = call(layer, *tensors)
            return total(output), output

        argnums = tuple(range(len(inputs) + 1))
        # Compiled: op by op, JAX's gradients of a recomputed block took a minute here.
        gradients = jax.jit(jax.value_and_grad(loss, argnums, has_aux=True))
        (_, output), grads = gradients(trainable, *inputs)
        grads = list(grads[1:]) + list(grads[0])
    else:
        import torch

        tensors = [torch.tensor(x, requires_grad=True) for x in inputs]
        for variable in layer.trainable_variables:
            variable.value.grad = None
        output = call(layer, *tensors)
        total(output).backward()
        grads = [t.grad for t in tensors] + [v.value.grad for v in layer.trainable_variables]
    assert all(g is not None for g in grads)
    return ops.convert_to_numpy(output), [ops.convert_to_numpy(g) for g in grads]


def assert_same(got, expected, atol=1e-5, scaled=False):
    """Equal outputs and gradients; ``scaled``: each gradient within ``atol`` times its
    largest entry (at least 1), float32's round-off where a model's gradients reach tens
    (a token embedding's rows sum over every position and logit)."""
    (output, grads), (expected_output, expected_grads) = got, expected
    np.testing.assert_allclose(output, expected_output, rtol=1e-5, atol=atol)
    assert len(grads) == len(expected_grads)
    for index, (grad, want) in enumerate(zip(grads, expected_grads, strict=True)):
        tolerance = atol * max(1.0, float(np.abs(want).max())) if scaled else atol
        np.testing.assert_allclose(
            grad, want, rtol=1e-5, atol=tolerance, err_msg=f"gradient {index}"
        )


def counting_remat(monkeypatch):
    """The functions Keras' remat wraps from now on (the blocks recomputed), a list."""
    calls = []
    wrap = keras.remat

    def counting(function):
        calls.append(function)
        return wrap(function)

    monkeypatch.setattr(keras, "remat", counting)
    return calls


def reseed(layer):
    """A function that puts the layer's seed generators (and PyTorch's) back as now."""
    states = [ops.convert_to_numpy(v.value) for v in layer.non_trainable_variables]

    def reset():
        for variable, state in zip(layer.non_trainable_variables, states, strict=True):
            variable.assign(state)
        if BACKEND == "torch":
            import torch

            torch.manual_seed(3)

    return reset
