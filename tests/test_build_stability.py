"""The build_stability extension: which pages it has Sphinx read again, and what the built site shows."""

import json
import re
from types import SimpleNamespace

from remat_guide.build_stability import drop_emptied_search_terms, reread_pages_with_index_entries


def _env(entries):
    return SimpleNamespace(domains=SimpleNamespace(index_domain=SimpleNamespace(entries=entries)))


def test_pages_with_index_entries_are_read_again_unless_already_outdated():
    env = _env({"api": [("single", "f()", "f", "", None)], "reference/x": [("single", "g", "g", "", None)],
                "tutorial": []})
    assert reread_pages_with_index_entries(None, env, set(), set(), set()) == ["api", "reference/x"]
    assert reread_pages_with_index_entries(None, env, set(), {"api"}, set()) == ["reference/x"]
    assert reread_pages_with_index_entries(None, env, set(), set(), {"reference/x"}) == ["api"]


def test_every_page_links_each_stylesheet_with_its_checksum(site_dir):
    pages = [p for p in site_dir.rglob("*.html") if "_static" not in p.parts]
    for page in pages:
        links = re.findall(r'href="([^"]*_static/[^"]*\.css[^"]*)"', page.read_text(encoding="utf-8"))
        assert links and all(re.search(r"\?(v|digest)=", link) for link in links), (page, links)


def test_search_index_holds_the_api_index_entries(site_dir):
    text = (site_dir / "searchindex.js").read_text(encoding="utf-8")
    entries = json.loads(text[text.index("(") + 1:text.rindex(")")])["indexentries"]
    assert any(key.startswith("saved_residuals()") for key in entries), sorted(entries)[:5]


def test_words_that_no_document_contains_are_dropped_from_the_search_index():
    indexer = SimpleNamespace(_mapping={"kept": {"api"}, "gone": set()},
                              _title_mapping={"title": {"index"}, "stale": set()})
    app = SimpleNamespace(builder=SimpleNamespace(indexer=indexer))
    assert drop_emptied_search_terms(app) == []
    assert indexer._mapping == {"kept": {"api"}} and indexer._title_mapping == {"title": {"index"}}
