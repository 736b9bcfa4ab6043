"""Registering keras-posenc's serializable classes without importing Keras early.

``import keras_posenc`` must stay light, so that ``posenc --help`` starts in a
fraction of a second (importing Keras imports its backend, several seconds for
TensorFlow). Yet ``import keras_posenc`` followed by
``keras.saving.load_model("model.keras")`` must find every class the package
registers with ``keras.saving.register_keras_serializable``: Keras looks them up
by registered name and imports nothing itself for a package other than its own.

The rule kept here ("Import time" in docs/development.md): once ``keras`` and
``keras_posenc`` are both imported and no ``keras_posenc`` module is still being
imported, the modules that register classes (:data:`REGISTERING`) are imported
too. If ``keras`` is already loaded when ``keras_posenc`` is, that happens at
once; otherwise a finder placed first on ``sys.meta_path`` watches the imports of
``keras`` and of ``keras_posenc``'s submodules and does it when the last of them
finishes, then removes itself. Importing ``keras_posenc.cli`` (or any module
that does not import Keras) triggers nothing.

Examples:

    >>> import sys
    >>> import keras_posenc
    >>> "keras" not in sys.modules or "keras_posenc.zoo" in sys.modules
    True
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from keras_posenc import _quiet

# The subpackages whose import registers every serializable class (layers, zoo
# models, the probe's PosENet, the hub's ImagePreprocessor): what ``import keras_posenc``
# imported eagerly before. The hub also hands the zoo its preset functions
# (keras_posenc/hub/__init__.py), so ``zoo.create(name, weights="hf://...")`` reaches it.
REGISTERING = ("keras_posenc.layers", "keras_posenc.zoo", "keras_posenc.probe", "keras_posenc.hub")
# keras-hub's API over the zoo (keras_posenc/models/): registered once keras_hub is imported
# too, as a keras-hub ``from_preset`` needs it. Importing keras_hub imports TensorFlow, whose
# start-up lines and seconds a JAX or PyTorch user of the zoo alone should not pay.
KERAS_HUB_REGISTERING = ("keras_posenc.models",)


def register_all() -> None:
    """Imports :data:`REGISTERING` (imports Keras and its backend), and
    :data:`KERAS_HUB_REGISTERING` now or when keras_hub is imported."""
    _FINDER.done = True
    _FINDER.uninstall()
    _quiet.quiet_import("keras")  # TensorFlow's start-up lines hidden (keras_posenc/_quiet.py)
    _HUB_FINDER.registering += 1
    try:
        for name in REGISTERING:
            importlib.import_module(name)
    finally:
        _HUB_FINDER.registering -= 1
    if "keras_hub" in sys.modules:
        register_keras_hub()
    else:
        _HUB_FINDER.install()


def register_keras_hub() -> None:
    """Imports :data:`KERAS_HUB_REGISTERING` (imports keras_hub)."""
    _HUB_FINDER.uninstall()
    for name in KERAS_HUB_REGISTERING:
        importlib.import_module(name)


def _watched_spec(
    watcher: importlib.abc.MetaPathFinder,
    fullname: str,
    path: Sequence[str] | None,
    target: ModuleType | None,
    wrap: Any,
) -> importlib.machinery.ModuleSpec | None:
    """The spec the finders after ``watcher`` give ``fullname``, its loader wrapped by
    ``wrap`` (a loader that runs the module's own, then tells the watcher)."""
    for finder in sys.meta_path:  # the finder that would have found it without us
        if finder is watcher or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = wrap(spec.loader)
            return spec
    return None


class _WatchingLoader(importlib.abc.Loader):
    """Runs a module's own loader, then tells the finder that the import finished."""

    def __init__(self, loader: Any, finder: _RegisterWhenKerasLoads, package: bool) -> None:
        self._loader, self._finder, self._package = loader, finder, package

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        state = self._finder.state
        state.depth = getattr(state, "depth", 0) + self._package
        try:
            # Keras imported after keras_posenc, by anyone: quietly (keras_posenc/_quiet.py).
            with contextlib.nullcontext() if self._package else _quiet.quieted():
                self._loader.exec_module(module)
        finally:
            state.depth -= self._package
        self._finder.imported()

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader, ...
        return getattr(self._loader, name)


class _RegisterWhenKerasLoads(importlib.abc.MetaPathFinder):
    """Watches ``keras`` and ``keras_posenc.*`` imports; see the module docstring."""

    def __init__(self) -> None:
        self.state = threading.local()  # depth: keras_posenc modules being imported
        self.done = False

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package = fullname.startswith("keras_posenc.")
        if self.done or not (package or fullname == "keras"):
            return None
        return _watched_spec(
            self, fullname, path, target, lambda loader: _WatchingLoader(loader, self, package)
        )

    def imported(self) -> None:
        """After an import finished: register if Keras is loaded and no import is open."""
        if self.done or getattr(self.state, "depth", 0) or "keras" not in sys.modules:
            return
        register_all()


_FINDER = _RegisterWhenKerasLoads()


class _KerasHubLoader(importlib.abc.Loader):
    """Runs keras_hub's own loader, then registers keras-hub's API over the zoo."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # Imported by keras_posenc's own registering imports: register_all does it after.
        if not _HUB_FINDER.registering:
            register_keras_hub()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _RegisterWhenKerasHubLoads(importlib.abc.MetaPathFinder):
    """Watches the import of ``keras_hub`` after :func:`register_all`."""

    def __init__(self) -> None:
        self.registering = 0  # register_all's imports under way

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "keras_hub":
            return None
        return _watched_spec(self, fullname, path, target, _KerasHubLoader)


_HUB_FINDER = _RegisterWhenKerasHubLoads()


def watch() -> None:
    """Called by ``keras_posenc/__init__.py``: register now or when Keras loads."""
    if "keras" in sys.modules:
        register_all()
    else:
        _FINDER.install()


@contextlib.contextmanager
def quiet_runtime(verbose: bool = False) -> Iterator[None]:
    """Imports Keras, its backend and keras-posenc's layers for a command, quietly.

    Without ``verbose``, for the duration of the block: `_quiet.quieted` around the
    imports of Keras, its backend and TensorFlow (which keras-hub and the exporters
    import on every backend; its lines come at import, whenever that is), and
    third-party loggers show only errors. With ``verbose``, ``KERAS_POSENC_VERBOSE``
    is 1 in the block (and the processes it starts) and nothing is hidden.
    Settings are restored after the block (the environment too), so ``posenc``
    used from Python leaves no trace.

    Examples:

        >>> with quiet_runtime():
        ...     import keras
        >>> keras.__name__
        'keras'
    """
    names = ("TF_CPP_MIN_LOG_LEVEL", _quiet.VERBOSE_VARIABLE)
    previous = {name: os.environ.get(name) for name in names}
    loggers = [logging.getLogger(name) for name in _quiet.THIRD_PARTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        if verbose:
            os.environ[_quiet.VERBOSE_VARIABLE] = "1"
            register_all()
            yield
            return
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.filterwarnings("default", module="keras_posenc")
            for logger in loggers:
                logger.setLevel(logging.ERROR)
            with _quiet.quieted():
                register_all()
                if importlib.util.find_spec("tensorflow") is not None:
                    importlib.import_module("tensorflow")
            for logger in loggers:  # again: importing TensorFlow configures its logger
                logger.setLevel(logging.ERROR)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
