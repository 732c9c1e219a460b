"""Finds the API names, written as inline literals in the prose of a built page, that do not link to their reference.

The rule, applied to every HTML page of the built site except Sphinx's generated pages
(``genindex``, ``search``, ``py-modindex``) and the copied ``_static``/``_sources`` files:

* Only inline literals are checked: ``<code>`` elements whose class holds both ``docutils``
  and ``literal`` (what MyST makes of backticks in prose). Code cells and text outputs are
  ``<pre>`` blocks, not inline literals, so they are never checked.
* A literal is exempt when it lies inside an ``<a>`` element (any link counts); inside a
  heading (``<h1>`` to ``<h6>``); inside the output of a code cell (an element of class
  ``cell_output``: Markdown that a cell displays is made by code, and code cells stay as
  they are); inside an autodoc description (a ``<dl>`` of class ``py``: docstrings of
  ``remat_guide`` are also read with ``help()``, where MyST links would be noise); or
  inside the very section that defines the name. That is a ``<section>`` element, at any
  depth around the literal, whose own ``id``, or the ``id`` of a ``<span>`` that is a
  direct child of it, is the anchor of the name's label, on the page of that label; page
  and anchor come from the label entries of the site's ``objects.inv``. So a plain
  ``prevent_cse`` may stand inside the ``param-prevent_cse`` section of the parameters
  page (and its subsections), while the same mention anywhere else must link.
* The literal's text (whitespace collapsed) names an API when it is, exactly, one of the
  spellings below, optionally followed by a call ``(...)`` or an assignment ``=...``.
  ``jax.checkpoint(f, policy=p)`` names ``jax.checkpoint``; ``static_argnums=(0,)`` names
  ``static_argnums``. When the text before ``=`` is not an API name, the value after it is
  checked the same way, so ``policy=jax.checkpoint_policies.dots_saveable`` names that policy.
* The spellings and the label each must reach (the table is
  ``remat_guide.site.api_items.api_spellings``, which the versions page links with too):

  - every policy ``p`` of the installed ``jax.checkpoint_policies`` as ``p``,
    ``checkpoint_policies.p``, ``jax.checkpoint_policies.p`` or
    ``jax.ad_checkpoint.checkpoint_policies.p``: label ``policy-p``;
  - ``checkpoint_policies``, ``jax.checkpoint_policies``,
    ``jax.ad_checkpoint.checkpoint_policies``: ``api-checkpoint_policies``;
  - the parameters whose names say nothing else, ``prevent_cse``, ``static_argnums`` and
    ``static_argnames``: ``param-<name>`` (``fun`` and ``policy`` are ordinary words and
    variable names on the pages, so they are not checked); ``concrete``, which JAX removed:
    ``param-concrete-removed``, the note that shows the error it raises now;
  - ``checkpoint_name``, ``checkpoint_name_fwd``, ``name_p``, ``print_saved_residuals``,
    ``Saveable``, ``Recompute`` and ``Offloadable``, bare or after ``jax.ad_checkpoint.``:
    ``api-<name>``;
  - ``jax.checkpoint``: ``reference-parameters``; ``jax.remat``: ``reference-remat``;
  - each configuration flag whose name holds ``remat`` or ``checkpoint``, such as
    ``jax_remat3``: ``flag-<name>``;
  - ``defremat`` and ``defremat_with_logs``, bare or after ``jax.custom_vjp.``:
    ``custom_vjp-<name>``; ``optimize_remat``: ``custom_vjp-defvjp-optimize_remat``;
    ``saveable_args``: ``vjp-saveable_args``.

A failure names the page, the literal and the label it should link to.
"""

import html.parser
import pathlib
import re
import zlib

from remat_guide.site.api_items import api_spellings

SKIPPED_PAGES = {"genindex.html", "search.html", "py-modindex.html"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}
SPELLINGS = api_spellings()
_HEAD = re.compile(r"([A-Za-z_][\w.]*)(\(.*\)|=(.*))?", re.DOTALL)


def named_label(literal: str) -> str | None:
    """The label an inline literal's text must link to, or None when it names no API."""
    text = " ".join(literal.split())
    while (match := _HEAD.fullmatch(text)) is not None:
        if match[1] in SPELLINGS:
            return SPELLINGS[match[1]]
        if match[3] is None:
            return None
        text = match[3].strip()
    return None


def label_anchors(site: pathlib.Path) -> dict[str, tuple[str, str]]:
    """Each std:label of the site's objects.inv as (page, anchor)."""
    raw = (site / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = raw.index(b"\n", header_end) + 1
    anchors = {}
    for line in zlib.decompress(raw[header_end:]).decode("utf-8").splitlines():
        match = re.fullmatch(r"(.+?)\s+std:label\s+-?\d+\s+(\S+)\s+.*", line)
        if match:
            name, uri = match.groups()
            page, _, anchor = uri.replace("$", name).partition("#")
            anchors[name.lower()] = (page, anchor)
    return anchors


class _InlineLiterals(html.parser.HTMLParser):
    """Collects (text, exempt by context, ids of the enclosing sections) per inline literal."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, set[str], set[str]]] = []  # tag, classes, ids of a section
        self.literals: list[tuple[str, bool, set[str]]] = []
        self._code: list[str] | None = None
        self._code_depth = 0

    def _exempt_context(self) -> bool:
        return any(tag == "a" or tag in HEADINGS or "cell_output" in classes
                   or (tag == "dl" and "py" in classes) for tag, classes, _ in self.stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "span" and values.get("id") and self.stack and self.stack[-1][0] == "section":
            self.stack[-1][2].add(values["id"])
        if tag in VOID:
            return
        classes = set((values.get("class") or "").split())
        ids = {values["id"]} if tag == "section" and values.get("id") else set()
        self.stack.append((tag, classes, ids))
        if tag == "code" and self._code is None and {"docutils", "literal"} <= classes:
            self._code, self._code_depth = [], len(self.stack)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID or all(open_tag != tag for open_tag, _, _ in self.stack):
            return
        if self._code is not None and tag == "code" and len(self.stack) == self._code_depth:
            sections = set().union(*(ids for open_tag, _, ids in self.stack if open_tag == "section"))
            self.literals.append(("".join(self._code), self._exempt_context(), sections))
            self._code = None
        while self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._code is not None:
            self._code.append(data)


def unlinked_api_names(page: str, page_html: str, anchors: dict[str, tuple[str, str]]) -> list[str]:
    """'page: `literal` should link to label' for each inline literal that breaks the rule."""
    parser = _InlineLiterals()
    parser.feed(page_html)
    parser.close()
    problems = []
    for text, exempt, sections in parser.literals:
        label = named_label(text)
        if label is None or exempt:
            continue
        defined_at = anchors.get(label.lower())
        if defined_at is not None and defined_at[0] == page and defined_at[1] in sections:
            continue
        problems.append(f"{page}: `{' '.join(text.split())}` should link to {label}")
    return problems


def site_pages(site: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in site.rglob("*.html")
                  if p.relative_to(site).parts[0] not in {"_static", "_sources"}
                  and p.relative_to(site).as_posix() not in SKIPPED_PAGES)
