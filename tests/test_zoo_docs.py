"""The docs' zoo table: every registered model has card metadata, the cards' counts are right,
and the table has one line per model, with the columns the zoo page explains.

The zoo page's table is rendered at build time by docs/hooks/zoo_table.py from the registry,
the front matter of the model cards (zoo/<family>/README.md) and docs/data/zoo_export.csv.
These tests import that hook and read the cards, so they need the repository: found through
POSENC_DOCS (the repository's docs/ folder, as in test_guides.py) or next to this file in a
checkout. The cheap models' counts are checked here on every backend (shapes only, no weights
initialised); all of them in the large stage.
"""

from __future__ import annotations

import importlib.util
import pathlib

import keras
import numpy as np
import pytest
from keras.src.backend.common import global_state  # see shape_only
from repository import repository_path

from keras_posenc import zoo

pytestmark = pytest.mark.neutral

# Shape-only builds well under a second on every backend (measured 0.05-0.2 s each).
CHEAP = ("coatnet_0", "muse_tiny", "posenet_coatnet_0")


def repository() -> pathlib.Path:
    root = repository_path()
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


HEADER = "| model | parameters | paper | input | ONNX | SavedModel | LiteRT | speed |"


def table_rows(table):
    """The body rows of a rendered table, each as its list of cells."""
    lines = table.splitlines()
    body = lines[lines.index(HEADER) + 2 :]
    rows = [line for line in body[: body.index("")]]
    assert all(row.startswith("| ") and row.endswith(" |") for row in rows), rows
    return [row[2:-2].split(" | ") for row in rows]


def test_table_has_one_line_per_registered_model(hook, cards):
    exports = hook.export_rows(repository() / hook.EXPORT_CSV)
    table = hook.render_table(hook.registry(), cards, exports)
    rows = table_rows(table)
    names = [cells[0].split('nowrap">')[1].split("<")[0] for cells in rows]
    assert names == zoo.list_models()
    for name, cells in zip(names, rows, strict=True):
        # One line of eight cells: a name linking to its card, short counts, short marks.
        assert len(cells) == 8 and "<br>" not in "".join(cells), (name, cells)
        family = zoo.get_spec(name).family
        assert f"](zoo/{family}.md)" in cells[0], (name, cells[0])
        for mark in cells[4:7]:
            assert hook.EXPORT_STATUS in mark or mark == "–", (name, mark)
    by_name = dict(zip(names, rows, strict=True))
    coatnet_0, coatnet_1 = by_name["coatnet_0"], by_name["coatnet_1"]
    assert coatnet_0[1].endswith(">25.0M*</span>") and coatnet_0[2].endswith(">25M</span>")
    assert 'title="25,036,820 trainable; 224 x 224, 1000 classes"' in coatnet_0[1]
    # The full-size coatnet_1 went to SavedModel, verified, but not to ONNX.
    assert ">small</span>](" in coatnet_1[4] and "full: not run" in coatnet_1[4]
    assert ">✓</span>](" in coatnet_1[5]
    assert "Export: `docs/data/zoo_export.csv`" in table


def test_table_without_export_runs(hook, cards):
    table = hook.render_table(hook.registry(), cards, [])
    assert all(cells[4:7] == ["–", "–", "–"] for cells in table_rows(table))
    assert "Export: no run recorded yet" in table


def test_cards_become_pages(hook, cards):
    assert {hook.card_page(entry["card"]) for entry in cards.values()} == {
        f"zoo/{family}.md" for family in {zoo.get_spec(name).family for name in cards}
    }
    card = "---\nzoo: {}\n---\n\n# Fam\n\n[bench](../../docs/benchmarks.md#a) [x](https://x.org)\n"
    assert hook.card_markdown(card) == "# Fam\n\n[bench](../benchmarks.md#a) [x](https://x.org)\n"
    assert hook.card_markdown("# No front matter\n") == "# No front matter\n"


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
        "a_net": {
            **ENTRY,
            "counted": "trainable",
            "note": "10 classes",
            "speed": speed,
            "card": "zoo/a/README.md",
        },
        "b_net": {
            **ENTRY,
            "parameters": 2_345_678,
            "overrides": {"vocab_size": 10},
            "input": "token | ids",
            "speed": {"value": "5 steps/s"},
            "card": "zoo/b/README.md",
        },
    }
    exports = [
        export_row("a_net", "small", "onnx", "tensorflow", "8.6e-07"),
        export_row("a_net", "small", "onnx", "jax", "1.0e-06"),
        export_row("a_net", "small", "tf_saved_model", "torch", "failed: ValueError: x"),
        export_row("a_net", "small", "litert", "tensorflow", "5e-07"),
        export_row("other", "full", "onnx", "tensorflow", "1e-3"),  # not registered: ignored
    ]
    table = hook.render_table(MODELS, cards, exports)
    a_row, b_row = table_rows(table)
    status = hook.EXPORT_STATUS
    assert a_row == [
        '<span title="A"><a_link>](zoo/a.md)</span>'.replace(
            "<a_link>", '[<code style="white-space: nowrap">a_net</code>'
        ),
        '<span title="1,234 trainable; 10 classes">1.2K*</span>',
        '<span title="Doe et al. 2026, A Net (arXiv:0000.00000)">2.5M</span>',
        "images",
        f'[<span title="full: not run; small: TF, JAX, max diff 1.0e-06">small</span>]({status})',
        f'[<span title="full: not run; small: failed from PyTorch">✗</span>]({status})',
        f'[<span title="full: not run; small: TF, max diff 5.0e-07">small</span>]({status})',
        "[3 images/s](benchmarks.md#x) <sup>1</sup>",
    ]
    assert b_row == [
        '[<code style="white-space: nowrap">b_net</code>](zoo/b.md)',  # no description
        '<span title="2,345,678; vocab_size=10">2.3M†</span>',
        "–",
        "token \\| ids",
        "–",
        "–",
        "–",
        "5 steps/s <sup>2</sup>",
    ]
    assert (
        "Speed: <sup>1</sup> `a_net`: batch 8 ([details](benchmarks.md#x)); "
        "<sup>2</sup> `b_net`: setting not recorded ([details](zoo/b.md))." in table
    )
    assert "(2026-11-29; 2 CPU cores)" in table


def test_export_marks(hook):
    rows = [
        export_row("a_net", "full", "onnx", "tensorflow", "1e-6"),
        export_row("a_net", "full", "onnx", "torch", "3e-6"),
        export_row("a_net", "small", "onnx", "jax", "0"),
    ]
    status = hook.EXPORT_STATUS
    assert hook.export_mark(rows) == (
        '[<span title="full: TF, PyTorch, max diff 3.0e-06; small: JAX, max diff 0">✓</span>]'
        f"({status})"
    )
    failed_full = [rows[2], export_row("a_net", "full", "onnx", "jax", "failed: MemoryError")]
    assert ">small (full ✗)</span>" in hook.export_mark(failed_full)
    assert hook.export_mark([]) == "–"
    counts = (950, 1000, 1234, 9_949, 9_950, 285_204, 999_499, 999_500, 25_036_820)
    assert [hook.compact(n) for n in counts] == [
        "950",
        "1.0K",
        "1.2K",
        "9.9K",
        "10K",
        "285K",
        "999K",
        "1.0M",
        "25.0M",
    ]


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
