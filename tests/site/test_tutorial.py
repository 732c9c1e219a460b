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
    kept = re.search(r"(\d+) residuals?, [\d,]+ bytes in all", text).group(1)
    assert re.search(rf"\b{kept}\s+values are kept\.", text)
    # Checkpoint on each layer: each cos is recomputed with the matrix product it comes from.
    assert "recomputed: ('dot_general', 'cos', 'dot_general', 'cos', 'dot_general', 'cos')" in text
    # The dots policy keeps matmul outputs; the names policy keeps the value named 'a'.
    assert re.search(r"primitive\s+dot_general at <cell>:\d+ \(g\)", text)
    assert re.search(r"named\s+'a' at <cell>:\d+ \(f_named\)", text)
    assert "checkpoint_name returns its value unchanged: True" in text
    assert "| equal: True" in text


def test_recursive_checkpoint_counts_in_prose_match_the_listing(page):
    text = page_text(page)
    source = r"at <cell>:\d+ \(recursive_checkpoint\.<locals>\.<lambda>\)"
    sines = len(re.findall(r"primitive\s+sin " + source, text))
    cosines = len(re.findall(r"primitive\s+cos " + source, text))
    assert (sines, cosines) == (1, 2)
    assert re.search(rf"the input,\s+{sines}\s+sin\s+and\s+{cosines}\s+cos\.", text)


def test_side_by_side_view_marks_recomputation(page):
    views = page.split('<div class="remat-fwd-bwd">')[1:]
    assert len(views) == 4  # f, f under the dots policy, the transformer with and without checkpoint
    assert views[1].count('title="recomputed"') == 5  # sin, cos, sin, cos, cos of f under the dots policy
    assert "forward computation:" in page_text(page)  # the plain-text view of the sin example


def test_a_large_view_shows_its_summary_and_folds_its_listing(page):
    views = page.split('<div class="remat-fwd-bwd">')[1:]
    assert all("<details>" not in view for view in views[:2])
    for view in views[2:]:
        summary, listing = view.split("<details>", 1)
        assert "equations by primitive" in summary and 'class="remat-fb-columns"' not in summary
        assert re.match(r"<summary>The listing: \d+ lines forward, \d+ backward</summary>", listing)
    text = page_text(page)
    assert re.search(r"bytes kept, fwd_bwd: (\d+) \| saved_residuals: \1\b", text)
    longest = int(re.search(r"listing\(\): \d+ lines, the longest (\d+) characters", text).group(1))
    assert longest <= 100


def test_corrections_are_shown_by_output(page):
    text = page_text(page)
    assert "Array(0.78907233, dtype=float32, weak_type=True)" in text
    assert "jax.DeviceArray exists: False" in text
    assert "the docstring's output line: (Array(" in text
    assert "float32 exponent and mantissa bits: 8 23" in text
    assert re.search(r"widths of\s+float32\s+itself \(8\s+and\s+23\s+bits", text)
    assert "reduce_precision(8, 23) is the identity on float32: True" in text
    assert "jax.remat is jax.checkpoint: False" in text
    assert "TypeError: remat() got an unexpected keyword argument 'static_argnames'" in text


def test_signature_is_the_installed_one_without_concrete(page):
    text = page_text(page)
    signature = " ".join(re.search(r"jax\.checkpoint\(fun.*?-> 'Callable'", text, re.S).group(0).split())
    assert "static_argnames" in signature and ", *," in signature
    assert "concrete" not in signature
    assert "concrete=" not in text  # no typed signature quoting the removed parameter
    assert 'href="reference/parameters.html#param-concrete-removed"' in page


def _shares(page: str, column: str) -> dict[tuple[str, str], float]:
    """The table's ratios to no checkpoint, in percent, one per loop and variant."""
    rows = table_with(page, "loop", "checkpoint", column)
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


def test_recomputation_costs_flops_and_redoes_matmuls_only_without_the_dots_policy(page):
    text = page_text(page)
    flops = _shares(page, "XLA-reported FLOPs vs no checkpoint")
    for loop in ("unrolled", "scan"):
        assert flops[loop, "policy=None"] > flops[loop, "dots_with_no_batch_dims_saveable"] > 100
    redone = dict(re.findall(r"(policy=None|dots_with_no_batch_dims_saveable) recomputes:\s+([^\n]+)", text))
    assert redone["policy=None"].split().count("dot_general") == 2
    assert "dot_general" not in redone["dots_with_no_batch_dims_saveable"]
