"""Every built page as a browser lays it out: readable on a phone and on a desktop, and offline.

Quarto cannot be installed here, so the pages are made by pandoc (the engine under Quarto) with the
site's own math method and stylesheets from the built ``_quarto.yml``, inside a small frame that
gives the text column Quarto's widths. Headless Chromium then opens each page at a phone width and
a desktop width. A page passes when nothing sticks out of its container except inside a box that
scrolls on its own, and the page itself never scrolls sideways.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pypandoc
import pytest
from helpers import REPO
from ruamel.yaml import YAML
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from grader.build import TREES, build
from grader.course import load_course

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTHS = (390, 1280)  # a common phone, and a laptop where Quarto shows sidebar and table of contents
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
needs_chromium = pytest.mark.skipif(
    not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver); scripts/setup installs them",
)

# Quarto's text column: 761 px beside the sidebar and table of contents at 1280 px (measured on the
# real site), the screen less a 1 rem margin on each side on a phone. Only widths, no overflow rules:
# keeping the content inside the column is the job of the site's own stylesheet.
FRAME_CSS = """
body { box-sizing: border-box; max-width: calc(761px + 2rem); margin: 0 auto; padding: 0 1rem;
       font-family: sans-serif; font-size: 17px; line-height: 1.5; }
"""

# Finds every rendered element that sticks out of its parent, unless some ancestor scrolls sideways.
OVERFLOW_PROBE = """
const scrolls = (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX);
const found = [];
for (const el of document.body.querySelectorAll("*")) {
  const parent = el.parentElement;
  let boxed = false;
  for (let a = parent; a && a !== document.body; a = a.parentElement) {
    if (scrolls(a)) { boxed = true; break; }
  }
  if (boxed) continue;
  const r = el.getBoundingClientRect(), p = parent.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  if (r.right > p.right + 1 || r.left < p.left - 1) {
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 50);
    found.push(`<${el.localName}> ${Math.round(r.width)} px in <${parent.localName}> ${Math.round(p.width)} px: ${text}`);
  }
}
return {found, scrollWidth: document.documentElement.scrollWidth,
        clientWidth: document.documentElement.clientWidth, innerWidth: window.innerWidth,
        resources: performance.getEntriesByType("resource").map((e) => e.name)};
"""


@dataclass(frozen=True)
class Page:
    name: str  # tree/relative path, for messages
    html: Path


def _site_format(tree: Path) -> dict[str, Any]:
    """``format.html`` of the built ``_quarto.yml``: the settings the real site renders with."""
    config = YAML(typ="safe").load((tree / "_quarto.yml").read_text(encoding="utf-8"))
    return config["format"]["html"]


def _stylesheets(fmt: dict[str, Any]) -> list[str]:
    css = fmt.get("css", [])
    return [css] if isinstance(css, str) else list(css)


def _as_pandoc_markdown(qmd: str) -> str:
    # Quarto turns executable cells (```{python}) into ordinary code blocks before pandoc sees them.
    return re.sub(r"^```\{python\}", "```{.python .cell}", qmd, flags=re.M)


def _render(source: Path, tree: Path, out: Path, stylesheets: list[str]) -> Page:
    """One built .qmd to standalone HTML beside copies of the site's stylesheets, linked as Quarto does."""
    relative = source.relative_to(tree)
    target = out / relative.with_suffix(".html")
    target.parent.mkdir(parents=True, exist_ok=True)
    up = "../" * (len(relative.parts) - 1)
    css = [f"{up}frame.css"] + [f"{up}{name}" for name in stylesheets]
    args = ["--standalone", "--mathml", "--metadata", "pagetitle=page"] + [f"--css={c}" for c in css]
    pypandoc.convert_text(
        _as_pandoc_markdown(source.read_text(encoding="utf-8")),
        "html5",
        format="markdown",
        extra_args=args,
        outputfile=str(target),
    )
    return Page(f"{tree.name}/{relative}", target)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> list[Page]:
    """Every built lesson and the syllabus of both trees, as HTML pages."""
    root = tmp_path_factory.mktemp("site")
    build(load_course(REPO), root / "built")
    jobs = []
    for name in TREES:
        tree, out = root / "built" / name, root / "html" / name
        fmt = _site_format(tree)
        assert fmt.get("html-math-method") == "mathml", "the site must render math without MathJax from a CDN"
        stylesheets = _stylesheets(fmt)
        out.mkdir(parents=True)
        (out / "frame.css").write_text(FRAME_CSS, encoding="utf-8")
        for css in stylesheets:
            shutil.copyfile(tree / css, out / css)
        sources = [tree / "index.qmd", *sorted((tree / "lessons").glob("*.qmd"))]
        jobs += [(source, tree, out, stylesheets) for source in sources]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda job: _render(*job), jobs))


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[webdriver.Chrome]:
    """One headless Chromium for every page, with a fresh profile."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


@needs_chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_is_wider_than_the_screen(pages, browser, width):
    browser.set_window_size(width, 900)
    problems: list[str] = []
    for page in pages:
        browser.get(page.html.as_uri())
        seen = browser.execute_script(OVERFLOW_PROBE)
        assert seen["innerWidth"] == width, "the window did not take the asked width"
        problems += [f"{page.name}: {item}" for item in seen["found"]]
        if seen["scrollWidth"] > seen["clientWidth"]:
            problems.append(
                f"{page.name}: the page scrolls sideways ({seen['scrollWidth']} > {seen['clientWidth']} px)"
            )
        off_site = [url for url in seen["resources"] if not url.startswith("file://")]
        problems += [f"{page.name}: loaded {url}" for url in off_site]
    assert not problems, f"at {width} px:\n" + "\n".join(problems)


class _Resources(HTMLParser):
    """Collects every URL the browser would load by itself (not the links a reader may click)."""

    LOADED = {"src", "srcset", "data", "poster", "background"}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if not value:
                continue
            if name in self.LOADED:
                self.urls += [part.strip().split(" ")[0] for part in value.split(",")] if name == "srcset" else [value]
            elif name == "href" and tag != "a":  # <link>, <use>, <image>: loaded, unlike a hyperlink
                self.urls.append(value)
            elif name == "style":
                self.urls += _css_urls(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls += _css_urls(data)


def _css_urls(css: str) -> list[str]:
    return re.findall(r"""url\(\s*['"]?([^'")\s]+)""", css) + re.findall(r"""@import\s+['"]([^'"]+)""", css)


def _off_site(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.netloc) or parts.scheme not in ("", "data")


def test_pages_and_stylesheets_load_nothing_from_another_host(pages):
    problems = []
    for page in pages:
        finder = _Resources()
        finder.feed(page.html.read_text(encoding="utf-8"))
        problems += [f"{page.name}: {url}" for url in finder.urls if _off_site(url)]
    for css in {p.html.parent / "styles.css" for p in pages if p.name.endswith("index.qmd")}:
        problems += [f"{css.name}: {url}" for url in _css_urls(css.read_text(encoding="utf-8")) if _off_site(url)]
    assert not problems, "fetched from elsewhere, so broken offline:\n" + "\n".join(problems)


def test_every_formula_becomes_mathml(pages):
    """pandoc leaves TeX it cannot convert as raw text in a ``math`` span; a reader would see the TeX."""
    for page in pages:
        html = page.html.read_text(encoding="utf-8")
        leftovers = re.findall(r'<span class="math (?:inline|display)">(.{0,60})', html)
        assert not leftovers, f"{page.name}: formulas left as TeX: {leftovers}"


def test_the_off_site_check_catches_what_it_must():
    finder = _Resources()
    finder.feed(
        '<link rel="stylesheet" href="https://fonts.example/css"><script src="//cdn.example/mathjax.js"></script>'
        '<img srcset="a.png 1x, https://img.example/b.png 2x"><a href="https://huggingface.co/">playbook</a>'
        "<style>@import 'https://x.example/y.css'; p { background: url(../local.png) }</style>"
    )
    assert [u for u in finder.urls if _off_site(u)] == [
        "https://fonts.example/css",
        "//cdn.example/mathjax.js",
        "https://img.example/b.png",
        "https://x.example/y.css",
    ]
