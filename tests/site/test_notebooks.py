"""The notebooks offered for download are valid, hold their outputs, and run top to bottom again."""

import nbformat
import pytest
from nbclient import NotebookClient


def _printed(notebook: nbformat.NotebookNode) -> list[str]:
    """The printed text of each code cell, in order."""
    return ["".join(out.get("text", "") for out in cell.get("outputs", []) if out.output_type == "stream")
            for cell in notebook.cells if cell.cell_type == "code"]


def test_every_downloadable_notebook_is_valid_and_executed(site_dir):
    notebooks = sorted((site_dir / "_sources").rglob("*.ipynb"))
    assert len(notebooks) >= 10
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert code[0].source.strip().startswith("%load_ext remat_guide.site.page_setup"), path
        assert all(cell.execution_count for cell in code), path


@pytest.mark.parametrize("name", ["index", "exercise"])
def test_downloaded_notebook_runs_top_to_bottom_with_the_same_printed_output(site_dir, name):
    path = site_dir / "_sources" / f"{name}.ipynb"
    downloaded = nbformat.read(path, as_version=4)
    rerun = nbformat.read(path, as_version=4)
    # Cells tagged raises-exception may fail; any other error fails the run.
    NotebookClient(rerun, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    assert _printed(rerun) == _printed(downloaded)
