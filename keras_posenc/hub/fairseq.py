"""fairseq translation archives (a URL or a file) converted into cached presets:
downloaded and extracted safely (:mod:`keras_posenc.hub.archives`), converted by
:func:`keras_posenc.convert.from_fairseq_archive` and saved as a preset folder in
``cache_folder()/archives/NAME-KEY``.
"""

from __future__ import annotations

import os

from keras_posenc._sources import archive_message, archive_target, reachable
from keras_posenc.hub import archives
from keras_posenc.hub.folder import _is_preset, _save_converted


def _archive_target(source: str) -> str:
    """The cache folder of an archive's preset: named after the archive, keyed by the
    URL or, for a file, by its bytes (a file changed in place converts again)."""
    key = source if archives.is_url(source) else archives.file_digest(source)
    return archive_target(source, key)


def _archive_preset(source: str, progress: bool) -> str:
    """The cached preset of a fairseq archive (URL or file): downloaded, extracted and
    converted on first use, in a scratch folder beside the cache that is removed after (and
    by the next run, if this one is killed: archives.scratch_folder)."""
    from keras_posenc.convert.fairseq import from_fairseq_archive

    target = _archive_target(source)
    if _is_preset(target):
        return target
    with archives.scratch_folder(os.path.dirname(target)) as scratch:
        archive = source
        if archives.is_url(source):
            archive = os.path.join(scratch, os.path.basename(target) + ".archive")
            unreachable = reachable(source)
            if unreachable:  # one line, within seconds (_sources.CONNECT_TIMEOUT)
                raise ConnectionError(archive_message(source, unreachable))
            archives.download(source, archive, progress=progress)
        extracted = archives.extract_archive(archive, os.path.join(scratch, "extracted"))
        if progress:
            print(f"converting {source}")
        model, preprocessor, details = from_fairseq_archive(extracted)
        metadata = {
            "source": source,
            "archive_sha256": archives.file_digest(archive),
            "fairseq": details,
        }
        _save_converted(model, target, preprocessor, None, metadata)
    return target
