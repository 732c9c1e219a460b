"""The page_setup IPython extension: stable cell names, minimal tracebacks, one flush per cell."""

import io
import sys

import pytest
from IPython.core.interactiveshell import InteractiveShell

from remat_guide import saved_residuals


@pytest.fixture
def shell():
    shell = InteractiveShell.instance()
    yield shell
    InteractiveShell.clear_instance()


class _KernelStream(io.StringIO):
    flush_interval = 0.2


def test_cells_get_stable_names_and_minimal_tracebacks(shell, monkeypatch):
    monkeypatch.setattr(sys, "stdout", _KernelStream())
    shell.run_line_magic("load_ext", "remat_guide.site.page_setup")
    assert shell.compile.get_code_name("x = 1", "x = 1\n", 7) == "<cell 7>"
    assert shell.InteractiveTB.mode == "Minimal"
    assert sys.stdout.flush_interval == 3600.0


def test_loading_prints_nothing(shell, monkeypatch):
    # Text printed here would be sent on the kernel's default 0.2 s timer, which then
    # cut the printed text of a later cell in two, at a point that changed between builds.
    monkeypatch.setattr(sys, "stdout", _KernelStream())
    shell.run_line_magic("load_ext", "remat_guide.site.page_setup")
    assert sys.stdout.getvalue() == ""


def test_residual_locations_in_such_cells_read_cell(shell):
    shell.run_line_magic("load_ext", "remat_guide.site.page_setup")
    result = shell.run_cell(
        "import jax.numpy as jnp\n"
        "def f(x):\n"
        "    return jnp.sum(jnp.sin(x))\n")
    assert result.success
    res = saved_residuals(shell.user_ns["f"], shell.user_ns["jnp"].ones(3))
    assert [r.location for r in res] == ["<cell>:3 (f)"]
