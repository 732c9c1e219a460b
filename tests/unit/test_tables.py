"""Table: four significant figures, values that print alike marked, and a phone's columns."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from remat_guide import PolicyRow, policy_table
from remat_guide.tables import Table, phone_columns


def column_cells(table: Table) -> list[str]:
    """The cells of a one-column table's text rendering (the notes under it left out)."""
    return [line.strip() for line in str(table).splitlines()[2:] if not line.startswith("≈ ")]


def html_cells(table: Table) -> list[str]:
    """The numeric cells of a table's HTML, each with ≈ where its class marks it."""
    found = re.findall(r'<td class="([^"]*\bnum\b[^"]*)" >([^<]*)</td>', table._repr_html_())
    return [("≈" if "remat-approx" in classes.split() else "") + text for classes, text in found]


def significant(cell: str) -> int:
    digits = re.sub(r"[^0-9]", "", cell).lstrip("0")
    return len(digits)


@pytest.mark.parametrize("kind, value, unit, printed", [
    ("ratio", 1.332467529, 1, "1.332×"), ("ratio", 1.0, 1, "1.000×"), ("ratio", 0.80740353, 1, "0.807×"),
    ("ratio", 12.3456, 1, "12.35×"), ("flops", 0.80740353e9, 10**9, "0.8074"),
    ("bytes", 5.37618 * 2**20, 2**20, "5.376"), ("seconds", 126.637e-6, 1e-3, "0.1266"),
    ("bytes", 9.99996 * 2**20, 2**20, "10.00"), ("bytes", 0, 2**20, "0"),
])
def test_numbers_show_four_significant_figures_ratios_at_most_three_decimals(kind, value, unit, printed):
    # The largest value sets the unit; the value under test is printed in it.
    table = Table(pd.DataFrame({"v": [value, 2 * unit]}), units={"v": kind})
    assert column_cells(table)[0] == printed
    assert html_cells(table)[0] == printed


@pytest.mark.parametrize("kind, value, unit, printed", [
    ("bytes", 68, 2**20, "68 B"), ("bytes", 308, 2**30, "308 B"), ("bytes", 2**15, 2**30, "32.00 KiB"),
    ("bytes", -3 * 2**20, 2**30, "-3.000 MiB"), ("seconds", 5e-3, 1, "5.000 ms"),
    ("flops", 12_345, 10**9, "12.35 kFLOP"), ("bytes", 0.01 * 2**30, 2**30, "0.01000"),
])
def test_a_value_under_a_hundredth_of_the_columns_unit_shows_in_its_own(kind, value, unit, printed):
    table = Table(pd.DataFrame({"v": [value, 2 * unit]}), units={"v": kind})
    assert column_cells(table)[0] == printed
    assert html_cells(table)[0] == printed


@pytest.mark.parametrize("kind, scale", [("bytes", 1), ("bytes", 2**30), ("flops", 10**12), ("ratio", 1)])
def test_values_that_print_alike_but_differ_are_marked_and_the_tolerance_stated(kind, scale):
    rng = np.random.default_rng(0)
    marked_some = False
    for _ in range(20):
        # Between 100 and 1000 of the column's unit, up to 0.4 of one apart (ratios 1 to 10).
        base = int(rng.integers(10**5, 10**6))
        raw = [base + int(step) for step in rng.integers(0, 400, size=5)]
        values = [v / 10**5 for v in raw] if kind == "ratio" else [v * scale // 1000 for v in raw]
        table = Table(pd.DataFrame({"v": values}), units={"v": kind})
        cells, text = column_cells(table), str(table)
        assert html_cells(table) == cells
        assert all(significant(cell) <= 4 for cell in cells) or (kind, scale) == ("bytes", 1), cells
        by_print: dict[str, set] = {}
        for cell, value in zip(cells, values):
            by_print.setdefault(cell.lstrip("≈"), set()).add(value)
        for cell, value in zip(cells, values):
            differs = len(by_print[cell.lstrip("≈")]) > 1
            assert cell.startswith("≈") == differs, (values, text)
            if differs:
                marked_some = True
                spread = max(by_print[cell.lstrip("≈")]) - min(by_print[cell.lstrip("≈")])
                assert spread < (0.001 if kind == "ratio" else 0.001 * value), (values, text)
        notes = [line for line in text.splitlines() if line.startswith("≈ ")]
        tolerance = "0.001×" if kind == "ratio" else "0.1%"
        expected = [f"≈ {table._shown()[0].columns[0]}: values that print alike are equal within "
                    f"{tolerance}, not exactly"]
        assert notes == (expected if any(c.startswith("≈") for c in cells) else [])
        assert (expected[0] in table._repr_html_()) == bool(notes)
    assert marked_some or (kind, scale) == ("bytes", 1)  # bytes under 1 KiB print whole: never alike


def test_equal_values_are_not_marked():
    table = Table(pd.DataFrame({"v": [2**20, 2**20, 3 * 2**20]}), units={"v": "bytes"})
    assert column_cells(table) == ["1.000", "1.000", "3.000"]
    assert "≈" not in str(table) and "remat-approx" not in table._repr_html_()


def test_policy_table_prints_four_figures_and_says_where_values_are_only_close():
    values = [2**20, 133_120, 134_144, 134_145]
    rows = [PolicyRow(f"p{i}", None, v, v, 10**6, 10**6, 1.0) for i, v in enumerate(values)]
    residuals = [line.split()[1] for line in str(policy_table(rows)).splitlines()[2:6]]
    assert residuals == ["1.000", "0.1270", "≈0.1279", "≈0.1279"]


def _matrix() -> pd.DataFrame:
    return pd.DataFrame({
        "policy": ["everything_saveable", "nothing_saveable", "dots_saveable", "save_only_these_names"],
        "inputs": ["kept"] * 4, "matmul": ["—", "—", "kept", "—"], "batched matmul": ["—", "—", "kept", "—"],
        "convolution": ["—", "—", "kept", "—"], "named 'proj'": ["—", "—", "—", "kept"],
        "named 'act'": ["—", "—", "—", "—"], "other intermediates": ["kept", "recomputed", "recomputed", "—"]})


def test_a_phone_keeps_the_column_that_tells_rows_apart():
    # everything_saveable and nothing_saveable differ only in 'other intermediates'.
    shown = phone_columns({column: list(values) for column, values in _matrix().items()}, width=30)
    assert shown[0] == "policy" and "other intermediates" in shown
    assert "inputs" not in shown  # the same in every row: it tells nothing apart
    rows = _matrix()[shown[1:]].apply(tuple, axis=1)
    assert rows.nunique() == len(rows)


def test_a_phone_keeps_memory_flops_and_time_first_then_as_many_as_fit():
    cells = {"layout": ["dp", "dp", "fsdp"], "policy": ["a", "b", "a"],
             "temp (MiB)": ["1.000", "2.000", "3.000"], "peak (MiB)": ["4.000", "5.000", "6.000"],
             "FLOPs (GFLOP)": ["7.000", "8.000", "9.000"], "note": ["x", "y", "z"]}
    units = {"temp (MiB)": "bytes", "peak (MiB)": "bytes", "FLOPs (GFLOP)": "flops"}
    assert phone_columns(cells, units, width=34) == ["layout", "policy", "temp (MiB)", "FLOPs (GFLOP)"]
    assert phone_columns(cells, units, width=200) == list(cells)
    with pytest.raises(ValueError, match="cells"):
        phone_columns({})
    with pytest.raises(ValueError, match="differ in length"):
        phone_columns({"a": ["1"], "b": []})


def test_columns_a_phone_leaves_out_are_marked_and_a_switch_shows_them():
    table = Table(_matrix(), key_columns=["policy", "matmul", "other intermediates"])
    page = table._repr_html_()
    extra = set(re.findall(r'class="[^"]*\bcol(\d+)\b[^"]*\bremat-extra\b', page))
    assert extra == {"1", "3", "4", "5", "6"}
    assert len(re.findall(r'<th class="col_heading level0 col\d+ remat-extra"', page)) == 5
    assert '<label class="remat-all-columns"><input type="checkbox"> all 8 columns (5 more)</label>' in page
    narrow = Table(_matrix()[["policy", "other intermediates"]])._repr_html_()
    assert "remat-extra" not in narrow and "remat-all-columns" not in narrow
    with pytest.raises(ValueError, match="key_columns"):
        Table(_matrix(), key_columns=["nope"])


def test_long_headers_and_cells_may_wrap_between_words():
    page = Table(pd.DataFrame({"jax_custom_vjp3": ["f32[1,4096] at model.py:12"]}))._repr_html_()
    assert ">jax_<wbr>custom_<wbr>vjp3</th>" in page
    assert ">f32[1,<wbr>4096] at model.<wbr>py:<wbr>12</td>" in page


def test_a_caption_sits_above_the_scrolling_box_so_a_phone_shows_all_of_it():
    html = Table(pd.DataFrame({"a": [1]}), caption="What <this> shows")._repr_html_()
    caption, rest = html.split('<div class="remat-table-scroll">')
    assert caption == '<div class="remat-table-block"><p class="remat-table-caption">What &lt;this&gt; shows</p>'
    assert "<caption" not in rest and "What" not in rest


def test_a_residual_listing_states_its_total_in_human_units():
    from remat_guide import Residual, Residuals

    big = Residual((1072, 256, 1024), np.dtype(np.float32), "primitive", "exp")
    caption = str(Residuals([big, Residual((3,), np.dtype(np.float32), "primitive", "sin")]))
    assert caption.splitlines()[0] == "2 residuals, 1.047 GiB in all"
    assert "1,124,073,472" in caption  # the table about bytes keeps each exact count
