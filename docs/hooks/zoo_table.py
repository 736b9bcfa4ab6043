"""MkDocs hook: the zoo page's table, built from the zoo registry and the model cards.

At build time the marker ``<!-- zoo-table -->`` in ``docs/zoo.md`` is replaced by one table
with a row per registered zoo model:

- names, the paper's parameter count and the paper (``reference``, shortened to its authors
  and year) come from the registry (``keras_posenc.zoo``; importing it registers every model
  without building any);
- our parameter count, the input and the measured speed come from the YAML front matter of
  the model cards, ``zoo/<family>/README.md``, under the key ``zoo``, one entry per model
  (fields in ``ENTRY_FIELDS``; tests/test_zoo_docs.py checks the counts against the models);
- the export status comes from ``docs/data/zoo_export.csv`` (written by
  ``benchmarks/export_zoo.py``; "not run" while it is missing).

A registered model without a card entry, a card entry for a model that is not registered, or
a malformed entry fails the build. tests/test_zoo_docs.py imports this file to check the cards.
"""

from __future__ import annotations

import csv
import logging
import os
import pathlib
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

MARKER = "<!-- zoo-table -->"
ZOO_PAGE = "zoo.md"
CARDS = "zoo/*/README.md"
EXPORT_CSV = "docs/data/zoo_export.csv"
EXPORT_COLUMNS = (
    "name",
    "variant",
    "format",
    "backend",
    "max_abs_difference",
    "export_seconds",
    "date",
    "machine",
)
VARIANTS = ("small", "full")
COUNTED = ("trainable", "all")
# Field -> (required, what it holds).
ENTRY_FIELDS = {
    "parameters": (True, "our count, an int, as the tests count it"),
    "counted": (True, "'trainable' (trainable weights) or 'all' (model.count_params())"),
    "overrides": (False, "zoo.create overrides the count is for, e.g. vocabulary sizes"),
    "note": (False, "the setting of the count, in words"),
    "input": (True, "what the model takes, in words"),
    "speed": (False, "null (not measured) or {value, setting, page}"),
}
SPEED_FIELDS = ("value", "setting", "page")
FORMAT_NAMES = {"onnx": "ONNX", "tf_saved_model": "SavedModel", "saved_model": "SavedModel"}
BACKEND_NAMES = {"tensorflow": "TF", "jax": "JAX", "torch": "PyTorch"}
_FRONT_MATTER = re.compile(r"\A---\n(.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)

log = logging.getLogger("mkdocs.hooks.zoo_table")


class ZooTableError(ValueError):
    """A card, the export file or the registry does not fit the zoo table."""


# --------------------------------------------------------------------------- inputs


def front_matter(path: str | os.PathLike) -> dict[str, Any]:
    """The YAML mapping between the ``---`` lines at the top of a Markdown file ({} if none)."""
    text = pathlib.Path(path).read_text(encoding="utf-8")
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}
    data = yaml.safe_load(match.group(1)) or {}
    if not isinstance(data, dict):
        raise ZooTableError(f"{path}: the front matter must be a YAML mapping")
    return data


def _check_entry(where: str, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise ZooTableError(f"{where}: expected a mapping of {', '.join(ENTRY_FIELDS)}")
    unknown = sorted(set(entry) - set(ENTRY_FIELDS))
    missing = [key for key, (required, _) in ENTRY_FIELDS.items() if required and key not in entry]
    if unknown or missing:
        raise ZooTableError(
            f"{where}: unknown fields {unknown}, missing fields {missing}; expected "
            + "; ".join(f"{key}: {what}" for key, (_, what) in ENTRY_FIELDS.items())
        )
    parameters = entry["parameters"]
    if isinstance(parameters, bool) or not isinstance(parameters, int) or parameters < 1:
        raise ZooTableError(f"{where}: `parameters` must be a positive int; got {parameters!r}")
    if entry["counted"] not in COUNTED:
        raise ZooTableError(
            f"{where}: `counted` must be one of {COUNTED}; got {entry['counted']!r}"
        )
    if not isinstance(entry.get("overrides") or {}, Mapping):
        raise ZooTableError(f"{where}: `overrides` must be a mapping")
    for key in ("input", "note"):
        if key in entry and not (isinstance(entry[key], str) and entry[key].strip()):
            raise ZooTableError(f"{where}: `{key}` must be a non-empty string")
    speed = entry.get("speed")
    if speed is not None:
        if not isinstance(speed, Mapping) or set(speed) - set(SPEED_FIELDS) or "value" not in speed:
            raise ZooTableError(
                f"{where}: `speed` must be null or a mapping with `value` and optionally "
                f"`setting` and `page`; got {speed!r}"
            )
    return {**entry, "overrides": dict(entry.get("overrides") or {})}


def card_entries(root: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Every model entry of every card under ``root/zoo``, by model name.

    Each entry is the card's mapping for that model plus ``card``, the card's path relative
    to ``root``.

    Raises:
        ZooTableError: for a malformed entry or a model listed by two cards.
    """
    root = pathlib.Path(root)
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob(CARDS)):
        card = path.relative_to(root).as_posix()
        models = front_matter(path).get("zoo") or {}
        if not isinstance(models, Mapping):
            raise ZooTableError(f"{card}: the front matter's `zoo` must map model names to entries")
        for name, entry in models.items():
            if name in entries:
                raise ZooTableError(f"{card}: {name!r} is also listed in {entries[name]['card']}")
            entries[name] = {**_check_entry(f"{card}, model {name!r}", entry), "card": card}
    return entries


def export_rows(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of the export CSV; [] when the file does not exist.

    Raises:
        ZooTableError: if the header is not ``EXPORT_COLUMNS`` or a variant is unknown.
    """
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != EXPORT_COLUMNS:
            raise ZooTableError(
                f"{path}: the columns must be {','.join(EXPORT_COLUMNS)}; "
                f"got {','.join(reader.fieldnames or ())}"
            )
        rows = list(reader)
    for number, row in enumerate(rows, start=2):
        if row["variant"] not in VARIANTS:
            raise ZooTableError(
                f"{path}, line {number}: variant must be one of {VARIANTS}; got {row['variant']!r}"
            )
    return rows


def registry(root: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """name, family, description, paper_parameters and reference of every registered model.

    Imports ``keras_posenc.zoo`` (from ``root`` first, when given): registering builds no model.
    """
    if root is not None and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_posenc import zoo

    models = []
    for name in zoo.list_models():
        spec = zoo.get_spec(name)
        models.append(
            {
                "name": name,
                "family": spec.family,
                "description": spec.description,
                "paper_parameters": spec.paper_parameters,
                "reference": spec.reference,
            }
        )
    return models


# --------------------------------------------------------------------------- rendering


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def paper_cell(parameters: int | None, reference: str | None = None) -> str:
    """The paper's count and who: ``25M (Dai et al. 2021)``, ``not reported (...)``.

    ``reference`` is shortened to its text before the first comma (the authors and year).
    """
    count = "not reported" if parameters is None else f"{parameters / 1e6:g}M"
    who = (reference or "").split(",")[0].strip()
    return f"{count} ({who})" if who else count


def parameters_cell(entry: Mapping[str, Any]) -> str:
    qualifiers = ["trainable"] if entry["counted"] == "trainable" else []
    if entry.get("note"):
        qualifiers.append(entry["note"])
    text = f"{entry['parameters']:,}"
    return f"{text} ({'; '.join(qualifiers)})" if qualifiers else text


def speed_cell(speed: Mapping[str, Any] | None) -> str:
    if speed is None:
        return "not measured"
    text = str(speed["value"])
    if speed.get("setting"):
        text += f" ({speed['setting']})"
    if speed.get("page"):
        text += f", [details]({speed['page']})"
    return text


def _difference(row: Mapping[str, str]) -> float | None:
    try:
        return float(row["max_abs_difference"])
    except ValueError:  # "failed: <error>", as benchmarks/export_zoo.py records a failure
        return None


def _names(values: Iterable[str], names: Mapping[str, str]) -> list[str]:
    """Display names, in the order of ``names`` (TensorFlow, JAX, PyTorch), others after."""
    order = {value: index for index, value in enumerate(names)}
    ordered = sorted(set(values), key=lambda value: (order.get(value, len(order)), value))
    return [names.get(value, value) for value in ordered]


def _by_backends(rows: list[Mapping[str, str]]) -> str:
    """``ONNX, SavedModel (TF); ONNX (JAX)``: formats grouped by the backends they came from."""
    backends: dict[str, set[str]] = {}
    for row in rows:
        backends.setdefault(row["format"], set()).add(row["backend"])
    groups: dict[tuple[str, ...], list[str]] = {}
    for fmt in sorted(backends):
        key = tuple(_names(backends[fmt], BACKEND_NAMES))
        groups.setdefault(key, []).append(FORMAT_NAMES.get(fmt, fmt))
    return "; ".join(f"{', '.join(fmts)} ({', '.join(key)})" for key, fmts in groups.items())


def export_cell(rows: Iterable[Mapping[str, str]]) -> str:
    """Per variant: formats that exported (from which backends), failures, the largest
    difference against Keras; "not run" when no row is there."""
    rows = list(rows)
    if not rows:
        return "not run"
    parts = []
    for variant in VARIANTS:
        mine = [row for row in rows if row["variant"] == variant]
        if not mine:
            parts.append(f"{variant}: not run")
            continue
        done = [row for row in mine if _difference(row) is not None]
        failed = [row for row in mine if _difference(row) is None]
        text = []
        if done:
            largest = max(_difference(row) for row in done)
            text.append(f"{_by_backends(done)}, max diff {largest:.1e}")
        if failed:
            text.append(f"failed: {_by_backends(failed)}")
        parts.append(f"{variant}: {'; '.join(text)}")
    return "<br>".join(parts)


def render_table(
    models: list[Mapping[str, Any]],
    cards: Mapping[str, Mapping[str, Any]],
    exports: list[Mapping[str, str]],
) -> str:
    """The zoo table in Markdown.

    Raises:
        ZooTableError: if a registered model has no card entry, or a card lists a model
            that is not registered.
    """
    registered = [model["name"] for model in models]
    missing = [name for name in registered if name not in cards]
    unknown = sorted(set(cards) - set(registered))
    if missing or unknown:
        raise ZooTableError(
            "the zoo table needs one card entry per registered model (front matter `zoo:` of "
            f"zoo/<family>/README.md); registered without an entry: {missing or 'none'}; "
            f"entries for unregistered names: {unknown or 'none'}"
        )
    lines = [
        "| name | parameters (ours) | paper | input | export | measured speed |",
        "|---|---:|---|---|---|---|",
    ]
    for model in models:
        entry = cards[model["name"]]
        rows = [row for row in exports if row["name"] == model["name"]]
        cells = [
            # Not wrapped inside a name (Material breaks inline code anywhere).
            f'<code style="white-space: nowrap">{model["name"]}</code>',
            _cell(parameters_cell(entry)),
            _cell(paper_cell(model["paper_parameters"], model.get("reference"))),
            _cell(entry["input"]),
            export_cell(rows),
            _cell(speed_cell(entry.get("speed"))),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    dates = sorted({row["date"] for row in exports if row["name"] in registered})
    if dates:
        machines = sorted({row["machine"] for row in exports if row["name"] in registered})
        source = (
            f"Export: `{EXPORT_CSV}`, written by `benchmarks/export_zoo.py` "
            f"({dates[0]}{' to ' + dates[-1] if len(dates) > 1 else ''}; "
            f"{'; '.join(machines)})."
        )
    else:
        source = f"Export: no run recorded yet (`benchmarks/export_zoo.py` writes `{EXPORT_CSV}`)."
    return "\n".join(lines) + "\n\n" + source + "\n"


def zoo_table(root: str | os.PathLike) -> str:
    """The table for the repository at ``root``."""
    root = pathlib.Path(root)
    return render_table(registry(root), card_entries(root), export_rows(root / EXPORT_CSV))


# --------------------------------------------------------------------------- MkDocs events


def _root(config: Any) -> pathlib.Path:
    return pathlib.Path(config["config_file_path"]).resolve().parent


def on_config(config: Any) -> Any:
    # `mkdocs serve` rebuilds when a card changes (the export CSV is under docs/ already).
    config["watch"].append(str(_root(config) / "zoo"))
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != ZOO_PAGE:
        return markdown
    from mkdocs.exceptions import PluginError

    if MARKER not in markdown:
        raise PluginError(f"zoo_table hook: {ZOO_PAGE} lacks the marker {MARKER}")
    try:
        table = zoo_table(_root(config))
    except ZooTableError as error:
        raise PluginError(f"zoo_table hook: {error}") from error
    return markdown.replace(MARKER, table)
