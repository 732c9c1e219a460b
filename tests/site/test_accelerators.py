"""The accelerators page and the sections that compile for a TPU or a GPU ahead of time."""

import re

from helpers import page_text, table_with, tables_with


def test_accelerators_page_shows_each_target_and_says_what_its_figures_are(built_page):
    html = built_page("accelerators.html")
    text = page_text(html)
    assert "{glue" not in text
    assert "what the compiler plans to allocate, not a run" in text
    # The opening speaks in sentences: "N times ... of no checkpoint", no "N× no checkpoint's".
    opening = " ".join(text[:text.index("Your own model:")].split())
    assert "times the matrix-multiply FLOPs of no checkpoint" in opening
    assert "no checkpoint’s" not in opening and "no checkpoint's" not in opening
    assert "temporary memory (the scratch space" in opening
    figures = table_with(html, "backend", "policy", "arguments (MiB)", "outputs (MiB)", "temp (MiB)", "peak (MiB)")
    assert [row["backend"] for row in figures] == ["CPU", "CPU", "TPU v5e", "TPU v5e", "H100", "H100"]
    assert {row["temp (MiB)"] for row in figures if row["backend"] == "TPU v5e"} == {"0"}
    overview = table_with(html, "policy", "CPU temp (MiB)")
    headers = list(overview[0])
    for label in ("TPU v5e", "TPU v6e", "TPU v5p"):
        assert f"{label} peak (MiB)" in headers, headers
    for label in ("H100", "B200"):  # a GPU fits by arguments + outputs + temp, not XLA's peak
        assert f"{label} memory (MiB)" in headers, headers
    assert [row["policy"] for row in overview] == [
        "no checkpoint", "nothing_saveable", "dots_saveable", "offload mlp_hidden"]
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 2
    # No start-up chatter of libtpu or the CUDA plugin reaches the page.
    assert "stderr" not in html and "TPU_ACCELERATOR_TYPE" not in text and "cuInit" not in text


def test_offloading_shows_host_bytes_on_accelerators(built_page):
    html = built_page("accelerators.html")
    offload = table_with(html, "policy", "TPU v5e peak (MiB)", "H100 memory (MiB)", "host (MiB)", "FLOPs (CPU)")
    assert any(header.startswith("H100 est. time (") for header in offload[0])
    host = {row["policy"]: row["host (MiB)"] for row in offload}
    assert host["offload mlp_hidden"] == host["keep attn_out, offload mlp_hidden"] == "8.000"
    assert host["nothing_saveable"] == host["save mlp_hidden"] == "0"
    reference = built_page("reference/ad_checkpoint.html")
    rows = table_with(reference, "target", "policy", "device memory (MiB)", "host temp (MiB)")
    assert [row["target"] for row in rows] == ["tpu-v5e"] * 3 + ["h100"] * 3
    assert all((row["host temp (MiB)"] != "0") == (row["policy"] == "offload_dot_with_no_batch_dims")
               for row in rows)


def test_the_planner_gives_each_name_an_answer_on_both_targets(built_page):
    html = built_page("accelerators.html")
    tables = tables_with(html, "budget (MiB)", "plan", "memory (MiB)")
    assert len(tables) == 2  # the TPU v5e's (cost: FLOPs) and the H100's (cost: estimated time)
    tpu, gpu = tables
    assert "est. time" not in tpu[0] and "est. time" in gpu[0]
    for sweep, cost in ((tpu, "FLOPs"), (gpu, "est. time")):
        budgets = [float(row["budget (MiB)"]) for row in sweep]
        assert len(budgets) == 4 and budgets == sorted(budgets)
        assert all(float(row["memory (MiB)"]) <= float(row["budget (MiB)"]) for row in sweep)
        host = next(header for header in sweep[0] if header.startswith("host ("))
        offloading = [row for row in sweep if "O" in row["plan"].split()]
        assert all(float(row[host]) > 0 for row in offloading)
        assert int(sweep[0]["compiled"]) <= 30 and int(sweep[-1]["compiled"]) == 0
        for row in sweep:  # the least costly keep-or-recompute plan, against both answers
            own, best, alone = (float(row[c].rstrip("×")) for c in (cost, "keep or recompute", "without offload"))
            assert own <= best * 1.005  # the planner's tolerance
            assert best <= alone  # nothing beats the least costly of all
    assert any("O" in row["plan"].split() for row in tpu)  # on FLOPs, offloading pays on the TPU


def test_the_h200_measurement_stands_beside_the_estimates(built_page):
    html = built_page("accelerators.html")
    text = page_text(html)
    first = table_with(html, "policy", "matmul FLOPs", "estimated (ms)", "measured (ms)", "estimated vs none",
                       "measured vs none")
    assert [row["policy"] for row in first][:2] == ["none", "nothing_saveable"]
    ratios = {row["policy"]: (float(row["estimated vs none"].rstrip("×")), float(row["measured vs none"].rstrip("×")))
              for row in first}
    for estimated, measured in ratios.values():
        assert abs(estimated / measured - 1) <= 0.25
    memory = table_with(html, "model", "policy", "device_bytes (MiB)", "measured peak (MiB)", "XLA peak (MiB)",
                        "device_bytes vs measured")
    assert len(memory) == 24
    eight_layers = [row for row in memory if row["model"].startswith("8 layers")]
    assert len(eight_layers) == 12
    assert all(abs(float(row["device_bytes vs measured"].rstrip("×")) - 1) <= 0.01 for row in eight_layers)
    assert "NVIDIA H200" in text and "jax 0.11.2" in text.lower()
    assert "optimal_seconds = -" in text  # the TPU compiler's own estimate, negative


def test_index_says_whether_the_quick_answer_holds_on_accelerators(built_page):
    index = built_page("index.html")
    text = page_text(index)
    assert "the quick answer holds for sequences of 2048 and 4096 tokens" in " ".join(text.split())
    measured = table_with(index, "policy", "FLOPs", "estimated time", "measured time")
    assert len(measured) == 6
    assert 'href="accelerators.html"' in index
