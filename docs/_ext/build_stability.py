"""A Sphinx extension so that a rebuild into an existing output folder writes what a clean build writes."""

from __future__ import annotations

import pathlib
from typing import Any

from myst_nb import sphinx_ext as myst_nb_sphinx
from sphinx.util.index_entries import split_index_msg

__all__ = ["index_entries_for_search", "pages_with_index_entries", "setup"]


def copy_mystnb_css_first(app: Any) -> None:
    """Puts myst-nb's stylesheet into the output folder before any page is written.

    Sphinx links a stylesheet as ``name.css?v=<checksum>`` when the file is already in the
    output folder while the page is written, and as ``name.css`` when it is not. myst-nb
    copies its stylesheet only when the build finishes, so a clean build wrote every page
    without ``?v=`` and the next build wrote the pages it rewrote (always ``genindex`` and
    ``search``) with it.
    """
    if app.builder.format != "html":
        return
    (pathlib.Path(app.builder.outdir) / "_static").mkdir(parents=True, exist_ok=True)
    myst_nb_sphinx.add_global_html_resources(app, None)


def pages_with_index_entries(env: Any) -> list[str]:
    """The documents that hold general-index entries (autodoc descriptions, ``index`` directives).

    Args:
        env: A Sphinx build environment.

    Returns:
        Their docnames, sorted.

    Examples:
        >>> from types import SimpleNamespace
        >>> from build_stability import pages_with_index_entries
        >>> index = SimpleNamespace(entries={"api": [("single", "f()", "f", "", None)], "tutorial": []})
        >>> pages_with_index_entries(SimpleNamespace(domains=SimpleNamespace(index_domain=index)))
        ['api']
    """
    return sorted(docname for docname, entries in env.domains.index_domain.entries.items() if entries)


def index_entries_for_search(entries: list[tuple[str, str, str, str, Any]]) -> list[tuple[str, str, str]]:
    """The search index's entries of one document, from its entries in the general index.

    The same conversion as Sphinx 9's ``IndexBuilder.feed`` applies to a document's
    ``index`` nodes.

    Args:
        entries: A document's entries in the ``index`` domain:
            ``(entry_type, value, target_id, main, category_key)`` tuples.

    Returns:
        ``(term, target_id, main)`` tuples, sorted.

    Examples:
        >>> from build_stability import index_entries_for_search
        >>> index_entries_for_search([("single", "f() (in module m)", "m.f", "", None)])
        [('f() (in module m)', 'm.f', '')]
    """
    collected: set[tuple[str, str, str]] = set()
    for entry_type, value, target_id, main, _category in entries:
        try:
            terms = split_index_msg(entry_type, value)
        except ValueError:
            continue
        if entry_type in {"see", "seealso"}:
            collected.add((terms[0], target_id or "", main))
        collected |= {(term, target_id or "", main) for term in terms}
    return sorted(collected)


def restore_index_entries(app: Any) -> None:
    """Gives the search index the entries of the documents this build did not rewrite.

    Sphinx 9 rebuilds ``searchindex.js`` from the documents it writes plus the previous
    ``searchindex.js``, and loading that file does not restore its index entries: after a
    rebuild that did not rewrite ``api``, the search index had no ``indexentries`` at all.
    The general index still holds every document's entries, so they are taken from there.
    """
    indexer = getattr(app.builder, "indexer", None)
    if indexer is None:
        return
    for docname in pages_with_index_entries(app.env):
        if docname not in indexer._index_entries:
            indexer._index_entries[docname] = index_entries_for_search(
                app.env.domains.index_domain.entries[docname])


def complete_search_index(app: Any) -> list[tuple[str, dict[str, Any], str]]:
    """Restores the index entries (:func:`restore_index_entries`) and drops emptied words.

    Runs on ``html-collect-pages``, just before Sphinx writes the index; adds no page.
    Removing the words is the second fix: on a rebuild Sphinx removes the rewritten
    documents from each word's set of documents but keeps a word whose set became empty,
    which ``searchindex.js`` then lists as ``"word": []`` and a clean build never writes.
    """
    restore_index_entries(app)
    indexer = getattr(app.builder, "indexer", None)
    if indexer is not None:
        for mapping in (indexer._mapping, indexer._title_mapping):
            for word in [word for word, docnames in mapping.items() if not docnames]:
                del mapping[word]
    return []


def setup(app: Any) -> dict[str, Any]:
    """Register the three fixes with Sphinx."""
    app.connect("builder-inited", copy_mystnb_css_first)
    app.connect("html-collect-pages", complete_search_index)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
