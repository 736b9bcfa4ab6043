"""The keras-posenc model zoo: complete models created by name.

>>> from keras_posenc import zoo
>>> names = zoo.list_models()          # every registered configuration
>>> # model = zoo.create(names[0], weights=None, **overrides)
>>> # model = zoo.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")  # downloads once

The base class of the encoder-decoders, :class:`Seq2SeqModel`, is public: a model of
one's own subclasses it (``encode``, ``decode``, cached decoding) and gets ``fit``,
``generate``, ``translate`` and export; :class:`MUSEEmbedding` (MUSE's scaled embedding,
sinusoidal positions and output projection) serves such a model too.

Each family module registers its named configurations with
:func:`register_model` when it is imported; this package imports every family
module, so ``list_models`` is complete as soon as ``keras_posenc.zoo`` is.
Model cards (parameters ours vs the paper's, measured speed, export status)
and recipes (training scripts on this package's public names) live in the
repository's top-level ``zoo/`` folder.

Presets (downloads, archives, preset folders) live in :mod:`keras_posenc.hub`, which sits
above the zoo; :func:`from_preset`, :func:`load_preset` and :func:`save_preset` here are
the hub's, reached through the registry's hook (``registry.preset_function``), not an
import.
"""

from __future__ import annotations

import os
from typing import Any

import keras

from keras_posenc.zoo import (
    coatnet,  # noqa: F401  (registers coatnet_0 .. coatnet_4)
    convs2s,  # noqa: F401  (registers convs2s_*)
    deberta,  # noqa: F401  (registers deberta_v3_*)
    decoder_lm,  # noqa: F401  (registers decoder_lm_tiny, decoder_lm_small)
    maxvit,  # noqa: F401  (registers maxvit_t .. maxvit_l and timm's maxvit_*)
    maxxvit,  # noqa: F401  (registers timm's maxxvit_*, maxxvitv2_*, coatnext_*)
    muse,  # noqa: F401  (registers muse_*)
    posenet,  # noqa: F401  (registers posenet_*)
    relative_transformers,  # noqa: F401  (registers shaw_transformer_*, music_transformer_*)
    roformer,  # noqa: F401  (registers roformer_v2_*)
    swin,  # noqa: F401  (registers swin_*)
    t5,  # noqa: F401  (registers t5_small, t5_base, t5_1.1_small, t5_1.1_base)
)
from keras_posenc.zoo.adapt import ZooFunctional, ZooModel
from keras_posenc.zoo.distribution import layout_map
from keras_posenc.zoo.features import FeaturePyramidModel, create_features, feature_pyramid
from keras_posenc.zoo.muse import MUSEEmbedding
from keras_posenc.zoo.registry import (
    ModelSpec,
    create,
    get_spec,
    list_models,
    preset_function,
    register_model,
    unregister_model,
)
from keras_posenc.zoo.seq2seq import Seq2SeqModel
from keras_posenc.zoo.shipped import shipped_presets

__all__ = [
    "ModelSpec",
    "create",
    "create_features",
    "feature_pyramid",
    "FeaturePyramidModel",
    "from_preset",
    "get_spec",
    "layout_map",
    "list_models",
    "load_preset",
    "MUSEEmbedding",
    "register_model",
    "save_preset",
    "Seq2SeqModel",
    "shipped_presets",
    "unregister_model",
    "ZooFunctional",
    "ZooModel",
]


def from_preset(source: str | os.PathLike, *, progress: bool = True) -> keras.Model:
    """The model of a preset source: :func:`keras_posenc.hub.from_preset` (see there).

    >>> # model = zoo.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")   # downloads once
    """
    return preset_function("from_preset")(source, progress=progress)


def load_preset(source: str | os.PathLike, *, progress: bool = True) -> Any:
    """A preset (model, preprocessor, class names, metadata): :func:`keras_posenc.hub.load_preset`.

    >>> # preset = zoo.load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")   # downloads once
    """
    return preset_function("load_preset")(source, progress=progress)


def save_preset(model: keras.Model, path: str | os.PathLike, **options: Any) -> str:
    """Saves a preset folder: :func:`keras_posenc.hub.save_preset` (its keyword arguments:
    ``preprocessor``, ``class_names``, ``metadata``, ``overwrite``).

    >>> import tempfile
    >>> inputs = keras.Input((3,))
    >>> model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    >>> folder = save_preset(model, tempfile.mkdtemp() + "/tiny")
    >>> load_preset(folder).metadata["num_classes"]
    2
    """
    return preset_function("save_preset")(model, path, **options)
