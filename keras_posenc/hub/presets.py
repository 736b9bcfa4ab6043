"""Sources resolved to preset folders: pretrained weights by name (timm's CoAtNets and
MaxViTs on the Hugging Face hub), fairseq translation archives, and preset folders
(their format: :mod:`keras_posenc.hub.folder`).

A *source* is a preset folder, ``hf://ORG/REPO``, a timm model repository on the hub
(``hf://timm/coatnet_0_rw_224.sw_in1k``), or a fairseq translation archive: its URL
(``https://dl.fbaipublicfiles.com/fairseq/models/wmt14.v2.en-fr.fconv-py.tar.bz2``) or
the archive file. An archive is downloaded (streamed, checked), extracted safely,
converted with its text pipeline (:class:`~keras_posenc.zoo.translation.
TranslationPreprocessor`) and cached like a hub source. A hub source is downloaded with
``huggingface_hub`` (which honours ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` and its cache,
``HF_HOME`` / ``HF_HUB_CACHE``), converted once, and kept as a preset folder in
:func:`cache_folder` (``KERAS_POSENC_HOME``); later loads read that folder and ask the hub
nothing.

>>> from keras_posenc import hub
>>> # model = hub.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")   # downloads once
>>> # preset = hub.load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
>>> # preset.classify(["cat.jpg"], top=5)
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil

import keras

from keras_posenc._sources import HUB_PREFIX, cache_folder
from keras_posenc.hub import archives
from keras_posenc.hub.fairseq import _archive_preset, _archive_target
from keras_posenc.hub.folder import (
    _REQUIRED,
    CLASS_NAMES_FILE,
    CONFIG_FILE,
    METADATA_FILE,
    PREPROCESSOR_FILE,
    TASK_FILE,
    WEIGHTS_FILE,
    Preset,
    _class_count,
    _is_preset,
    _read_json,
)
from keras_posenc.hub.timm import _REPO_PATTERN, _hub_preset

__all__ = ["from_preset", "load_preset", "preset_path", "preset_weights", "remove_cached"]


def load_preset(source: str | os.PathLike, *, progress: bool = True) -> Preset:
    """A preset: its model, preprocessor, class names and metadata.

    Args:
        source: a preset folder (:func:`save_preset`'s, or keras-hub's format written by
            a ``keras_posenc.models`` task's ``save_to_preset``: its model is the zoo's,
            ``task.to_zoo()``, its preprocessor the task's image converter, or a
            translation task's text pipeline),
            ``hf://ORG/REPO``, a timm CoAtNet or MaxViT repository on the Hugging Face
            hub, or a fairseq translation archive's URL or file. **A hub source or URL
            is downloaded** (once; see :func:`preset_path`). A translation preset's model gets its
            preprocessor as ``model.preprocessor``, for ``model.translate``.
        progress: show download and conversion progress bars.

    Returns:
        The :class:`Preset`.

    Raises:
        ValueError: a folder that is not a preset, or a hub repository that cannot be
            converted (see :func:`preset_path`).
        ConnectionError: a hub source neither cached nor reachable (offline).

    Example:

    >>> # preset = load_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
    >>> # preset.model.output_shape, preset.class_names[0]   # ((None, 1000), 'tench')
    """
    from keras_posenc.zoo.registry import configuration_errors

    who = "load_preset"
    folder = preset_path(source, progress=progress)
    if os.path.isfile(os.path.join(folder, TASK_FILE)):
        return _keras_hub_preset(folder, who)
    config = _read_json(os.path.join(folder, CONFIG_FILE), who)
    with configuration_errors(os.path.join(folder, CONFIG_FILE), who):
        model = keras.saving.deserialize_keras_object(config)
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"{who}: {os.path.join(folder, CONFIG_FILE)!r} describes a "
            f"{type(model).__name__}, not a keras.Model."
        )
    model.load_weights(os.path.join(folder, WEIGHTS_FILE))
    preprocessor = None
    if os.path.isfile(os.path.join(folder, PREPROCESSOR_FILE)):
        described = _read_json(os.path.join(folder, PREPROCESSOR_FILE), who)
        with configuration_errors(os.path.join(folder, PREPROCESSOR_FILE), who):
            preprocessor = keras.saving.deserialize_keras_object(described)
        if hasattr(preprocessor, "load_assets"):
            preprocessor.load_assets(os.path.join(folder, "assets"))
            # model.translate(texts) after zoo.from_preset(...) finds it here.
            model.preprocessor = preprocessor
    class_names = None
    if os.path.isfile(os.path.join(folder, CLASS_NAMES_FILE)):
        class_names = [str(n) for n in _read_json(os.path.join(folder, CLASS_NAMES_FILE), who)]
    metadata = _read_json(os.path.join(folder, METADATA_FILE), who)
    return Preset(model, preprocessor, class_names, metadata, folder)


def _keras_hub_preset(folder: str, who: str) -> Preset:
    """A keras-hub preset of keras_posenc.models' classes (a task's ``save_to_preset``):
    its task loaded by keras-hub, then the zoo's model of it (``task.to_zoo()``) and the
    task's image converter as the preprocessor."""
    from keras_posenc.zoo.registry import configuration_errors

    # Importing keras_hub registers keras_posenc.models' classes (keras_posenc/_registration.py).
    importlib.import_module("keras_hub")
    described = _read_json(os.path.join(folder, TASK_FILE), who)
    registered = described.get("registered_name") if isinstance(described, dict) else None
    task_cls = keras.saving.get_registered_object(registered) if registered else None
    if task_cls is None or not hasattr(task_cls, "to_zoo"):
        raise ValueError(
            f"{who}: {folder!r} is a keras-hub preset of {registered or 'an unknown class'}, "
            "not of keras_posenc.models' classes; load it with keras-hub's from_preset."
        )
    with configuration_errors(os.path.join(folder, TASK_FILE), who):
        task = task_cls.from_preset(folder)
    model = task.to_zoo()
    # An image task's converter; a translation task's text pipeline (its zoo model's
    # `preprocessor`, for `translate`: keras_posenc/models/translation.py); else the task's.
    preprocessor = getattr(task.preprocessor, "image_converter", None)
    if preprocessor is None:
        preprocessor = getattr(model, "preprocessor", None) or task.preprocessor
    class_names = None
    if os.path.isfile(os.path.join(folder, CLASS_NAMES_FILE)):
        class_names = [str(n) for n in _read_json(os.path.join(folder, CLASS_NAMES_FILE), who)]
    metadata = _read_json(os.path.join(folder, METADATA_FILE), who)
    return Preset(model, preprocessor, class_names, metadata, folder)


def from_preset(source: str | os.PathLike, *, progress: bool = True) -> keras.Model:
    """The model of a preset folder, a timm repository on the hub or a fairseq archive.

    Args:
        source: a preset folder, ``hf://ORG/REPO`` (e.g.
            ``"hf://timm/coatnet_0_rw_224.sw_in1k"``), or a fairseq translation
            archive's URL or file (e.g. ``"https://dl.fbaipublicfiles.com/fairseq/
            models/wmt14.v2.en-fr.fconv-py.tar.bz2"``). **A hub source or URL is
            downloaded and converted on first use**, then read from the cache
            (:func:`preset_path`). A translation model comes with its text pipeline
            (``model.translate(texts)``).
        progress: show download and conversion progress bars.

    Returns:
        The ``keras.Model`` with the preset's weights; it takes preprocessed images
        (:func:`load_preset` gives the preprocessor and class names too).

    Raises:
        ValueError, ConnectionError: see :func:`load_preset`.

    Example:

    >>> from keras_posenc import zoo
    >>> # model = zoo.from_preset("hf://timm/coatnet_0_rw_224.sw_in1k")
    >>> # model.output_shape   # (None, 1000)
    """
    return load_preset(source, progress=progress).model


def preset_path(source: str | os.PathLike, *, progress: bool = True) -> str:
    """The preset folder of ``source``; for ``hf://ORG/REPO``, its converted copy in the cache.

    A hub source is converted once: the first call downloads the repository's
    ``config.json`` (timm's pretrained config) and weights (``model.safetensors``, else
    ``pytorch_model.bin``) with ``huggingface_hub``, converts them with the converter of
    the zoo family named by the config's ``architecture`` (timm's ``coatnet_*_rw_224``
    CoAtNets: :func:`~keras_posenc.convert.from_timm_coatnet`), and writes the preset
    (model, :class:`ImagePreprocessor` from the pretrained config, class names: the
    config's ``label_names``, else ImageNet's for 1000 classes) atomically to
    ``cache_folder()/hf/ORG/REPO``. Later calls return that folder without contacting
    the hub; delete it to convert again.

    A fairseq translation archive (its ``http(s)://`` URL, or the archive file) is
    converted once too: the URL is streamed to a scratch folder in the cache
    (:func:`~keras_posenc.hub.archives.download`: a download with fewer bytes than
    its ``Content-Length`` is refused), the archive read whole and extracted with
    tarfile's ``data`` filter (an archive with an absolute path, ``..`` or a link
    leaving the folder is refused before anything is written), converted by
    :func:`~keras_posenc.convert.from_fairseq_archive` (model, BPE codes,
    dictionaries) and saved to ``cache_folder()/archives/NAME-KEY``, the key being a
    digest of the URL or of the file's bytes. The scratch folder is removed.

    ``HF_ENDPOINT`` (another hub, or a local mirror), ``HF_HUB_OFFLINE`` and
    ``HF_HOME`` / ``HF_HUB_CACHE`` are read when this runs, so setting them after
    ``huggingface_hub`` was imported still counts.

    Args:
        source: a preset folder, ``hf://ORG/REPO``, or a fairseq archive's URL or
            file. **A hub source or URL downloads** on first use.
        progress: show download and conversion progress bars.

    Returns:
        The folder's path.

    Raises:
        FileNotFoundError: a local folder or file that does not exist.
        ValueError: a folder that is not a preset, a malformed ``hf://`` source, a
            repository without a timm config or weights, or whose architecture no
            converter loads; an archive that is damaged, truncated, unsafe (a member
            outside its folder) or not a fairseq fconv archive; a URL answering 404.
        ConnectionError: not cached, and the hub or URL cannot be reached, or
            ``HF_HUB_OFFLINE`` is set.
        OSError: a download that failed (e.g. cut short); nothing is cached.
        ImportError: ``huggingface_hub`` is not installed.

    Example:

    >>> # preset_path("hf://timm/coatnet_0_rw_224.sw_in1k")
    >>> # '/home/me/.cache/keras_posenc/hf/timm/coatnet_0_rw_224.sw_in1k'
    """
    who = "preset_path"
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            f"{who}: `source` must be a folder, 'hf://ORG/REPO' or an archive's URL or file, "
            f"got {type(source).__name__}."
        )
    text = os.fspath(source)
    if text.startswith(HUB_PREFIX):
        return _hub_preset(text, progress)
    if archives.is_url(text):
        return _archive_preset(text, progress)
    if not os.path.exists(text):
        raise FileNotFoundError(
            f"{who}: {text!r} does not exist (a preset folder, hf://ORG/REPO, an archive's "
            "URL or file)."
        )
    if os.path.isfile(text):
        return _archive_preset(text, progress)
    if not _is_preset(text):
        missing = [name for name in _REQUIRED if not os.path.isfile(os.path.join(text, name))]
        raise ValueError(
            f"{who}: {text!r} is not a preset folder: it lacks {', '.join(missing)} "
            "(presets are written by save_preset)."
        )
    return text


def remove_cached(source: str) -> bool:
    """Deletes the converted copy of a hub source or archive (URL or file) from the cache;
    True if there was one.

    >>> remove_cached("hf://nobody/nothing")
    False
    """
    if isinstance(source, str) and (archives.is_url(source) or os.path.isfile(source)):
        target = _archive_target(source)
    else:
        repo = source[len(HUB_PREFIX) :].strip("/") if source.startswith(HUB_PREFIX) else ""
        if not _REPO_PATTERN.match(repo) or ".." in repo:
            raise ValueError(
                "remove_cached: `source` must be hf://ORG/REPO or an archive's URL or file, "
                f"got {source!r}."
            )
        target = os.path.join(cache_folder(), "hf", *repo.split("/"))
    if not os.path.exists(target):
        return False
    shutil.rmtree(target)
    return True


def preset_weights(source: str | os.PathLike) -> tuple[str, int | None]:
    """A preset source's weights file and class count (a hub source downloaded and
    converted first): what ``zoo.create(name, weights=source)`` loads, reached through
    the zoo registry's hook (:func:`keras_posenc.zoo.registry.set_preset_functions`).

    >>> import tempfile, keras
    >>> from keras_posenc.hub import save_preset
    >>> inputs = keras.Input((3,))
    >>> folder = save_preset(keras.Model(inputs, keras.layers.Dense(2)(inputs)),
    ...                      tempfile.mkdtemp() + "/tiny")
    >>> path, classes = preset_weights(folder)
    >>> os.path.basename(path), classes
    ('model.weights.h5', 2)
    """
    folder = preset_path(source)
    if os.path.isfile(os.path.join(folder, TASK_FILE)):
        return _keras_hub_weights(folder)
    return os.path.join(folder, WEIGHTS_FILE), _class_count(folder)


def _keras_hub_weights(folder: str) -> tuple[str, int | None]:
    """The zoo model's weights of a keras-hub preset of ours (its task's, in the zoo model's
    layout), saved once in the cache under a key of the folder's path and files."""
    digest = hashlib.sha256(os.path.abspath(folder).encode())
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            status = os.stat(path)
            digest.update(f"{name}:{status.st_size}:{status.st_mtime_ns}".encode())
    target = os.path.join(cache_folder(), "keras_hub", digest.hexdigest()[:32])
    weights = os.path.join(target, WEIGHTS_FILE)
    classes_file = os.path.join(target, "num_classes.json")
    if not os.path.isfile(classes_file):
        model = load_preset(folder).model
        os.makedirs(target, exist_ok=True)
        staged = os.path.join(target, f"staged-{os.getpid()}.weights.h5")
        model.save_weights(staged)
        os.replace(staged, weights)
        with open(classes_file, "w", encoding="utf-8") as handle:
            json.dump(int(model.output_shape[-1]), handle)
    with open(classes_file, encoding="utf-8") as handle:
        return weights, int(json.load(handle))
