"""Checks every keras-posenc layer goes through, written once for all families.

Each check takes a layer (built or not), the inputs to call it with and the
keyword arguments of the call, runs the property it is named after and raises
``AssertionError`` with a message naming the layer and what went wrong.
``tests/test_layer_checks.py`` shows that each check fails on a layer broken
in the way it guards against, so none can pass vacuously.

Inputs are numpy arrays (or ints and other JSON-able values, passed through
``call_kwargs``). Positional ``inputs`` may be one array or a list of arrays;
they are given to the layer as positional arguments.
"""

from __future__ import annotations

import inspect
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

ATOL = 1e-5


# --------------------------------------------------------------------------- helpers


def as_list(inputs: Any) -> list:
    if isinstance(inputs, list | tuple):
        return list(inputs)
    return [inputs]


def call_layer(layer: keras.layers.Layer, inputs: Any, call_kwargs: dict | None = None) -> Any:
    return layer(*as_list(inputs), **(call_kwargs or {}))


def floating_outputs(outputs: Any) -> list[np.ndarray]:
    """Every floating-point tensor in a (nested) layer output, as numpy float32."""
    arrays = []
    for tensor in keras.tree.flatten(outputs):
        array = ops.convert_to_numpy(tensor)
        if np.issubdtype(array.dtype, np.floating) or array.dtype.name == "bfloat16":
            arrays.append(array.astype(np.float32))
    return arrays


def assert_outputs_close(expected: Any, actual: Any, what: str, atol: float = ATOL) -> None:
    expected_list, actual_list = floating_outputs(expected), floating_outputs(actual)
    assert len(expected_list) == len(actual_list), (
        f"{what}: {len(expected_list)} floating outputs before, {len(actual_list)} after"
    )
    for index, (a, b) in enumerate(zip(expected_list, actual_list)):
        assert a.shape == b.shape, f"{what}: output {index} shape {a.shape} != {b.shape}"
        difference = float(np.max(np.abs(a - b))) if a.size else 0.0
        assert difference <= atol, f"{what}: output {index} differs by {difference:.3g} > {atol}"


def _layer_name(layer: keras.layers.Layer) -> str:
    return f"{type(layer).__name__}({layer.name!r})"


@keras.saving.register_keras_serializable(package="keras_posenc_tests")
class CallWrapper(keras.Model):
    """A model whose only job is to call one layer, so any layer can be saved as .keras.

    The positional inputs are the model's inputs; ``call_kwargs`` (JSON-able
    values such as sequence lengths or flags) are stored in the config.
    """

    def __init__(
        self,
        inner: keras.layers.Layer,
        call_kwargs: dict | None = None,
        input_dtypes: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.inner = inner
        self.call_kwargs = dict(call_kwargs or {})
        self.input_dtypes = list(input_dtypes)

    def call(self, inputs: Any) -> Any:
        return self.inner(*as_list(inputs), **self.call_kwargs)

    def build(self, input_shape: Any) -> None:
        # Loading a .keras file rebuilds the model before its weights are read;
        # calling the inner layer on zeros of the recorded shapes creates its variables.
        shapes = input_shape if len(self.input_dtypes) > 1 else [input_shape]
        self.input_shapes = [[None if d is None else int(d) for d in s] for s in shapes]
        zeros = [
            np.zeros([1 if d is None else d for d in shape], dtype=dtype)
            for shape, dtype in zip(self.input_shapes, self.input_dtypes)
        ]
        self.inner(*zeros, **self.call_kwargs)
        self.built = True

    def get_build_config(self) -> dict:
        return {"input_shapes": self.input_shapes}

    def build_from_config(self, config: dict) -> None:
        shapes = config["input_shapes"]
        self.build(shapes if len(shapes) > 1 else shapes[0])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            inner=keras.saving.serialize_keras_object(self.inner),
            call_kwargs={
                key: keras.saving.serialize_keras_object(value)
                for key, value in self.call_kwargs.items()
            },
            input_dtypes=self.input_dtypes,
        )
        return config

    @classmethod
    def from_config(cls, config: dict) -> CallWrapper:
        config = dict(config)
        config["inner"] = keras.saving.deserialize_keras_object(config["inner"])
        config["call_kwargs"] = {
            key: keras.saving.deserialize_keras_object(value)
            for key, value in config["call_kwargs"].items()
        }
        return cls(**config)


def _wrap(layer: keras.layers.Layer, inputs: Any, call_kwargs: dict | None) -> CallWrapper:
    arrays = as_list(inputs)
    model = CallWrapper(layer, call_kwargs, [str(np.asarray(a).dtype) for a in arrays])
    model_inputs = arrays if len(arrays) > 1 else arrays[0]
    model(model_inputs)
    return model


# --------------------------------------------------------------------------- checks


def check_config_roundtrip(
    layer: keras.layers.Layer, inputs: Any = None, call_kwargs: dict | None = None
) -> keras.layers.Layer:
    """``from_config(get_config())`` rebuilds an equal layer, and it serialises by name.

    Every constructor argument must appear in the config. With ``inputs``, the
    rebuilt layer, given the original's weights, must produce the same outputs
    (so a config that silently drops a setting is caught).
    """
    name = _layer_name(layer)
    config = layer.get_config()
    signature = inspect.signature(type(layer).__init__)
    missing = [
        p.name
        for p in list(signature.parameters.values())[1:]
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in config
    ]
    assert not missing, f"{name}: get_config() lacks constructor arguments {missing}"

    serialized = keras.saving.serialize_keras_object(layer)
    try:
        restored = keras.saving.deserialize_keras_object(serialized)
    except Exception as error:  # an unregistered class fails here
        raise AssertionError(f"{name}: deserialisation failed: {error}") from error
    assert type(restored) is type(layer), (
        f"{name}: deserialised as {type(restored).__name__}; is the class registered?"
    )
    assert restored.get_config() == config, (
        f"{name}: config changed in the round trip:\n{config}\n!=\n{restored.get_config()}"
    )
    if inputs is not None:
        expected = call_layer(layer, inputs, call_kwargs)
        call_layer(restored, inputs, call_kwargs)
        restored.set_weights(layer.get_weights())
        actual = call_layer(restored, inputs, call_kwargs)
        assert_outputs_close(expected, actual, f"{name}: outputs after from_config")
    return restored


def check_save_load(
    layer: keras.layers.Layer,
    inputs: Any,
    call_kwargs: dict | None = None,
    directory: str | os.PathLike | None = None,
) -> None:
    """Saving a model that holds the layer to ``.keras`` and loading it reproduces outputs."""
    name = _layer_name(layer)
    model = _wrap(layer, inputs, call_kwargs)
    model_inputs = as_list(inputs) if len(as_list(inputs)) > 1 else as_list(inputs)[0]
    expected = model(model_inputs)
    with tempfile.TemporaryDirectory(dir=directory) as folder:
        path = os.path.join(folder, "layer.keras")
        model.save(path)
        try:
            loaded = keras.saving.load_model(path)
        except Exception as error:
            raise AssertionError(f"{name}: loading the .keras file failed: {error}") from error
    actual = loaded(model_inputs)
    assert_outputs_close(expected, actual, f"{name}: outputs after .keras save/load")


class LinearLoss(keras.Model):
    """Turns a wrapped layer's outputs into a fixed random linear loss, one value per sample."""

    def __init__(self, wrapper: CallWrapper, coefficients: list[np.ndarray]) -> None:
        super().__init__()
        self.wrapper = wrapper
        self.coefficients = coefficients

    def call(self, inputs: Any) -> Any:
        total = 0.0
        outputs = [o for o in keras.tree.flatten(self.wrapper(inputs)) if _is_floating(o)]
        for tensor, weight in zip(outputs, self.coefficients):
            total = total + ops.sum(ops.cast(tensor, "float32") * ops.convert_to_tensor(weight))
        first = as_list(inputs)[0]
        per_sample = ops.cast(ops.reshape(first, (ops.shape(first)[0], -1))[:, 0], "float32")
        return ops.zeros_like(per_sample) + total


def _is_floating(tensor: Any) -> bool:
    return "float" in str(keras.backend.standardize_dtype(tensor.dtype))


def check_training_step(
    layer: keras.layers.Layer,
    inputs: Any,
    call_kwargs: dict | None = None,
    learning_rate: float = 0.1,
) -> None:
    """One optimizer step of ``fit`` changes every trainable weight of the layer.

    The loss is a fixed random linear function of every floating output, so no
    weight that influences the output gets a zero gradient by accident.
    """
    name = _layer_name(layer)
    wrapper = _wrap(layer, inputs, call_kwargs)
    model_inputs = as_list(inputs) if len(as_list(inputs)) > 1 else as_list(inputs)[0]
    outputs = floating_outputs(wrapper(model_inputs))
    rng = np.random.default_rng(0)
    coefficients = [rng.standard_normal(o.shape).astype("float32") for o in outputs]
    model = LinearLoss(wrapper, coefficients)

    trainable = layer.trainable_weights
    assert trainable, f"{name}: has no trainable weights to train"
    before = [ops.convert_to_numpy(w).copy() for w in trainable]
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate), loss=lambda _, loss: ops.mean(loss)
    )
    batch = np.shape(as_list(inputs)[0])[0]
    model.train_on_batch(model_inputs, np.zeros((batch,), "float32"))
    unchanged = [
        w.path for w, old in zip(trainable, before) if np.array_equal(ops.convert_to_numpy(w), old)
    ]
    assert not unchanged, f"{name}: one training step left these weights unchanged: {unchanged}"


def assert_distinct_initial_weights(layer: keras.layers.Layer | keras.Model) -> None:
    """No two trainable weights of the same shape start element-for-element equal.

    Constant-initialised weights (every element the same value: zero biases, unit
    norm scales, layer scales) are exempt, since they are meant to start alike. A
    layer that hands one unseeded Keras initializer instance to two sublayers fails
    this: the instance fixes its seed once and draws the same values twice. The layer
    (or model) must be built.
    """
    name = _layer_name(layer)
    assert layer.built, f"{name}: build the layer before checking its initial weights"
    by_shape: dict[tuple, list] = {}
    for weight in layer.trainable_weights:
        value = ops.convert_to_numpy(ops.cast(weight, "float32"))
        if value.size < 2 or np.all(value == value.flat[0]):
            continue
        by_shape.setdefault(tuple(value.shape), []).append((weight.path, value))
    equal = [
        (first, second)
        for group in by_shape.values()
        for index, (first, a) in enumerate(group)
        for second, b in group[index + 1 :]
        if np.array_equal(a, b)
    ]
    assert not equal, f"{name}: these trainable weights start identical: {equal}"


def check_mixed_precision(
    layer: keras.layers.Layer,
    inputs: Any,
    call_kwargs: dict | None = None,
    policy: str = "mixed_bfloat16",
    dtypes: str | Sequence[str] | None = None,
    tolerance: float | None = None,
) -> Any:
    """The layer rebuilt under ``policy`` runs and gives only finite outputs.

    The low-precision layer gets the original layer's weights, and the outputs are
    returned, so a test can compare them with float32 at its own tolerance.

    ``dtypes`` (None: not checked) is the dtype of every floating output, or a
    sequence with one entry per floating output (flattened, in order); the entry
    ``"compute"`` stands for the policy's compute dtype (``"bfloat16"`` under
    ``mixed_bfloat16``). With ``tolerance``, each output must differ from the float32
    layer's by at most ``tolerance`` times that output's largest magnitude (at least 1).
    """
    name = _layer_name(layer)
    config = {**layer.get_config(), "dtype": policy}
    low_precision = type(layer).from_config(config)
    outputs = call_layer(low_precision, inputs, call_kwargs)
    # The same weights as the float32 layer, so a test can compare the two outputs.
    expected = call_layer(layer, inputs, call_kwargs)
    if layer.weights:
        low_precision.set_weights(layer.get_weights())
        outputs = call_layer(low_precision, inputs, call_kwargs)
    arrays = floating_outputs(outputs)
    for index, array in enumerate(arrays):
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        assert bad == 0, f"{name}: under {policy}, output {index} has {bad} NaN/Inf values"
    if dtypes is not None:
        compute = keras.dtype_policies.get(policy).compute_dtype
        wanted = [dtypes] * len(arrays) if isinstance(dtypes, str) else list(dtypes)
        given = [
            keras.backend.standardize_dtype(tensor.dtype)
            for tensor in keras.tree.flatten(outputs)
            if _is_floating(tensor)
        ]
        wanted = [compute if dtype == "compute" else dtype for dtype in wanted]
        assert given == wanted, f"{name}: under {policy}, output dtypes {given} != {wanted}"
    if tolerance is not None:
        for index, (low, high) in enumerate(zip(arrays, floating_outputs(expected))):
            scale = max(float(np.max(np.abs(high))) if high.size else 0.0, 1.0)
            difference = float(np.max(np.abs(low - high))) if high.size else 0.0
            assert difference <= tolerance * scale, (
                f"{name}: under {policy}, output {index} differs from float32 by "
                f"{difference:.3g} > {tolerance} x {scale:.3g}"
            )
    return outputs


def _position_perturbed(
    inputs: list, where: np.ndarray, seed: int, sequence_inputs: Sequence[int] | None
) -> list:
    """Copies of ``inputs`` whose positions with ``where[b, t]`` True hold new random content."""
    rng = np.random.default_rng(seed)
    perturbed = []
    for index, array in enumerate(inputs):
        array = np.array(array, copy=True)
        selected = sequence_inputs is None or index in sequence_inputs
        if selected and array.dtype != bool and array.ndim >= 2 and array.shape[:2] == where.shape:
            if np.issubdtype(array.dtype, np.integer):
                noise = rng.integers(array.min(), array.max() + 1, size=array.shape)
            else:
                noise = rng.standard_normal(array.shape) * 3.0
            array[where] = noise.astype(array.dtype)[where]
        perturbed.append(array)
    return perturbed


def _compare_positions(
    expected: Any, actual: Any, keep: np.ndarray, what: str, atol: float
) -> None:
    compared = 0
    for index, (a, b) in enumerate(zip(floating_outputs(expected), floating_outputs(actual))):
        if a.ndim < 2 or a.shape[:2] != keep.shape:
            continue
        difference = float(np.max(np.abs(a[keep] - b[keep]))) if keep.any() else 0.0
        assert difference <= atol, f"{what}: output {index} changed by {difference:.3g}"
        compared += 1
    assert compared, f"{what}: no output has the (batch, sequence) shape {keep.shape} to compare"


def check_padding_invariance(
    layer: keras.layers.Layer,
    inputs: Any,
    mask: np.ndarray,
    call_kwargs: dict | None = None,
    mask_argument: str | None = "mask",
    output_mask: np.ndarray | None = None,
    sequence_inputs: Sequence[int] | None = None,
    atol: float = ATOL,
) -> None:
    """Outputs at real positions do not depend on what the padded positions hold.

    ``mask`` is (batch, length) with True for real tokens (the Keras convention).
    It is passed as ``call_kwargs[mask_argument]`` (None: the caller passes it
    itself). Positional inputs whose first two axes match ``mask`` (or those in
    ``sequence_inputs``) get new random content at padded positions; outputs are
    compared where ``output_mask`` (default ``mask``) is True.
    """
    mask = np.asarray(mask, dtype=bool)
    assert (~mask).any(), "check_padding_invariance needs at least one padded position"
    name = _layer_name(layer)
    kwargs = dict(call_kwargs or {})
    if mask_argument is not None:
        kwargs[mask_argument] = mask
    original = as_list(inputs)
    expected = call_layer(layer, original, kwargs)
    for seed in (1, 2):
        changed = _position_perturbed(original, ~mask, seed, sequence_inputs)
        actual = call_layer(layer, changed, kwargs)
        keep = mask if output_mask is None else np.asarray(output_mask, dtype=bool)
        _compare_positions(
            expected, actual, keep, f"{name}: real positions depend on padding", atol
        )


def check_causal(
    layer: keras.layers.Layer,
    inputs: Any,
    call_kwargs: dict | None = None,
    sequence_inputs: Sequence[int] | None = None,
    atol: float = ATOL,
) -> None:
    """No output at position t depends on an input at a later position.

    For several t, inputs after t get new random content; outputs up to t must
    not change.
    """
    name = _layer_name(layer)
    original = as_list(inputs)
    batch, length = np.shape(original[0])[:2]
    expected = call_layer(layer, original, call_kwargs)
    for t in sorted({0, length // 2, length - 2}):
        later = np.zeros((batch, length), dtype=bool)
        later[:, t + 1 :] = True
        changed = _position_perturbed(original, later, t + 10, sequence_inputs)
        actual = call_layer(layer, changed, call_kwargs)
        _compare_positions(
            expected, actual, ~later, f"{name}: positions <= {t} see later positions", atol
        )


def run_standard_checks(
    make_layer: Callable[[], keras.layers.Layer],
    inputs: Any,
    call_kwargs: dict | None = None,
    skip: Sequence[str] = (),
) -> None:
    """Config round trip, save/load, a training step and mixed precision, each on a fresh layer."""
    checks = {
        "config": lambda: check_config_roundtrip(make_layer(), inputs, call_kwargs),
        "save_load": lambda: check_save_load(make_layer(), inputs, call_kwargs),
        "training": lambda: check_training_step(make_layer(), inputs, call_kwargs),
        "mixed_precision": lambda: check_mixed_precision(make_layer(), inputs, call_kwargs),
    }
    unknown = set(skip) - set(checks)
    assert not unknown, f"run_standard_checks: unknown checks to skip {sorted(unknown)}"
    for key, check in checks.items():
        if key not in skip:
            check()


def relative_attention_weights(layer: keras.layers.Layer) -> dict:
    """A `MultiHeadRelativeAttention`'s weights by the numpy reference's names.

    The projections' kernels and biases, and the learned tables (``relative_keys``,
    ``relative_values``, ``relative_bias``) where it has them; a computed bias has none.
    """
    weights = {}
    for role in ("query", "key", "value"):
        dense = getattr(layer, f"{role}_dense")
        weights[f"{role}_kernel"] = ops.convert_to_numpy(dense.kernel).astype("float64")
        weights[f"{role}_bias"] = ops.convert_to_numpy(dense.bias).astype("float64")
    weights["output_kernel"] = ops.convert_to_numpy(layer.output_dense.kernel).astype("float64")
    weights["output_bias"] = ops.convert_to_numpy(layer.output_dense.bias).astype("float64")
    for name in ("relative_keys", "relative_values", "relative_bias"):
        table = getattr(layer, name)
        if table is not None and not table.position.computed:
            weights[name] = ops.convert_to_numpy(table.embeddings).astype("float64")
    return weights


def decode_step_by_step(layer: keras.layers.Layer, x: np.ndarray) -> tuple[list, Any]:
    """The causal self-attention ``layer`` run on ``x`` one position at a time with a cache.

    Returns each step's output ``(batch, features)`` in order, and the final cache.
    ``layer`` must have ``num_heads`` heads of ``key_dim`` (keras_hub's cache layout), or
    a ``cache_shape`` method (`MultiHeadRelativeAttention`: key/value heads, a rolling cache).
    """
    batch, length = x.shape[:2]
    if hasattr(layer, "cache_shape"):
        cache = np.zeros(layer.cache_shape(batch, length), "float32")
    else:
        cache = np.zeros((batch, 2, length, layer.num_heads, layer.key_dim), "float32")
    steps = []
    for t in range(length):
        step, cache = layer(
            x[:, t : t + 1],
            x[:, t : t + 1],
            cache=cache,
            cache_update_index=t,
            use_causal_mask=True,
        )
        steps.append(ops.convert_to_numpy(step)[:, 0].astype("float64"))
    return steps, cache
