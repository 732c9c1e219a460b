"""Sphinx extension: every executed page offers its notebook, with outputs, in the download menu."""

from __future__ import annotations

import pathlib
from typing import Any

import jupyter_cache
import nbformat

_GLUE_PREFIX = "application/papermill.record/"


def executed_notebook(outdir: str | pathlib.Path, pagename: str) -> pathlib.Path:
    """Where MyST-NB writes the executed notebook of a page (beside the HTML output folder).

    Args:
        outdir: The HTML builder's output folder.
        pagename: The page's name, such as ``"reference/policies"``.

    Returns:
        The path of ``<pagename>.ipynb`` in MyST-NB's ``jupyter_execute`` folder.

    Examples:
        >>> from notebook_downloads import executed_notebook
        >>> executed_notebook("_build/html", "reference/policies").as_posix()
        '_build/jupyter_execute/reference/policies.ipynb'
    """
    return pathlib.Path(outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"


def _with_outputs(path: pathlib.Path, cache_path: pathlib.Path) -> nbformat.NotebookNode:
    """The page's notebook with the outputs of its executed copy in jupyter-cache.

    MyST-NB writes the notebook of a page it executed with its outputs, but the notebook
    of a page it took from the cache without them; both come from the cache here, so a
    download is the same however the page was built. Glue records (values the prose
    quotes, which no notebook viewer shows) are left out, and cells are numbered.
    """
    notebook = nbformat.read(path, as_version=4)
    _, notebook = jupyter_cache.get_cache(str(cache_path)).merge_match_into_notebook(notebook)
    for number, cell in enumerate(notebook.cells):
        cell.id = f"cell-{number}"  # MyST-NB draws random ids; these are the same on every build
        if cell.cell_type == "code":
            cell.outputs = [out for out in cell.outputs if not any(
                key.startswith(_GLUE_PREFIX) for key in out.get("data", {}))]
    return notebook


def offer_notebook(app: Any, pagename: str, templatename: str, context: dict[str, Any],
                   doctree: Any) -> None:
    """Writes a page's executed notebook next to its sources and adds it to the download menu.

    sphinx-book-theme lists ``context["ipynb_source"]`` in its download menu (its own
    code sets it only when launch buttons are configured); this handler runs before the
    theme builds the menu.
    """
    notebook = executed_notebook(app.outdir, pagename)
    if doctree is None or not notebook.is_file():
        return
    cache_path = (app.env.mystnb_config.execution_cache_path
                  or pathlib.Path(app.outdir).parent / ".jupyter_cache")
    target = pathlib.Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(_with_outputs(notebook, pathlib.Path(cache_path)), target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def create_cache(app: Any) -> None:
    """Creates jupyter-cache's database before the pages are read.

    MyST-NB opens it on first use; in a parallel build (``-j``) with no cache yet, two
    workers could both create its tables, and one fails with "table settings already exists".
    """
    if app.builder.format != "html":
        return
    jupyter_cache.get_cache(app.env.mystnb_config.execution_cache_path).db  # the property creates it


def setup(app: Any) -> dict[str, Any]:
    """Registers the handlers (the page's before sphinx-book-theme's, which runs at priority 501)."""
    app.connect("builder-inited", create_cache, priority=900)  # after MyST-NB sets the cache's path
    app.connect("html-page-context", offer_notebook, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
