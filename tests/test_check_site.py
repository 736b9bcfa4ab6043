"""The browser check's figure rule (.ci/check_site.py), without a browser.

CI runs the check itself with headless Chromium on the built site; here its helpers run on
a small hand-written site and a stand-in driver that reports what a browser would. The
repository is found through POSENC_DOCS (its docs/ folder), as in tests/test_guides.py.
"""

from __future__ import annotations

import importlib.util
import urllib.parse

import pytest
from repository import repository_path

pytestmark = pytest.mark.neutral


@pytest.fixture(scope="module")
def check_site():
    path = repository_path(".ci", "check_site.py")
    spec = importlib.util.spec_from_file_location("check_site", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_site(root, pages):
    for page, images in pages.items():
        path = root / page
        path.parent.mkdir(parents=True, exist_ok=True)
        tags = "".join(f'<img alt="x" src="{source}" />' for source in images)
        path.write_text(f"<html><body><p>text</p>{tags}</body></html>")


SITE = {
    "index.html": ["assets/logo.png", "experiments/a/plot.png"],
    "experiments/a/index.html": ["plot.png", "https://example.org/badge.png", "../b/maps.png"],
    "experiments/a/notes/index.html": [],
    "guides/b/index.html": ["../../experiments/a/plot.png", "diagram.png"],
    "benchmarks/index.html": ["../img/benchmarks/chart.svg", "../img/logo.svg"],
}


def test_figures_are_the_images_under_experiments_and_benchmark_charts(check_site, tmp_path):
    write_site(tmp_path, SITE)
    assert check_site.figure_images(str(tmp_path)) == {
        "/": ["experiments/a/plot.png"],
        "/experiments/a/": ["plot.png", "../b/maps.png"],
        "/guides/b/": ["../../experiments/a/plot.png"],
        "/benchmarks/": ["../img/benchmarks/chart.svg"],
    }


def test_narrow_and_missing_figures_are_problems(check_site):
    problems = check_site.narrow_figures({"wide": 1200, "edge": 800, "narrow": 400, "lost": 0})
    assert problems == [
        "figure narrow is 400 px wide; figures need at least 800 px",
        "figure lost did not load (naturalWidth 0)",
    ]


class FakeDriver:
    """Answers check_figures' two scripts as a browser would, from ``{absolute URL: width}``."""

    def __init__(self, widths):
        self.widths, self.url, self.visited = widths, None, []

    def get(self, url):
        self.url = url
        self.visited.append(url)

    def execute_script(self, script):
        if "every(i => i.complete)" in script:
            return True
        page = urllib.parse.urlsplit(self.url).path
        shown = {"/experiments/a/": ["plot.png", "../b/maps.png"], "/": []}.get(page, [])
        urls = [urllib.parse.urljoin(self.url, s) for s in shown]
        return [[u, self.widths[u]] for u in urls]


def test_check_figures_reports_each_narrow_or_absent_figure(check_site, tmp_path):
    write_site(tmp_path, SITE)
    base = "http://127.0.0.1:8000/"
    driver = FakeDriver(
        {base + "experiments/a/plot.png": 1200, base + "experiments/b/maps.png": 420}
    )
    problems = check_site.check_figures(driver, base, str(tmp_path))
    assert driver.visited == [
        base,
        base + "benchmarks/",
        base + "experiments/a/",
        base + "guides/b/",
    ]
    assert problems == [
        "/: figure 'experiments/a/plot.png' is not in the rendered page",
        "/benchmarks/: figure '../img/benchmarks/chart.svg' is not in the rendered page",
        "figure /experiments/a/../b/maps.png is 420 px wide; figures need at least 800 px",
        "/guides/b/: figure '../../experiments/a/plot.png' is not in the rendered page",
    ]


def test_a_site_without_figures_fails_the_check(check_site, tmp_path):
    write_site(tmp_path, {"index.html": ["assets/logo.png"]})
    problems = check_site.check_figures(FakeDriver({}), "http://127.0.0.1:8000/", str(tmp_path))
    assert problems == [
        "no figures (images under /experiments/ or /img/benchmarks/) found in the site"
    ]


def test_broken_links_finds_missing_pages_and_anchors_parsing_each_page_once(
    check_site, tmp_path, monkeypatch
):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "index.html").write_text(
        '<html><body><h2 id="one">1</h2><a name="two"></a>'
        + '<a href="#one">a</a><a href="#two">b</a>' * 50
        + "</body></html>"
    )
    (tmp_path / "index.html").write_text(
        "<html><body>"
        + '<a href="api/#one">ok</a><a href="api/#two">ok</a>' * 50
        + '<a href="api/#three">gone</a><a href="guides/">missing</a>'
        + '<a href="https://example.org/#x">external</a></body></html>'
    )
    parses = []
    parse = check_site._parse
    monkeypatch.setattr(check_site, "_parse", lambda path: parses.append(path) or parse(path))
    problems = check_site.broken_links(str(tmp_path))
    assert sorted(problems) == [
        "/index.html: anchor 'api/#three' not found",
        f"/index.html: link 'guides/' -> missing {tmp_path / 'guides' / 'index.html'}",
    ]
    # Each page once, however many links lead into it (the API pages have thousands).
    assert sorted(parses) == sorted(
        [str(tmp_path / "index.html"), str(tmp_path / "api" / "index.html")]
    )
