"""IPython extension that makes executed pages identical from build to build.

Load it in the first (hidden) cell of a page with ``%load_ext remat_guide.page_setup``. It
names each cell's code ``<cell N>`` (N is the execution count) instead of a file under
``/tmp/ipykernel_<pid>/``, so locations quoted by JAX's messages and by
:func:`remat_guide.saved_residuals` do not change between builds, and it switches tracebacks
to IPython's minimal mode, which shows the exception without the paths of this machine.
"""

from __future__ import annotations

import types
from typing import Any


def _cell_name(compiler: Any, raw_code: str, transformed_code: str, number: int) -> str:
    return f"<cell {number}>"


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext remat_guide.page_setup``."""
    ipython.compile.get_code_name = types.MethodType(_cell_name, ipython.compile)
    ipython.run_line_magic("xmode", "Minimal")
