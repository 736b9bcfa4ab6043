"""The benchmark runner: runs the scripts in this folder, records their results as JSON, and
renders the tables of ``docs/benchmarks.md`` from that JSON.

Run it from the repository root::

    python -m benchmarks list
    python -m benchmarks run relative_attention --backends tensorflow,jax,torch
    python -m benchmarks run relative_attention --backends jax -- --lengths 2048 --repeats 5
    python -m benchmarks run relative_attention --against HEAD~1 -- --lengths 1024,2048
    python -m benchmarks render            # rewrite the marked tables of docs/benchmarks.md
    python -m benchmarks render --check    # exit 1 if a marked table differs from its JSON
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

This module uses only the standard library and imports none of its sibling scripts, so
tests can load it from its file (tests/test_benchmark_runner.py).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

HERE = pathlib.Path(__file__).resolve().parent
SCHEMA = 1
BACKENDS = ("tensorflow", "jax", "torch")
BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
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


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a rendered table: header, the row's field, and how to write it.

    ``style`` is ``text``, ``ms`` (seconds written as milliseconds), ``mb`` (bytes as MiB),
    ``num`` (three significant figures or so), ``ratio`` (two decimals), ``sci`` or ``bool``.
    """

    header: str
    field: str
    style: str = "num"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """What the runner knows about one script.

    ``keys`` name the fields that identify a row across rounds and trees; ``compare`` the
    fields ``--against`` compares; ``split`` an option whose comma-separated values run as
    one case each, with its default read from the script's module constant
    ``split_default``; ``script`` a file name in this folder (or an absolute path).
    """

    name: str
    script: str
    keys: tuple[str, ...]
    columns: tuple[Column, ...]
    compare: tuple[str, ...]
    split: str | None = None
    split_default: str | None = None
    # Fields an ``across_BACKEND`` block compares between backends (see render_across).
    across: tuple[str, ...] = ()

    def script_path(self) -> pathlib.Path:
        return HERE / self.script


_ATTENTION_KEYS = ("implementation", "length")
# The measures of a generation benchmark's row (cached decoding against recomputation).
_GENERATION_COLUMNS = (
    Column("tokens/s", "tokens_per_second", "num"),
    Column("s per batch", "seconds", "num"),
    Column("first batch s", "first_seconds", "num"),
    Column("x recompute", "x_recompute", "ratio"),
    Column("same tokens", "same_tokens", "bool"),
)
BENCHMARKS = {
    benchmark.name: benchmark
    for benchmark in (
        Benchmark(
            "relative_attention",
            "relative_attention.py",
            keys=_ATTENTION_KEYS,
            columns=(
                Column("impl", "implementation", "text"),
                Column("L", "length", "text"),
                Column("ms", "seconds", "ms"),
                Column("x mha", "x_mha", "ratio"),
                Column("extra MB", "extra_peak_bytes", "mb"),
                Column("x S", "extra_S", "ratio"),
            ),
            compare=("x_mha", "extra_S"),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "relative_logits",
            "relative_logits.py",
            keys=("group", "method", "length"),
            columns=(
                Column("group", "group", "text"),
                Column("way", "method", "text"),
                Column("L", "length", "text"),
                Column("ms", "seconds", "ms"),
                Column("x base", "x_base", "ratio"),
            ),
            compare=("x_base",),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "muse",
            "muse.py",
            keys=_ATTENTION_KEYS,
            columns=(
                Column("impl", "implementation", "text"),
                Column("L", "length", "text"),
                Column("eager ms", "eager_seconds", "ms"),
                Column("x mha", "eager_x_mha", "ratio"),
                Column("compiled ms", "compiled_seconds", "ms"),
                Column("x mha", "compiled_x_mha", "ratio"),
                Column("extra MB", "extra_peak_bytes", "mb"),
                Column("x mha", "memory_x_mha", "ratio"),
            ),
            compare=("eager_x_mha", "compiled_x_mha", "memory_x_mha"),
            split="--lengths",
            split_default="DEFAULT_LENGTHS",
        ),
        Benchmark(
            "coatnet",
            "coatnet.py",
            keys=("mode",),
            columns=(
                Column("mode", "mode", "text"),
                Column("setting", "setting", "text"),
                Column("s/batch", "seconds", "num"),
                Column("images/s", "images_per_second", "num"),
            ),
            compare=("images_per_second",),
            across=("images_per_second",),
        ),
        Benchmark(
            "coatnet_parts",
            "coatnet_parts.py",
            keys=("part",),
            columns=(
                Column("part", "part", "text"),
                Column("ms", "seconds", "ms"),
                Column("share", "share", "ratio"),
            ),
            compare=("seconds",),
            across=("seconds",),
        ),
        Benchmark(
            "convs2s_generation",
            "convs2s_generation.py",
            keys=("path",),
            columns=(Column("path", "path", "text"), *_GENERATION_COLUMNS),
            compare=("x_recompute", "tokens_per_second"),
            across=("tokens_per_second", "first_seconds"),
        ),
        Benchmark(
            "generation",
            "generation.py",
            keys=("model", "search", "path"),
            columns=(
                Column("model", "model", "text"),
                Column("search", "search", "text"),
                Column("path", "path", "text"),
                *_GENERATION_COLUMNS,
            ),
            compare=("x_recompute", "tokens_per_second"),
            across=("tokens_per_second", "first_seconds"),
        ),
        Benchmark(
            "zoo_create",
            "zoo_create.py",
            keys=("model",),
            columns=(
                Column("model", "model", "text"),
                Column("cold s", "cold_seconds", "num"),
                Column("cached s", "cached_seconds", "num"),
                Column("warm s", "warm_seconds", "num"),
                Column("predict ms", "predict_seconds", "ms"),
                Column("parameters", "parameters", "num"),
            ),
            compare=("cold_seconds", "predict_seconds"),
            across=("cold_seconds", "warm_seconds"),
        ),
        Benchmark(
            "export",
            "export.py",
            keys=("case", "runtime"),
            columns=(
                Column("case", "case", "text"),
                Column("runtime", "runtime", "text"),
                Column("ms/call", "ms", "num"),
                Column("ORT / Keras", "ort_over_keras", "ratio"),
                Column("max diff", "max_abs_difference", "sci"),
            ),
            compare=("ort_over_keras", "ms"),
        ),
    )
}


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
    """The script's cases as (label, arguments): one per value of ``benchmark.split``."""
    if "--json" in script_args or any(a.startswith("--json=") for a in script_args):
        raise ValueError("run: --json is the runner's; do not pass it to the script")
    if benchmark.split is None:
        return [("all", list(script_args))]
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
    return [(value, [benchmark.split, value, *rest]) for value in values.split(",") if value]


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


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
# Rendering


def _format(value: object, style: str) -> str:
    if value is None:
        return "-"
    if style == "bool":
        return "yes" if value else "no"
    if style == "text" or not _is_number(value):
        return str(value).replace("|", "\\|")
    if style == "ms":
        value = value * 1000
    elif style == "mb":
        return f"{value / 2**20:.0f}"
    elif style == "ratio":
        return f"{value:.2f}"
    elif style == "sci":
        return f"{value:.1e}"
    magnitude = abs(value)
    return (
        f"{value:.0f}"
        if magnitude >= 100
        else f"{value:.1f}"
        if magnitude >= 10
        else f"{value:.2f}"
    )


def _compared(value: object) -> str:
    """A compared value: two decimals (ratios), whole numbers from 100 on."""
    return _format(value, "ratio" if _is_number(value) and abs(value) < 100 else "num")


def _right(column: Column) -> bool:
    """Numbers are right-aligned, and so are sequence lengths (written as text)."""
    return column.style != "text" or column.field == "length"


def _table(header: list[str], right: list[bool], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _tree_text(tree: dict) -> str:
    if tree.get("commit") is None:
        return f"{tree['name']} (not a git checkout)"
    state = ", with uncommitted changes" if tree.get("dirty") else ""
    return f"{tree['name']} at commit {tree['commit'][:10]}{state}"


def render_across(record: dict, baseline: str, benchmark: Benchmark | None = None) -> str:
    """One table of the working tree's ``benchmark.across`` fields on every backend of
    ``record``, with each backend's value over ``baseline``'s (Markdown).

    The block of marker ``<!-- benchmarks:STEM:across_BASELINE start -->``: numbers of
    different backends side by side, taken in one run of the runner (their conditions are
    in each backend's own block).
    """
    benchmark = benchmark or BENCHMARKS[record["benchmark"]]
    backends = [b for b in BACKEND_NAMES if b in record["backends"]]
    if baseline not in backends or not benchmark.across:
        raise ValueError(
            f"render: across_{baseline} needs a {baseline} run and fields to compare; the "
            f"{record['benchmark']} record has {backends}, across fields {benchmark.across}"
        )
    rows_by_backend = {
        backend: {
            tuple(row.get(k) for k in benchmark.keys): row
            for row in record["backends"][backend]["results"]["current"]
            if "error" not in row
        }
        for backend in backends
    }
    others = [b for b in backends if b != baseline]
    key_columns = [c for c in benchmark.columns if c.field in benchmark.keys]
    headers = {c.field: c.header for c in benchmark.columns}
    # Values are written in their column's style (seconds as ms for an "ms" column).
    styles = {
        c.field: c.style if c.style in ("ms", "mb", "sci") else "num" for c in benchmark.columns
    }
    header = [c.header for c in key_columns] + ["field"]
    header += [BACKEND_NAMES[b] for b in backends]
    header += [f"{BACKEND_NAMES[b]} / {BACKEND_NAMES[baseline]}" for b in others]
    rows = []
    for key, base_row in rows_by_backend[baseline].items():
        for field in benchmark.across:
            values = [rows_by_backend[b].get(key, {}).get(field) for b in backends]
            base = base_row.get(field)
            ratios = []
            for b in others:
                value = rows_by_backend[b].get(key, {}).get(field)
                ok = _is_number(value) and _is_number(base) and base != 0
                ratios.append(f"{value / base:.2f}x" if ok else "-")
            rows.append(
                [_format(k, "text") for k in key]
                + [headers.get(field, field)]
                + [_format(v, styles.get(field, "num")) for v in values]
                + ratios
            )
    right = [_right(c) for c in key_columns] + [False] + [True] * (len(backends) + len(others))
    date = record["date"].replace("T", " ")[:16] + " UTC"
    lines = [
        f"- Run: {date}, {_tree_text(record['trees']['current'])}; every backend in one "
        "run of the runner, one after the other (conditions in each backend's block).",
        "",
        *_table(header, right, rows),
    ]
    return "\n".join(lines)


def render_block(record: dict, backend: str, benchmark: Benchmark | None = None) -> str:
    """The conditions and the table of one backend's results in ``record`` (Markdown)."""
    benchmark = benchmark or BENCHMARKS[record["benchmark"]]
    if backend.startswith("across_"):
        return render_across(record, backend[len("across_") :], benchmark)
    if backend not in record["backends"]:
        raise ValueError(
            f"render: the {record['benchmark']} record has no {backend} run; it has "
            f"{sorted(record['backends'])}"
        )
    result = record["backends"][backend]
    host, limits = record["machine"], record["load_limits"]
    versions = result["versions"]
    avx = {True: "yes", False: "no", None: "unknown"}[host["avx512"]]
    date = record["date"].replace("T", " ")[:16] + " UTC"
    if result["under_load"]:
        verdict = "**taken under load** (the numbers may be off)"
    else:
        verdict = "not under load"
    trees = record["trees"]
    rounds = record["rounds"]
    environment = record.get("environment", {})
    compared = f", against {_tree_text(trees['ref'])}" if "ref" in trees else ""
    lines = [
        f"- Run: {date}, {_tree_text(trees['current'])}{compared}; "
        + ("one round per case." if rounds == 1 else f"{rounds} rounds per case, medians."),
        f"- Software: {BACKEND_NAMES[backend]} {versions.get(backend)}, Keras "
        f"{versions['keras']}, Python {host['python']}.",
        f"- Machine: {host['cpu']}, {host['cores']} cores, AVX-512 {avx}, "
        f"{host['memory_gib']} GiB.",
        *(
            ["- Environment: " + ", ".join(f"`{k}={v}`" for k, v in environment.items()) + "."]
            if environment
            else []
        ),
        f"- Load average (1 minute): {result['load_before']} before, at most "
        f"{result['load_max']} during and after (limits {limits['before']:g} and "
        f"{limits['during']:g}): {verdict}.",
        f"- Command: `{record['command']}`" if record["command"] else "- Command: not recorded.",
    ]
    if result.get("failed"):
        lines.append("- **Some runs failed** (their rows say so, or are missing).")
    lines.append("")
    if "ref" in trees:
        key_columns = [c for c in benchmark.columns if c.field in benchmark.keys]
        headers = [c.header for c in key_columns]
        name, short = trees["ref"]["name"], (trees["ref"].get("commit") or "")[:7]
        # A ref given as a commit is named once ("f7f10c3", not "f7f10c3 f7f10c3").
        label = name if short and name.startswith(short) else f"{name} {short}".strip()
        header = [*headers, "field", label, "working tree"]
        rows = [
            [_format(v, "text") for v in item["key"].values()]
            + [item["field"], _compared(item["ref"]), _compared(item["current"])]
            + ["-" if item["change"] is None else f"{item['change']:+.1%}"]
            for item in result["comparison"]
        ]
        right = [_right(c) for c in key_columns] + [False, True, True, True]
        lines += _table([*header, "change"], right, rows)
    else:
        rows = []
        for row in result["results"]["current"]:
            if "error" in row:
                keys = [c for c in benchmark.columns if c.field in benchmark.keys]
                cells = [_format(row.get(c.field), "text") for c in keys]
                cells.append("failed: " + _format(row["error"], "text"))
                cells += [""] * (len(benchmark.columns) - len(cells))
            else:
                cells = [_format(row.get(c.field), c.style) for c in benchmark.columns]
            rows.append(cells)
        right = [_right(c) for c in benchmark.columns]
        lines += _table([c.header for c in benchmark.columns], right, rows)
    return "\n".join(lines)


# A marker is a line of its own, so the page's prose can quote one.
_MARKER = re.compile(
    r"^<!-- benchmarks:(?P<stem>[\w.-]+):(?P<backend>\w+) (?P<edge>start|end) -->[ \t]*$",
    re.MULTILINE,
)


def _note(stem: str) -> str:
    return (
        f"<!-- rendered from data/benchmarks/{stem}.json by `python -m benchmarks render`: "
        "edit the run, not these lines -->"
    )


def render_document(text: str, data_folder: pathlib.Path) -> str:
    """``text`` with every block between ``<!-- benchmarks:STEM:BACKEND start -->`` and
    ``<!-- benchmarks:STEM:BACKEND end -->`` rendered from ``data_folder/STEM.json``."""
    pieces, position, opened = [], 0, None
    records: dict[str, dict] = {}
    for match in _MARKER.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        name = f"{match['stem']}:{match['backend']}"
        if match["edge"] == "start":
            if opened is not None:
                raise ValueError(f"render: line {line}: {name} starts inside {opened[0]}")
            opened = (name, match)
            continue
        if opened is None or opened[0] != name:
            raise ValueError(f"render: line {line}: end of {name} without its start")
        start = opened[1]
        stem = match["stem"]
        if stem not in records:
            path = data_folder / f"{stem}.json"
            if not path.is_file():
                raise ValueError(f"render: line {line}: no data/benchmarks/{stem}.json")
            records[stem] = json.loads(path.read_text())
        block = render_block(records[stem], match["backend"])
        pieces += [text[position : start.end()], f"\n{_note(stem)}\n\n{block}\n\n"]
        position, opened = match.start(), None
    if opened is not None:
        line = text.count("\n", 0, opened[1].start()) + 1
        raise ValueError(f"render: line {line}: {opened[0]} is never ended")
    return "".join(pieces) + text[position:]


def stale_blocks(text: str, data_folder: pathlib.Path) -> list[str]:
    """The names (``STEM:BACKEND``) of the blocks whose text differs from their rendering."""
    rendered = render_document(text, data_folder)

    def blocks(document: str) -> dict[str, str]:
        found, starts = {}, {}
        for match in _MARKER.finditer(document):
            name = f"{match['stem']}:{match['backend']}"
            if match["edge"] == "start":
                starts[name] = match.end()
            else:
                found[name] = document[starts[name] : match.start()]
        return found

    old, new = blocks(text), blocks(rendered)
    return [name for name in new if old.get(name) != new[name]]


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
    renderer = commands.add_parser("render", help="rewrite the marked tables of a docs page")
    renderer.add_argument("--docs", default=str(HERE.parent / "docs" / "benchmarks.md"))
    renderer.add_argument("--check", action="store_true", help="only report stale tables")
    shower = commands.add_parser("show", help="print a JSON record's blocks, with markers")
    shower.add_argument("json")
    args = parser.parse_args(argv)
    if script_args and args.command != "run":
        parser.error("options after -- are for run only")

    if args.command == "list":
        for name, benchmark in sorted(BENCHMARKS.items()):
            print(f"{name:<20} benchmarks/{benchmark.script}")
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
        docs = pathlib.Path(args.docs)
        text = docs.read_text()
        folder = docs.parent / "data" / "benchmarks"
        stale = stale_blocks(text, folder)
        if args.check:
            for name in stale:
                print(f"{docs.name}: the {name} table differs from its JSON")
            return 1 if stale else 0
        if stale:
            docs.write_text(render_document(text, folder))
        print(f"{docs.name}: {len(stale)} table(s) rewritten")
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
