"""Pretrained models by name: hub downloads, fairseq archives and preset folders.

This package sits above the zoo (docs/development.md, "Architecture"): it imports the
zoo's registry and families and the converters, and the zoo imports nothing of it.
When imported (with the other registering packages, keras_posenc/_registration.py) it
hands its preset functions to the zoo registry
(:func:`keras_posenc.zoo.registry.set_preset_functions`), so that
``zoo.create(name, weights="hf://...")`` and ``zoo.from_preset`` reach it.

One module per job:

- :mod:`~keras_posenc.hub.presets`: sources (a folder, ``hf://ORG/REPO``, an archive's
  URL or file) resolved to preset folders: :func:`preset_path`, :func:`load_preset`,
  :func:`from_preset`, :func:`remove_cached`;
- :mod:`~keras_posenc.hub.folder`: the preset folder format, :func:`save_preset` and
  :class:`Preset`;
- :mod:`~keras_posenc.hub.preprocessing`: :class:`ImagePreprocessor` (timm's eval
  transform) and ImageNet's class names;
- :mod:`~keras_posenc.hub.timm`: timm repositories on the hub converted into presets,
  through :mod:`~keras_posenc.hub.downloads` (``huggingface_hub``);
- :mod:`~keras_posenc.hub.fairseq`: fairseq translation archives converted into presets,
  through :mod:`~keras_posenc.hub.archives` (streamed download, safe extraction).

>>> from keras_posenc import hub
>>> # model = hub.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")   # downloads once
>>> # preset = hub.load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
>>> # preset.classify(["cat.jpg"], top=5)
>>> hub.remove_cached("hf://nobody/nothing")
False
"""

from keras_posenc._sources import HUB_PREFIX, cache_folder
from keras_posenc.hub.folder import Preset, save_preset
from keras_posenc.hub.preprocessing import ImagePreprocessor, imagenet_class_names
from keras_posenc.hub.presets import (
    from_preset,
    load_preset,
    preset_path,
    preset_weights,
    remove_cached,
)
from keras_posenc.zoo import registry as _registry

__all__ = [
    "HUB_PREFIX",
    "ImagePreprocessor",
    "Preset",
    "cache_folder",
    "from_preset",
    "imagenet_class_names",
    "load_preset",
    "preset_path",
    "remove_cached",
    "save_preset",
]

# The zoo reaches presets through this registration, not an import (the zoo sits below).
_registry.set_preset_functions(
    from_preset=from_preset,
    load_preset=load_preset,
    save_preset=save_preset,
    weights=preset_weights,
)
