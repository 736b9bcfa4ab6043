"""Argument and input checks shared by the layers and the zoo: one home, one wording.

Every message starts with the layer (its class, and its name once it has one),
then names the argument, what was expected and what was given:
``"MultiHeadRelativeAttention: `num_heads` must be an integer >= 1, got 0."``
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from keras_posenc.layers.activations import get_activation


def shape_of(value: Any) -> tuple:
    """The shape of a tensor, a ``keras.KerasTensor`` or anything numpy can shape."""
    return tuple(getattr(value, "shape", np.shape(value)))


# --------------------------------------------------------------------------- masks
# Checked at a layer's boundary, before the attention core (`_attention`) sees them.


def _dtype_name(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        dtype = np.asarray(value).dtype
    try:
        return keras.backend.standardize_dtype(dtype)
    except (ValueError, TypeError):
        return str(dtype)


def check_mask(caller: str, argument: str, mask: Any, expected: tuple, names: tuple) -> Any:
    """``mask`` as a bool tensor after checking its dtype and shape, or None.

    Masks are boolean or integer 0/1 (``True``/1 = a real token, may attend).
    A floating mask is refused with a `TypeError`: an additive mask (0 where
    attention is allowed, -1e9 where not) cast to bool would be inverted, so it
    belongs in an ``attention_bias`` argument. This is the one deliberate
    difference from ``keras.layers.MultiHeadAttention``, which casts any mask.

    Args:
        caller: the layer, as it should appear in errors.
        argument: the argument's name (``"attention_mask"``, ``"mask"``, ...).
        mask: None, or anything ``keras.ops.convert_to_tensor`` takes.
        expected: the expected shape, one entry per axis: an int (a size of 1
            also broadcasts) or None where any size is accepted.
        names: the names of the axes, for the error message.
    """
    if mask is None:
        return None
    dtype = _dtype_name(mask)
    if dtype != "bool" and "int" not in dtype:
        raise TypeError(
            f"{caller}: `{argument}` must be boolean or integer 0/1 (True = may attend), "
            f"got dtype {dtype}. A floating mask is not cast to bool here, since an additive "
            "mask (0 / -1e9) would be inverted: pass additive masks as `attention_bias` "
            "(MultiHeadRelativeAttention), or convert with `mask = bias == 0`."
        )
    _check_broadcast(caller, argument, mask, expected, names, exact_rank=True)
    return ops.cast(mask, "bool")


def check_bias(caller: str, argument: str, bias: Any, expected: tuple, names: tuple) -> Any:
    """``bias`` as a tensor after checking that it is additive and broadcasts to ``expected``.

    An additive bias (``attention_bias``) is numeric, not boolean: a boolean given here
    is a mask, which belongs in ``attention_mask``. Its shape follows NumPy's broadcasting
    (the trailing axes align, each of the expected size or 1), so a wrong size is named
    here instead of failing inside each backend's addition.
    """
    if bias is None:
        return None
    dtype = _dtype_name(bias)
    if dtype == "bool" or not ("float" in dtype or "int" in dtype):
        raise TypeError(
            f"{caller}: `{argument}` must be an additive float bias (0 where attention is "
            f"allowed, a large negative number where not), got dtype {dtype}; boolean masks "
            "go in `attention_mask`."
        )
    _check_broadcast(caller, argument, bias, expected, names, exact_rank=False)
    return ops.convert_to_tensor(bias)


def _known(size: Any) -> bool:
    """Whether a size is a number (not None, nor a symbolic size of a JAX export)."""
    return isinstance(size, int | np.integer)


def _check_broadcast(
    caller: str, argument: str, value: Any, expected: tuple, names: tuple, exact_rank: bool
) -> None:
    """Raises if ``value``'s shape does not broadcast to ``expected`` (None = any size).

    With ``exact_rank`` the ranks must be equal; else the shape may have fewer axes,
    aligned on the last ones as in NumPy's broadcasting.
    """
    shape = tuple(getattr(value, "shape", np.shape(value)))
    wanted = "(" + ", ".join(names) + ")"
    shown = "(" + ", ".join(n if w is None else str(w) for n, w in zip(names, expected)) + ")"
    if len(shape) != len(expected) if exact_rank else len(shape) > len(expected):
        rank = f"rank {len(expected)}" if exact_rank else f"rank at most {len(expected)}"
        raise ValueError(
            f"{caller}: `{argument}` must have shape {wanted} = {shown} ({rank}), "
            f"got shape {shape}."
        )
    for size, want in zip(shape, expected[len(expected) - len(shape) :], strict=True):
        if _known(size) and _known(want) and size not in (want, 1):
            raise ValueError(
                f"{caller}: `{argument}` must have shape {wanted} = {shown} (or 1 on an axis, "
                f"to broadcast), got shape {shape}."
            )


def check_int(caller: str, name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as a Python int (numpy integers too), at least ``minimum`` when given."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(
            f"{caller}: `{name}` must be an integer, got {value!r} (type {type(value).__name__})."
        )
    if minimum is not None and value < minimum:
        raise ValueError(f"{caller}: `{name}` must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def check_bool(caller: str, name: str, value: Any) -> bool:
    """``value`` as a Python bool (numpy bools too); anything else is a `TypeError`."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(
            f"{caller}: `{name}` must be True or False, got {value!r} "
            f"(type {type(value).__name__})."
        )
    return bool(value)


def check_bool_or_auto(caller: str, name: str, value: Any) -> bool | str:
    """``True``, ``False`` or ``"auto"`` (decided per call, e.g. per backend)."""
    if isinstance(value, bool | np.bool_) or (isinstance(value, str) and value == "auto"):
        return value if isinstance(value, str) else bool(value)
    raise TypeError(f"{caller}: `{name}` must be True, False or 'auto', got {value!r}.")


def check_choice(caller: str, name: str, value: Any, choices: tuple) -> Any:
    """``value``, one of ``choices`` (strings compared exactly)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"{caller}: `{name}` must be one of {', '.join(map(repr, choices))}, got {value!r}."
        )
    return value


def check_rate(caller: str, name: str, value: Any, allow_one: bool = False) -> float:
    """A dropout-like rate as a float in [0, 1) (or [0, 1] with ``allow_one``).

    Errors name ``caller`` and ``name``.
    """
    bound = "[0, 1]" if allow_one else "[0, 1)"
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{caller}: `{name}` must be a float in {bound}, got {value!r}.")
    if not (0.0 <= value <= 1.0 if allow_one else 0.0 <= value < 1.0):
        raise ValueError(f"{caller}: `{name}` must be in {bound}, got {value!r}.")
    return float(value)


def check_ints(
    caller: str, name: str, value: Any, count: int | None = None, minimum: int = 1, what: str = ""
) -> tuple[int, ...]:
    """A sequence of ints (each at least ``minimum``), of ``count`` entries when given.

    ``what`` is said after the expectation (e.g. ``", one per stage S0..S4"``).
    """
    try:
        items = None if isinstance(value, str) else tuple(value)
    except TypeError:
        items = None
    valid = items is not None and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) and v >= minimum
        for v in items
    )
    entries = "" if count is None else f"{count} "
    if not valid:
        raise ValueError(
            f"{caller}: `{name}` must be a sequence of {entries}integers >= {minimum}{what}, "
            f"got {value!r}."
        )
    if count is not None and len(items) != count:
        raise ValueError(
            f"{caller}: `{name}` must have {count} entries{what}, got {len(items)}: {value!r}."
        )
    return tuple(int(v) for v in items)


def grid_size(value: Any, who: str, argument: str) -> tuple[int, int]:
    """``value`` as a ``(height, width)`` pair of positive ints; an int means a square grid.

    The one check of grid sizes: `Grid2DPositions`, `RelativePositionBias2D`, CoAtNet's
    and MaxViT's blocks and models use it.
    """
    pair = (value, value) if isinstance(value, int | np.integer) else value
    try:
        pair = tuple(pair)
    except TypeError:
        pair = (pair,)
    valid = len(pair) == 2 and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in pair
    )
    if not valid:
        raise ValueError(
            f"{who}: `{argument}` must be a positive int or a pair (height, width) of "
            f"positive ints; received {argument}={value!r}"
        )
    return int(pair[0]), int(pair[1])


def check_activation(caller: str, activation: Any, name: str = "activation") -> Any:
    """A Keras activation (name or callable); ``"gelu"`` is the exact, exportable GELU.

    ``name`` is the argument named in the error (``"se_activation"``, ...).
    """
    try:
        return get_activation(activation)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{caller}: `{name}` must be a Keras activation (a name such as 'relu' or "
            f"'gelu', or a callable), got {activation!r}."
        ) from error


def check_features(caller: str, argument: str, value: Any) -> Any:
    """``value`` unchanged after checking that it holds floating-point features.

    Integer features (token ids passed where embeddings are due) went through some
    layers on some backends and failed inside a projection or an addition on others
    (PyTorch's ``EinsumDense``, TensorFlow's ``AddV2``); one `TypeError` everywhere.
    """
    dtype = getattr(value, "dtype", None)
    try:
        dtype = keras.backend.standardize_dtype(dtype)
    except (ValueError, TypeError):
        dtype = str(dtype)
    if "float" not in dtype:
        raise TypeError(
            f"{caller}: `{argument}` must hold floating-point features, got dtype {dtype}; "
            "embed token ids first (e.g. keras.layers.Embedding) or cast with "
            "keras.ops.cast(x, 'float32')."
        )
    return value


def is_finite_number(value: Any) -> bool:
    """An int or float (numpy scalars too, e.g. np.float32(0.5)), not a bool, NaN or Inf."""
    number = int | float | np.integer | np.floating
    return (
        isinstance(value, number)
        and not isinstance(value, bool | np.bool_)
        and bool(np.isfinite(value))
    )


def check_positive_number(caller: str, name: str, value: Any) -> float:
    """A finite positive int or float (e.g. ``layer_norm_epsilon``) as a float."""
    if not is_finite_number(value) or value <= 0:
        raise ValueError(f"{caller}: `{name}` must be a positive number, got {value!r}.")
    return float(value)


def check_number_at_least(caller: str, name: str, value: Any, minimum: float) -> float:
    """A finite int or float ``>= minimum`` (a scaling factor) as a float."""
    if not is_finite_number(value) or value < minimum:
        raise ValueError(
            f"{caller}: `{name}` must be a finite number >= {minimum:g}, got {value!r}."
        )
    return float(value)


def check_non_negative_number(caller: str, name: str, value: Any) -> float:
    """A finite int or float >= 0 (a tolerance, a length penalty) as a float.

    NaN and Inf are refused: a NaN compares False with every bound, so a check
    written as ``value < 0`` would let it through and every later comparison
    with it would pass or fail silently.
    """
    if not is_finite_number(value) or value < 0:
        raise ValueError(f"{caller}: `{name}` must be a finite number >= 0, got {value!r}.")
    return float(value)


class KerasMask(keras.layers.Layer):
    """Returns the Keras mask its input carries (``None`` when it carries none).

    Keras fills a layer's ``mask`` argument from its only input's mask (e.g.
    from ``Embedding(mask_zero=True)``); this is the public way to read it.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.supports_masking = True
        # Nothing to build. A block given its masks as arguments never calls this layer,
        # and a model holding an unbuilt layer is called again eagerly by every
        # `predict_on_batch` on JAX (Keras builds first when any layer is unbuilt).
        self.built = True

    def call(self, inputs: Any, mask: Any = None) -> Any:
        return mask

    def compute_mask(self, inputs: Any, previous_mask: Any = None) -> Any:
        return None


class SequenceChecks:
    """Checks of ``(batch, length, features)`` inputs and their masks, for block layers.

    A layer that records ``self._built_features = {argument: size}`` when it
    builds gets its inputs' feature sizes checked against them afterwards.
    """

    name: str

    def _describe(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def _check_sequence(self, argument: str, value: Any) -> tuple:
        """The shape of ``value`` (a tensor, or a shape at build time) after checking it;
        a tensor's dtype is checked too (`check_features`)."""
        if hasattr(value, "dtype"):
            check_features(self._describe(), argument, value)
            shape = shape_of(value)
        else:
            shape = tuple(value)
        if len(shape) != 3:
            raise ValueError(
                f"{self._describe()}: `{argument}` must have rank 3 (batch, length, "
                f"features), got shape {shape}."
            )
        if shape[-1] is None:
            raise ValueError(
                f"{self._describe()}: the last axis of `{argument}` must be known, "
                f"got shape {shape}."
            )
        built = getattr(self, "_built_features", {}).get(argument)
        if built is not None and shape[-1] != built:
            raise ValueError(
                f"{self._describe()}: the last axis of `{argument}` must be {built} (the "
                f"size the layer was built with), got shape {shape}."
            )
        return shape

    def _check_mask(self, argument: str, mask: Any, rank: int = 2, like: Any = None) -> Any:
        """``mask`` as booleans, after checking its rank (2 for padding, 3 for attention),
        its dtype (boolean or integer 0/1, `check_mask`) and, given ``like``
        (the expected shape, None where any size goes), its shape."""
        if mask is None:
            return None
        names = ("batch", "length") if rank == 2 else ("batch", "query_length", "key_length")
        shape = shape_of(mask)
        if len(shape) != rank:
            raise ValueError(
                f"{self._describe()}: `{argument}` must have rank {rank} ({', '.join(names)}), "
                f"got shape {shape}."
            )
        expected = (None,) * rank if like is None else tuple(like)
        return check_mask(self._describe(), argument, mask, expected, names)


def has_empty_axis(*tensors: Any) -> bool:
    """Whether a tensor has an axis of static size 0 (an empty batch or sequence).

    Layers answer such inputs with empty outputs of the right shape without running
    their computation: gathers of relative positions, ``arange`` over positions and
    convolutions over an empty sequence fail on empty axes, differently on each
    backend (an error inside TensorFlow, a division by zero in JAX). ``None`` entries
    and axes of unknown size do not count.
    """
    return any(0 in shape_of(tensor) for tensor in tensors if tensor is not None)


def excerpt(value: Any, limit: int = 10) -> str:
    """``value`` for an error message, cut short when it is long.

    A list, tuple or set shows its first ``limit`` items and how many more there
    are, anything else its ``str``; on one line, cut after ``100 * limit``
    characters (a sequence) or ``20 * limit`` (anything else) with the length it
    had. Messages about untrusted files quote them through this, so a crafted
    file cannot make a message of megabytes.

    Examples:

        >>> excerpt(list(range(25)), limit=3)
        '[0, 1, 2] and 22 more'
        >>> excerpt((512, 3.5))
        '(512, 3.5)'
        >>> excerpt("x" * 50, limit=2)
        'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (50 characters)'
    """
    sequence = isinstance(value, list | tuple | set | frozenset)
    if sequence and len(value) > limit:
        text = f"{list(value)[:limit]!r} and {len(value) - limit} more"
    else:
        text = repr(value) if sequence else str(value)
    text = " ".join(text.split())
    width = (100 if sequence else 20) * limit
    if len(text) <= width:
        return text
    return f"{text[:width]}... ({len(text)} characters)"


def innermost_error(error: BaseException) -> BaseException:
    """The first error of ``error``'s chain (its ``__cause__`` or ``__context__``, down).

    Keras wraps an error raised while deserializing (e.g. a layer refusing a value of a
    hand-edited config) in "could not be deserialized properly" messages, one a level,
    each quoting the whole configuration; the error that explains is the innermost.
    """
    seen = {id(error)}
    while True:
        inner = error.__cause__ or error.__context__
        if inner is None or id(inner) in seen:
            return error
        seen.add(id(inner))
        error = inner
