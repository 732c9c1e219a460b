"""The guides of the built site: choosing, depth, sharded, frameworks and the pages split off them show outputs."""

import re

from helpers import html_tables, page_text, table_with


def _page_text(site_dir, page):
    html = (site_dir / page).read_text(encoding="utf-8")
    return html, page_text(html)


def test_choosing_page_shows_built_tables_plots_and_the_budget_error(site_dir):
    html, text = _page_text(site_dir, "choosing.html")
    comparisons = [rows for rows in html_tables(html) if rows[0][:3] == ["policy", "residuals (MiB)", "XLA temp (MiB)"]]
    assert len(comparisons) == 1  # the transformer (the large one in GiB)
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 2  # the transformer's plot, the Pareto plot
    assert "ValueError: no policy fits budget_bytes=16777216: the smallest temporary memory is" in text
    assert "all names == dots_with_no_batch_dims_saveable: True" in text
    assert not re.search(r"\d+(\.\d+)? ?(ms|seconds)\b", text)  # timings live in the bench report


def test_choosing_programs_page_shows_its_comparisons_and_plots(site_dir):
    html, text = _page_text(site_dir, "choosing-programs.html")
    comparisons = [rows for rows in html_tables(html) if rows[0][:3] == ["policy", "residuals (MiB)", "XLA temp (MiB)"]]
    assert len(comparisons) == 4  # exercise twice (loss inside, outside), MLP twice (unrolled, scanned)
    assert len(set(re.findall(r"_images/[0-9a-f]+\.svg", html))) == 3  # exercise, unrolled MLP, scanned MLP
    assert not re.search(r"\d+(\.\d+)? ?(ms|seconds)\b", text)  # timings live in the bench report
    choosing = (site_dir / "choosing.html").read_text(encoding="utf-8")
    assert 'href="choosing.html"' in html and 'href="choosing-programs.html"' in choosing


def test_choosing_page_shows_the_planned_sweep(built_page):
    text = page_text(built_page("choosing.html"))
    assert "plan_names chose" in text and "fewest-FLOPs standard policy" in text and "budget (MiB)" in text
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
        ("nothing_saveable", "0.5000"), ("save_only_these_names('hidden')", "1.000"),
        ("dots_with_no_batch_dims_saveable", "1.500")]
    assert "scan at" not in text  # no stacked value is described only as the scan's output


def test_sharded_page_runs_on_eight_devices_and_shows_its_tables(built_page):
    page = built_page("sharded.html")
    text = page_text(page)
    assert "on cpu with 8 devices" in text
    assert page.count('class="remat-table') >= 3  # policies, pieces, meshes
    assert text.count("residuals per device (MiB)") == 2 and "P(None, 'data', 'model')" in text
    assert len(set(re.findall(r"_images/[0-9a-f]+\.(?:png|svg)", page))) == 1
    on_8 = table_with(page, "policy", "CPU x 8: temp (MiB)", "TPU v5e 2x4: peak (MiB)")
    assert [row["policy"] for row in on_8][-1] == "offload: mlp_hidden"
    assert [row["H100: host (MiB)"] != "0" for row in on_8] == [False] * (len(on_8) - 1) + [True]
    assert 'href="sharded-shard-map.html"' in page


def test_sharded_shard_map_page_counts_the_collectives_each_policy_runs(built_page):
    page = built_page("sharded-shard-map.html")
    text = page_text(page)
    assert "on cpu with 8 devices" in text
    assert text.count("residuals per device (MiB)") == 2
    # jax.checkpoint inside shard_map: the collectives each policy runs
    in_shard_map = table_with(page, "layout", "policy", "residuals per device (MiB)",
                              "temp per device (MiB)", "FLOPs vs no checkpoint", "dot",
                              "collectives")
    assert [row["collectives"] for row in in_shard_map] == [
        "7 all-reduce", "11 all-reduce", "11 all-reduce", "7 all-reduce",
        "8 all-gather, 8 reduce-scatter", "16 all-gather, 8 reduce-scatter",
        "15 all-gather, 8 reduce-scatter", "8 all-gather, 8 reduce-scatter"]
    assert "every gradient equal to no checkpoint's, bit for bit: True" in text
    placements = table_with(page, "layout", "checkpoint", "residuals per device (MiB)")
    assert [row["checkpoint"] for row in placements][:4] == [
        "none", "inside, each layer", "outside, each layer", "outside, whole model"]
    assert 'href="sharded.html"' in page


def _outputs(page_html, kind):
    """The text of each output block of a page of one kind ("stream" or "traceback"), in order."""
    blocks = re.findall(rf'<div class="output {kind} [^"]*"><div class="highlight"><pre>(.*?)</pre>',
                        page_html, re.S)
    return [page_text(block) for block in blocks]


def test_frameworks_page_shows_the_pitfalls_as_short_errors(built_page):
    errors = _outputs(built_page("frameworks.html"), "traceback")
    assert [error.split(":")[0] for error in errors] == [
        "TraceContextError", "ValueError", "ScopeCollectionNotFound"]
    assert errors[0].startswith("TraceContextError: Cannot mutate RngCount from a different trace level")
    assert errors[1].startswith("ValueError: Cannot extract graph node from different trace level")
    assert "ScanCheckpointScanLayer_0" in errors[2]  # the name nn.remat gives an unnamed scanned layer
    assert all(len(error.splitlines()) <= 4 for error in errors)  # no traceback, the message alone
    wrappers = _outputs(built_page("frameworks-wrappers.html"), "traceback")
    assert [error.split(":")[0] for error in wrappers] == ["ValueError", "NotImplementedError"]
    assert wrappers[0].startswith("ValueError: loss_for ignores its policy")
    assert "concrete argument is deprecated" in wrappers[1]
    assert all(len(error.splitlines()) <= 4 for error in wrappers)  # no traceback, the message alone


def _comparisons(html):
    return [[row[0] for row in rows[1:]] for rows in html_tables(html)
            if rows[0][:3] == ["policy", "residuals (MiB)", "XLA temp (MiB)"]]


def test_frameworks_page_measures_each_wrapper_on_the_same_model(built_page):
    html = built_page("frameworks.html")
    text = page_text(html)
    # NNX, Linen, Equinox; nn.remat_scan (everything_saveable too) on the wrappers page
    assert _comparisons(html) == [
        ["no checkpoint", "dots_saveable", "nothing_saveable", "save_only_these_names('dense')"]] * 3
    wrappers = built_page("frameworks-wrappers.html")
    assert _comparisons(wrappers) == [
        ["no checkpoint", "everything_saveable", "dots_saveable", "nothing_saveable",
         "save_only_these_names('dense')"]]
    ratios = table_with(html, "policy", "NNX", "Linen", "Equinox")
    assert all(row["NNX"] == row["Linen"] == row["Equinox"] for row in ratios)
    assert float(ratios[2]["NNX"].rstrip("×")) > 1.2  # nothing_saveable recomputes the layers
    # The gradients with and without the checkpoint: NNX and Linen bit for bit, Equinox to rounding.
    assert text.count("gradient, nothing_saveable vs no checkpoint, largest difference: 0.0") == 2
    assert "eqx.filter_grad of the model == jax.grad of the recipe: True" in text
    assert "dropout draws before: 0 | after nnx.remat: 1" in text
    assert "blocks/dropout/rngs/key: key<fry>[16]" in text
    assert "layers/Dense_0/kernel: f32[4,4,256,256]" in page_text(wrappers)
    assert "{glue" not in text and "{glue" not in page_text(wrappers)
    assert 'href="frameworks-wrappers.html"' in html and 'href="frameworks.html"' in wrappers


def test_frameworks_page_computes_which_parameters_each_wrapper_passes_on(built_page):
    html = built_page("frameworks-wrappers.html")
    declared = {row["wrapper"]: row for row in table_with(
        html, "wrapper", "prevent_cse", "policy", "static_argnums", "static_argnames")}
    assert list(declared) == ["nnx.remat", "nn.remat", "nn.remat_scan", "eqx.filter_checkpoint"]
    assert [row["static_argnames"] for row in declared.values()] == ["no"] * 4
    assert [row["policy"] for row in declared.values()] == ["yes"] * 4
    assert [row["prevent_cse"] for row in declared.values()] == ["yes", "yes", "no", "yes"]
    assert [row["static_argnums"] for row in declared.values()] == ["yes", "yes", "no", "no"]
    traced = {row["wrapper"]: (row["checkpoint equations"], row["prevent_cse"], row["policy is dots_saveable"])
              for row in table_with(html, "wrapper", "checkpoint equations", "prevent_cse")}
    assert traced["nn.remat_scan, lengths=(4, 4)"] == ("1", "False", "yes")
    assert traced["nn.remat_scan, lengths=(16,)"] == ("0", "-", "-")  # the policy is dropped
    for wrapper in ("jax.checkpoint", "nnx.remat", "nn.remat", "eqx.filter_checkpoint"):
        assert traced[wrapper] == ("1", "True", "yes"), wrapper
    printed = "\n".join(_outputs(html, "stream"))
    assert "nnx.remat(f=<sentinel>, *, prevent_cse=True" in printed
    assert " at 0x" not in printed  # no memory address in a signature


def test_frameworks_page_prints_nothing_wider_than_a_phone(built_page):
    for page in ("frameworks.html", "frameworks-wrappers.html"):
        for block in _outputs(built_page(page), "stream"):
            assert all(len(line) <= 75 for line in block.splitlines()), (page, block)


def test_index_and_reference_link_to_the_frameworks_page(built_page):
    index = built_page("index.html")
    quick = index[index.index('id="quick-answer"'):index.index('id="what-jax-checkpoint-does-in-one-example"')]
    assert "Your model is Flax or Equinox:" in page_text(quick) and 'href="frameworks.html"' in quick
    assert 'href="../frameworks-wrappers.html#frameworks-parameters"' in built_page("reference/index.html")
