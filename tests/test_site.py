"""The built site: every page exists, shows the JAX version and executed output, and is stable."""

import html as html_lib
import os
import pathlib
import re

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SITE = ROOT / os.environ.get("REMAT_GUIDE_SITE", "_build/html")
PAGES = ["index.html", "exercise.html", "api.html"]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    missing = [p for p in PAGES if not (SITE / p).is_file()]
    assert not missing, f"{missing} not built: run `make html` (make test does it first)"
    return {p: (SITE / p).read_text(encoding="utf-8") for p in PAGES}


def _text(html: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", html))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_names_the_jax_version_that_ran_it(pages, page):
    assert f"produced at build time by JAX {jax.__version__}" in pages[page]


def test_exercise_page_shows_executed_residuals_and_grading(pages):
    text = _text(pages["exercise.html"])
    assert text.count("dot_general at exercise.py:") == 2
    assert "solution passes check_solution" in text
    assert "SolutionError: jax.checkpoint has no policy" in text
    assert "TypeError: 'str' object is not callable" in text


def test_exercise_page_hides_hints_and_solution(pages):
    html = pages["exercise.html"]
    assert html.count('class="sd-summary-title') >= 3  # the hint dropdowns
    assert "Show the reference solution" in html


@pytest.mark.parametrize("page", PAGES)
def test_pages_hold_nothing_that_changes_between_builds(pages, page):
    html = pages[page]
    repo = str(ROOT)
    assert repo not in html
    assert not re.search(r"ipykernel_\d+", html)
    assert not re.search(r"\bat 0x[0-9a-f]{6,}", html)
