"""Finds what would change from build to build in a built site: paths, addresses, timings, pids, split output."""

import html as html_lib
import pathlib
import re

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
