"""Finds the internal links of a built site whose file or anchor is missing."""

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
