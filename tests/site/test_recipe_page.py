"""The recipe page: a Flax NNX model compared, picked and stepped on an H100 and a TPU v5e."""

import re

from helpers import page_text, tables_with

POLICIES = ["no checkpoint", "nothing_saveable", "dots_with_no_batch_dims_saveable"]


def _number(cell):
    return float(cell.rstrip("×").replace(",", ""))


def test_the_page_answers_first_and_says_its_figures_are_plans(built_page):
    text = page_text(built_page("recipe.html"))
    assert "{glue" not in text
    # The page's table of contents, before the article, names the same sections.
    start = text.index("Every memory figure")
    opening = text[start:text.index("1. loss_for(policy) for a Flax NNX model", start)]
    assert "the compiler’s plan, not a run" in opening
    for call in ("nnx.remat(step, policy=policy)", "eqx.filter_checkpoint(step, policy=policy)",
                 "nnx.eval_shape", 'target="h100"', '"tpu-v5e"', "recommend_policy", "step=True"):
        assert call in opening, call
    assert "refuses to compile no checkpoint" in opening


def test_the_h100_table_has_estimates_and_the_tpu_table_a_refusal(built_page):
    html = built_page("recipe.html")
    gpu = tables_with(html, "policy", "memory (GiB)", "est. step (ms)", "FLOPs vs none")
    assert len(gpu) == 2  # the gradient's and the training step's
    gradient, step = gpu
    assert [row["policy"] for row in gradient] == POLICIES
    memory = {row["policy"]: _number(row["memory (GiB)"]) for row in gradient}
    assert memory["nothing_saveable"] < memory["dots_with_no_batch_dims_saveable"] < memory["no checkpoint"]
    assert _number(gradient[1]["FLOPs vs none"]) > 1
    assert [row["policy"] for row in step] == ["no checkpoint", "nothing_saveable"]
    assert _number(step[1]["memory (GiB)"]) > memory["nothing_saveable"]
    tpu = tables_with(html, "policy", "memory (GiB)", "compiled", "FLOPs vs none")
    assert len(tpu) == 1
    assert [(row["policy"], row["compiled"]) for row in tpu[0]] == [
        ("no checkpoint", "refused"), ("dots_with_no_batch_dims_saveable", "yes")]
    for table in gpu + tpu:
        assert len(table[0]) <= 4  # narrow enough for a phone


def test_the_picks_and_the_equinox_residuals_are_printed(built_page):
    text = page_text(built_page("recipe.html"))
    assert "h100: nothing_saveable," in text
    assert "tpu-v5e: dots_with_no_batch_dims_saveable," in text
    counts = {name: re.search(rf"{name}: (\d+) residuals, layer inputs \['4 × bf16\[8,2048,1024\]'\]", text)
              for name in ("NNX", "Equinox")}
    assert all(counts.values()), counts
    assert counts["NNX"].group(1) == counts["Equinox"].group(1)  # the same model in both frameworks
    assert "stderr" not in built_page("recipe.html")
