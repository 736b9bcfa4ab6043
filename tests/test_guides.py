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

pytestmark = pytest.mark.contract

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


def run_code(code: str, folder: pathlib.Path, what: str) -> str:
    """Runs ``code`` as a script in a fresh subprocess inside ``folder``; fails with its stderr.

    Returns what the script printed.
    """
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
    return result.stdout


# Guides whose code trains a documented example: what the code prints and the least it must
# reach. The ConvS2S guide is the training example of zoo/convs2s/train_reverse.py, so this is
# its one test (it was also trained by a test of its own, twice the time for the same check).
# A pattern with two groups reads a result and its baseline: the result must beat the
# baseline by the least (the dense-prediction guide's learned masks against the best
# constant mask: 0.70 against 0.16 measured).
GUIDE_RESULTS = {
    "convs2s.md": (re.compile(r"held-out exact match: ([0-9.]+)"), 0.95),
    "dense-prediction.md": (
        re.compile(r"held-out mask IoU: ([0-9.]+), the best constant mask's: ([0-9.]+)"),
        0.3,
    ),
}
# Guides that run in CI's large stage rather than in `full`: under 40 s on TensorFlow (the
# keras-hub page: 16 s, its code the acceptance of the keras-hub-native zoo).
LARGE_GUIDES = ("dense-prediction.md", "keras-hub.md")


def guide_case(guide: str) -> object:
    tier = pytest.mark.large if guide in LARGE_GUIDES else pytest.mark.full
    long = [pytest.mark.long] if guide in GUIDE_RESULTS and guide not in LARGE_GUIDES else []
    return pytest.param(guide, marks=[tier, *long])


@pytest.mark.parametrize("guide", [guide_case(g) for g in guides()])
def test_guide_code_runs(guide, tmp_path):
    code = guide_code(docs_folder() / "guides" / guide)
    assert code.strip(), f"{guide} has no python code blocks"
    printed = run_code(code, tmp_path, guide)
    if guide in GUIDE_RESULTS:
        pattern, least = GUIDE_RESULTS[guide]
        found = pattern.findall(printed)
        assert len(found) == 1, f"{guide}: expected one line matching {pattern.pattern!r}"
        if pattern.groups == 2:
            result, baseline = map(float, found[0])
            assert result >= baseline + least, f"{guide}: {result} < {baseline} + {least}"
        else:
            assert float(found[0]) >= least, f"{guide}: {found[0]} < {least}"


def test_guides_with_results_print_them():
    # Cheap, in the default suite: the line the large case reads is still printed by the guide's
    # code, so a reworded print fails here rather than at the end of CI's large stage.
    for guide, (pattern, _) in GUIDE_RESULTS.items():
        prefix = pattern.pattern.split("(")[0]
        assert f'print(f"{prefix}{{' in guide_code(docs_folder() / "guides" / guide), guide


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


# The zoo example exports coatnet_0 at full width (158 s of a large-stage run): in `full`.
@pytest.mark.parametrize(
    "example",
    [
        pytest.param(i, marks=pytest.mark.full if call == "export_model(" else pytest.mark.large)
        for i, call in enumerate(LANDING_EXAMPLES)
    ],
)
def test_landing_page_example_runs_alone(example, tmp_path):
    run_code(landing_blocks()[example], tmp_path, f"index.md, example {example + 1}")
