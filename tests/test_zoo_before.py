"""The zoo after its configurations became named dataclasses (issue 47) builds what it built
before: every registered name's parameter counts, and the outputs of the smallest model of
each family (and builder path) on deterministic weights, against tests/fixtures/zoo_before/
(written by its generate.py from the commit before the change)."""

from __future__ import annotations

import importlib.util
import json
import zlib

import keras
import numpy as np
import pytest
from keras.src.backend.common import global_state  # the shape-only builds of test_zoo_docs.py
from repository import fixtures_path

from keras_posenc import zoo

pytestmark = pytest.mark.neutral

FOLDER = fixtures_path("zoo_before")


def _generator():
    spec = importlib.util.spec_from_file_location("zoo_before", FOLDER / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
COUNTS = json.loads((FOLDER / "parameters.json").read_text())


def test_the_fixture_covers_registered_names_only():
    # A name that went would no longer be checked; a name added since is not in the fixture.
    assert set(COUNTS) <= set(zoo.list_models())
    assert set(GENERATOR.OUTPUT_MODELS) <= set(COUNTS)


def test_every_name_keeps_its_parameter_counts():
    changed = {}
    for name, before in COUNTS.items():
        with keras.StatelessScope(initialize_variables=False):
            model = zoo.create(name, **before["overrides"])
        global_state.set_global_attribute("uninitialized_variables", [])
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        if (model.count_params(), trainable) != (before["all"], before["trainable"]):
            changed[name] = (model.count_params(), trainable, before["all"], before["trainable"])
    assert not changed, f"(all, trainable) now and before: {changed}"


@pytest.mark.parametrize("name", list(GENERATOR.OUTPUT_MODELS))
def test_smallest_models_give_the_same_outputs(name):
    model = zoo.create(name, **GENERATOR.OUTPUT_MODELS[name])
    GENERATOR.fill_weights(model)
    batch = GENERATOR.inputs_of(model, zlib.crc32(name.encode()))
    outputs = [GENERATOR.summary(value) for value in GENERATOR.call(model, batch)]
    stored = np.load(FOLDER / "outputs.npz")
    count = sum(key.startswith(f"{name}/") for key in stored)
    expected = [stored[f"{name}/{index}"] for index in range(count)]
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected, strict=True):
        assert np.std(want) > 0  # weights that reach the output, not a constant
        scale = float(np.max(np.abs(want)))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
