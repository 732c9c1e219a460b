"""The accelerators page and the sections that compile for a TPU or a GPU ahead of time."""

import re

from helpers import page_text, table_with, tables_with


def test_accelerators_page_shows_each_target_and_says_what_its_figures_are(built_page):
    html = built_page("accelerators.html")
    text = page_text(html)
    assert "{glue" not in text
    assert "buffer assignment, not a run" in text
    figures = table_with(html, "backend", "policy", "arguments (MiB)", "outputs (MiB)", "temp (MiB)", "peak (MiB)")
    assert [row["backend"] for row in figures] == ["CPU", "CPU", "TPU v5e", "TPU v5e", "H100", "H100"]
    assert {row["temp (MiB)"] for row in figures if row["backend"] == "TPU v5e"} == {"0.00"}
    overview = table_with(html, "policy", "CPU temp (MiB)")
    headers = list(overview[0])
    for label in ("TPU v5e", "TPU v6e", "TPU v5p", "H100", "B200"):
        assert f"{label} peak (MiB)" in headers, headers
    assert [row["policy"] for row in overview] == [
        "no checkpoint", "nothing_saveable", "dots_saveable", "offload mlp_hidden"]
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 2
    # No start-up chatter of libtpu or the CUDA plugin reaches the page.
    assert "stderr" not in html and "TPU_ACCELERATOR_TYPE" not in text and "cuInit" not in text


def test_offloading_shows_host_bytes_on_accelerators(built_page):
    html = built_page("accelerators.html")
    offload = table_with(html, "policy", "TPU v5e peak (MiB)")
    host = {row["policy"]: row["H100 host (MiB)"] for row in offload}
    assert host["offload mlp_hidden"] == host["keep attn_out, offload mlp_hidden"] == "8.00"
    assert host["nothing_saveable"] == host["save mlp_hidden"] == "0.00"
    reference = built_page("reference/ad_checkpoint.html")
    rows = table_with(reference, "target", "policy", "device peak (MiB)", "host temp (MiB)")
    assert [row["target"] for row in rows] == ["tpu-v5e"] * 3 + ["h100"] * 3
    assert all((row["host temp (MiB)"] != "0.00") == (row["policy"] == "offload_dot_with_no_batch_dims")
               for row in rows)


def test_the_planner_gives_each_name_an_answer_on_both_targets(built_page):
    html = built_page("accelerators.html")
    tables = tables_with(html, "budget (MiB)", "plan", "peak (MiB)", "host (MiB)", "FLOPs", "compiled")
    assert len(tables) == 2  # the TPU v5e's and the H100's
    for sweep in tables:
        budgets = [float(row["budget (MiB)"]) for row in sweep]
        assert len(budgets) == 4 and budgets == sorted(budgets)
        assert all(float(row["peak (MiB)"]) <= float(row["budget (MiB)"]) for row in sweep)
        offloading = [row for row in sweep if "O" in row["plan"].split()]
        assert offloading and all(row["host (MiB)"] != "0.00" for row in offloading)
        assert int(sweep[0]["compiled"]) <= 30 and int(sweep[-1]["compiled"]) == 0
        for row in sweep:  # the best of every keep-or-recompute plan, against both answers
            flops, best, alone = (float(row[c].rstrip("×")) for c in ("FLOPs", "keep or recompute", "without offload"))
            assert flops <= best * 1.005  # the planner's tolerance
            assert best <= alone  # nothing beats the best of all


def test_index_says_whether_the_quick_answer_holds_on_accelerators(built_page):
    index = built_page("index.html")
    text = page_text(index)
    assert "the same order holds for the device peak on a TPU v5e" in text
    assert 'href="accelerators.html"' in index
