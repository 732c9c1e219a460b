"""Shared fixtures and helpers for the checks of the built site."""

import html
import html.parser
import os
import pathlib
import re
from collections.abc import Callable

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


@pytest.fixture(scope="session")
def site_dir() -> pathlib.Path:
    """The built site: $REMAT_GUIDE_SITE (relative to the checkout), by default _build/html."""
    site = ROOT / os.environ.get("REMAT_GUIDE_SITE", "_build/html")
    assert (site / "index.html").is_file(), f"{site} holds no built site: run `make html` first"
    return site


@pytest.fixture(scope="session")
def built_page(site_dir: pathlib.Path) -> Callable[[str], str]:
    """Reads a built page by its path in the site, such as ``"reference/policies.html"``."""

    def read(name: str) -> str:
        path = site_dir / name
        assert path.is_file(), f"{path} was not built"
        return path.read_text(encoding="utf-8")

    return read


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks every test that reads the built site, so `make test-unit` can leave them out."""
    for item in items:
        if "site_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.site)
