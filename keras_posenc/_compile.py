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
- PyTorch: a function called often with the same input shapes is traced
  into one graph of ATen operations (``torch.export``, non-strict, with the
  variables as inputs as on JAX) and the graph runs instead of the Python.
  A decoding step of ``convs2s_iwslt_de_en`` is then about 3x faster on CPU
  (docs/benchmarks.md): of the ~700 operations eager Keras runs per step,
  ~540 are same-dtype conversions and the export's metadata checks, which the
  trace drops. ``torch.compile`` is not used: Keras' tree utilities break its
  graph into pieces (8 graph breaks per ConvS2S step) and, on CPU, it ran the
  step slower than eager. Tracing costs about a second per input signature,
  so a signature runs eagerly (under ``torch.no_grad``) for its first
  ``TORCH_TRACE_AFTER`` calls and is traced at the next; a function that
  cannot be traced (data-dependent Python control flow) stays eager.

``compiled_while_loop`` compiles a whole loop: one compiled ``while`` on
TensorFlow and JAX; on PyTorch the body is compiled as above and the loop
(its condition read as a Python bool) runs in Python, as ``torch.export``
cannot trace a loop whose length depends on the data.

Only ``keras_posenc.generation`` and the benchmarks use them; tests run them on
all three backends.

Creating a model (``initialize_together``): on JAX, each initializer draw is an XLA
program compiled for its shape (Keras' JAX random functions are ``jax.jit``-ed with a
static shape), and compiling dozens of them made ``zoo.create("coatnet_0")`` at 64 x 64
take about 6 s against 0.5 s on TensorFlow. Inside ``initialize_together`` the
variables are created uninitialised (a ``keras.StatelessScope``), and at its end the
draws of all of them are traced once and evaluated with NumPy, their random bits from one
Threefry program compiled once per process (``_evaluate_on_host``; a draw NumPy does not
mirror is compiled as one program instead). Elsewhere it does nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

# Eager calls of one input signature before the PyTorch path traces it (see above):
# tracing took 0.3-1 s per signature on 2 cores, a traced ConvS2S step saves ~3.7 ms.
TORCH_TRACE_AFTER = 16


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
    (to float rounding). On TensorFlow and PyTorch, and inside another stateless
    scope, it does nothing.

    Args:
        who: named in the error raised if the block assigned a variable it did not
            create (only new variables may be assigned while building).
    """
    from keras.src.backend.common import global_state
    from keras.src.backend.common.stateless_scope import in_stateless_scope

    if keras.backend.backend() != "jax" or in_stateless_scope():
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


def compile_inference(
    function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
) -> Callable:
    """Compiles ``function(*tensors)`` that reads ``variables`` (a model's weights).

    Args:
        function: a function of tensors (nested tuples allowed) returning
            tensors; it must not assign variables.
        variables: every variable the function reads (``model.variables``).
        traceable: False for a function ``torch.export`` is known not to trace
            (on PyTorch it then runs eagerly under ``torch.no_grad`` without a
            failed attempt, whose warnings would reach the user): a random draw,
            since Keras' PyTorch random functions seed a ``torch.Generator`` from
            the value of the seed tensor. TensorFlow and JAX compile it anyway.

    Returns:
        A callable with the same signature; arguments must be tensors or NumPy
        arrays (Python ints would be constants in the compiled graph).
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
        return TorchTracedFunction(function, variables, traceable)
    return function


def compiled_while_loop(
    cond: Callable[..., Any],
    body: Callable[..., tuple],
    variables: Sequence[Any],
    traceable: bool = True,
) -> Callable[..., tuple]:
    """``loop(*loop_vars)``: ``ops.while_loop(cond, body, loop_vars)``, compiled.

    ``cond(*loop_vars)`` gives a scalar boolean tensor, ``body(*loop_vars)`` the
    next loop variables (same structure and shapes). TensorFlow and JAX compile
    the whole loop; PyTorch compiles ``body`` (:class:`TorchTracedFunction`)
    and loops in Python. ``traceable``: as in :func:`compile_inference`, for ``body``.
    """
    if keras.backend.backend() != "torch":
        return compile_inference(
            lambda *loop_vars: tuple(keras.ops.while_loop(cond, body, loop_vars)), variables
        )
    step = compile_inference(body, variables, traceable)

    def loop(*loop_vars: Any) -> tuple:
        while bool(keras.ops.convert_to_numpy(cond(*loop_vars))):
            loop_vars = tuple(step(*loop_vars))
        return loop_vars

    loop.step = step  # the traced body, for inspection
    return loop


class TorchTracedFunction:
    """A function of tensors and ``variables`` on PyTorch, traced per input signature.

    An input signature is the nesting of the arguments and each tensor's shape
    and dtype. The first ``TORCH_TRACE_AFTER`` calls of a signature run the
    function eagerly under ``torch.no_grad``; the next traces it with
    ``torch.export`` (non-strict: Keras' Python runs once on fake tensors,
    with the variables' values as graph inputs, so later weight updates are
    seen), drops the export's metadata checks and conversions to the same
    dtype, and runs the graph from then on. A signature whose tracing fails
    stays eager; ``trace_errors`` keeps why, by signature. With ``traceable=False``
    every call runs eagerly (see :func:`compile_inference`).
    """

    def __init__(
        self, function: Callable[..., Any], variables: Sequence[Any], traceable: bool = True
    ) -> None:
        self.function = function
        self.variables = list(variables)
        self.traceable = traceable
        self.graphs: dict[tuple, Any] = {}
        self.trace_errors: dict[tuple, str] = {}
        self._calls: dict[tuple, int] = {}

    def __call__(self, *args: Any) -> Any:
        import torch

        # NumPy arrays become tensors, as tf.function and jax.jit take them: a traced
        # graph needs tensors, and an array is no hashable part of a signature.
        args = keras.tree.map_structure(
            lambda leaf: ops.convert_to_tensor(leaf) if isinstance(leaf, np.ndarray) else leaf,
            args,
        )
        key = _signature(args)
        with torch.no_grad():
            graph = self.graphs.get(key)
            if graph is None and self.traceable and key not in self.trace_errors:
                self._calls[key] = self._calls.get(key, 0) + 1
                if self._calls[key] > TORCH_TRACE_AFTER:
                    graph = self._trace(key, args)
            if graph is None:
                return self.function(*args)
            return graph([v.value for v in self.variables], args)

    def _trace(self, key: tuple, args: tuple) -> Any:
        import torch

        function, variables = self.function, self.variables

        class Stateless(torch.nn.Module):
            def forward(self, values: list, args: tuple) -> Any:
                mapping = list(zip(variables, values, strict=True))
                with keras.StatelessScope(state_mapping=mapping):
                    return function(*args)

        values = [v.value for v in variables]
        try:
            program = torch.export.export(Stateless(), (values, args), strict=False)
        except Exception as error:  # noqa: BLE001  (any tracing failure: stay eager)
            self.trace_errors[key] = f"{type(error).__name__}: {error}"
            return None
        graph = self.graphs[key] = _without_no_ops(program.module())
        return graph


def _signature(args: tuple) -> tuple:
    import torch

    leaves, spec = torch.utils._pytree.tree_flatten(args)
    shapes = tuple(
        (tuple(leaf.shape), leaf.dtype) if isinstance(leaf, torch.Tensor) else ("value", leaf)
        for leaf in leaves
    )
    return str(spec), shapes


def _without_no_ops(module: Any) -> Any:
    """Simplifies a traced module's graph without changing what it computes.

    Drops ``torch.export``'s metadata assertions and ``to`` conversions that keep
    the dtype and device (they return their input), folds constants
    (:func:`_fold_constants`) and merges repeated operations
    (:func:`_merge_repeats`). A decoding step runs at batch 1, where an
    operation's dispatch costs about as much as its arithmetic: the Music
    Transformer's step (4 layers) went from 531 operations to 254
    (docs/development.md, "Compiled decoding").
    """
    import torch

    aten = torch.ops.aten
    graph = module.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten._assert_tensor_metadata.default:
            graph.erase_node(node)
        elif node.target in (aten.to.dtype, aten.to.dtype_layout) and not node.kwargs.get("copy"):
            before, after = node.args[0].meta.get("val"), node.meta.get("val")
            if (
                before is not None
                and after is not None
                and before.dtype == after.dtype
                and before.device == after.device
            ):
                node.replace_all_uses_with(node.args[0])
                graph.erase_node(node)
    graph.eliminate_dead_code()
    _fold_constants(module)
    _merge_repeats(graph)
    graph.eliminate_dead_code()
    module.recompile()
    return module


# Folded results larger than this stay computed at each call: a constant is kept in
# memory for as long as the traced graph lives.
_FOLD_LIMIT_BYTES = 1 << 20


def _fold_constants(module: Any) -> None:
    """Computes once, at trace time, every node of ``module``'s graph that depends on
    no graph input: constants ``torch.export`` lifted (and copies at each call with
    ``lift_fresh_copy``), ``arange`` / ``zeros`` / ``ones`` and what is computed from
    them alone (index vectors, masks of static lengths). The results become module
    attributes. Random operations are never folded (their draws must change), nor
    results over ``_FOLD_LIMIT_BYTES``.
    """
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    graph = module.graph
    values: dict[Any, Any] = {}
    for node in graph.nodes:
        if node.op == "get_attr":
            target = module
            for part in node.target.split("."):
                target = getattr(target, part)
            values[node] = target
            continue
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            continue
        inputs = [
            a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, torch.fx.Node)
        ]
        if not all(a in values for a in inputs):
            continue
        args, kwargs = tree_map(
            lambda a: values[a] if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs)
        )
        result = node.target(*args, **kwargs)
        if isinstance(result, torch.Tensor) and result.numel() * result.element_size() <= (
            _FOLD_LIMIT_BYTES
        ):
            values[node] = result
    # Each folded node that a computed node (or the output) still uses becomes an
    # attribute; equal constants (each layer builds its own) become one, so that the
    # operations applied to them can be merged next.
    kept: list[tuple[Any, Any]] = []
    for node, value in values.items():
        if node.op == "get_attr" or all(user in values for user in node.users):
            continue
        folded = next((n for v, n in kept if _same_tensor(v, value)), None)
        if folded is None:
            name = f"_folded_constant_{len(kept)}"
            module.register_buffer(name, value.detach().clone(), persistent=False)
            with graph.inserting_before(next(iter(graph.nodes))):
                folded = graph.get_attr(name)
            folded.meta = dict(node.meta)
            kept.append((value, folded))
        node.replace_all_uses_with(folded)
    graph.eliminate_dead_code()


def _same_tensor(a: Any, b: Any) -> bool:
    """Whether two folded constants are the same bytes (so 0.0 and -0.0 stay apart)."""
    import torch

    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    as_bytes = [t.reshape(-1).contiguous().view(torch.uint8) for t in (a, b)]
    return bool(as_bytes[0].equal(as_bytes[1]))


def _merge_repeats(graph: Any) -> None:
    """Common subexpression elimination: a node that applies the same operation to
    the same inputs as an earlier one is replaced by it (every layer of a decoder
    computes the same index and mask from the step's position). Random operations
    are kept."""
    import torch
    from torch.utils._pytree import tree_flatten

    seen: dict[Any, Any] = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            continue
        leaves, spec = tree_flatten((node.args, node.kwargs))
        key = (node.target, tuple(leaves), str(spec))
        try:
            earlier = seen.get(key)
        except TypeError:  # an argument that cannot be hashed: not merged
            continue
        if earlier is None:
            seen[key] = node
        else:
            node.replace_all_uses_with(earlier)
            graph.erase_node(node)


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


# How relative attention builds its relative logits, per backend (`relative_gather`);
# measured by benchmarks/relative_logits.py (docs/benchmarks.md, "Building the relative
# logits": 8 heads, L = 512-2048, eager, 2 CPU cores).
# - "bias" (a Toeplitz matrix, the same for every query): "rows" gathers rows of
#   `heads` values and transposes them, "toeplitz" copies strips of its diagonals
#   (`relative_index.toeplitz`), "windows" gathers runs of 16 keys of its diagonals
#   (`relative_index.toeplitz(method="windows")`; TensorFlow, whose transposed copy of
#   the rows cost more than the whole windowed build), "gather" reads an (L, L) index
#   into heads-first order. Lengths not known when traced fall back to "rows" or "gather".
# - "keys" (``q_i . w[idx(i, j)]``, per query): "rows" gathers rows of the transposed
#   (q_len * rows, batch * heads) products, "gather" is PyTorch's ``gather`` with
#   the index broadcast as a view (`take_along_last_axis`), "flat" / "flat_2d" read
#   the flattened products from a 3-D / 2-D view.
_RELATIVE_GATHER = {
    "tensorflow": {"bias": "windows", "keys": "rows"},
    "jax": {"bias": "gather", "keys": "flat"},
    "torch": {"bias": "toeplitz", "keys": "gather"},
}


def relative_gather(kind: str) -> str:
    """How relative logits of ``kind`` ("bias" or "keys") are gathered on this backend.

    "bias": ``"rows"``, ``"toeplitz"``, ``"windows"`` or ``"gather"``; "keys": ``"rows"``,
    ``"gather"`` (PyTorch only), ``"flat"`` or ``"flat_2d"``. Every method gives
    the same numbers; only speed differs.
    """
    return _RELATIVE_GATHER.get(keras.backend.backend(), _RELATIVE_GATHER["jax"])[kind]


def take_along_last_axis(values: Any, columns: Any, out: Any = None) -> Any:
    """``values[..., i, columns[i, c]]`` for (batch, heads, q_len, n) ``values``.

    PyTorch only (``relative_gather`` names it only there): ``torch.gather`` with the
    (q_len, m) index broadcast to the batch and heads as a view. Keras'
    ``take_along_axis`` would first convert the broadcast index to a full int64
    tensor (2 S at m = k_len), and its ``take`` on the flattened values runs
    PyTorch's slower index_select.
    """
    import torch

    index = torch.as_tensor(columns, device=values.device).long()
    index = index.expand(values.shape[0], values.shape[1], *index.shape)
    if out is None:
        return torch.gather(values, -1, index)
    return torch.gather(values, -1, index, out=out)


def fused_attention_pays() -> bool:
    """Whether ``fused_attention="auto"`` uses ``keras.ops.dot_product_attention``.

    PyTorch, when no gradient is being recorded (``torch.no_grad``, as in Keras'
    ``predict``): its CPU ``scaled_dot_product_attention`` then takes the relative
    logits as a float mask and never builds the probabilities. With it (and the
    faster reads of `relative_gather`) ``relative="keys"`` went from 6.4x to 1.9x
    MultiHeadAttention's time at L = 1024 with 8 heads (docs/benchmarks.md,
    "Relative attention against MultiHeadAttention"). While gradients are
    recorded, a mask that needs a gradient sends it to its unfused path, which
    was slower than the layer's own in a check at L = 1024. TensorFlow has no
    fused CPU kernel (Keras computes the same einsums), and JAX's was slower with
    a bias in the same check and raised the peak memory (docs/benchmarks.md).
    """
    if keras.backend.backend() != "torch":
        return False
    import torch

    return not torch.is_grad_enabled()


class Workspace:
    """Scratch tensors that one call of an attention layer reuses (PyTorch, no gradients).

    Why: a fresh (batch, heads, block, k_len) float32 tensor of several MiB is
    returned to the operating system when freed (glibc's ``malloc`` maps
    allocations above its dynamic mmap threshold, at most 32 MiB, separately),
    so the next block's tensor of the same size is mapped again and every page
    is zero-filled on first touch. On 2 CPU cores with 8 heads, filling a kept
    (batch, heads, L, L) tensor by ``torch.gather`` took 0.20x (L = 1024) and
    0.31x (L = 2048) of the time of filling a new one (docs/benchmarks.md,
    "Building the relative logits", group "fill"; why: "Block-sized buffers").
    PyTorch has no caching allocator on CPU, so the relative layers keep their
    few block-sized tensors here, for the duration of one call only: each block
    of queries overwrites the previous block's (`buffer`), and everything is freed
    when the call returns (the workspace is a local of the call).

    Only eager float32 PyTorch without gradients (`workspace`): ``out=`` and
    in-place operations would break autograd, and a traced graph (``torch.export``)
    manages its own memory.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, Any] = {}
        self._heads_first: list[tuple[Any, Any]] = []

    def buffer(self, name: str, shape: tuple, like: Any) -> Any:
        """An uninitialised float32 tensor of ``shape`` on ``like``'s device, kept as ``name``."""
        import torch

        current = self._buffers.get(name)
        if current is None or tuple(current.shape) != tuple(shape):
            current = None  # freed before the new one is allocated
            self._buffers.pop(name, None)
            current = torch.empty(shape, dtype=torch.float32, device=like.device)
            self._buffers[name] = current
        return current

    def owns(self, tensor: Any) -> bool:
        """Whether ``tensor`` is one of this workspace's buffers."""
        return any(tensor is buffer for buffer in self._buffers.values())

    def heads_first(self, x: Any) -> Any:
        """``x`` (batch, length, heads, dim) as a contiguous (batch, heads, length, dim) tensor.

        Made once per tensor and call: every block of queries attends to the same
        keys and values, which Keras' ``dot_product_attention`` would transpose
        and copy again for each block (at L = 2048 with blocks of 256 queries,
        15 ms of a 140 ms call).
        """
        for original, transposed in self._heads_first:
            if original is x:
                return transposed
        transposed = x.transpose(1, 2).contiguous()
        self._heads_first.append((x, transposed))
        return transposed


def fused_attention(q: Any, k: Any, v: Any, bias: Any, workspace: Workspace | None) -> Any:
    """``keras.ops.dot_product_attention(q, k, v, bias=bias, scale=1)`` with a workspace, or None.

    PyTorch's ``scaled_dot_product_attention`` on keys and values transposed
    once per call (`Workspace.heads_first`); ``q``, ``k``, ``v``: (batch, length,
    heads, head_dim) float32, ``bias`` None or float32 broadcastable to
    (batch, heads, q_len, k_len). None without a workspace.
    """
    if workspace is None:
        return None
    import torch.nn.functional as F

    output = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        workspace.heads_first(k),
        workspace.heads_first(v),
        attn_mask=bias,
        scale=1.0,
    )
    return output.transpose(1, 2)


def workspace(*tensors: Any) -> Workspace | None:
    """A `Workspace` for one call whose inputs are ``tensors``, or None where there is none.

    PyTorch without gradients (`fused_attention_pays`), eager (not while
    ``torch.export``, ``torch.compile`` or the TorchScript tracer of
    ``torch.onnx.export`` traces) and float32 inputs; elsewhere
    None, and the layers compute with plain ``keras.ops``.
    """
    if not fused_attention_pays():
        return None
    import torch

    if torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing():
        return None  # a traced graph (torch.export, torch.compile, torch.onnx) has no out=
    for tensor in tensors:
        if type(tensor) is not torch.Tensor:
            return None  # a symbolic or fake tensor (tracing), or not a tensor
        if tensor.dtype != torch.float32:
            return None
    return Workspace()


def softmax_logits(q: Any, k: Any, bias: Any, workspace: Workspace | None) -> Any:
    """``softmax(q k^T + bias)`` (batch, heads, q_len, k_len) in a workspace buffer, or None.

    ``q``, ``k``: (batch, length, heads, head_dim) float32 (``q`` scaled); ``bias``
    None or broadcastable to the logits. With a workspace (`workspace`) the logits
    are written into the bias itself when it is a full-size workspace buffer (one
    ``baddbmm``), else into the buffer "logits" (``matmul(out=)`` and an in-place
    add), and the softmax overwrites them: one block-sized tensor instead of four
    (the products, their sum with the bias, the probabilities and their cast).
    Returns None without a workspace; the caller computes it with ``keras.ops``.
    """
    if workspace is None:
        return None
    import torch

    batch, query_length, heads, head_dim = q.shape
    key_length = k.shape[1]
    shape = (batch, heads, query_length, key_length)
    queries = q.transpose(1, 2).reshape(batch * heads, query_length, head_dim)
    keys = k.permute(0, 2, 3, 1).reshape(batch * heads, head_dim, key_length)
    if bias is not None and tuple(bias.shape) == shape and workspace.owns(bias):
        logits = bias
        logits.view(batch * heads, query_length, key_length).baddbmm_(queries, keys)
    else:
        logits = workspace.buffer("logits", shape, q)
        torch.bmm(queries, keys, out=logits.view(batch * heads, query_length, key_length))
        if bias is not None:
            logits.add_(bias)
    return torch.softmax(logits, -1, out=logits)


# Eager TensorFlow: a block of attention with at least this many float32 logits per
# example runs as one XLA program (`compiled_block`).
COMPILED_BLOCK_MIN_LOGITS = 2**20

_COMPILED_BLOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compiled_block(owner: Any, method: str, logits: int, training: Any, dropout: float) -> Any:
    """``owner.<method>`` compiled by XLA, or None where the plain method runs.

    Eager TensorFlow runs an attention block op by op: with relative logits that is
    a few dozen operations, each writing a (heads, q_len, k_len) tensor (the index,
    the gathered logits and their transposed copy, their sum with the content
    logits, the probabilities). XLA fuses them into the products and the softmax.
    With 8 heads on 2 CPU cores, a layer call at L = 2048 took 0.6x its eager time
    (``relative="keys"``; MultiHeadAttention's 1.49x -> 0.98x), and XLA was faster
    down to L = 128; but compiling a block shape took 0.4-0.9 s (and XLA's first
    use in a process about 2 s more), which pays after about ten calls of that
    shape: hence the threshold (docs/benchmarks.md, "Relative attention against
    MultiHeadAttention", and docs/development.md, "Architecture").

    Only eager calls (inside ``tf.function``, ``predict`` or an export the graph
    is TensorFlow's own, unchanged), blocks of at least `COMPILED_BLOCK_MIN_LOGITS`
    logits per example (8 heads: L >= 363; smaller calls stay eager) and no active
    dropout (its random draws stay Keras'). Gradients flow through it (XLA compiles
    the backward pass too). One ``tf.function(jit_compile=True)`` per owner and
    method, kept while the owner lives; a caller passes every length-dependent
    offset as a tensor, so the equal blocks of one call share one program.
    """
    if keras.backend.backend() != "tensorflow" or not isinstance(logits, int):
        return None  # (lengths known only when run: a graph, which TensorFlow optimises itself)
    if logits < COMPILED_BLOCK_MIN_LOGITS:
        return None
    if dropout and not (isinstance(training, bool | int | type(None)) and not training):
        return None
    import tensorflow as tf

    if not tf.executing_eagerly():
        return None
    methods = _COMPILED_BLOCKS.setdefault(owner, {})
    compiled = methods.get(method)
    if compiled is None:
        # A weak reference: the compiled function is kept by the owner's entry and
        # must not keep the owner alive.
        reference = weakref.ref(owner)

        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(reference(), method)(*args, **kwargs)

        compiled = methods[method] = tf.function(call, jit_compile=True)
    return compiled


# Keys summed by one matrix product in `cumulative_sum` on TensorFlow.
_CUMSUM_BLOCK = 32


def cumulative_sum(values: Any, workspace: Workspace | None = None) -> Any:
    """``keras.ops.cumsum(values, axis=-1)`` in float32, the fastest way on this backend.

    - PyTorch: in place when ``values`` is a buffer of ``workspace`` (which its
      caller no longer reads): one block-sized tensor fewer (see `Workspace`).
    - TensorFlow: its ``Cumsum`` kernel scans the last axis element by element
      (8 heads, L = 2048 on 2 cores: 187 ms, longer than the rest of the
      attention), so the sums are built from blocks of `_CUMSUM_BLOCK` keys: the
      sums inside each block are one matrix product with a triangular matrix of
      ones, and the totals of the blocks before it (a cumsum over L / 32 values
      per row) are added: 50 ms, 0.28x (docs/benchmarks.md, "Building the
      relative logits", group "cumsum"). The sums differ from a sequential scan
      only by rounding.
    - JAX and PyTorch: ``keras.ops.cumsum`` (at L = 1024 and 2048 the blocked
      form took about 1.2x its time on JAX and 1.8x on PyTorch).
    """
    if workspace is not None and workspace.owns(values):
        return values.cumsum_(-1)
    values = ops.cast(values, "float32")
    if keras.backend.backend() != "tensorflow" or not isinstance(values.shape[-1], int):
        return ops.cumsum(values, axis=-1)
    return blocked_cumulative_sum(values)


def blocked_cumulative_sum(values: Any) -> Any:
    """The cumulative sums over the (static) last axis by blocks of `_CUMSUM_BLOCK` keys.

    The form `cumulative_sum` uses on TensorFlow; any backend computes it (the
    benchmark times it everywhere).
    """
    length = values.shape[-1]
    block = _CUMSUM_BLOCK
    blocks = -(-length // block)
    lead = tuple(ops.shape(values)[:-1])
    if blocks * block != length:
        values = ops.pad(values, [(0, 0)] * len(lead) + [(0, blocks * block - length)])
    values = ops.reshape(values, lead + (blocks, block))
    triangle = ops.convert_to_tensor(np.triu(np.ones((block, block), "float32")))
    within = ops.matmul(values, triangle)  # inclusive sums inside each block
    totals = within[..., -1]
    before = ops.cumsum(totals, axis=-1) - totals  # the sum of the blocks before
    sums = ops.reshape(within + ops.expand_dims(before, -1), lead + (blocks * block,))
    return sums[..., :length]


# Automatic query blocking (`_attention.query_block`): the float32 logits of one
# block for one example stay under this many bytes. Chosen from layer calls with
# query_block_size = 128 ... 1024 at L = 1024 and 2048 (8 heads, 2 CPU cores, by
# hand), then checked by benchmarks/relative_attention.py against the commit
# before (docs/benchmarks.md, "Block-sized buffers"):
# - TensorFlow: fewer, larger blocks (each block is a few dozen eager ops, and
#   larger products run faster); 64 MiB is two blocks at L = 2048.
# - PyTorch: 16 MiB. Larger tensors are mapped and zero-filled by the operating
#   system at every allocation (see `Workspace`); below glibc's largest mmap
#   threshold (32 MiB) a freed block's memory is kept and reused by the next.
# - JAX: 32 MiB (measured when query blocking was introduced).
_AUTO_BLOCK_BYTES = {"tensorflow": 64 * 2**20, "jax": 32 * 2**20, "torch": 16 * 2**20}


def auto_block_bytes() -> int:
    """The automatic query block's size in bytes of float32 logits per example, per backend."""
    return _AUTO_BLOCK_BYTES.get(keras.backend.backend(), 32 * 2**20)


def takes_toeplitz_bias(*tensors: Any) -> bool:
    """Whether `attention_with_toeplitz_bias` computes attention of these float tensors here.

    PyTorch's fused kernel, where it pays (`fused_attention_pays`), for float32 inputs.
    """
    return fused_attention_pays() and all(
        keras.backend.standardize_dtype(tensor.dtype) == "float32" for tensor in tensors
    )


def attention_with_toeplitz_bias(q: Any, k: Any, v: Any, diagonals: Any) -> Any:
    """Attention whose additive bias depends on ``j - i`` only, or None if not here.

    ``q``, ``k``, ``v``: (batch, length, heads, head_dim) float32, ``q`` already
    scaled; ``diagonals``: (heads, q_len + k_len - 1) float32, the bias of
    distance ``j - i = m - (q_len - 1)`` at ``m`` (`relative_index.toeplitz`).
    Returns (batch, q_len, heads, head_dim), or None where it does not pay
    (`fused_attention_pays`) or another dtype is given.

    PyTorch: ``scaled_dot_product_attention`` takes a strided view as its mask,
    so the (heads, q_len, k_len) bias is never built: with the keys (and values)
    in reverse order the bias of query i and reversed key j' is
    ``reversed_diagonals[i + j']``, a view with strides (1, 1) of one vector per
    head (a forward Toeplitz view would need a negative stride, which PyTorch
    refuses). Attention does not depend on the keys' order. With 8 heads at
    L = 1024 / 2048 it took 0.41 / 0.42 of the time of the same kernel given the
    bias built (building included; docs/benchmarks.md, "Building the relative
    logits").
    """
    if not takes_toeplitz_bias(q, k, v, diagonals):
        return None
    import torch
    import torch.nn.functional as F

    heads, count = diagonals.shape
    query_length, key_length = q.shape[1], k.shape[1]
    reversed_diagonals = torch.flip(diagonals, (-1,)).contiguous()
    bias = torch.as_strided(
        reversed_diagonals, (1, heads, query_length, key_length), (heads * count, count, 1, 1)
    )
    output = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        torch.flip(k, (1,)).transpose(1, 2),
        torch.flip(v, (1,)).transpose(1, 2),
        attn_mask=bias,
        scale=1.0,
    )
    return output.transpose(1, 2)


# How a depthwise convolution runs, per backend (`depthwise_method`). Measured by
# benchmarks/coatnet_parts.py (docs/benchmarks.md, "CoAtNet: where the time goes"): a 3 x 3
# depthwise convolution of an (8, 56, 56, 384) map, CoAtNet-0's first stage.
# - JAX: XLA's CPU convolution with feature groups was the slowest part of CoAtNet by far;
#   nine shifted multiply-adds (`layers.coatnet.depthwise_by_shifts`), which XLA fuses
#   into one loop, are several times faster.
# - PyTorch: Keras copies the channels-last map into channels-first and back around the
#   convolution; `torch_depthwise_conv` gives PyTorch the channels-last view instead.
# - TensorFlow: its own depthwise kernel was the fastest of the three.
_DEPTHWISE = {"jax": "shifts", "torch": "torch_channels_last", "tensorflow": "layer"}


def depthwise_method() -> str:
    """``"layer"`` (Keras' ``DepthwiseConv2D``), ``"shifts"`` or ``"torch_channels_last"``."""
    return _DEPTHWISE.get(keras.backend.backend(), "layer")


def torch_depthwise_conv(x: Any, kernel: Any, strides: int, pad: int) -> Any:
    """A depthwise convolution of a channels-last ``x`` on PyTorch without layout copies.

    ``x``: (batch, height, width, channels); ``kernel``: Keras' (k, k, channels, 1)
    depthwise kernel; zero padding ``pad`` on each side, then a valid convolution
    with ``strides``. PyTorch's convolution takes the channels-first *view* of a
    channels-last tensor (its strides say channels-last) and returns channels-last,
    so no copy is made either way; Keras' own path copies to channels-first and back.
    """
    import torch.nn.functional as F

    weight = kernel.permute(2, 3, 0, 1).to(x.dtype)  # (channels, 1, k, k)
    output = F.conv2d(
        x.permute(0, 3, 1, 2), weight, stride=strides, padding=pad, groups=x.shape[-1]
    )
    return output.permute(0, 2, 3, 1)


def exact_gelu_as_one_op() -> bool:
    """Whether `layers.activations.exact_gelu` is ``keras.ops.gelu(approximate=False)``.

    PyTorch: yes, its ``gelu`` is one fused kernel where the erf formula runs five
    elementwise passes (``erf`` and the multiplications were a fifth of CoAtNet-0's
    time there, docs/benchmarks.md). Elsewhere the erf formula stays: TensorFlow
    lowers Keras' exact GELU to ``erfc``, which no ONNX opset defines.
    """
    return keras.backend.backend() == "torch"


def pointwise_as_matmul() -> bool:
    """Whether `layers.coatnet.pointwise` runs a 1 x 1 convolution as a matrix product.

    PyTorch and JAX: yes, their Keras convolutions copy the channels-last map around
    the kernel (docs/benchmarks.md, "CoAtNet: where the time goes"). TensorFlow: no;
    the product was no faster there, and a model exported from TensorFlow keeps its
    ``Conv`` nodes, which ONNX Runtime ran about 8 % faster than the products
    (CoAtNet-0, one run).
    """
    return keras.backend.backend() != "tensorflow"


# --------------------------------------------------------------------------- concrete values


def concrete_values(x: Any) -> np.ndarray | None:
    """``x``'s values as a NumPy array where they exist now, else None.

    None for a symbolic tensor (a functional graph being built) and inside a traced
    function (``tf.function``, ``jax.jit``, ``torch.export`` or ``torch.jit.trace``),
    where values are not known: checks of values (token ids in their vocabulary, see
    ``keras_posenc.zoo.seq2seq.GeneratingModel``) run on eager calls only. Out-of-range
    ids were an error inside TensorFlow's and PyTorch's gathers and silently clipped
    by JAX's. Anything unexpected answers None: the check is skipped, never the call.
    """
    if isinstance(x, np.ndarray):
        return x
    if x is None or keras.backend.is_keras_tensor(x):
        return None
    backend = keras.backend.backend()
    try:
        if backend == "tensorflow":
            import tensorflow as tf

            if not tf.executing_eagerly():
                return None
        elif backend == "jax":
            import jax

            if isinstance(x, jax.core.Tracer):
                return None
        elif backend == "torch":
            import torch

            if torch.jit.is_tracing() or torch.compiler.is_compiling():
                return None
        return np.asarray(ops.convert_to_numpy(x))
    except Exception:  # noqa: BLE001  (fake tensors of torch.export, an API that moved)
        return None
