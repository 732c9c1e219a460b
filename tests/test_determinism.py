"""The built site holds nothing that changes from build to build: paths, addresses, timings, pids."""

import html as html_lib
import json
import pathlib
import re

import pytest

from helpers import ROOT

# Patterns searched in the raw HTML (attributes included).
RAW_PATTERNS = {
    "notebook temp path": re.compile(r"ipykernel_\d+|/tmp/"),
    "absolute path of the checkout": re.compile(re.escape(str(ROOT))),
    "home or site-packages path": re.compile(r"/(?:home|root|Users)/[\w.-]+/|site-packages/"),
    "memory address": re.compile(r"\b0x[0-9a-fA-F]{6,}\b"),
    "process id": re.compile(r"\b(?:pid|process id)\b\s*[:=]?\s*\d+", re.IGNORECASE),
}
# Patterns searched in the visible text only, so that scripts and styles do not count.
TEXT_PATTERNS = {
    "timing": re.compile(
        r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds)\b"
        r"|\bWall time\b|\bCPU times\b|\bper loop\b"
    ),
}


def _visible_text(html: str) -> str:
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.DOTALL | re.IGNORECASE)
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", html))


def find_unstable(html: str) -> list[str]:
    """Each finding as ``"<what>: <matched text>"``; empty when the page is stable."""
    found = [f"{what}: {m.group(0)}" for what, pattern in RAW_PATTERNS.items()
             for m in pattern.finditer(html)]
    text = _visible_text(html)
    found += [f"{what}: {m.group(0)}" for what, pattern in TEXT_PATTERNS.items()
              for m in pattern.finditer(text)]
    return found


def scan_site(site: pathlib.Path) -> dict[str, list[str]]:
    """The findings of every HTML file under ``site``, by path relative to it."""
    report = {}
    for path in sorted(site.rglob("*.html")):
        found = find_unstable(path.read_text(encoding="utf-8", errors="replace"))
        if found:
            report[str(path.relative_to(site))] = found
    return report


# --- the scanner itself, on synthetic pages ----------------------------------------------

CLEAN = """<html><head><style>.x{transition:0.3s}</style><script>var t = "5 ms";</script></head>
<body><p>f32[1000] 4,000 bytes at &lt;cell&gt;:7 (g), 3 residuals, 0x1f is hex.</p>
<span style="background:#d7ecff">S</span><p>1.5x faster? no: 33% more FLOPs.</p></body></html>"""

BAD = {
    "notebook temp path": '<pre>File /tmp/ipykernel_4242/123.py:7</pre>',
    "absolute path of the checkout": f"<pre>{ROOT}/src/remat_guide/residuals.py</pre>",
    "home or site-packages path": "<pre>.venv/lib/python3.11/site-packages/jax/_src/core.py</pre>",
    "memory address": "<pre>&lt;function policy at 0x7f6134cd58a0&gt;</pre>",
    "process id": "<p>kernel pid: 31337</p>",
    "timing": "<pre>CPU times: user 1.2 s</pre><p>took 12.5 ms</p>",
}


def split_streams(notebook: dict) -> list[str]:
    """Cells whose printed text reached the notebook in more than one consecutive piece.

    MyST-NB strips the end of each piece before joining them, so where the kernel cut the
    text (which depends on timing) would change the blank lines of the rendered output.
    """
    found = []
    code_cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    for number, cell in enumerate(code_cells, start=1):
        outputs = cell.get("outputs", [])
        for before, after in zip(outputs, outputs[1:]):
            if before["output_type"] == after["output_type"] == "stream" \
                    and before["name"] == after["name"]:
                found.append(f"code cell {number}: {before['name']}")
    return found


def _cell(*outputs: dict) -> dict:
    return {"cell_type": "code", "outputs": list(outputs)}


STDOUT = {"output_type": "stream", "name": "stdout", "text": "x\n"}
STDERR = {"output_type": "stream", "name": "stderr", "text": "w\n"}
PLOT = {"output_type": "display_data", "data": {}}


def test_split_streams_are_found_and_interleaved_outputs_are_not():
    notebook = {"cells": [{"cell_type": "markdown"}, _cell(STDOUT, PLOT, STDOUT),
                          _cell(STDOUT, STDERR, STDOUT), _cell(STDOUT, STDOUT)]}
    assert split_streams(notebook) == ["code cell 3: stdout"]


def test_clean_page_has_no_findings():
    assert find_unstable(CLEAN) == []


@pytest.mark.parametrize("what", sorted(BAD))
def test_each_kind_of_unstable_value_is_found(what):
    found = find_unstable(f"<html><body>{BAD[what]}</body></html>")
    assert any(f.startswith(what + ":") for f in found), found


def test_a_planted_bad_file_fails_the_scan(tmp_path):
    (tmp_path / "good.html").write_text(CLEAN, encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.html").write_text(BAD["memory address"], encoding="utf-8")
    assert scan_site(tmp_path) == {"sub/bad.html": ["memory address: 0x7f6134cd58a0"]}


# --- the built site ---------------------------------------------------------------------


def test_built_site_holds_nothing_that_changes_between_builds(site_dir):
    assert scan_site(site_dir) == {}


def test_every_cell_printed_its_text_in_one_piece(site_dir):
    executed = site_dir.parent / "jupyter_execute"
    notebooks = sorted(executed.rglob("*.ipynb"))
    assert notebooks, f"{executed} holds no executed notebook"
    report = {str(p.relative_to(executed)): split_streams(json.loads(p.read_text()))
              for p in notebooks}
    assert {page: cells for page, cells in report.items() if cells} == {}
