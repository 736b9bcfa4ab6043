"""Keras layers of keras-posenc, one module per family.

Every public class here is a ``keras.layers.Layer`` written with ``keras.ops``
only, registered for serialisation under the ``keras_posenc`` package, and
runs unchanged on TensorFlow, JAX and PyTorch. Layers never import the zoo
(a ruff rule enforces it); the zoo is assembled from these layers.
"""

__all__: list[str] = []
