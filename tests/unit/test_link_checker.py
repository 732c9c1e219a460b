"""The link checker names a missing file and a missing anchor, and leaves external links alone."""

from link_checker import broken_links


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
