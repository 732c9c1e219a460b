"""The built tutorial page shows each step's residuals and the side-by-side view, as executed."""

import re

import pytest
from conftest import page_text


@pytest.fixture(scope="module")
def page(built_page) -> str:
    return built_page("tutorial.html")


def test_residual_listings_of_each_step(page):
    text = page_text(page)
    # The three-layer example without checkpoint: sin and cos outputs of g.
    assert re.search(r"f32\[5\]\s+20\s+primitive\s+sin at <cell>:\d+ \(g\)", text)
    assert re.search(r"f32\[7\]\s+28\s+primitive\s+cos at <cell>:\d+ \(g\)", text)
    # The dots policy keeps matmul outputs; the names policy keeps the value named 'a'.
    assert re.search(r"primitive\s+dot_general at <cell>:\d+ \(g\)", text)
    assert re.search(r"named\s+'a' at <cell>:\d+ \(f_named\)", text)
    assert "| equal: True" in text


def test_side_by_side_view_marks_recomputation(page):
    assert page.count('<div class="remat-fwd-bwd">') == 2
    assert page.count('title="recomputed"') == 5  # sin, cos, sin, cos, cos of f under the dots policy
    assert "forward computation:" in page_text(page)  # the plain-text view of the sin example


def test_corrections_are_shown_by_output(page):
    text = page_text(page)
    assert "Array(0.78907233, dtype=float32, weak_type=True)" in text
    assert "jax.DeviceArray exists: False" in text
    assert "the docstring's output line: (Array(" in text
    assert "reduce_precision(8, 23) is the identity on float32: True" in text
    assert "jax.remat is jax.checkpoint: False" in text
    assert "TypeError: remat() got an unexpected keyword argument 'static_argnames'" in text


def test_jit_and_scan_memory_is_measured(page):
    text = page_text(page)
    rows = re.findall(r"(unrolled|scan)\s+(.+?)\s+temp memory\s+(\d+)% of no checkpoint", text)
    shares = {(loop, label): int(share) for loop, label, share in rows}
    assert len(shares) == 6
    for loop in ("unrolled", "scan"):
        assert shares[loop, "no jax.checkpoint"] == 100
        assert shares[loop, "policy=None"] < 100  # as the prose says, on the CPU
