"""The built "What changed across versions" page shows the probe's results for the three versions."""

import re

from helpers import page_text


def test_versions_page_compares_the_three_versions_on_the_cpu(built_page):
    html = built_page("versions.html")
    text = page_text(html)
    for version in ("0.10.2", "0.11.2", "0.12.0.1"):
        assert f"JAX {version}, jaxlib {version}" in text
    assert text.count("backend: cpu") == 3
    assert html.count('class="remat-table remat-versions"') >= 5
    assert 'remat-changed" >yes</td>' in html
    # What each policy saves, with and without jax_remat3, and the listing format: split off.
    residuals = built_page("versions-residuals.html")
    assert residuals.count('class="remat-table remat-versions"') >= 4
    assert 'remat-changed" >yes</td>' in residuals
    assert 'href="versions-residuals.html"' in html and 'href="versions.html"' in residuals


def test_versions_page_opens_with_the_summary_of_what_changed(built_page):
    text = " ".join(page_text(built_page("versions.html")).split())
    first = text.index("0.10.2 → 0.11.2")
    assert first < text.index("0.11.2 → 0.12.0.1") < text.index("The list is made from the tables below")
    assert "Gone: parameter concrete of jax.checkpoint and jax.remat" in text


def test_versions_page_shows_the_differences_it_describes(built_page):
    html = built_page("versions.html")
    text = " ".join(page_text(html).split())
    # concrete: NotImplementedError in 0.10.2, unknown keyword afterwards. The cells name the
    # exception; the notes under the table hold the messages.
    assert re.search(r'<code>Not<wbr>Implemented<wbr>Error</code> <a href="#versions-note-\w+-1">\[1\]</a>', html)
    assert "NotImplementedError: The `concrete` option" in text
    assert "TypeError: checkpoint() got an unexpected keyword argument 'concrete'" in text
    # The dot policies: class instances, then functions.
    assert "instance of DotsSaveable" in text
    # The exports and the remat3 call-time switch.
    assert "Primitive" in text and "checkpoint_name_fwd" in text
    assert "primitive (decorated off, called on)" in " ".join(page_text(built_page("versions-residuals.html")).split())
    # Glued counts made it into the prose.
    assert "holds 12 names in 0.10.2, 15 in 0.11.2 and 12 in 0.12.0.1" in text


def test_versions_page_says_what_to_change_when_upgrading_before_the_tables(built_page):
    html = built_page("versions.html")
    text = " ".join(page_text(html).split())
    last = text[text.index("Upgrading to 0.12#"):]  # the heading, not its mentions in the menus
    assert last.index("Nothing else needs to change") < last.index("The parameters of jax.checkpoint#")
    assert "Nothing else needs to change" in last
    for item in ("From 0.11.2: Policy classes: replace SaveAndOffloadOnlyTheseNames(...) by "
                 "save_and_offload_only_these_names(...)",
                 "From 0.10.2 and 0.11.2: No type checks on policies",
                 "From 0.11.2: jax.custom_remat",
                 "From 0.10.2 and 0.11.2: jax_remat3 is read at each call",
                 "From 0.10.2: Remove concrete",
                 "From 0.10.2: Residual listings of tanh"):
        assert item in last, item
    assert 'href="#versions-upgrade"' in html  # the opening points to it
