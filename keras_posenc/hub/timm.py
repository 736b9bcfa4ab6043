"""timm model repositories on the Hugging Face hub (``hf://timm/coatnet_0_rw_224.sw_in1k``)
converted into cached presets: the config read and checked, the weights downloaded
(:mod:`keras_posenc.hub.downloads`), converted by the zoo family's timm converter
(:mod:`keras_posenc.convert.timm`) and saved as a preset folder in
``cache_folder()/hf/ORG/REPO``.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from typing import Any

import keras

from keras_posenc._sources import HUB_PREFIX, cache_folder, reachable
from keras_posenc.hub.downloads import _download, _hub, _hub_settings, _weights_file
from keras_posenc.hub.folder import _is_preset, _read_json, _save_converted
from keras_posenc.hub.preprocessing import ImagePreprocessor, imagenet_class_names

# A hub repository id: ORG/NAME, letters, digits, '-', '_', '.'; no '..' (it becomes a path).
_REPO_PATTERN = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
# The converter of each zoo family whose models load timm checkpoints ("module:function").
TIMM_CONVERTERS = {
    "coatnet": "keras_posenc.convert.timm:from_timm_coatnet",
    "maxvit": "keras_posenc.convert.timm:from_timm_maxvit",
    "maxxvit": "keras_posenc.convert.timm:from_timm_maxxvit",
}


def _hub_preset(source: str, progress: bool) -> str:
    repo = source[len(HUB_PREFIX) :].strip("/")
    if not _REPO_PATTERN.match(repo) or ".." in repo:
        raise ValueError(
            f"preset_path: a hub source must be hf://ORG/REPO (letters, digits, '-', '_', "
            f"'.'), got {source!r}."
        )
    target = os.path.join(cache_folder(), "hf", *repo.split("/"))
    if _is_preset(target):
        return target
    model, preprocessor, class_names, metadata = _convert_timm_repo(repo, source, progress)
    _save_converted(model, target, preprocessor, class_names, metadata)
    return target


def _convert_timm_repo(repo: str, source: str, progress: bool) -> tuple:
    """(model, preprocessor, class names, metadata) of a timm hub repository.

    The config is read and checked before the weights are downloaded, so a repository
    that cannot be converted costs one small file.
    """
    from keras_posenc.zoo.registry import get_spec

    settings = _hub_settings()
    if not settings["local_files_only"]:
        # Without a network, huggingface_hub retries for over a minute before it reads its
        # cache (issue #57): a connection that cannot open within seconds reads the cache now.
        endpoint = settings["endpoint"] or "https://huggingface.co"
        unreachable = reachable(endpoint)
        if unreachable:
            settings["local_files_only"] = True
            settings["unreachable"] = f"the hub ({endpoint}) cannot be reached: {unreachable}"
    if not progress:  # huggingface_hub's own bar class, switched off (a partial is no class)
        settings["tqdm_class"] = functools.partial(_hub("preset_path").utils.tqdm, disable=True)
    config = _read_json(_download(repo, "config.json", source, settings), "preset_path")
    if not isinstance(config, dict) or not isinstance(config.get("architecture"), str):
        raise ValueError(
            f"preset_path: {source}'s config.json is not a timm config (it has no 'architecture')."
        )
    pretrained = config.get("pretrained_cfg") or config
    architecture = config["architecture"]
    try:
        spec = get_spec(architecture)
    except ValueError as error:
        raise ValueError(
            f"preset_path: {source} holds a timm {architecture!r}, which is not a zoo "
            f"model; loadable: {', '.join(_timm_loadable())}."
        ) from error
    if spec.family not in TIMM_CONVERTERS:
        raise ValueError(
            f"preset_path: {source} holds a timm {architecture!r} (zoo family "
            f"{spec.family!r}), for which no timm converter exists; loadable: "
            f"{', '.join(_timm_loadable())}."
        )
    model_args = dict(config.get("model_args") or {})
    unsupported = sorted(set(model_args) - {"img_size", "num_classes"})
    if unsupported:
        raise ValueError(
            f"preset_path: {source}'s config.json has model_args {unsupported} that change "
            f"the {architecture!r} architecture; only img_size and num_classes are supported."
        )
    # The size the weights were trained at (timm's pretrained input_size) wins.
    size = pretrained.get("input_size") or [3, *_pair(model_args.get("img_size", 224))]
    preprocessor = ImagePreprocessor.from_timm_config({**pretrained, "input_size": size})
    weights = _weights_file(repo, source, settings)

    bar = keras.utils.Progbar(3, unit_name="step") if progress else None
    if bar is not None:
        print(f"converting {source} ({architecture})")
    build = {**spec.arguments(), "input_shape": (*preprocessor.image_size, int(size[0]))}
    module, function = TIMM_CONVERTERS[spec.family].split(":")
    converter = getattr(importlib.import_module(module), function)
    if bar is not None:
        bar.update(1)
    model = converter(weights, config=build)
    if bar is not None:
        bar.update(2)
    classes = int(model.output_shape[-1])
    class_names = pretrained.get("label_names") or config.get("label_names")
    if class_names is None and classes == 1000:
        class_names = imagenet_class_names()
    if bar is not None:
        bar.update(3)
    metadata = {
        "source": source,
        "architecture": architecture,
        "converted_from": os.path.basename(weights),
        "commit": _commit_of(weights),
        "pretrained_cfg": pretrained,
    }
    return model, preprocessor, class_names, metadata


def _pair(size: Any) -> tuple[int, int]:
    return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))


def _commit_of(path: str) -> str | None:
    """The hub commit a cached file came from (its snapshot folder's name)."""
    parent = os.path.basename(os.path.dirname(path))
    return parent if re.fullmatch(r"[0-9a-f]{40}", parent) else None


def _timm_loadable() -> list[str]:
    """The zoo's names of timm's trained CoAtNets and MaxViTs (the zoo's paper
    configurations are not timm's names)."""
    from keras_posenc.zoo import coatnet, maxvit

    return sorted([*coatnet.TIMM_CONFIGS, *maxvit.TIMM_CONFIGS])
