"""Multiply-accumulates of a model's forward pass, counted from its traced program.

:func:`count_macs` traces one call of a built model for one input with JAX
(``jax.make_jaxpr``: shapes only, nothing runs and no weight needs a value) and sums the
multiply-accumulates of every matrix product and convolution in the program:

- a ``dot_general`` (``Dense``, ``EinsumDense``, the attention's ``QK^T`` and ``AV``, the
  relative-position MLPs) counts the size of its output times the size of its contracted
  axes;
- a ``conv_general_dilated`` (``Conv2D``, ``DepthwiseConv2D``) counts the size of its output
  times the kernel's spatial size times the input channels of one group.

Elementwise work (norms, activations, softmax, pools, additions) is not counted, as
fvcore's and timm's "MACs" / "GMACs" leave it out. The portable kernels are traced
(``backend.references_only``), so that a backend's own algorithm (JAX's depthwise
convolution by shifts) counts as the convolution it computes.

Run as a script, it counts every CoAtNet, MaxViT and MaxxViT of the zoo for one 224 x 224
image (each built without weights: ``keras.StatelessScope(initialize_variables=False)``),
writes ``tests/fixtures/timm_maxxvit/macs.json`` and prints each family card's table
(``tests/zoo/test_macs.py`` checks the counter against counts by hand and the cards against
the file)::

    KERAS_BACKEND=jax python benchmarks/macs.py
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_posenc import backend, zoo

HERE = pathlib.Path(__file__).resolve().parent
FAMILIES = ("coatnet", "maxvit", "maxxvit")
SIZE = (224, 224, 3)


def _jaxpr_macs(jaxpr: Any) -> int:
    """The multiply-accumulates of a jaxpr's products and convolutions, sub-programs
    (``pjit``, ``custom_jvp_call``, ``remat``, ``scan`` times its length) included."""
    total = 0
    for equation in jaxpr.eqns:
        name = equation.primitive.name
        if name == "dot_general":
            (contracting, _), _ = equation.params["dimension_numbers"]
            left = equation.invars[0].aval.shape
            size = int(np.prod(equation.outvars[0].aval.shape))
            total += size * int(np.prod([left[axis] for axis in contracting]))
        elif name == "conv_general_dilated":
            numbers = equation.params["dimension_numbers"]
            kernel = equation.invars[1].aval.shape
            spatial = [kernel[axis] for axis in numbers.rhs_spec[2:]]
            in_per_group = kernel[numbers.rhs_spec[1]]
            size = int(np.prod(equation.outvars[0].aval.shape))
            total += size * int(np.prod(spatial)) * int(in_per_group)
        elif name in ("while", "cond"):
            raise ValueError(
                f"count_macs: the traced program has a {name!r} loop or branch, whose "
                "trip count or path the trace does not know."
            )
        repeat = int(equation.params.get("length", 1)) if name == "scan" else 1
        for value in equation.params.values():
            for sub in value if isinstance(value, list | tuple) else (value,):
                inner = getattr(sub, "jaxpr", None)  # a ClosedJaxpr's program
                if inner is not None and hasattr(inner, "eqns"):
                    total += repeat * _jaxpr_macs(inner)
                elif hasattr(sub, "eqns"):
                    total += repeat * _jaxpr_macs(sub)
    return total


def count_macs(model: keras.Model, input_shape: Sequence[int] | None = None) -> int:
    """The multiply-accumulates of one forward pass of ``model`` for one input.

    Needs the JAX backend (``KERAS_BACKEND=jax``): the count comes from JAX's trace of
    the model (see the module's docstring for what it counts). The model's weights
    need no values: a model built under ``keras.StatelessScope(initialize_variables=
    False)`` counts as well, without the memory of its weights.

    Args:
        model: a built Keras model with one image (or tensor) input.
        input_shape: the input's shape without the batch axis; default the model's.

    Returns:
        The count, an int.

    Raises:
        ValueError: another backend than JAX, an input shape with unknown sizes, or a
            program with loops whose trip count the trace does not know.

    Examples:

        >>> import keras
        >>> from benchmarks.macs import count_macs
        >>> model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
        ...                           keras.layers.Flatten(), keras.layers.Dense(10)])
        >>> count_macs(model) == 6 * 6 * 4 * (3 * 3 * 3) + 144 * 10  # doctest: +SKIP
        True
    """
    if keras.backend.backend() != "jax":
        raise ValueError(
            "count_macs: needs the JAX backend (KERAS_BACKEND=jax), which traces the "
            f"model without running it; the backend is {keras.backend.backend()!r}."
        )
    import jax

    shape = tuple(input_shape) if input_shape is not None else tuple(model.input_shape[1:])
    if any(side is None for side in shape):
        raise ValueError(
            f"count_macs: the input shape must be known; got {shape} (pass input_shape)."
        )
    trainable = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in model.trainable_variables]
    fixed = [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in model.non_trainable_variables]

    def forward(trainable_values: list, fixed_values: list, inputs: Any) -> Any:
        outputs, _ = model.stateless_call(trainable_values, fixed_values, inputs, training=False)
        return outputs

    with backend.references_only():
        program = jax.make_jaxpr(forward)(
            trainable, fixed, jax.ShapeDtypeStruct((1, *shape), "float32")
        )
    return _jaxpr_macs(program.jaxpr)


def macs_of(name: str) -> tuple[int, int]:
    """The zoo model ``name``'s trainable parameters (at its own size) and MACs for one
    224 x 224 image, built without weights."""
    from keras.src.backend.common import global_state

    with keras.StatelessScope(initialize_variables=False):
        model = zoo.create(name)
        parameters = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        at_224 = zoo.create(name, input_shape=SIZE)
    global_state.set_global_attribute("uninitialized_variables", [])
    return parameters, count_macs(at_224)


def main() -> None:
    counts = {}
    for family in FAMILIES:
        print(f"\n{family}:\n\n| model | parameters | GMACs at 224 x 224 |\n|---|---|---|")
        for name in zoo.list_models():
            if zoo.get_spec(name).family != family:
                continue
            parameters, counts[name] = macs_of(name)
            print(f"| `{name}` | {parameters:,} | {counts[name] / 1e9:.2f} |", flush=True)
    document = {"input_shape": list(SIZE), "method": "benchmarks/macs.py count_macs",
                "macs": counts}  # fmt: skip
    target = HERE.parent / "tests" / "fixtures" / "timm_maxxvit" / "macs.json"
    target.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
