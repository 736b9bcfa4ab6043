"""The package imports on every backend, and the CLI reports what it should."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import keras
import pytest
from repository import repository_path

import keras_posenc
from keras_posenc import cli, export, layers, probe, zoo

pytestmark = pytest.mark.neutral


def test_public_modules_import():
    assert keras_posenc.layers is layers and keras_posenc.zoo is zoo and keras_posenc.probe is probe
    assert keras_posenc.__version__.count(".") >= 2


def test_info_reports_versions_backend_exporters_and_zoo():
    lines = cli.info_lines()
    text = "\n".join(lines)
    assert f"keras         {keras.__version__}" in lines
    assert f"backend       {keras.backend.backend()}" in text
    assert "export tf_saved_model" in text and "export onnx" in text and "export litert" in text
    assert f"zoo models    {len(zoo.list_models())}" in text


def test_info_names_a_missing_exporter_package(monkeypatch):
    monkeypatch.setitem(export.EXPORTER_PACKAGES, "onnx", ("tensorflow", "no_such_exporter_pkg"))
    text = "\n".join(cli.info_lines())
    assert "export onnx            unavailable" in text
    assert "no_such_exporter_pkg MISSING (ModuleNotFoundError" in text


def test_cli_main_runs_info(capsys):
    assert cli.main(["info"]) == 0
    assert "keras-posenc" in capsys.readouterr().out


def test_cli_without_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "usage: posenc" in capsys.readouterr().out


def test_cli_rejects_unknown_command(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["no-such-command"])
    assert raised.value.code == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err


def test_console_script_help_in_a_fresh_process():
    """The installed `posenc` entry point starts, on the backend of this test run."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from keras_posenc.cli import main; sys.exit(main())",
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert "usage: posenc" in result.stdout and "info" in result.stdout


def _build_tiny(units: int = 3) -> keras.Model:
    inputs = keras.Input((None, 4))
    return keras.Model(inputs, keras.layers.Dense(units)(inputs))


@pytest.mark.contract
def test_cli_export_zoo_name_with_overrides(tmp_path, capsys):
    zoo.register_model("test_cli_tiny", _build_tiny, family="test_cli")
    try:
        code = cli.main(
            [
                "export",
                "test_cli_tiny",
                "--format",
                "onnx",
                "--out",
                str(tmp_path),
                "--set",
                "units=5",
            ]
        )
    finally:
        zoo.unregister_model("test_cli_tiny")
    out = capsys.readouterr().out
    assert code == 0, out
    assert (tmp_path / "test_cli_tiny.onnx").exists()
    assert "max |difference|" in out and "[None, None, 5]" in out


@pytest.mark.contract
def test_cli_export_keras_file_every_format(tmp_path, capsys):
    path = tmp_path / "tiny.keras"
    _build_tiny().save(path)
    assert cli.main(["export", str(path), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "tiny.onnx").exists()
    assert (tmp_path / "out" / "tiny.savedmodel" / "saved_model.pb").exists()
    assert (tmp_path / "out" / "tiny.tflite").is_file()
    assert capsys.readouterr().out.count("max |difference|") == 3


def test_cli_export_errors_are_reported_not_raised(tmp_path, capsys):
    assert cli.main(["export", "no_such_model", "--out", str(tmp_path)]) == 1
    assert "posenc export: error: zoo: unknown model 'no_such_model'" in capsys.readouterr().err
    assert cli.main(["export", "x", "--out", str(tmp_path), "--set", "novalue"]) == 1
    assert "--set takes key=value; got 'novalue'" in capsys.readouterr().err


def test_cli_probe_padding_quick(tmp_path, capsys):
    # The padding-mode part only: the full --quick run (every study) takes minutes.
    argv = ["probe", "padding", "--quick", "--studies", "padding", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    # A short summary: the padding table on noise input only; every table goes to --out.
    assert "### Padding, noise input" in out and "### Padding, grey input" not in out
    assert "| probe | random | least_squares | zeros |" in out
    assert "| probe | random | least_squares | circular |" in out
    assert len(out.splitlines()) < 40
    assert {p.name for p in tmp_path.iterdir()} >= {"padding.csv", "padding.md", "summary.md"}
    assert "### Padding, grey input" in (tmp_path / "summary.md").read_text()


# Backend branches live in named places only ("Architecture" in docs/development.md).
_BACKEND_BRANCH_MODULES = {os.path.join("export", "model.py")}
_BACKEND_PACKAGE = "backend" + os.sep


def _backend_comparisons(source: str) -> list[int]:
    """Lines where ``keras.backend.backend()`` (or a name assigned from it) is compared."""
    import ast

    tree = ast.parse(source)

    def is_backend_call(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "backend"
            and isinstance(node.func.value, ast.Attribute | ast.Name)
            and getattr(node.func.value, "attr", getattr(node.func.value, "id", None)) == "backend"
        )

    names = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and is_backend_call(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def is_backend(node: ast.AST) -> bool:
        return is_backend_call(node) or (isinstance(node, ast.Name) and node.id in names)

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and any(map(is_backend, [node.left, *node.comparators]))
    ]


def test_backend_comparisons_only_in_the_backend_package_and_export():
    root = os.path.dirname(keras_posenc.__file__)
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if not name.endswith(".py") or relative in _BACKEND_BRANCH_MODULES:
                continue
            if relative.startswith(_BACKEND_PACKAGE):
                continue
            with open(path, encoding="utf-8") as file:
                found += [f"{relative}:{line}" for line in _backend_comparisons(file.read())]
    assert not found, f"backend comparisons outside keras_posenc/backend/, export/model.py: {found}"


# Private or version-specific APIs live in keras_posenc/backend/ only, behind a guard
# ("Backend kernels" in docs/development.md).
_PRIVATE_MODULES = ("keras.src", "jax.extend", "jax._src", "torch._", "torch.utils._")
_PRIVATE_VARIABLE_METHODS = {"_value", "_initializer", "_initialize", "_deferred_initialize"}


def _private_api_uses(source: str) -> list[int]:
    """Lines that import or read a private API (`_PRIVATE_MODULES`, private Variable methods)."""
    import ast

    def private(dotted: str) -> bool:
        return any(
            dotted == p or dotted.startswith(p.rstrip("_") + "_") or dotted.startswith(p + ".")
            for p in _PRIVATE_MODULES
        )

    def dotted(node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        return ".".join([node.id, *reversed(parts)])

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and private(node.module):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(private(a.name) for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute):
            name = dotted(node)
            if node.attr in _PRIVATE_VARIABLE_METHODS or (name and private(name)):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_private_apis_only_in_the_backend_package():
    root = os.path.dirname(keras_posenc.__file__)
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if not name.endswith(".py") or relative.startswith(_BACKEND_PACKAGE):
                continue
            with open(path, encoding="utf-8") as file:
                found += [f"{relative}:{line}" for line in _private_api_uses(file.read())]
    assert not found, f"private APIs outside keras_posenc/backend/: {found}"


def test_private_api_finder_sees_every_form():
    source = (
        "import keras\n"
        "from keras.src.backend.common import global_state\n"
        "import torch._dynamo\n"
        "x = torch._ops.OpOverload\n"
        "from torch.utils._pytree import tree_flatten\n"
        "v._deferred_initialize()\n"
        "from jax.extend import core\n"
        "y = keras.ops.add\n"
        "z = torch.utils.data\n"
        "w = layer.kernel_initializer\n"
    )
    assert _private_api_uses(source) == [2, 3, 4, 5, 6, 7]


def test_backend_comparison_finder_sees_every_form():
    source = (
        "import keras\n"
        "a = keras.backend.backend() == 'jax'\n"
        "b = 'torch' != keras.backend.backend()\n"
        "backend = keras.backend.backend()\n"
        "c = backend in ('jax', 'torch')\n"
        "print(f'{keras.backend.backend()} backend')\n"
    )
    assert _backend_comparisons(source) == [2, 3, 5]


def test_tests_reach_repository_files_through_one_helper():
    """CI runs a copy of tests/ outside the checkout: a test that finds docs/ or benchmarks/
    relative to its own file passes in a checkout and fails there. tests/repository.py is the
    one place that may climb above tests/."""
    tests = pathlib.Path(__file__).resolve().parent
    climbing = re.compile(r"parents\[|os\.pardir|\.parent\.parent")
    offenders = [
        f"{path.relative_to(tests)}:{number}: {line.strip()}"
        for path in sorted(tests.rglob("*.py"))
        if path.name != "repository.py" and "reference" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if climbing.search(line)
    ]
    assert not offenders, "use tests/repository.py:\n" + "\n".join(offenders)


def _import_graph() -> dict[str, set[str]]:
    """Each keras_posenc module and the keras_posenc modules it imports, anywhere in it (a
    function's lazy import too): ``from PACKAGE import NAME`` counts as importing the module
    PACKAGE.NAME where there is one, else PACKAGE."""
    import ast

    root = os.path.dirname(os.path.dirname(keras_posenc.__file__))
    modules = {}
    for folder, _, files in os.walk(os.path.dirname(keras_posenc.__file__)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        imported = set()
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([base] if base else [])])
                imported.update(known(f"{base}.{alias.name}") for alias in node.names)
        graph[module] = imported - {None, module}
    return graph


def _import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or through others (the strongly
    connected components of more than one module, Tarjan's algorithm)."""
    order, low, stack, cycles = {}, {}, [], []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            component = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return cycles


def test_import_cycle_finder_sees_lazy_and_package_imports():
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"p.a"}, "q": {"p"}}
    assert _import_cycles(graph) == [["p.a", "p.b"]]
    found = _import_graph()
    # the preset folder imports the staging module inside save_preset, not the export package.
    assert "keras_posenc.export.staging" in found["keras_posenc.hub.folder"]
    assert "keras_posenc.export" not in found["keras_posenc.hub.folder"]


def test_length_study_modules_are_in_no_import_cycle():
    # Issue 48, item 2: the length study's package imports its modules one way (tasks,
    # models, tables, figure, results, runs), none of them the package's __init__.
    package = "keras_posenc.experiments.length_generalization"
    graph = _import_graph()
    modules = [m for m in graph if m == package or m.startswith(package + ".")]
    assert len(modules) == 7, modules
    assert not any(package in graph[m] for m in modules if m != package)
    cycles = [cycle for cycle in _import_cycles(graph) if any(m in modules for m in cycle)]
    assert not cycles, f"import cycles through {package}: {cycles}"


def test_package_is_in_no_import_cycle():
    # Issue 48: no import circles in keras_posenc/, lazy imports included (the zoo reaches
    # the hub's presets through registry.preset_function, keras_posenc/hub/__init__.py).
    cycles = _import_cycles(_import_graph())
    assert not cycles, f"import cycles in keras_posenc: {cycles}"


def test_the_zoo_imports_nothing_above_it():
    # docs/development.md, "Architecture": export, convert and the hub import the zoo.
    above = ("keras_posenc.export", "keras_posenc.convert", "keras_posenc.hub")
    graph = _import_graph()
    found = {
        module: sorted(m for m in imported if m.startswith(above))
        for module, imported in graph.items()
        if module == "keras_posenc.zoo" or module.startswith("keras_posenc.zoo.")
    }
    assert not any(found.values()), {m: i for m, i in found.items() if i}


def test_padding_study_modules_are_in_no_import_cycle():
    # Issue 48: the padding study is a package of modules by job (docs/development.md,
    # "Architecture"), each importing only those before it, lazy imports included.
    package = "keras_posenc.experiments.padding"
    graph = _import_graph()
    assert {f"{package}.{name}" for name in ("settings", "study", "figures")} <= set(graph)
    cycles = [
        cycle
        for cycle in _import_cycles(graph)
        if any(m == package or m.startswith(package + ".") for m in cycle)
    ]
    assert not cycles, f"import cycles through {package}: {cycles}"


@pytest.mark.parametrize("package", ["keras_posenc.layers", "keras_posenc.backend"])
def test_layers_and_backend_modules_are_in_no_import_cycle(package):
    # Issue 48: each idea of the layers has one home, in an order without circles
    # (docs/development.md, "Architecture": imports inside layers/).
    cycles = [
        cycle
        for cycle in _import_cycles(_import_graph())
        if any(m == package or m.startswith(package + ".") for m in cycle)
    ]
    assert not cycles, f"import cycles through {package}: {cycles}"


# The modules of each layer family (coatnet's fifth: Swin's shifted windows, issue 53).
@pytest.mark.parametrize(
    "package, count", [("keras_posenc.layers.muse", 4), ("keras_posenc.layers.coatnet", 6)]
)
def test_layer_packages_modules_import_each_other_not_their_package(package, count):
    # Issue 48, item 3: a layer family split by job (docs/development.md, "Architecture");
    # its modules import each other by path, none the package's __init__ (which re-exports).
    graph = _import_graph()
    modules = [m for m in graph if m.startswith(package + ".")]
    assert len(modules) == count, modules
    assert not [m for m in modules if package in graph[m]]


def _cited_files(text: str) -> list[str]:
    """The repository files a text cites by path (``docs/development.md``), and any
    citation of design.md, a page the repository never had."""
    rooted = r"(?:docs|tests|benchmarks|keras_posenc)/[\w./-]+\.(?:py|md|toml)"
    return re.findall(rf"(?<![\w/.-])(?:{rooted}|[\w./-]*design\.md)\b", text)


def test_package_cites_only_repository_files():
    """A comment, docstring or lint message that cites a file cites one in the repository
    (the rules live in docs/development.md)."""
    assert _cited_files("see docs/a.md, tests/b.py and (design.md, 'X')") == [
        "docs/a.md",
        "tests/b.py",
        "design.md",
    ]
    assert _cited_files("timm's ``maxxvit.py``, keras_hub/src/models/backbone.py") == []
    root = repository_path()
    package = pathlib.Path(keras_posenc.__file__).parent
    missing = [
        f"{path.relative_to(package.parent)}: {cited}"
        for path in sorted(package.rglob("*"))
        if path.suffix in (".py", ".toml", ".md")
        for cited in _cited_files(path.read_text(encoding="utf-8"))
        if "design.md" in cited or not (root / cited).exists()
    ]
    assert not missing, "citations of files not in the repository:\n" + "\n".join(missing)


# The layout's size rule (docs/development.md, "Rules of the house"): a module over this
# many lines does several jobs and is split into one module per job.
MAX_MODULE_LINES = 800


def test_no_module_is_over_the_size_limit():
    package = pathlib.Path(keras_posenc.__file__).parent
    sizes = {
        str(path.relative_to(package.parent)): len(path.read_text().splitlines())
        for path in sorted(package.rglob("*.py"))
    }
    over = {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert sizes and not over, f"modules over {MAX_MODULE_LINES} lines (split by job): {over}"
