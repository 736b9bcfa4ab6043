"""Downloads from the Hugging Face hub with ``huggingface_hub``, its settings read at
each call (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``, ``HF_HOME`` / ``HF_HUB_CACHE``), and its
errors turned into the library's (a source neither cached nor reachable: one line
naming the cache, keras_posenc/_sources.py).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from keras_posenc._sources import hub_cache, hub_message, hub_offline
from keras_posenc.layers._checks import excerpt


def _hub(who: str) -> Any:
    try:
        hub = importlib.import_module("huggingface_hub")
        # Submodules the package does not import itself (its attributes load lazily).
        importlib.import_module("huggingface_hub.errors")
        importlib.import_module("huggingface_hub.utils")
    except ImportError as error:
        raise ImportError(
            f"{who}: hf:// sources need huggingface_hub; install it with "
            '`pip install "keras-posenc[pretrained]"`.'
        ) from error
    return hub


def _hub_settings() -> dict[str, Any]:
    """huggingface_hub's settings, read now: the library reads its environment variables
    once, when imported, so values set later would otherwise be ignored."""
    cache = os.environ.get("HF_HUB_CACHE")
    if not cache and os.environ.get("HF_HOME"):
        cache = os.path.join(os.environ["HF_HOME"], "hub")
    offline = hub_offline()
    return {
        "endpoint": os.environ.get("HF_ENDPOINT") or None,
        "cache_dir": cache or None,
        "local_files_only": offline,
    }


def _download(repo: str, filename: str, source: str, settings: dict) -> str:
    hub = _hub("preset_path")
    errors = hub.errors
    try:
        options = {key: value for key, value in settings.items() if key != "unreachable"}
        return hub.hf_hub_download(repo, filename, **options)
    except errors.LocalEntryNotFoundError as error:  # offline, or the hub unreachable
        reason = settings.get("unreachable") or (
            "HF_HUB_OFFLINE is set"
            if settings["local_files_only"]
            else f"the hub ({settings['endpoint'] or 'huggingface.co'}) cannot be reached"
        )
        cache = settings["cache_dir"] or hub_cache()
        raise ConnectionError(hub_message(source, filename, cache, reason)) from error
    except errors.RepositoryNotFoundError as error:
        raise ValueError(f"preset_path: {source}: no such repository on the hub.") from error
    except errors.EntryNotFoundError as error:
        raise ValueError(f"preset_path: {source} has no file {filename!r}.") from error
    except OSError as error:  # e.g. huggingface_hub's size check of a download cut short
        raise OSError(
            f"preset_path: downloading {filename} of {source} failed; nothing was cached: "
            f"{excerpt(str(error))}"
        ) from error


def _weights_file(repo: str, source: str, settings: dict) -> str:
    """timm's weights file of the repository: safetensors if it has them."""
    candidates = ("model.safetensors", "pytorch_model.bin")
    if settings["local_files_only"]:  # no listing offline: whichever is cached
        for name in candidates[:-1]:
            try:
                return _download(repo, name, source, settings)
            except ConnectionError:
                pass
        return _download(repo, candidates[-1], source, settings)
    hub = _hub("preset_path")
    try:
        files = hub.HfApi(endpoint=settings["endpoint"]).list_repo_files(repo)
    except hub.errors.RepositoryNotFoundError as error:
        raise ValueError(f"preset_path: {source}: no such repository on the hub.") from error
    except Exception:  # noqa: BLE001  (unreachable: httpx's errors are no OSError)
        # The config came from the cache: take whichever weights are cached, or say offline.
        return _weights_file(repo, source, {**settings, "local_files_only": True})
    name = next((n for n in candidates if n in files), None)
    if name is None:
        raise ValueError(
            f"preset_path: {source} has no timm weights ({' or '.join(candidates)}); its "
            f"files: {excerpt(sorted(files))}."
        )
    return _download(repo, name, source, settings)
