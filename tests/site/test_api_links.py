"""Every API name written as an inline literal in the prose of the built site links to its reference.

The rule is written out in the docstring of tests/api_link_checker.py.
"""

from api_link_checker import SPELLINGS, label_anchors, site_pages, unlinked_api_names


def test_every_label_the_rule_names_exists(site_dir):
    anchors = label_anchors(site_dir)
    assert sorted({label for label in SPELLINGS.values() if label.lower() not in anchors}) == []


def test_every_api_name_in_prose_links_to_its_reference(site_dir):
    anchors = label_anchors(site_dir)
    pages = site_pages(site_dir)
    assert any(p.name == "tutorial.html" for p in pages)
    problems = []
    for path in pages:
        page = path.relative_to(site_dir).as_posix()
        problems += unlinked_api_names(page, path.read_text(encoding="utf-8"), anchors)
    assert problems == []
