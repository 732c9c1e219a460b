"""The built site in a real browser: Playwright drives a local Chromium against 127.0.0.1."""

import concurrent.futures
import os
import pathlib
import re
import shutil
import sys
import urllib.parse

import nbformat
import pytest
from PIL import Image
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import sync_playwright

from helpers import CHROMIUM_FLAGS, chromium

# The two widths of the tour, and the pages Sphinx generates (not written as pages).
DESKTOP, PHONE = 1400, 390
GENERATED = {"genindex.html", "search.html", "py-modindex.html"}
# `make test WHOLE_PAGES=1`: the screenshot of each page at 390 px in the light theme shows the
# whole page, not its first screen (the whole pages took a third of the phone's tour).
WHOLE_PAGES = os.environ.get("REMAT_GUIDE_WHOLE_PAGES", "") not in ("", "0")




def _cancelled_favicon(request) -> bool:
    # Chromium asks for the favicon after the page has loaded, and going on to the next
    # page cancels that request: the browser's doing, not the site's.
    return request.url.endswith("/_static/favicon.svg") and request.failure == "net::ERR_ABORTED"


def _record_problems(page, host: str, problems: list[str]) -> None:
    """Appends to problems every console error, page error, failed request and off-site request of page."""
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: not _cancelled_favicon(r)
            and problems.append(f"failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
    page.on("request", lambda r: urllib.parse.urlsplit(r.url).netloc not in ("", host)
            and problems.append(f"off-site request: {r.url}"))


@pytest.fixture
def page(browser, base_url):
    context = browser.new_context(
        permissions=["clipboard-read", "clipboard-write"], viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.problems = []
    _record_problems(page, urllib.parse.urlsplit(base_url).netloc, page.problems)
    yield page
    context.close()


def _pages(site_dir: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(site_dir)) for p in site_dir.rglob("*.html")
                  if p.relative_to(site_dir).parts[0] not in ("_static", "_sources"))


def test_every_page_loads_cleanly_from_the_site_alone(tour, page, base_url, site_dir):
    pages = _pages(site_dir)
    assert {"index.html", "exercise.html", "search.html"} <= set(pages)
    # The tour opened every content page in four views; the generated pages are left.
    assert {name for name, *_ in tour if name != "problems"} == set(_content_pages(site_dir))
    assert all(found["title"] for key, found in tour.items() if key[0] != "problems")
    for name in sorted(GENERATED & set(pages)):
        page.goto(base_url + name, wait_until="networkidle")
        assert page.title(), name
    assert page.goto(base_url + "_static/favicon.svg").ok
    assert page.problems == []


def test_search_finds_the_policy(page, base_url):
    page.goto(base_url + "search.html?q=dots_with_no_batch_dims_saveable", wait_until="networkidle")
    results = page.locator("#search-results ul.search li")
    results.first.wait_for(timeout=15_000)
    hrefs = [results.nth(i).locator("a").first.get_attribute("href") for i in range(results.count())]
    assert any(h.startswith("exercise.html") for h in hrefs), hrefs
    assert page.problems == []


def test_copy_button_copies_doctest_code_without_prompts_or_output(page, base_url):
    page.goto(base_url + "api.html", wait_until="networkidle")
    block = page.locator("div.highlight", has_text=">>> checkpoint_dot_policy(w1, w2, x)").first
    block.hover()
    block.locator("button.copybtn").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert "checkpoint_dot_policy(w1, w2, x)" in copied
    assert "import jax.numpy as jnp" in copied
    assert ">>>" not in copied and "\n... " not in copied
    assert "Array(96., dtype=float32)" not in copied  # the doctest's output stays behind
    assert page.problems == []


def test_exercise_hint_dropdowns_open(page, base_url, site_dir):
    page.goto(base_url + "exercise.html", wait_until="networkidle")
    hints = page.locator("details.sd-dropdown", has_text="Hint")
    assert hints.count() == 3
    for i in range(hints.count()):
        hint = hints.nth(i)
        assert hint.get_attribute("open") is None
        hint.locator("summary").click()
        assert hint.get_attribute("open") is not None
        assert hint.locator(".sd-summary-content").is_visible()
    assert page.problems == []


def test_dark_mode_switch(page, base_url):
    page.goto(base_url + "index.html", wait_until="networkidle")
    light_background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    for mode in ("dark", "light"):
        page.locator("button.theme-switch-button").first.click()
        page.locator(f"button.theme-change-button[data-mode={mode}]").first.click()
        assert page.evaluate("document.documentElement.dataset.theme") == mode
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert (background == light_background) == (mode == "light"), background
    page.reload(wait_until="networkidle")  # the choice is remembered
    assert page.evaluate("document.documentElement.dataset.mode") == "light"
    assert page.problems == []


# --- what a reader sees: widths, themes, tables, plots, notebooks ----------------------


def _content_pages(site_dir: pathlib.Path) -> list[str]:
    return [name for name in _pages(site_dir) if name not in GENERATED]


@pytest.fixture
def view(browser, base_url):
    """Opens pages at a given width and colour scheme; reports console errors and failed requests."""
    contexts = []

    def open_page(name: str, width: int, theme: str):
        context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=theme)
        contexts.append(context)
        page = context.new_page()
        problems = []
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))
        page.goto(base_url + name, wait_until="networkidle")
        # The theme's script sets data-theme once it runs, which on a loaded machine can come after networkidle.
        page.wait_for_function("theme => document.documentElement.dataset.theme === theme", arg=theme,
                               timeout=15_000)
        assert page.evaluate("document.documentElement.dataset.theme") == theme, name
        assert problems == [], problems
        return page

    yield open_page
    for context in contexts:
        context.close()


# Output blocks and tables of the article, each with its width and the width it needs.
_OVERFLOWING = """() => {
  const found = [];
  const selector = 'article div.cell_output pre, article div.cell_output div.output, '
                 + 'article .remat-table-scroll, article table, article .remat-fb-code';
  for (const el of document.querySelectorAll(selector)) {
    if (el.closest('.remat-table-scroll') && el.tagName === 'TABLE') continue;
    if (el.scrollWidth > el.clientWidth + 1) {
      found.push(`${el.tagName}.${el.className}: needs ${el.scrollWidth}px, has ${el.clientWidth}px: `
                 + el.innerText.slice(0, 80).replace(/\\s+/g, ' '));
    }
  }
  return found;
}"""


# Code blocks of the article (shown or folded) whose lines run past the right edge of their box.
_WIDE_CODE = """() => [...document.querySelectorAll('article div.highlight pre')]
  .filter(el => el.scrollWidth > el.clientWidth + 1)
  .map(el => `needs ${el.scrollWidth}px, has ${el.clientWidth}px: `
             + el.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), ''))"""


# A JPEG is at most 65,535 pixels high; a taller page is saved in parts (-2.jpg, -3.jpg, ...).
_JPEG_HEIGHT = 65_000


def _screenshot(page, stem: pathlib.Path, whole: bool = True) -> None:
    """Saves the whole page as stem.jpg, in parts when it is taller than a JPEG can be; or its first screen."""
    if not whole:
        page.screenshot(path=str(stem) + ".jpg", type="jpeg", quality=85)
        return
    width, height = page.evaluate("[document.documentElement.clientWidth, document.documentElement.scrollHeight]")
    for part, top in enumerate(range(0, height, _JPEG_HEIGHT), start=1):
        path = stem.with_name(stem.name + ("" if part == 1 else f"-{part}") + ".jpg")
        page.screenshot(path=str(path), full_page=True, type="jpeg", quality=85,
                        clip={"x": 0, "y": top, "width": width, "height": min(_JPEG_HEIGHT, height - top)})
        assert path.stat().st_size > 0, path


# What a reader's tap on the visible sidebar buttons does, per width: on a phone each opens
# its drawer (a modal dialog holding the sidebar's links); on a desktop the menu button hides
# the site navigation and shows it again.
_DRAWER = """modal => { const d = document.querySelector(modal);
  const link = d && d.open && d.querySelector('a');
  return Boolean(link && link.getBoundingClientRect().width > 0); }"""
_HIDDEN = "() => document.querySelector('#pst-primary-sidebar').classList.contains('pst-sidebar-hidden')"
_OPEN = "modal => document.querySelector(modal).open"


def _open_navigation(page, width: int, stem: pathlib.Path, settle=lambda: None) -> dict[str, bool]:
    """Taps the page's visible navigation buttons as a reader would; saves the open drawer.

    ``settle`` is called between the desktop's two taps (the tour waits there for the network).
    """
    found = {}
    if width == PHONE:
        for kind in ("primary", "secondary"):
            toggle = page.locator(f".bd-header-article .{kind}-toggle")
            if not toggle.count():  # a page without sections has no contents button
                continue
            modal = f"#pst-{kind}-sidebar-modal"
            toggle.click()
            found[kind] = _settles(page, _DRAWER, True, modal)
            if kind == "primary":
                page.screenshot(path=str(stem) + ".jpg", type="jpeg", quality=85)
            page.keyboard.press("Escape")
            found[kind + " closed"] = _settles(page, _OPEN, False, modal)
    else:
        toggle = page.locator(".bd-header-article .primary-toggle")
        toggle.click()
        found["hidden"] = _settles(page, _HIDDEN, True)
        settle()  # the sidebar slides away meanwhile: the button is still when clicked again
        toggle.click()
        found["shown again"] = _settles(page, _HIDDEN, False)
    return found


def _settles(page, state: str, wanted: bool, arg: str | None = None) -> bool:
    """Whether ``state`` (a function in the page, of ``arg``) comes to be ``wanted`` within two seconds.

    A tap's effect may land a frame after the click returns: reading it at once raced it.
    """
    try:
        page.wait_for_function(f"arg => ({state})(arg) === {str(wanted).lower()}", arg=arg, timeout=2_000)
    except PlaywrightTimeoutError:
        return False
    return True


@pytest.fixture(scope="module")
def tour(browser, base_url, site_dir):
    """Every content page in the four views (two widths, two themes).

    Each page is loaded once per width, in one theme, and then shown in the other as a
    reader's system switching theme would (the theme follows the colour scheme the browser
    reports, without a reload; pages take the light theme first and the dark one first by
    turns). For each view it records the page's title, the theme the page shows, the
    output blocks and tables that need more width than they have, the page's own scroll
    width and client width, the notebook links of the download menu (at 390 px in the
    light theme, each table header as it wraps; at 1400 px, the code lines too wide for
    their box with the folded code opened), in the second theme what the navigation
    buttons did (see ``_open_navigation``), and saves a screenshot of the first screen as
    ``_build/screenshots/<page>-<width>-<theme>.jpg`` (the checks above run on the whole
    page in every view). With :data:`WHOLE_PAGES`, the screenshot at 390 px in the light
    theme shows the whole page (and ``-2.jpg``, ... for a page taller than a JPEG can be).
    Under ``("problems", width)`` it records each width's console errors, page errors,
    failed and off-site requests, in both themes. The two widths run side by side, in two
    Chromiums (the second in its own thread, with its own Playwright).
    """
    shots = site_dir.parent / "screenshots"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir()
    pages = _content_pages(site_dir)

    def phone() -> dict:
        with sync_playwright() as playwright:
            other = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
            try:
                return _tour_width(other, base_url, pages, PHONE, shots)
            finally:
                other.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        later = pool.submit(phone)
        seen = _tour_width(browser, base_url, pages, DESKTOP, shots)
        seen.update(later.result())
    return seen


# The theme's sliding sidebars and fading drawers, stopped for the tour: a tap's end state is
# what it checks, and every frame of a slide lays out the whole page again (about a third of
# the desktop view's time went to the sidebar sliding away and back).
_NO_TRANSITIONS = """document.addEventListener('DOMContentLoaded', () => {
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { transition: none !important; animation: none !important; }';
  document.head.append(style);
});"""


def _in_theme(page, theme: str) -> None:
    """Switches the colour scheme the browser reports, and waits for the page to follow it."""
    page.emulate_media(color_scheme=theme)
    _settles(page, "t => document.documentElement.dataset.theme === t", True, theme)


def _view(page, name: str, width: int, theme: str, shots: pathlib.Path) -> dict:
    """What one view of the loaded page shows (see ``tour``), with its screenshot saved."""
    found = {
        "title": page.title(),
        "theme": page.evaluate("document.documentElement.dataset.theme"),
        "overflowing": page.evaluate(_OVERFLOWING),
        "widths": page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]"),
        "notebooks": page.locator('.dropdown-download-buttons a[href$=".ipynb"]')
                         .evaluate_all("links => links.map(a => a.getAttribute('href'))"),
    }
    phone_light = (theme, width) == ("light", PHONE)
    _screenshot(page, shots / f"{_stem(name)}-{width}-{theme}", whole=phone_light and WHOLE_PAGES)
    if phone_light:  # each table header, as a phone wraps it
        found["headers"] = page.evaluate(_HEADERS)
    return found


def _stem(name: str) -> str:
    return name.removesuffix(".html").replace("/", "_")


# Opens the article's folded code (as a reader would) and leaves in the page a function, rematFold,
# that folds it again, so that the next view's screenshot shows the page as it loads.
_UNFOLD = """() => { const folded = [...document.querySelectorAll('article details:not([open])')];
  folded.forEach(d => { d.open = true; });
  window.rematFold = () => folded.forEach(d => { d.open = false; }); }"""


def _tour_width(browser, base_url: str, pages: list[str], width: int, shots: pathlib.Path) -> dict:
    """The tour's records (see ``tour``) of every page at one width, in both themes.

    The browser's colour scheme stays as the last page left it: pages are seen light then
    dark and dark then light by turns, so that each page switches theme once (every
    switch styles the whole page again).
    """
    seen = {}
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme="light")
    context.add_init_script(_NO_TRANSITIONS)
    page = context.new_page()
    problems = []
    _record_problems(page, urllib.parse.urlsplit(base_url).netloc, problems)
    themes = ("light", "dark")
    for name in pages:
        page.goto(base_url + name, wait_until="load")
        for turn, theme in enumerate(themes):
            if turn:
                _in_theme(page, theme)
            found = seen[name, width, theme] = _view(page, name, width, theme, shots)
            if width == DESKTOP:  # the folded code too, opened as a reader would
                page.evaluate(_UNFOLD)
                found["code"] = page.evaluate(_WIDE_CODE)
                page.evaluate("window.rematFold()")
        # After both views, whose screenshots would otherwise show the menu button's tooltip.
        # The desktop width also waits for the network to go quiet, so that a late request
        # (off-site, or failing) is seen: between its two taps on the menu button, which it
        # would otherwise spend waiting for the sliding sidebar to stop.
        found["navigation"] = _open_navigation(
            page, width, shots / f"{_stem(name)}-{width}-nav",
            settle=lambda: page.wait_for_load_state("networkidle") if width == DESKTOP else None)
        themes = themes[::-1]
    seen["problems", width] = problems
    context.close()
    return seen


def _navigation(tour: dict, name: str, width: int) -> dict[str, bool]:
    """What the navigation buttons did on a page at one width, in the theme it was seen in last."""
    return next(tour[name, width, theme]["navigation"] for theme in ("light", "dark")
                if "navigation" in tour[name, width, theme])


def test_every_view_loads_cleanly_in_its_theme(tour, site_dir):
    for key, found in tour.items():
        if key[0] == "problems":
            assert found == [], key
        else:
            name, width, theme = key
            assert found["theme"] == theme, (name, width)


def test_the_navigation_buttons_open_and_close_the_sidebars(tour, site_dir):
    for name in _content_pages(site_dir):
        contents = {"secondary": True, "secondary closed": True}
        assert _navigation(tour, name, PHONE) == {
            "primary": True, "primary closed": True,
            **({} if name == "reference/api_index.html" else contents)}, name
        assert _navigation(tour, name, DESKTOP) == {"hidden": True, "shown again": True}, name


def test_no_output_or_table_needs_sideways_scrolling_at_desktop_width(tour, site_dir):
    overflowing = {(name, theme): tour[name, DESKTOP, theme]["overflowing"]
                   for name in _content_pages(site_dir) for theme in ("light", "dark")}
    assert {key: found for key, found in overflowing.items() if found} == {}


def test_no_code_line_runs_past_its_box_at_desktop_width(tour, site_dir):
    wide = {(name, theme): tour[name, DESKTOP, theme]["code"]
            for name in _content_pages(site_dir) for theme in ("light", "dark")}
    assert {key: found for key, found in wide.items() if found} == {}


def test_no_page_scrolls_sideways_at_phone_width(tour, site_dir):
    wider = {(name, theme): tour[name, PHONE, theme]["widths"]
             for name in _content_pages(site_dir) for theme in ("light", "dark")}
    assert {key: (scroll, client) for key, (scroll, client) in wider.items() if scroll > client} == {}


def test_wide_tables_scroll_inside_themselves_at_phone_width(view):
    counted = 0
    # choosing.html and choosing-programs.html, split off it: their tables together
    for name in ("choosing-programs.html", "choosing.html"):
        page = view(name, PHONE, "light")
        page_width = page.evaluate("document.documentElement.clientWidth")
        boxes = page.locator("article .remat-table-scroll")
        counted += boxes.count()
        for i in range(boxes.count()):
            box = boxes.nth(i)
            assert box.evaluate("el => getComputedStyle(el).overflowX") == "auto"
            assert box.evaluate("el => el.getBoundingClientRect().right") <= page_width
    assert counted >= 6
    # With every column shown, the transformer comparison is wider than a phone: it
    # scrolls inside its box, not the page.
    page.locator("article label.remat-all-columns input").first.check()
    widest = max(boxes.nth(i).evaluate("el => el.scrollWidth - el.clientWidth") for i in range(boxes.count()))
    assert widest > 0 and page.evaluate("document.documentElement.scrollWidth") <= page_width


def _close_up(element, site_dir: pathlib.Path, name: str) -> None:
    """Saves a screenshot of one element under _build/screenshots/details/."""
    details = site_dir.parent / "screenshots" / "details"
    details.mkdir(parents=True, exist_ok=True)
    element.screenshot(path=str(details / name), type="jpeg", quality=90)


def test_result_tables_are_html_tables_with_right_aligned_units(view, site_dir):
    page = view("choosing.html", DESKTOP, "light")
    table = page.locator("article table.remat-table", has_text="save_only_these_names('mlp_hidden')").first
    _close_up(table, site_dir, "choosing-transformer-table-1400-light.jpg")
    headers = table.locator("th").all_inner_texts()
    assert headers == ["policy", "residuals (MiB)", "XLA temp (MiB)", "true FLOPs (GFLOP)",
                       "XLA-reported FLOPs (GFLOP)", "FLOPs vs no checkpoint"]
    number = table.locator("td.num").first
    assert number.evaluate("el => getComputedStyle(el).textAlign") == "right"
    assert table.locator("td.num", has_text="×").count() == 11


def _contrast_of(element) -> float:
    """The WCAG contrast ratio of an element's text colour on its background colour."""
    return element.evaluate("""el => {
      const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
      const lum = ([r, g, b]) => {
        const f = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
      };
      const style = getComputedStyle(el);
      const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))];
      return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    }""")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_forward_backward_view_reads_in_both_themes(view, theme, site_dir):
    page = view("tutorial.html", DESKTOP, theme)
    _close_up(page.locator("article .remat-fwd-bwd").first, site_dir, f"tutorial-fwd-bwd-1400-{theme}.jpg")
    for mark in ("saved", "recomputed"):
        lines = page.locator(f"article .remat-fwd-bwd .remat-fb-code .remat-{mark}")
        assert lines.count() >= 1, mark
        assert _contrast_of(lines.first) >= 4.5, (theme, mark, _contrast_of(lines.first))
    for code in page.locator("article .remat-fb-code").all():
        assert code.evaluate("el => el.scrollWidth <= el.clientWidth + 1")


def test_forward_backward_halves_stack_on_a_phone(view):
    page = view("tutorial.html", PHONE, "light")
    halves = page.locator("article .remat-fwd-bwd .remat-fb-columns").first.locator(":scope > div")
    first, second = (halves.nth(i).bounding_box() for i in range(2))
    assert second["y"] >= first["y"] + first["height"] - 1  # one below the other


def test_plots_are_svg_and_follow_the_theme(view, site_dir):
    # choosing.html's two plots and the three of choosing-programs.html, split off it
    for name, plots in (("choosing.html", 2), ("choosing-programs.html", 3)):
        page = view(name, DESKTOP, "dark")
        images = page.locator("article div.cell_output img")
        assert images.count() >= plots, name
        for image in images.all():
            assert image.get_attribute("src").endswith(".svg")
            assert "invert" in image.evaluate("el => getComputedStyle(el).filter")
    assert not list(site_dir.glob("_images/*.png"))


def test_sidebar_groups_pages_under_captions_and_next_leads_to_the_guides(view):
    page = view("index.html", DESKTOP, "light")
    captions = page.locator(".bd-sidebar-primary p.caption").all_inner_texts()
    assert [c.strip() for c in captions] == ["Learn", "Guides", "Reference", "API"]
    page = view("exercise.html", DESKTOP, "light")
    assert page.locator("a.right-next").get_attribute("href") == "choosing.html"


def test_every_executed_page_offers_its_notebook_for_download(tour, site_dir):
    sources = site_dir / "_sources"
    executed = sorted(str(p.relative_to(sources))[:-3] + ".html" for p in sources.rglob("*.md")
                      if "file_format: mystnb" in p.read_text(encoding="utf-8"))
    assert "choosing.html" in executed and "index.html" in executed
    for name in _content_pages(site_dir):
        links = tour[name, DESKTOP, "light"]["notebooks"]
        if name not in executed:
            assert links == [], name
            continue
        assert len(links) == 1, name
        notebook_path = (site_dir / name).parent / links[0]
        assert notebook_path.resolve() == (sources / name).with_suffix(".ipynb").resolve(), name
        notebook = nbformat.read(notebook_path, as_version=4)
        nbformat.validate(notebook)
        assert any(cell.get("outputs") for cell in notebook.cells), name


def test_a_whole_page_screenshot_shows_the_page_from_top_to_bottom_in_parts(view, tmp_path, monkeypatch):
    # As `make test WHOLE_PAGES=1` saves them, with parts this short instead of a JPEG's most.
    monkeypatch.setattr(sys.modules[__name__], "_JPEG_HEIGHT", 4_000)
    page = view("index.html", PHONE, "light")
    width, height = page.evaluate("[document.documentElement.clientWidth, document.documentElement.scrollHeight]")
    _screenshot(page, tmp_path / "index", whole=True)
    parts = sorted(tmp_path.glob("*.jpg"), key=lambda path: (len(path.name), path.name))
    assert [path.name for path in parts][:2] == ["index.jpg", "index-2.jpg"]
    sizes = []
    for path in parts:
        with Image.open(path) as image:
            sizes.append(image.size)
    assert all(size[0] == width for size in sizes) and sum(size[1] for size in sizes) == height
    assert [size[1] for size in sizes[:-1]] == [4_000] * (len(sizes) - 1)


def test_screenshots_of_every_page_at_both_widths_in_both_themes(tour, site_dir):
    shots = {p.name: p.stat().st_size for p in (site_dir.parent / "screenshots").glob("*.jpg")}
    expected = {f"{_stem(name)}-{width}-{theme}"
                for name in _content_pages(site_dir) for width in (DESKTOP, PHONE)
                for theme in ("light", "dark")}
    expected |= {f"{_stem(name)}-{PHONE}-nav" for name in _content_pages(site_dir)}
    # A page taller than a JPEG can be comes in parts: <stem>.jpg, <stem>-2.jpg, ...
    assert {re.sub(r"-\d+\.jpg$|\.jpg$", "", name) for name in shots} == expected
    assert all(shots.values()), [name for name, size in shots.items() if not size]


# --- tables on a phone: the deciding columns show, the rest behind a switch (issue 42) --------

# The tables a phone still scrolls sideways (before its "all columns" switch), each as its
# page and the start of its text as shown at 390 px: a reference table whose label and
# deciding columns alone need more than 390 px would be listed here. Before issue 42, 126 of
# the site's 216 result tables scrolled (the issue counted 101 of 147); none does now.
_WIDE_AT_PHONE: set[tuple[str, str]] = set()


def test_tables_on_a_phone_fit_but_for_the_wide_reference_tables_listed(tour, site_dir):
    wide = set()
    for name in _content_pages(site_dir):
        for theme in ("light", "dark"):
            for found in tour[name, PHONE, theme]["overflowing"]:
                if found.startswith("DIV.remat-table-scroll"):
                    text = found.split(": ", 2)[2]
                    wide.add((name, next((h for page, h in _WIDE_AT_PHONE if page == name and text.startswith(h)),
                                         text)))
    assert wide == _WIDE_AT_PHONE


def test_the_policy_matrix_shows_its_deciding_column_on_a_phone_and_a_switch_shows_the_rest(view, site_dir):
    page = view("reference/policies.html", PHONE, "light")
    width = page.evaluate("document.documentElement.clientWidth")
    table = page.locator("article table.remat-matrix").first
    _close_up(table, site_dir, "policies-matrix-390-light.jpg")
    header = table.locator("thead th", has_text="other intermediates")
    assert header.is_visible() and header.evaluate("el => el.getBoundingClientRect().right") <= width
    box = table.locator("xpath=..")
    assert box.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
    cells = {}
    for policy in ("everything_saveable", "nothing_saveable"):
        row = table.locator("tbody tr", has_text=policy).first
        visible = [td.is_visible() for td in row.locator("td").all()]
        cells[policy] = [text for text, shown in zip(row.locator("td").all_inner_texts(), visible) if shown][1:]
    assert cells["everything_saveable"] != cells["nothing_saveable"], cells
    hidden = table.locator("th.remat-extra")
    assert hidden.count() >= 1 and not hidden.first.is_visible()
    switch = page.locator("label.remat-all-columns").first
    assert switch.is_visible()
    switch.click()
    assert hidden.first.is_visible()
    assert box.evaluate("el => getComputedStyle(el).overflowX") == "auto"
    page_desktop = view("reference/policies.html", DESKTOP, "light")
    assert not page_desktop.locator("label.remat-all-columns").first.is_visible()
    assert page_desktop.locator("article table.remat-matrix th.remat-extra").first.is_visible()


def test_table_numbers_show_at_most_four_significant_figures(site_dir):
    # Whole numbers (counts, bytes under 1 KiB) are exact; a number with a point has four
    # significant figures at most.
    long_numbers = {}
    for name in _content_pages(site_dir):
        text = (site_dir / name).read_text(encoding="utf-8")
        for cell in re.findall(r'<td class="[^"]*\bnum\b[^"]*" >([^<]*)</td>', text):
            if "." in cell and len(re.sub(r"[^0-9]", "", cell).lstrip("0")) > 4:
                long_numbers.setdefault(name, []).append(cell)
    assert long_numbers == {}


def test_the_quick_answer_starts_on_the_first_phone_screen(view):
    page = view("index.html", PHONE, "light")
    first = page.evaluate("""() => {
      const heading = [...document.querySelectorAll('article h2')]
        .find(h => h.textContent.startsWith('Quick answer'));
      const item = heading.closest('section').querySelector('li');
      const box = item.getBoundingClientRect();
      return {top: box.top + scrollY, line: parseFloat(getComputedStyle(item).lineHeight)};
    }""")
    # a phone's first screen (844 px tall at 390 px) shows the answer's first lines
    assert first["top"] + 2 * first["line"] < 844, first


# Each table header of the article at a phone's width: its text, whether it shows, its
# right edge, and whether its unit ("(GiB)", "(ms)", "(TFLOP)") sits on one line.
_HEADERS = r"""() => [...document.querySelectorAll('article table.remat-table thead th')].map(th => {
  const texts = [];
  const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) texts.push(node);
  const whole = texts.map(n => n.textContent).join('');
  let unitOnOneLine = true;
  const open = whole.lastIndexOf(' ('), close = whole.lastIndexOf(')');
  const unit = /^\((?:(?:[KMGTP]i)?B|bytes|[kMGTP]?FLOPs?|ms|µs|s)\)$/.test(whole.slice(open + 1, close + 1).trim());
  if (unit && close > open && th.getClientRects().length) {
    const at = i => { let start = 0;
      for (const node of texts) { const end = start + node.textContent.length;
        if (i < end) return [node, i - start]; start = end; } };
    const range = document.createRange();
    range.setStart(...at(open + 1));
    const [node, offset] = at(close);
    range.setEnd(node, offset + 1);
    unitOnOneLine = new Set([...range.getClientRects()].filter(r => r.width > 0)
                            .map(r => Math.round(r.top))).size === 1;
  }
  return {text: whole.trim(), shown: th.getClientRects().length > 0,
          right: th.getBoundingClientRect().right, unitOnOneLine};
})"""

# The column that decides, which a table folded for a phone must keep (issue 52): the
# measured peak, whether the step fits, the bytes a kernel or a listing keeps.
_DECIDING = {"fit-checked.html": ["H200 peak (GiB)"], "fit.html": ["fits"],
             "attention.html": ["Pallas kernel (MiB)", "bytes", "on host (MiB)"]}


@pytest.mark.parametrize("name", sorted(_DECIDING))
def test_folded_tables_keep_their_deciding_column_on_a_phone_with_units_whole(tour, name):
    seen = tour[name, PHONE, "light"]
    width, headers = seen["widths"][1], seen["headers"]
    for text in _DECIDING[name]:
        found = [h for h in headers if h["text"] == text]
        assert found, (text, sorted({h["text"] for h in headers}))
        assert all(h["shown"] and h["right"] <= width for h in found), (text, found)
    broken = [h["text"] for h in headers if not h["unitOnOneLine"]]
    assert broken == [], broken


def test_no_table_header_breaks_inside_its_unit_on_a_phone(tour, site_dir):
    broken = {}
    for name in _content_pages(site_dir):
        if found := [h["text"] for h in tour[name, PHONE, "light"]["headers"] if not h["unitOnOneLine"]]:
            broken[name] = found
    assert broken == {}
