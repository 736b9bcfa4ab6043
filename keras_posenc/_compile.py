"""The one place with backend-specific code (besides ``export.py``): compiling an
inference function, and the few rules that depend on the backend.

Layers and zoo never compare ``keras.backend.backend()`` themselves
(``tests/test_package.py`` checks it; "Architecture" in docs/development.md):
a rule that depends on the backend is a function here, with a comment saying why.

Compiling an inference function:

Keras compiles ``fit``/``predict`` itself, but a decoding step is a plain
function of model layers, called once per generated token, so it needs its own
compilation (without it each step retraces or runs op by op):

- TensorFlow: ``tf.function``; variables are captured by reference, so later
  weight updates are seen.
- JAX: ``jax.jit`` of a stateless version: the variables' current values are
  passed in as arguments on every call (through ``keras.StatelessScope``), so
  the compiled function never bakes in stale weights.
- PyTorch: no compilation (``torch.compile`` takes minutes on CPU and
  recompiles for every cache shape); the function runs eagerly under
  ``torch.no_grad`` so no autograd graph is kept between steps.

Only ``keras_posenc.generation`` and the benchmarks use it; tests run it on all
three backends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras


def compile_inference(function: Callable[..., Any], variables: Sequence[Any]) -> Callable:
    """Compiles ``function(*tensors)`` that reads ``variables`` (a model's weights).

    Args:
        function: a function of tensors (nested tuples allowed) returning
            tensors; it must not assign variables.
        variables: every variable the function reads (``model.variables``).

    Returns:
        A callable with the same signature; arguments must be tensors (Python
        ints would be constants in the compiled graph).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, reduce_retracing=True)
    if backend == "jax":
        import jax

        variables = list(variables)

        def stateless(values: list, *args: Any) -> Any:
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return function(*args)

        jitted = jax.jit(stateless)

        def call(*args: Any) -> Any:
            return jitted([v.value for v in variables], *args)

        return call
    if backend == "torch":
        import torch

        def eager(*args: Any) -> Any:
            with torch.no_grad():
                return function(*args)

        return eager
    return function


def check_synchronized_batch_norm(who: str, synchronized: bool) -> None:
    """Raises unless ``synchronized=False`` or the backend is TensorFlow.

    Keras' ``BatchNormalization(synchronized=True)`` synchronises replicas only
    on TensorFlow; elsewhere it would silently normalise per replica.
    """
    backend = keras.backend.backend()
    if synchronized and backend != "tensorflow":
        raise ValueError(
            f"{who}: `synchronized=True` needs the TensorFlow backend (Keras' "
            "BatchNormalization synchronises replicas only there); received "
            f"synchronized=True on the {backend} backend"
        )


def training_jit_compile() -> bool | str:
    """``Model.compile``'s ``jit_compile`` for training small models on CPU.

    TensorFlow: False (tracing the step as a ``tf.function`` compiled in less than
    half the time of XLA for CoAtNet-sized models and trained no slower on CPU,
    measured on 2 cores); the other backends keep Keras' default, ``"auto"``.
    """
    return False if keras.backend.backend() == "tensorflow" else "auto"
