"""Backend kernels: what the layers ask of TensorFlow, JAX and PyTorch, by name.

Laid out like Keras' own backends: ``common.py`` defines each kernel with ``keras.ops``
only (the reference, which runs everywhere), and ``tensorflow.py``, ``jax.py`` and
``torch.py`` override a kernel only where it was measured to pay, each override saying
on which device and at which sizes (``algorithms.py`` holds the portable variants they
choose). Layers call the functions below; they never name a backend, a method or a
buffer. The rules (docs/development.md, "Backend kernels"):

- an override applies on the devices it was measured on (`device`): a choice measured
  on CPU applies on CPU, and on a GPU or TPU the reference runs;
- every override is tested equal to its reference, values and gradients
  (tests/backend/test_kernels.py);
- an override that uses a private or version-specific API (``keras.src``,
  ``jax.extend``, ``torch._ops``, private ``Variable`` methods) is *guarded*: if that
  API fails, the reference runs from then on, after one warning;
- `references_only` runs every reference (tests, ``benchmarks/ --kernels reference``).

Examples:

    >>> import keras
    >>> from keras_posenc import backend
    >>> backend.device() in ("cpu", "gpu", "tpu")
    True
    >>> diagonals = keras.ops.convert_to_tensor([[1.0, 2.0, 3.0, 4.0]])  # one head
    >>> print(keras.ops.convert_to_numpy(backend.toeplitz(diagonals, 2, 3)))
    [[[2. 3. 4.]
      [1. 2. 3.]]]
"""

from __future__ import annotations

from keras_posenc.backend import common
from keras_posenc.backend._registry import (
    REFERENCE,
    chosen,
    device,
    kernel,
    overrides,
    references_only,
)

__all__ = [
    "REFERENCE",
    "attention_probabilities",
    "check_synchronized_batch_norm",
    "chosen",
    "compile_function",
    "compiled_block",
    "compiled_while_loop",
    "concrete_values",
    "cumulative_sum",
    "depthwise_conv2d",
    "device",
    "fused_attention",
    "gather_heads_first",
    "overrides",
    "prefers_fused_attention",
    "prefers_toeplitz_attention",
    "query_block_bytes",
    "recompute_block",
    "references_only",
    "relative_key_logits",
    "replays_random_draws",
    "scratch",
    "take_columns",
    "toeplitz",
    "toeplitz_attention",
]

# Relative logits.
toeplitz = kernel(common.toeplitz)
gather_heads_first = kernel(common.gather_heads_first)
take_columns = kernel(common.take_columns)
relative_key_logits = kernel(common.relative_key_logits)
cumulative_sum = kernel(common.cumulative_sum)

# Attention.
attention_probabilities = kernel(common.attention_probabilities)
fused_attention = kernel(common.fused_attention)
toeplitz_attention = kernel(common.toeplitz_attention)
prefers_fused_attention = kernel(common.prefers_fused_attention)
prefers_toeplitz_attention = kernel(common.prefers_toeplitz_attention)
query_block_bytes = kernel(common.query_block_bytes)
compiled_block = kernel(common.compiled_block)
scratch = kernel(common.scratch)
recompute_block = kernel(common.recompute_block)
replays_random_draws = kernel(common.replays_random_draws)

# Convolutions.
depthwise_conv2d = kernel(common.depthwise_conv2d)

# The framework: compiling, reading values, its limits.
compile_function = kernel(common.compile_function)
compiled_while_loop = kernel(common.compiled_while_loop)
concrete_values = kernel(common.concrete_values)
check_synchronized_batch_norm = kernel(common.check_synchronized_batch_norm)
