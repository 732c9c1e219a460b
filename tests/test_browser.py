"""The built site in a real browser: Playwright drives a local Chromium against 127.0.0.1."""

import functools
import http.server
import os
import pathlib
import shutil
import threading
import urllib.parse

import pytest
from playwright.sync_api import sync_playwright

# Chromium must not reach out on its own: this machine has no network but the loopback.
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def _chromium() -> str:
    for name in (os.environ.get("REMAT_GUIDE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    raise AssertionError("no Chromium found: `make test` installs one (Debian: apt-get install chromium)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class names it so)
        pass


@pytest.fixture(scope="module")
def base_url(site_dir):
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_chromium(), args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def _cancelled_favicon(request) -> bool:
    # Chromium asks for the favicon after the page has loaded, and going on to the next
    # page cancels that request: the browser's doing, not the site's.
    return request.url.endswith("/_static/favicon.svg") and request.failure == "net::ERR_ABORTED"


@pytest.fixture
def page(browser, base_url):
    context = browser.new_context(
        permissions=["clipboard-read", "clipboard-write"], viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.problems = []
    host = urllib.parse.urlsplit(base_url).netloc
    page.on("console", lambda m: m.type == "error" and page.problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: page.problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: not _cancelled_favicon(r)
            and page.problems.append(f"failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and page.problems.append(f"HTTP {r.status}: {r.url}"))
    page.on("request", lambda r: urllib.parse.urlsplit(r.url).netloc not in ("", host)
            and page.problems.append(f"off-site request: {r.url}"))
    yield page
    context.close()


def _pages(site_dir: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(site_dir)) for p in site_dir.rglob("*.html")
                  if p.relative_to(site_dir).parts[0] not in ("_static", "_sources"))


def test_every_page_loads_cleanly_from_the_site_alone(page, base_url, site_dir):
    pages = _pages(site_dir)
    assert {"index.html", "exercise.html", "search.html"} <= set(pages)
    for name in pages:
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
    shots = site_dir.parent / "screenshots"
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / "exercise.png"), full_page=True)
    page.goto(base_url + "index.html", wait_until="networkidle")
    page.screenshot(path=str(shots / "index.png"), full_page=True)
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
