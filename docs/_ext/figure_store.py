"""A Sphinx extension that names the page each kernel runs for, and says what the figure store gave the build."""

from __future__ import annotations

import os
import pathlib
import time
from typing import Any

from sphinx.util import logging

__all__ = ["setup"]

_LOGGER = logging.getLogger(__name__)
PAGE_VARIABLE = "REMAT_GUIDE_PAGE"  # read by remat_guide._store, which records reads and misses by page
LOG_VARIABLE = "REMAT_GUIDE_FIGURES_LOG"


def name_the_page(app: Any, docname: str, source: list[str]) -> None:
    """Tells the kernel that executes ``docname`` (started next, from this process) which page it runs."""
    os.environ[PAGE_VARIABLE] = docname


_STARTED: list[float] = []


def start_clock(app: Any) -> None:
    _STARTED[:] = [time.time()]


def report(app: Any, exception: Exception | None) -> None:
    """Logs how many programs (for a target, or for this CPU to count FLOPs) the pages run in this build read from
    the store, and compiled."""
    folder = os.environ.get(LOG_VARIABLE, "")
    if exception is not None or not folder:
        return
    started = _STARTED[0] - 1
    log = pathlib.Path(folder)
    reads = {path.stem: set(path.read_text(encoding="utf-8").split())
             for path in sorted((log / "read").glob("*.txt")) if path.stat().st_mtime >= started}
    missed = [path for path in sorted((log / "missed").glob("*.json")) if path.stat().st_mtime >= started]
    compiled = {path.stem for path in missed}
    from_store = sum(len(keys - compiled) for keys in reads.values())
    if not reads and not compiled:
        _LOGGER.info("figure store: no page that compiles for a target ran in this build")
        return
    _LOGGER.info(f"figure store: {from_store} programs (for a target, or for this CPU to count FLOPs) read from the "
                 f"store by the {len(reads)} "
                 f"pages that ran and compile for a target; {len(compiled)} compiled because the store "
                 f"lacks them{' (make test fails until `make figures` adds them)' if compiled else ''}")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", start_clock)
    app.connect("source-read", name_the_page)
    app.connect("build-finished", report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
