"""Numbers in the prose of the built site: human units, at most four significant figures.

Prose and summaries quote figures as a reader takes them in (``1.047 GiB``, ``0.503``);
exact values (``1,124,073,472`` bytes, ``0.5033236742019653``) belong in the tables about
bytes and in the outputs, which this scan leaves alone.
"""

import re

from bs4 import BeautifulSoup

SIGNIFICANT = 4

# A number as prose writes it: digits with thousands commas, a decimal part, an exponent.
_NUMBER = re.compile(r"(?<![\w.])[-−]?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:[eE][-+−]?\d+)?(?![\w.]*\d)")
# Versions and dotted identifiers (0.12.0.1, 3.1, jax 0.11.2) are names, not figures: any
# run of digits joined by two or more dots, and a number right after a version's word.
_DOTTED = re.compile(r"\d+(?:\.\d+){2,}")
_VERSIONED = re.compile(r"(?:JAX|jax|jaxlib|Python|CUDA|cuDNN|libtpu|Llama|Llama 3|PCIe Gen|driver)\s*$")
# A power of two is a shape (tokens, a width, a batch) unless a byte unit follows it.
_BYTE_UNIT = re.compile(r"\s*(?:bytes?|B|KiB|MiB|GiB|TiB|KB|MB|GB)\b")


def significant_figures(number: str) -> int:
    """The significant figures of a number as written: ``0.0503`` has 3, ``8,192`` 4, ``65,536`` 5.

    Leading zeros never count, nor an integer's trailing zeros (``1,000,000`` has 1).
    """
    mantissa = re.split(r"[eE]", number.lstrip("-−"))[0].replace(",", "")
    whole, _, fraction = mantissa.partition(".")
    if fraction:
        return len((whole + fraction).lstrip("0")) or 1
    return len(whole.strip("0")) or 1


def _power_of_two(number: str) -> bool:
    digits = number.replace(",", "")
    return digits.isdigit() and int(digits) > 0 and int(digits) & (int(digits) - 1) == 0


def _prose(soup: BeautifulSoup) -> list[str]:
    """The text of the article's paragraphs and list items: no code, table, output or math."""
    article = soup.find("article") or soup
    for tag in article.select("pre, code, table, div.cell_output, div.output, .math, .sig, "
                              "div.remat-table-block, script, style, .MathJax"):
        tag.decompose()
    blocks = []
    for tag in article.find_all(["p", "li", "dt", "dd", "caption", "figcaption"]):
        if tag.find(["p", "li"]):  # the innermost blocks only, so that none counts twice
            continue
        blocks.append(" ".join(tag.get_text(" ").split()))
    return blocks


def long_numbers(page_html: str) -> list[str]:
    """Each number in a page's prose with more than four significant figures, with its words."""
    found = []
    for text in _prose(BeautifulSoup(page_html, "html.parser")):
        names = [m.span() for m in _DOTTED.finditer(text)]
        for match in _NUMBER.finditer(text):
            start, end = match.span()
            if any(a <= start < b for a, b in names) or _VERSIONED.search(text[:start]):
                continue
            if _power_of_two(match.group()) and not _BYTE_UNIT.match(text, end):
                continue
            if significant_figures(match.group()) > SIGNIFICANT:
                found.append(text[max(0, start - 40):end + 20])
    return found


def test_significant_figures_are_counted_as_written():
    assert [significant_figures(n) for n in ("0.0503", "8,192", "65,536", "1,000,000", "2026",
                                             "0.5033236742019653", "1.047", "-3.999744", "4.0")] == [
        3, 4, 5, 1, 4, 16, 4, 7, 2]


def test_long_numbers_are_found_in_prose_only():
    page = ("<article><p>It keeps 1,124,073,472 bytes, 1.047 GiB, on JAX 0.12.0.1 (jax 0.11.2).</p>"
            "<p>A ratio of 0.5033236742019653 and <code>x = 123456789</code>.</p>"
            "<table><tr><td>1,124,073,472</td></tr></table>"
            "<div class='cell_output'><pre>optimal_seconds = -3.999744</pre></div>"
            "<ul><li>8192 tokens, 32,768 tokens, 16384 KiB, 65537 steps, in 2026</li></ul>"
            "<dl><dt class='sig'>limit = 65536, theta = 500000.0</dt></dl></article>")
    found = long_numbers(page)
    assert len(found) == 4, found
    assert "1,124,073,472" in found[0] and "0.5033236742019653" in found[1]
    assert "16384 KiB" in found[2] and "65537" in found[3]


def test_no_page_quotes_a_number_of_more_than_four_significant_figures_in_its_prose(site_dir):
    found = {}
    for page in sorted(site_dir.rglob("*.html")):
        name = page.relative_to(site_dir)
        if name.parts[0] in ("_static", "_sources", "_modules") or name.name in ("genindex.html", "search.html"):
            continue
        numbers = long_numbers(page.read_text(encoding="utf-8"))
        if numbers:
            found[str(name)] = numbers
    assert found == {}, "\n".join(f"{page}: {numbers}" for page, numbers in found.items())
