"""Every example in keras_posenc's docstrings runs, on each backend."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
from tiers import matrix

import keras_posenc

pytestmark = pytest.mark.contract


def _modules() -> list[str]:
    names = [keras_posenc.__name__]
    for info in pkgutil.walk_packages(keras_posenc.__path__, prefix="keras_posenc."):
        names.append(info.name)
    return sorted(names)


def test_every_module_is_found():
    assert {"keras_posenc.zoo.registry", "keras_posenc.cli", "keras_posenc.probe.patterns"} <= set(
        _modules()
    )


# Examples of use, checked where they run: on the matrix backend (tests/tiers.py) by default,
# one module of them (the attention layer's) on every backend, all on every backend in `full`.
# What each backend computes is the contract tests' part.
@pytest.mark.parametrize(
    *matrix(
        "module_name", _modules(), keep=[_modules().index("keras_posenc.layers.relative_attention")]
    )
)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    for test in finder.find(module, module_name):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} docstring example(s) failed in {module_name}"
