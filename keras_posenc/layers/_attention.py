"""The attention core: what every attention layer of keras-posenc computes with.

`MultiHeadRelativeAttention`, `MUSEAttention` and MUSE's cross-attention,
CoAtNet's `RelativeTransformerBlock2D` and (for its masked softmax)
`ConvS2SAttention` all attend through these functions, so the conventions are
written once (see "Architecture" in docs/development.md):

- **masks** are boolean or integer 0/1, ``True`` = may attend, checked at the
  layer's boundary by `_checks.check_mask` (a floating mask is refused: an additive
  0 / -1e9 mask cast to bool would be silently inverted);
- **precision**: logits and softmax in float32, masked logits filled with one
  large finite value (`MASK_FILL`, never ``-inf``), a fully masked query row
  gives zeros, never NaN; keys and values at positions no query may see are
  zeroed before they are used, so non-finite padding never reaches a real
  output (``0 * NaN`` is NaN);
- **projections**: one ``EinsumDense`` per role, each with its own initializer
  (`sublayer_initializer`);
- **cache**: keras_hub's ``(batch, 2, max_len, heads, head_dim)`` layout,
  written by `write_key_value_cache` with a gather and a select (exportable);
- **fused kernels**: one rule, `use_fused_attention`;
- **query blocking**: `query_block` and `attend_in_blocks`.

Private: layers use it, users do not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc import backend
from keras_posenc.layers import relative_index
from keras_posenc.layers._initializers import sublayer_initializer
from keras_posenc.layers._memory import check_allocation
from keras_posenc.layers._remat import DrawnSeeds

# Logits of masked pairs. Finite, so a fully masked row never produces NaN
# (softmax of a constant row is uniform; the row is then zeroed), and far below
# any real float32 logit, so exp() of a masked logit is exactly 0.
MASK_FILL = -1e9

# The same fill for the fused path (`keras.ops.dot_product_attention`), which
# adds the bias in the compute dtype: float16 cannot hold -1e9 (it would become
# -inf), so there the bias is clipped at about half its largest finite value,
# leaving room for the content logits to be added without overflowing.
FLOAT16_MASK_FILL = -3.0e4

# Automatic query blocking (`query_block`): a block has at least this many
# queries (fewer would make the per-block overhead of small ops dominate); its
# size in bytes depends on the backend (`backend.query_block_bytes`).
MIN_AUTO_BLOCK = 64


# --------------------------------------------------------------------------- masks


def causal_mask(query_length: Any, key_length: Any, offset: Any = 0) -> Any:
    """``(1, q_len, k_len)`` bool: query ``offset + i`` sees the keys ``j <= offset + i``."""
    queries = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    keys = ops.arange(key_length, dtype="int32")
    return ops.expand_dims(ops.less_equal(keys[None, :], queries[:, None]), 0)


def position_mask(
    query_positions: Any,
    key_positions: Any,
    causal: bool,
    window: int | None = None,
    sinks: int = 0,
) -> Any:
    """``(1, q_len, k_len)`` bool from the queries' and keys' positions (1-D int), or None.

    ``causal``: a key at or before the query; ``window``: ``|query - key| < window``
    (Mistral's and Gemma 2's band: with ``causal``, the query and the ``window - 1`` keys
    before it), where the first ``sinks`` positions stay visible (StreamingLLM's attention
    sinks). Positions, not indices: a rolling cache's keys are not in order of their slots.
    """
    queries = ops.expand_dims(ops.cast(query_positions, "int32"), 1)
    keys = ops.expand_dims(ops.cast(key_positions, "int32"), 0)
    mask = ops.less_equal(keys, queries) if causal else None
    if window is not None:
        local = ops.less(ops.abs(queries - keys), window)
        if sinks:
            local = ops.logical_or(local, ops.less(keys, sinks))
        mask = local if mask is None else ops.logical_and(mask, local)
    return None if mask is None else ops.expand_dims(mask, 0)


def repeat_heads(x: Any, num_heads: int) -> Any:
    """Keys or values (batch, length, kv_heads, head_dim) repeated to ``num_heads`` heads.

    Grouped-query attention: key/value head ``g`` serves the query heads ``g * group ..
    (g + 1) * group - 1`` (keras-hub's Llama, Mistral and Gemma: ``ops.repeat`` on the head
    axis). Only the call's keys are repeated; the cache keeps the key/value heads.
    """
    groups = num_heads // x.shape[2]
    return x if groups == 1 else ops.repeat(x, groups, axis=2)


def zero_invalid(x: Any, valid: Any) -> Any:
    """``x`` (batch, length, ...) zeroed where ``valid`` (batch, length) is False.

    A select, not a multiplication: ``0 * NaN`` would keep a NaN in padding.
    """
    valid = ops.reshape(valid, ops.shape(valid) + (1,) * (len(x.shape) - 2))
    return ops.where(valid, x, ops.zeros((), x.dtype))


def unmasked(x: Any) -> Any:
    """A fresh tensor equal to ``x``, carrying no Keras mask.

    Sublayers that do not support masking (projections, layer norms) would warn
    about (or refuse) the mask Keras attaches to a layer's input.
    """
    return ops.add(x, ops.zeros((), x.dtype))


def masked_softmax(logits: Any, mask: Any = None) -> Any:
    """float32 softmax over the last axis, masked entries excluded, fully masked rows zero.

    ``mask`` is None or bool, broadcastable to ``logits``. Masked logits are
    replaced (not added to), so a NaN there does not spread.
    """
    logits = ops.cast(logits, "float32")
    if mask is None:
        return ops.softmax(logits, axis=-1)
    logits = ops.where(mask, logits, ops.cast(MASK_FILL, "float32"))
    probabilities = ops.softmax(logits, axis=-1)
    return ops.where(ops.any(mask, axis=-1, keepdims=True), probabilities, 0.0)


def float32_bias(bias: Any) -> Any:
    """An additive bias (an ``attention_bias`` argument) in float32, nothing below `MASK_FILL`.

    Under ``mixed_float16`` Keras casts a layer's floating call arguments to float16
    before ``call`` sees them, so an additive mask of -1e9 arrives as -inf, and a query
    row masked whole gave NaN (-inf minus -inf in the softmax); filled with `MASK_FILL`
    it is finite, like a boolean mask's fill.
    """
    return ops.maximum(ops.cast(bias, "float32"), ops.cast(MASK_FILL, "float32"))


def cast_bias(bias: Any, dtype: Any) -> Any:
    """A float32 additive bias cast to ``dtype``; for float16 first clipped at ±3e4
    (`FLOAT16_MASK_FILL`): float16 overflows beyond 65,504 (KERPLE's power kernel reaches
    -4e6 at a distance of 2,048), and the room left lets logits be added to it."""
    if keras.backend.standardize_dtype(dtype) == "float16":
        bias = ops.clip(bias, FLOAT16_MASK_FILL, -FLOAT16_MASK_FILL)
    return ops.cast(bias, dtype)


# --------------------------------------------------------------------------- projections


def projection(
    layer: keras.layers.Layer,
    equation: str,
    output_shape: tuple,
    bias_axes: str,
    name: str,
    use_bias: bool | None = None,
) -> keras.layers.EinsumDense:
    """An ``EinsumDense`` sublayer of ``layer`` with its own copy of the initializers.

    ``layer`` gives ``use_bias`` (unless ``use_bias`` is given), ``kernel_initializer``,
    ``bias_initializer`` and the dtype policy; ``name`` is the sublayer's name (and its
    weights' path).
    """
    use_bias = layer.use_bias if use_bias is None else use_bias
    return keras.layers.EinsumDense(
        equation,
        output_shape=output_shape,
        bias_axes=bias_axes if use_bias else None,
        kernel_initializer=sublayer_initializer(layer.kernel_initializer, name),
        bias_initializer=sublayer_initializer(layer.bias_initializer, name),
        dtype=layer.dtype_policy,
        name=name,
    )


def head_projection(
    layer: keras.layers.Layer, units: int, name: str, heads: int | None = None
) -> Any:
    """``(batch, length, features) -> (batch, length, heads, units)``; ``heads`` defaults
    to the layer's ``num_heads`` (keys and values of grouped-query attention have fewer)."""
    heads = layer.num_heads if heads is None else heads
    return projection(layer, "abc,cde->abde", (None, heads, units), "de", name)


def head_norm(layer: keras.layers.Layer, name: str) -> keras.layers.Layer:
    """The query-key normalisation of ``layer`` (its ``decoder_options``): a Keras
    ``RMSNormalization`` or ``LayerNormalization`` over the head axis of (batch, length,
    heads, head_dim), one scale (and bias) of ``head_dim`` shared by the heads (Gemma 3's,
    Qwen 3's and OLMo's query/key norms per head)."""
    options = layer.decoder_options
    if options.query_key_norm == "rms":
        return keras.layers.RMSNormalization(
            axis=-1, epsilon=options.query_key_norm_epsilon, dtype=layer.dtype_policy, name=name
        )
    return keras.layers.LayerNormalization(
        axis=-1, epsilon=options.query_key_norm_epsilon, dtype=layer.dtype_policy, name=name
    )


# --------------------------------------------------------------------------- cache


def check_cache(caller: str, argument: str, cache: Any, num_heads: int, head_dim: int) -> tuple:
    """The shape of a ``(batch, 2, max_len, num_heads, head_dim)`` keys/values cache."""
    shape = tuple(getattr(cache, "shape", np.shape(cache)))
    if len(shape) != 5 or shape[1] != 2 or shape[3:] != (num_heads, head_dim):
        raise ValueError(
            f"{caller}: `{argument}` must have shape (batch, 2, max_len, {num_heads}, "
            f"{head_dim}) (= (batch, 2, max_len, num_heads, head_dim)), got shape {shape}."
        )
    return shape


def write_rows(cache: Any, rows: Any, index: Any) -> Any:
    """``cache`` (batch, max_len, ...) with ``rows`` (batch, n, ...) written at ``index ..``.

    A gather and a select rather than ``ops.slice_update``: TensorFlow lowers
    that to ``XlaDynamicUpdateSlice``, which tf2onnx cannot convert, and an
    exported decoding step must run in ONNX Runtime. The extra work is one
    pass over the cache, which the attention reads anyway.
    """
    length = ops.shape(rows)[1]
    offsets = ops.arange(ops.shape(cache)[1], dtype="int32") - ops.cast(index, "int32")
    inside = ops.logical_and(ops.greater_equal(offsets, 0), ops.less(offsets, length))
    spread = ops.take(rows, ops.clip(offsets, 0, length - 1), axis=1)  # (batch, max_len, ...)
    inside = ops.reshape(inside, (1, -1) + (1,) * (len(cache.shape) - 2))
    return ops.where(inside, ops.cast(spread, cache.dtype), cache)


def write_key_value_cache(
    cache: Any, key: Any, value: Any, index: Any, caller: str = "write_key_value_cache"
) -> tuple:
    """Writes projected ``key``/``value`` (batch, n, heads, head_dim) at ``index`` of ``cache``.

    Returns ``(keys, values, new_cache)``: the full cached keys and values
    (batch, max_len, heads, head_dim) and the cache stacked back. An ``index`` known before
    running (a Python or NumPy int) must leave the ``n`` rows inside the cache: the select
    writes nothing outside it, so a step at 9 of a cache of 5 returned an output from a
    cache it had not written (``caller`` names the layer in the error). A tensor index
    (compiled decoding loops) is the loop's own and not checked.
    """
    check_cache_index(caller, index, cache.shape[2], key.shape[1])
    keys = write_rows(cache[:, 0], key, index)
    values = write_rows(cache[:, 1], value, index)
    return keys, values, ops.stack((keys, values), axis=1)


def rolling_positions(index: Any, sinks: int, window: int) -> tuple:
    """The positions held by a rolling cache before a write at ``index``, in order of position.

    A rolling cache has ``sinks + window`` slots: position ``p < sinks`` lives in slot ``p``,
    a later one in slot ``sinks + (p - sinks) % window``, so it keeps the sinks and the last
    ``window`` positions. Up to its length it is an ordinary cache (slot = position).
    Returns ``(slots, positions, valid)``: 1-D int32 slots to gather, in order, the positions
    they hold (the sinks, then ``index - window .. index - 1``) and whether each is written
    and not a sink seen twice.
    """
    index = ops.cast(index, "int32")
    sink_positions = ops.arange(sinks, dtype="int32")
    recent = index - window + ops.arange(window, dtype="int32")
    slots = ops.concatenate([sink_positions, sinks + ops.mod(recent - sinks, window)])
    positions = ops.concatenate([sink_positions, recent])
    valid = ops.concatenate([ops.less(sink_positions, index), ops.greater_equal(recent, sinks)])
    return slots, positions, valid


def write_rolling_rows(cache: Any, rows: Any, index: Any, sinks: int) -> Any:
    """``cache`` (batch, sinks + window, ...) with ``rows`` (batch, n, ...) of positions
    ``index ..`` written in their slots (`rolling_positions`): of the rows that share a
    slot, the latest. A gather and a select, like `write_rows` (exportable); ``n`` may
    exceed the window (a long prompt): only its last ``window`` rows stay.
    """
    window = cache.shape[1] - sinks
    length = ops.shape(rows)[1]
    index = ops.cast(index, "int32")
    last = index + length - 1
    slots = ops.arange(cache.shape[1], dtype="int32")
    # The latest position <= last in slot c's class (p = c mod window for c >= sinks).
    recent = last - ops.mod(last - slots, window)
    positions = ops.where(ops.less(slots, sinks), slots, recent)
    inside = ops.logical_and(ops.greater_equal(positions, index), ops.less_equal(positions, last))
    inside = ops.logical_and(
        inside, ops.logical_or(ops.less(slots, sinks), ops.greater_equal(positions, sinks))
    )
    spread = ops.take(rows, ops.clip(positions - index, 0, length - 1), axis=1)
    inside = ops.reshape(inside, (1, -1) + (1,) * (len(cache.shape) - 2))
    return ops.where(inside, ops.cast(spread, cache.dtype), cache)


def check_cache_index(caller: str, index: Any, cache_length: Any, rows: Any) -> None:
    """Refuses a ``cache_update_index`` known before running whose ``rows`` fall outside a
    cache of ``cache_length`` positions (either may be None, unknown: then nothing is said
    about that bound)."""
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        return
    if index < 0 or (
        isinstance(cache_length, int) and isinstance(rows, int) and index + rows > cache_length
    ):
        length = "?" if cache_length is None else cache_length
        raise ValueError(
            f"{caller}: `cache_update_index` must be in [0, cache length - rows] = [0, "
            f"{length} - {rows}] for the {rows} new row(s) to be written inside the cache of "
            f"{length} positions, got {int(index)}."
        )


# --------------------------------------------------------------------------- attention


def use_fused_attention(
    enabled: bool | str,
    dropout: float,
    training: Any,
    expressible: bool = True,
) -> bool:
    """Whether ``keras.ops.dot_product_attention`` computes this call.

    ``enabled="auto"`` is on where the backend's fused kernel was measured to
    pay (`backend.prefers_fused_attention`: PyTorch on CPU without gradients).
    Otherwise only when the
    layer's ``fused_attention`` is on, the computation is one it
    can express (``expressible``: no per-pair value term, no probabilities
    returned, equal query/key and value head sizes, which JAX's version needs)
    and attention dropout is inactive (``dropout == 0`` or ``training`` falsy;
    a symbolic ``training`` counts as possibly true): the fused kernels have none.
    """
    if enabled == "auto":
        enabled = backend.prefers_fused_attention()
    if not enabled or not expressible:
        return False
    if dropout == 0:
        return True
    return isinstance(training, bool | int | type(None)) and not training


def _fused(q: Any, k: Any, v: Any, bias: Any) -> Any:
    """`backend.fused_attention` with one additive float32 bias (or None).

    PyTorch's version refuses a bias and a mask together, so the mask is in
    the bias. Every backend casts the bias to the compute dtype of q, k, v; it
    is cast here (float16: first clipped at a finite fill, as -1e9 would
    overflow to -inf). ``q`` is already scaled.
    """
    dtype = keras.backend.result_type(q.dtype, k.dtype, v.dtype)
    if bias is not None:
        bias = cast_bias(bias, dtype)
    return backend.fused_attention(ops.cast(q, dtype), ops.cast(k, dtype), ops.cast(v, dtype), bias)


def attend(
    q: Any,
    k: Any,
    v: Any,
    *,
    mask: Any = None,
    bias: Any = None,
    dropout: Any = None,
    training: Any = None,
    fused: bool = False,
    return_scores: bool = False,
    value_term: Callable[[Any], Any] | None = None,
    bias_diagonals: Any = None,
    soft_cap: float | None = None,
    capped_bias: Any = None,
) -> tuple:
    """Scaled dot-product attention of (batch, length, heads, head_dim) tensors.

    Args:
        q: the queries, **already scaled** (by ``1 / sqrt(head_dim)``).
        k, v: the keys and values.
        mask: None or bool, broadcastable to (batch, q_len, k_len), True where a
            query may attend to a key.
        bias: None or a float32 additive bias broadcastable to (batch, heads,
            q_len, k_len) (relative logits, an attention bias).
        dropout: a ``keras.layers.Dropout`` on the probabilities, or None.
        training: passed to ``dropout``.
        fused: compute with ``keras.ops.dot_product_attention`` (the caller
            decides with `use_fused_attention`; then no scores, no value term).
        return_scores: also return the probabilities (float32, masked rows zero).
        value_term: a function of the (dropped-out) probabilities returning a
            term added to the output (the relative value term).
        bias_diagonals: None, or a float32 bias that depends on ``j - i`` only (a
            Toeplitz matrix per head), given as its ``(heads, q_len + k_len - 1)``
            diagonals (`relative_index.toeplitz`; static lengths). With ``fused``
            and no ``mask`` or ``bias``, where the backend prefers it
            (`backend.prefers_toeplitz_attention`) the fused kernel takes the
            diagonals (`backend.toeplitz_attention`: PyTorch on CPU reads them as
            a strided view, building nothing of size (heads, q_len, k_len));
            otherwise the bias is built and added to ``bias``.
        soft_cap: None, or Gemma 2's logit cap ``c``: the logits ``q k^T + capped_bias``
            become ``c * tanh(logits / c)`` before ``bias`` and the mask are added (not
            with ``fused``: ``keras.ops.dot_product_attention`` has no cap on every backend).
        capped_bias: None or a float32 bias added before the cap (relative logits); only
            with ``soft_cap``.

    Returns:
        ``(output, probabilities)``: output (batch, q_len, heads, value_dim),
        fully masked query rows zero; probabilities (batch, heads, q_len, k_len)
        or None unless ``return_scores``.

    Memory (S = one float32 (batch, heads, q_len, k_len) tensor): the mask is
    one additive bias of shape (batch or 1, 1, q_len, k_len), S / heads, rather
    than a select before and after the softmax on the full tensor; a fully
    masked row (a finite but meaningless softmax) is zeroed on the small output.
    The peak is the bias, the content logits and their sum (3 S).
    """
    if fused and soft_cap is not None:
        raise ValueError("attend: `soft_cap` needs fused=False (the fused kernels have no cap).")
    if not fused:  # the peak, estimated before anything of its size is allocated
        logits = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
        check_allocation("attention", "logits, bias and their sum", [logits] * 3)
    if bias_diagonals is not None:
        bias_diagonals = ops.convert_to_tensor(bias_diagonals, "float32")
        if (
            fused
            and mask is None
            and bias is None
            and backend.prefers_toeplitz_attention(q, k, v, bias_diagonals)
        ):
            return backend.toeplitz_attention(q, k, v, bias_diagonals), None
        query_length, key_length = q.shape[1], k.shape[1]
        toeplitz = relative_index.toeplitz(bias_diagonals, query_length, key_length)[None]
        bias = toeplitz if bias is None else bias + toeplitz
    row_valid = None
    if mask is not None:
        # Keys no query may see (padding) are zeroed: masked logits are added to,
        # not replaced, so a NaN key there would make every row NaN.
        key_valid = ops.any(mask, axis=-2)  # (batch or 1, k_len)
        k = zero_invalid(k, key_valid)
        v = zero_invalid(v, key_valid)
        fill = ops.where(mask, ops.zeros((), "float32"), ops.cast(MASK_FILL, "float32"))
        fill = ops.expand_dims(fill, 1)
        bias = fill if bias is None else bias + fill
        del fill
        row_valid = ops.any(mask, axis=-1)  # (batch or 1, q_len)
    if fused:
        output = _fused(q, k, v, bias)
        probabilities = None
    else:
        # PyTorch without gradients writes the logits and softmax into one scratch
        # buffer of the call (`backend.scratch`), the bias's own where it is one.
        if soft_cap is None:
            probabilities = backend.attention_probabilities(q, k, bias)
        else:
            probabilities = backend.attention_probabilities(q, k, bias, soft_cap, capped_bias)
        del bias, capped_bias
        dropped = probabilities if dropout is None else dropout(probabilities, training=training)
        if not return_scores:
            probabilities = None
        output = ops.einsum("bhqk,bkhd->bqhd", ops.cast(dropped, v.dtype), v)
        if value_term is not None:
            output = output + value_term(dropped)
        del dropped
    if row_valid is not None:
        # expand_dims, not [:, :, None, None]: LiteRT has no builtin for a slice adding axes.
        output = ops.where(ops.expand_dims(row_valid, (2, 3)), output, ops.zeros((), output.dtype))
        if probabilities is not None:
            probabilities = ops.where(ops.expand_dims(row_valid, (1, 3)), probabilities, 0.0)
    return output, probabilities


def scale_queries(q: Any, head_dim: int) -> Any:
    """``q / sqrt(head_dim)`` in q's dtype."""
    return q * ops.cast(1.0 / math.sqrt(head_dim), q.dtype)


class SeededDropout:
    """Dropout on the probabilities with a seed drawn before the call: what a block
    recomputed in the backward pass needs (`attend_in_blocks`).

    A Keras ``Dropout`` layer draws its seed from its generator when called, so calling it
    again in the recomputation would draw another mask (TensorFlow) or leak a traced seed out
    of the recomputed function (JAX). Here the seed is ``layer.seed_generator.next()`` drawn
    once outside, the one the layer would have drawn: the same mask as the layer's, in
    the layer's compute dtype, on the first call and on the recomputation.
    """

    def __init__(self, layer: keras.layers.Dropout, seed: Any) -> None:
        self.rate, self.dtype = layer.rate, layer.compute_dtype
        self.seed = DrawnSeeds(seed)

    def __call__(self, x: Any, training: Any = None) -> Any:
        if not training or not self.rate:
            return x
        return keras.random.dropout(ops.cast(x, self.dtype), self.rate, seed=self.seed)


# --------------------------------------------------------------------------- query blocking


def query_block(
    requested: int | None,
    num_heads: int,
    query_length: Any,
    key_length: Any,
    row_tensors: tuple = (),
) -> int | None:
    """How many queries to attend at a time, or None for all at once.

    Memory: the logits of one block, (batch, heads, block, k_len) in float32,
    and the few tensors of that size alive with them are freed before the next
    block, so the peak is a few block-sized tensors instead of about 3-4 S for
    the whole (batch, heads, q_len, k_len); what is kept per block is its
    output (and its scores when they are requested: those are S anyway).

    ``requested=None`` ("auto") blocks only when one example's score tensor,
    heads * q_len * k_len float32, exceeds `backend.query_block_bytes` (per
    backend, measured: 16 MiB on PyTorch, 32 MiB elsewhere;
    with 32 MiB and 8 heads: above q_len = k_len = 1024), with blocks of about
    that size (32 MiB, 8 heads: 512 queries at k_len = 2048, 256 at 4096; at
    least `MIN_AUTO_BLOCK` queries),
    split evenly so the last block is not a sliver. Blocking needs a static
    query length (a Python int; with "auto" a static key length too), and
    ``row_tensors`` (masks, biases) whose query axis is static: otherwise
    (e.g. ``keras.Input((None, dim))``) everything runs as one block.
    """
    if not isinstance(query_length, int):
        return None
    for tensor in row_tensors:
        if tensor is not None and len(tensor.shape) >= 2 and tensor.shape[-2] is None:
            return None
    block = requested
    if block is None:
        if not isinstance(key_length, int):
            return None
        row_bytes = 4 * num_heads * key_length  # one query's float32 logits
        block_bytes = backend.query_block_bytes()
        if row_bytes * query_length <= block_bytes:
            return None
        block = max(block_bytes // row_bytes, MIN_AUTO_BLOCK)
    if block >= query_length:
        return None
    blocks = -(-query_length // block)
    return -(-query_length // blocks)


def query_rows(tensor: Any, first: int, last: int) -> Any:
    """Rows ``first:last`` of a mask or bias broadcastable to (..., q_len, k_len).

    The query axis is the second to last; a tensor without one (rank < 2) or
    with a broadcast query axis (size 1) applies to every row unchanged.
    """
    if tensor is None or len(tensor.shape) < 2 or tensor.shape[-2] == 1:
        return tensor
    return tensor[..., first:last, :]


def attend_in_blocks(
    attend_rows: Callable[..., tuple],
    query_length: int,
    block: int,
    return_scores: bool,
    tensors: tuple = (),
    training: Any = None,
    draw_seed: Callable[[], Any] | None = None,
) -> tuple:
    """Runs ``attend_rows(first, last, *tensors)`` over blocks of queries and concatenates
    the results.

    Rows of queries are independent given the keys and values, so each block
    is the attention of its queries to every key (the caller shifts relative
    positions and causal masks by ``first``); only the small outputs are kept.

    Training (``training`` not falsy, no scores returned), each block's backward pass
    recomputes the block (`backend.recompute_block`: Keras' remat) from ``tensors``, every
    tensor its gradients flow to (queries, keys, values, an attention bias; None allowed),
    so a training step keeps the blocks' inputs and outputs instead of every block's
    probabilities: its peak is that of one block, as the forward pass's is. ``draw_seed``:
    None, or (dropout active) a function drawing one block's dropout seed, passed to
    ``attend_rows`` after ``tensors`` where the block is recomputed (see `SeededDropout`).
    """
    outputs, scores = [], []
    recompute = bool(tensors) and not return_scores
    for first in range(0, query_length, block):
        last = min(first + block, query_length)
        if recompute:

            def rows(*given: Any, first: int = first, last: int = last) -> Any:
                return attend_rows(first, last, *given)[0]

            # The block's dropout seed, drawn here (as its dropout layer would), so that
            # the recomputation draws the same mask (`backend.replays_random_draws`).
            seed = (draw_seed(),) if draw_seed is not None else ()
            output = backend.recompute_block(rows, tensors + seed, training)
            probabilities = None
        else:
            output, probabilities = attend_rows(first, last, *tensors)
        outputs.append(output)
        scores.append(probabilities)
        del output, probabilities
    output = ops.concatenate(outputs, axis=1)
    del outputs
    probabilities = ops.concatenate(scores, axis=2) if return_scores else None
    return output, probabilities
