"""Where downloaded sources are cached, and whether their servers can be reached.

Keras-free, so that ``posenc classify`` and ``posenc translate`` can refuse a hub
source or URL that is in no cache while its server cannot be reached before Keras
and its backend are imported (:func:`offline_failure`): without a network such a
source fails within seconds, in one line (issue #57: huggingface_hub retried for
83 s). ``keras_posenc.hub.timm``, ``keras_posenc.hub.fairseq`` and
``keras_posenc.hub.archives`` use the same functions (they are Keras-free here, not in
``keras_posenc.hub``, whose import loads Keras).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
import urllib.parse
import urllib.request

HUB_PREFIX = "hf://"
# Seconds to find and connect to a server before a download starts (reachable).
CONNECT_TIMEOUT = 5.0
_TRUE = ("1", "ON", "YES", "TRUE")
# Archive suffixes, longest first: the name of a preset made from an archive drops them.
ARCHIVE_SUFFIXES = (".tar.bz2", ".tar.gz", ".tar.xz", ".tbz2", ".tgz", ".txz", ".tar")


def cache_folder() -> str:
    """Where converted hub presets are kept: ``KERAS_POSENC_HOME``, else
    ``$XDG_CACHE_HOME/keras_posenc`` (``~/.cache/keras_posenc``).

    The downloaded checkpoints themselves stay in huggingface_hub's cache.

    >>> import os
    >>> os.path.isabs(cache_folder())
    True
    """
    home = os.environ.get("KERAS_POSENC_HOME")
    if not home:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = os.path.join(cache, "keras_posenc")
    return os.path.abspath(os.path.expanduser(home))


def hub_cache() -> str:
    """huggingface_hub's cache folder, read from the environment now (``HF_HUB_CACHE``,
    ``HF_HOME``/hub, else ``~/.cache/huggingface/hub``), as huggingface_hub reads it.

    >>> os.path.isabs(hub_cache())
    True
    """
    cache = os.environ.get("HF_HUB_CACHE")
    if not cache:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        cache = os.path.join(os.environ.get("HF_HOME") or os.path.join(base, "huggingface"), "hub")
    return os.path.abspath(os.path.expanduser(cache))


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks for the cache alone."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _TRUE


def hub_message(source: str, filename: str, cache: str, reason: str) -> str:
    """The one line of a hub source that is in no cache and cannot be downloaded."""
    return (
        f"preset_path: {source} is not in the cache ({cache_folder()}), nor its {filename} in "
        f"huggingface_hub's ({cache}), and {reason}. Run once with network access "
        "(HF_HUB_OFFLINE=1 reads the caches alone, without trying the network), or pass a "
        "preset folder written by save_preset."
    )


def archive_message(source: str, reason: str) -> str:
    """The one line of an archive's URL that is not cached and cannot be downloaded."""
    return (
        f"preset_path: {source} is not in the cache ({cache_folder()}) and cannot be reached: "
        f"{reason}. Run once with network access, or pass the archive's file."
    )


def archive_target(source: str, key: str) -> str:
    """The cache folder of an archive's preset: named after the archive, keyed by ``key``
    (the URL, or the digest of the file's bytes)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(cache_folder(), "archives", f"{archive_name(source)}-{digest}")


def offline_failure(source: str) -> str | None:
    """The one-line error of ``source`` (``hf://ORG/REPO`` or an archive's URL) when it is
    in no cache and cannot be downloaded now; None when it may load (cached, reachable, or
    not a remote source). What ``posenc`` checks before importing Keras.

    >>> offline_failure("a/preset/folder") is None
    True
    """
    if source.startswith(HUB_PREFIX):
        repo = source[len(HUB_PREFIX) :].strip("/")
        cached = (
            os.path.join(cache_folder(), "hf", *repo.split("/")),
            os.path.join(hub_cache(), "models--" + repo.replace("/", "--")),
        )
        if ".." in repo or any(os.path.isdir(folder) for folder in cached):
            return None  # cached (or a malformed id, which preset_path explains)
        endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
        if hub_offline():
            return hub_message(source, "config.json", hub_cache(), "HF_HUB_OFFLINE is set")
        unreachable = reachable(endpoint)
        reason = f"the hub ({endpoint}) cannot be reached: {unreachable}"
        return hub_message(source, "config.json", hub_cache(), reason) if unreachable else None
    if is_url(source):
        if os.path.isdir(archive_target(source, source)):
            return None
        unreachable = reachable(source)
        return archive_message(source, unreachable) if unreachable else None
    return None


def reachable(url: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """None if a TCP connection to ``url``'s server (or the proxy the environment names for
    it) opens within ``timeout`` seconds, name lookup included; else why not, in words.

    >>> reachable("http://127.0.0.1:9")  # the discard port, closed on most machines
    'cannot connect to 127.0.0.1:9 (Connection refused)'
    """
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urllib.parse.urlsplit(proxy if "//" in proxy else "//" + proxy)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    found: list = []

    def look_up() -> None:  # getaddrinfo takes no timeout: a thread waits for it instead
        with contextlib.suppress(OSError):
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))

    start = time.monotonic()
    lookup = threading.Thread(target=look_up, daemon=True)
    lookup.start()
    lookup.join(timeout)
    if not found:
        late = lookup.is_alive()
        return f"cannot look up {host}" + (f" within {timeout:g} s" if late else "")
    reason = "no address"
    for family, kind, protocol, _, address in found:
        left = timeout - (time.monotonic() - start)
        if left <= 0:
            return f"cannot connect to {host}:{port} within {timeout:g} s"
        try:
            with socket.socket(family, kind, protocol) as connection:
                connection.settimeout(left)
                connection.connect(address)
            return None
        except OSError as error:
            reason = error.strerror or type(error).__name__
    return f"cannot connect to {host}:{port} ({reason})"


def archive_name(source: str) -> str:
    """The archive's file name without its archive suffix.

    >>> archive_name("https://host/models/wmt14.v2.en-fr.fconv-py.tar.bz2?x=1")
    'wmt14.v2.en-fr.fconv-py'
    """
    path = urllib.parse.urlsplit(source).path if is_url(source) else source
    name = os.path.basename(path.rstrip("/")) or "archive"
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)] or "archive"
    return name


def is_url(source: str) -> bool:
    """True for ``http://`` and ``https://`` sources.

    >>> is_url("https://dl.fbaipublicfiles.com/fairseq/models/x.tar.bz2"), is_url("x.tar")
    (True, False)
    """
    return urllib.parse.urlsplit(source).scheme in ("http", "https")
