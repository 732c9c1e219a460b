"""The guides of the built site: the choosing, depth and sharded pages show their tables, plots and errors."""

import re

from helpers import html_tables, page_text, table_with


def _page_text(site_dir, page):
    html = (site_dir / page).read_text(encoding="utf-8")
    return html, page_text(html)


def test_choosing_page_shows_built_tables_plots_and_the_budget_error(site_dir):
    html, text = _page_text(site_dir, "choosing.html")
    comparisons = [rows for rows in html_tables(html) if rows[0][:3] == ["policy", "residuals (MiB)", "XLA temp (MiB)"]]
    assert len(comparisons) == 4  # exercise, MLP twice, transformer (the large model's is in GiB)
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 5  # four plots, the Pareto plot
    assert "ValueError: no policy fits budget_bytes=16777216: the smallest temporary memory is" in text
    assert "all names == dots_with_no_batch_dims_saveable: True" in text
    assert not re.search(r"\d+(\.\d+)? ?(ms|seconds)\b", text)  # timings live in the bench report


def test_choosing_page_shows_the_planned_sweep(built_page):
    text = page_text(built_page("choosing.html"))
    assert "plan_names chose" in text and "best standard policy" in text and "budget (MiB)" in text
    assert "save_dot_except_mlp" in text and "policies compiled by the sweep" in text


def test_depth_page_plots_memory_against_depth(site_dir):
    html, text = _page_text(site_dir, "depth.html")
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 1
    deepest = table_with(html, "strategy", "memory vs no checkpoint", "FLOPs vs no checkpoint")
    assert [row["strategy"] for row in deepest][:3] == [
        "no checkpoint", "per-layer checkpoint", "recursive, sqrt(N) (2 levels)"]
    barriers = table_with(html, "checkpoint", "optimization_barrier ops")
    assert [(row["checkpoint"], row["optimization_barrier ops"]) for row in barriers] == [
        ("prevent_cse=True", "1"), ("prevent_cse=False", "0")]
    assert "in which case ``prevent_cse`` can be set to False." in text  # the whole sentence


def test_depth_page_breaks_down_what_each_scanned_layer_keeps(site_dir):
    html, text = _page_text(site_dir, "depth.html")
    kept = table_with(html, "type", "bytes", "kind", "scan", "source")
    assert [(row["type"], row["kind"]) for row in kept] == [
        ("f32[16,2,256,256]", "argument"), ("16 × f32[512,256]", "named"), ("16 × f32[512,256]", "carry")]
    assert re.fullmatch(r"'hidden' at <cell>:\d+ \(named_layer\)", kept[1]["source"])
    assert kept[1]["scan"] == kept[2]["scan"] and kept[1]["scan"].startswith("<cell>:")
    assert text.count("f32[16,512,256] output of scan") == 2  # JAX's own printer, for comparison
    per_layer = table_with(html, "policy", "kept from each layer", "per layer (MiB)")
    assert [(row["policy"], row["per layer (MiB)"]) for row in per_layer][:3] == [
        ("nothing_saveable", "0.50"), ("save_only_these_names('hidden')", "1.00"),
        ("dots_with_no_batch_dims_saveable", "1.50")]
    assert "scan at" not in text  # no stacked value is described only as the scan's output


def test_sharded_page_runs_on_eight_devices_and_shows_its_tables(built_page):
    page = built_page("sharded.html")
    text = page_text(page)
    assert "on cpu with 8 devices" in text
    assert page.count('class="remat-table') >= 3  # policies, pieces, meshes
    assert text.count("residuals per device (MiB)") == 2 and "P(None, 'data', 'model')" in text
    assert len(set(re.findall(r"_images/[0-9a-f]+\.(?:png|svg)", page))) == 1
    assert "offload: mlp_hidden" in text and "host temp 0 bytes" in text
