"""The Flax NNX page: nnx.remat with BatchNorm, Dropout, nnx.scan and static_argnums."""

from helpers import page_text, table_with


def test_the_page_answers_first_with_its_numbers_glued(built_page):
    text = page_text(built_page("nnx.html"))
    assert "{glue" not in text
    opening = text[:text.index("BatchNorm: one update per step#")]
    assert "running mean with nnx.remat is the same, bit for bit" in opening
    assert "0.01 times the batch’s mean" in opening
    assert "bit for bit the same" in opening
    assert "count stays at 0" in opening
    assert "8 × f32[128,256]" in opening
    assert "TracerBoolConversionError" in opening
    assert "CPU" in opening


def test_the_static_argnums_table_reports_what_runs_and_what_raises(built_page):
    rows = {row["call"]: row["result"]
            for row in table_with(built_page("nnx.html"), "call", "result")}
    assert rows["nnx.remat(forward), train=True"] == "TracerBoolConversionError"
    assert rows["static_argnums=2, train=True"] == "runs"
    assert rows["static_argnums=2, train= by keyword"] == "runs"
    assert rows["jax.checkpoint(scaled, static_argnums=1), keyword"] == "ValueError"
    assert rows["nnx.remat(repeat), n=3"] == "TracerIntegerConversionError"


def test_the_scan_table_has_each_policy_and_both_prevent_cse(built_page):
    rows = table_with(built_page("nnx.html"), "policy", "prevent_cse")
    assert [(row["policy"], row["prevent_cse"]) for row in rows] == [
        ("no checkpoint", "-"), ("nothing_saveable", "False"), ("dots_saveable", "False"),
        ("save_only_these_names('dense')", "False"), ("nothing_saveable", "True")]
    assert len(rows[0]) <= 4  # narrow enough for a phone
