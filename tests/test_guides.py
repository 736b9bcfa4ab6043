"""The guides' Python code runs (large: CI runs it on TensorFlow), so the docs cannot rot.

Each guide's ```python blocks run in order, as one script, in a fresh subprocess inside an
empty folder. The docs are found through POSENC_DOCS (set by .ci/run, whose tests run from a
copy of tests/ outside the repository) or next to this file in a checkout.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

_FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def docs_folder() -> pathlib.Path:
    folder = pathlib.Path(
        os.environ.get("POSENC_DOCS", pathlib.Path(__file__).resolve().parents[1] / "docs")
    )
    assert (folder / "guides").is_dir(), (
        f"no guides in {folder}: set POSENC_DOCS to the repository's docs/ folder"
    )
    return folder


def guide_code(path: pathlib.Path) -> str:
    return "\n".join(_FENCE.findall(path.read_text()))


def guides() -> list[str]:
    try:
        return sorted(p.name for p in (docs_folder() / "guides").glob("*.md"))
    except AssertionError:
        return ["<docs not found>"]


@pytest.mark.large
def test_code_blocks_are_found():
    code = guide_code(docs_folder() / "guides" / "convs2s.md")
    assert "zoo.create(" in code and "```" not in code


@pytest.mark.large
@pytest.mark.parametrize("guide", guides())
def test_guide_code_runs(guide, tmp_path):
    code = guide_code(docs_folder() / "guides" / guide)
    assert code.strip(), f"{guide} has no python code blocks"
    script = tmp_path / "guide.py"
    script.write_text(code)
    env = dict(os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "tensorflow"))
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = "\n".join(result.stderr.strip().splitlines()[-20:])
    assert result.returncode == 0, f"{guide}: the guide's code failed:\n{tail}"
