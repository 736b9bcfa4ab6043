"""The reference kernels: every operation the layers ask of a backend, in ``keras.ops`` only.

Each function here is the definition of its kernel and runs on every backend and
device; a backend module may override it where that was measured to pay
(`keras_posenc.backend._registry`). Tests compare every override with the function
here (tests/backend/test_kernels.py), values and gradients.

Shapes: ``q``, ``k``, ``v`` are (batch, length, heads, head_dim), ``q`` already scaled;
logits and probabilities are (batch, heads, q_len, k_len) float32.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.backend import _registry

# --------------------------------------------------------------------------- relative logits


def toeplitz(diagonals: Any, query_length: int, key_length: int) -> Any:
    """``out[..., i, j] = diagonals[..., j - i + query_length - 1]`` (static lengths).

    One gather at a (q_len, k_len) index of the ``q_len + k_len - 1`` diagonals.
    """
    index = np.arange(key_length)[None, :] - np.arange(query_length)[:, None] + query_length - 1
    return ops.take(diagonals, ops.convert_to_tensor(index.astype("int32")), axis=-1)


def gather_heads_first(table: Any, index: Any) -> Any:
    """``table[index[i, j], h]`` as (heads, q_len, k_len), for a (rows, heads) ``table``."""
    return ops.take(ops.transpose(table), index, axis=1)


def take_columns(values: Any, columns: Any) -> Any:
    """``values[b, h, i, columns[i, c]]``: (batch, heads, q_len, n) read at (q_len, m) columns.

    The index is never broadcast to the batch and heads: the last two axes are read
    flattened, at ``i * n + columns[i, c]``.
    """
    batch, heads, query_length, width = (ops.shape(values)[axis] for axis in range(4))
    flat_index = ops.arange(query_length, dtype="int32")[:, None] * ops.cast(width, "int32")
    flat_index = flat_index + columns
    return ops.take(ops.reshape(values, (batch, heads, -1)), flat_index, axis=2)


def relative_key_logits(q: Any, table: Any, index: Any) -> Any:
    """``q_i . table[index[i, j]]`` as float32 (batch, heads, q_len, k_len).

    ``Q table^T`` once for every table row, (batch, heads, q_len, rows), read at
    column ``index[i, j]`` of row i (`take_columns`); the (q_len, k_len, head_dim)
    tensor of gathered rows is never built.
    """
    per_row = ops.cast(ops.einsum("bqhd,rd->bhqr", q, ops.cast(table, q.dtype)), "float32")
    return take_columns(per_row, index)


def cumulative_sum(values: Any) -> Any:
    """``cumsum(values, axis=-1)`` in float32."""
    return ops.cumsum(ops.cast(values, "float32"), axis=-1)


# --------------------------------------------------------------------------- attention


def attention_probabilities(
    q: Any, k: Any, bias: Any, soft_cap: float | None = None, capped: Any = None
) -> Any:
    """``softmax(q k^T + bias)`` in float32; ``bias`` None or broadcastable to the logits.

    With ``soft_cap`` (Gemma 2's logit soft-capping) the logits ``q k^T + capped`` are first
    squashed to ``soft_cap * tanh(logits / soft_cap)``; ``bias`` (the masks' fill, an
    attention bias) is added after the cap, so a masked logit stays far below every other.
    """
    logits = ops.cast(ops.einsum("bqhd,bkhd->bhqk", q, k), "float32")
    if capped is not None:
        logits = logits + capped
    if soft_cap is not None:
        cap = ops.cast(soft_cap, "float32")
        logits = ops.tanh(logits / cap) * cap
    if bias is not None:
        logits = logits + bias
    if logits.shape[-1] == 1:
        # One key per query is legitimate here (a 1 x 1 map: CoAtNet's last stage at 32 x 32
        # inputs, the shipped digits classifier of keras_posenc/zoo/weights/); every
        # probability is 1, and Keras' warning that the softmax "will always return 1" is noise.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="You are using a softmax over axis")
            return ops.softmax(logits, axis=-1)
    return ops.softmax(logits, axis=-1)


def fused_attention(q: Any, k: Any, v: Any, bias: Any) -> Any:
    """``keras.ops.dot_product_attention`` with an additive ``bias`` in q's dtype (or None).

    ``q``, ``k``, ``v`` share one dtype; the output is (batch, q_len, heads, head_dim).
    """
    return ops.dot_product_attention(q, k, v, bias=bias, scale=1.0)


def toeplitz_attention(q: Any, k: Any, v: Any, diagonals: Any) -> Any:
    """Attention with a bias that depends on ``j - i`` only, given by its diagonals.

    ``diagonals``: (heads, q_len + k_len - 1) float32 (`toeplitz`); static lengths.
    The bias is built (heads, q_len, k_len) and given to `fused_attention`.
    """
    bias = toeplitz(diagonals, q.shape[1], k.shape[1])[None]
    return fused_attention(q, k, v, ops.cast(bias, q.dtype))


def prefers_fused_attention() -> bool:
    """Whether ``fused_attention="auto"`` means the fused kernel here (no: measured nowhere)."""
    return False


def prefers_toeplitz_attention(*tensors: Any) -> bool:
    """Whether `toeplitz_attention` pays over blocked attention with a built bias (no)."""
    return False


def query_block_bytes() -> int:
    """Automatic query blocking: float32 logits of one block per example stay under this."""
    return 32 * 2**20


def compiled_block(method: Callable[..., Any], logits: int, training: Any, dropout: float) -> Any:
    """The function that computes one block of attention: ``method`` itself here.

    ``logits``: the block's logits per example; an override may compile blocks
    this large (TensorFlow: `keras_posenc.backend.tensorflow`).
    """
    return method


def recompute_block(function: Callable[..., Any], tensors: Sequence[Any], training: Any) -> Any:
    """``function(*tensors)``, whose backward pass recomputes it (Keras' ``keras.remat``).

    One block of queries of the attention (`keras_posenc.layers._attention.attend_in_blocks`):
    without this, a training step keeps every block's probabilities and logits for the
    backward pass (3-6 S in all, S = heads x L x L float32); with it, the block's inputs
    only, and the block's probabilities are computed again, one block at a time, when its
    gradients are. ``tensors`` are every tensor the gradients flow to (entries may be None);
    what ``function`` reads besides them is the layer's variables (``keras.remat`` sees them
    on every backend) and tensors without gradients (masks). Only where ``training`` is not
    falsy: inference, an export and the decoding loops run ``function`` as it is.
    """
    if isinstance(training, bool | int | type(None)) and not training:
        return function(*tensors)
    present = [index for index, tensor in enumerate(tensors) if tensor is not None]

    def packed(*given: Any) -> Any:
        full = list(tensors)
        for index, tensor in zip(present, given, strict=True):
            full[index] = tensor
        return function(*full)

    return keras.remat(packed)(*(tensors[index] for index in present))


def replays_random_draws() -> bool:
    """Whether `recompute_block` draws the same random numbers again when it recomputes.

    Not the reference: a Keras dropout layer draws a new seed on each call (TensorFlow), or
    leaks its traced seed out of the recomputed function (JAX); the attention then draws
    each block's dropout seed before the block (`keras_posenc.layers._attention.SeededDropout`).
    """
    return False


def scratch() -> contextlib.AbstractContextManager:
    """A scope for one layer call within which kernels may reuse block-sized buffers.

    The reference keeps nothing (a null context).
    """
    return contextlib.nullcontext()


# --------------------------------------------------------------------------- convolutions


def depthwise_conv2d(x: Any, kernel: Any, strides: int, pad: int) -> Any:
    """A depthwise convolution of channels-last ``x``: zero padding ``pad``, then valid.

    ``kernel``: Keras' (k, k, channels, 1) depthwise kernel.
    """
    kernel = ops.cast(kernel, x.dtype)
    if strides == 1 and 2 * pad == kernel.shape[0] - 1:
        return ops.depthwise_conv(x, kernel, 1, "same")  # the same padding, no copy
    if pad:
        x = ops.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    return ops.depthwise_conv(x, kernel, strides, "valid")


# --------------------------------------------------------------------------- the framework


def compile_function(
    function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
) -> Callable[..., Any]:
    """Compiles ``function(*tensors)`` that reads ``variables`` (a model's weights).

    The reference runs it as it is. TensorFlow: ``tf.function`` (variables captured
    by reference); JAX: ``jax.jit`` of a stateless version, the variables' current
    values passed in on every call; PyTorch: ``torch.export`` per input signature
    after a few eager calls (`keras_posenc.backend.torch_trace`). Keras compiles
    ``fit`` and ``predict`` itself; a decoding step is a plain function called once
    per token (`keras_posenc.generation` is its user).

    Args:
        function: a function of tensors (nested tuples allowed) returning tensors; it
            must not assign variables.
        variables: every variable the function reads (``model.variables``).
        traceable: False for a function ``torch.export`` is known not to trace (a
            random draw): on PyTorch it then runs eagerly under ``torch.no_grad``.

    Returns:
        A callable with the same signature; arguments must be tensors or NumPy arrays
        (Python ints would be constants in the compiled graph).
    """
    return function


# The loop compiles through the active backend's `compile_function` (a kernel dispatched
# by name in backend/_registry.py, which imports nothing of this package).
_compile_function = _registry.kernel(compile_function)


def compiled_while_loop(
    cond: Callable[..., Any],
    body: Callable[..., tuple],
    variables: Sequence[Any],
    traceable: bool = True,
) -> Callable[..., tuple]:
    """``loop(*loop_vars)``: ``ops.while_loop(cond, body, loop_vars)``, compiled as a whole."""
    return _compile_function(
        lambda *loop_vars: tuple(ops.while_loop(cond, body, loop_vars)), variables, traceable
    )


def concrete_values(x: Any) -> np.ndarray | None:
    """``x``'s values as a NumPy array where they exist now, else None.

    None for a symbolic tensor (a functional graph being built); a backend adds the
    traced functions of its framework. Anything unexpected answers None: a check
    of values is skipped, never the call.
    """
    if isinstance(x, np.ndarray):
        return x
    if x is None or keras.backend.is_keras_tensor(x):
        return None
    try:
        return np.asarray(ops.convert_to_numpy(x))
    except Exception:  # noqa: BLE001  (a tensor without values, an API that moved)
        return None


def check_synchronized_batch_norm(who: str, synchronized: bool) -> None:
    """Raises for ``synchronized=True``: Keras synchronises batch norms on TensorFlow only."""
    if synchronized:
        raise ValueError(
            f"{who}: `synchronized=True` needs the TensorFlow backend (Keras' "
            "BatchNormalization synchronises replicas only there); received "
            f"synchronized=True on the {keras.backend.backend()} backend"
        )
