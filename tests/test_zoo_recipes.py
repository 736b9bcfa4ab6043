"""The zoo's recipes (``zoo/<family>/*.py``) use public names only, and zoo/README.md lists
every family folder.

A public name is one a ``keras_posenc`` package exports: in its ``__all__``, or one of its
subpackages (issue 48, item 4). A recipe that imports a module of a package
(``keras_posenc.zoo.muse``), a name a package does not export, or reaches one through an
attribute of an imported package (``zoo.muse``), fails here. The packages and their
``__all__`` are read from the installed source, without importing it; the recipes through
tests/repository.py (CI runs a copy of tests/ against the wheel). Running the recipes is the
training tests' part (tests/zoo/test_relative_transformer_models.py, tests/test_guides.py).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re

import keras
import numpy as np
import pytest
from keras import ops
from repository import repository_path

from keras_posenc import zoo

pytestmark = pytest.mark.neutral

ROOT = "keras_posenc"


def package_exports() -> dict[str, set[str]]:
    """Each public ``keras_posenc`` package (dotted) and its public names: ``__all__`` and
    its public subpackages. A folder whose name starts with ``_`` is private."""
    top = pathlib.Path(importlib.util.find_spec(ROOT).origin).parent
    packages = {}
    for init in sorted(top.rglob("__init__.py")):
        parts = init.parent.relative_to(top.parent).parts
        if any(part.startswith("_") for part in parts):
            continue
        names = set()
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                    names |= set(ast.literal_eval(node.value))
        packages[".".join(parts)] = names
    for package in packages:
        parent, _, child = package.rpartition(".")
        if parent in packages:
            packages[parent].add(child)
    return packages


def private_uses(source: str, packages: dict[str, set[str]]) -> list[str]:
    """What ``source`` imports or reaches of keras_posenc that no package exports, each as
    ``line N: what``."""
    found = []
    bound = {}  # a name in the recipe -> the package it is bound to

    def reach(package: str, name: str, line: int) -> None:
        """``name`` taken from ``package``: a public name, or a subpackage to follow."""
        if name not in packages[package]:
            found.append(f"line {line}: {package}.{name} (not in {package}.__all__)")

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != ROOT:
                    continue
                if alias.name not in packages:
                    found.append(f"line {node.lineno}: import {alias.name} (not a package)")
                elif alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[ROOT] = ROOT
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == ROOT:
            if node.module not in packages:
                found.append(f"line {node.lineno}: from {node.module} (a module, not a package)")
                continue
            for alias in node.names:
                reach(node.module, alias.name, node.lineno)
                dotted = f"{node.module}.{alias.name}"
                if dotted in packages:
                    bound[alias.asname or alias.name] = dotted
    # Attributes of a bound package (`zoo.Seq2SeqModel`, `keras_posenc.zoo.create`).
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in bound:
                continue
            package = bound[value.id]
            for name in chain:
                dotted = f"{package}.{name}"
                if dotted in packages:
                    package = dotted
                    continue
                reach(package, name, node.lineno)
                break
    return sorted(set(found), key=lambda text: (int(re.match(r"line (\d+)", text)[1]), text))


def recipes() -> list[pathlib.Path]:
    return sorted(repository_path("zoo").rglob("*.py"))


def test_finder_sees_modules_private_names_and_attributes():
    packages = {"keras_posenc": {"zoo"}, "keras_posenc.zoo": {"create", "Seq2SeqModel"}}
    source = (
        "from keras_posenc import zoo\n"
        "from keras_posenc.zoo import create, MUSE\n"
        "from keras_posenc.zoo.seq2seq import Seq2SeqModel\n"
        "import keras_posenc.zoo.muse\n"
        "import keras_posenc\n"
        "zoo.create('x'); zoo.muse.MUSE; keras_posenc.zoo.Seq2SeqModel; keras_posenc.hub\n"
    )
    assert private_uses(source, packages) == [
        "line 2: keras_posenc.zoo.MUSE (not in keras_posenc.zoo.__all__)",
        "line 3: from keras_posenc.zoo.seq2seq (a module, not a package)",
        "line 4: import keras_posenc.zoo.muse (not a package)",
        "line 6: keras_posenc.hub (not in keras_posenc.__all__)",
        "line 6: keras_posenc.zoo.muse (not in keras_posenc.zoo.__all__)",
    ]


def test_packages_are_read_with_their_exports():
    packages = package_exports()
    assert {"Seq2SeqModel", "MUSEEmbedding", "create"} <= packages["keras_posenc.zoo"]
    assert {"train_reverse", "train_periodic"} <= packages["keras_posenc.experiments"]
    assert {"zoo", "experiments", "layers"} <= packages["keras_posenc"]
    assert "keras_posenc.zoo.muse" not in packages  # a module, not a package


def test_recipes_use_public_names_only():
    packages = package_exports()
    found = recipes()
    assert len(found) >= 5, f"zoo/ recipes not found: {found}"
    offenders = {
        f"{path.parent.name}/{path.name}": uses
        for path in found
        if (uses := private_uses(path.read_text(encoding="utf-8"), packages))
    }
    assert not offenders, f"recipes reaching past the public API: {offenders}"


def test_readme_table_has_a_row_per_family_folder():
    folder = repository_path("zoo")
    families = sorted(p.name for p in folder.iterdir() if (p / "README.md").is_file())
    text = (folder / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[`(\w+)/`\]\(\1/README\.md\) \|", text, re.MULTILINE)
    assert rows == families, f"zoo/README.md rows {rows}, family folders {families}"
    for family in families:
        for recipe in sorted((folder / family).glob("*.py")):
            assert f"]({family}/{recipe.name})" in text, f"zoo/README.md lacks {recipe}"


def load_recipe(family: str, name: str):
    """A recipe's module, imported from its file (its `main` is not run)."""
    path = repository_path("zoo", family, name)
    spec = importlib.util.spec_from_file_location(f"recipe_{family}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.contract
def test_muse_recipe_transformer_is_a_seq2seq_model():
    # zoo/muse/train_reverse.py writes its baseline on the public subclassing contract; the
    # training itself is the card's measurement, not run here.
    keras.utils.set_random_seed(0)
    model = load_recipe("muse", "train_reverse.py").TransformerBaseline(name="transformer")
    assert isinstance(model, zoo.Seq2SeqModel) and model.max_target_length == 64
    source = np.array([[5, 6, 7, 2], [8, 9, 2, 0]], "int32")
    target_in = np.array([[1, 7, 6, 5], [1, 9, 8, 2]], "int32")
    logits = ops.convert_to_numpy(
        model({"encoder_token_ids": source, "decoder_token_ids": target_in})
    )
    cache = model.init_cache(model.encode(source), 4)
    for index in range(4):
        step, cache = model.decode_step(target_in[:, index], cache, index)
        np.testing.assert_allclose(ops.convert_to_numpy(step), logits[:, index], atol=1e-4)
    assert model.generate(source, max_length=5).shape == (2, 5)
    # No get_config of its own: the base's (name, trainable) rebuilds it.
    clone = type(model).from_config(model.get_config())
    assert clone.name == "transformer" and clone.count_params() == model.count_params()
