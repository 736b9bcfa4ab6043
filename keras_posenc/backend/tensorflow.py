"""TensorFlow's overrides of the reference kernels (`keras_posenc.backend.common`).

Each says where it was measured; the numbers are in docs/benchmark-notes.md and the list of
kept overrides in docs/development.md ("Backend kernels").
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from keras_posenc.backend import algorithms, common
from keras_posenc.backend._registry import REFERENCE, Registrar

_HERE = Registrar("tensorflow")
override, device_query = _HERE.override, _HERE.device_query


@device_query
def device_kind() -> str:
    """A logical GPU (or TPU) exists: TensorFlow places operations there by default."""
    if tf.config.list_logical_devices("TPU"):
        return "tpu"
    return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"


override(
    common.toeplitz,
    measured="8 heads, L = 512 / 1024 / 2048, eager, 2 CPU cores: 0.80x / 0.56x / 0.48x the "
    "time of gathering rows of heads and transposing them (benchmarks/relative_logits.py)",
)(algorithms.toeplitz_by_windows)

# Eager TensorFlow: a block of attention with at least this many float32 logits per
# example runs as one XLA program (`compiled_block`).
COMPILED_BLOCK_MIN_LOGITS = 2**20

_COMPILED_BLOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@override(
    common.compiled_block,
    measured="8 heads, 2 CPU cores, relative='keys' at L = 2048: an eager layer call took "
    "0.6x its op-by-op time; compiling a block shape costs 0.4-0.9 s, so only blocks of "
    "at least 2**20 logits per example (benchmarks/relative_attention.py)",
)
def compiled_block(method: Callable[..., Any], logits: Any, training: Any, dropout: float) -> Any:
    """``method`` compiled by XLA, for eager calls of large blocks without active dropout.

    Eager TensorFlow runs an attention block op by op, each operation writing a
    (heads, q_len, k_len) tensor; XLA fuses them into the products and the softmax.
    Inside ``tf.function``, ``predict`` or an export the graph is TensorFlow's own,
    unchanged. One ``tf.function(jit_compile=True)`` per owner and method, kept while
    the owner lives (a weak reference); callers pass length-dependent offsets as
    tensors, so the equal blocks of one call share one program. Gradients flow
    through it (XLA compiles the backward pass too).
    """
    if not isinstance(logits, int) or logits < COMPILED_BLOCK_MIN_LOGITS:
        return REFERENCE
    if dropout and not (isinstance(training, bool | int | type(None)) and not training):
        return REFERENCE  # its random draws stay Keras'
    if not tf.executing_eagerly():
        return REFERENCE
    owner, name = method.__self__, method.__func__.__name__
    methods = _COMPILED_BLOCKS.setdefault(owner, {})
    compiled = methods.get(name)
    if compiled is None:
        # The compiled function is kept by the owner's entry and must not keep it alive.
        reference = weakref.ref(owner)

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(reference(), name)(*args, **kwargs)

        compiled = methods[name] = tf.function(call, jit_compile=True)
    return compiled


@override(
    common.compile_function,
    devices=None,
    measured="TensorFlow's own compiler: tf.function captures variables by reference, so "
    "later weight updates are seen",
)
def compile_function(
    function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
) -> Callable[..., Any]:
    # No AutoGraph, as Keras' own compiled steps (keras/src/backend/tensorflow/trainer.py,
    # `do_not_convert`): the functions compiled here run under jax.jit as well, so they
    # have no Python control flow on tensors to convert, and converting a zoo model's
    # full call (the length evaluation's scoring) warned that it "could not transform"
    # the token-id check's `concrete_values`.
    return tf.function(function, reduce_retracing=True, autograph=False)


@override(common.concrete_values, devices=None, measured="a tf.function's tensors have no values")
def concrete_values(x: Any) -> Any:
    if not isinstance(x, np.ndarray) and not tf.executing_eagerly():
        return None
    return REFERENCE


@override(
    common.check_synchronized_batch_norm,
    devices=None,
    measured="Keras' BatchNormalization(synchronized=True) synchronises replicas here",
)
def check_synchronized_batch_norm(who: str, synchronized: bool) -> None:
    return None
