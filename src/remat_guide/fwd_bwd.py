"""The forward and backward computations of a function, side by side, with recomputation marked."""

from __future__ import annotations

import collections
import dataclasses
import html
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np
import pandas as pd

from remat_guide import _validation as validation
from remat_guide._jax_internals import scan_operands
from remat_guide._tracing import check_arguments, trace_vjp
from remat_guide.tables import Table

__all__ = ["SUMMARY_ABOVE", "FwdBwd", "Line", "fwd_bwd"]

SAVED = "saved"
RECOMPUTED = "recomputed"
#: A view whose longer computation has more lines than this shows its summary first. In a
#: notebook the listing follows, folded; printed, a line after the summary says how to get it.
SUMMARY_ABOVE = 60
_GUTTER = {SAVED: "S ", RECOMPUTED: "R ", "": "  "}
# The HTML view takes its colours from the page's theme (sphinx-book-theme's light and
# dark variables), with fallbacks for a notebook without them. Lines wrap rather than
# scroll, and the two halves stack when the view is narrower than about 44em. The
# summary table is made narrow enough for a phone.
_CSS = (
    ".remat-fwd-bwd .remat-fb-columns{display:grid;gap:0.75em;"
    "grid-template-columns:repeat(auto-fit,minmax(22em,1fr))}"
    ".remat-fwd-bwd .remat-fb-columns>div{min-width:0}"
    ".remat-fwd-bwd .remat-fb-code{font-family:var(--pst-font-family-monospace,monospace);"
    "font-size:85%;line-height:1.45}"
    ".remat-fwd-bwd .remat-fb-code>div{white-space:pre-wrap;overflow-wrap:anywhere;"
    "padding-left:var(--indent,6ch);text-indent:calc(-1*var(--indent,6ch))}"
    ".remat-fwd-bwd .remat-fb-title{font-weight:bold}"
    ".remat-fwd-bwd .remat-saved{background:var(--pst-color-info-bg,#dbeafe);"
    "color:var(--pst-color-text-base,#111827)}"
    ".remat-fwd-bwd .remat-recomputed{background:var(--pst-color-warning-bg,#ffedd5);"
    "color:var(--pst-color-text-base,#111827)}"
    ".remat-fwd-bwd table.remat-table td,.remat-fwd-bwd table.remat-table th{min-width:0;"
    "padding:0.3em 0.25em}"
    ".remat-fwd-bwd table.remat-table td.col0{min-width:0}"
    ".remat-fwd-bwd details>summary{cursor:pointer;margin:0.25em 0 0.5em}"
)
_RICH_STYLES = {SAVED: "bold blue", RECOMPUTED: "bold dark_orange"}
_LEGEND_PARTS = ("S = kept for the backward pass (a residual)", "R = recomputed by the backward pass")
_LEGEND = "    ".join(_LEGEND_PARTS)
_PLAIN_PARAM_TYPES = (bool, int, float, str, type(None), np.dtype)
_MAX_PARAM_CHARS = 60
_WRAP_INDENT = 4
_MIN_WIDTH = 40
_INPUTS_ROW = "(inputs)"
_TOTAL_ROW = "total"
_SUMMARY_UNITS = {"forward": "count", "saved": "count", "bytes saved": "bytes", "recomputed": "count"}


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a rendered jaxpr.

    Attributes:
        text: The line, without indentation.
        depth: How deeply the line is nested in sub-computations (0 at the top).
        primitive: The primitive of the equation on this line; empty for the lines
            that open or close a jaxpr.
        mark: ``"saved"`` for a forward equation that computes a residual,
            ``"recomputed"`` for a backward equation that recomputes a forward value,
            else empty.
        saved_bytes: For a saved line, the size in bytes of the residuals it computes
            (all iterations of a loop body); 0 on other lines.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If ``depth`` or ``saved_bytes`` is negative, ``mark`` is unknown, or
            ``saved_bytes`` is not 0 on a line that is not saved.
    """

    text: str
    depth: int = 0
    primitive: str = ""
    mark: str = ""
    saved_bytes: int = 0

    def __post_init__(self) -> None:
        for field in ("text", "primitive", "mark"):
            validation.string(getattr(self, field), f"Line.{field}")
        object.__setattr__(self, "depth", validation.integer(self.depth, "Line.depth", minimum=0))
        object.__setattr__(self, "saved_bytes",
                           validation.integer(self.saved_bytes, "Line.saved_bytes", minimum=0))
        if self.mark not in _GUTTER:
            raise ValueError(f"Line.mark must be one of {tuple(_GUTTER)}, got {self.mark!r}")
        if self.saved_bytes and self.mark != SAVED:
            raise ValueError(f"Line.saved_bytes must be 0 on a line not marked {SAVED!r}, "
                             f"got {self.saved_bytes}")

    def indented(self) -> str:
        """The text after the mark's gutter (``S``, ``R`` or blank) and two spaces per level.

        Examples:
            >>> from remat_guide.fwd_bwd import Line
            >>> Line("c:f32[3] = cos a", depth=2, primitive="cos", mark="recomputed").indented()
            'R     c:f32[3] = cos a'
        """
        return _GUTTER[self.mark] + "  " * self.depth + self.text

    def wrapped(self, width: int) -> list[str]:
        """:meth:`indented`, broken between words into lines of at most ``width`` characters.

        A continuation line is indented four characters further than the text; a word
        longer than a line is broken inside it. Past a depth of ``(width - 20) // 2``
        levels, lines are indented no further.

        Args:
            width: The longest line, in characters (at least 40).

        Returns:
            The lines, at least one.

        Raises:
            TypeError: If ``width`` is not an int.
            ValueError: If ``width`` is less than 40.

        Examples:
            >>> from remat_guide.fwd_bwd import Line
            >>> line = Line("d:f32[4,4] e:f32[4] = scan[length=4 reverse=False unroll=1] a b c", depth=1,
            ...             primitive="scan", mark="saved", saved_bytes=64)
            >>> for text in line.wrapped(40):
            ...     print(text)
            S   d:f32[4,4] e:f32[4] = scan[length=4
                    reverse=False unroll=1] a b c
        """
        width = validation.integer(width, "width", minimum=_MIN_WIDTH)
        indent = _GUTTER[self.mark] + "  " * min(self.depth, (width - _MIN_WIDTH // 2) // 2)
        return textwrap.wrap(self.text, width, initial_indent=indent,
                             subsequent_indent=" " * (len(indent) + _WRAP_INDENT),
                             break_on_hyphens=False) or [indent.rstrip()]


class FwdBwd:
    """The forward and backward computations of a function's VJP, as returned by :func:`fwd_bwd`.

    Lines of the forward pass that compute a residual are marked ``S``, lines of the
    backward pass that recompute a value of the forward pass are marked ``R``.
    :meth:`summary` counts them by primitive, with the bytes of the residuals, and
    :meth:`listing` gives the two computations as text.

    A small view (neither computation longer than
    :data:`~remat_guide.fwd_bwd.SUMMARY_ABOVE` lines) prints as its listing; in a
    notebook it renders as HTML with the two computations side by side, and
    ``rich.print`` shows it as a table of two columns. A larger view shows its summary
    first: printed, followed by a line that says how to get the listing; in a notebook,
    followed by the listing, folded.

    Attributes:
        forward: The lines of the forward computation.
        backward: The lines of the backward computation.
        saved_inputs: The size in bytes of each residual that no equation of the
            forward computation computes: an input of the function, a constant it
            captures, or a literal.

    Raises:
        TypeError: If ``forward`` or ``backward`` is not an iterable of
            :class:`~remat_guide.fwd_bwd.Line`, or ``saved_inputs`` not one of ints.
        ValueError: If a size in ``saved_inputs`` is negative.
    """

    def __init__(self, forward: Iterable[Line], backward: Iterable[Line], *,
                 saved_inputs: Iterable[int] = ()) -> None:
        self.forward = tuple(validation.iterable(forward, "forward", what="Line values"))
        self.backward = tuple(validation.iterable(backward, "backward", what="Line values"))
        for name, lines in (("forward", self.forward), ("backward", self.backward)):
            for line in lines:
                if not isinstance(line, Line):
                    raise TypeError(f"{name} must hold Line values, got {type(line).__name__}")
        self.saved_inputs = tuple(validation.integer(size, "saved_inputs", minimum=0) for size in
                                  validation.iterable(saved_inputs, "saved_inputs", what="ints"))

    @property
    def saved(self) -> tuple[str, ...]:
        """The primitives of the forward equations that compute residuals, in order."""
        return tuple(line.primitive for line in self.forward if line.mark == SAVED)

    @property
    def recomputed(self) -> tuple[str, ...]:
        """The primitives of the backward equations that recompute forward values, in order."""
        return tuple(line.primitive for line in self.backward if line.mark == RECOMPUTED)

    @property
    def saved_bytes(self) -> int:
        """The size in bytes of all residuals, what the forward pass keeps for the backward pass."""
        return sum(self.saved_inputs) + sum(line.saved_bytes for line in self.forward)

    @property
    def is_large(self) -> bool:
        """Whether a computation has more than :data:`~remat_guide.fwd_bwd.SUMMARY_ABOVE` lines.

        A large view shows its summary first (see :class:`FwdBwd`).
        """
        return max(len(self.forward), len(self.backward)) > SUMMARY_ABOVE

    def summary(self, max_rows: int | None = 12) -> Table:
        """The equations of the two computations, counted by primitive.

        A row gives, for one primitive, how many forward equations apply it, how many
        of those compute a residual (``saved``) and the residuals' size, and how many
        backward equations recompute it. Primitives that compute a residual or are
        recomputed come first, those with the most bytes saved, then the most
        recomputed, at the top; past ``max_rows`` rows, the rest share one row, as do
        all primitives that are neither saved nor recomputed. ``(inputs)`` counts
        the residuals that no equation computes (inputs of the function, captured
        constants) and ``total`` adds up each column. An equation in a loop body
        counts once however many times the loop runs; the bytes of its residuals are
        those of all iterations. In HTML, the counts of saved and recomputed equations
        are coloured like the lines of the listing.

        Args:
            max_rows: At most this many rows of single primitives (at least 1), or
                ``None`` for one row per saved or recomputed primitive.

        Returns:
            A :class:`~remat_guide.tables.Table`.

        Raises:
            TypeError: If ``max_rows`` is neither an int nor None.
            ValueError: If ``max_rows`` is less than 1.

        Examples:
            >>> import jax
            >>> import jax.numpy as jnp
            >>> from remat_guide import fwd_bwd
            >>> def f(x):
            ...     return jnp.sin(jnp.sin(x))
            >>> print(fwd_bwd(f, jnp.ones(1000)).summary())
            equations by primitive (a loop body counts once)
            primitive  forward  saved  bytes saved (KiB)  recomputed
            ---------  -------  -----  -----------------  ----------
            cos              2      2              7.812           0
            sin              2      0                              0
            total            4      2              7.812           0

            With ``jax.checkpoint``, only the input is kept; the backward pass computes
            both cosines and the inner ``sin`` again:

            >>> print(fwd_bwd(jax.checkpoint(f), jnp.ones(1000)).summary())
            equations by primitive (a loop body counts once)
            primitive  forward  saved  bytes saved (KiB)  recomputed
            ---------  -------  -----  -----------------  ----------
            (inputs)                1              3.906
            cos              0      0                              2
            sin              2      0                              1
            total            2      1              3.906           3
        """
        if max_rows is not None:
            max_rows = validation.integer(max_rows, "max_rows", minimum=1)
        forward = collections.Counter(line.primitive for line in self.forward if line.primitive)
        saved = collections.Counter(self.saved)
        recomputed = collections.Counter(self.recomputed)
        sizes: collections.Counter[str] = collections.Counter()
        for line in self.forward:
            sizes[line.primitive] += line.saved_bytes
        marked = sorted(set(saved) | set(recomputed),
                        key=lambda p: (-sizes[p], -saved[p], -recomputed[p], p))
        shown = marked if max_rows is None else marked[:max_rows]
        folded = sorted((set(forward) | set(marked)) - set(shown))

        def row(label: str, primitives: Sequence[str]) -> tuple[Any, ...]:
            count = sum(saved[p] for p in primitives)
            return (label, sum(forward[p] for p in primitives), count,
                    sum(sizes[p] for p in primitives) if count else None,
                    sum(recomputed[p] for p in primitives))

        rows: list[tuple[Any, ...]] = []
        if self.saved_inputs:
            rows.append((_INPUTS_ROW, None, len(self.saved_inputs), sum(self.saved_inputs), None))
        rows += [row(p, [p]) for p in shown]
        if folded:
            rows.append(row(folded[0] if len(folded) == 1 else f"{len(folded)} others", folded))
        rows.append((_TOTAL_ROW, forward.total(), len(self.saved_inputs) + saved.total(),
                     self.saved_bytes, recomputed.total()))
        frame = pd.DataFrame(rows, columns=["primitive", *_SUMMARY_UNITS]).astype(
            {column: "Int64" for column in _SUMMARY_UNITS})
        classes = pd.DataFrame("", index=frame.index, columns=frame.columns)
        for column, mark in (("saved", SAVED), ("bytes saved", SAVED), ("recomputed", RECOMPUTED)):
            classes.loc[frame[column].fillna(0) > 0, column] = f"remat-{mark}"
        return Table(frame, units=_SUMMARY_UNITS, cell_classes=classes,
                     caption="equations by primitive (a loop body counts once)")

    def listing(self, width: int = 100) -> str:
        """The two computations as plain text, with the marks in a gutter on the left.

        Args:
            width: The longest line, in characters (at least 40). The computations are
                side by side when every line fits; otherwise the forward one comes
                first, then the backward one, their lines wrapped to ``width``.

        Returns:
            The legend of the marks, a blank line, then the computations.

        Raises:
            TypeError: If ``width`` is not an int.
            ValueError: If ``width`` is less than 40.

        Examples:
            >>> import jax.numpy as jnp
            >>> from remat_guide import fwd_bwd
            >>> view = fwd_bwd(lambda w, x, y, z: jnp.sin(w * x * y * z), *[jnp.ones((2, 3))] * 4)
            >>> print(view.listing(width=40))
            S = kept for the backward pass (a residual)
            R = recomputed by the backward pass
            <BLANKLINE>
            forward computation:
              { lambda ; a:f32[2,3] b:f32[2,3]
                  c:f32[2,3] d:f32[2,3]. let
            S   e:f32[2,3] = mul a b
            S   f:f32[2,3] = mul e c
                g:f32[2,3] = mul f d
                h:f32[2,3] = sin g
            S   i:f32[2,3] = cos g
              in (h, a, b, c, d, e, f, i) }
            <BLANKLINE>
            backward computation:
              { lambda ; a:f32[2,3] b:f32[2,3]
                  c:f32[2,3] d:f32[2,3] e:f32[2,3]
                  f:f32[2,3] g:f32[2,3] h:f32[2,3].
                  let
                i:f32[2,3] = mul h g
                j:f32[2,3] = mul f i
                k:f32[2,3] = mul i d
                l:f32[2,3] = mul e k
                m:f32[2,3] = mul k c
                n:f32[2,3] = mul a m
                o:f32[2,3] = mul m b
              in (o, n, l, j) }
        """
        width = validation.integer(width, "width", minimum=_MIN_WIDTH)
        left = ["forward computation:", *(f.indented() if f else "" for f, _ in self._rows())]
        right = ["backward computation:", *(b.indented() if b else "" for _, b in self._rows())]
        column = max(len(text) for text in left)
        rows = [f"{a.ljust(column)}  |  {b}".rstrip() for a, b in zip(left, right)]
        if max(len(row) for row in rows) > width:
            rows = ["forward computation:", *(text for line in self.forward for text in line.wrapped(width)),
                    "", "backward computation:",
                    *(text for line in self.backward for text in line.wrapped(width))]
        legend = _LEGEND if len(_LEGEND) <= width else "\n".join(
            row for part in _LEGEND_PARTS for row in textwrap.wrap(part, width))
        return legend + "\n\n" + "\n".join(rows)

    def _rows(self) -> Iterator[tuple[Line | None, Line | None]]:
        for i in range(max(len(self.forward), len(self.backward))):
            yield (self.forward[i] if i < len(self.forward) else None,
                   self.backward[i] if i < len(self.backward) else None)

    def _size(self) -> str:
        return f"{len(self.forward)} lines forward, {len(self.backward)} backward"

    def __str__(self) -> str:
        if not self.is_large:
            return self.listing()
        return f"{self.summary()}\n\nThe listing has {self._size()}: its listing() method gives it as text."

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        def column(title: str, lines: Sequence[Line]) -> str:
            out = []
            for line in lines:
                text = html.escape(line.indented())
                # A wrapped line continues 4 characters to the right of where its text starts.
                indent = f'style="--indent:{len(_GUTTER[line.mark]) + 2 * line.depth + _WRAP_INDENT}ch"'
                if line.mark:
                    out.append(f'<div class="remat-{line.mark}" title="{line.mark}" {indent}>{text}</div>')
                else:
                    out.append(f"<div {indent}>{text}</div>")
            return (f'<div><div class="remat-fb-title">{title}</div>'
                    f'<div class="remat-fb-code">{"".join(out)}</div></div>')

        legend = " ".join(f'<span class="remat-{m}">{_GUTTER[m].strip()} = {m}</span>'
                          for m in (SAVED, RECOMPUTED))
        listing = (f'<p class="remat-fb-legend">{legend}</p>'
                   f'<div class="remat-fb-columns">{column("forward computation", self.forward)}'
                   f'{column("backward computation", self.backward)}</div>')
        if self.is_large:
            listing = (f"{self.summary()._repr_html_()}"
                       f"<details><summary>The listing: {self._size()}</summary>{listing}</details>")
        return f'<style>{_CSS}</style><div class="remat-fwd-bwd">{listing}</div>'

    def __rich__(self) -> Any:
        """For ``rich.print`` in a terminal: a table of the two columns, or the summary of a large view."""
        from rich.table import Table as RichTable
        from rich.text import Text

        if self.is_large:
            return Text(str(self))

        def column(lines: Sequence[Line]) -> Text:
            text = Text()
            for i, line in enumerate(lines):
                if i:
                    text.append("\n")
                text.append(line.indented(), style=_RICH_STYLES.get(line.mark, ""))
            return text

        table = RichTable(title=_LEGEND, show_lines=False)
        table.add_column("forward computation", no_wrap=True)
        table.add_column("backward computation", no_wrap=True)
        table.add_row(column(self.forward), column(self.backward))
        return table


# --- which backward equations recompute forward values -------------------------------
#
# Every value of the backward jaxpr gets two flags: `ct` (it depends on the cotangent
# input) and `res` (it depends on a residual). An equation recomputes a forward value
# when none of its inputs depends on the cotangent and at least one depends on a
# residual. Sub-jaxprs (jit, remat, scan, while, cond, custom_jvp ...) are analysed with
# the flags of the values passed to them.

_Flags = tuple[bool, bool]


def _inner_jaxpr(value: Any) -> jcore.Jaxpr | None:
    if isinstance(value, jcore.ClosedJaxpr):
        return value.jaxpr
    if isinstance(value, jcore.Jaxpr):
        return value
    return None


def _or(flags: Sequence[_Flags]) -> _Flags:
    return (any(c for c, _ in flags), any(r for _, r in flags))


def _analyse(jaxpr: jcore.Jaxpr, in_flags: Sequence[_Flags], marks: dict[int, str]) -> list[_Flags]:
    env: dict[Any, _Flags] = dict(zip(jaxpr.invars, in_flags))

    def read(atom: Any) -> _Flags:
        return env.get(atom, (False, False)) if isinstance(atom, jcore.Var) else (False, False)

    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _analyse_eqn(eqn, ins, marks)
        ct, res = _or(ins)
        if not ct and res:
            marks[id(eqn)] = RECOMPUTED
        for var, flags in zip(eqn.outvars, outs):
            env[var] = flags
    return [read(v) for v in jaxpr.outvars]


def _fixpoint(body: jcore.Jaxpr, consts: list[_Flags], carry: list[_Flags], xs: list[_Flags],
              marks: dict[int, str]) -> list[_Flags]:
    """Analyses a loop body whose first outputs feed back into its carry inputs."""
    for _ in range(len(carry) + 2):
        outs = _analyse(body, [*consts, *carry, *xs], {})
        grown = [_or([c, o]) for c, o in zip(carry, outs)]
        if grown == carry:
            break
        carry = grown
    return _analyse(body, [*consts, *carry, *xs], marks)


def _analyse_eqn(eqn: Any, ins: list[_Flags], marks: dict[int, str]) -> list[_Flags]:
    name, params = eqn.primitive.name, eqn.params
    if name == "scan":
        body = params["jaxpr"].jaxpr
        consts, carry, xs = scan_operands(params, ins)
        return _fixpoint(body, consts, carry, xs, marks)
    if name == "while":
        cn, bn = params["cond_nconsts"], params["body_nconsts"]
        carry = ins[cn + bn:]
        outs = _fixpoint(params["body_jaxpr"].jaxpr, ins[cn:cn + bn], carry, [], marks)
        _analyse(params["cond_jaxpr"].jaxpr, [*ins[:cn], *outs], marks)
        return outs
    if name == "cond":
        branch_outs = [_analyse(b.jaxpr, ins[1:], marks) for b in params["branches"]]
        return [_or([ins[0], *column]) for column in zip(*branch_outs)]
    inner = [j for j in map(_inner_jaxpr, params.values()) if j is not None]
    if len(inner) == 1 and len(inner[0].invars) == len(ins):
        return _analyse(inner[0], ins, marks)
    everything = _or(ins)
    for jaxpr in inner:
        _analyse(jaxpr, [everything] * len(jaxpr.invars), marks)
    return [everything] * len(eqn.outvars)


# --- rendering ------------------------------------------------------------------------


class _Names:
    """Short variable names (a, b, ..., z, ba, bb, ...) in order of first appearance."""

    def __init__(self) -> None:
        self._names: dict[Any, str] = {}

    def __call__(self, atom: Any) -> str:
        if isinstance(atom, jcore.Literal):
            value = np.asarray(atom.val)
            shown = value.item() if value.ndim == 0 else value.tolist()
            return f"{shown}:{atom.aval.str_short(short_dtypes=True)}"
        if isinstance(atom, jcore.DropVar):
            return "_"
        if atom not in self._names:
            n, name = len(self._names), ""
            while True:
                name = chr(ord("a") + n % 26) + name
                n //= 26
                if not n:
                    break
            self._names[atom] = name
        return self._names[atom]

    def typed(self, var: Any) -> str:
        return f"{self(var)}:{var.aval.str_short(short_dtypes=True)}"


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN_PARAM_TYPES)


def _empty(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(v is None for v in value)
    return value is None


def _param_text(primitive: str, params: dict[str, Any]) -> str:
    """Short parameters only: a ``jit`` shows just its name; ``None``, ``()`` and all-``None`` tuples are left out."""
    shown = []
    for key, value in sorted(params.items()):
        if primitive in ("jit", "pjit") and key != "name":
            continue
        if _inner_jaxpr(value) is None and _plain(value) and not _empty(value):
            text = f"{key}={value}"
            if len(text) <= _MAX_PARAM_CHARS:
                shown.append(text)
    return f"[{' '.join(shown)}]" if shown else ""


def _render(jaxpr: jcore.Jaxpr, names: _Names, marks: dict[int, str], sizes: dict[int, int],
            depth: int, out: list[Line]) -> None:
    constvars = " ".join(names.typed(v) for v in jaxpr.constvars)
    invars = " ".join(names.typed(v) for v in jaxpr.invars)
    out.append(Line(f"{{ lambda {constvars}; {invars}. let" if constvars else f"{{ lambda ; {invars}. let",
                    depth))
    for eqn in jaxpr.eqns:
        ins = " ".join(names(v) for v in eqn.invars)
        outs = " ".join(names.typed(v) if not isinstance(v, jcore.DropVar) else "_"
                        for v in eqn.outvars)
        text = f"{eqn.primitive.name}{_param_text(eqn.primitive.name, eqn.params)} {ins}".rstrip()
        text = f"{outs} = {text}" if outs else text
        out.append(Line(text, depth + 1, eqn.primitive.name, marks.get(id(eqn), ""), sizes.get(id(eqn), 0)))
        for key, value in eqn.params.items():
            values = value if isinstance(value, (tuple, list)) else (value,)
            for sub in filter(None, map(_inner_jaxpr, values)):
                out.append(Line(f"{key}=", depth + 2))
                _render(sub, names, marks, sizes, depth + 3, out)
    results = ", ".join(names(v) for v in jaxpr.outvars)
    out.append(Line(f"in ({results}) }}", depth))


# --- which forward equations compute residuals ----------------------------------------
#
# A residual that a loop, a jit or a checkpoint returns is computed in its body: the
# equation of the body that computes the body's matching output is marked, with the
# residual's size (all iterations of a loop). The outer equation is marked only for the
# residuals its body passes through from its inputs.


def _nbytes(var: Any) -> int:
    aval = var.aval
    return validation.nbytes(aval.shape, aval.dtype) if hasattr(aval, "shape") else 0


def _body(eqn: Any) -> jcore.Jaxpr | None:
    """The one sub-jaxpr whose outputs are the equation's outputs, in order (scan, jit, remat ...)."""
    inner = [j for j in map(_inner_jaxpr, eqn.params.values()) if j is not None]
    if len(inner) == 1 and len(inner[0].outvars) == len(eqn.outvars):
        return inner[0]
    return None


def _attribute(jaxpr: jcore.Jaxpr, wanted: dict[Any, int], marks: dict[int, str],
               sizes: dict[int, int]) -> list[int]:
    """Marks the equations computing the ``wanted`` values (and their sizes); returns the sizes of the others."""
    producers = {var: eqn for eqn in jaxpr.eqns for var in eqn.outvars}
    left: list[int] = []
    by_eqn: dict[int, tuple[Any, dict[Any, int]]] = {}
    for var, size in wanted.items():
        if var in producers:
            by_eqn.setdefault(id(producers[var]), (producers[var], {}))[1][var] = size
        else:
            left.append(size)
    for eqn, outs in by_eqn.values():
        body = _body(eqn)
        own = list(outs.values())
        if body is not None:
            inner: dict[Any, int] = {}
            own = []
            for out, result in zip(eqn.outvars, body.outvars):
                if out not in outs:
                    continue
                if isinstance(result, jcore.Var):
                    inner[result] = inner.get(result, 0) + outs[out]
                else:
                    own.append(outs[out])
            own += _attribute(body, inner, marks, sizes)
        if own:
            marks[id(eqn)] = SAVED
            sizes[id(eqn)] = sum(own)
    return left


def _view(fwd: jcore.Jaxpr, bwd: jcore.Jaxpr, num_residuals: int, num_cotangents: int) -> FwdBwd:
    """Marks and renders the two computations; ``bwd`` takes the residuals, then the cotangents."""
    residuals = fwd.outvars[len(fwd.outvars) - num_residuals:]
    wanted = {v: _nbytes(v) for v in residuals if isinstance(v, jcore.Var)}
    literals = [_nbytes(v) for v in residuals if not isinstance(v, jcore.Var)]
    fwd_marks: dict[int, str] = {}
    fwd_sizes: dict[int, int] = {}
    saved_inputs = [*_attribute(fwd, wanted, fwd_marks, fwd_sizes), *literals]
    bwd_marks: dict[int, str] = {}
    _analyse(bwd, [(False, True)] * num_residuals + [(True, False)] * num_cotangents, bwd_marks)

    forward: list[Line] = []
    backward: list[Line] = []
    _render(fwd, _Names(), fwd_marks, fwd_sizes, 0, forward)
    _render(bwd, _Names(), bwd_marks, {}, 0, backward)
    return FwdBwd(forward, backward, saved_inputs=saved_inputs)


# --- the public function ----------------------------------------------------------------


def fwd_bwd(f: Callable, /, *args: Any, argnums: int | Sequence[int] | None = None, **kwargs: Any) -> FwdBwd:
    """Shows the forward and backward computations of ``jax.vjp(f, ...)`` side by side.

    The forward computation is the jaxpr of ``jax.vjp`` of ``f`` with respect to the
    arguments that ``argnums`` chooses (by default all of them): it returns ``f``'s output
    and the residuals. The backward computation is the jaxpr of the VJP
    function applied to an output cotangent: its inputs are the residuals, then the
    cotangent. Two kinds of equations are marked:

    * ``S`` (saved), in the forward computation: an equation that computes a residual.
      When a ``scan``, ``jit`` or ``remat2`` returns the residual, that is the
      equation of its body that computes the value (for every iteration of a loop).
    * ``R`` (recomputed), in the backward computation: an equation none of whose
      inputs depends on the cotangent while at least one depends on a residual. Such an
      equation computes a value of the forward pass again from what was kept; without
      ``jax.checkpoint`` there are none. Equations inside sub-computations (the body
      of ``remat2``, ``jit``, ``scan`` ...) are marked by the same rule.

    Nothing is executed: ``f`` is only traced, so arguments may be
    ``jax.ShapeDtypeStruct`` values.

    Args:
        f: The function to differentiate (positional only, so ``f`` may itself take a
            keyword argument named ``f``). Its arguments and output may be pytrees of
            floating-point arrays.
        *args: Positional arguments for ``f``: arrays, pytrees of arrays, numbers, or
            ``jax.ShapeDtypeStruct`` values.
        argnums: Which arguments are differentiated, as for
            :func:`~remat_guide.saved_residuals`: ``None`` (the default) for every
            argument, positional and keyword (at least one floating-point); an int or a
            sequence of ints for those positional arguments only, as ``jax.grad`` takes
            it (each leaf floating-point; keyword arguments are then not differentiated).
        **kwargs: Keyword arguments for ``f``, traced like the positional ones.

    Returns:
        A :class:`FwdBwd`: ``print`` it for plain text; in a notebook it shows as HTML.
        Beyond :data:`~remat_guide.fwd_bwd.SUMMARY_ABOVE` lines it shows its
        :meth:`~FwdBwd.summary` first.

    Raises:
        TypeError: If ``f`` is not callable, an argument is not an array, a number or
            a ``jax.ShapeDtypeStruct``, no argument is floating-point, an argument in
            ``argnums`` is not floating-point, ``argnums`` is not an int or a sequence
            of ints, a keyword argument is also passed by position, or an output of
            ``f`` is not floating-point; or the policy of a ``jax.checkpoint`` in
            ``f`` has the wrong signature or answers other than True/False (the message
            names the policy).
        ValueError: If an argument has a negative dimension or a size no machine
            holds, ``argnums`` is empty, out of range or names an argument twice, or
            ``f`` returns no array (such as ``None``: a missing ``return``).

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide import fwd_bwd
        >>> def f(x):
        ...     return jnp.sin(jnp.sin(x))
        >>> print(fwd_bwd(f, jnp.ones(3)))
        S = kept for the backward pass (a residual)    R = recomputed by the backward pass
        <BLANKLINE>
        forward computation:                |  backward computation:
          { lambda ; a:f32[3]. let          |    { lambda ; a:f32[3] b:f32[3] c:f32[3]. let
              b:f32[3] = sin a              |        d:f32[3] = mul c b
          S   c:f32[3] = cos a              |        e:f32[3] = mul d a
              d:f32[3] = sin b              |    in (e) }
          S   e:f32[3] = cos b              |
          in (d, c, e) }                    |

        With ``jax.checkpoint``, only ``x`` is kept and the backward pass computes both
        cosines (and the inner ``sin``) again:

        >>> view = fwd_bwd(jax.checkpoint(f), jnp.ones(3))
        >>> view.saved, view.recomputed
        ((), ('sin', 'cos', 'cos'))
    """
    validation.callable_arg(f, "f")
    differentiated = check_arguments(f, args, kwargs, argnums)
    fwd, out_shape, vjp_shape = trace_vjp(f, args, kwargs, differentiated)
    validation.check_outputs(out_shape, "f")
    res_specs, vjp_tree = jax.tree_util.tree_flatten(vjp_shape)
    ct_specs, ct_tree = jax.tree_util.tree_flatten(out_shape)

    def apply_vjp(*flat):
        vjp_fun = jax.tree_util.tree_unflatten(vjp_tree, flat[:len(res_specs)])
        return vjp_fun(jax.tree_util.tree_unflatten(ct_tree, flat[len(res_specs):]))

    bwd = jax.make_jaxpr(apply_vjp)(*res_specs, *ct_specs).jaxpr

    return _view(fwd, bwd, len(res_specs), len(ct_specs))
