"""Model archives from a URL or a file: streamed download and safe extraction.

fairseq publishes its translation models as ``.tar.bz2`` archives on a plain HTTP
server (not the Hugging Face hub), e.g.
``https://dl.fbaipublicfiles.com/fairseq/models/wmt14.v2.en-fr.fconv-py.tar.bz2``.
:func:`download` streams such a file to disk with a progress bar, detects a
download cut short (fewer bytes than ``Content-Length``) and renames the file into
place only when it is complete; :func:`extract_archive` reads the whole archive
(a truncated compressed stream fails there) and extracts it with tarfile's
``data`` filter, refusing every archive with a member that would land outside the
target (absolute paths, ``..``, links pointing out) before anything is written, and every
archive whose members declare an implausible size (a "decompression bomb": see
``MAX_EXPANSION`` and ``MAX_EXTRACTED_BYTES``) as soon as the member's header is read.

Both raise errors that name the source; the preset code (:mod:`keras_posenc.hub.
presets`) turns an archive into a cached preset.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import lzma
import os
import shutil
import socket
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from typing import Any

import keras_posenc
from keras_posenc._sources import (  # noqa: F401 (public here)
    ARCHIVE_SUFFIXES,
    archive_name,
    is_url,
    reachable,
)
from keras_posenc.layers._checks import check_int, check_positive_number, excerpt

__all__ = [
    "archive_name",
    "download",
    "extract_archive",
    "file_digest",
    "is_url",
    "reachable",
    "scratch_folder",
]

_CHUNK = 1 << 20
# Decompression bombs. fairseq's archives hold float32 checkpoints (about as large packed as
# unpacked) and text files (a few times smaller packed). An archive whose members declare more
# than MAX_EXPANSION times its own size (beyond a floor of MIN_ALLOWANCE, for tiny archives of
# text) is refused, and so is one that would extract more than MAX_EXTRACTED_BYTES; both are
# read from the members' headers, before anything is written or the members are decompressed.
# Raise the limits as Pillow's MAX_IMAGE_PIXELS is raised: assign the module attribute, or pass
# extract_archive's arguments.
MAX_EXPANSION = 100
MIN_ALLOWANCE = 64 << 20
MAX_EXTRACTED_BYTES = 32 << 30
_TIMEOUT = 60.0  # seconds without a byte before a download is abandoned


def file_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in chunks (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, target: str | os.PathLike, *, progress: bool = True) -> str:
    """Streams ``url`` to the file ``target``; **this downloads**.

    The bytes go to ``target + ".part"``, renamed to ``target`` once the server's
    ``Content-Length`` (when it sends one) has arrived in full; a shorter download
    is deleted and raises, so a file at ``target`` is always complete.

    Args:
        url: an ``http://`` or ``https://`` URL.
        target: the file to write (its folder must exist).
        progress: show a progress bar (tqdm) on stderr.

    Returns:
        ``target``.

    Raises:
        ValueError: not an http(s) URL, or the server answers 404 or another client error.
        ConnectionError: the server cannot be reached, or answers a server error.
        OSError: the download was cut short (fewer bytes than announced).
    """
    who = "download"
    if not isinstance(url, str) or not is_url(url):
        raise ValueError(f"{who}: `url` must be an http:// or https:// URL, got {url!r}.")
    target = os.fspath(target)
    partial = target + ".part"
    request = urllib.request.Request(
        url, headers={"User-Agent": f"keras-posenc/{keras_posenc.__version__}"}
    )
    unreachable = reachable(url)
    if unreachable:
        raise ConnectionError(f"{who}: {url} cannot be reached: {unreachable}.")
    try:
        response = urllib.request.urlopen(request, timeout=_TIMEOUT)  # noqa: S310 (http(s) only)
    except urllib.error.HTTPError as error:
        if error.code < 500:
            raise ValueError(
                f"{who}: {url} answered HTTP {error.code} ({error.reason})."
            ) from error
        raise ConnectionError(
            f"{who}: {url} answered HTTP {error.code} ({error.reason}); try again later."
        ) from error
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise ConnectionError(f"{who}: {url} cannot be reached ({reason}).") from error
    announced = response.headers.get("Content-Length")
    expected = int(announced) if announced and announced.isdigit() else None
    received = 0
    bar = _progress_bar(expected, os.path.basename(target), progress)
    try:
        with response, open(partial, "wb") as handle:
            while chunk := response.read(_CHUNK):
                handle.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    except (http.client.IncompleteRead, OSError) as error:
        _remove(partial)
        raise OSError(
            f"{who}: the download of {url} broke off after {received} bytes "
            f"({excerpt(str(error))}); nothing was kept."
        ) from error
    finally:
        bar.close()
    if expected is not None and received != expected:
        _remove(partial)
        raise OSError(
            f"{who}: the download of {url} is truncated: {received} of the {expected} bytes "
            "the server announced arrived; nothing was kept. Try again."
        )
    os.replace(partial, target)
    return target


def _check_declared(
    who: str,
    archive: str,
    member: tarfile.TarInfo,
    declared: int,
    allowed: float,
    ratio: float,
    most: int,
) -> None:
    if declared > most:
        limit = f"max_extracted_bytes={most}"
    elif declared > allowed:
        limit = (
            f"max_expansion={ratio} times the archive's {os.path.getsize(archive)} bytes "
            f"(at least {MIN_ALLOWANCE})"
        )
    else:
        return
    raise ValueError(
        f"{who}: {archive!r} is refused: its members declare at least {declared} bytes (from "
        f"{member.name!r} on), over {limit}; an archive of a model is not that compressible. "
        "Nothing was extracted. If you trust it, raise the limit (extract_archive's "
        "arguments, or keras_posenc.hub.archives.MAX_EXPANSION / MAX_EXTRACTED_BYTES)."
    )


def _progress_bar(total: int | None, name: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name, disable=not enabled
    )


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def extract_archive(
    archive: str | os.PathLike,
    target: str | os.PathLike,
    *,
    max_expansion: float | None = None,
    max_extracted_bytes: int | None = None,
) -> str:
    """Extracts a tar archive (plain, gzip, bzip2 or xz) into the folder ``target``.

    The whole archive is read and every member checked by tarfile's ``data`` filter
    before anything is written: a member with an absolute path, a ``..`` that leaves
    ``target``, a link pointing outside it, or a device file refuses the archive. The
    members' declared sizes are added up as their headers are read, and the archive is
    refused as soon as they pass ``max_expansion`` times its size (or ``MIN_ALLOWANCE``,
    whichever is larger) or ``max_extracted_bytes``: a small archive declaring gigabytes of
    zeros is refused without decompressing them.

    Args:
        archive: the archive file.
        target: the folder to extract into (created if needed).
        max_expansion: the most the members may declare, as a multiple of the archive's
            size; default ``MAX_EXPANSION`` (100).
        max_extracted_bytes: the most the members may declare, in bytes; default
            ``MAX_EXTRACTED_BYTES`` (32 GiB).

    Returns:
        ``target``.

    Raises:
        ValueError: the file is not a tar archive, it is damaged or truncated, a member
            is unsafe, or the members declare more than the limits (named in the message).

    Example:

    >>> import io, tarfile, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with tarfile.open(f"{folder}/a.tar.gz", "w:gz") as tar:
    ...     header = tarfile.TarInfo("zeros.bin")
    ...     header.size = 1 << 20
    ...     tar.addfile(header, io.BytesIO(bytes(header.size)))
    >>> extract_archive(f"{folder}/a.tar.gz", f"{folder}/out", max_extracted_bytes=1 << 19)
    Traceback (most recent call last):
    ...
    ValueError: extract_archive: ... at least 1048576 bytes ... max_extracted_bytes=524288;...
    """
    who = "extract_archive"
    archive, target = os.fspath(archive), os.fspath(target)
    ratio = check_positive_number(
        who, "max_expansion", MAX_EXPANSION if max_expansion is None else max_expansion
    )
    most = check_int(
        who,
        "max_extracted_bytes",
        MAX_EXTRACTED_BYTES if max_extracted_bytes is None else max_extracted_bytes,
        minimum=1,
    )
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:  # Python 3.11.0-3.11.3 lack it; extracting unfiltered is unsafe
        raise RuntimeError(
            f"{who}: safe extraction needs tarfile's data filter (Python 3.11.4 or newer)."
        )
    try:
        allowed = max(ratio * os.path.getsize(archive), MIN_ALLOWANCE)
        with tarfile.open(archive) as tar:
            declared = 0
            # Reads the headers to the end (a truncated stream fails here), checking the
            # declared sizes as each header arrives: the next header is only reached by
            # decompressing the member before it.
            while (member := tar.next()) is not None:
                declared += member.size if member.isfile() else 0
                _check_declared(who, archive, member, declared, allowed, ratio, most)
            members = tar.getmembers()
            absolute = os.path.abspath(target)
            for member in members:
                # The data filter would strip a leading "/" and extract the member
                # inside; an archive naming absolute paths is refused instead.
                if member.name.startswith(("/", "\\")) or os.path.isabs(member.name):
                    raise tarfile.AbsolutePathError(member)
                data_filter(member, absolute)
            os.makedirs(target, exist_ok=True)
            tar.extractall(target, filter="data")
    except tarfile.FilterError as error:
        member = getattr(error, "tarinfo", None)
        name = member.name if member is not None else "?"
        raise ValueError(
            f"{who}: {archive!r} is refused: its member {name!r} would be extracted outside "
            f"the target folder or is not a plain file ({error}). Nothing was extracted."
        ) from error
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(
            f"{who}: {archive!r} is not a complete tar archive (damaged or truncated: "
            f"{excerpt(str(error))})."
        ) from error
    return target


_SCRATCH_PREFIX = ".convert-"
_OWNER = "owner"
# A scratch folder without an owner file (its run was killed between making it and writing
# the file) is left alone for this long, in case its run is still starting.
_UNOWNED_GRACE_SECONDS = 3600.0


@contextlib.contextmanager
def scratch_folder(parent: str | os.PathLike) -> Iterator[str]:
    """A scratch folder in ``parent`` for one download and conversion, removed after.

    A run that is killed cannot remove its folder, and an archive's scratch holds the
    download and everything extracted from it (gigabytes for a real model). So each folder
    names its owner (host and process id), and the next run in ``parent`` first removes the
    folders whose owner is a process of this host that no longer runs (and those without an
    owner that are over an hour old). Folders of runs still going, or of other hosts sharing
    the cache, are left alone.

    Example:

    >>> import os, tempfile
    >>> parent = tempfile.mkdtemp()
    >>> with scratch_folder(parent) as scratch:
    ...     os.path.isdir(scratch)
    True
    >>> os.listdir(parent)
    []
    """
    parent = os.fspath(parent)
    os.makedirs(parent, exist_ok=True)
    remove_stale_scratch(parent)
    scratch = tempfile.mkdtemp(prefix=_SCRATCH_PREFIX, dir=parent)
    try:
        with open(os.path.join(scratch, _OWNER), "w") as handle:
            handle.write(f"{socket.gethostname()} {os.getpid()}\n")
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def remove_stale_scratch(parent: str | os.PathLike) -> list[str]:
    """Removes the scratch folders in ``parent`` left by runs that were killed; returns them.

    See :func:`scratch_folder`.
    """
    removed = []
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if name.startswith(_SCRATCH_PREFIX) and os.path.isdir(path) and _abandoned(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _abandoned(scratch: str) -> bool:
    try:
        with open(os.path.join(scratch, _OWNER)) as handle:
            host, pid = handle.read().split()
    except FileNotFoundError:
        return time.time() - os.path.getmtime(scratch) > _UNOWNED_GRACE_SECONDS
    except (OSError, ValueError):
        return False  # unreadable or another format: not ours to judge
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user runs with that id
        return False
    return False
