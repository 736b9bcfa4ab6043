"""Every example in keras_posenc's docstrings runs, on each backend."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import keras_posenc


def _modules() -> list[str]:
    names = [keras_posenc.__name__]
    for info in pkgutil.walk_packages(keras_posenc.__path__, prefix="keras_posenc."):
        names.append(info.name)
    return sorted(names)


def test_every_module_is_found():
    assert {"keras_posenc.zoo.registry", "keras_posenc.cli", "keras_posenc.probe.patterns"} <= set(
        _modules()
    )


@pytest.mark.parametrize("module_name", _modules())
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
