"""The guides' and the landing page's Python code runs (large: CI runs it on TensorFlow), so the
docs cannot rot.

Each guide's ```python blocks run in order, as one script, in a fresh subprocess inside an
empty folder. The landing page (docs/index.md) promises that each of its examples is a
complete script, so each of its blocks runs alone. The docs are found through POSENC_DOCS
(set by .ci/run, whose tests run from a copy of tests/ outside the repository) or next to
this file in a checkout.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from repository import docs_path

_FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def docs_folder() -> pathlib.Path:
    docs_path("guides")
    return docs_path()


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


def run_code(code: str, folder: pathlib.Path, what: str) -> None:
    """Runs ``code`` as a script in a fresh subprocess inside ``folder``; fails with its stderr."""
    script = folder / "page.py"
    script.write_text(code)
    env = dict(os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "tensorflow"))
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = "\n".join(result.stderr.strip().splitlines()[-20:])
    assert result.returncode == 0, f"{what}: the code failed:\n{tail}"


@pytest.mark.large
@pytest.mark.parametrize("guide", guides())
def test_guide_code_runs(guide, tmp_path):
    code = guide_code(docs_folder() / "guides" / guide)
    assert code.strip(), f"{guide} has no python code blocks"
    run_code(code, tmp_path, guide)


# What each landing-page example shows, in order: a relative-attention layer in a Keras model,
# a zoo model created by name and exported, the PosENet probe on a backbone.
LANDING_EXAMPLES = ("RelativeTransformerEncoder(", "export_model(", "probe.PosENet(")


def landing_blocks() -> list[str]:
    return _FENCE.findall((docs_folder() / "index.md").read_text())


def test_landing_page_examples_are_found_and_compile():
    blocks = landing_blocks()
    assert len(blocks) == len(LANDING_EXAMPLES), f"index.md has {len(blocks)} python blocks"
    for block, call in zip(blocks, LANDING_EXAMPLES, strict=True):
        assert call in block, f"the index.md example for {call} is not where expected"
        compile(block, "index.md", "exec")  # a SyntaxError fails here, without running it


@pytest.mark.large
@pytest.mark.parametrize("example", range(len(LANDING_EXAMPLES)))
def test_landing_page_example_runs_alone(example, tmp_path):
    run_code(landing_blocks()[example], tmp_path, f"index.md, example {example + 1}")
