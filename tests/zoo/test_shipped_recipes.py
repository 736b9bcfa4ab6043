"""Each shipped preset's recipe, run as its card says (one command), reaches the card's
held-out metric within the card's tolerance (keras_posenc/zoo/weights/presets.json).

Each recipe trains for about a minute on two idle cores, so these are in the large tier (on
its one backend, the recipe's own); the shipped weights themselves are checked on every
backend by tests/zoo/test_shipped_presets.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from repository import repository_path

from keras_posenc import zoo

pytestmark = pytest.mark.large

PRESETS = sorted(zoo.shipped_presets())
COMPILE_SETTINGS = ("JAX_DISABLE_MOST_OPTIMIZATIONS", "XLA_FLAGS")
# What each recipe prints, and the metrics of presets.json its numbers are.
PATTERNS = {
    "coatnet_0/digits": (r"held-out accuracy ([\d.]+)%", ["held_out_accuracy"]),
    "shaw_transformer_base/reverse": (
        r"exact match ([\d.]+)% at 3-12 words \(the training lengths\), ([\d.]+)% at "
        r"13-16 words, ([\d.]+)% at 17-24 words",
        ["exact_match_train_lengths", "exact_match_13_16", "exact_match_17_24"],
    ),
}


@pytest.mark.parametrize("key", PRESETS)
def test_recipe_reproduces_the_card(key, tmp_path):
    pytest.importorskip("sklearn")  # the digits
    entry = zoo.shipped_presets()[key]
    command = entry["recipe"].split()
    assert command[0] == "python" and command[1].startswith("zoo/"), command
    script = repository_path(*command[1].split("/"))
    weights = tmp_path / "trained.weights.h5"
    # As a user runs it: without the suite's compile settings (tests/conftest.py), which
    # round differently, and a length-generalisation metric follows the rounding of a run.
    env = {k: v for k, v in os.environ.items() if k not in COMPILE_SETTINGS}
    result = subprocess.run(
        [sys.executable, str(script), *command[2:], "--save", str(weights)],
        env=dict(env, KERAS_BACKEND=entry["backend"]),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    pattern, names = PATTERNS[key]
    found = re.search(pattern, result.stdout)
    assert found, result.stdout[-2000:]
    tolerance = entry["tolerance"]
    for name, value in zip(names, found.groups(), strict=True):
        card = entry["metrics"][name]
        assert abs(float(value) / 100 - card) <= tolerance, (name, value, card)
    assert weights.is_file()
    model = zoo.create(entry["model"], weights=str(weights), **entry_overrides(entry))
    assert model.count_params() == zoo.create(entry["model"], weights=entry["tag"]).count_params()


def entry_overrides(entry: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in entry["overrides"].items()}
