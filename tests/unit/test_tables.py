"""Table's units: different values never read the same, in text or HTML."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from remat_guide import PolicyRow, policy_table
from remat_guide.tables import Table


def column_cells(table: Table) -> list[str]:
    """The cells of a one-column table's text rendering."""
    return [line.strip() for line in str(table).splitlines()[2:]]


def html_cells(table: Table) -> list[str]:
    return re.findall(r'<td class="[^"]*num[^"]*" >([^<]*)</td>', table._repr_html_())


def test_small_memories_that_two_decimals_would_merge_read_differently():
    # 130,000 to 136,000 bytes all read 0.13 MiB with two decimals, once a 1 MiB value sets the unit.
    values = [2**20, 133_120, 134_144, 135_168]
    rows = [PolicyRow(f"p{i}", None, v, v, 10**6, 10**6, 1.0) for i, v in enumerate(values)]
    text = str(policy_table(rows))
    residual_cells = [line.split()[1] for line in text.splitlines()[2:]]
    assert len(set(residual_cells)) == len(values)
    assert residual_cells[0] == "1.000" and all(cell.startswith("0.12") for cell in residual_cells[1:])


@pytest.mark.parametrize("kind, scale", [("bytes", 1), ("bytes", 2**30), ("flops", 10**12), ("ratio", 1)])
def test_different_values_never_print_the_same(kind, scale):
    rng = np.random.default_rng(0)
    for _ in range(20):
        base = int(rng.integers(1, 10**6)) * scale
        values = sorted({base + int(step) for step in rng.integers(0, 5, size=4)})
        if kind == "ratio":
            values = [v / 10**6 for v in values]
        table = Table(pd.DataFrame({"v": values}), units={"v": kind})
        assert len(set(column_cells(table))) == len(values), (values, str(table))
        assert html_cells(table) == column_cells(table)


def test_equal_values_keep_the_short_form():
    table = Table(pd.DataFrame({"v": [2**20, 2**20, 3 * 2**20]}), units={"v": "bytes"})
    assert column_cells(table) == ["1.00", "1.00", "3.00"]
    ratios = Table(pd.DataFrame({"r": [1.0, 1.25]}), units={"r": "ratio"})
    assert column_cells(ratios) == ["1.000×", "1.250×"]


def test_a_caption_sits_above_the_scrolling_box_so_a_phone_shows_all_of_it():
    html = Table(pd.DataFrame({"a": [1]}), caption="What <this> shows")._repr_html_()
    caption, rest = html.split('<div class="remat-table-scroll">')
    assert caption == '<p class="remat-table-caption">What &lt;this&gt; shows</p>'
    assert "<caption" not in rest and "What" not in rest
