"""How a kernel is chosen: the reference, or the active backend's override of it.

A kernel is a function of `keras_posenc.backend.common` (the reference, ``keras.ops``
only). A backend module (``tensorflow.py``, ``jax.py``, ``torch.py``, imported when the
first kernel is called) may register an override of it with `override`, saying on which
devices it was measured. `kernel` turns a reference into the function the layers call:

- the override runs where it was registered for the device computations run on
  (`device`); elsewhere, and inside `references_only`, the reference runs;
- an override returns `REFERENCE` for a call it does not take (a dtype, a traced
  graph, gradients being recorded), and the reference runs;
- a *guarded* override (one that uses a private or version-specific API) that raises
  falls back to the reference for good, with one warning naming the API's error.

The rule is written up in docs/development.md ("Backend kernels").
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import keras

# What an override returns for a call it does not take: the reference computes it.
REFERENCE = object()

# Errors that say a private API moved or changed (a missing module or attribute, a
# changed signature or behaviour), after which a guarded override gives up.
API_ERRORS = (ImportError, AttributeError, TypeError, NotImplementedError, RuntimeError, KeyError)

# Devices an override may name: where computations run by default (`device`).
DEVICES = ("cpu", "gpu", "tpu")


@dataclasses.dataclass
class Override:
    """A backend's replacement of one kernel, and where it was measured to pay."""

    function: Callable[..., Any]
    devices: tuple[str, ...] | None  # None: any device (a framework's own compiler)
    measured: str  # on which device and at which sizes it was measured, or why it exists
    guarded: bool  # uses a private or version-specific API: falls back if that fails
    failed: str | None = None  # why a guarded override gave up (it is not called again)


# Backend -> kernel name -> override. Keyed by backend: a process may import another
# backend's module (a docs build, a test importing every module), whose overrides must
# not replace the active backend's.
_OVERRIDES: dict[str, dict[str, Override]] = {}
_loaded: list[str] = []


def _from_environment() -> bool | frozenset:
    """``KERAS_POSENC_KERNELS``: ``reference`` (every kernel's reference in this process) or
    ``reference:NAME,NAME`` (those kernels' references, the other overrides kept)."""
    value = os.environ.get("KERAS_POSENC_KERNELS", "").strip().lower()
    if value == "reference":
        return True
    if value.startswith("reference:"):
        return frozenset(name.strip() for name in value.split(":", 1)[1].split(",") if name)
    return False


_references_only = contextvars.ContextVar("keras_posenc_references_only", default=False)
_ENVIRONMENT = _from_environment()


def override(
    reference: Callable[..., Any],
    *,
    backend: str,
    devices: tuple[str, ...] | None = ("cpu",),
    measured: str,
    guarded: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Registers the decorated function as ``backend``'s override of ``reference``.

    Args:
        reference: the kernel of `keras_posenc.backend.common` it replaces.
        backend: the Keras backend whose override it is (``"torch"``, ...).
        devices: the devices it applies on (those it was measured on), or None for
            any device (a framework's own compiler, a rule of the framework).
        measured: where and at which sizes it was measured to pay (or why it exists).
        guarded: it uses a private or version-specific API: if it raises, the
            reference runs from then on, after one warning.
    """
    unknown = set(devices or ()) - set(DEVICES)
    if unknown:
        raise ValueError(f"override: unknown devices {sorted(unknown)}; expected {DEVICES}")

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        entry = Override(function, devices, measured, guarded)
        _OVERRIDES.setdefault(backend, {})[reference.__name__] = entry
        return function

    return register


class Registrar:
    """The decorators of one backend module: ``override``, ``device_query``."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def override(
        self,
        reference: Callable[..., Any],
        *,
        devices: tuple[str, ...] | None = ("cpu",),
        measured: str,
        guarded: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """`override` for this module's backend."""
        return override(
            reference, backend=self.backend, devices=devices, measured=measured, guarded=guarded
        )

    def device_query(self, function: Callable[[], str]) -> Callable[[], str]:
        """Registers this backend's answer to `device` (a decorator)."""
        _DEVICE_QUERY[self.backend] = function
        return function


def _active() -> dict[str, Override]:
    """The active backend's overrides by kernel name (its module imported first)."""
    _load_backend()
    return _OVERRIDES.setdefault(keras.backend.backend(), {})


def _load_backend() -> None:
    """Imports the active backend's module once, which registers its overrides."""
    name = keras.backend.backend()
    if name in _loaded:
        return
    _loaded.append(name)
    if name in ("tensorflow", "jax", "torch"):
        importlib.import_module(f"keras_posenc.backend.{name}")


# Backend -> its device query, registered with `Registrar.device_query`.
_DEVICE_QUERY: dict[str, Callable[[], str]] = {}


@functools.cache
def _detected_device() -> str:
    _load_backend()
    query = _DEVICE_QUERY.get(keras.backend.backend())
    return query() if query is not None else "cpu"


def device() -> str:
    """Where computations run by default on this backend: ``"cpu"``, ``"gpu"`` or ``"tpu"``.

    Asked once per process (TensorFlow: a logical GPU exists; JAX: its default
    backend; PyTorch: CUDA or MPS is available, as Keras then places tensors there).
    """
    return _detected_device()


def chosen(name: str) -> Override | None:
    """The override that would run for kernel ``name`` here, or None for the reference."""
    _load_backend()
    if _references_only.get() or _ENVIRONMENT is True:
        return None
    if _ENVIRONMENT and name in _ENVIRONMENT:
        return None
    entry = _active().get(name)
    if entry is None or entry.failed is not None:
        return None
    if entry.devices is not None and device() not in entry.devices:
        return None
    return entry


def overrides() -> dict[str, Override]:
    """The active backend's overrides by kernel name (for docs, tests and benchmarks)."""
    return dict(_active())


_WARNED: set[str] = set()


def warn_once(what: str, error: BaseException) -> None:
    """One warning per process that ``what`` fell back to the reference after ``error``."""
    if what in _WARNED:
        return
    _WARNED.add(what)
    warnings.warn(
        f"keras_posenc.backend: the {keras.backend.backend()} override of `{what}` "
        f"relies on an API that failed ({type(error).__name__}: {error}); the portable "
        "reference is used from now on (same numbers, possibly slower).",
        RuntimeWarning,
        stacklevel=3,
    )


def give_up(name: str, error: BaseException) -> None:
    """A guarded override of kernel ``name`` failed: one warning, the reference from now on."""
    entry = _active().get(name)
    if entry is not None and entry.failed is None:
        entry.failed = f"{type(error).__name__}: {error}"
    warn_once(name, error)


def kernel(reference: Callable[..., Any]) -> Callable[..., Any]:
    """The function layers call for ``reference``: the active backend's override, or it."""
    name = reference.__name__

    @functools.wraps(reference)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        entry = chosen(name)
        if entry is not None:
            try:
                result = entry.function(*args, **kwargs)
            except API_ERRORS as error:
                if not entry.guarded:
                    raise
                give_up(name, error)
            else:
                if result is not REFERENCE:
                    return result
        return reference(*args, **kwargs)

    dispatch.reference = reference
    return dispatch


@contextlib.contextmanager
def references_only() -> Iterator[None]:
    """Every kernel called inside runs its portable reference (no backend override).

    For comparing an override with its reference (tests) and for ruling an override
    out when debugging; ``KERAS_POSENC_KERNELS=reference`` does it for a whole process,
    and ``KERAS_POSENC_KERNELS=reference:NAME,NAME`` for the named kernels only
    (``benchmarks/``: ``--against reference-kernels[:NAME,NAME]``).

    Examples:

        >>> from keras_posenc import backend
        >>> with backend.references_only():
        ...     backend.query_block_bytes() == 32 * 2**20
        True
    """
    token = _references_only.set(True)
    try:
        yield
    finally:
        _references_only.reset(token)
