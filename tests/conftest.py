"""Suite-wide pytest setup: the backend in the header, reproducible seeds."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The suite's JAX time goes mostly into XLA compiling each new shape once; the tests check
# numbers, not speed, and skipping most optimisations cut that time by about a quarter.
# Set before keras (and so jax) is imported; an explicit value in the environment wins.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# XLA's CPU fusion emitters (MLIR) take about twice the compile time of its older LLVM
# emitters: 53 against 28 ms of CPU for a one-operation program on JAX 0.10, and 152 against
# 110 s of CPU for a slice of the JAX suite (docs/development.md, "Test time"). Every eager
# JAX operation of a new shape is such a compile. The flag is read by JAX and by
# TensorFlow's XLA (and passed on to the subprocesses the tests start); it changes how
# kernels are generated, not what they compute. A value already in XLA_FLAGS wins.
if "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        filter(None, [os.environ.get("XLA_FLAGS"), "--xla_cpu_use_fusion_emitters=false"])
    )

import keras  # noqa: E402  (after the TensorFlow log level is set)
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tiers  # noqa: E402

import keras_posenc  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tiers",
        default="neutral,contract",
        help="comma-separated test tiers to run on this backend (tests/tiers.py): "
        f"{', '.join(tiers.TIERS)}; default neutral,contract",
    )
    parser.addoption(
        "--tier-listing",
        default=None,
        metavar="FILE",
        help="write each collected test's id and its tier on this backend ('-' where it never "
        "runs here) to FILE, tab-separated (tests/tier_ids.py reads it)",
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    location = os.path.dirname(keras_posenc.__file__)
    return [
        f"keras backend: {keras.backend.backend()} (KERAS_BACKEND="
        f"{os.environ.get('KERAS_BACKEND', 'unset')})",
        f"keras {keras.__version__}; keras_posenc {keras_posenc.__version__} from {location}",
    ]


def parametrizations(item: pytest.Item) -> list[list[bool]]:
    """For each parametrize of ``item``'s test, whether each value is marked matrix, as the
    test defines them (a run that selects one case still sees them all)."""
    if any(mark.name == "matrix" for mark in getattr(item.function, "pytestmark", [])):
        return [[True]]
    return [
        [any(m.name == "matrix" for m in getattr(value, "marks", ())) for value in mark.args[1]]
        for mark in item.iter_markers("parametrize")
    ]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test in exactly one tier (tests/tiers.py); the collection fails otherwise.
    wanted = {name.strip() for name in config.getoption("--tiers").split(",") if name.strip()}
    unknown = sorted(wanted - set(tiers.TIERS))
    if unknown:
        raise pytest.UsageError(f"--tiers: unknown {unknown}; expected some of {tiers.TIERS}")
    problems, cases, keep, drop, listing = [], {}, [], [], []
    for item in items:
        chain = [[m.name for m in node.own_markers] for node in reversed(item.listchain())]
        try:
            tier = tiers.tier_of(item.nodeid, chain)
            matrix = item.get_closest_marker("matrix") is not None
            here = tiers.effective_tier(tier, matrix, keras.backend.backend())
        except tiers.TierError as error:
            problems.append(str(error))
            continue
        if tier == "contract":
            cases[item.nodeid.split("[")[0]] = parametrizations(item)
        (keep if here in wanted else drop).append(item)
        listing.append(f"{item.nodeid}\t{here or '-'}\n")
    try:
        tiers.check_representatives(cases)
    except tiers.TierError as error:
        problems.append(str(error))
    if problems:
        raise pytest.UsageError("test tiers:\n  " + "\n  ".join(problems))
    if config.getoption("--tier-listing"):
        with open(config.getoption("--tier-listing"), "w") as file:
            file.writelines(listing)
    if drop:
        config.hook.pytest_deselected(items=drop)
    # The `long` cases (minutes each) run first. Collected last, in tests/zoo/, they started
    # when the other pytest-xdist worker had almost nothing left: CI's large stage ended
    # with one worker running the training examples and the other idle for about 12 minutes.
    # Started first, they run beside the other cases (worksteal balances the rest).
    keep.sort(key=lambda item: item.get_closest_marker("long") is None)
    items[:] = keep


@pytest.fixture(autouse=True)
def _reset_state():
    """Every test starts with fixed seeds and the float32 policy, whatever ran before."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def backend() -> str:
    return keras.backend.backend()
