"""Test tiers: what each test needs, and so where and how often it runs.

Every collected test belongs to exactly one tier (docs/development.md, "Test tiers"):

- ``neutral``: pure Python or NumPy (the package's layout, docs and link checks, argument
  parsing, registry listings, the benchmark runner, file parsers, reference functions).
  The default tier runs it once, on the first backend of the run.
- ``contract``: a layer's or model's numbers, masks, caches, save/load, compiled and eager,
  export from that backend. The default tier runs it on every backend. A case marked
  ``matrix`` as well is one of several shapes or settings down the same code path: it runs
  on ``MATRIX_BACKEND`` by default and on the other backends in ``full`` only; the test
  keeps at least one case without the mark (its representative) on every backend.
- ``large``: full-size models, one zoo export per family, the landing page's examples,
  within the CI stage's budget; run on ``LARGE_BACKEND``.
- ``full``: the rest of the heavy cases (training examples, the guides' code, distribution,
  studies, the other zoo exports), run on ``LARGE_BACKEND`` by
  ``python tests/run_backends.py --tier full`` with everything else.

A module names its tier with ``pytestmark``; a test of another tier names its own, which
wins (the closest node that names a tier decides). A node that names two tiers, or a test
with no tier on any level, fails the collection: ``tier_of`` raises. Pure functions here;
``tests/conftest.py`` applies them and ``tests/test_tiers.py`` shows that they fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

TIERS = ("neutral", "contract", "large", "full")
# The backend that runs a shape matrix whole, and the one that runs the large and full tiers.
# PyTorch runs the matrices: its eager operations compile nothing (JAX compiles a program per
# new shape), and its default suite was the shortest of the three (docs/development.md).
MATRIX_BACKEND = "torch"
LARGE_BACKEND = "tensorflow"
# What `python tests/run_backends.py --tier NAME` selects with `--tiers` on each backend: the
# first backend of the run, and the others (neutral tests run once, on the first). The large
# and full tiers select nothing but matrix cases off LARGE_BACKEND (effective_tier), wherever
# it stands in the list of backends.
SELECTIONS = {
    "default": (("neutral", "contract"), ("contract",)),
    "large": (("large",), ("large",)),
    "full": (("neutral", "contract", "large", "full"), ("contract", "large", "full")),
}


class TierError(Exception):
    """A test in no tier or in two, or a test whose every case runs in `full` only."""


def tier_of(nodeid: str, chain: Sequence[Iterable[str]]) -> str:
    """The tier of one test from the marker names of its nodes, the test's own first.

    ``chain`` lists, for the test, then its class (if any), then its module, the names of
    the markers that node carries itself (a parametrized case's marks count as the test's).
    """
    for names in chain:
        named = sorted({name for name in names if name in TIERS})
        if len(named) > 1:
            raise TierError(f"{nodeid}: in {len(named)} tiers ({', '.join(named)}); name one")
        if named:
            return named[0]
    raise TierError(
        f"{nodeid}: in no tier; mark it (or its module, with pytestmark) with one of "
        f"{', '.join(TIERS)}"
    )


def effective_tier(tier: str, matrix: bool, backend: str) -> str | None:
    """The tier a test of ``tier`` has on ``backend``; None where it never runs there."""
    if matrix and tier != "contract":
        raise TierError(f"the matrix mark goes with the contract tier, not with {tier!r}")
    if tier in ("large", "full") and backend != LARGE_BACKEND:
        return None
    if matrix and backend != MATRIX_BACKEND:
        return "full"
    return tier


def check_representatives(tests: dict[str, list[list[bool]]]) -> None:
    """Fails where every case of a contract test is a matrix case (run in `full` only).

    ``tests`` maps a test (its node id without the parameters) to its parametrizations as
    defined, whatever a run selects: for each ``parametrize``, whether each value is marked
    ``matrix``. A case is a matrix case if any of its values is, so the test keeps a
    representative only if every parametrization keeps an unmarked value (a test marked
    ``matrix`` as a whole gives one list ``[True]``).
    """
    only = sorted(
        test for test, values in tests.items() if any(all(marks) for marks in values if marks)
    )
    if only:
        raise TierError(
            "every case of these contract tests is marked matrix, so on every backend but "
            f"{MATRIX_BACKEND} they would run in full only; leave one case unmarked: "
            + ", ".join(only)
        )


def selected_tiers(tier: str, first: bool) -> tuple[str, ...]:
    """The tiers ``run_backends.py --tier TIER`` selects on the first or a later backend."""
    try:
        on_first, on_others = SELECTIONS[tier]
    except KeyError:
        raise ValueError(f"tier: expected one of {', '.join(SELECTIONS)}, got {tier!r}") from None
    return on_first if first else on_others


def matrix(argnames: str, cases: Iterable, keep: Iterable[int] = (0,)) -> tuple[str, list]:
    """``pytest.mark.parametrize`` arguments with every case but those at ``keep`` marked
    ``matrix``: use where the cases take one code path in shapes or settings, so the kept
    cases (the representatives) run on every backend and the rest on ``MATRIX_BACKEND``
    (and everywhere in ``full``)::

        @pytest.mark.parametrize(*matrix("shape, units", [((2, 5), 8), ((1, 9), 4)]))

    ``cases`` may hold ``pytest.param`` objects; their marks and ids are kept.
    """
    kept, several = set(keep), "," in argnames
    out = []
    for index, case in enumerate(cases):
        if index in kept:
            out.append(case)
        elif isinstance(case, type(pytest.param(None))):
            out.append(
                pytest.param(*case.values, marks=[*case.marks, pytest.mark.matrix], id=case.id)
            )
        else:
            values = tuple(case) if several else (case,)
            out.append(pytest.param(*values, marks=pytest.mark.matrix))
    if not kept & set(range(len(out))):
        raise TierError(f"matrix({argnames!r}): keep {sorted(kept)} names no case")
    return argnames, out
