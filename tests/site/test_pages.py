"""The built site: every page shows the JAX version that ran it; the exercise shows its output."""

import re

import jax

from helpers import NOTEBOOK_PAGES, ROOT, page_text


def test_every_page_names_the_jax_version_that_ran_it(site_dir):
    pages = [p for p in site_dir.rglob("*.html") if p.relative_to(site_dir).parts[0] != "_static"]
    assert len(pages) >= len(NOTEBOOK_PAGES)
    for page in pages:
        assert f"produced at build time by JAX {jax.__version__}" in page.read_text(encoding="utf-8"), page


def test_exercise_page_shows_executed_residuals_and_grading(built_page):
    text = page_text(built_page("exercise.html"))
    # The vmap listings and the shipped solution both locate their matmuls in the one pipeline.
    assert text.count("dot_general at exercise.py:") == 4
    assert text.count("(pipeline)") >= 4
    assert "solution passes check_solution" in text
    assert "SolutionError: jax.checkpoint has no policy" in text
    assert "TypeError: 'str' object is not callable" in text


def test_exercise_page_hides_hints_and_solution(built_page):
    html = built_page("exercise.html")
    assert html.count('class="sd-summary-title') >= 3  # the hint dropdowns
    assert "Show the reference solution" in html


def test_every_page_offers_its_source_for_download(site_dir):
    for source in NOTEBOOK_PAGES + [ROOT / "docs" / "api.md"]:
        name = source.relative_to(ROOT / "docs").with_suffix(".html")
        html = (site_dir / name).read_text(encoding="utf-8")
        link = f'href="{"../" * (len(name.parts) - 1)}_sources/{name.with_suffix(".md").as_posix()}"'
        assert "btn-download-source-button" in html and link in html, name
        assert (site_dir / "_sources" / name.with_suffix(".md")).is_file()


# Markup that MyST renders when it is written right: seen in a page's text, it was not
# (a role inside backticks, a backtick pair left over). Code blocks and outputs (<pre>) are
# skipped: they may print such text on purpose.
UNRENDERED = re.compile(r"\{(?:glue(?::\w+)?|ref|doc|numref|func|class|meth|mod|attr|term|download|eq)\}|``"
                        r"|^```|^:::|\{code-cell\}", re.MULTILINE)


def unrendered_markup(page_html: str) -> list[str]:
    """Each piece of MyST markup left in a page's prose, with the words around it."""
    prose = re.sub(r"<(pre|script|style)\b.*?</\1>", "", page_html, flags=re.DOTALL)
    text = page_text(prose)
    return [text[max(0, m.start() - 40):m.end() + 20] for m in UNRENDERED.finditer(text)]


def test_unrendered_markup_is_found():
    broken = ('<p>its first equation is <code class="docutils literal"><span class="pre">{glue:md}'
              "</span></code>cr_opt_forward``, the primal</p>")
    assert len(unrendered_markup(broken)) == 2
    assert unrendered_markup("<p>see <a href='x'>the page</a></p><pre>``code``</pre>") == []


def test_no_page_shows_unrendered_markup(site_dir):
    for page in sorted(site_dir.rglob("*.html")):
        if page.relative_to(site_dir).parts[0] in ("_static", "_sources"):
            continue
        found = unrendered_markup(page.read_text(encoding="utf-8"))
        assert not found, f"{page.relative_to(site_dir)}: {found}"
