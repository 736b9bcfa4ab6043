"""PyTorch's overrides of the reference kernels (`keras_posenc.backend.common`).

Each says where it was measured; the numbers are in docs/benchmark-notes.md and the list of
kept overrides in docs/development.md ("Backend kernels"). Compiling decoding steps
(``torch.export`` and its graph clean-up) is `keras_posenc.backend.torch_trace`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import torch
import torch.nn.functional as F

from keras_posenc.backend import common, torch_trace
from keras_posenc.backend._registry import REFERENCE, Registrar

_HERE = Registrar("torch")
override, device_query = _HERE.override, _HERE.device_query


@device_query
def device_kind() -> str:
    """CUDA or MPS available: Keras' PyTorch backend then places tensors there."""
    if torch.cuda.is_available():
        return "gpu"
    mps = getattr(torch.backends, "mps", None)
    return "gpu" if mps is not None and mps.is_available() else "cpu"


def _traced() -> bool:
    """A graph being traced (``torch.export``, ``torch.compile``, ``torch.onnx``): no ``out=``."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()


def _plain_float32(*tensors: Any) -> bool:
    """Real (not fake or symbolic) float32 tensors, or None."""
    return all(
        tensor is None or (type(tensor) is torch.Tensor and tensor.dtype == torch.float32)
        for tensor in tensors
    )


# --------------------------------------------------------------------------- scratch buffers


class Workspace:
    """Scratch tensors that one call of an attention layer reuses (no gradients, eager).

    Why: a fresh (batch, heads, block, k_len) float32 tensor of several MiB is returned
    to the operating system when freed (glibc's ``malloc`` maps allocations above its
    dynamic mmap threshold, at most 32 MiB, separately), so the next block's tensor of
    the same size is mapped again and every page is zero-filled on first touch. With 8
    heads on 2 CPU cores, filling a kept (batch, heads, L, L) tensor by ``torch.gather``
    took 0.20x (L = 1024) and 0.31x (L = 2048) of the time of filling a new one
    (benchmarks/relative_logits.py, group "fill"). PyTorch has no caching allocator on
    CPU, so the kernels keep their few block-sized tensors here for the duration of
    one layer call (`scratch`): each block of queries overwrites the previous block's.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, Any] = {}
        self._heads_first: list[tuple[Any, Any]] = []

    def buffer(self, name: str, shape: tuple, like: Any) -> Any:
        """An uninitialised float32 tensor of ``shape`` on ``like``'s device, kept as ``name``."""
        current = self._buffers.get(name)
        if current is None or tuple(current.shape) != tuple(shape):
            current = None  # freed before the new one is allocated
            self._buffers.pop(name, None)
            current = torch.empty(shape, dtype=torch.float32, device=like.device)
            self._buffers[name] = current
        return current

    def owns(self, tensor: Any) -> bool:
        """Whether ``tensor`` is one of this workspace's buffers."""
        return any(tensor is buffer for buffer in self._buffers.values())

    def heads_first(self, x: Any) -> Any:
        """``x`` (batch, length, heads, dim) as a contiguous (batch, heads, length, dim) copy.

        Made once per tensor and call: every block of queries attends to the same keys
        and values, which would otherwise be transposed and copied again per block
        (at L = 2048 with blocks of 256 queries, 15 ms of a 140 ms call).
        """
        for original, transposed in self._heads_first:
            if original is x:
                return transposed
        transposed = x.transpose(1, 2).contiguous()
        self._heads_first.append((x, transposed))
        return transposed


_WORKSPACE: contextvars.ContextVar[Workspace | None] = contextvars.ContextVar(
    "keras_posenc_torch_workspace", default=None
)


def _workspace(*tensors: Any) -> Workspace | None:
    """The current call's `Workspace`, where these tensors may use it."""
    workspace = _WORKSPACE.get()
    if workspace is None or not _plain_float32(*tensors):
        return None
    return workspace


_MALLOC_TRIM: list = []  # glibc's malloc_trim, found on first use
# The shortest query length whose blocks give freed memory back (benchmarks/training_step.py,
# idle, against the commit before recomputation: at L = 1024 a step took 1.8-2.1x its time
# with the trims, 1.35-1.49x without them).
_TRIM_FROM = 2048


def _give_back_freed_memory() -> None:
    """glibc's ``malloc_trim(0)``: the pages of freed blocks go back to the system.

    Raises AttributeError where the C library has none (macOS, musl): the override is
    guarded, so the reference runs there from then on.
    """
    if not _MALLOC_TRIM:
        import ctypes

        _MALLOC_TRIM.append(ctypes.CDLL(None).malloc_trim)
    _MALLOC_TRIM[0](0)


@override(
    common.recompute_block,
    guarded=True,
    measured="a training step of MultiHeadRelativeAttention(relative='keys'), L = 2048, 8 "
    "heads, 2 CPU cores: extra peak RSS 1.85 S with the reference, 1.12 S with the freed "
    "blocks given back before each block's forward and backward pass; without it a block's "
    "16 MiB tensors, below glibc's mmap threshold, stay in the heap and the next block's "
    "land beside them (benchmarks/training_step.py)",
)
def recompute_block(function: Callable[..., Any], tensors: Sequence[Any], training: Any) -> Any:
    if not torch.is_grad_enabled():
        return REFERENCE
    # The queries' length (tensors[0]: (batch, length, heads, size)): below _TRIM_FROM the
    # trims cost 15-20 % of a step's time for little memory (measured at L = 1024).
    first = next((tensor for tensor in tensors if tensor is not None), None)
    if first is None or first.ndim < 2 or first.shape[1] < _TRIM_FROM:
        return common.recompute_block(function, tensors, training)
    _give_back_freed_memory()
    output = common.recompute_block(function, tensors, training)
    if isinstance(output, torch.Tensor) and output.requires_grad:
        # Runs when the block's gradient arrives, before its recomputation.
        output.register_hook(lambda grad: (_give_back_freed_memory(), grad)[1])
    return output


@override(
    common.replays_random_draws,
    devices=None,
    measured="Keras' remat is torch.utils.checkpoint, which restores the generators' state "
    "before recomputing (preserve_rng_state): the dropout layer's own draw is replayed, so "
    "dropout keeps PyTorch's global generator as without recomputation",
)
def replays_random_draws() -> bool:
    return True


@override(
    common.scratch,
    measured="8 heads, 2 CPU cores, no gradients: filling a kept (batch, heads, L, L) tensor "
    "took 0.20x (L = 1024) / 0.31x (L = 2048) the time of a new one "
    "(benchmarks/relative_logits.py, fill)",
)
@contextlib.contextmanager
def scratch() -> Iterator[None]:
    if torch.is_grad_enabled() or _traced():
        yield  # out= and in-place writes would break autograd; a traced graph has none
        return
    token = _WORKSPACE.set(Workspace())
    try:
        yield
    finally:
        _WORKSPACE.reset(token)


# --------------------------------------------------------------------------- relative logits


def _gather(values: Any, columns: Any, out: Any = None) -> Any:
    """``torch.gather`` with the (q_len, m) index broadcast to the batch and heads as a view.

    ``keras.ops.take_along_axis`` would first make the broadcast index a full int64
    tensor (2 S at m = k_len), and the flattened read runs PyTorch's slower index_select.
    """
    index = torch.as_tensor(columns, device=values.device).long()
    index = index.expand(values.shape[0], values.shape[1], *index.shape)
    if out is None:
        return torch.gather(values, -1, index)
    return torch.gather(values, -1, index, out=out)


@override(
    common.take_columns,
    measured="8 heads, L = 1024 / 2048, 2 CPU cores: 0.29 / 0.32 of the flattened read's "
    "time (benchmarks/relative_logits.py, keys)",
)
def take_columns(values: Any, columns: Any) -> Any:
    return _gather(values, columns)


@override(
    common.relative_key_logits,
    measured="8 heads, L = 1024 / 2048, 2 CPU cores: the gather of `take_columns`, written "
    "into the call's scratch buffer (benchmarks/relative_logits.py, keys and fill)",
)
def relative_key_logits(q: Any, table: Any, index: Any) -> Any:
    per_row = keras.ops.einsum("bqhd,rd->bhqr", q, keras.ops.cast(table, q.dtype))
    per_row = keras.ops.cast(per_row, "float32")
    workspace = _workspace(per_row)
    if workspace is None:
        return _gather(per_row, index)
    shape = tuple(per_row.shape[:3]) + (index.shape[-1],)
    return _gather(per_row, index, workspace.buffer("bias", shape, per_row))


@override(
    common.cumulative_sum,
    measured="in place on the call's scratch buffer: one block-sized tensor fewer "
    "(benchmarks/relative_attention.py, keys_values memory)",
)
def cumulative_sum(values: Any) -> Any:
    workspace = _workspace(values)
    if workspace is None or not workspace.owns(values):
        return REFERENCE
    return values.cumsum_(-1)


# --------------------------------------------------------------------------- attention


@override(
    common.attention_probabilities,
    measured="one block-sized tensor instead of four (products, their sum with the bias, "
    "probabilities, cast) within a call's scratch (benchmarks/relative_attention.py)",
)
def attention_probabilities(
    q: Any, k: Any, bias: Any, soft_cap: float | None = None, capped: Any = None
) -> Any:
    workspace = _workspace(q, k, bias)
    if workspace is None or soft_cap is not None or capped is not None:
        return REFERENCE
    batch, query_length, heads, head_dim = q.shape
    key_length = k.shape[1]
    shape = (batch, heads, query_length, key_length)
    queries = q.transpose(1, 2).reshape(batch * heads, query_length, head_dim)
    keys = k.permute(0, 2, 3, 1).reshape(batch * heads, head_dim, key_length)
    if bias is not None and tuple(bias.shape) == shape and workspace.owns(bias):
        logits = bias
        logits.view(batch * heads, query_length, key_length).baddbmm_(queries, keys)
    else:
        logits = workspace.buffer("logits", shape, q)
        torch.bmm(queries, keys, out=logits.view(batch * heads, query_length, key_length))
        if bias is not None:
            logits.add_(bias)
    return torch.softmax(logits, -1, out=logits)


@override(
    common.fused_attention,
    measured="at L = 2048 with blocks of 256 queries, transposing keys and values once per "
    "call saved 15 ms of a 140 ms call (benchmarks/relative_attention.py)",
)
def fused_attention(q: Any, k: Any, v: Any, bias: Any) -> Any:
    workspace = _workspace(q, k, v, bias)
    if workspace is None:
        return REFERENCE
    output = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        workspace.heads_first(k),
        workspace.heads_first(v),
        attn_mask=bias,
        scale=1.0,
    )
    return output.transpose(1, 2)


@override(
    common.prefers_fused_attention,
    measured="relative='keys', 8 heads, L = 1024, 2 CPU cores, no gradients: 6.4x -> 1.9x "
    "MultiHeadAttention's time (benchmarks/relative_attention.py); with gradients a mask "
    "that needs one sends PyTorch to its unfused path, which was slower",
)
def prefers_fused_attention() -> bool:
    return not torch.is_grad_enabled()


@override(
    common.prefers_toeplitz_attention,
    measured="see `toeplitz_attention`",
)
def prefers_toeplitz_attention(*tensors: Any) -> bool:
    return not torch.is_grad_enabled() and all(t.dtype == torch.float32 for t in tensors)


@override(
    common.toeplitz_attention,
    measured="8 heads, L = 1024 / 2048, 2 CPU cores, no gradients: 0.41 / 0.42 of the same "
    "kernel given the built bias, building included (benchmarks/relative_logits.py)",
)
def toeplitz_attention(q: Any, k: Any, v: Any, diagonals: Any) -> Any:
    """``scaled_dot_product_attention`` with the bias as a strided view of its diagonals.

    With the keys (and values) in reverse order, the bias of query i and reversed key
    j' is ``reversed_diagonals[i + j']``: a view with strides (1, 1) of one vector per
    head (a forward Toeplitz view would need a negative stride, which PyTorch refuses).
    Attention does not depend on the keys' order.
    """
    if not _plain_float32(q, k, v, diagonals):
        return REFERENCE
    heads, count = diagonals.shape
    query_length, key_length = q.shape[1], k.shape[1]
    reversed_diagonals = torch.flip(diagonals, (-1,)).contiguous()
    bias = torch.as_strided(
        reversed_diagonals, (1, heads, query_length, key_length), (heads * count, count, 1, 1)
    )
    output = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        torch.flip(k, (1,)).transpose(1, 2),
        torch.flip(v, (1,)).transpose(1, 2),
        attn_mask=bias,
        scale=1.0,
    )
    return output.transpose(1, 2)


@override(
    common.query_block_bytes,
    measured="layer calls at L = 1024 and 2048, 8 heads, 2 CPU cores: below glibc's largest "
    "mmap threshold (32 MiB) a freed block's memory is kept and reused by the next",
)
def query_block_bytes() -> int:
    return 16 * 2**20


# --------------------------------------------------------------------------- the framework


@override(
    common.compile_function,
    devices=None,
    measured="a ConvS2S decoding step about 3x faster on CPU traced (benchmarks/generation.py)",
)
def compile_function(
    function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
) -> Callable[..., Any]:
    return torch_trace.TorchTracedFunction(function, variables, traceable)


@override(
    common.compiled_while_loop,
    devices=None,
    measured="torch.export cannot trace a loop whose length depends on the data",
)
def compiled_while_loop(
    cond: Callable[..., Any],
    body: Callable[..., tuple],
    variables: Sequence[Any],
    traceable: bool = True,
) -> Callable[..., tuple]:
    """The body compiled (`compile_function`), the loop in Python."""
    step = torch_trace.TorchTracedFunction(body, variables, traceable)

    def loop(*loop_vars: Any) -> tuple:
        while bool(keras.ops.convert_to_numpy(cond(*loop_vars))):
            loop_vars = tuple(step(*loop_vars))
        return loop_vars

    loop.step = step  # the traced body, for inspection
    return loop


@override(common.concrete_values, devices=None, measured="a traced tensor has no values")
def concrete_values(x: Any) -> Any:
    if type(x) is torch.Tensor and (torch.jit.is_tracing() or torch.compiler.is_compiling()):
        return None
    return REFERENCE
