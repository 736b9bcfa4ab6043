"""Where the tests find the repository's own files (docs/, benchmarks/, .ci/).

CI runs a copy of tests/ outside the source tree against the installed wheel, so a path
relative to a test file does not reach docs/ there: POSENC_DOCS and POSENC_BENCHMARKS name
the checkout's folders (see .ci/run). Without them the checkout next to tests/ is used.
Every test that reads a repository file goes through these functions.
"""

from __future__ import annotations

import os
import pathlib

_CHECKOUT = pathlib.Path(__file__).resolve().parents[1]


def docs_path(*parts: str) -> pathlib.Path:
    """A file or folder under the repository's docs/, asserted to exist."""
    folder = pathlib.Path(os.environ.get("POSENC_DOCS", _CHECKOUT / "docs"))
    path = folder.joinpath(*parts)
    assert path.exists(), f"no {path}: set POSENC_DOCS to the repository's docs/ folder"
    return path


def repository_path(*parts: str) -> pathlib.Path:
    """A file or folder of the repository (the parent of docs/), asserted to exist."""
    return docs_path().resolve().parent.joinpath(*parts) if parts else docs_path().parent


def benchmarks_path(*parts: str) -> pathlib.Path | None:
    """A path under benchmarks/ (POSENC_BENCHMARKS or the checkout's), or None if absent."""
    given = os.environ.get("POSENC_BENCHMARKS")
    folder = pathlib.Path(given) if given else _CHECKOUT / "benchmarks"
    if given:
        assert (folder / "runner.py").is_file(), f"POSENC_BENCHMARKS={given} has no runner.py"
    path = folder.joinpath(*parts)
    return path if path.exists() else None


def fixtures_path(*parts: str) -> pathlib.Path:
    """A file or folder under tests/fixtures/ (which travels with tests/), asserted to exist."""
    path = pathlib.Path(__file__).resolve().parent.joinpath("fixtures", *parts)
    assert path.exists(), f"no {path}"
    return path
