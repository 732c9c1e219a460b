"""The mixed-precision page: residual dtypes and bytes in bfloat16 and float8, on the CPU and an H100's plan."""

from helpers import page_text, table_with, tables_with

POLICIES = ["no checkpoint", "dots_saveable", "save h", "nothing_saveable"]


def _number(cell):
    return float(cell.replace(",", "").rstrip("×"))


def _residual_rows(html):
    """Every row of the page's residual tables (type, bytes, kind, ..., source)."""
    return [row for table in tables_with(html, "type") for row in table]


def test_the_answers_come_first_and_say_what_the_figures_are(built_page):
    text = page_text(built_page("precision.html"))
    assert "{glue" not in text
    opening = text[:text.index("A stack of layers with float32 master weights#")]
    for words in ("bfloat16", "float8_e4m3fn", "preferred_element_type", "never run",
                  "H100", "MiB"):
        assert words in opening, words


def test_the_mixed_layer_keeps_bfloat16_and_the_masters_only_under_a_checkpoint(built_page):
    rows = table_with(built_page("precision.html"), "policy", "bf16 kept (MiB)")
    assert [row["policy"] for row in rows] == POLICIES
    by_name = {row["policy"]: row for row in rows}
    assert _number(by_name["no checkpoint"]["f32 arguments (MiB)"]) == 0
    for name in POLICIES[1:]:
        assert _number(by_name[name]["f32 arguments (MiB)"]) > 0
        assert _number(by_name[name]["bf16 kept (MiB)"]) < _number(by_name["no checkpoint"]["bf16 kept (MiB)"])
    assert by_name["dots_saveable"]["bf16 kept (MiB)"] == by_name["save h"]["bf16 kept (MiB)"]


def test_the_compiled_memory_table_is_narrow_and_has_the_h100_plan(built_page):
    rows = table_with(built_page("precision.html"), "policy", "CPU temp (MiB)", "H100 plan (MiB)")
    assert [row["policy"] for row in rows] == POLICIES
    assert len(rows[0]) <= 4
    plan = {row["policy"]: _number(row["H100 plan (MiB)"]) for row in rows}
    assert plan["save h"] < plan["no checkpoint"]


def test_the_saved_copy_shrinks_with_its_dtype(built_page):
    rows = table_with(built_page("precision.html"), "h saved as")
    assert [row["h saved as"] for row in rows] == ["float32", "bfloat16", "float8_e4m3fn"]
    saved = [_number(row["h (named) (MiB)"]) for row in rows]
    assert saved[0] == 2 * saved[1] == 4 * saved[2]
    plan = [_number(row["H100 plan (MiB)"]) for row in rows]
    assert plan[0] > plan[1] > plan[2]


def test_dots_saveable_keeps_the_float32_accumulator_and_the_name_the_bfloat16_cast(built_page):
    rows = _residual_rows(built_page("precision.html"))
    dots = [row for row in rows if row["source"].startswith("dot_general") and "accumulate_layer" in row["source"]]
    assert [row["type"] for row in dots] == ["8 × f32[1024,2048]"]
    named = [row for row in rows if row["kind"] == "named" and "accumulate_layer" in row["source"]]
    assert [row["type"] for row in named] == ["8 × bf16[1024,2048]"]
    float8 = [row for row in rows if row["kind"] == "named" and "f8_e4m3fn" in row["type"]]
    assert [row["type"] for row in float8] == ["8 × f8_e4m3fn[1024,2048]"]
