"""Staged, atomic writes: an artifact is written beside its target and moved into place only
once it is complete, so a failed export leaves nothing at the target.

:func:`staged` is the one home of these writes: the exporters use it, and so does
``keras_posenc.hub.save_preset``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator


def _occupied(path: str) -> bool:
    """Whether something is at ``path``; an empty folder has nothing to lose or merge."""
    if os.path.isdir(path) and not os.path.islink(path):
        return bool(os.listdir(path))
    return os.path.lexists(path)


def check_target(path: str, overwrite: bool, who: str) -> None:
    """Raises ``FileExistsError`` naming ``who`` if something is at ``path`` and
    ``overwrite`` is False (an empty folder does not count)."""
    if _occupied(path) and not overwrite:
        raise FileExistsError(
            f"{who}: {path!r} already exists; pass overwrite=True (posenc: --overwrite) "
            "to replace it."
        )


def _missing_folders(folder: str) -> list[str]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not os.path.exists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


@contextlib.contextmanager
def staged(targets: list[str], overwrite: bool, who: str) -> Iterator[list[str]]:
    """Temporary paths for ``targets``, moved onto them when the block succeeds.

    The temporary folder is a hidden sibling of the first target, on the same
    file system, so moving an artifact is a rename. It is removed whatever
    happens; when the block fails, the targets are left as they were and the
    folders made for them are removed again.

    Args:
        targets: the paths to write; the first one's folder holds the staging folder.
        overwrite: replace what is at a target; False raises ``FileExistsError``
            (an empty folder does not count).
        who: the function named in errors (``"export_model"``, ``"save_preset"``).

    Yields:
        One temporary path per target, in their order, for the block to write.

    Examples:

        >>> import os, tempfile
        >>> target = os.path.join(tempfile.mkdtemp(), "sub", "notes.txt")
        >>> with staged([target], overwrite=False, who="example") as (path,):
        ...     with open(path, "w") as handle:
        ...         _ = handle.write("written")
        >>> open(target).read()
        'written'
        >>> with staged([target], overwrite=False, who="example") as (path,):
        ...     with open(path, "w") as handle:
        ...         _ = handle.write("again")
        Traceback (most recent call last):
        FileExistsError: example: '...notes.txt' already exists; pass overwrite=True ...
        >>> open(target).read()  # unchanged
        'written'
    """
    parent = os.path.dirname(os.path.abspath(targets[0]))
    created = _missing_folders(parent)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".posenc-export-", dir=parent)
    try:
        paths = [os.path.join(staging, os.path.basename(target)) for target in targets]
        yield paths
        for index, (source, target) in enumerate(zip(paths, targets)):
            previous = os.path.join(staging, f"previous-{index}")
            _move_into_place(source, target, previous, overwrite, who)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:
            with contextlib.suppress(OSError):  # not empty: something else wrote there
                os.rmdir(folder)
        raise
    shutil.rmtree(staging, ignore_errors=True)


def _move_into_place(source: str, target: str, previous: str, overwrite: bool, who: str) -> None:
    """Renames ``source`` to ``target``; what was at ``target`` goes to ``previous``."""
    if not os.path.lexists(source):
        raise RuntimeError(f"{who}: the exporter wrote nothing for {target!r}.")
    if not os.path.lexists(target):
        os.replace(source, target)
        return
    check_target(target, overwrite, who)  # again: it may have appeared meanwhile
    # A folder cannot be renamed onto a file or a non-empty folder: move the old one aside.
    os.replace(target, previous)
    try:
        os.replace(source, target)
    except BaseException:
        os.replace(previous, target)
        raise
