"""keras_posenc.backend: compiled inference functions and loops, on every backend.

The compiled function must equal the plain one, see weights assigned after it was made,
and (PyTorch) switch from eager calls to a traced graph after TORCH_TRACE_AFTER calls of
one input signature, staying eager where tracing is impossible.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
from keras import ops

from keras_posenc import backend, generation
from keras_posenc.backend import torch_trace
from keras_posenc.generation.compiled import _COMPILED
from keras_posenc.zoo.convs2s import ConvS2S

pytestmark = pytest.mark.contract

ON_TORCH = keras.backend.backend() == "torch"
torch_only = pytest.mark.skipif(
    not ON_TORCH,
    reason="TorchTracedFunction is the PyTorch path; TensorFlow and JAX compile with "
    "tf.function and jax.jit, checked by the tests that run on every backend",
)


def dense_function():
    layer = keras.layers.Dense(3, activation="tanh")
    layer.build((None, 4))

    def function(x, pair):
        y = layer(x)
        return y * pair[0] + pair[1], ops.sum(y, axis=-1)

    return layer, function


def call_many(compiled, args, times):
    result = None
    for _ in range(times):
        result = compiled(*args)
    return result


def test_compiled_function_equals_the_function_and_sees_new_weights(rng):
    layer, function = dense_function()
    compiled = backend.compile_function(function, layer.variables)
    x = ops.convert_to_tensor(rng.normal(size=(2, 4)).astype("float32"))
    pair = (ops.convert_to_tensor(2.0), ops.convert_to_tensor(np.ones(3, "float32")))
    times = torch_trace.TORCH_TRACE_AFTER + 2  # past the point where PyTorch traces
    for new_kernel in (None, rng.normal(size=(4, 3)).astype("float32")):
        if new_kernel is not None:
            layer.kernel.assign(new_kernel)
        expected = [ops.convert_to_numpy(t) for t in function(x, pair)]
        got = call_many(compiled, (x, pair), times)
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(ops.convert_to_numpy(g), e, atol=1e-6)


def test_compiled_function_takes_numpy_arrays(rng):
    # tf.function and jax.jit take NumPy arrays; so does the PyTorch path, eagerly and traced.
    layer, function = dense_function()
    compiled = backend.compile_function(function, layer.variables)
    x = rng.normal(size=(2, 4)).astype("float32")
    pair = (np.array(2.0, "float32"), np.ones(3, "float32"))
    tensors = keras.tree.map_structure(ops.convert_to_tensor, (x, pair))
    expected = [ops.convert_to_numpy(t) for t in function(*tensors)]
    got = call_many(compiled, (x, pair), torch_trace.TORCH_TRACE_AFTER + 2)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(ops.convert_to_numpy(g), e, atol=1e-6)


def test_compiled_while_loop_equals_a_python_loop():
    layer, _ = dense_function()

    def cond(i, x, limit):
        return i < limit

    def body(i, x, limit):
        return i + 1, layer(ops.concatenate([x, x[:, :1]], axis=-1)), limit

    loop = backend.compiled_while_loop(cond, body, layer.variables)
    x = ops.convert_to_tensor(np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3))
    limit = 2 * torch_trace.TORCH_TRACE_AFTER  # the PyTorch body is traced on the way
    i, got, _ = loop(ops.convert_to_tensor(0, "int32"), x, ops.convert_to_tensor(limit, "int32"))
    expected = ops.convert_to_numpy(x)
    for _ in range(limit):
        expected = ops.convert_to_numpy(layer(np.concatenate([expected, expected[:, :1]], -1)))
    assert int(ops.convert_to_numpy(i)) == limit
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, atol=1e-5)


@torch_only
def test_torch_traces_a_signature_after_its_eager_calls(rng):
    import torch

    layer, function = dense_function()
    compiled = backend.compile_function(function, layer.variables)
    pair = (ops.convert_to_tensor(2.0), ops.convert_to_tensor(np.ones(3, "float32")))
    x = ops.convert_to_tensor(rng.normal(size=(2, 4)).astype("float32"))
    call_many(compiled, (x, pair), torch_trace.TORCH_TRACE_AFTER)
    assert compiled.graphs == {} and compiled.trace_errors == {}
    compiled(x, pair)
    assert len(compiled.graphs) == 1 and compiled.trace_errors == {}
    graph = next(iter(compiled.graphs.values())).graph
    targets = [node.target for node in graph.nodes if node.op == "call_function"]
    assert torch.ops.aten._assert_tensor_metadata.default not in targets
    for node in graph.nodes:
        if node.op == "call_function" and node.target in (
            torch.ops.aten.to.dtype,
            torch.ops.aten.to.dtype_layout,
        ):
            assert node.args[0].meta["val"].dtype != node.meta["val"].dtype, node
    # Another batch size is another signature: eager again, then traced on its own.
    other = ops.convert_to_tensor(rng.normal(size=(5, 4)).astype("float32"))
    call_many(compiled, (other, pair), torch_trace.TORCH_TRACE_AFTER + 1)
    assert len(compiled.graphs) == 2


@torch_only
def test_torch_keeps_untraceable_functions_eager():
    def branching(x):
        # Python control flow on a tensor's value: torch.export cannot trace it.
        return x * 2 if bool(ops.convert_to_numpy(ops.sum(x)) > 0) else x - 1

    compiled = backend.compile_function(branching, [])
    for sign in (1.0, -1.0) * (torch_trace.TORCH_TRACE_AFTER + 1):
        x = ops.convert_to_tensor(np.full(3, sign, "float32"))
        expected = x * 2 if sign > 0 else x - 1
        np.testing.assert_allclose(ops.convert_to_numpy(compiled(x)), expected)
    assert compiled.graphs == {} and len(compiled.trace_errors) == 1


@torch_only
def test_torch_runs_functions_marked_untraceable_eagerly_without_trying():
    """traceable=False (a random draw): no trace attempt, so no torch.export warnings."""
    calls = []

    def double(x):
        calls.append(1)
        return x * 2

    compiled = backend.compile_function(double, [], traceable=False)
    x = ops.convert_to_tensor(np.ones(3, "float32"))
    for _ in range(torch_trace.TORCH_TRACE_AFTER + 3):
        np.testing.assert_allclose(ops.convert_to_numpy(compiled(x)), 2.0)
    assert compiled.graphs == {} and compiled.trace_errors == {}
    assert len(calls) == torch_trace.TORCH_TRACE_AFTER + 3  # the Python ran every time


def _graph_ops(compiled) -> list[str]:
    (graph,) = compiled.graphs.values()
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function"]


@torch_only
def test_torch_folds_constants_and_merges_repeated_operations(rng):
    """What depends on no input is computed once, at trace time (an index built from
    static lengths, the copies torch.export makes of lifted constants); an operation
    repeated on the same inputs runs once; the traced graph still gives the eager
    numbers, for every position."""
    layer, _ = dense_function()

    def function(x, index):
        total = 0.0
        for _ in range(3):  # three "layers" building the same mask from the position
            offsets = ops.arange(5, dtype="int32") - index
            inside = ops.logical_and(offsets >= 0, offsets < 2)
            total = total + ops.where(inside[None, :, None], layer(x)[:, None, :], 0.5)
        return total

    compiled = backend.compile_function(function, layer.variables)
    x = ops.convert_to_tensor(rng.normal(size=(2, 4)).astype("float32"))
    for position in range(torch_trace.TORCH_TRACE_AFTER + 4):
        index = ops.convert_to_tensor(position % 5, "int32")
        expected = ops.convert_to_numpy(function(x, index))
        np.testing.assert_allclose(ops.convert_to_numpy(compiled(x, index)), expected, atol=1e-6)
    found = _graph_ops(compiled)
    assert not any(
        name.startswith(("aten.arange", "aten.lift_fresh_copy", "aten.scalar_tensor"))
        for name in found
    ), found
    # The mask's subtraction and comparisons and the dense layer's product are computed once.
    assert found.count("aten.sub.Tensor") == 1, found
    assert found.count("aten.logical_and.default") == 1, found
    assert found.count("aten.addmm.default") + found.count("aten.matmul.default") <= 1, found


@torch_only
def test_torch_merges_only_constants_of_the_same_bytes():
    """Each layer builds its own copy of a constant; copies become one attribute, but
    0.0 and -0.0 (equal as numbers, not in 1 / x) stay apart."""

    def function(x):
        ones = ops.ones_like(x)  # computed from the input: not folded
        positive, negative = ops.zeros((3,)), ops.zeros((3,)) * -1.0  # folded constants
        return 1.0 / (positive * ones), 1.0 / (negative * ones)  # inf and -inf

    compiled = backend.compile_function(function, [])
    x = ops.convert_to_tensor(np.array([1.0, -1.0, 2.0], "float32"))
    expected = [ops.convert_to_numpy(t) for t in function(x)]
    for _ in range(torch_trace.TORCH_TRACE_AFTER + 2):
        got = [ops.convert_to_numpy(t) for t in compiled(x)]
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_array_equal(g, e)


@torch_only
def test_torch_keeps_random_operations_and_large_constants_in_the_graph():
    import torch

    def function(x):
        # A draw from a fixed shape depends on no input but must change at each call;
        # a constant over the folding limit stays computed at each call.
        noise = torch.rand(3)
        big = ops.ones((torch_trace._FOLD_LIMIT_BYTES // 4 + 1,), "float32")
        return x + noise, ops.sum(big) + x

    compiled = backend.compile_function(function, [])
    x = ops.convert_to_tensor(np.zeros(3, "float32"))
    draws = [ops.convert_to_numpy(compiled(x)[0]) for _ in range(torch_trace.TORCH_TRACE_AFTER + 3)]
    assert len(compiled.graphs) == 1 and compiled.trace_errors == {}
    assert not np.array_equal(draws[-1], draws[-2])  # both traced calls drew anew
    found = _graph_ops(compiled)
    assert "aten.rand.default" in found and "aten.ones.default" in found, found
    np.testing.assert_allclose(
        ops.convert_to_numpy(compiled(x)[1]), torch_trace._FOLD_LIMIT_BYTES // 4 + 1
    )


@torch_only
def test_torch_traces_the_decoding_step_of_a_zoo_model():
    """Greedy and beam search on ConvS2S trace their steps (no silent eager fallback), and
    the traced steps give the tokens of the reference search (test_convs2s_models.py
    checks them against numpy; here: against the cache-free recomputation)."""
    keras.utils.set_random_seed(0)
    model = ConvS2S(
        23,
        29,
        embed_dim=12,
        encoder_layers=[(12, 3), (16, 2)],
        decoder_layers=[(12, 3), (16, 2)],
        decoder_out_embed_dim=10,
        max_source_positions=8,
        max_target_positions=48,
    )
    source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]], "int32")
    length = torch_trace.TORCH_TRACE_AFTER + 8
    greedy = generation.greedy_search(model, source, max_length=length, min_length=length)
    beam, _ = generation.beam_search(model, source, beam_size=2, max_length=length)
    compiled = _COMPILED[model]
    for kind in (("loop", True, None, 0), ("reordering_step", True)):
        traced = getattr(compiled[kind], "step", compiled[kind])  # a loop's traced body
        assert isinstance(traced, torch_trace.TorchTracedFunction), kind
        assert len(traced.graphs) == 1 and traced.trace_errors == {}, (kind, traced.trace_errors)
    full = generation.greedy_search(
        model, source, max_length=length, min_length=length, use_cache=False
    )
    np.testing.assert_array_equal(greedy, full)
    full_beam, _ = generation.beam_search(
        model, source, beam_size=2, max_length=length, use_cache=False
    )
    np.testing.assert_array_equal(beam, full_beam)


# --------------------------------------------------------------------------- guards


def _fresh_guard(monkeypatch, name):
    """The override of ``name`` as if no failure had been seen in this process."""
    from keras_posenc.backend import _registry

    monkeypatch.setattr(_registry, "_WARNED", set())
    entry = _registry.overrides().get(name)
    if entry is not None:
        monkeypatch.setattr(entry, "failed", None)
    return _registry


@torch_only
def test_torch_trace_keeps_the_exported_graph_when_clean_up_fails(monkeypatch, rng):
    """PyTorch's private graph API moved: the export's own graph runs, after one warning."""
    _fresh_guard(monkeypatch, "compile_function")

    def moved(module):
        raise AttributeError("module 'torch._ops' has no attribute 'OpOverload'")

    monkeypatch.setattr(torch_trace, "_without_no_ops", moved)
    layer, function = dense_function()
    compiled = backend.compile_function(function, layer.variables)
    x = rng.standard_normal((2, 4)).astype("float32")
    pair = (np.array(2.0, "float32"), np.ones(3, "float32"))
    tensors = keras.tree.map_structure(ops.convert_to_tensor, (x, pair))
    expected = [ops.convert_to_numpy(t) for t in function(*tensors)]
    with pytest.warns(RuntimeWarning, match="torch graph clean-up"):
        got = call_many(compiled, (x, pair), torch_trace.TORCH_TRACE_AFTER + 2)
    assert compiled.graphs, "traced, with the uncleaned graph"
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(ops.convert_to_numpy(g), e, atol=1e-6)
