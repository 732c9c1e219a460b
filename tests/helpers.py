"""Plain helpers shared by the tests: the checkout, its pages, a scanned model, compiles, built pages, a browser."""

import contextlib
import functools
import html
import html.parser
import http.server
import os
import pathlib
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from remat_guide import _jax_internals as jax_internals
from remat_guide.models import LLAMA3, decoder_args, decoder_loss
from remat_guide.targets import lowering_for, place

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The sources of the pages that run as notebooks.
NOTEBOOK_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md")
                        if "file_format: mystnb" in p.read_text(encoding="utf-8"))


def page_text(page_html: str) -> str:
    """The text of a page with its tags removed and its entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page_html))


class _Tables(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def html_tables(page_html: str) -> list[list[list[str]]]:
    """Every table of a page as rows of cell texts, the header row first."""
    parser = _Tables()
    parser.feed(page_html)
    return parser.tables


def tables_with(page_html: str, *headers: str) -> list[list[dict[str, str]]]:
    """The rows of each table whose header row starts with ``headers``, as dicts."""
    found = [rows for rows in html_tables(page_html) if rows and rows[0][:len(headers)] == list(headers)]
    return [[dict(zip(header, row)) for row in body] for header, *body in found]


def table_with(page_html: str, *headers: str) -> list[dict[str, str]]:
    """The rows of the one table whose header row starts with ``headers``, as dicts."""
    found = tables_with(page_html, *headers)
    assert len(found) == 1, f"{len(found)} tables with the headers {headers}"
    return found[0]


def scanned_loss_for(layer: Callable[[jax.Array, Any], jax.Array]) -> Callable[[Any], Callable]:
    """``loss_for(policy)``: ``mean(out ** 2)`` of ``layer`` scanned over the layers of ``params``.

    ``policy`` checkpoints each layer (``prevent_cse=False``, as in a scan); ``None`` means
    no checkpoint.
    """

    def loss_for(policy: Any) -> Callable:
        step = layer if policy is None else jax.checkpoint(layer, policy=policy, prevent_cse=False)

        def loss(params: Any, x: jax.Array) -> jax.Array:
            x, _ = jax.lax.scan(lambda carry, w: (step(carry, w), None), x, params)
            return jnp.mean(x**2)

        return loss

    return loss_for


@contextlib.contextmanager
def counting_compiles() -> Iterator[list[int]]:
    """Counts the compiles made inside, from any thread: yields the list they append to.

    Counted: ``jax.stages.Lowered.compile`` and ``remat_guide._jax_internals.compile_text``
    (the package compiles a target's program from its text without source locations).
    """
    calls: list[int] = []
    original, from_text = jax.stages.Lowered.compile, jax_internals.compile_text

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    def counted_text(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return from_text(*args, **kwargs)

    jax.stages.Lowered.compile, jax_internals.compile_text = counted, counted_text
    try:
        yield calls
    finally:
        jax.stages.Lowered.compile, jax_internals.compile_text = original, from_text


# Chromium must not reach out on its own: this machine has no network but the loopback.
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium() -> str:
    """The Chromium the browser tests drive: ``$REMAT_GUIDE_CHROMIUM`` or the first one on PATH."""
    for name in (os.environ.get("REMAT_GUIDE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and (path := shutil.which(name)):
            return path
    raise AssertionError("no Chromium found: `make test` installs one (Debian: apt-get install chromium)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class names it so)
        pass


@contextlib.contextmanager
def served(folder: pathlib.Path) -> Iterator[str]:
    """Serves ``folder`` over HTTP on a free local port while the block runs; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# A one-layer decoder with 2 heads of 64 features, small: a splash kernel's FLOPs follow from its shapes.
SPLASH_CONFIG = LLAMA3["1b"].smaller(layers=1, d_model=128, heads=2, kv_heads=1, mlp_dim=256, vocab=256)


def lowered_splash_gradient(batch: int, seq: int = 128) -> Any:
    """The gradient of :data:`SPLASH_CONFIG`'s loss with Pallas's splash attention, lowered for a TPU v5e."""
    params, _, tokens = place(decoder_args(SPLASH_CONFIG, batch, seq), "tpu-v5e")
    with lowering_for("tpu-v5e"):
        return jax.jit(jax.grad(decoder_loss(SPLASH_CONFIG, None, attention="splash"))).lower(params, tokens)


# The files that take longest (seconds of `make test`'s pytest on 2 cores, from --durations),
# slowest first. `make test` hands files to its two workers in collection order, a file to
# whichever is nearly done (--dist loadfile --no-loadscope-reorder): with these first and the
# short files after them, the two finish within seconds of each other. xdist's own order, by
# the number of tests in a file, sent the longest file (the browser tour) out midway, and one
# worker finished 25 s before the other.
SLOWEST_FIRST = (
    "tests/site/test_browser.py",          # 110 s: the tour's two Chromiums
    "tests/unit/test_grader.py",           # 53 s
    "tests/unit/test_cli.py",              # 47 s
    "tests/unit/test_cache.py",            # 42 s
    "tests/unit/test_figure_store.py",     # 35 s
    "tests/site/test_notebooks.py",        # 33 s
    "tests/unit/test_decoder_attention.py",  # 31 s
    "tests/unit/test_fit.py",              # 29 s
    "tests/unit/test_targets.py",          # 23 s
    "tests/unit/test_bad_inputs.py",       # 19 s
    "tests/unit/test_estimate.py",         # 19 s
    "tests/site/test_page_weight.py",      # 17 s
)
