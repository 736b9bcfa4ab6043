"""Creating a model's variables together on JAX (`initialize_together`).

Why: on JAX each initializer draw is an XLA program compiled for its shape (Keras'
JAX random functions are ``jax.jit``-ed with a static shape), and compiling dozens of
them made ``zoo.create("coatnet_0")`` at 64 x 64 take about 6 s against 0.5 s on
TensorFlow. Inside `initialize_together` the variables are created uninitialised (a
``keras.StatelessScope``), and at its end the draws of all of them are traced once and
evaluated with NumPy, their random bits from one Threefry program compiled once per
process (`_evaluate_on_host`; a draw NumPy does not mirror is compiled as one program
instead).

Private APIs: Keras' global state of uninitialised variables and ``Variable``'s
``_value`` / ``_initializer`` / ``_initialize`` / ``_deferred_initialize``, and
``jax.extend``'s primitives and jaxprs. `_private_api` reads them all first; if one is
missing, `initialize_together` gives up with one warning and Keras initialises the
variables itself (`keras_posenc.backend._registry.give_up`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np

from keras_posenc.backend._registry import give_up


def _private_api() -> tuple:
    """Keras' private pieces `initialize_together` uses (raises if one moved)."""
    from jax.extend import core  # noqa: F401  (the jaxpr evaluator's)
    from jax.extend.random import threefry2x32_p  # noqa: F401
    from keras.src.backend.common import global_state
    from keras.src.backend.common.stateless_scope import in_stateless_scope

    for name in ("_initialize", "_deferred_initialize"):  # (`_value`, `_initializer`: per object)
        if not callable(getattr(keras.Variable, name, None)):
            raise AttributeError(f"keras.Variable has no method {name}")
    return global_state, in_stateless_scope


# XLA options for the one-off initialisation program: it runs once, so optimising it
# costs more than it saves (measured: about half the compile time of the default).
_ONE_OFF_COMPILER_OPTIONS = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}


@contextlib.contextmanager
def initialize_together(who: str = "initialize_together") -> Iterator[None]:
    """Variables created inside are initialised together when the block ends (JAX).

    On JAX the block is a ``keras.StatelessScope`` that leaves new variables
    uninitialised; at its end every initializer is evaluated together (traced once,
    evaluated with NumPy, the random bits from one Threefry program: see the module's
    docstring), and assignments made while building are applied after. Keras'
    initializers carry fixed integer seeds, so the values are those Keras would draw
    (to float rounding). Inside another stateless scope it does nothing.

    Args:
        who: named in the error raised if the block assigned a variable it did not
            create (only new variables may be assigned while building).
    """
    try:
        global_state, in_stateless_scope = _private_api()
    except (ImportError, AttributeError) as error:
        give_up("initialize_together", error)
        yield
        return
    if in_stateless_scope():
        yield
        return

    known = {id(v) for v in global_state.get_global_attribute("uninitialized_variables") or []}
    scope = keras.StatelessScope(initialize_variables=False)
    with scope:
        yield
    waiting = global_state.get_global_attribute("uninitialized_variables") or []
    created = [v for v in waiting if id(v) not in known and v._value is None]
    ids = {id(v) for v in created}
    global_state.set_global_attribute(
        "uninitialized_variables", [v for v in waiting if id(v) not in ids]
    )
    foreign = set(scope.state_mapping) - ids
    if foreign:
        raise RuntimeError(
            f"{who}: {len(foreign)} variable(s) that existed before the block were assigned "
            "inside it; only variables created inside may be assigned while building."
        )
    if not created:
        return
    drawn, alone = [], []
    for variable in created:
        (drawn if _program_key(variable._initializer) is not None else alone).append(variable)
    if drawn:
        try:
            values = _draw_together(drawn)
        except Exception:  # noqa: BLE001
            # An initializer that cannot be traced: Keras' own deferred initialisation,
            # one variable at a time, as if there were no block.
            alone = created
        else:
            for variable, value in zip(drawn, values, strict=True):
                variable._initialize(value)
                variable._initializer = None
    # Variables whose initializer is not a Keras initializer (a plain function, such as
    # a SeedGenerator's state): one at a time, as Keras would.
    for variable in alone:
        if variable._value is None:
            variable._deferred_initialize()
    for variable in created:
        assigned = scope.get_current_value(variable)
        if assigned is not None:
            variable.assign(assigned)


# Compiled initialisation programs by what they draw (initializer types, configurations
# without seeds, shapes and dtypes): the seeds are arguments, so building the same model
# again reuses the program, as Keras' per-shape random programs were reused before.
_DRAW_PROGRAMS: dict[tuple, Any] = {}
_MAX_DRAW_PROGRAMS = 64


def _program_key(initializer: Any) -> tuple | None:
    """What identifies ``initializer``'s draw apart from its seed, or None if unknown
    (not a Keras initializer, or a configuration that does not reduce to a key)."""
    if not isinstance(initializer, keras.initializers.Initializer):
        return None
    try:
        config = dict(initializer.get_config())
    except Exception:  # noqa: BLE001  (a custom initializer without a usable config)
        return None
    seeded = isinstance(getattr(initializer, "seed", None), int)
    if seeded:
        config.pop("seed", None)
    elif isinstance(getattr(initializer, "seed", None), keras.random.SeedGenerator):
        return None  # draws from a generator's state: not a fixed program input
    try:
        return (type(initializer), repr(sorted(config.items())), seeded)
    except Exception:  # noqa: BLE001
        return None


def _draw_together(variables: list) -> list:
    """Every variable's initial value, drawn together (JAX): on the host (`_host_draw`),
    or by one compiled program where the host does not mirror a primitive; either is
    cached by what it draws. An int-seeded Keras initializer draws with its seed given
    as an input."""
    import jax
    import numpy as np

    key = tuple((_program_key(v._initializer), tuple(v._shape), str(v._dtype)) for v in variables)
    seeded = [k[0][2] for k in key]
    seeds = [
        np.array([v._initializer.seed & 0xFFFFFFFF, 0], "uint32")
        for v, s in zip(variables, seeded, strict=True)
        if s
    ]
    program = _DRAW_PROGRAMS.get(key)
    if program is None:
        generator = keras.random.SeedGenerator(0)
        initializers = [v._initializer for v in variables]
        shapes = [(v._shape, v._dtype) for v in variables]

        def draw(seed_values: list) -> list:
            values, given = [], iter(seed_values)
            for initializer, (shape, dtype), with_seed in zip(
                initializers, shapes, seeded, strict=True
            ):
                if not with_seed:
                    values.append(initializer(shape, dtype=dtype))
                    continue
                # The initializer draws from a SeedGenerator whose state is this input:
                # the draw of its int seed s, whose state is [s, 0], as an argument.
                own = initializer.seed
                initializer.seed = generator
                try:
                    state = keras.ops.cast(next(given), generator.state.dtype)
                    with keras.StatelessScope(state_mapping=[(generator.state, state)]):
                        values.append(initializer(shape, dtype=dtype))
                finally:
                    initializer.seed = own
            return values

        program = _host_draw(draw, seeds)
        values = None
        if program is not None:
            try:
                values = program(seeds)
            except (TypeError, ValueError, KeyError):  # a case NumPy does not mirror
                program = None
        if program is None:
            options = _ONE_OFF_COMPILER_OPTIONS
            program = jax.jit(draw).lower(seeds).compile(compiler_options=options)
        if len(_DRAW_PROGRAMS) >= _MAX_DRAW_PROGRAMS:
            _DRAW_PROGRAMS.pop(next(iter(_DRAW_PROGRAMS)))
        _DRAW_PROGRAMS[key] = program
        if values is not None:
            return values
    return program(seeds)


# --------------------------------------------------------------------------- host draws
#
# A compiled draw program still cost most of a cold JAX build: XLA generates code for
# every variable's transform of its random bits (uniform -> normal by erf_inv, scaling,
# clipping), and `zoo.create("convs2s_small")` spent about 1.8 of its 2.5 s compiling.
# `_host_draw` instead traces the draw once to a jaxpr and evaluates it with NumPy,
# except the random bits themselves: those come from one small XLA program of Threefry
# over a fixed chunk of counters, compiled once per process and reused by every model.


# Counters per call of the bits program (`_threefry_bits`): small variables waste at
# most one chunk, large ones make a call per chunk.
_BITS_CHUNK = 1 << 16
_BITS_PROGRAM: list = []


def _threefry_bits(key_data: Any, size: int) -> Any:
    """JAX's 32-bit random bits of ``size`` elements for a raw threefry key, as NumPy.

    With ``jax_threefry_partitionable`` (on by default) element ``i`` of a draw of any
    shape is ``x ^ y`` for ``(x, y) = threefry2x32(key, (0, i))`` (``i`` its row-major
    index), so the bits of a draw are computed chunk by chunk, each chunk's counters an
    offset plus ``iota``, by one program compiled for one chunk size.
    """
    import jax
    from jax.extend.random import threefry2x32_p

    if not _BITS_PROGRAM:

        def bits(k1: Any, k2: Any, start: Any) -> Any:
            low = start + jax.lax.iota(np.uint32, _BITS_CHUNK)
            x, y = threefry2x32_p.bind(k1, k2, jax.lax.full_like(low, 0), low)
            return x ^ y

        # XLA's default optimisations: compiled once, it runs for every weight of every
        # model (25M bits took 2.0 s without them, 0.37 s with; both compiled in 0.2 s).
        arguments = (np.uint32(0), np.uint32(0), np.uint32(0))
        _BITS_PROGRAM.append(jax.jit(bits).lower(*arguments).compile())
    program = _BITS_PROGRAM[0]
    key_data = np.asarray(key_data, np.uint32)
    out = np.empty(-(-size // _BITS_CHUNK) * _BITS_CHUNK, np.uint32)
    for start in range(0, size, _BITS_CHUNK):
        chunk = program(key_data[0], key_data[1], np.uint32(start))
        out[start : start + _BITS_CHUNK] = np.asarray(chunk)
    return out[:size]


def _broadcast_in_dim(x: Any, shape: tuple, broadcast_dimensions: tuple, **_: Any) -> Any:
    kept = dict(zip(broadcast_dimensions, x.shape, strict=True))
    return np.broadcast_to(np.reshape(x, [kept.get(d, 1) for d in range(len(shape))]), shape)


def _iota(dtype: Any, shape: tuple, dimension: int, **_: Any) -> Any:
    axis = [1] * len(shape)
    axis[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(axis), shape)


def _unsigned(x: Any) -> Any:
    return x.view(np.dtype(f"uint{x.dtype.itemsize * 8}")) if x.dtype.kind == "i" else x


# Element-wise NumPy on at least this many elements is split over the CPU cores (NumPy's
# and SciPy's ufunc loops release the GIL): erf_inv of 12.8M float32 took 0.42 s on one.
_PARALLEL_ELEMENTS = 1 << 20
_POOL: list = []


def _ufunc(function: Any, *inputs: Any, out: Any = None) -> Any:
    """``function(*inputs)`` (a NumPy ufunc) into ``out`` when given, on every CPU core
    for large arrays whose inputs are scalars or of the result's shape."""
    shape = np.broadcast_shapes(*(np.shape(x) for x in inputs))
    size = math.prod(shape)
    cores = os.cpu_count() or 1
    if (
        size < _PARALLEL_ELEMENTS
        or cores < 2
        or any(np.ndim(x) and np.shape(x) != shape for x in inputs)
    ):
        return function(*inputs) if out is None else function(*inputs, out=out)
    if out is None:
        dtype = function(*(np.reshape(x, -1)[:1] if np.ndim(x) else x for x in inputs)).dtype
        out = np.empty(shape, dtype)
    flat_out = out.reshape(-1)
    flats = [np.reshape(x, -1) if np.ndim(x) else x for x in inputs]
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(cores))
    bounds = np.linspace(0, size, cores + 1).astype(int)

    def part(k: int) -> None:
        a, b = bounds[k], bounds[k + 1]
        function(*(x[a:b] if np.ndim(x) else x for x in flats), out=flat_out[a:b])

    list(_POOL[0].map(part, range(cores)))
    return out


def _host_primitives() -> dict:
    """NumPy for each JAX primitive a Keras initializer's draw is traced to.

    Each takes the input arrays and the equation's parameters; the result is cast to
    the equation's dtype and its shape checked (`_evaluate_on_host`). Those in
    `_IN_PLACE` also take ``out``, an input buffer no later equation reads. A primitive
    not here sends the draw back to the compiled program.
    """
    import scipy.special

    def unary(function: Callable) -> Callable:
        return lambda x, out=None, **_: _ufunc(function, x, out=out)

    def binary(function: Callable) -> Callable:
        return lambda x, y, out=None, **_: _ufunc(function, x, y, out=out)

    def identity(x: Any, **_: Any) -> Any:
        return x

    def shift_right_logical(x: Any, y: Any, out: Any = None, **_: Any) -> Any:
        if x.dtype.kind != "u":  # logical, not arithmetic: only unsigned here
            raise TypeError("shift_right_logical of a signed integer")
        return _ufunc(np.right_shift, x, np.asarray(y, x.dtype), out=out)

    def floating_divide(x: Any, y: Any, out: Any = None, **_: Any) -> Any:
        if x.dtype.kind != "f":  # lax.div rounds integers toward zero
            raise TypeError("integer div")
        return _ufunc(np.divide, x, y, out=out)

    return {
        "add": binary(np.add),
        "sub": binary(np.subtract),
        "mul": binary(np.multiply),
        "div": floating_divide,
        "max": binary(np.maximum),
        "min": binary(np.minimum),
        "pow": binary(np.power),
        "nextafter": binary(np.nextafter),
        "and": binary(np.bitwise_and),
        "or": binary(np.bitwise_or),
        "xor": binary(np.bitwise_xor),
        "shift_left": binary(np.left_shift),
        "shift_right_logical": shift_right_logical,
        "eq": binary(np.equal),
        "ne": binary(np.not_equal),
        "lt": binary(np.less),
        "le": binary(np.less_equal),
        "gt": binary(np.greater),
        "ge": binary(np.greater_equal),
        "neg": unary(np.negative),
        "abs": unary(np.abs),
        "sign": unary(np.sign),
        "floor": unary(np.floor),
        "ceil": unary(np.ceil),
        "sqrt": unary(np.sqrt),
        "exp": unary(np.exp),
        "log": unary(np.log),
        "log1p": unary(np.log1p),
        "tanh": unary(np.tanh),
        "square": unary(np.square),
        "erf": unary(scipy.special.erf),
        "erf_inv": unary(scipy.special.erfinv),
        "rsqrt": lambda x, **_: 1 / np.sqrt(x),
        "integer_pow": lambda x, y, **_: np.power(x, y),
        "stop_gradient": identity,
        "copy": identity,
        "copy_p": identity,
        "random_wrap": identity,  # a key is its raw data here
        "random_unwrap": identity,
        "convert_element_type": lambda x, new_dtype, **_: x.astype(new_dtype),
        "bitcast_convert_type": lambda x, new_dtype, **_: x.view(new_dtype),
        "broadcast_in_dim": _broadcast_in_dim,
        "reshape": lambda x, new_sizes, **_: np.reshape(x, new_sizes),
        "squeeze": lambda x, dimensions, **_: np.squeeze(x, tuple(dimensions)),
        "transpose": lambda x, permutation, **_: np.transpose(x, permutation),
        "reduce_sum": lambda x, axes, **_: np.sum(x, axis=tuple(axes)),
        "reduce_max": lambda x, axes, **_: np.max(x, axis=tuple(axes)),
        "reduce_min": lambda x, axes, **_: np.min(x, axis=tuple(axes)),
        "iota": _iota,
        "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
        "select_n": lambda which, *cases, **_: np.choose(which.astype(np.int32), cases),
        "clamp": lambda low, x, high, **_: np.minimum(np.maximum(x, low), high),
    }


# The element-wise primitives of `_host_primitives` that write into ``out``.
_IN_PLACE = frozenset(
    "add sub mul div max min pow nextafter and or xor shift_left shift_right_logical neg abs "
    "sign floor ceil sqrt exp log log1p tanh square erf erf_inv".split()
)


def _random_bits(key: Any, bit_width: int, shape: tuple, **_: Any) -> Any:
    if bit_width != 32 or np.shape(key) != (2,) or math.prod(shape) >= 2**32:
        # (counters past 2**32 need Threefry's high word, which `_threefry_bits` keeps 0)
        raise TypeError("only 32-bit draws of under 2**32 values from one threefry key")
    return _threefry_bits(key, math.prod(shape)).reshape(shape)


def _buffer(array: Any) -> Any:
    """The array that owns ``array``'s memory (itself, or the base of a view)."""
    while isinstance(array, np.ndarray) and isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _evaluate_on_host(jaxpr: Any, consts: list, args: list, primitives: dict) -> list:
    """``jaxpr`` evaluated with NumPy (`_host_primitives`), its random bits by XLA.

    Memory: a value is dropped after its last use, and an element-wise equation writes
    into an input of its shape and dtype that nothing later reads (no other live value
    shares its buffer): allocating a fresh array of tens of MB per equation cost 4x the
    arithmetic (the kernel hands freed memory back and zero-fills it again).
    """
    from jax.extend import core

    env: dict = {}
    users: dict = {}  # buffer id -> live values in it (consts and arguments: pinned)
    last_use: dict = {}
    for index, eqn in enumerate(jaxpr.eqns):
        for atom in eqn.invars:
            if not isinstance(atom, core.Literal):
                last_use[atom] = index
    for atom in jaxpr.outvars:
        if not isinstance(atom, core.Literal):
            last_use[atom] = len(jaxpr.eqns)

    def read(atom: Any) -> Any:
        if isinstance(atom, core.Literal):
            return np.asarray(atom.val, dtype=atom.aval.dtype)
        return env[atom]

    def write(var: Any, value: Any, pinned: bool = False) -> None:
        env[var] = value
        key = id(_buffer(value))
        users[key] = users.get(key, 0) + (2 if pinned else 1)

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        write(var, np.asarray(value), pinned=True)
    for var, value in zip(jaxpr.invars, args, strict=True):
        write(var, np.asarray(value), pinned=True)
    for index, eqn in enumerate(jaxpr.eqns):
        inputs = [read(atom) for atom in eqn.invars]
        inner = next((p for p in eqn.params.values() if isinstance(p, core.ClosedJaxpr)), None)
        if inner is not None:  # a nested call (pjit, custom_jvp_call): evaluate its body
            outputs = _evaluate_on_host(inner.jaxpr, inner.consts, inputs, primitives)
        else:
            name = eqn.primitive.name
            function = _random_bits if name == "random_bits" else primitives[name]
            params = dict(eqn.params)
            if name in _IN_PLACE:
                aval = eqn.outvars[0].aval
                for atom, value in zip(eqn.invars, inputs, strict=True):
                    if (
                        not isinstance(atom, core.Literal)
                        and last_use.get(atom) == index
                        and value.shape == tuple(aval.shape)
                        and value.dtype == aval.dtype
                        and value.flags.writeable
                        and value.flags.c_contiguous
                        and users.get(id(_buffer(value))) == 1
                    ):
                        params["out"] = value
                        break
            outputs = function(*inputs, **params)
            if not eqn.primitive.multiple_results:
                outputs = [outputs]
        dropped = {id(a): a for a in eqn.invars if not isinstance(a, core.Literal)}
        for atom in dropped.values():  # values read for the last time: dropped
            if last_use.get(atom) == index:
                key = id(_buffer(env[atom]))
                users[key] -= 1
                del env[atom]
        for var, value in zip(eqn.outvars, outputs, strict=True):
            aval = var.aval
            is_key = "key<" in str(aval.dtype)
            value = np.asarray(value).astype(np.uint32 if is_key else aval.dtype, copy=False)
            expected = tuple(aval.shape) + ((2,) if is_key else ())
            if value.shape != expected:
                raise ValueError(f"{eqn.primitive.name}: shape {value.shape} != {expected}")
            write(var, value)
    return [read(atom) for atom in jaxpr.outvars]


def _host_draw(draw: Callable, seeds: list) -> Callable | None:
    """``draw`` (a function of the seeds) as a NumPy evaluation of its jaxpr, or None.

    None when the draw uses a primitive `_host_primitives` lacks (the caller then
    compiles it), or when JAX's Threefry is not the partitionable default whose bits
    `_threefry_bits` computes.
    """
    import jax

    if (
        jax.config.jax_default_prng_impl != "threefry2x32"
        or not jax.config.jax_threefry_partitionable
    ):
        return None
    from jax.extend import core

    with jax.disable_jit():  # nested jit-ed functions inline, so every primitive is seen
        closed = jax.make_jaxpr(draw)(seeds)
    primitives = _host_primitives()

    def names(jaxpr: Any) -> set:
        found = set()
        for eqn in jaxpr.eqns:
            inner = [p for p in eqn.params.values() if isinstance(p, core.ClosedJaxpr)]
            found |= names(inner[0].jaxpr) if inner else {eqn.primitive.name}
        return found

    if not names(closed.jaxpr) <= set(primitives) | {"random_bits"}:
        return None

    def program(seed_values: list) -> list:
        flat = jax.tree_util.tree_leaves(seed_values)
        return _evaluate_on_host(closed.jaxpr, closed.consts, flat, primitives)

    return program
