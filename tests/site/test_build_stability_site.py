"""What the build_stability extension leaves in the built site: checksummed stylesheets, the API index in search."""

import json
import re


def test_every_page_links_each_stylesheet_with_its_checksum(site_dir):
    pages = [p for p in site_dir.rglob("*.html") if "_static" not in p.parts]
    for page in pages:
        links = re.findall(r'href="([^"]*_static/[^"]*\.css[^"]*)"', page.read_text(encoding="utf-8"))
        assert links and all(re.search(r"\?(v|digest)=", link) for link in links), (page, links)


def test_search_index_holds_the_api_index_entries(site_dir):
    text = (site_dir / "searchindex.js").read_text(encoding="utf-8")
    entries = json.loads(text[text.index("(") + 1:text.rindex(")")])["indexentries"]
    assert any(key.startswith("saved_residuals()") for key in entries), sorted(entries)[:5]
