"""Page sources: the page_setup cell first, a teaching cell first in sight, set-up hidden, short lines."""

import ast
import re

import nbformat
import pytest
from myst_nb.core.read import read_myst_markdown_notebook

from helpers import NOTEBOOK_PAGES, ROOT


@pytest.mark.parametrize("source", NOTEBOOK_PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_executed_page_starts_with_page_setup(source):
    notebook = read_myst_markdown_notebook(source.read_text(encoding="utf-8"))
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assert first.source.strip() == "%load_ext remat_guide.site.page_setup"
    assert first.metadata.get("tags") == ["remove-cell"]


_OUT_OF_SIGHT = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
# Code lines fit the code box of a page at 1400 px (about 92 characters of the theme's font).
MAX_CODE_LINE = 88


def _visible_code_cells(source):
    notebook = read_myst_markdown_notebook(source.read_text(encoding="utf-8"))
    return [cell for cell in notebook.cells if cell.cell_type == "code"
            and not _OUT_OF_SIGHT & set(cell.metadata.get("tags", []))]


def _set_up(node: ast.stmt) -> bool:
    """Whether a statement only prepares: an import, a published value, a version print."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    call = node.value if isinstance(node, ast.Expr) else None
    if not isinstance(call, ast.Call):
        return False
    name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
    return name in {"glue", "claim", "update"} or (
        name == "print" and "__version__" in ast.unparse(call))


def _unused_imports(tree: ast.Module) -> list[str]:
    imported = [(alias.asname or alias.name).split(".")[0] for node in tree.body
                if isinstance(node, ast.Import | ast.ImportFrom) for alias in node.names]
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return [name for name in imported if name not in used]


@pytest.mark.parametrize("source", NOTEBOOK_PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_a_readers_first_code_cell_teaches(source):
    """The first cell in sight does something, and imports only what it uses itself."""
    visible = _visible_code_cells(source) or [nbformat.v4.new_code_cell("pass  # shows no code")]
    tree = ast.parse(visible[0].source)
    assert not all(_set_up(node) for node in tree.body), visible[0].source
    assert _unused_imports(tree) == [], visible[0].source


@pytest.mark.parametrize("source", NOTEBOOK_PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_glue_and_claims_stay_out_of_sight(source):
    shown = [cell.source for cell in _visible_code_cells(source)
             if re.search(r"(^|[^\w.])(glue|claim)\(", cell.source)]
    assert shown == []


@pytest.mark.parametrize("source", NOTEBOOK_PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_code_lines_fit_the_code_box(source):
    notebook = read_myst_markdown_notebook(source.read_text(encoding="utf-8"))
    long = [line for cell in notebook.cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if len(line) > MAX_CODE_LINE]
    assert long == []
