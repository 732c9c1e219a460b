"""The "Scans, unrolling and gradient accumulation" page: its answers and its tables agree."""

import math

from helpers import html_tables, page_text

MIB = {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 2**10}


def _table(html, first, second=""):
    """The rows, as dicts, of the one table whose headers start with ``first`` and ``second...``."""
    found = [rows for rows in html_tables(html)
             if rows and rows[0][0] == first and len(rows[0]) > 1 and rows[0][1].startswith(second)]
    assert len(found) == 1, f"{len(found)} tables start with {first!r}, {second!r}"
    header, *body = found[0]
    return [dict(zip(header, row)) for row in body]


def _mib(row, column):
    """The value of a bytes column in MiB, whatever unit the table chose."""
    (header,) = [h for h in row if h.startswith(f"{column} (")]
    unit = header[len(column) + 2:-1]
    return float(row[header].replace(",", "")) * MIB[unit]


def test_the_page_answers_first(built_page):
    text = page_text(built_page("scans.html"))
    assert "{glue" not in text
    opening = text[:text.index("The program#")]
    for answer in ("Stacked residuals:", "unroll=k", "one around the whole scan did not:",
                   "Gradient accumulation", "The trap:", "CPU results"):
        assert answer in opening, answer


def test_stacked_residuals_grow_with_the_layers(built_page):
    rows = _table(built_page("scans.html"), "body policy", "per layer (")
    assert [row["body policy"] for row in rows][:2] == ["no checkpoint", "nothing_saveable"]
    for row in rows:
        per_layer, four, eight = (_mib(row, c) for c in ("per layer", "4 layers", "8 layers"))
        assert math.isclose(four, 4 * per_layer, abs_tol=4 * 0.005), row  # to the shown decimals
        assert math.isclose(eight, 2 * four, rel_tol=1e-3), row


def test_full_unrolling_undoes_a_checkpoint_without_cse_prevention(built_page):
    rows = {row["body, unroll"]: row for row in _table(built_page("scans.html"), "body, unroll")}
    assert rows["no checkpoint, unroll=1"]["loop trips"] == "8 + 8"
    assert rows["no checkpoint, unroll=2"]["loop trips"] == "4 + 4"
    none, nothing = rows["no checkpoint, unroll=True"], rows["nothing_saveable, unroll=True"]
    assert none["loop trips"] == "no loop"
    assert list(none.values())[2:] == list(nothing.values())[2:]
    kept = rows["nothing_saveable, prevent_cse=True, unroll=True"]
    assert _mib(kept, "XLA temp") < _mib(none, "XLA temp")
    assert _mib(rows["no checkpoint, unroll=2"], "XLA temp") > _mib(rows["no checkpoint, unroll=1"], "XLA temp")


def test_a_whole_scan_checkpoint_saves_no_memory_alone(built_page):
    rows = {row["checkpoint on"]: row for row in _table(built_page("scans.html"), "checkpoint on")}
    assert list(rows) == ["none", "body", "whole scan", "whole scan and body"]
    assert _mib(rows["whole scan"], "residuals") < _mib(rows["none"], "residuals")
    assert _mib(rows["whole scan"], "XLA temp") >= _mib(rows["none"], "XLA temp")
    assert _mib(rows["body"], "XLA temp") < _mib(rows["none"], "XLA temp")
    stacks = _table(built_page("scans.html"), "compiled for")
    assert [row["compiled for"] for row in stacks] == ["CPU", "H100 (compiler's plan)"]


def test_accumulation_needs_one_micro_batch_and_the_accumulator(built_page):
    rows = _table(built_page("scans.html"), "body policy", "full batch (")
    assert len(rows) == 3
    gradient_mib = 8 * 2 * 256 * 256 * 4 / 2**20  # the page's 8 layers of two 256 x 256 matrices
    for row in rows:
        accumulated = _mib(row, "4 accumulated")
        assert math.isclose(accumulated, _mib(row, "one micro-batch") + gradient_mib, abs_tol=0.01), row
        assert accumulated < _mib(row, "full batch"), row
