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
THIRD_PARTY_LOGGERS = ("", "tensorflow", "absl", "jax", "torch", "tf2onnx", "onnx", "h5py")


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
