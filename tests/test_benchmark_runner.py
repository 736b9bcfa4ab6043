"""The benchmark runner (benchmarks/runner.py): its JSON, the load flag, --against, rendering,
and the summary page's tables and charts (benchmarks/summary.py, benchmarks/charts.py).

No benchmark is measured here: a tiny fake script in a throwaway git repository stands in
for one (except in the `large` smoke run). benchmarks/ is not in the wheel, so the package is
loaded from its folder, found through POSENC_BENCHMARKS (the repository's benchmarks/ folder,
set by .ci/run, whose tests run from a copy of tests/ outside the repository) or next to this
file in a checkout, without putting the repository on sys.path (keras_posenc must stay the
installed one); docs/benchmarks.md through POSENC_DOCS, as in test_guides.py.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from repository import benchmarks_path, docs_path

pytestmark = pytest.mark.neutral

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "benchmarks"
needs_git = pytest.mark.skipif(
    shutil.which("git") is None, reason="git is needed to make the throwaway repository"
)


def benchmarks_folder() -> pathlib.Path:
    runner = benchmarks_path("runner.py")
    if runner is None:
        pytest.skip(
            "no benchmarks/runner.py next to tests/: set POSENC_BENCHMARKS to the "
            "repository's benchmarks/ folder"
        )
    return runner.parent


def docs_folder() -> pathlib.Path:
    docs_path("benchmarks.md")
    return docs_path()


@pytest.fixture(scope="module")
def package():
    """The benchmarks package, loaded from its folder (its modules import each other)."""
    folder = benchmarks_folder()
    spec = importlib.util.spec_from_file_location(
        "benchmarks", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being made
    spec.loader.exec_module(module)
    yield module
    for name in [n for n in sys.modules if n == "benchmarks" or n.startswith("benchmarks.")]:
        sys.modules.pop(name)


@pytest.fixture(scope="module")
def runner(package):
    return importlib.import_module("benchmarks.runner")


@pytest.fixture(scope="module")
def summary(package):
    return importlib.import_module("benchmarks.summary")


@pytest.fixture(scope="module")
def charts(package):
    return importlib.import_module("benchmarks.charts")


# A stand-in benchmark: "ours" takes keras_posenc.SPEED seconds against 1 for "base", so its
# ratio tells which tree's library it ran with. The committed version has no --json, like a
# parent commit older than the runner: --against must never run the ref's script.
OLD_SCRIPT = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--sizes", default="1")
parser.parse_args()
"""
SCRIPT = """
import argparse, json, os, sys
import keras_posenc
DEFAULT_SIZES = "4,8"
parser = argparse.ArgumentParser()
parser.add_argument("--sizes", default=DEFAULT_SIZES)
parser.add_argument("--fail", default="")
parser.add_argument("--json")
args = parser.parse_args()
rows = []
for size in map(int, args.sizes.split(",")):
    rows.append({"impl": "base", "size": size, "seconds": 1.0, "x_base": 1.0})
    if str(size) == args.fail:
        rows.append({"impl": "ours", "size": size, "error": "boom"})
        continue
    speed = keras_posenc.SPEED
    row = {"impl": "ours", "size": size, "seconds": speed, "x_base": speed}
    rows.append(dict(row, backend=os.environ["KERAS_BACKEND"]))
    print("ours", size, speed)
with open(args.json, "w") as handle:
    json.dump(rows, handle)
sys.exit(1 if args.fail else 0)
"""


def _git(repo, *arguments):
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*command, *arguments], check=True, capture_output=True)


@pytest.fixture
def fake(runner, tmp_path):
    """A git repository whose committed keras_posenc has SPEED 2 and working tree SPEED 3."""
    repo = tmp_path / "repo"
    (repo / "keras_posenc").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    (repo / "keras_posenc" / "__init__.py").write_text("SPEED = 2.0\n")
    (repo / "benchmarks" / "fake.py").write_text(OLD_SCRIPT)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "parent")
    (repo / "keras_posenc" / "__init__.py").write_text("SPEED = 3.0\n")
    (repo / "benchmarks" / "fake.py").write_text(SCRIPT)
    benchmark = runner.Benchmark(
        "fake",
        str(repo / "benchmarks" / "fake.py"),
        keys=("impl", "size"),
        columns=(
            runner.Column("impl", "impl", "text"),
            runner.Column("size", "size", "text"),
            runner.Column("ms", "seconds", "ms"),
            runner.Column("x base", "x_base", "ratio"),
        ),
        compare=("x_base",),
        split="--sizes",
        split_default="DEFAULT_SIZES",
    )
    return repo, benchmark


def test_every_script_takes_json(runner):
    """Every registered script accepts --json (its --help says so) and, where the runner
    splits it into cases, has the default it reads."""
    for name, benchmark in runner.BENCHMARKS.items():
        result = subprocess.run(
            [sys.executable, str(benchmark.script_path()), "--help"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, (name, result.stderr)
        assert "--json" in result.stdout, name
        if benchmark.split:
            assert runner.cases(benchmark, []), name


def test_cases_split_the_option_and_keep_the_rest(runner, fake):
    _, benchmark = fake
    assert runner.cases(benchmark, ["--sizes=1,2", "--fail", "2"]) == [
        ("1", ["--sizes", "1", "--fail", "2"]),
        ("2", ["--sizes", "2", "--fail", "2"]),
    ]
    assert [label for label, _ in runner.cases(benchmark, [])] == ["4", "8"]
    with pytest.raises(ValueError, match="--json is the runner's"):
        runner.cases(benchmark, ["--json", "x.json"])


def test_fixed_arguments_come_first(runner):
    """One script registered twice: decoder_attention.py's parts, each with its ``--part``."""
    window, cache = runner.BENCHMARKS["decoder_window"], runner.BENCHMARKS["decoder_cache"]
    assert window.script == cache.script == "decoder_attention.py"
    assert runner.cases(window, ["--lengths", "64,128", "--window", "16"]) == [
        ("64", ["--part", "window", "--lengths", "64", "--window", "16"]),
        ("128", ["--part", "window", "--lengths", "128", "--window", "16"]),
    ]
    assert [label for label, _ in runner.cases(window, [])] == [
        "512", "1024", "2048", "4096", "8192"
    ]  # fmt: skip
    assert runner.cases(cache, ["--steps", "2"]) == [("all", ["--part", "cache", "--steps", "2"])]


def test_load_flag(runner):
    assert runner.load_limits(2, 0.5) == (1.0, 3.0)
    assert not runner.under_load(0.2, 2.9, cores=2, threshold=0.5)  # its own threads: fine
    assert runner.under_load(1.1, 1.5, cores=2, threshold=0.5)  # busy before it started
    assert runner.under_load(0.2, 3.1, cores=2, threshold=0.5)  # someone joined while it ran
    assert not runner.under_load(3.5, 10.0, cores=8, threshold=0.5)
    assert runner.under_load(0.6, 0.0, cores=1, threshold=0.5)


def test_merge_takes_medians_and_keeps_errors(runner, fake):
    _, benchmark = fake
    runs = [
        {"rows": [{"impl": "a", "size": 1, "seconds": s, "x_base": s, "note": "n"}]}
        for s in (1.0, 3.0, 2.0)
    ]
    runs.append({"rows": [{"impl": "b", "size": 1, "error": "boom"}]})
    merged = runner.merge_rounds(benchmark, runs)
    assert merged == [
        {"impl": "a", "size": 1, "seconds": 2.0, "x_base": 2.0, "note": "n", "rounds": 3},
        {"impl": "b", "size": 1, "error": "boom"},
    ]


@needs_git
def test_main_writes_the_json_record(runner, fake, tmp_path, monkeypatch):
    repo, benchmark = fake
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("JAX_DISABLE_MOST_OPTIMIZATIONS", raising=False)  # set by conftest.py
    monkeypatch.setitem(runner.BENCHMARKS, "fake", benchmark)
    monkeypatch.setattr(runner, "HERE", repo / "benchmarks")  # the working tree is the repo
    out = tmp_path / "out" / "fake.json"
    argv = ["run", "fake", "--backends", "jax,torch", "--settle", "0", "--out", str(out)]
    assert runner.main([*argv, "--", "--sizes", "5"]) == 0
    record = json.loads(out.read_text())
    assert record["schema"] == 1 and record["benchmark"] == "fake"
    assert record["command"] == (
        "python -m benchmarks run fake --backends jax,torch --settle 0 -- --sizes 5"
    )
    assert record["script_args"] == ["--sizes", "5"] and record["rounds"] == 1
    assert set(record["machine"]) == {"cpu", "cores", "avx512", "memory_gib", "system", "python"}
    assert record["machine"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["environment"].get("OMP_NUM_THREADS") == "1"
    assert "JAX_DISABLE_MOST_OPTIMIZATIONS" not in record["environment"]
    assert "- Environment: `OMP_NUM_THREADS=1`" in runner.render_block(record, "jax", benchmark)
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert record["trees"]["current"]["commit"] == head
    assert record["trees"]["current"]["dirty"] is True
    assert set(record["backends"]) == {"jax", "torch"}
    for backend, result in record["backends"].items():
        assert {"keras", backend, "numpy"} <= set(result["versions"])
        for field in ("load_before", "load_after", "load_max"):
            assert isinstance(result[field], float)
        assert result["under_load"] is runner.under_load(
            result["load_before"], result["load_max"], record["machine"]["cores"], 0.5
        )
        assert result["failed"] is False
        assert result["results"]["current"][1] == {
            "impl": "ours",
            "size": 5,
            "seconds": 3.0,
            "x_base": 3.0,
            "backend": backend,
            "rounds": 1,
        }
        assert [(r["tree"], r["case"], r["returncode"]) for r in result["runs"]] == [
            ("current", "5", 0)
        ]


@needs_git
def test_against_runs_both_trees_interleaved(runner, fake, capsys):
    repo, benchmark = fake
    record = runner.run(
        benchmark,
        tree=repo,
        backends=["tensorflow"],
        script_args=["--sizes", "4,8", "--fail", "8"],
        against="HEAD",
        settle=0,
    )
    result = record["backends"]["tensorflow"]
    order = [(r["case"], r["round"], r["tree"]) for r in result["runs"]]
    assert order == [
        (case, round_index, tree)
        for case in ("4", "8")
        for round_index in (0, 1)
        for tree in ("current", "ref")
    ]
    assert record["trees"]["ref"]["name"] == "HEAD" and record["trees"]["ref"]["dirty"] is False
    # The ref's library (SPEED 2) measured by the working tree's script (the ref's has no --json).
    ours = {side: rows[1] for side, rows in result["results"].items()}
    assert ours["ref"]["x_base"] == 2.0 and ours["current"]["x_base"] == 3.0
    assert ours["current"]["rounds"] == 2
    assert result["results"]["current"][3] == {"impl": "ours", "size": 8, "error": "boom"}
    assert result["failed"] is True  # the script exits 1 when a case failed
    assert result["comparison"] == [
        {"key": {"impl": "base", "size": 4}, "field": "x_base", "ref": 1.0, "current": 1.0,
         "change": 0.0},
        {"key": {"impl": "ours", "size": 4}, "field": "x_base", "ref": 2.0, "current": 3.0,
         "change": 0.5},
        {"key": {"impl": "base", "size": 8}, "field": "x_base", "ref": 1.0, "current": 1.0,
         "change": 0.0},
    ]  # fmt: skip
    line = runner.comparison_line(benchmark, result["comparison"][1])
    assert line == "impl=ours size=4 x_base: 2.00 -> 3.00 (+50.0%)"
    # The temporary worktree is gone, and git knows it.
    listed = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert len(listed.strip().splitlines()) == 1
    block = runner.render_block(record, "tensorflow", benchmark)
    assert "| impl | size | field | HEAD " in block
    assert "| ours | 4 | x_base | 2.00 | 3.00 | +50.0% |" in block
    assert "**Some runs failed**" in block


@needs_git
def test_against_reference_kernels_runs_the_tree_twice(runner, fake):
    """``--against reference-kernels``: the same tree, the ref side with every kernel's
    reference (KERAS_POSENC_KERNELS=reference), interleaved; no git worktree."""
    repo, benchmark = fake
    (repo / "keras_posenc" / "__init__.py").write_text(
        "import os\n"
        "kernels = os.environ.get('KERAS_POSENC_KERNELS')\n"
        "SPEED = {'reference': 5.0, 'reference:scratch': 4.0}.get(kernels, 3.0)\n"
    )
    record = runner.run(
        benchmark,
        tree=repo,
        backends=["jax"],
        script_args=["--sizes", "4"],
        against=runner.REFERENCE_KERNELS,
        settle=0,
    )
    result = record["backends"]["jax"]
    assert [r["tree"] for r in result["runs"]] == ["current", "ref", "current", "ref"]
    ours = {side: rows[1] for side, rows in result["results"].items()}
    assert ours["ref"]["x_base"] == 5.0 and ours["current"]["x_base"] == 3.0
    assert record["trees"]["ref"]["name"] == "reference-kernels"
    line = runner.comparison_line(benchmark, result["comparison"][1])
    assert line == "impl=ours size=4 x_base: 5.00 -> 3.00 (-40.0%)"
    one = runner.run(
        benchmark,
        tree=repo,
        backends=["jax"],
        script_args=["--sizes", "4"],
        against="reference-kernels:scratch",
        settle=0,
        rounds=1,
    )
    assert one["backends"]["jax"]["results"]["ref"][1]["x_base"] == 4.0, one["backends"]["jax"][
        "results"
    ]


@needs_git
def test_against_an_unknown_ref_fails_cleanly(runner, fake):
    repo, benchmark = fake
    with pytest.raises(RuntimeError, match="rev-parse"):
        runner.run(
            benchmark, tree=repo, backends=["jax"], script_args=[], against="no-such-ref", settle=0
        )


def test_probe_refuses_a_library_from_elsewhere(runner, tmp_path):
    """Without keras_posenc in the tree on PYTHONPATH, the runner cannot say what it measured."""
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    with pytest.raises(RuntimeError, match="not from that tree"):
        runner.probe(sys.executable, env, tmp_path, "jax")


def _emptied(text: str) -> str:
    """``text`` with every rendered block's content removed (only the markers left)."""
    lines, inside = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("<!-- benchmarks:") and line.rstrip().endswith(" end -->"):
            inside = False
        if not inside:
            lines.append(line)
        if line.startswith("<!-- benchmarks:") and line.rstrip().endswith(" start -->"):
            inside = True
    return "".join(lines)


def test_render_reproduces_the_fixture(runner):
    """The fixture page's blocks are what rendering the fixture record gives (a real tiny
    relative_attention run on the three backends, on a loaded machine: flagged)."""
    expected = (FIXTURES / "benchmarks.md").read_text()
    assert expected.count(" start -->") == 3
    assert runner.render_document(_emptied(expected), FIXTURES) == expected
    assert runner.render_document(expected, FIXTURES) == expected
    assert runner.stale_blocks(expected, FIXTURES) == []
    record = json.loads((FIXTURES / "relative_attention.json").read_text())
    for result in record["backends"].values():
        assert result["under_load"] is True
        for row in result["results"]["current"]:
            assert row["extra_S"] == row["extra_peak_bytes"] / (8 * row["length"] ** 2 * 4)
    assert "**taken under load**" in expected


def test_render_detects_a_hand_edited_number(runner):
    text = (FIXTURES / "benchmarks.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("| rel_keys |"))  # TensorFlow's
    cells = line.split(" | ")
    cells[3] = "0.01"  # the "x mha" column
    edited = text.replace(line, " | ".join(cells), 1)
    assert edited != text
    assert runner.stale_blocks(edited, FIXTURES) == ["relative_attention:tensorflow"]
    assert runner.render_document(edited, FIXTURES) == text


def test_render_rejects_broken_markers(runner, tmp_path):
    start = "<!-- benchmarks:relative_attention:jax start -->\n"
    end = "<!-- benchmarks:relative_attention:jax end -->\n"
    quoted = f"Markers such as `{start.strip()}` quoted in prose are not markers.\n"
    assert runner.render_document(quoted, tmp_path) == quoted
    with pytest.raises(ValueError, match="line 1: relative_attention:jax is never ended"):
        runner.render_document(start, FIXTURES)
    with pytest.raises(ValueError, match="line 2: end of relative_attention:jax without"):
        runner.render_document("text\n" + end, FIXTURES)
    with pytest.raises(ValueError, match="no data/benchmarks/relative_attention.json"):
        runner.render_document(start + end, tmp_path)
    record = json.loads((FIXTURES / "relative_attention.json").read_text())
    (tmp_path / "one.json").write_text(json.dumps(dict(record, backends={})))
    with pytest.raises(ValueError, match="has no jax run"):
        runner.render_document(start.replace("relative_attention", "one") + end.replace(
            "relative_attention", "one"), tmp_path)  # fmt: skip


def test_docs_pages_match_their_json(runner):
    """Every rendered block of the summary and of the notes is what its JSON gives: a number
    typed into one by hand fails here (`python -m benchmarks render` rewrites them)."""
    docs = docs_folder()
    for page in runner.PAGES:
        text = (docs / page).read_text()
        assert runner.render_document(text, docs / "data" / "benchmarks") == text, page
    summary = (docs / "benchmarks.md").read_text()
    assert summary.count("<!-- benchmarks:summary:") == 2 * len(runner.charts.HEADLINES)


def test_summary_page_is_one_screen_without_issue_numbers(runner):
    """The summary stays short, shows every chart, and cites no issue a reader cannot open."""
    docs = docs_folder()
    text = (docs / "benchmarks.md").read_text()
    assert len(text.splitlines()) < 300
    for name in runner.charts.HEADLINES:
        assert f"](img/benchmarks/{name}.svg)" in text, name
        assert (docs / "img" / "benchmarks" / f"{name}.svg").is_file(), name
    assert "benchmark-notes.md" in text


# Pages for developers, which may cite the project's issues; every other page is a user's.
DEVELOPER_PAGES = ("development.md", "benchmark-notes.md", "changelog.md")


def test_user_docs_cite_no_issue_numbers():
    """A reader cannot open the project's issues: user pages say what changed instead."""
    pattern = re.compile(r"(?i)\bissues? #?\d+|(?<![\w&/])#\d+\b")
    found = [
        f"{path.relative_to(docs_folder())}:{number}: {match[0]}"
        for path in sorted(docs_folder().rglob("*.md"))
        if path.name not in DEVELOPER_PAGES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in pattern.finditer(line)
    ]
    assert found == []


def test_summary_renders_from_the_json(summary, runner):
    """A summary cell is its record's field, formatted; a missing run reads "-"."""
    data = docs_folder() / "data" / "benchmarks"
    (stem,) = summary.HEADLINES["relative_attention_time"].sources
    record = json.loads((data / f"{stem}.json").read_text())
    row = next(
        r
        for r in record["backends"]["jax"]["results"]["current"]
        if r["implementation"] == "rel_bias" and r["length"] == 2048
    )
    block = summary.render_summary("relative_attention_time", data)
    line = next(x for x in block.splitlines() if x.startswith("| bias, L = 2048 |"))
    assert line.split(" | ")[2] == f"{row['x_mha']:.2f}x"
    assert (
        "![Relative attention" in block and "(img/benchmarks/relative_attention_time.svg)" in block
    )
    assert f"commit `{record['trees']['current']['commit'][:10]}`" in block
    assert summary.format_value(None, "x") == "-" and summary.format_value(0.704, "s") == "0.70 s"
    assert summary.format_value(123.4, "images/s") == "123 images/s"
    with pytest.raises(ValueError, match="no summary headline 'nope'"):
        summary.render_summary("nope", data)
    text = "<!-- benchmarks:summary:muse start -->\n<!-- benchmarks:summary:muse end -->\n"
    assert runner.stale_blocks(text, data) == ["summary:muse"]
    rendered = runner.render_document(text, data)
    assert runner.stale_blocks(rendered, data) == []


def _docs_copy(tmp_path: pathlib.Path) -> pathlib.Path:
    """The docs' benchmark records and charts, copied to a throwaway docs folder."""
    docs = docs_folder()
    copy = tmp_path / "docs"
    shutil.copytree(docs / "data" / "benchmarks", copy / "data" / "benchmarks")
    shutil.copytree(docs / "img" / "benchmarks", copy / "img" / "benchmarks")
    return copy


def test_charts_are_current(charts):
    """The committed charts show their JSON (and, drawn by this matplotlib version, are
    byte for byte what it draws): `python -m benchmarks charts` redraws them."""
    assert charts.stale_charts(docs_folder()) == []


def test_charts_are_deterministic(charts, tmp_path):
    """Two drawings of one chart are the same bytes: no date, fixed ids, a fixed size."""
    pytest.importorskip("matplotlib")
    spec = charts.chart_spec(charts.HEADLINES["muse"], docs_folder() / "data" / "benchmarks")
    first, second = charts.draw(spec), charts.draw(spec)
    assert first == second
    text = first.decode()
    assert 'width="648pt"' in text and "<dc:date>" not in text
    assert f"benchmarks-chart sha256:{charts.fingerprint(spec)}" in text
    for label in spec["labels"]:
        assert label in text  # text stays text: the diff of a changed chart is readable
    docs = _docs_copy(tmp_path)
    assert charts.write_charts(docs) == []  # the committed ones are already these bytes


def test_check_finds_a_stale_chart(charts, tmp_path):
    """A chart whose JSON changed, a missing chart and one drawn by other code are stale."""
    docs = _docs_copy(tmp_path)
    assert charts.stale_charts(docs, redraw=False) == []
    path = docs / "data" / "benchmarks" / "export.json"
    record = json.loads(path.read_text())
    for row in record["backends"]["jax"]["results"]["current"]:
        if row.get("ort_over_keras") is not None:
            row["ort_over_keras"] *= 0.5
    path.write_text(json.dumps(record))
    (docs / "img" / "benchmarks" / "coatnet.svg").unlink()
    assert charts.stale_charts(docs, redraw=False) == ["export", "coatnet"]
    matplotlib = pytest.importorskip("matplotlib")
    muse = docs / "img" / "benchmarks" / "muse.svg"
    text = muse.read_text()
    if f"Matplotlib v{matplotlib.__version__}," not in text:
        pytest.skip("the committed charts were drawn by another matplotlib version")
    muse.write_text(text.replace("#1a73e8", "#000000"))  # JAX's bars recoloured
    assert charts.stale_charts(docs, redraw=False) == ["export", "coatnet"]
    assert charts.stale_charts(docs) == ["muse", "export", "coatnet"]
    assert sorted(charts.write_charts(docs)) == ["coatnet", "export", "muse"]
    assert charts.stale_charts(docs) == []


def test_charts_command_checks(runner, tmp_path, capsys):
    docs = _docs_copy(tmp_path)
    assert runner.main(["charts", "--docs-folder", str(docs), "--check"]) == 0
    (docs / "img" / "benchmarks" / "zoo_create.svg").unlink()
    assert runner.main(["charts", "--docs-folder", str(docs), "--check"]) == 1
    assert "zoo_create.svg: differs from its JSON" in capsys.readouterr().out


@pytest.mark.large
def test_relative_attention_through_the_runner(runner):
    """A real (tiny) run on the session's backend: rows with time ratios and memory in S."""
    import keras

    backend = keras.backend.backend()
    benchmark = runner.BENCHMARKS["relative_attention"]
    record = runner.run(
        benchmark,
        tree=benchmarks_folder().parent,
        backends=[backend],
        script_args=["--lengths", "64", "--impls", "keras_mha,rel_keys", "--repeats", "1"],
        settle=0,
    )
    rows = record["backends"][backend]["results"]["current"]
    assert [(r["implementation"], r["length"]) for r in rows] == [
        ("keras_mha", 64),
        ("rel_keys", 64),
    ]
    for row in rows:
        assert row["x_mha"] > 0 and row["extra_S"] == row["extra_peak_bytes"] / (8 * 64 * 64 * 4)
    assert "| rel_keys | 64 |" in runner.render_block(record, backend)


@pytest.mark.large
def test_decoder_attention_through_the_runner(runner):
    """Both parts of decoder_attention.py, tiny (``--quick``), through the runner: the cache
    part's byte ratio is the caches' sizes, the window part's memory ratio its rows'."""
    import keras

    backend = keras.backend.backend()
    tree = benchmarks_folder().parent
    record = runner.run(
        runner.BENCHMARKS["decoder_cache"],
        tree=tree,
        backends=[backend],
        script_args=["--quick", "--cases", "mha,rolling_gqa"],
        settle=0,
    )
    mha, rolling = record["backends"][backend]["results"]["current"]
    assert (mha["case"], rolling["case"]) == ("mha", "rolling_gqa")
    assert (mha["kv_heads"], mha["cache_positions"]) == (8, 128)  # L = 128
    assert (rolling["kv_heads"], rolling["cache_positions"]) == (2, 16)  # W = 16
    assert rolling["x_full_cache"] == (2 * 16) / (8 * 128)
    assert mha["x_full_time"] == 1.0 and rolling["x_full_time"] > 0
    assert rolling["x_full_peak"] == rolling["extra_peak_bytes"] / mha["extra_peak_bytes"]
    assert "| rolling_gqa | 128 | 2 | 16 | 0 | 0.03 |" in runner.render_block(record, backend)
    record = runner.run(
        runner.BENCHMARKS["decoder_window"],
        tree=tree,
        backends=[backend],
        script_args=["--quick", "--lengths", "64", "--impls", "window_rope,full_rope"],
        settle=0,
    )
    full, window = record["backends"][backend]["results"]["current"]
    assert [(r["implementation"], r["length"]) for r in (full, window)] == [
        ("full_rope", 64),
        ("window_rope", 64),
    ]  # the baseline first, whatever the order asked
    assert full["x_full"] == 1.0 and window["x_full"] > 0
    assert window["x_full_memory"] == window["extra_peak_bytes"] / full["extra_peak_bytes"]
    assert "| window_rope | 64 |" in runner.render_block(record, backend)


def test_across_block_sets_backends_side_by_side(runner):
    """An across_BASELINE block: each backend's value of the across fields, and its ratio to
    the baseline backend's, row by row (missing rows and zero baselines give "-")."""
    benchmark = runner.Benchmark(
        "fake",
        "fake.py",
        keys=("impl",),
        columns=(runner.Column("impl", "impl", "text"), runner.Column("rate", "rate", "num")),
        compare=("rate",),
        across=("rate",),
    )
    rows = {
        "jax": [{"impl": "a", "rate": 200.0}, {"impl": "b", "rate": 0.0}],
        "torch": [{"impl": "a", "rate": 50.0}, {"impl": "b", "rate": 3.0}],
        "tensorflow": [{"impl": "a", "rate": 100.0}],
    }
    record = {
        "benchmark": "fake",
        "date": "2026-12-01T07:00:00",
        "trees": {
            "current": {"name": "working tree", "commit": "0123456789abcdef", "dirty": False}
        },
        "backends": {b: {"results": {"current": r}} for b, r in rows.items()},
    }
    block = runner.render_block(record, "across_jax", benchmark)
    header = "| impl | field | TensorFlow | JAX | PyTorch | TensorFlow / JAX | PyTorch / JAX |"
    assert header in block
    assert "| a | rate | 100 | 200 | 50.0 | 0.50x | 0.25x |" in block
    assert "| b | rate | - | 0.00 | 3.00 | - | - |" in block
    with pytest.raises(ValueError, match="across_cpu needs a cpu run"):
        runner.render_block(record, "across_cpu", benchmark)
