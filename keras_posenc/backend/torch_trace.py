"""Compiling a decoding step on PyTorch: ``torch.export``, and the graph cleaned up.

A decoding step is a plain function of model layers called once per generated token;
eager Keras runs ~700 operations per ConvS2S step, ~540 of them same-dtype conversions
and the export's metadata checks, which the trace drops: a step of
``convs2s_iwslt_de_en`` is then about 3x faster on CPU (docs/benchmark-notes.md).
``torch.compile`` is not used: Keras' tree utilities break its graph into pieces (8
graph breaks per ConvS2S step) and, on CPU, it ran the step slower than eager. Tracing
costs about a second per input signature, so a signature runs eagerly (under
``torch.no_grad``) for its first `TORCH_TRACE_AFTER` calls and is traced at the next; a
function that cannot be traced (data-dependent Python control flow) stays eager.

Private APIs: the clean-up (`_without_no_ops`) reads ``torch.ops.aten``'s private
operators, ``torch._ops.OpOverload`` and ``torch.utils._pytree``. If it fails, the
graph runs as ``torch.export`` made it (the same numbers), after one warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.backend._registry import API_ERRORS, warn_once

# Eager calls of one input signature before it is traced (see above): tracing took
# 0.3-1 s per signature on 2 cores, a traced ConvS2S step saves ~3.7 ms.
TORCH_TRACE_AFTER = 16


class TorchTracedFunction:
    """A function of tensors and ``variables`` on PyTorch, traced per input signature.

    An input signature is the nesting of the arguments and each tensor's shape
    and dtype. The first ``TORCH_TRACE_AFTER`` calls of a signature run the
    function eagerly under ``torch.no_grad``; the next traces it with
    ``torch.export`` (non-strict: Keras' Python runs once on fake tensors,
    with the variables' values as graph inputs, so later weight updates are
    seen), drops the export's metadata checks and conversions to the same
    dtype, and runs the graph from then on. A signature whose tracing fails
    stays eager; ``trace_errors`` keeps why, by signature. With ``traceable=False``
    every call runs eagerly (see :func:`compile_inference`).
    """

    def __init__(
        self, function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
    ) -> None:
        self.function = function
        self.variables = list(variables)
        self.traceable = traceable
        self.graphs: dict[tuple, Any] = {}
        self.trace_errors: dict[tuple, str] = {}
        self._calls: dict[tuple, int] = {}

    def __call__(self, *args: Any) -> Any:
        import torch

        # NumPy arrays become tensors, as tf.function and jax.jit take them: a traced
        # graph needs tensors, and an array is no hashable part of a signature.
        args = keras.tree.map_structure(
            lambda leaf: ops.convert_to_tensor(leaf) if isinstance(leaf, np.ndarray) else leaf,
            args,
        )
        key = _signature(args)
        with torch.no_grad():
            graph = self.graphs.get(key)
            if graph is None and self.traceable and key not in self.trace_errors:
                self._calls[key] = self._calls.get(key, 0) + 1
                if self._calls[key] > TORCH_TRACE_AFTER:
                    graph = self._trace(key, args)
            if graph is None:
                return self.function(*args)
            return graph([v.value for v in self.variables], args)

    def _trace(self, key: tuple, args: tuple) -> Any:
        import torch

        function, variables = self.function, self.variables

        class Stateless(torch.nn.Module):
            def forward(self, values: list, args: tuple) -> Any:
                mapping = list(zip(variables, values, strict=True))
                with keras.StatelessScope(state_mapping=mapping):
                    return function(*args)

        values = [v.value for v in variables]
        try:
            program = torch.export.export(Stateless(), (values, args), strict=False)
        except Exception as error:  # noqa: BLE001  (any tracing failure: stay eager)
            self.trace_errors[key] = f"{type(error).__name__}: {error}"
            return None
        module = program.module()
        try:
            module = _without_no_ops(module)
        except API_ERRORS as error:  # a private API moved: the export's own graph
            warn_once("torch graph clean-up", error)
            module = program.module()
        graph = self.graphs[key] = module
        return graph


def _signature(args: tuple) -> tuple:
    import torch

    leaves, spec = _tree_flatten(args)
    shapes = tuple(
        (tuple(leaf.shape), leaf.dtype) if isinstance(leaf, torch.Tensor) else ("value", leaf)
        for leaf in leaves
    )
    return str(spec), shapes


def _without_no_ops(module: Any) -> Any:
    """Simplifies a traced module's graph without changing what it computes.

    Drops ``torch.export``'s metadata assertions and ``to`` conversions that keep
    the dtype and device (they return their input), folds constants
    (:func:`_fold_constants`) and merges repeated operations
    (:func:`_merge_repeats`). A decoding step runs at batch 1, where an
    operation's dispatch costs about as much as its arithmetic: the Music
    Transformer's step (4 layers) went from 531 operations to 254
    (docs/development.md, "Compiled decoding").
    """
    import torch

    aten = torch.ops.aten
    graph = module.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten._assert_tensor_metadata.default:
            graph.erase_node(node)
        elif node.target in (aten.to.dtype, aten.to.dtype_layout) and not node.kwargs.get("copy"):
            before, after = node.args[0].meta.get("val"), node.meta.get("val")
            if (
                before is not None
                and after is not None
                and before.dtype == after.dtype
                and before.device == after.device
            ):
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)
    graph.eliminate_dead_code()
    _fold_constants(module)
    _merge_repeats(graph)
    graph.eliminate_dead_code()
    module.recompile()
    return module


# Folded results larger than this stay computed at each call: a constant is kept in
# memory for as long as the traced graph lives.
_FOLD_LIMIT_BYTES = 1 << 20


def _fold_constants(module: Any) -> None:
    """Computes once, at trace time, every node of ``module``'s graph that depends on
    no graph input: constants ``torch.export`` lifted (and copies at each call with
    ``lift_fresh_copy``), ``arange`` / ``zeros`` / ``ones`` and what is computed from
    them alone (index vectors, masks of static lengths). The results become module
    attributes. Random operations are never folded (their draws must change), nor
    results over ``_FOLD_LIMIT_BYTES``.
    """
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    graph = module.graph
    values: dict[Any, Any] = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            target = module
            for part in node.target.split("."):
                target = getattr(target, part)
            values[node] = target
            continue
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            continue
        inputs = [
            a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, torch.fx.Node)
        ]
        if not all(a in values for a in inputs):
            continue
        args, kwargs = tree_map(
            lambda a: values[a] if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs)
        )
        result = node.target(*args, **kwargs)
        if isinstance(result, torch.Tensor) and result.numel() * result.element_size() <= (
            _FOLD_LIMIT_BYTES
        ):
            values[node] = result
    # Each folded node that a computed node (or the output) still uses becomes an
    # attribute; equal constants (each layer builds its own) become one, so that the
    # operations applied to them can be merged next.
    kept: list[tuple[Any, Any]] = []
    for node, value in values.items():
        if node.op == "get_attr" or all(user in values for user in node.users):
            continue
        folded = next((n for v, n in kept if _same_tensor(v, value)), None)
        if folded is None:
            name = f"_folded_constant_{len(kept)}"
            module.register_buffer(name, value.detach().clone(), persistent=False)
            with graph.inserting_before(next(iter(graph.nodes))):
                folded = graph.get_attr(name)
            folded.meta = dict(node.meta)
            kept.append((value, folded))
        node.replace_all_uses_with(folded)
    graph.eliminate_dead_code()


def _same_tensor(a: Any, b: Any) -> bool:
    """Whether two folded constants are the same bytes (so 0.0 and -0.0 stay apart)."""
    import torch

    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    as_bytes = [t.reshape(-1).contiguous().view(torch.uint8) for t in (a, b)]
    return bool(as_bytes[0].equal(as_bytes[1]))


def _merge_repeats(graph: Any) -> None:
    """Common subexpression elimination: a node that applies the same operation to
    the same inputs as an earlier one is replaced by it (every layer of a decoder
    computes the same index and mask from the step's position). Random operations
    are kept."""
    import torch
    from torch.utils._pytree import tree_flatten

    seen: dict[Any, Any] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            continue
        leaves, spec = tree_flatten((node.args, node.kwargs))
        key = (node.target, tuple(leaves), str(spec))
        try:
            earlier = seen.get(key)
        except TypeError:  # an argument that cannot be hashed: not merged
            continue
        if earlier is None:
            seen[key] = node
        else:
            node.replace_all_uses_with(earlier)
            graph.erase_node(node)


def _tree_flatten(tree: Any) -> tuple:
    """PyTorch's own flattening of nested arguments (its private ``_pytree``), or Keras'."""
    try:
        from torch.utils._pytree import tree_flatten
    except ImportError:
        leaves = keras.tree.flatten(tree)
        return leaves, repr(keras.tree.map_structure(lambda _: None, tree))
    return tree_flatten(tree)
