"""IPython extension that makes executed pages come out identical from build to build."""

from __future__ import annotations

import sys
import types
from typing import Any

from remat_guide import _store as store

# The site's plot style; svg.hashsalt fixes the ids that matplotlib would otherwise draw at random.
# A phone shows a figure 358 CSS px wide: a 4.8 in figure (461 px) at 0.78 of its size, so
# that 12 pt type (16 px) comes out at about 12 px, and legends at 11 px (the figures were
# 6.4 in wide, and the same type came out at 9 px). Text stays text (svg.fonttype "none"):
# smaller files, selectable, and a browser can measure it; the reader's sans-serif stands
# in where DejaVu Sans is missing.
PLOT_STYLE = {
    "svg.hashsalt": "remat-guide",
    "svg.fonttype": "none",
    "axes.formatter.useoffset": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 12,
    "axes.titlesize": 12,
    "legend.fontsize": 11,
    "legend.frameon": False,
    "figure.figsize": (4.8, 3.4),
}


def _cell_name(compiler: Any, raw_code: str, transformed_code: str, number: int) -> str:
    return f"<cell {number}>"


def load_ipython_extension(ipython: Any) -> None:
    """Sets up a page's kernel; run by ``%load_ext remat_guide.site.page_setup`` in its first cell.

    Plots come out as SVG (crisp at any zoom) in one style for the whole site: no offset
    tick labels, legends in readable type, and files without a date or random ids, so that
    they too are identical from build to build.

    As the page starts, the figure store's record of what it read in an earlier build is
    emptied (the build names the page in ``REMAT_GUIDE_PAGE``), so that it lists what this
    run reads.

    Three things would otherwise change between builds:

    - Each cell's code is named ``<cell N>`` (N is its execution count) instead of a file
      under ``/tmp/ipykernel_<pid>/``, so the locations that JAX's messages and
      :func:`remat_guide.saved_residuals` quote are the same on every build.
    - Tracebacks use IPython's minimal mode: the exception alone, without the paths of the
      machine that built the site.
    - The kernel sends printed text once per cell (and before each table or plot the cell
      displays). By default it sends it every 0.2 s and
      MyST-NB strips the end of each piece before joining them, so the blank lines of an
      output depended on timing. Loading prints nothing, so that no 0.2 s send is left
      pending when the interval changes.

    Args:
        ipython: The running IPython shell.
    """
    store.start_page()
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "flush_interval"):  # ipykernel's OutStream
            stream.flush_interval = 3600.0
    ipython.compile.get_code_name = types.MethodType(_cell_name, ipython.compile)
    ipython.InteractiveTB.set_mode(mode="Minimal")
    try:
        import matplotlib
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("the site's pages draw plots with matplotlib: install the site's "
                                  "requirements (pip install -r requirements.txt)") from error

    matplotlib.rcParams.update(PLOT_STYLE)
    ipython.run_line_magic("config", "InlineBackend.figure_formats = ['svg']")
    ipython.run_line_magic(
        "config", "InlineBackend.print_figure_kwargs = {'bbox_inches': 'tight', 'metadata': {'Date': None}}")
