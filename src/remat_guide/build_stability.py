"""A Sphinx extension so that a rebuild into an existing output folder writes what a clean build writes."""

from __future__ import annotations

import pathlib
from typing import Any

from myst_nb import sphinx_ext as myst_nb_sphinx

__all__ = ["pages_with_index_entries", "setup"]


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
        >>> from remat_guide.build_stability import pages_with_index_entries
        >>> index = SimpleNamespace(entries={"api": [("single", "f()", "f", "", None)], "tutorial": []})
        >>> pages_with_index_entries(SimpleNamespace(domains=SimpleNamespace(index_domain=index)))
        ['api']
    """
    return sorted(docname for docname, entries in env.domains.index_domain.entries.items() if entries)


def reread_pages_with_index_entries(app: Any, env: Any, added: set[str], changed: set[str],
                                    removed: set[str]) -> list[str]:
    """Has Sphinx read again every document with index entries, on every build.

    Sphinx 9 rebuilds ``searchindex.js`` from the documents it writes plus what it loads
    from the previous ``searchindex.js``, and loading drops the index entries: after a
    rebuild that did not rewrite ``api``, the search index had no ``indexentries`` at all.
    Rewriting those documents each time feeds their entries again.
    """
    return [docname for docname in pages_with_index_entries(env)
            if docname not in added | changed | removed]


def drop_emptied_search_terms(app: Any) -> list[tuple[str, dict[str, Any], str]]:
    """Removes the words that no document contains any more from the search index.

    On a rebuild Sphinx 9 loads the previous ``searchindex.js`` and removes the rewritten
    documents from each word's set of documents, but keeps a word whose set became empty:
    ``searchindex.js`` then lists it as ``"word": []``, which a clean build never writes.
    Runs on ``html-collect-pages``, just before Sphinx writes the index; adds no page.
    """
    indexer = getattr(app.builder, "indexer", None)
    if indexer is not None:
        for mapping in (indexer._mapping, indexer._title_mapping):
            for word in [word for word, docnames in mapping.items() if not docnames]:
                del mapping[word]
    return []


def setup(app: Any) -> dict[str, Any]:
    """Register the three fixes with Sphinx."""
    app.connect("builder-inited", copy_mystnb_css_first)
    app.connect("env-get-outdated", reread_pages_with_index_entries)
    app.connect("html-collect-pages", drop_emptied_search_terms)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
