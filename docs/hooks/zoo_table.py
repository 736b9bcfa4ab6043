"""MkDocs hook: the zoo page's table, built from the zoo registry and the model cards.

At build time the marker ``<!-- zoo-table -->`` in ``docs/zoo.md`` is replaced by one table
with a line per registered zoo model (name, parameters, the paper's count, input, ONNX and
SavedModel marks, measured speed); details and caveats stay in the cards and the export
guide's status section, which the cells link to (and show on hover):

- names, descriptions, the paper's parameter count and the paper come from the registry
  (``keras_posenc.zoo``; importing it registers every model without building any);
- our parameter count, the input and the measured speed come from the YAML front matter of
  the model cards, ``zoo/<family>/README.md``, under the key ``zoo``, one entry per model
  (fields in ``ENTRY_FIELDS``; tests/test_zoo_docs.py checks the counts against the models);
- the export marks come from ``docs/data/zoo_export.csv`` (written by
  ``benchmarks/export_zoo.py``; "–" while it is missing).

Each card is also published as a page of the site, ``zoo/<family>.md`` (``on_files``).

A registered model without a card entry, a card entry for a model that is not registered, or
a malformed entry fails the build. tests/test_zoo_docs.py imports this file to check the cards.
"""

from __future__ import annotations

import csv
import html
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
FORMAT_NAMES = {
    "onnx": "ONNX",
    "tf_saved_model": "SavedModel",
    "saved_model": "SavedModel",
    "litert": "LiteRT",
}
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

# Where the ONNX / SavedModel marks link: the export guide's per-model, per-variant table.
EXPORT_STATUS = "guides/export.md#zoo-export-status"
# The table's formats, in column order (benchmarks/export_zoo.py writes SavedModel as
# "tf_saved_model"; "saved_model" is accepted too).
FORMAT_COLUMNS = (
    ("ONNX", ("onnx",)),
    ("SavedModel", ("tf_saved_model", "saved_model")),
    ("LiteRT", ("litert",)),
)
TRAINABLE_MARK = "*"
OVERRIDES_MARK = "†"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _title(text: str) -> str:
    """``text`` for an HTML title attribute inside a Markdown table cell."""
    return html.escape(" ".join(text.split()), quote=True).replace("|", "&#124;")


def _hover(text: str, title: str) -> str:
    """``text`` that shows ``title`` when the pointer rests on it (no title if it is empty)."""
    return f'<span title="{_title(title)}">{text}</span>' if title else text


def compact(count: int) -> str:
    """A parameter count in few digits: ``25.0M``, ``4.7M``, ``285K``, ``1.2K``, ``950``."""
    if count >= 999_500:  # what would print as 1000K
        return f"{count / 1e6:.1f}M"
    if count >= 9_950:  # what would print as 10.0K
        return f"{count / 1e3:.0f}K"
    if count >= 1000:
        return f"{count / 1e3:.1f}K"
    return str(count)


def card_page(card: str) -> str:
    """The site page of a card: ``zoo/coatnet/README.md`` -> ``zoo/coatnet.md``."""
    return f"{pathlib.PurePosixPath(card).parent}.md"


def paper_cell(parameters: int | None, reference: str | None = None) -> str:
    """The paper's count, ``25M``, or ``–``; the reference shows on hover."""
    count = "–" if parameters is None else f"{parameters / 1e6:g}M"
    return _hover(count, reference or "")


def parameters_cell(entry: Mapping[str, Any]) -> str:
    """Our count, compact, marked ``*`` when only trainable weights count and ``†`` when it is
    for the card's overrides (e.g. vocabulary sizes); the exact count and its setting on hover."""
    marks = TRAINABLE_MARK if entry["counted"] == "trainable" else ""
    marks += OVERRIDES_MARK if entry.get("overrides") else ""
    exact = f"{entry['parameters']:,}" + (" trainable" if entry["counted"] == "trainable" else "")
    setting = "; ".join(
        part
        for part in (
            entry.get("note"),
            ", ".join(f"{k}={v}" for k, v in entry.get("overrides", {}).items()),
        )
        if part
    )
    return _hover(compact(entry["parameters"]) + marks, f"{exact}; {setting}" if setting else exact)


def speed_cell(speed: Mapping[str, Any] | None, note: int | None = None) -> str:
    """The measured value (``–`` if none), linked to its page, with a numbered note mark."""
    if speed is None:
        return "–"
    text = _cell(speed["value"])
    if speed.get("page"):
        text = f"[{text}]({speed['page']})"
    return f"{text} <sup>{note}</sup>" if note is not None else text


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


def export_detail(rows: Iterable[Mapping[str, str]]) -> str:
    """Per variant, for one format's rows: the backends it was verified from and the largest
    difference against Keras, and the backends it failed from, e.g.
    ``full: TF, JAX, max diff 1.5e-06; small: TF, max diff 8.6e-07``."""
    rows = list(rows)
    parts = []
    for variant in reversed(VARIANTS):  # full size first: it is what the mark reports
        mine = [row for row in rows if row["variant"] == variant]
        done = [row for row in mine if _difference(row) is not None]
        failed = [row for row in mine if _difference(row) is None]
        text = []
        if done:
            largest = max(_difference(row) for row in done)
            backends = ", ".join(_names((row["backend"] for row in done), BACKEND_NAMES))
            text.append(
                f"{backends}, max diff {largest:.1e}" if largest else f"{backends}, max diff 0"
            )
        if failed:
            backends = ", ".join(_names((row["backend"] for row in failed), BACKEND_NAMES))
            text.append(f"failed from {backends}")
        parts.append(f"{variant}: {'; '.join(text) if text else 'not run'}")
    return "; ".join(parts)


def export_mark(rows: Iterable[Mapping[str, str]]) -> str:
    """One format's mark: ``✓`` verified at full size (from at least one backend), ``small``
    verified only in the reduced configuration, ``✗`` failed and never verified, ``–`` not
    run; linked to the export status section, the details on hover."""
    rows = list(rows)
    if not rows:
        return "–"
    verified = {row["variant"] for row in rows if _difference(row) is not None}
    failed = {row["variant"] for row in rows if _difference(row) is None}
    if "full" in verified:
        mark = "✓"
    elif "small" in verified:
        mark = "small" + (" (full ✗)" if "full" in failed else "")
    else:
        mark = "✗"
    return f"[{_hover(mark, export_detail(rows))}]({EXPORT_STATUS})"


def render_table(
    models: list[Mapping[str, Any]],
    cards: Mapping[str, Mapping[str, Any]],
    exports: list[Mapping[str, str]],
) -> str:
    """The zoo table in Markdown: one line per model, then the speed notes and the export source.

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
    header = ["model", "parameters", "paper", "input"]
    header += [name for name, _ in FORMAT_COLUMNS] + ["speed"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|---|--:|--:|---|" + ":-:|" * len(FORMAT_COLUMNS) + "---|",
    ]
    notes: list[str] = []
    for model in models:
        entry = cards[model["name"]]
        rows = [row for row in exports if row["name"] == model["name"]]
        speed = entry.get("speed")
        if speed is not None:
            setting = _cell(speed.get("setting") or "setting not recorded")
            where = speed.get("page") or card_page(entry["card"])
            notes.append(
                f"<sup>{len(notes) + 1}</sup> `{model['name']}`: {setting} ([details]({where}))"
            )
        name = f'<code style="white-space: nowrap">{model["name"]}</code>'
        cells = [
            # Not wrapped inside a name (Material breaks inline code anywhere); the name links
            # to the family's card, the model's details and caveats.
            _hover(f"[{name}]({card_page(entry['card'])})", model.get("description") or ""),
            parameters_cell(entry),
            paper_cell(model["paper_parameters"], model.get("reference")),
            _cell(entry["input"]),
            *(
                export_mark(row for row in rows if row["format"] in formats)
                for _, formats in FORMAT_COLUMNS
            ),
            speed_cell(speed, len(notes) if speed is not None else None),
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
    speeds = ("Speed: " + "; ".join(notes) + ".\n\n") if notes else ""
    return "\n".join(lines) + "\n\n" + speeds + source + "\n"


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


def card_markdown(text: str) -> str:
    """A card as a page of the site: without its front matter (the table has it), its links to
    ``../../docs/...`` (the repository's docs, as GitHub shows the card) made relative to the
    card's page, ``zoo/<family>.md``."""
    match = _FRONT_MATTER.match(text)
    body = text[match.end() :].lstrip("\n") if match else text
    return body.replace("](../../docs/", "](../")


def on_files(files: Any, config: Any) -> Any:
    # Each model card becomes a page, zoo/<family>.md, which the table's names link to; a
    # link in a card that does not resolve on the site fails the strict build.
    from mkdocs.structure.files import File

    root = _root(config)
    for path in sorted(root.glob(CARDS)):
        card = path.relative_to(root).as_posix()
        content = card_markdown(path.read_text(encoding="utf-8"))
        files.append(File.generated(config, card_page(card), content=content))
    return files


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
