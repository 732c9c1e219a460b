"""The landing page's quick answer: a real-size bfloat16 decoder on the CPU and the H100 plan."""

import re

from helpers import html_tables, page_text

POLICIES = ["no checkpoint", "dots_saveable", "dots_with_no_batch_dims_saveable", "nothing_saveable"]


def _table(html, *starts):
    """The rows of the one table whose first headers start with ``starts``, one each."""
    found = [rows for rows in html_tables(html) if len(rows[0]) >= len(starts)
             and all(header.startswith(start) for header, start in zip(rows[0], starts))]
    assert len(found) == 1, [rows[0] for rows in html_tables(html)]
    header, *body = found[0]
    return [dict(zip(header, row)) for row in body]


def _gib(cell):
    """A table cell in the unit of its column, as a number."""
    return float(cell.replace(",", ""))


def test_quick_answer_comes_from_a_real_size_bfloat16_model(built_page):
    html = built_page("index.html")
    text = page_text(html)
    assert "{glue" not in text
    opening = text[text.index("Quick answer: which policy?"):text.index("The time, measured")]
    assert "Llama 3.2 1B in bfloat16" in opening and "a plan, not a run" in opening
    rows = _table(html, "policy", "CPU: XLA temp", "H100: memory")
    assert [row["policy"] for row in rows] == POLICIES
    assert len(rows[0]) <= 4  # narrow enough for a phone
    memory = next(header for header in rows[0] if header.startswith("H100: memory"))
    by = {row["policy"]: _gib(row[memory]) for row in rows}
    # dots_saveable is no near-equal of dots_with_no_batch_dims_saveable at 2048 tokens
    assert by["dots_saveable"] > 3 * by["dots_with_no_batch_dims_saveable"]
    assert by["nothing_saveable"] == min(by.values())


def test_the_sequence_table_shows_the_attention_scores_growing(built_page):
    html = built_page("index.html")
    rows = _table(html, "policy", "512 tokens")
    by = {row["policy"]: [_gib(cell) for cell in list(row.values())[1:]] for row in rows}
    dots = by["dots_saveable"]
    assert dots == sorted(dots) and dots[-1] > 4 * dots[0]
    assert max(by["dots_with_no_batch_dims_saveable"]) < dots[0]


def test_the_note_gives_choosings_large_shape_case(built_page):
    text = page_text(built_page("index.html"))
    found = re.search(r"dots_saveable\s+needs\s+([\d.]+)\s+GiB\s+of\s+temporary\s+memory\s+there,"
                      r"\s+against\s+([\d.]+)\s+GiB", text)
    assert found, "the note on choosing's large shape"
    dots, unbatched = map(float, found.groups())
    assert dots > 2 * unbatched
    reconcile = text[found.end():text.index("What a policy does, in one picture", found.end())]
    assert "tutorial" in reconcile and "Llama 3.2 1B" in reconcile and "%" in reconcile
