"""The built site holds nothing that changes from build to build: paths, addresses, timings, pids."""

import json

from stability_scan import scan_site, split_streams


def test_built_site_holds_nothing_that_changes_between_builds(site_dir):
    assert scan_site(site_dir) == {}


def test_every_cell_printed_its_text_in_one_piece(site_dir):
    executed = site_dir.parent / "jupyter_execute"
    notebooks = sorted(executed.rglob("*.ipynb"))
    assert notebooks, f"{executed} holds no executed notebook"
    report = {str(p.relative_to(executed)): split_streams(json.loads(p.read_text()))
              for p in notebooks}
    assert {page: cells for page, cells in report.items() if cells} == {}
