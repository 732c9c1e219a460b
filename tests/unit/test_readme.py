"""The README's example on a Flax model runs, and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re

from helpers import ROOT

SECTION = "## Use the package on your model"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the section has one example"
    return blocks[0]


def test_the_example_runs_and_recommends_a_policy():
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(readme_example(), "README.md", "exec"), namespace)
    lines = printed.getvalue().splitlines()
    rows = namespace["rows"]
    assert re.search(r"^\d+ residuals?, [\d.,]+ (bytes|KiB|MiB|GiB) in all$", lines[0]), lines[0]
    # Only the parameters are differentiated: x is listed as an argument, the parameters' leaves too.
    assert any(" argument " in line and line.rstrip().endswith(" x") for line in lines)
    assert [row.name for row in rows][0] == "no checkpoint"
    chosen = lines[-1]
    assert chosen in [row.name for row in rows] and chosen != "no checkpoint"
    fitting = [row for row in rows if row.temp_bytes <= rows[0].temp_bytes - 1]
    assert chosen == min(fitting, key=lambda row: (row.flops, row.temp_bytes)).name


def test_the_install_commands_name_this_clone():
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION):]
    assert "pip install .  " in section and "pip install -e ." in section
