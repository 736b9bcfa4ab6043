"""The summary page's charts: one SVG bar chart per headline of benchmarks/summary.py, drawn
from the same JSON as its table, into docs/img/benchmarks/NAME.svg.

``python -m benchmarks charts`` draws them (matplotlib, the ``experiments`` extra);
``python -m benchmarks charts --check`` exits 1 when one is stale. A chart is drawn
deterministically: a fixed size, matplotlib's default style whatever the user's
matplotlibrc, the Agg canvas, text kept as SVG text, fixed element ids
(``svg.hashsalt``) and no date in the metadata. Each SVG carries in its metadata the
fingerprint (SHA-256) of what it shows (title, labels, values, unit), so ``--check`` tells
a stale chart without matplotlib; with the matplotlib version that drew it (the SVG's
``Creator``) it also redraws it and compares the bytes, so a change to the drawing code is
caught too. Figures are drawn on a ``Figure`` with the Agg canvas, never through
``pyplot``, as keras_posenc/experiments/_figures.py does (not imported here: it would
import Keras, and checking the charts needs no backend).
"""

from __future__ import annotations

import hashlib
import io
import json
import pathlib
import re

from .registry import BACKEND_NAMES
from .summary import (
    HEADLINES,
    IMAGE_FOLDER,
    Headline,
    format_number,
    headline_rows,
    load_records,
)

# Inches; at 100 pixels per inch the width is 900 px, above the 800 px that
# keras_posenc/experiments/_figures.py (MIN_WIDTH_PX) holds the experiments' figures to.
WIDTH = 9.0
ROW_HEIGHT = 0.42
MARGIN_HEIGHT = 1.3
COLORS = {"tensorflow": "#e8710a", "jax": "#1a73e8", "torch": "#b31b1b"}
_FINGERPRINT = re.compile(r"benchmarks-chart sha256:([0-9a-f]{64})")
_CREATOR = re.compile(r"Matplotlib v([^,<\s]+)")


def chart_spec(headline: Headline, data_folder: pathlib.Path) -> dict:
    """What the chart of ``headline`` shows, as plain data (the fingerprint's input)."""
    rows = headline_rows(headline, load_records(headline, data_folder))
    return {
        "title": headline.title,
        "unit": headline.unit,
        "backends": list(headline.backends),
        "labels": [label for label, _ in rows],
        "values": [[values[b] for b in headline.backends] for _, values in rows],
    }


def fingerprint(spec: dict) -> str:
    """The SHA-256 of ``spec`` written as sorted JSON."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _matplotlib():
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "charts: drawing the benchmark charts needs matplotlib, an optional dependency "
            'of keras-posenc; install it with `pip install "keras-posenc[experiments]"`.'
        ) from error
    return matplotlib


def draw(spec: dict) -> bytes:
    """The SVG of ``spec``: horizontal bars, one group per label, one bar per backend,
    with each value written at its bar's end and, for ratios, the peer's 1 as a line."""
    _matplotlib()  # an ImportError naming the extra when it is missing
    import matplotlib
    import matplotlib.style
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels, backends = spec["labels"], spec["backends"]
    rc = {"svg.hashsalt": "keras-posenc-benchmarks", "svg.fonttype": "none"}
    with matplotlib.style.context("default"), matplotlib.rc_context(rc):
        height = MARGIN_HEIGHT + ROW_HEIGHT * len(labels) * max(1, len(backends)) / 2
        figure = Figure(figsize=(WIDTH, height), dpi=100, layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        bar = 0.8 / len(backends)
        largest = max((v for row in spec["values"] for v in row if v is not None), default=1)
        for index, backend in enumerate(backends):
            positions, widths = [], []
            for row, values in enumerate(spec["values"]):
                if values[index] is not None:
                    positions.append(row - 0.4 + bar * (index + 0.5))
                    widths.append(values[index])
            axes.barh(
                positions, widths, height=bar, color=COLORS[backend], label=BACKEND_NAMES[backend]
            )
            for position, value in zip(positions, widths, strict=True):
                text = format_number(value)
                axes.text(value + largest * 0.01, position, text, va="center", fontsize=8)
        if spec["unit"] == "x":
            axes.axvline(1.0, color="black", linewidth=1.0, linestyle="--")
            axes.set_xlabel("ratio (the peer = 1)")
        else:
            axes.set_xlabel(spec["unit"])
        axes.set_xlim(0, largest * 1.12)
        axes.set_yticks(range(len(labels)), labels)
        axes.invert_yaxis()
        axes.set_title(spec["title"])
        figure.legend(loc="outside lower center", ncols=len(backends), fontsize=8)
        buffer = io.StringIO()
        figure.savefig(
            buffer,
            format="svg",
            metadata={"Date": None, "Description": f"benchmarks-chart sha256:{fingerprint(spec)}"},
        )
    return buffer.getvalue().encode()


def chart_path(docs: pathlib.Path, name: str) -> pathlib.Path:
    """Where the chart of headline ``name`` lies under the docs folder ``docs``."""
    return docs.joinpath(*IMAGE_FOLDER.parts, f"{name}.svg")


def stale_charts(docs: pathlib.Path, redraw: bool = True) -> list[str]:
    """The headlines whose chart under ``docs`` is missing or differs from its JSON.

    A chart is stale when its fingerprint is not that of its data; and, when ``redraw`` and
    the installed matplotlib is the version that drew it, when a fresh drawing's bytes
    differ (another version draws the same chart with other bytes, so only the fingerprint
    is compared then).
    """
    data_folder = docs / "data" / "benchmarks"
    installed = None
    if redraw:
        try:
            installed = _matplotlib().__version__
        except ImportError:
            pass
    stale = []
    for name, headline in HEADLINES.items():
        path = chart_path(docs, name)
        spec = chart_spec(headline, data_folder)
        if not path.is_file():
            stale.append(name)
            continue
        text = path.read_text()
        found = _FINGERPRINT.search(text)
        if found is None or found[1] != fingerprint(spec):
            stale.append(name)
            continue
        creator = _CREATOR.search(text)
        if installed and creator and creator[1] == installed and draw(spec) != text.encode():
            stale.append(name)
    return stale


def write_charts(docs: pathlib.Path) -> list[str]:
    """Draws every headline's chart under ``docs``; the names of those that changed."""
    data_folder = docs / "data" / "benchmarks"
    changed = []
    for name, headline in HEADLINES.items():
        path = chart_path(docs, name)
        svg = draw(chart_spec(headline, data_folder))
        if not path.is_file() or path.read_bytes() != svg:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(svg)
            changed.append(name)
    return changed
