"""The export worker: from JAX and PyTorch, a model is saved as ``.keras`` and exported by
a TensorFlow subprocess (``python -m keras_posenc.export REQUEST``, which runs
:func:`_worker` through keras_posenc/export/__main__.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import keras

from keras_posenc import _quiet
from keras_posenc.export.tensorflow_route import _export_on_tensorflow
from keras_posenc.layers._checks import excerpt, innermost_error


def _export_in_subprocess(
    model: keras.Model,
    path: str,
    format: str,
    specs: list[dict],
    output_names: list[str] | None = None,
    verbose: bool = False,
) -> dict:
    """Exports in a TensorFlow process; its output is shown only if it fails or ``verbose``."""
    verbose = verbose or _quiet.verbose()
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "model.keras")
        model.save(source)
        request = os.path.join(folder, "request.json")
        with open(request, "w") as handle:
            json.dump(
                {
                    "source": source,
                    "path": path,
                    "format": format,
                    "specs": specs,
                    "output_names": output_names,
                },
                handle,
            )
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        if not verbose:
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        result = subprocess.run(
            [sys.executable, "-m", "keras_posenc.export", request],
            capture_output=not verbose,
            text=True,
            env=env,
            timeout=3600,
        )
        if result.returncode != 0:
            raise RuntimeError(_worker_failure(format, request, result))
        with open(request + ".out") as handle:
            return json.load(handle)


def _worker_failure(format: str, request: str, result: subprocess.CompletedProcess) -> str:
    """The message for a failed export subprocess: the worker's own error first (what
    it wrote to ``request.error``; else the last line it printed), then what to check."""
    said = True
    try:
        with open(request + ".error") as handle:
            failure = json.load(handle)
    except (OSError, ValueError):  # it died before it could say (e.g. out of memory)
        said = False
        lines = result.stderr.strip().splitlines()
        last = lines[-1] if lines else "nothing printed"
        failure = {"stage": None, "error": f"exit status {result.returncode}, {excerpt(last)}"}
    message = (
        f"export_model: exporting to {format!r} in a TensorFlow subprocess failed: "
        f"{failure['error']}"
    )
    if failure["stage"] == "load":
        message += (
            "\nThe model is saved as .keras and loaded there, in a new Python process: every "
            "custom layer must be registered with @keras.saving.register_keras_serializable "
            "and importable in that process (every keras-posenc layer is). With "
            "KERAS_BACKEND=tensorflow the model is exported directly, without reloading it."
        )
    if result.stderr and not said:
        # It died without naming its error: what it printed last is all there is. When it
        # named it, its output is the traceback of that error (verbose=True shows it).
        message += "\nIts last lines:\n" + "\n".join(result.stderr.strip().splitlines()[-15:])
    return message


def _worker(request_path: str) -> None:
    """Subprocess entry point: load a .keras file on TensorFlow and export it."""
    import keras_posenc  # noqa: F401  (registers every keras-posenc layer)

    with open(request_path) as handle:
        request = json.load(handle)
    stage = "load"
    try:
        model = keras.saving.load_model(request["source"])
        stage = "export"
        details = _export_on_tensorflow(
            model,
            request["path"],
            request["format"],
            request["specs"],
            request.get("output_names"),
        )
    except Exception as error:
        # Keras wraps the cause (e.g. "Could not locate class ...") in a longer message:
        # the innermost error is the one to show first.
        cause = innermost_error(error)
        text = f"{type(cause).__name__}: {excerpt(cause, 25)}"
        with open(request_path + ".error", "w") as handle:
            json.dump({"stage": stage, "error": text}, handle)
        raise
    with open(request_path + ".out", "w") as handle:
        json.dump(details, handle)
