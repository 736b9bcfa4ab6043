"""keras-hub's API over the zoo: ``Backbone``, ``Task`` and preprocessor classes per family.

keras-hub's ``from_preset`` loads a preset that ``save_to_preset`` wrote, whichever
class wrote it, by the registered names in its ``config.json`` and ``task.json``: once
``keras_posenc`` and Keras are imported, every class here is registered (see
keras_posenc/_registration.py), so ``keras_hub.models.Backbone.from_preset(folder)``
rebuilds ours. The zoo stays the short way in: ``zoo.create(name)`` builds the same
layers.

Examples:

    >>> import keras_hub
    >>> from keras_posenc import models
    >>> issubclass(models.ZooBackbone, keras_hub.models.Backbone)
    True
"""

from keras_posenc.models._backbone import ZooBackbone, copy_weights

# Images: CoAtNet, MaxViT, MaxxViT, Swin (backbones, classifiers, preprocessors, presets).
from keras_posenc.models.image import (
    CoAtNetBackbone,
    CoAtNetImageClassifier,
    CoAtNetImageClassifierPreprocessor,
    CoAtNetImageConverter,
    MaxViTBackbone,
    MaxViTImageClassifier,
    MaxViTImageClassifierPreprocessor,
    MaxViTImageConverter,
    MaxxViTBackbone,
    MaxxViTImageClassifier,
    MaxxViTImageClassifierPreprocessor,
    MaxxViTImageConverter,
    SwinBackbone,
    SwinImageClassifier,
    SwinImageClassifierPreprocessor,
    SwinImageConverter,
)
from keras_posenc.models.image_base import (
    ZooImageBackbone,
    ZooImageClassifier,
    ZooImageClassifierPreprocessor,
    ZooImageConverter,
)
from keras_posenc.models.image_presets import to_keras_hub_preset

__all__ = [
    "ZooBackbone",
    "copy_weights",
    # Images
    "CoAtNetBackbone",
    "CoAtNetImageClassifier",
    "CoAtNetImageClassifierPreprocessor",
    "CoAtNetImageConverter",
    "MaxViTBackbone",
    "MaxViTImageClassifier",
    "MaxViTImageClassifierPreprocessor",
    "MaxViTImageConverter",
    "MaxxViTBackbone",
    "MaxxViTImageClassifier",
    "MaxxViTImageClassifierPreprocessor",
    "MaxxViTImageConverter",
    "SwinBackbone",
    "SwinImageClassifier",
    "SwinImageClassifierPreprocessor",
    "SwinImageConverter",
    "ZooImageBackbone",
    "ZooImageClassifier",
    "ZooImageClassifierPreprocessor",
    "ZooImageConverter",
    "to_keras_hub_preset",
]
