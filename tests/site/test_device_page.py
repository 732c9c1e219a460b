"""The "Measuring memory" page: donation's figures, the device's counters and the H200's peaks."""

from helpers import page_text, tables_with


def test_the_page_answers_first_with_glued_numbers(built_page):
    html = built_page("device.html")
    text = page_text(html)
    assert "{glue" not in text
    opening = text[:text.index("Donation on a training step#")]
    assert "compiler’s plan, no run" in opening
    assert "arguments + outputs + temp − aliased" in opening
    assert "by less than" in opening  # donation saves less than it aliases
    assert "returns None" in opening  # memory_stats() on the CPU


def test_the_donation_tables_show_the_aliased_bytes_only_when_donated(built_page):
    html = built_page("device.html")
    tables = tables_with(html, "field")
    assert len(tables) >= 2
    for table in tables[:2]:
        aliased = next(row for row in table if row["field"] == "aliased")
        values = [value for key, value in aliased.items() if key != "field"]
        assert float(values[0]) == 0 and float(values[1]) > 0


def test_the_h200_table_and_the_error_cell(built_page):
    html = built_page("device.html")
    measured = [t for t in tables_with(html, "program") if any(key.startswith("peak (") for key in t[0])]
    assert len(measured) == 1 and any(row["program"] == "llama1b / full" for row in measured[0])
    text = page_text(html)
    assert "XLA_CLIENT_MEM_FRACTION is specified together" in text
    assert "donated array deleted: True" in text
