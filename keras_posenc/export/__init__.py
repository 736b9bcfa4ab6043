"""Export models to TensorFlow SavedModel, ONNX and LiteRT from any backend, verified.

Keras' own ``model.export`` works on the TensorFlow backend for both formats;
from PyTorch and JAX it is broken or incomplete with the versions this project
supports (SavedModel from torch needs torch_xla; ONNX from JAX needs jax2onnx
and fails on dynamic lengths). :func:`export_model` therefore exports on
TensorFlow: directly when TensorFlow is the active backend, otherwise by saving
the model as ``.keras`` and loading it in a subprocess with
``KERAS_BACKEND=tensorflow`` (docs/development.md, "Architecture": Export). It then
runs the artifact (onnxruntime, ``tf.saved_model.load``, or LiteRT's own interpreter from
``ai_edge_litert`` for a ``.tflite`` file) on the same random inputs as
the Keras model, at two sequence lengths when the model has dynamic axes, and
reports the largest absolute difference. Outputs that are not finite fail the
verification. The artifact is written to a hidden folder beside the target and
moved into place only once it has verified, so a failed export leaves nothing
at the target; an existing target is replaced only with ``overwrite=True``.

On PyTorch, ``route="native"`` exports ONNX with PyTorch's own exporter
instead (``torch.onnx.export``, TorchScript tracing), with no TensorFlow
subprocess. Before a tf2onnx conversion, the memory it will need is estimated
from the parameter count and compared with the memory available.

Every route names the artifact's inputs and outputs alike, after the model's
``keras.Input`` layers and output layers (or the keys of a dict of outputs):
:func:`export_names` gives them, docs/guides/export.md lists them per zoo family.

The package has one module per job (docs/development.md, "Architecture"):
``model`` (:func:`export_model` and its route), ``report``, ``names``, ``inputs``,
``precision``, ``staging`` (atomic writes), ``memory`` (the tf2onnx estimate),
``tensorflow_route``, ``worker`` (the TensorFlow subprocess), ``native_torch``,
``artifacts``, ``verification`` and ``decoding`` (seq2seq and language-model
graphs).
"""

from keras_posenc._packages import (
    EXPORTER_PACKAGES,
    PackageStatus,
    exporter_status,
    package_found,
    package_status,
)
from keras_posenc.export.decoding import export_language_model, export_seq2seq
from keras_posenc.export.memory import (
    TF2ONNX_BASE_BYTES,
    TF2ONNX_BYTES_PER_PARAMETER,
    available_memory,
    check_tf2onnx_memory,
    tf2onnx_memory_estimate,
)
from keras_posenc.export.model import FORMATS, ROUTES, export_model
from keras_posenc.export.names import export_names
from keras_posenc.export.report import ExportReport

# In the order of the API page (docs/api/export.md orders its members by this list).
__all__ = [
    "export_model",
    "ExportReport",
    "export_names",
    "export_seq2seq",
    "export_language_model",
    "FORMATS",
    "ROUTES",
    "available_memory",
    "tf2onnx_memory_estimate",
    "check_tf2onnx_memory",
    "TF2ONNX_BASE_BYTES",
    "TF2ONNX_BYTES_PER_PARAMETER",
    "EXPORTER_PACKAGES",
    "PackageStatus",
    "exporter_status",
    "package_found",
    "package_status",
]
