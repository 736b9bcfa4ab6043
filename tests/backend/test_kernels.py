"""Every backend override of a kernel equals its reference (`keras_posenc.backend`).

For each kernel the active backend overrides, the override (what layers call) and the
reference of keras_posenc/backend/common.py are run on the same inputs: equal values and
equal gradients. PyTorch's overrides that keep buffers within a call are run inside
`backend.scratch` without gradients too (their other path). The rules around them are
here as well: a choice measured on CPU gives way to the reference on a GPU (the device
query faked), a guarded override whose API fails falls back to the reference with one
warning, and `backend.references_only` turns every override off.
"""

from __future__ import annotations

import contextlib
import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import backend
from keras_posenc.backend import _registry, common

pytestmark = pytest.mark.contract

BACKEND = keras.backend.backend()


def _case(rng):
    """Inputs of every numeric kernel: (float arguments, other arguments) by name."""

    def normal(*shape):
        return rng.standard_normal(shape).astype("float32")

    q, k, v = normal(2, 5, 3, 4), normal(2, 7, 3, 4), normal(2, 7, 3, 4)
    index = rng.integers(0, 9, (5, 7)).astype("int32")
    return {
        "toeplitz": ((normal(2, 3, 65 + 70 - 1),), (65, 70)),
        "gather_heads_first": ((normal(9, 3),), (index,)),
        "take_columns": ((normal(2, 3, 5, 9),), (index,)),
        "relative_key_logits": ((q, normal(9, 4)), (index,)),
        "cumulative_sum": ((normal(2, 3, 5, 70),), ()),
        "attention_probabilities": ((q, k, normal(2, 3, 5, 7)), ()),
        "fused_attention": ((q, k, v, normal(2, 3, 5, 7)), ()),
        "toeplitz_attention": ((q, k, v, normal(3, 5 + 7 - 1)), ()),
        "depthwise_conv2d": ((normal(2, 9, 9, 5), normal(3, 3, 5, 1)), (2, 1)),
    }


NUMERIC = sorted(_case(np.random.default_rng(0)))
# Kernels that are not numbers of their inputs, each tested where it is used.
ELSEWHERE = {
    "prefers_fused_attention": "tests/layers/test_relative_gather.py",
    "prefers_toeplitz_attention": "tests/layers/test_relative_gather.py",
    "query_block_bytes": "tests/layers/test_attention_workspace.py",
    "compiled_block": "tests/layers/test_compiled_block.py",
    "scratch": "tests/layers/test_attention_workspace.py, and below",
    "compile_function": "tests/backend/test_compile.py",
    "compiled_while_loop": "tests/backend/test_compile.py",
    "concrete_values": "tests/test_bad_calls.py",
    "recompute_block": "tests/layers/test_remat.py",
    "replays_random_draws": "tests/layers/test_remat.py",
    "check_synchronized_batch_norm": "tests/layers/test_coatnet.py",
}


def test_every_kernel_is_tested():
    """A kernel added to the backend needs a case here or a named test elsewhere."""
    assert set(backend.__all__) >= set(NUMERIC) | set(ELSEWHERE)
    for name, entry in backend.overrides().items():
        assert name in NUMERIC or name in ELSEWHERE, name
        assert entry.measured, f"{name}: an override says where it was measured"


def _gradients(function, floats, others):
    """The value of ``function(*floats, *others)`` and the gradients of a weighted sum of it."""
    weights = None

    def loss(*tensors):
        nonlocal weights
        output = ops.cast(function(*tensors, *others), "float32")
        if weights is None:
            shape = tuple(output.shape)
            weights = np.random.default_rng(1).standard_normal(shape).astype("float32")
        return output, ops.sum(output * ops.convert_to_tensor(weights))

    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(x) for x in floats]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            output, total = loss(*tensors)
        grads = tape.gradient(total, tensors)
    elif BACKEND == "jax":
        import jax

        output, _ = loss(*floats)
        grads = jax.grad(lambda *t: loss(*t)[1], argnums=tuple(range(len(floats))))(*floats)
    else:
        import torch

        tensors = [torch.tensor(x, requires_grad=True) for x in floats]
        output, total = loss(*tensors)
        total.backward()
        output, grads = output.detach(), [t.grad for t in tensors]
    return ops.convert_to_numpy(output), [ops.convert_to_numpy(g) for g in grads]


def _inference():
    """No gradients recorded (PyTorch's ``torch.no_grad``), as Keras' ``predict`` runs."""
    if BACKEND == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


@pytest.mark.parametrize("name", NUMERIC)
def test_override_equals_reference(name, rng):
    """Values and gradients; where the backend has no override both sides are the reference."""
    floats, others = _case(rng)[name]
    dispatched, reference = getattr(backend, name), getattr(common, name)
    assert dispatched.reference is reference
    value, grads = _gradients(dispatched, floats, others)
    expected, expected_grads = _gradients(reference, floats, others)
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=name)
    for got, want in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} gradient")
    # Inference within a call's scratch: PyTorch's buffers (the override's other path).
    tensors = [ops.convert_to_tensor(x) for x in floats]
    with _inference(), backend.scratch():
        within = ops.convert_to_numpy(dispatched(*tensors, *others))
    np.testing.assert_allclose(within, expected, rtol=1e-5, atol=1e-5, err_msg=f"{name} scratch")


def test_a_gpu_gets_the_references(monkeypatch, rng):
    """Choices measured on CPU do not apply on a GPU: the reference kernels run there."""
    monkeypatch.setattr(_registry, "device", lambda: "gpu")
    for name, entry in backend.overrides().items():
        if entry.devices is None:  # the framework's own compilers and rules: any device
            assert _registry.chosen(name) is entry, name
        else:
            assert _registry.chosen(name) is None, name
    assert backend.query_block_bytes() == common.query_block_bytes()
    assert backend.prefers_fused_attention() is False
    # A layer there computes with the references: spied, no override is called.
    called = []
    for entry in backend.overrides().values():
        original = entry.function
        monkeypatch.setattr(entry, "function", lambda *a, _o=original, **k: called.append(1))
    from keras_posenc import layers

    layer = layers.MultiHeadRelativeAttention(
        2, 4, relative="keys_values", position=layers.ClipPositions(3)
    )
    x = rng.standard_normal((1, 6, 8)).astype("float32")
    with _inference():
        assert np.isfinite(ops.convert_to_numpy(layer(x, x))).all()
    assert called == []


def test_references_only_turns_every_override_off():
    with backend.references_only():
        assert all(_registry.chosen(name) is None for name in backend.overrides())
    assert any(_registry.chosen(name) is not None for name in backend.overrides())


@pytest.mark.neutral
def test_a_failing_guarded_override_falls_back_once(monkeypatch, rng):
    """A private API that moved: the reference's numbers, one warning, not called again."""
    calls = []

    def broken(values):
        calls.append(1)
        raise AttributeError("module 'keras.src' has no attribute 'moved'")

    entry = _registry.Override(broken, None, "a test", guarded=True)
    monkeypatch.setitem(_registry._active(), "cumulative_sum", entry)
    monkeypatch.setattr(_registry, "_WARNED", set())
    values = rng.standard_normal((2, 40)).astype("float32")
    with pytest.warns(RuntimeWarning, match="cumulative_sum.*portable reference"):
        first = ops.convert_to_numpy(backend.cumulative_sum(values))
    np.testing.assert_allclose(first, np.cumsum(values, axis=-1), rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        second = ops.convert_to_numpy(backend.cumulative_sum(values))
    np.testing.assert_array_equal(second, first)
    assert calls == [1] and entry.failed.startswith("AttributeError")


@pytest.mark.neutral
def test_an_unguarded_override_raises(monkeypatch):
    """Only guarded overrides fall back: an error of a public API is the caller's."""

    def broken(values):
        raise TypeError("a real error")

    entry = _registry.Override(broken, None, "a test", guarded=False)
    monkeypatch.setitem(_registry._active(), "cumulative_sum", entry)
    with pytest.raises(TypeError, match="a real error"):
        backend.cumulative_sum(np.zeros((2, 3), "float32"))


@pytest.mark.neutral
def test_override_refuses_unknown_devices():
    with pytest.raises(ValueError, match="unknown devices"):
        _registry.override(common.toeplitz, backend="jax", devices=("cuda",), measured="x")


@pytest.mark.neutral
def test_environment_variable_selects_the_references():
    """``KERAS_POSENC_KERNELS=reference``: no override runs in that process."""
    import os
    import subprocess
    import sys

    code = (
        "from keras_posenc import backend\n"
        "from keras_posenc.backend import _registry\n"
        "names = list(backend.overrides())\n"
        "assert names and all(_registry.chosen(n) is None for n in names), names\n"
        "print('references')\n"
    )
    env = dict(os.environ, KERAS_POSENC_KERNELS="reference")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "references" in result.stdout
    # reference:NAME: that kernel's reference only (TensorFlow's and PyTorch's
    # query_block_bytes override; JAX has none and answers the reference either way).
    code = (
        "from keras_posenc import backend\n"
        "from keras_posenc.backend import _registry\n"
        "assert _registry.chosen('query_block_bytes') is None\n"
        "others = [n for n in backend.overrides() if n != 'query_block_bytes']\n"
        "assert all(_registry.chosen(n) is not None for n in others), others\n"
        "print(backend.query_block_bytes())\n"
    )
    env = dict(os.environ, KERAS_POSENC_KERNELS="reference:query_block_bytes")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == str(32 * 2**20)


def test_importing_another_backends_module_changes_nothing():
    """A process that imports every module (a docs build, doctests of every module)
    keeps the active backend's overrides: each backend registers under its own name."""
    import importlib

    before = {name: entry.function for name, entry in backend.overrides().items()}
    for other in ("tensorflow", "jax", "torch"):
        importlib.import_module(f"keras_posenc.backend.{other}")
    after = {name: entry.function for name, entry in backend.overrides().items()}
    assert after == before
    own = _registry.chosen("compile_function").function
    assert own.__module__ == f"keras_posenc.backend.{BACKEND}"
