"""What a page costs a reader to load, and the theme's icons drawn without Font Awesome, in Chromium."""

import collections
import io
import re
import urllib.parse

import pytest
from PIL import Image

# Bytes (bodies and headers, served uncompressed by a plain file server) that a first visit
# fetches. With the theme's Font Awesome script and font a page's theme files came to 2.4 MB;
# without them 0.8 MB, most of it the theme's stylesheet (0.38 MB) and the search index.
THEME_FILES_LIMIT = 1_000_000
PAGE_LIMIT = 1_200_000  # the home page, its text and plot included (2.6 MB before)
PAGES = ["index.html", "tutorial.html", "api.html", "reference/policies.html"]

# The buttons a reader sees around the article, by width: (name, where to find it).
BUTTONS = {
    390: [("menu", ".bd-header-article .primary-toggle"),
          ("contents", ".bd-header-article .secondary-toggle"),
          ("search", ".bd-header-article .search-button"),
          ("theme switch", ".bd-header-article .theme-switch-button"),
          ("download", ".bd-header-article .dropdown-download-buttons > button"),
          ("fullscreen", ".bd-header-article .btn-fullscreen-button")],
    1400: [("menu", ".bd-header-article .primary-toggle"),
           ("contents", ".bd-sidebar-secondary .onthispage"),
           ("search", ".bd-header .search-button-field"),
           ("theme switch", ".bd-header-article .theme-switch-button"),
           ("download", ".bd-header-article .dropdown-download-buttons > button"),
           ("fullscreen", ".bd-header-article .btn-fullscreen-button")],
}




def _first_visit(browser, url: str) -> dict[str, int]:
    """Bytes of each file a fresh browser (empty cache) fetches to show url, by site path."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    finished = []
    page.on("requestfinished", lambda request: finished.append(request))
    page.goto(url, wait_until="networkidle")
    fetched = {}
    for request in finished:
        sizes = request.sizes()
        path = urllib.parse.urlsplit(request.url).path.lstrip("/")
        fetched[path] = fetched.get(path, 0) + sizes["responseBodySize"] + sizes["responseHeadersSize"]
    context.close()
    return fetched


def _theme_files(fetched: dict[str, int]) -> int:
    return sum(n for path, n in fetched.items() if path.startswith("_static/") or path == "searchindex.js")


@pytest.mark.parametrize("name", PAGES)
def test_a_first_visit_fetches_no_icon_font_and_under_a_megabyte_of_theme_files(browser, base_url, name):
    fetched = _first_visit(browser, base_url + name)
    assert name in fetched and "_static/styles/pydata-sphinx-theme.css" in fetched, sorted(fetched)
    assert [p for p in fetched if "fontawesome" in p or re.search(r"\.(woff2?|ttf|otf)$", p)] == []
    assert _theme_files(fetched) < THEME_FILES_LIMIT, sorted(fetched.items(), key=lambda kv: -kv[1])[:5]


def test_the_home_page_loads_in_under_1_2_megabytes(browser, base_url):
    fetched = _first_visit(browser, base_url + "index.html")
    assert sum(fetched.values()) < PAGE_LIMIT, sorted(fetched.items(), key=lambda kv: -kv[1])[:5]


def _ink(png: bytes) -> tuple[int, float]:
    """Pixels of an image unlike the commonest colour of its edges, and their share of the box that holds them."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = image.size
    edges = [(x, y) for x in range(w) for y in (0, h - 1)] + [(x, y) for y in range(h) for x in (0, w - 1)]
    background = collections.Counter(image.getpixel(xy) for xy in edges).most_common(1)[0][0]
    inked = [(x, y) for y in range(h) for x in range(w)
             if max(abs(a - b) for a, b in zip(image.getpixel((x, y)), background)) > 60]
    if not inked:
        return 0, 0.0
    xs, ys = [x for x, _ in inked], [y for _, y in inked]
    return len(inked), len(inked) / ((max(xs) - min(xs) + 1) * (max(ys) - min(ys) + 1))


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("width", [390, 1400])
def test_every_button_shows_its_icon(browser, base_url, width, theme):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=theme)
    page = context.new_page()
    page.goto(base_url + "tutorial.html", wait_until="networkidle")
    drawn = {}
    for name, selector in BUTTONS[width]:
        button = page.locator(selector + " >> visible=true")
        assert button.count() == 1, (name, button.count())
        icon = button.locator(".fa-solid, .fas, svg.svg-inline--fa").locator("visible=true")
        assert icon.count() == 1, (name, icon.count())
        box = icon.bounding_box()
        pixels, share = _ink(page.screenshot(clip={  # the icon and a margin of what lies behind it
            "x": box["x"] - 6, "y": box["y"] - 6, "width": box["width"] + 12, "height": box["height"] + 12}))
        # Drawn: a box with some ink in it, and not a filled square (a class with no icon).
        drawn[name] = box["width"] > 0 and box["height"] > 0 and pixels >= 20 and share < 0.75
    context.close()
    assert drawn == {name: True for name, _ in BUTTONS[width]}


def test_every_icon_the_pages_name_is_drawn(site_dir):
    # Icon names are the fa-* classes the theme's stylesheet gives a glyph (not fa-lg, fa-fw);
    # the pages name them in their HTML, and the theme's script adds fa-xmark (a close button).
    theme_css = (site_dir / "_static/styles/pydata-sphinx-theme.css").read_text(encoding="utf-8")
    glyphs = set(re.findall(r"\.(fa-[a-z0-9-]+)(?=[,{][^}]*--fa:)", theme_css))
    script = (site_dir / "_static/scripts/pydata-sphinx-theme.js").read_text(encoding="utf-8")
    named = set(re.findall(r"\b(fa-[a-z0-9-]+)", script))
    for page in site_dir.rglob("*.html"):
        if page.relative_to(site_dir).parts[0] not in ("_static", "_sources"):
            for classes in re.findall(r'class="([^"]*\bfa-[^"]*)"', page.read_text(encoding="utf-8")):
                named.update(c for c in classes.split() if c.startswith("fa-"))
    icons = (site_dir / "_static/icons.css").read_text(encoding="utf-8")
    drawn = set(re.findall(r"^\.(fa-[a-z0-9-]+) \{ --remat-icon:", icons, re.MULTILINE))
    assert {"fa-bars", "fa-list", "fa-magnifying-glass", "fa-circle-half-stroke"} <= named & glyphs
    assert sorted((named & glyphs) - drawn) == []
