"""Every internal link of the built site points at a file that exists and an anchor in it."""

import html.parser
import pathlib
import urllib.parse


class _LinksAndIds(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])
        for attr in ("href", "src"):
            if values.get(attr) and not (tag == "link" and values.get("rel") == "canonical"):
                self.links.append(values[attr])


def _parse(path: pathlib.Path) -> _LinksAndIds:
    parser = _LinksAndIds()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def broken_links(site: pathlib.Path) -> list[str]:
    """'page: link (reason)' for each internal link whose file or anchor is missing."""
    pages = [p for p in site.rglob("*.html") if p.relative_to(site).parts[0] != "_static"]
    parsed = {p: _parse(p) for p in pages}
    problems = []
    for page, info in sorted(parsed.items()):
        for link in info.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(site)}: {link}"
            if not target.is_file():
                problems.append(f"{where} (no such file)")
            elif url.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if urllib.parse.unquote(url.fragment) not in ids:
                    problems.append(f"{where} (no such anchor)")
    return problems


def test_no_broken_internal_link_or_anchor(site_dir):
    assert broken_links(site_dir) == []


def test_checker_finds_planted_breakage(tmp_path):
    (tmp_path / "index.html").write_text(
        '<h1 id="top">t</h1><a href="#top">ok</a><a href="#gone">bad anchor</a>'
        '<a href="missing.html">bad file</a><a href="https://example.org/x">external</a>'
        '<img src="_static/logo.png"><a href="other.html#here">ok</a>')
    (tmp_path / "other.html").write_text('<p id="here"></p>')
    assert broken_links(tmp_path) == [
        "index.html: #gone (no such anchor)",
        "index.html: missing.html (no such file)",
        "index.html: _static/logo.png (no such file)",
    ]
