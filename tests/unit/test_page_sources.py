"""Every page that runs as a notebook starts with the page_setup extension, in a cell the site hides."""

import pytest
from myst_nb.core.read import read_myst_markdown_notebook

from helpers import NOTEBOOK_PAGES, ROOT


@pytest.mark.parametrize("source", NOTEBOOK_PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_executed_page_starts_with_page_setup(source):
    notebook = read_myst_markdown_notebook(source.read_text(encoding="utf-8"))
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    assert first.source.strip() == "%load_ext remat_guide.site.page_setup"
    assert first.metadata.get("tags") == ["remove-cell"]
