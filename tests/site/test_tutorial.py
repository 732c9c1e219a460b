"""The built tutorial page shows each step's residuals and the side-by-side view, as executed."""

import re

import pytest

from helpers import page_text, table_with


@pytest.fixture(scope="module")
def page(built_page) -> str:
    return built_page("tutorial.html")


def test_residual_listings_of_each_step(page):
    text = page_text(page)
    # The three-layer example without checkpoint: sin and cos outputs of g.
    assert re.search(r"f32\[5\]\s+20\s+primitive\s+sin at <cell>:\d+ \(g\)", text)
    assert re.search(r"f32\[7\]\s+28\s+primitive\s+cos at <cell>:\d+ \(g\)", text)
    # The prose count of kept values is the listing's own total.
    kept = re.search(r"(\d+) residuals?, [\d.,]+ (?:bytes|KiB|MiB|GiB) in all", text).group(1)
    assert re.search(rf"\b{kept}\s+values are kept\.", text)
    # Checkpoint on each layer: each cos is recomputed with the matrix product it comes from.
    assert "recomputed: ('dot_general', 'cos', 'dot_general', 'cos', 'dot_general', 'cos')" in text
    # The dots policy keeps matmul outputs; the names policy keeps the value named 'a'.
    assert re.search(r"primitive\s+dot_general at <cell>:\d+ \(g\)", text)
    assert re.search(r"named\s+'a' at <cell>:\d+ \(f_named\)", text)
    assert "checkpoint_name returns its value unchanged: True" in text


def test_the_page_is_cut_to_what_teaches(page):
    assert "checkpint" not in page_text(page)  # no section on a misspelling
    article = page[page.index("<article"):page.index("</article>")]
    shown = page_text(re.sub(r"<details.*?</details>", " ", article, flags=re.S))
    # Issue 42: before the cut this count was 4,739 (a browser showed 4,560 words).
    assert len(shown.split()) < 3600
    assert article.count('<section id="') <= 9


def test_side_by_side_view_marks_recomputation(page):
    views = page.split('<div class="remat-fwd-bwd">')[1:]
    assert len(views) == 2  # f under the dots policy, then the transformer
    assert views[0].count('title="recomputed"') == 5  # sin, cos, sin, cos, cos of f under the dots policy
    assert "without jax.checkpoint, recomputed: ()" in page_text(page)


def test_a_large_view_shows_its_summary_and_folds_its_listing(page):
    views = page.split('<div class="remat-fwd-bwd">')[1:]
    assert "<details>" not in views[0]
    for view in views[1:]:
        summary, listing = view.split("<details>", 1)
        assert "equations by primitive" in summary and 'class="remat-fb-columns"' not in summary
        assert re.match(r"<summary>The listing: \d+ lines forward, \d+ backward</summary>", listing)
    text = page_text(page)
    assert re.search(r"bytes kept, fwd_bwd: (\d+) \| saved_residuals: \1\b", text)
    longest = int(re.search(r"listing\(\): \d+ lines, the longest (\d+) characters", text).group(1))
    assert longest <= 100
    policy = int(re.search(r"bytes kept, fwd_bwd: (\d+)", text).group(1))
    plain = int(re.search(r"without jax.checkpoint: bytes kept (\d+) \| recomputed: \(\)", text).group(1))
    assert plain > 2 * policy
    assert re.search(rf"keeps\s+{plain / 2**10:.0f} KiB, more than twice the\s+{policy / 2**10:.0f} KiB", text)


def test_reduce_precision_is_shown_to_change_nothing(page):
    text = page_text(page)
    assert "float32 exponent and mantissa bits: 8 23" in text
    assert re.search(r"widths of\s+float32\s+itself \(8\s+and\s+23\s+bits", text)
    assert "reduce_precision(8, 23) is the identity on float32: True" in text
    assert 'href="reference/parameters.html#reference-remat"' in page  # jax.remat: the reference


def _shares(page: str, column: str) -> dict[tuple[str, str], float]:
    """The table's ratios to no checkpoint, in percent, one per loop and variant."""
    rows = table_with(page, "loop", "checkpoint", "XLA temp vs no checkpoint", "FLOPs vs no checkpoint")
    shares = {(row["loop"], row["checkpoint"]): 100 * float(row[column].rstrip("×")) for row in rows}
    assert len(shares) == 6
    return shares


def test_jit_and_scan_memory_is_measured(page):
    text = page_text(page)
    shares = _shares(page, "XLA temp vs no checkpoint")
    for loop in ("unrolled", "scan"):
        assert shares[loop, "no jax.checkpoint"] == 100
        assert shares[loop, "policy=None"] < 100 <= shares[loop, "dots_with_no_batch_dims_saveable"]
    # The bullets quote the same shares, on the CPU.
    assert re.search(rf"to\s+{shares['unrolled', 'policy=None']:.0f}% of no checkpoint unrolled and\s+"
                     rf"{shares['scan', 'policy=None']:.0f}% in the scan", text)
    assert re.search(rf"{shares['unrolled', 'dots_with_no_batch_dims_saveable']:.0f}% of no checkpoint"
                     rf" unrolled,\s+{shares['scan', 'dots_with_no_batch_dims_saveable']:.0f}% in the scan",
                     text)
    # Without checkpoint, unrolled: XLA's temp memory is below the residuals computed, as quoted.
    rows = table_with(page, "loop", "checkpoint", "computed residuals (MiB)", "XLA temp (MiB)")
    plain = next(row for row in rows if (row["loop"], row["checkpoint"]) == ("unrolled", "no jax.checkpoint"))
    computed, temp = float(plain["computed residuals (MiB)"]), float(plain["XLA temp (MiB)"])
    assert temp < computed
    assert re.search(rf"add up\s+to {computed:.0f} MiB, but XLA.s temporary memory is\s+{temp:.0f} MiB", text)
    # Why the dots policy lowers nothing here: it asks to keep no less than XLA already holds.
    dots = next(row for row in rows
                if (row["loop"], row["checkpoint"]) == ("unrolled", "dots_with_no_batch_dims_saveable"))
    kept = float(dots["computed residuals (MiB)"])
    assert kept >= temp
    assert re.search(rf"asks for\s+{kept:.0f} MiB\s+unrolled, no less than the\s+{temp:.0f} MiB", text)


def test_recomputation_costs_flops_and_redoes_matmuls_only_without_the_dots_policy(page):
    text = page_text(page)
    flops = _shares(page, "FLOPs vs no checkpoint")
    for loop in ("unrolled", "scan"):
        assert flops[loop, "policy=None"] > flops[loop, "dots_with_no_batch_dims_saveable"] > 100
    redone = dict(re.findall(r"(policy=None|dots_with_no_batch_dims_saveable) recomputes:\s+([^\n]+)", text))
    assert redone["policy=None"].split().count("dot_general") == 2
    assert "dot_general" not in redone["dots_with_no_batch_dims_saveable"]
