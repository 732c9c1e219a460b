"""The stability scanner, on synthetic pages and notebooks: each kind of unstable value is found."""

import pytest

from helpers import ROOT
from stability_scan import find_unstable, scan_site, split_streams

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
