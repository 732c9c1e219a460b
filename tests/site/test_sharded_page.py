"""The built sharded page: the set-up shows no error; the too-late device request is a visible, tagged cell."""

import re

from helpers import page_text


def test_no_error_output_under_a_folded_cell_and_the_late_request_is_shown(built_page):
    html = built_page("sharded.html")
    cells = re.split(r'(?=<div class="cell[ "])', html)[1:]
    folded = [cell for cell in cells if "tag_hide-input" in cell.split(">", 1)[0]]
    assert folded and not any("Error" in page_text(cell) for cell in folded)
    raising = [cell for cell in cells if "tag_raises-exception" in cell.split(">", 1)[0]]
    assert len(raising) == 1
    shown = page_text(raising[0])
    assert "devices now: 8" in shown
    assert "RuntimeError" in shown and "before backends are initialized" in shown
