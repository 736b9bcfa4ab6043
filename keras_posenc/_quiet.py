"""Third-party start-up lines hidden unless asked for; replayed only on failure.

Keras-free (the command line imports it before any backend). TensorFlow's C++
code writes lines to file descriptor 2 while it is imported and when it first
looks for a GPU (``failed call to cuInit``), and tf2onnx and LiteRT add
warnings and ``INFO`` lines when they run; none of them says anything a user of
keras-posenc asked for. So wherever keras-posenc itself imports Keras, its
backend, TensorFlow or keras-hub (:func:`quiet_import`), and while it exports
(``keras_posenc/export/``), that happens inside :func:`quieted`: TensorFlow's
C++ log level is 3 unless the user set ``TF_CPP_MIN_LOG_LEVEL`` (TensorFlow
reads it once, at import), Python warnings from outside keras-posenc are
ignored, and descriptor 2 is captured, to be replayed if the block raises.
``KERAS_POSENC_VERBOSE=1`` (what ``posenc --verbose`` sets) shows everything.
The length study's worker processes inherit a captured descriptor for the
pool's life (``experiments/_workers.run_jobs``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from types import ModuleType

# Set to 1 (posenc --verbose does, for its run and the processes it starts) to see the
# libraries' own lines: nothing is captured or silenced then.
VERBOSE_VARIABLE = "KERAS_POSENC_VERBOSE"

# Loggers of the libraries a command imports; without --verbose only their errors show.
_THIRD_PARTY_LOGGERS = ("", "tensorflow", "absl", "jax", "torch", "tf2onnx", "onnx", "h5py")


def verbose() -> bool:
    """Whether the user asked for the libraries' own lines (``KERAS_POSENC_VERBOSE``).

    Examples:

        >>> import os
        >>> verbose() == (os.environ.get("KERAS_POSENC_VERBOSE", "0") not in ("", "0"))
        True
    """
    return os.environ.get(VERBOSE_VARIABLE, "0") not in ("", "0")


@contextlib.contextmanager
def stderr_captured() -> Iterator[None]:
    """Points file descriptor 2 at a temporary file; replays it if the block raises.

    TensorFlow's C++ code writes some lines while it is imported, before its
    log level applies (absl logs everything to stderr until
    ``absl::InitializeLog()``, which TensorFlow does not call first), so
    ``TF_CPP_MIN_LOG_LEVEL`` cannot hide them; only the descriptor can.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    failed = False
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if failed:  # the captured lines may say why the import failed
                sink.seek(0)
                sys.stderr.write(sink.read().decode(errors="replace"))


@contextlib.contextmanager
def quieted() -> Iterator[None]:
    """The block's third-party lines hidden (see the module's docstring), unless
    :func:`verbose`; ``TF_CPP_MIN_LOG_LEVEL`` is restored after it.

    Examples:

        >>> with quieted():  # standard output is not captured
        ...     print("shown")
        shown
    """
    if verbose():
        yield
        return
    previous = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.filterwarnings("default", module="keras_posenc")
            with stderr_captured():
                yield
    finally:
        if previous is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)


def quiet_import(name: str) -> ModuleType:
    """``importlib.import_module(name)`` inside :func:`quieted` when not yet imported:
    how keras-posenc imports Keras, TensorFlow and keras-hub (which imports all of
    TensorFlow, on every backend: its tokenizers need ``tensorflow_text``).

    Examples:

        >>> quiet_import("json").dumps([1])
        '[1]'
    """
    if name in sys.modules:
        return sys.modules[name]
    with quieted():
        return importlib.import_module(name)


@contextlib.contextmanager
def quiet_runtime(verbose: bool = False) -> Iterator[None]:
    """Imports Keras, its backend and keras-posenc's layers for a command, quietly.

    Without ``verbose``, for the duration of the block: :func:`quieted` around the
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
    from keras_posenc import _registration

    names = ("TF_CPP_MIN_LOG_LEVEL", VERBOSE_VARIABLE)
    previous = {name: os.environ.get(name) for name in names}
    loggers = [logging.getLogger(name) for name in _THIRD_PARTY_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        if verbose:
            os.environ[VERBOSE_VARIABLE] = "1"
            _registration.register_all()
            yield
            return
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.filterwarnings("default", module="keras_posenc")
            for logger in loggers:
                logger.setLevel(logging.ERROR)
            with quieted():
                _registration.register_all()
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
