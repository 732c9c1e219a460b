"""Plain helpers shared by the tests: the checkout, its notebook pages, and the text and tables of a built page."""

import html
import html.parser
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The sources of the pages that run as notebooks.
NOTEBOOK_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md")
                        if "file_format: mystnb" in p.read_text(encoding="utf-8"))


def page_text(page_html: str) -> str:
    """The text of a page with its tags removed and its entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


class _Tables(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page_html: str) -> list[list[list[str]]]:
    """Every table of a page as rows of cell texts, the header row first."""
    parser = _Tables()
    parser.feed(page_html)
    return parser.tables


def table_with(page_html: str, *headers: str) -> list[dict[str, str]]:
    """The rows of the one table whose header row starts with ``headers``, as dicts."""
    found = [rows for rows in html_tables(page_html) if rows and rows[0][:len(headers)] == list(headers)]
    assert len(found) == 1, f"{len(found)} tables with the headers {headers}"
    header, *body = found[0]
    return [dict(zip(header, row)) for row in body]
