"""The model's inputs as specs, and the inputs an export samples from them (to call a model
that was never called, to trace, to verify)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

# Sizes given to axes that are None in the model's inputs when verifying: batch,
# then two different sequence lengths so a graph fixed to one length is caught.
_VERIFY_BATCH = 2
_VERIFY_LENGTHS = (7, 11)


def _input_specs(model: keras.Model, input_signature: Any) -> list[dict]:
    """Each model input as {"shape": [...], "dtype": str, "name": str | None}, batch axis
    first; the name is the signature spec's, else the ``keras.Input``'s."""
    try:
        inputs = keras.tree.flatten(model.inputs)
    except (AttributeError, ValueError):
        inputs = None
    if input_signature is not None:
        specs = list(input_signature)
        known = [x.name for x in inputs] if inputs and len(inputs) == len(specs) else None
        return [
            {
                "shape": list(s.shape),
                "dtype": str(s.dtype or "float32"),
                "name": getattr(s, "name", None) or (known[i] if known else None),
            }
            for i, s in enumerate(specs)
        ]
    if not inputs:
        raise ValueError(
            "export_model: the model has no symbolic inputs (a subclassed model?); "
            "pass `input_signature=[keras.InputSpec(shape=..., dtype=...)]`."
        )
    return [{"shape": list(x.shape), "dtype": str(x.dtype), "name": x.name} for x in inputs]


def _sample_inputs(
    specs: list[dict], length: int, rng: np.random.Generator, zeros: bool = False
) -> Any:
    arrays = []
    for spec in specs:
        shape = [
            _VERIFY_BATCH if i == 0 and d is None else (length if d is None else d)
            for i, d in enumerate(spec["shape"])
        ]
        dtype = np.dtype(spec["dtype"]) if spec["dtype"] != "bfloat16" else np.float32
        if zeros:
            arrays.append(np.zeros(shape, dtype))
        elif np.issubdtype(dtype, np.integer):
            # Ids 0 and 1 exist in any vocabulary (and 0 may be padding): safe for embeddings.
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        elif dtype == np.bool_:
            arrays.append(np.ones(shape, dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    return arrays[0] if len(arrays) == 1 else arrays
