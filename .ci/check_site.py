#!/usr/bin/env python3
"""Check the built documentation site in a real headless browser.

Usage: python .ci/check_site.py SITE_DIR [--chromedriver PATH]

Serves SITE_DIR on 127.0.0.1, drives headless Chromium through Selenium (with
Debian's chromedriver, so nothing is downloaded) and checks that:
- the home page, an API page, the zoo page and a model card render with their content;
- the site search (Material's, run in the browser) returns results;
- no internal link or in-page anchor of any page is broken (parsed from the HTML);
- every figure (an <img> whose file lies under experiments/ or img/benchmarks/: the
  experiments' plots and maps, the benchmark summary's charts) loads, at a natural width
  of at least MIN_FIGURE_WIDTH pixels, so it stays readable at the content width.
Exits non-zero with a list of problems otherwise. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import os
import posixpath
import shutil
import sys
import threading
import urllib.parse
from typing import Any

# Each page, and text its rendered DOM must contain.
PAGES = {
    "": ["keras-posenc", "Install and run", "posenc info", "RelativeTransformerEncoder"],
    "api/layers/": ["MultiHeadRelativeAttention", "RelativePositionBias2D", "log_bucket_index"],
    # "coatnet_0" and "SavedModel" come from the table docs/hooks/zoo_table.py renders, the
    # card page from zoo/coatnet/README.md through the same hook.
    "zoo/": ["zoo.create", "register_model", "coatnet_0", "SavedModel"],
    "zoo/coatnet/": ["CoAtNet", "Configurations", "coatnet_4"],
}
SEARCH_QUERY = "relative"
# Figures are the images stored under this folder of the site; each must load with at
# least this natural width (keras_posenc/experiments/_figures.py draws them 1000-1200 px).
FIGURE_FOLDERS = ("/experiments/", "/img/benchmarks/")
MIN_FIGURE_WIDTH = 800

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib name)
        pass


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])
        for attribute in ("href", "src"):
            if tag in ("a", "link", "script", "img") and values.get(attribute):
                self.links.append(values[attribute])
        if tag == "img" and values.get("src"):
            self.images.append(values["src"])


def _parse(path: str) -> _Links:
    parser = _Links()
    with open(path, encoding="utf-8") as handle:
        parser.feed(handle.read())
    return parser


def _target_file(site: str, page_url: str, link: str) -> tuple[str | None, str]:
    """The file a relative link points to (None if external) and its fragment."""
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
        return None, ""
    if not parts.path:
        url = page_url
    else:
        url = posixpath.normpath(posixpath.join(posixpath.dirname(page_url), parts.path))
        if parts.path.endswith("/"):
            url += "/"
    path = os.path.join(site, urllib.parse.unquote(url).lstrip("/"))
    if url.endswith("/") or os.path.isdir(path):
        path = os.path.join(path, "index.html")
    return path, parts.fragment


def broken_links(site: str) -> list[str]:
    """Every internal link or anchor in the site's HTML that leads nowhere."""
    problems = []
    parsed: dict[str, _Links] = {}

    def parse(path: str) -> _Links:
        # Each file once: the API pages hold thousands of links into each other, and
        # parsing a target again for every anchor made this check take minutes.
        if path not in parsed:
            parsed[path] = _parse(path)
        return parsed[path]

    for root, _, files in os.walk(site):
        for name in files:
            if not name.endswith(".html"):
                continue
            path = os.path.join(root, name)
            page_url = "/" + os.path.relpath(path, site).replace(os.sep, "/")
            links = parse(path)
            for link in links.links:
                target, fragment = _target_file(site, page_url, link)
                if target is None:
                    continue
                if not os.path.exists(target):
                    problems.append(f"{page_url}: link {link!r} -> missing {target}")
                elif fragment and target.endswith(".html"):
                    ids = parse(target).ids
                    if fragment not in ids:
                        problems.append(f"{page_url}: anchor {link!r} not found")
    return problems


def _page_url(site: str, path: str) -> str:
    """The URL path of an HTML file of the site: ``/a/b/`` for ``a/b/index.html``."""
    url = "/" + os.path.relpath(path, site).replace(os.sep, "/")
    return url[: -len("index.html")] if url.endswith("/index.html") else url


def figure_images(site: str) -> dict[str, list[str]]:
    """``{page URL: [src of each figure]}`` for every page of the site that shows a figure.

    A figure is an ``<img>`` whose ``src`` resolves to a path under a `FIGURE_FOLDERS` one
    (external images and images elsewhere are not figures). Page URLs are paths
    from the site's root (``/experiments/coatnet-layouts/``); each ``src`` is as
    written in the page, which the browser resolves against the page's URL.
    """
    pages: dict[str, list[str]] = {}
    for root, _, files in os.walk(site):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            path = os.path.join(root, name)
            page = _page_url(site, path)
            for source in _parse(path).images:
                parts = urllib.parse.urlsplit(source)
                if parts.scheme or parts.netloc:  # external, or data: URLs
                    continue
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), parts.path))
                if resolved.startswith(FIGURE_FOLDERS):
                    pages.setdefault(page, []).append(source)
    return dict(sorted(pages.items()))


def narrow_figures(widths: dict[str, int], minimum: int = MIN_FIGURE_WIDTH) -> list[str]:
    """One problem per figure whose natural width is below ``minimum`` (0: it did not load).

    Args:
        widths: ``{figure name: img.naturalWidth}`` as the browser reports it.
        minimum: the narrowest acceptable width in pixels.
    """
    problems = []
    for name, width in widths.items():
        if width == 0:
            problems.append(f"figure {name} did not load (naturalWidth 0)")
        elif width < minimum:
            problems.append(f"figure {name} is {width} px wide; figures need at least {minimum} px")
    return problems


def _browser(chromedriver: str) -> Any:  # a selenium WebDriver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


def _visible_text(driver: Any) -> str:
    return " ".join(driver.find_element("tag name", "body").text.split())


def check_pages(driver: Any, base: str) -> list[str]:
    problems = []
    for page, expected in PAGES.items():
        driver.get(base + page)
        text = _visible_text(driver)
        missing = [snippet for snippet in expected if snippet not in text]
        status = "ok" if not missing else f"MISSING {missing}"
        print(f"page /{page}: {len(text)} characters of text, {status}")
        if missing:
            problems.append(f"/{page} lacks {missing}")
    return problems


def check_search(driver: Any, base: str) -> list[str]:
    """Types a query into the site's search box and waits for results."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base)
    driver.find_element("css selector", "label.md-search__icon, label[for=__search]").click()
    box = driver.find_element("css selector", "input.md-search__input")
    box.send_keys(SEARCH_QUERY)
    items = "li.md-search-result__item"
    try:
        WebDriverWait(driver, 30).until(lambda d: d.find_elements("css selector", items))
    except Exception:  # a timeout: no result appeared
        pass
    hits = driver.find_elements("css selector", items)
    print(f"search {SEARCH_QUERY!r}: {len(hits)} results")
    return [] if hits else [f"search for {SEARCH_QUERY!r} returned no results"]


def check_figures(driver: Any, base: str, site: str) -> list[str]:
    """Loads every page with figures and checks each figure's natural width in the browser."""
    from selenium.webdriver.support.ui import WebDriverWait

    pages = figure_images(site)
    if not pages:  # a check that finds nothing to check would pass for the wrong reason
        folders = " or ".join(FIGURE_FOLDERS)
        return [f"no figures (images under {folders}) found in the site"]
    problems = []
    for page, sources in pages.items():
        driver.get(base + page.lstrip("/"))
        try:  # every image finished loading or failed (naturalWidth 0 then)
            WebDriverWait(driver, 30).until(
                lambda d: d.execute_script(
                    "return Array.from(document.images).every(i => i.complete)"
                )
            )
        except Exception:  # a timeout: the widths below show which did not load
            pass
        loaded = dict(
            driver.execute_script(
                "return Array.from(document.images).map(i => [i.src, i.naturalWidth])"
            )
        )
        widths = {}
        for source in sources:
            url = urllib.parse.urljoin(base + page.lstrip("/"), source)
            if url not in loaded:
                problems.append(f"{page}: figure {source!r} is not in the rendered page")
                continue
            widths[f"{page}{source}"] = int(loaded[url])
        print(f"page {page}: {len(widths)} figure(s), natural widths {sorted(widths.values())}")
        problems.extend(narrow_figures(widths))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site")
    parser.add_argument(
        "--chromedriver", default=shutil.which("chromedriver") or "/usr/bin/chromedriver"
    )
    args = parser.parse_args(argv)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=args.site)
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}/"
    driver = _browser(args.chromedriver)
    try:
        problems = check_pages(driver, base) + check_search(driver, base)
        problems += check_figures(driver, base, args.site)
    finally:
        driver.quit()
        server.shutdown()
    links = broken_links(args.site)
    print(f"internal links: {len(links)} broken")
    problems.extend(links)
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
