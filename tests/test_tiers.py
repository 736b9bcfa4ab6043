"""The tiers: every test in exactly one, chosen by what it needs (tests/tiers.py).

The rule itself is applied by tests/conftest.py at every collection; these tests show that it
fails where it should, on the functions and on a real pytest collection of a folder of tests
made here.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import tiers
from tiers import TierError, effective_tier, selected_tiers, tier_of

pytestmark = pytest.mark.neutral

HERE = pathlib.Path(__file__).resolve().parent


def test_the_closest_node_that_names_a_tier_decides():
    assert tier_of("t", [["parametrize"], [], ["contract"]]) == "contract"
    assert tier_of("t", [["large", "long"], [], ["contract"]]) == "large"


def test_a_test_in_no_tier_or_two_fails():
    with pytest.raises(TierError, match="t: in no tier"):
        tier_of("t", [["parametrize"], ["skipif"]])
    with pytest.raises(TierError, match=r"t: in 2 tiers \(contract, full\)"):
        tier_of("t", [["full", "contract"], ["neutral"]])


def test_matrix_cases_run_on_one_backend_by_default_and_everywhere_in_full():
    assert effective_tier("contract", True, tiers.MATRIX_BACKEND) == "contract"
    others = [b for b in ("tensorflow", "jax", "torch") if b != tiers.MATRIX_BACKEND]
    assert {effective_tier("contract", True, b) for b in others} == {"full"}
    assert {effective_tier("contract", False, b) for b in others} == {"contract"}
    with pytest.raises(TierError, match="matrix mark goes with the contract tier"):
        effective_tier("large", True, tiers.LARGE_BACKEND)


def test_heavy_tiers_run_on_the_large_backend_only():
    assert effective_tier("large", False, tiers.LARGE_BACKEND) == "large"
    assert effective_tier("full", False, "jax") is None


def test_a_contract_test_keeps_a_representative_on_every_backend():
    tiers.check_representatives({"a.py::t": [[False, True, True], [False]], "a.py::u": []})
    with pytest.raises(TierError, match="a.py::only"):
        # Stacked parametrizations: the second has no unmarked value, so every case is matrix.
        tiers.check_representatives({"a.py::only": [[False, True], [True]], "a.py::t": []})


def test_matrix_marks_all_but_the_representatives():
    names, cases = tiers.matrix("shape, units", [((2, 5), 8), ((1, 9), 4), ((3, 3), 2)], keep=[1])
    assert names == "shape, units"
    assert cases[1] == ((1, 9), 4)
    assert [case.values for case in (cases[0], cases[2])] == [((2, 5), 8), ((3, 3), 2)]
    assert all([m.name for m in case.marks] == ["matrix"] for case in (cases[0], cases[2]))
    _, cases = tiers.matrix("n", [1, pytest.param(2, marks=pytest.mark.long, id="two")])
    assert cases[0] == 1 and cases[1].id == "two" and cases[1].values == (2,)
    assert [m.name for m in cases[1].marks] == ["long", "matrix"]
    with pytest.raises(TierError, match=r"matrix\('n'\): keep \[5\] names no case"):
        tiers.matrix("n", [1, 2], keep=[5])


def test_selections():
    assert selected_tiers("default", first=True) == ("neutral", "contract")
    assert selected_tiers("default", first=False) == ("contract",)
    # The heavy tiers run on TensorFlow wherever it stands in --backends.
    assert {"large", "full"} <= set(selected_tiers("full", first=False))
    assert selected_tiers("large", first=False) == ("large",)
    with pytest.raises(ValueError, match="tier: expected one of default, large, full, got 'x'"):
        selected_tiers("x", first=True)


FOLDER_TESTS = """
import pytest

pytestmark = pytest.mark.contract

@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.matrix)])
def test_shapes(n):
    assert n

@pytest.mark.neutral
def test_parser():
    pass

@pytest.mark.large
def test_big():
    pass
"""


def collect_folder(tmp_path, sources, *args):
    for name in ("conftest.py", "pytest.ini", "tiers.py"):
        shutil.copy(HERE / name, tmp_path / name)
    for name, source in sources.items():
        (tmp_path / name).write_text(source)
    listing = tmp_path / "listing.tsv"
    env = dict(os.environ, KERAS_BACKEND=tiers.LARGE_BACKEND)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--tier-listing", listing, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    return result, listing


def test_a_collection_selects_by_tier_and_lists_each_tier(tmp_path):
    result, listing = collect_folder(tmp_path, {"test_made.py": FOLDER_TESTS}, "--tiers", "large")
    assert result.returncode == 0, result.stdout + result.stderr
    # On TensorFlow (not the matrix backend) the matrix case is in full only.
    assert listing.read_text().splitlines() == [
        "test_made.py::test_shapes[1]\tcontract",
        "test_made.py::test_shapes[2]\tfull",
        "test_made.py::test_parser\tneutral",
        "test_made.py::test_big\tlarge",
    ]
    assert "1/4 tests collected (3 deselected)" in result.stdout
    # One matrix case chosen by its id: its test still has a representative.
    result, _ = collect_folder(
        tmp_path, {"test_made.py": FOLDER_TESTS}, "--tiers", "full", "test_made.py::test_shapes[2]"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 test collected" in result.stdout


BROKEN = {
    "test_none.py": "def test_loose():\n    pass\n",
    "test_two.py": "import pytest\n\npytestmark = pytest.mark.neutral\n\n"
    "@pytest.mark.contract\n@pytest.mark.full\ndef test_both():\n    pass\n",
    "test_matrix.py": "import pytest\n\npytestmark = pytest.mark.contract\n\n"
    "@pytest.mark.parametrize('n', [pytest.param(1, marks=pytest.mark.matrix)])\n"
    "def test_all_matrix(n):\n    pass\n",
}


def test_a_collection_fails_on_a_test_in_no_tier_or_two(tmp_path):
    result, listing = collect_folder(tmp_path, BROKEN)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and not listing.exists()
    for message in (
        "test_none.py::test_loose: in no tier",
        "test_two.py::test_both: in 2 tiers (contract, full)",
        "every case of these contract tests is marked matrix",
        "test_matrix.py::test_all_matrix",
    ):
        assert message in output, output


@pytest.fixture
def runner_calls(monkeypatch):
    """The pytest runs run_backends.main would start, recorded instead of started."""
    import run_backends

    calls = []

    def fake_run(backend, tiers, pytest_args, workers, env):
        calls.append((backend, tiers, pytest_args, workers))
        return 0, "2 passed in 1.0s", {"passed": 2}

    monkeypatch.setattr(run_backends, "run_pytest", fake_run)
    return run_backends, calls


def test_the_runner_runs_neutral_tests_on_the_first_backend_only(runner_calls, capsys):
    run_backends, calls = runner_calls
    assert run_backends.main(["--workers", "2", "--", "-x"]) == 0
    assert calls == [
        ("tensorflow", ("neutral", "contract"), ["-x"], 2),
        ("jax", ("contract",), ["-x"], 2),
        ("torch", ("contract",), ["-x"], 2),
    ]
    assert "total: 6 passed, 0 failed, 0 skipped" in capsys.readouterr().out


def test_the_heavy_tiers_run_memory_cases_after_the_others_in_one_process(runner_calls):
    run_backends, calls = runner_calls
    assert run_backends.main(["--tier", "large", "--workers", "2"]) == 0
    assert calls == [
        ("tensorflow", ("large",), ["-m", "not memory"], 2),
        ("tensorflow", ("large",), ["-m", "memory"], 1),
    ]
    calls.clear()
    assert run_backends.main(["--tier", "full", "--backends", "tensorflow,jax"]) == 0
    assert [call[:3] for call in calls] == [
        ("tensorflow", ("neutral", "contract", "large", "full"), ["-m", "not memory"]),
        ("tensorflow", ("neutral", "contract", "large", "full"), ["-m", "memory"]),
        ("jax", ("contract", "large", "full"), ["-m", "not memory"]),
        ("jax", ("contract", "large", "full"), ["-m", "memory"]),
    ]
