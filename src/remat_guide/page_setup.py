"""IPython extension that makes executed pages come out identical from build to build."""

from __future__ import annotations

import sys
import types
from typing import Any


def _cell_name(compiler: Any, raw_code: str, transformed_code: str, number: int) -> str:
    return f"<cell {number}>"


def load_ipython_extension(ipython: Any) -> None:
    """Sets up a page's kernel; run by ``%load_ext remat_guide.page_setup`` in its first cell.

    Three things would otherwise change between builds:

    - Each cell's code is named ``<cell N>`` (N is its execution count) instead of a file
      under ``/tmp/ipykernel_<pid>/``, so the locations that JAX's messages and
      :func:`remat_guide.saved_residuals` quote are the same on every build.
    - Tracebacks use IPython's minimal mode: the exception alone, without the paths of the
      machine that built the site.
    - The kernel sends printed text once per cell. By default it sends it every 0.2 s and
      MyST-NB joins the pieces with line breaks, so where a line was cut depended on timing.

    Args:
        ipython: The running IPython shell.
    """
    ipython.compile.get_code_name = types.MethodType(_cell_name, ipython.compile)
    ipython.run_line_magic("xmode", "Minimal")
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "flush_interval"):  # ipykernel's OutStream
            stream.flush_interval = 3600.0
