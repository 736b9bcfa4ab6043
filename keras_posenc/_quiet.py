"""Standard error captured at the file-descriptor level, replayed only on failure.

Keras-free (the command line imports it before any backend): `stderr_captured`
hides what libraries' C code writes to file descriptor 2 (TensorFlow's start-up
lines, which no log level hides), for the command line's imports and for the
length study's worker processes, which inherit the captured descriptor.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


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
