"""The docs' zoo table: every registered model has card metadata, and the cards' counts are right.

The zoo page's table is rendered at build time by docs/hooks/zoo_table.py from the registry,
the front matter of the model cards (zoo/<family>/README.md) and docs/data/zoo_export.csv.
These tests import that hook and read the cards, so they need the repository: found through
POSENC_DOCS (the repository's docs/ folder, as in test_guides.py) or next to this file in a
checkout. The cheap models' counts are checked here on every backend (shapes only, no weights
initialised); all of them in the large stage.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import keras
import numpy as np
import pytest
from keras.src.backend.common import global_state  # see shape_only

from keras_posenc import zoo

# Shape-only builds well under a second on every backend (measured 0.05-0.2 s each).
CHEAP = ("coatnet_0", "muse_tiny", "posenet_coatnet_0")


def repository() -> pathlib.Path:
    docs = os.environ.get("POSENC_DOCS")
    root = (
        pathlib.Path(docs).resolve().parent if docs else pathlib.Path(__file__).resolve().parents[1]
    )
    assert (root / "docs" / "hooks" / "zoo_table.py").is_file() and (root / "zoo").is_dir(), (
        f"no docs/hooks/zoo_table.py and zoo/ cards under {root}: set POSENC_DOCS to the "
        "repository's docs/ folder"
    )
    return root


def load_hook():
    path = repository() / "docs" / "hooks" / "zoo_table.py"
    spec = importlib.util.spec_from_file_location("zoo_table_hook", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook():
    return load_hook()


@pytest.fixture(scope="module")
def cards(hook):
    return hook.card_entries(repository())


def shape_only(name, **overrides):
    """The named model built without initialising its weights (fast on every backend); the
    deferred variables are dropped from Keras' pending list afterwards."""
    with keras.StatelessScope(initialize_variables=False):
        model = zoo.create(name, **overrides)
    global_state.set_global_attribute("uninitialized_variables", [])
    return model


def counted(model, how):
    if how == "trainable":
        return sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    return model.count_params()


def check_count(name, entry):
    model = shape_only(name, **entry["overrides"])
    assert counted(model, entry["counted"]) == entry["parameters"], (
        f"{entry['card']}: {name} has {counted(model, entry['counted']):,} "
        f"{entry['counted']} parameters; the card says {entry['parameters']:,}"
    )


# --------------------------------------------------------------------------- the cards


def test_every_registered_model_has_card_metadata(cards):
    assert sorted(cards) == zoo.list_models()
    for name, entry in cards.items():
        family = zoo.get_spec(name).family
        assert entry["card"] == f"zoo/{family}/README.md", (name, entry["card"])


@pytest.mark.parametrize("name", CHEAP)
def test_cheap_card_counts_equal_the_models(name, cards):
    check_count(name, cards[name])


@pytest.mark.large
@pytest.mark.parametrize("name", [n for n in zoo.list_models() if n not in CHEAP])
def test_card_counts_equal_the_models(name):
    check_count(name, load_hook().card_entries(repository())[name])


def test_table_has_a_row_per_registered_model(hook, cards):
    table = hook.render_table(hook.registry(), cards, [])
    rows = [line for line in table.splitlines() if line.startswith("| <code")]
    assert [row.split(">")[1].split("<")[0] for row in rows] == zoo.list_models()
    assert "| 25M (Dai et al. 2021) |" in table  # the registry: the paper's count and reference
    assert "25,036,820 (trainable" in table  # the card: ours
    assert "Export: no run recorded yet" in table


# --------------------------------------------------------------------------- the hook's rules


MODELS = [
    {
        "name": "a_net",
        "family": "a",
        "description": "A",
        "paper_parameters": 2_500_000,
        "reference": "Doe et al. 2026, A Net (arXiv:0000.00000)",
    },
    {"name": "b_net", "family": "b", "description": "", "paper_parameters": None},
]
ENTRY = {"parameters": 1234, "counted": "all", "overrides": {}, "input": "images"}


def export_row(name, variant, fmt, backend, difference):
    return {
        "name": name,
        "variant": variant,
        "format": fmt,
        "backend": backend,
        "max_abs_difference": difference,
        "export_seconds": "2",
        "date": "2026-11-29",
        "machine": "2 CPU cores",
    }


def test_missing_or_unregistered_card_entries_fail(hook):
    with pytest.raises(hook.ZooTableError, match=r"without an entry: \['b_net'\]"):
        hook.render_table(MODELS, {"a_net": ENTRY}, [])
    cards = {"a_net": ENTRY, "b_net": ENTRY, "c_net": ENTRY}
    with pytest.raises(hook.ZooTableError, match=r"unregistered names: \['c_net'\]"):
        hook.render_table(MODELS, cards, [])


def test_rows_render_counts_paper_export_and_speed(hook):
    speed = {"value": "3 images/s", "setting": "batch 8", "page": "benchmarks.md#x"}
    cards = {
        "a_net": {**ENTRY, "counted": "trainable", "note": "10 classes", "speed": speed},
        "b_net": {**ENTRY, "input": "token | ids", "speed": None},
    }
    exports = [
        export_row("a_net", "small", "onnx", "tensorflow", "8.6e-07"),
        export_row("a_net", "small", "onnx", "jax", "1.0e-06"),
        export_row("a_net", "small", "tf_saved_model", "torch", "failed: ValueError: x"),
        export_row("other", "full", "onnx", "tensorflow", "1e-3"),  # not registered: ignored
    ]
    table = hook.render_table(MODELS, cards, exports)
    a_row, b_row = (line for line in table.splitlines() if line.startswith("| <code"))
    assert a_row == (
        '| <code style="white-space: nowrap">a_net</code> | 1,234 (trainable; 10 classes) | '
        "2.5M (Doe et al. 2026) | images | small: "
        "ONNX (TF, JAX), max diff 1.0e-06; failed: SavedModel (PyTorch)<br>full: not run | "
        "3 images/s (batch 8), [details](benchmarks.md#x) |"
    )
    assert b_row.endswith(
        "b_net</code> | 1,234 | not reported | token \\| ids | not run | not measured |"
    )
    assert "(2026-11-29; 2 CPU cores)" in table


def test_export_formats_are_grouped_by_backends(hook):
    rows = [
        export_row("a_net", "full", "onnx", "tensorflow", "1e-6"),
        export_row("a_net", "full", "tf_saved_model", "tensorflow", "2e-6"),
        export_row("a_net", "full", "onnx", "torch", "3e-6"),
    ]
    assert hook.export_cell(rows) == (
        "small: not run<br>full: ONNX (TF, PyTorch); SavedModel (TF), max diff 3.0e-06"
    )
    assert hook.export_cell(rows[:2]) == (
        "small: not run<br>full: ONNX, SavedModel (TF), max diff 2.0e-06"
    )


def test_export_file_is_optional_and_its_columns_are_checked(hook, tmp_path):
    assert hook.export_rows(tmp_path / "absent.csv") == []
    good = tmp_path / "zoo_export.csv"
    good.write_text(
        ",".join(hook.EXPORT_COLUMNS) + "\n"
        'a_net,small,onnx,tensorflow,8.6e-07,2,2026-11-29,"2 CPU cores, 23.5 GiB"\n'
    )
    assert hook.export_rows(good)[0]["machine"] == "2 CPU cores, 23.5 GiB"
    bad = tmp_path / "bad.csv"
    bad.write_text("name,format,backend\na_net,onnx,jax\n")
    with pytest.raises(hook.ZooTableError, match="columns must be"):
        hook.export_rows(bad)


def test_card_front_matter_is_validated(hook, tmp_path):
    card = tmp_path / "zoo" / "fam" / "README.md"
    card.parent.mkdir(parents=True)
    card.write_text("# A card without front matter\n")
    assert hook.front_matter(card) == {} and hook.card_entries(tmp_path) == {}
    card.write_text("---\nzoo:\n  a_net: {parameters: 12, counted: all, input: x}\n---\n# Card\n")
    assert hook.card_entries(tmp_path)["a_net"]["card"] == "zoo/fam/README.md"
    card.write_text("---\nzoo:\n  a_net: {parameters: 12, counted: some, input: x}\n---\n")
    with pytest.raises(hook.ZooTableError, match="`counted` must be one of"):
        hook.card_entries(tmp_path)
    card.write_text("---\nzoo:\n  a_net: {parameters: 12, counted: all, inputs: x}\n---\n")
    with pytest.raises(hook.ZooTableError, match=r"unknown fields \['inputs'\]"):
        hook.card_entries(tmp_path)
