"""The benchmark runner: runs the scripts in this folder, records their results as JSON, and
renders the benchmark pages' tables and charts from that JSON (render.py, summary.py,
charts.py).

Run it from the repository root::

    python -m benchmarks list
    python -m benchmarks run relative_attention --backends tensorflow,jax,torch
    python -m benchmarks run relative_attention --backends jax -- --lengths 2048 --repeats 5
    python -m benchmarks run relative_attention --against HEAD~1 -- --lengths 1024,2048
    python -m benchmarks render            # rewrite the marked tables of the benchmark pages
    python -m benchmarks render --check    # exit 1 if a marked table differs from its JSON
    python -m benchmarks charts            # draw the summary's charts (needs matplotlib)
    python -m benchmarks charts --check    # exit 1 if a chart differs from its JSON
    python -m benchmarks show docs/data/benchmarks/relative_attention.json

``run`` starts the script once per backend and case (one value of ``--lengths`` for the
attention benchmarks, the whole run for the others), each in its own subprocess with
``KERAS_BACKEND`` set and ``PYTHONPATH`` set to the tree whose ``keras_posenc`` is
measured, and collects the rows the script writes with ``--json``. Options after ``--``
go to the script. It writes one JSON file (default ``docs/data/benchmarks/NAME.json``,
``NAME.against.json`` with ``--against``) holding the rows, the machine, the git commit,
the command and the load average around each backend's run.

Load: the 1-minute load average is read before each backend (after waiting up to
``--settle`` seconds for it to drop below the limit, so one backend's run does not count
against the next), before every script start and after the backend's last one. A backend's
run is flagged as taken under load when the load before it exceeds ``--load-threshold``
(default 0.5) per CPU core, or a later reading exceeds 1 + that threshold per core: the
benchmark's own threads count in the load average while it runs (up to about one per core),
so only what is beyond them is someone else's work.

``--against REF`` measures the working tree and REF in the same run: REF is checked out
into a temporary ``git worktree`` (removed afterwards) and every case runs for both trees
in turn (working tree, REF, working tree, REF for two ``--rounds``), so a drift in the
machine's load hits both. Both sides run this tree's benchmark script; only
``PYTHONPATH`` differs, so the measuring code is the same and only the library differs (REF
need not have the script, nor its ``--json``). Each field of a row is the median over the
rounds (ratios are taken within one script run, against the baseline measured in that run,
and then their median); the comparison lists each ratio for both trees and their relative
change, e.g. ``impl=rel_keys L=2048 x_mha: 1.53 -> 1.49 (-2.6%)``.

``--against reference-kernels`` measures the working tree twice instead: as it is, and with
``KERAS_POSENC_KERNELS=reference`` (every backend override off, the ``keras.ops``
references of ``keras_posenc/backend/common.py`` on), so a kernel override's gain is
measured on a benchmark a user runs, in one run (docs/development.md, "Backend kernels");
``--against reference-kernels:NAME,NAME`` turns off the named kernels' overrides only.

This module and its sibling modules registry.py, render.py and summary.py use only the
standard library (charts.py imports matplotlib when it draws) and import none of the
benchmark scripts; tests load the package from its folder (tests/test_benchmark_runner.py).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import json
import os
import pathlib
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from . import charts
from .registry import BACKEND_NAMES, BACKENDS, BENCHMARKS, Benchmark, Column
from .render import _compared, _is_number, _note, render_block, render_document, stale_blocks

# The names the runner's users (and tests) read from it: the registry and the renderer.
__all__ = [
    "BACKEND_NAMES",
    "BACKENDS",
    "BENCHMARKS",
    "Benchmark",
    "Column",
    "main",
    "render_block",
    "render_document",
    "run",
    "stale_blocks",
]

HERE = pathlib.Path(__file__).resolve().parent
SCHEMA = 1
# The pages with marked tables, under docs/: the summary and the method and history notes.
PAGES = ("benchmarks.md", "benchmark-notes.md")
# importlib.metadata names to try for each backend's version, first found wins.
BACKEND_DISTRIBUTIONS = {
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "jax": ("jax",),
    "torch": ("torch",),
}
DATA_FOLDER = pathlib.Path("docs", "data", "benchmarks")
# Environment variables that change speed or memory: recorded (and printed above the
# tables) when set, since the scripts inherit them.
ENVIRONMENT = (
    "KERAS_POSENC_KERNELS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "TF_ENABLE_ONEDNN_OPTS",
    "XLA_FLAGS",
    "JAX_DISABLE_MOST_OPTIMIZATIONS",
    "JAX_ENABLE_X64",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_ARENA_MAX",
)
DEFAULT_LOAD_THRESHOLD = 0.5


# ---------------------------------------------------------------------------------------
# The machine, the trees, the load


def machine() -> dict:
    """The machine's description: CPU model, cores, AVX-512, memory, OS and Python."""
    cpu, flags, memory = platform.processor() or platform.machine(), None, None
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                cpu = value.strip()
            elif name.strip() in ("flags", "Features") and flags is None:
                flags = value.split()
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 2**20, 1)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "avx512": None if flags is None else "avx512f" in flags,
        "memory_gib": memory,
        "system": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
    }


def load_average() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def load_limits(cores: int, threshold: float) -> tuple[float, float]:
    """The load above which a run counts as under load: before it, and while/after it runs.

    While it runs, the benchmark's own threads (up to about one per core) are in the load
    average, so the second limit allows ``cores`` more.
    """
    return threshold * cores, (1 + threshold) * cores


def under_load(before: float, during: float, cores: int, threshold: float) -> bool:
    """Whether a run with these load averages (before it; the largest while and after it
    ran) was taken under load, by :func:`load_limits`."""
    before_limit, during_limit = load_limits(cores, threshold)
    return before > before_limit or during > during_limit


def _settle(limit: float, seconds: float, poll: float = 5.0) -> float:
    """Waits up to ``seconds`` for the load average to drop to ``limit``; the time waited."""
    start = time.monotonic()
    while load_average() > limit and time.monotonic() - start < seconds:
        time.sleep(min(poll, max(0.0, seconds - (time.monotonic() - start))))
    return round(time.monotonic() - start, 1)


def _git(tree: pathlib.Path, *arguments: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(tree), *arguments], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(arguments)} failed in {tree}: {result.stderr.strip()}")
    return result.stdout.strip()


def tree_info(tree: pathlib.Path) -> dict:
    """The commit of ``tree`` and whether tracked files differ from it (untracked ignored)."""
    try:
        commit = _git(tree, "rev-parse", "HEAD")
        dirty = bool(_git(tree, "status", "--porcelain", "--untracked-files=no"))
        subject = _git(tree, "log", "-1", "--format=%s")
    except (RuntimeError, OSError):
        return {"commit": None, "dirty": None, "subject": None}
    return {"commit": commit, "dirty": dirty, "subject": subject}


@contextlib.contextmanager
def ref_worktree(tree: pathlib.Path, ref: str) -> Iterator[pathlib.Path]:
    """``ref`` checked out (detached) into a temporary git worktree, removed afterwards."""
    commit = _git(tree, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    folder = pathlib.Path(tempfile.mkdtemp(prefix="posenc-benchmark-"))
    path = folder / "tree"
    try:
        _git(tree, "worktree", "add", "--detach", "--quiet", str(path), commit)
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(tree), "worktree", "remove", "--force", str(path)],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "-C", str(tree), "worktree", "prune"], capture_output=True)


_PROBE = """
import importlib.metadata, importlib.util, json, sys
def version(names):
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
spec = importlib.util.find_spec("keras_posenc")
print(json.dumps({
    "keras_posenc": spec.origin if spec else None,
    "keras": version(["keras"]),
    "backend": version(json.loads(sys.argv[1])),
    "numpy": version(["numpy"]),
}))
"""


def probe(python: str, env: dict, root: pathlib.Path, backend: str) -> dict:
    """Versions seen by a subprocess with ``env``, and a check that its ``keras_posenc`` is
    the one in ``root`` (read by metadata and import specs, without importing a backend)."""
    names = json.dumps(BACKEND_DISTRIBUTIONS[backend])
    # -P: no current folder on sys.path, as for the scripts (whose first entry is
    # benchmarks/): the library must come through PYTHONPATH.
    result = subprocess.run(
        [python, "-P", "-c", _PROBE, names], env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"probing the environment failed: {result.stderr.strip()}")
    found = json.loads(result.stdout)
    origin = found.pop("keras_posenc")
    if origin is None or not pathlib.Path(origin).resolve().is_relative_to(root.resolve()):
        raise RuntimeError(
            f"with PYTHONPATH={root}, keras_posenc is imported from {origin}, not from that "
            "tree; the runner cannot tell which library it measures"
        )
    return {"keras": found["keras"], backend: found["backend"], "numpy": found["numpy"]}


# ---------------------------------------------------------------------------------------
# Running


def _module_constant(path: pathlib.Path, name: str) -> str:
    """The string assigned to ``name`` at the top level of the script (read, not run)."""
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    raise ValueError(f"{path.name} has no top-level {name} = '...' for the runner to split")


def cases(benchmark: Benchmark, script_args: list[str]) -> list[tuple[str, list[str]]]:
    """The script's cases as (label, arguments): one per value of ``benchmark.split``, each
    after the benchmark's fixed ``arguments``."""
    if "--json" in script_args or any(a.startswith("--json=") for a in script_args):
        raise ValueError("run: --json is the runner's; do not pass it to the script")
    fixed = list(benchmark.arguments)
    if benchmark.split is None:
        return [("all", [*fixed, *script_args])]
    rest, values = [], None
    arguments = iter(script_args)
    for argument in arguments:
        if argument == benchmark.split:
            values = next(arguments, None)
            if values is None:
                raise ValueError(f"run: {benchmark.split} needs a value")
        elif argument.startswith(benchmark.split + "="):
            values = argument.partition("=")[2]
        else:
            rest.append(argument)
    if values is None:
        values = _module_constant(benchmark.script_path(), benchmark.split_default)
    return [
        (value, [*fixed, benchmark.split, value, *rest]) for value in values.split(",") if value
    ]


def _tail(text: str, replacements: dict[str, str], lines: int = 5) -> str:
    tail = " | ".join(text.strip().splitlines()[-lines:]) or "(nothing on stderr)"
    for old, new in replacements.items():
        tail = tail.replace(old, new)
    return tail


def _run_script(
    python: str,
    benchmark: Benchmark,
    arguments: list[str],
    env: dict,
    cwd: pathlib.Path,
    replacements: dict[str, str],
) -> dict:
    """One script run: its rows (from ``--json``), exit status and wall time."""
    with tempfile.TemporaryDirectory(prefix="posenc-benchmark-rows-") as folder:
        output = pathlib.Path(folder, "rows.json")
        command = [python, str(benchmark.script_path()), *arguments, "--json", str(output)]
        sys.stdout.flush()
        start = time.monotonic()
        result = subprocess.run(
            command, env=env, cwd=cwd, stderr=subprocess.PIPE, text=True, check=False
        )
        entry = {"returncode": result.returncode, "seconds": round(time.monotonic() - start, 2)}
        entry["rows"] = json.loads(output.read_text()) if output.exists() else []
    if result.returncode != 0:
        entry["stderr_tail"] = _tail(result.stderr, replacements)
        print(f"  exit status {result.returncode}: {entry['stderr_tail']}", file=sys.stderr)
    return entry


def _key(benchmark: Benchmark, row: dict) -> tuple:
    return tuple(row.get(k) for k in benchmark.keys)


def merge_rounds(benchmark: Benchmark, runs: list[dict]) -> list[dict]:
    """One row per key over the runs' rows: each numeric field the median over the rounds.

    A key that failed in any round keeps that round's error and no numbers.
    """
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        for row in run["rows"]:
            groups.setdefault(_key(benchmark, row), []).append(row)
    merged = []
    for key, rows in groups.items():
        errors = [row["error"] for row in rows if "error" in row]
        if errors:
            merged.append({**dict(zip(benchmark.keys, key)), "error": errors[0]})
            continue
        row = dict(rows[0])
        for field, value in rows[0].items():
            values = [r.get(field) for r in rows]
            if field not in benchmark.keys and _is_number(value) and all(map(_is_number, values)):
                row[field] = statistics.median(values)
        row["rounds"] = len(rows)
        merged.append(row)
    return merged


def compare(benchmark: Benchmark, ref_rows: list[dict], rows: list[dict]) -> list[dict]:
    """Each compared field of each row in both trees, and its relative change (new/old - 1)."""
    by_key = {_key(benchmark, row): row for row in ref_rows}
    comparison = []
    for row in rows:
        ref = by_key.get(_key(benchmark, row))
        if ref is None:
            continue
        for field in benchmark.compare:
            old, new = ref.get(field), row.get(field)
            if not (_is_number(old) and _is_number(new)):
                continue
            change = new / old - 1 if old else None
            key = dict(zip(benchmark.keys, _key(benchmark, row)))
            comparison.append(
                {"key": key, "field": field, "ref": old, "current": new, "change": change}
            )
    return comparison


def _key_label(benchmark: Benchmark, key: dict) -> str:
    headers = {column.field: column.header for column in benchmark.columns}
    return " ".join(f"{headers.get(name, name)}={value}" for name, value in key.items())


def comparison_line(benchmark: Benchmark, item: dict) -> str:
    """``impl=rel_keys L=2048 x_mha: 1.53 -> 1.49 (-2.6%)``: ref first, working tree second."""
    change = "n/a" if item["change"] is None else f"{item['change']:+.1%}"
    return (
        f"{_key_label(benchmark, item['key'])} {item['field']}: "
        f"{_compared(item['ref'])} -> {_compared(item['current'])} ({change})"
    )


# ``--against`` this instead of a git ref: the working tree with every kernel's reference.
REFERENCE_KERNELS = "reference-kernels"


def run(
    benchmark: Benchmark,
    *,
    tree: pathlib.Path,
    backends: list[str],
    script_args: list[str],
    against: str | None = None,
    rounds: int | None = None,
    load_threshold: float = DEFAULT_LOAD_THRESHOLD,
    settle: float = 120.0,
    command: str = "",
    python: str = sys.executable,
) -> dict:
    """Runs ``benchmark`` on each backend (and, with ``against``, on that git ref too) and
    returns the record that :func:`main` writes as JSON.

    Example (a tiny relative_attention run on JAX, from the repository root)::

        record = run(BENCHMARKS["relative_attention"], tree=pathlib.Path("."),
                     backends=["jax"], script_args=["--lengths", "64", "--repeats", "1"])
        record["backends"]["jax"]["results"]["current"][0]["extra_S"]
    """
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise ValueError(f"run: backends must be some of {BACKENDS}; got {backends}")
    rounds = rounds or (2 if against else 1)
    if rounds < 1:
        raise ValueError(f"run: rounds must be at least 1; got {rounds}")
    tree = tree.resolve()
    case_list = cases(benchmark, script_args)
    host = machine()
    cores = host["cores"] or 1
    before_limit, during_limit = load_limits(cores, load_threshold)
    record = {
        "schema": SCHEMA,
        "benchmark": benchmark.name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "script_args": list(script_args),
        "machine": host,
        "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ},
        "load_threshold_per_core": load_threshold,
        "load_limits": {"before": before_limit, "during": during_limit},
        "rounds": rounds,
        "trees": {"current": {"name": "working tree", **tree_info(tree)}},
        "backends": {},
    }
    replacements = {str(tree): "<tree>", sys.prefix: "<python>"}
    with contextlib.ExitStack() as stack:
        sides = {"current": tree}
        side_env = {"current": {}, "ref": {}}
        if against and against.split(":")[0] == REFERENCE_KERNELS:
            record["trees"]["ref"] = {"name": against, **tree_info(tree)}
            sides["ref"] = tree
            side_env = {
                "current": {"KERAS_POSENC_KERNELS": ""},
                "ref": {"KERAS_POSENC_KERNELS": "reference" + against[len(REFERENCE_KERNELS) :]},
            }
        elif against:
            ref_root = stack.enter_context(ref_worktree(tree, against))
            record["trees"]["ref"] = {"name": against, **tree_info(ref_root)}
            replacements[str(ref_root)] = "<ref>"
            sides["ref"] = ref_root
        for backend in backends:
            envs = {
                side: dict(
                    os.environ, KERAS_BACKEND=backend, PYTHONPATH=str(root), **side_env[side]
                )
                for side, root in sides.items()
            }
            versions = {
                side: probe(python, envs[side], root, backend) for side, root in sides.items()
            }
            waited = _settle(before_limit, settle)
            before = load_average()
            print(f"== {benchmark.name} on {backend}: load average {before}", flush=True)
            runs = []
            for label, arguments in case_list:
                for round_index in range(rounds):
                    for side, root in sides.items():
                        print(f"-- {side} tree, case {label}, round {round_index + 1}", flush=True)
                        entry = {"tree": side, "case": label, "round": round_index}
                        entry["load_before"] = load_average()
                        entry.update(
                            _run_script(
                                python, benchmark, arguments, envs[side], root, replacements
                            )
                        )
                        runs.append(entry)
            after = load_average()
            during = max([after] + [entry["load_before"] for entry in runs[1:]])
            results = {
                side: merge_rounds(benchmark, [r for r in runs if r["tree"] == side])
                for side in sides
            }
            result = {
                "versions": versions["current"],
                "settle_seconds": waited,
                "load_before": before,
                "load_after": after,
                "load_max": during,
                "under_load": under_load(before, during, cores, load_threshold),
                "failed": any(r["returncode"] != 0 or not r["rows"] for r in runs),
                "results": results,
                "runs": runs,
            }
            if against:
                result["comparison"] = compare(benchmark, results["ref"], results["current"])
            record["backends"][backend] = result
    return record


# ---------------------------------------------------------------------------------------
# Command line


def _print_summary(benchmark: Benchmark, record: dict) -> None:
    for backend, result in record["backends"].items():
        flag = "UNDER LOAD" if result["under_load"] else "not under load"
        print(
            f"\n{backend}: load {result['load_before']} before, at most {result['load_max']} "
            f"after ({flag}){'; SOME RUNS FAILED' if result['failed'] else ''}"
        )
        for item in result.get("comparison", []):
            print("  " + comparison_line(benchmark, item))


def _command(argv: list[str], script_args: list[str]) -> str:
    """The command line as recorded: without the runner's --out, whose path is this
    machine's."""
    kept, skip = [], False
    for argument in argv:
        if skip:
            skip = False
        elif argument == "--out":
            skip = True
        elif not argument.startswith("--out="):
            kept.append(argument)
    tail = ["--", *script_args] if script_args else []
    return shlex.join(["python", "-m", "benchmarks", *kept, *tail])


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks``: list, run, render, show (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, script_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the benchmarks the runner knows")
    runner = commands.add_parser("run", help="run one benchmark; options after -- go to it")
    runner.add_argument("name", choices=sorted(BENCHMARKS))
    runner.add_argument("--backends", default=",".join(BACKENDS))
    runner.add_argument(
        "--against",
        metavar="REF",
        help="also measure this git ref, interleaved; or reference-kernels: this tree with "
        "KERAS_POSENC_KERNELS=reference",
    )
    runner.add_argument(
        "--rounds", type=int, help="runs per case and tree (default 1; 2 with --against)"
    )
    runner.add_argument(
        "--out", help="the JSON file (default docs/data/benchmarks/NAME[.against].json)"
    )
    runner.add_argument(
        "--load-threshold",
        type=float,
        default=DEFAULT_LOAD_THRESHOLD,
        help="load average per core above which a run is flagged (default 0.5)",
    )
    runner.add_argument(
        "--settle",
        type=float,
        default=120.0,
        help="seconds to wait at most for the load to drop before each backend",
    )
    renderer = commands.add_parser("render", help="rewrite the marked tables of the docs")
    renderer.add_argument(
        "--docs",
        action="append",
        help="a page to render (repeatable; default docs/benchmarks.md and "
        "docs/benchmark-notes.md)",
    )
    renderer.add_argument("--check", action="store_true", help="only report stale tables")
    charter = commands.add_parser("charts", help="draw the summary's charts from the JSON")
    charter.add_argument("--docs-folder", default=str(HERE.parent / "docs"))
    charter.add_argument("--check", action="store_true", help="only report stale charts")
    shower = commands.add_parser("show", help="print a JSON record's blocks, with markers")
    shower.add_argument("json")
    args = parser.parse_args(argv)
    if script_args and args.command != "run":
        parser.error("options after -- are for run only")

    if args.command == "list":
        for name, benchmark in sorted(BENCHMARKS.items()):
            command = ["benchmarks/" + benchmark.script, *benchmark.arguments]
            print(f"{name:<20} {shlex.join(command)}")
        return 0
    if args.command == "show":
        path = pathlib.Path(args.json)
        record = json.loads(path.read_text())
        for backend in record["backends"]:
            marker = f"benchmarks:{path.stem}:{backend}"
            block = render_block(record, backend)
            print(
                f"<!-- {marker} start -->\n{_note(path.stem)}\n\n{block}\n\n<!-- {marker} end -->\n"
            )
        return 0
    if args.command == "render":
        pages = args.docs or [str(HERE.parent / "docs" / page) for page in PAGES]
        any_stale = False
        for page in map(pathlib.Path, pages):
            text = page.read_text()
            folder = page.parent / "data" / "benchmarks"
            stale = stale_blocks(text, folder)
            any_stale = any_stale or bool(stale)
            if args.check:
                for name in stale:
                    print(f"{page.name}: the {name} table differs from its JSON")
                continue
            if stale:
                page.write_text(render_document(text, folder))
            print(f"{page.name}: {len(stale)} table(s) rewritten")
        return 1 if args.check and any_stale else 0
    if args.command == "charts":
        docs = pathlib.Path(args.docs_folder)
        if args.check:
            stale = charts.stale_charts(docs)
            for name in stale:
                print(f"{charts.chart_path(docs, name)}: differs from its JSON")
            return 1 if stale else 0
        changed = charts.write_charts(docs)
        print(f"{len(changed)} chart(s) drawn: {', '.join(changed) or 'none changed'}")
        return 0

    benchmark = BENCHMARKS[args.name]
    backends = [b for b in args.backends.split(",") if b]
    try:
        record = run(
            benchmark,
            tree=HERE.parent,
            backends=backends,
            script_args=script_args,
            against=args.against,
            rounds=args.rounds,
            load_threshold=args.load_threshold,
            settle=args.settle,
            command=_command(argv, script_args),
        )
    except (ValueError, RuntimeError) as error:
        parser.error(str(error))
    suffix = ".against.json" if args.against else ".json"
    out = pathlib.Path(args.out) if args.out else HERE.parent / DATA_FOLDER / (args.name + suffix)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    _print_summary(benchmark, record)
    print(f"\nwrote {out}")
    return 1 if any(result["failed"] for result in record["backends"].values()) else 0
