"""Sphinx extension: every executed page offers its notebook, with outputs, in the download menu."""

from __future__ import annotations

import pathlib
import shutil
from typing import Any


def executed_notebook(outdir: str | pathlib.Path, pagename: str) -> pathlib.Path:
    """Where MyST-NB writes the executed notebook of a page (beside the HTML output folder).

    Args:
        outdir: The HTML builder's output folder.
        pagename: The page's name, such as ``"reference/policies"``.

    Returns:
        The path of ``<pagename>.ipynb`` in MyST-NB's ``jupyter_execute`` folder.

    Examples:
        >>> from remat_guide.notebook_downloads import executed_notebook
        >>> executed_notebook("_build/html", "reference/policies").as_posix()
        '_build/jupyter_execute/reference/policies.ipynb'
    """
    return pathlib.Path(outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"


def offer_notebook(app: Any, pagename: str, templatename: str, context: dict[str, Any],
                   doctree: Any) -> None:
    """Copies a page's executed notebook next to its sources and adds it to the download menu.

    sphinx-book-theme lists ``context["ipynb_source"]`` in its download menu (its own
    code sets it only when launch buttons are configured); this handler runs before the
    theme builds the menu.
    """
    notebook = executed_notebook(app.outdir, pagename)
    if doctree is None or not notebook.is_file():
        return
    target = pathlib.Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(notebook, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Any) -> dict[str, Any]:
    """Registers the handler (before sphinx-book-theme's, which runs at priority 501)."""
    app.connect("html-page-context", offer_notebook, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
