#!/usr/bin/env python3
"""List the suite's test ids per backend with their tiers, and check that none was lost.

Usage:
    python tests/tier_ids.py listing after.tsv              # this tests/ folder, by tier
    python tests/tier_ids.py legacy OLD_TESTS before.tsv    # a tests/ folder before tiers
    python tests/tier_ids.py compare before.tsv after.tsv   # where every old id runs now

Each file has one line per backend and test: `backend<TAB>id<TAB>tier`. `listing` collects
with the conftest's --tier-listing (tests/tiers.py: the tier a test has on that backend,
`-` where it never runs there). `legacy` collects a tests/ folder of the suite before tiers
(its default suite and its `large` cases) with the package installed here. `compare` prints
how each old id runs now: once (backend-neutral), in the default tier or the large CI stage
on as many backends as before, on fewer (in `full` on the rest), or in `full` only; it lists
every old id that runs on fewer backends than before in any tier, and every old id that runs
nowhere, and exits 1 if there is one of those. Collecting takes about a minute per backend.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import subprocess
import sys
import tempfile

from tiers import SELECTIONS

BACKENDS = ("tensorflow", "jax", "torch")
HERE = pathlib.Path(__file__).resolve().parent


def collect(folder: pathlib.Path, backend: str, args: list[str]) -> list[str]:
    """The ids pytest collects in ``folder`` on ``backend`` with ``args``."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode not in (0, 5):
        raise SystemExit(f"collecting {folder} on {backend} failed:\n{result.stdout[-3000:]}")
    return [line.strip() for line in result.stdout.splitlines() if "::" in line]


def listing(out: pathlib.Path) -> None:
    rows = []
    for backend in BACKENDS:
        with tempfile.TemporaryDirectory() as scratch:
            path = pathlib.Path(scratch) / "tiers.tsv"
            collect(HERE, backend, ["--tier-listing", str(path)])
            rows += [f"{backend}\t{line}" for line in path.read_text().splitlines()]
    out.write_text("\n".join(rows) + "\n")
    print(f"{out}: {len(rows)} rows")


def legacy(folder: pathlib.Path, out: pathlib.Path) -> None:
    rows = []
    for backend in BACKENDS:
        default = collect(folder, backend, ["-o", "addopts=-p no:cacheprovider", "-m", "not large"])
        large = collect(folder, backend, ["-o", "addopts=-p no:cacheprovider", "-m", "large"])
        rows += [f"{backend}\t{test}\tdefault" for test in default]
        if backend == "tensorflow":  # the large stage ran on TensorFlow only
            rows += [f"{backend}\t{test}\tlarge" for test in large]
    out.write_text("\n".join(rows) + "\n")
    print(f"{out}: {len(rows)} rows")


def read(path: pathlib.Path) -> dict[str, dict[str, str]]:
    table: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for line in path.read_text().splitlines():
        backend, test, tier = line.split("\t")
        table[test][backend] = tier
    return table


def compare(before_path: pathlib.Path, after_path: pathlib.Path) -> int:
    before, after = read(before_path), read(after_path)
    in_ci = set(SELECTIONS["default"][0]) | {"large"}
    outcome: collections.Counter = collections.Counter()
    missing, narrowed = [], []
    for test, old in sorted(before.items()):
        new = after.get(test, {})
        running = {backend: tier for backend, tier in new.items() if tier != "-"}
        if not running:
            missing.append(test)
            continue
        ci = [backend for backend, tier in running.items() if tier in in_ci]
        if "neutral" in running.values():
            outcome["neutral now: once, on the first backend of a run"] += 1
        elif len(ci) >= len(old):
            outcome["in CI on as many backends as before"] += 1
        elif set(running) >= set(old) and ci:
            outcome["in CI on fewer backends, in full on the others (matrix)"] += 1
        elif not ci and set(running) >= set(old):
            outcome["in full only (heavy cases beyond the CI budget)"] += 1
        else:
            narrowed.append(
                f"{test}: {', '.join(sorted(old))} -> "
                + ", ".join(f"{backend} ({tier})" for backend, tier in sorted(running.items()))
            )
    added = sorted(set(after) - set(before))
    print(f"{len(before)} ids before, {len(after)} after ({len(added)} new)")
    for what, number in outcome.most_common():
        print(f"  {number:5d}  {what}")
    print(f"  {len(narrowed):5d}  on fewer backends than before, in any tier")
    for line in narrowed:
        print(f"         {line}")
    print(f"  {len(missing):5d}  no longer collected")
    for test in missing:
        print(f"         {test}")
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    listing_parser = commands.add_parser("listing", help="this tests/ folder, by tier")
    listing_parser.add_argument("out", type=pathlib.Path)
    legacy_parser = commands.add_parser("legacy", help="a tests/ folder before tiers")
    legacy_parser.add_argument("folder", type=pathlib.Path)
    legacy_parser.add_argument("out", type=pathlib.Path)
    compare_parser = commands.add_parser("compare", help="where every old id runs now")
    compare_parser.add_argument("before", type=pathlib.Path)
    compare_parser.add_argument("after", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.command == "listing":
        listing(args.out)
    elif args.command == "legacy":
        legacy(args.folder, args.out)
    else:
        return compare(args.before, args.after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
