"""Model archives from a URL or a file: streamed download and safe extraction.

fairseq publishes its translation models as ``.tar.bz2`` archives on a plain HTTP
server (not the Hugging Face hub), e.g.
``https://dl.fbaipublicfiles.com/fairseq/models/wmt14.v2.en-fr.fconv-py.tar.bz2``.
:func:`download` streams such a file to disk with a progress bar, detects a
download cut short (fewer bytes than ``Content-Length``) and renames the file into
place only when it is complete; :func:`extract_archive` reads the whole archive
(a truncated compressed stream fails there) and extracts it with tarfile's
``data`` filter, refusing every archive with a member that would land outside the
target (absolute paths, ``..``, links pointing out) before anything is written.

Both raise errors that name the source; the preset code (:mod:`keras_posenc.zoo.
presets`) turns an archive into a cached preset.
"""

from __future__ import annotations

import hashlib
import http.client
import lzma
import os
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from typing import Any

import keras_posenc
from keras_posenc.layers._checks import excerpt

__all__ = ["archive_name", "download", "extract_archive", "file_digest", "is_url"]

# Archive suffixes, longest first: the name of a preset made from an archive drops them.
ARCHIVE_SUFFIXES = (".tar.bz2", ".tar.gz", ".tar.xz", ".tbz2", ".tgz", ".txz", ".tar")
_CHUNK = 1 << 20
_TIMEOUT = 60.0  # seconds without a byte before a download is abandoned


def is_url(source: str) -> bool:
    """True for ``http://`` and ``https://`` sources.

    >>> is_url("https://dl.fbaipublicfiles.com/fairseq/models/x.tar.bz2"), is_url("x.tar")
    (True, False)
    """
    return urllib.parse.urlsplit(source).scheme in ("http", "https")


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


def extract_archive(archive: str | os.PathLike, target: str | os.PathLike) -> str:
    """Extracts a tar archive (plain, gzip, bzip2 or xz) into the folder ``target``.

    The whole archive is read and every member checked by tarfile's ``data`` filter
    before anything is written: a member with an absolute path, a ``..`` that leaves
    ``target``, a link pointing outside it, or a device file refuses the archive.

    Args:
        archive: the archive file.
        target: the folder to extract into (created if needed).

    Returns:
        ``target``.

    Raises:
        ValueError: the file is not a tar archive, it is damaged or truncated, or a
            member is unsafe (named in the message).
    """
    who = "extract_archive"
    archive, target = os.fspath(archive), os.fspath(target)
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:  # Python 3.11.0-3.11.3 lack it; extracting unfiltered is unsafe
        raise RuntimeError(
            f"{who}: safe extraction needs tarfile's data filter (Python 3.11.4 or newer)."
        )
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()  # reads to the end: a truncated stream fails here
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
