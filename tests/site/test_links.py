"""Every internal link of the built site points at a file that exists and an anchor in it."""

from link_checker import broken_links


def test_no_broken_internal_link_or_anchor(site_dir):
    assert broken_links(site_dir) == []
