"""The forward and backward computations of a function, side by side, with recomputation marked."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import numpy as np

from remat_guide import _validation as validation
from remat_guide._jax_internals import scan_operands
from remat_guide._tracing import check_arguments, trace_vjp

__all__ = ["FwdBwd", "Line", "fwd_bwd"]

SAVED = "saved"
RECOMPUTED = "recomputed"
_GUTTER = {SAVED: "S ", RECOMPUTED: "R ", "": "  "}
# The HTML view takes its colours from the page's theme (sphinx-book-theme's light and
# dark variables), with fallbacks for a notebook without them. Lines wrap rather than
# scroll, and the two halves stack when the view is narrower than about 44em.
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
)
_RICH_STYLES = {SAVED: "bold blue", RECOMPUTED: "bold dark_orange"}
_LEGEND = "S = kept for the backward pass (a residual)    R = recomputed by the backward pass"
_PLAIN_PARAM_TYPES = (bool, int, float, str, type(None), np.dtype)
_MAX_PARAM_CHARS = 60


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a rendered jaxpr.

    Attributes:
        text: The line, without indentation.
        depth: How deeply the line is nested in sub-computations (0 at the top).
        primitive: The primitive of the equation on this line; empty for the lines
            that open or close a jaxpr.
        mark: ``"saved"`` for a forward equation whose output is a residual,
            ``"recomputed"`` for a backward equation that recomputes a forward value,
            else empty.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If ``depth`` is negative or ``mark`` is unknown.
    """

    text: str
    depth: int = 0
    primitive: str = ""
    mark: str = ""

    def __post_init__(self) -> None:
        for field in ("text", "primitive", "mark"):
            validation.string(getattr(self, field), f"Line.{field}")
        object.__setattr__(self, "depth", validation.integer(self.depth, "Line.depth", minimum=0))
        if self.mark not in _GUTTER:
            raise ValueError(f"Line.mark must be one of {tuple(_GUTTER)}, got {self.mark!r}")


class FwdBwd:
    """The forward and backward computations of a function's VJP, as returned by :func:`fwd_bwd`.

    Printing it shows the two jaxprs side by side as plain text; in a notebook it renders
    as an HTML table; ``rich.print`` renders it in colour. Lines of the forward pass that
    produce a residual are marked ``S``, lines of the backward pass that recompute a
    value of the forward pass are marked ``R``.

    Attributes:
        forward: The lines of the forward computation.
        backward: The lines of the backward computation.

    Raises:
        TypeError: If ``forward`` or ``backward`` is not an iterable of :class:`~remat_guide.fwd_bwd.Line`.
    """

    def __init__(self, forward: Iterable[Line], backward: Iterable[Line]) -> None:
        self.forward = tuple(validation.iterable(forward, "forward", what="Line values"))
        self.backward = tuple(validation.iterable(backward, "backward", what="Line values"))
        for name, lines in (("forward", self.forward), ("backward", self.backward)):
            for line in lines:
                if not isinstance(line, Line):
                    raise TypeError(f"{name} must hold Line values, got {type(line).__name__}")

    @property
    def saved(self) -> tuple[str, ...]:
        """The primitives of the forward equations whose outputs are residuals, in order."""
        return tuple(line.primitive for line in self.forward if line.mark == SAVED)

    @property
    def recomputed(self) -> tuple[str, ...]:
        """The primitives of the backward equations that recompute forward values, in order."""
        return tuple(line.primitive for line in self.backward if line.mark == RECOMPUTED)

    def _rows(self) -> Iterator[tuple[Line | None, Line | None]]:
        for i in range(max(len(self.forward), len(self.backward))):
            yield (self.forward[i] if i < len(self.forward) else None,
                   self.backward[i] if i < len(self.backward) else None)

    def __str__(self) -> str:
        def cell(line: Line | None) -> str:
            if line is None:
                return ""
            return _GUTTER[line.mark] + "  " * line.depth + line.text

        left = ["forward computation:", *(cell(f) for f, _ in self._rows())]
        right = ["backward computation:", *(cell(b) for _, b in self._rows())]
        width = max(len(text) for text in left)
        body = "\n".join(f"{a.ljust(width)}  |  {b}".rstrip() for a, b in zip(left, right))
        return f"{_LEGEND}\n\n{body}"

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        def column(title: str, lines: Sequence[Line]) -> str:
            out = []
            for line in lines:
                text = html.escape(_GUTTER[line.mark] + "  " * line.depth + line.text)
                # A wrapped line continues 4 characters to the right of where its text starts.
                indent = f'style="--indent:{len(_GUTTER[line.mark]) + 2 * line.depth + 4}ch"'
                if line.mark:
                    out.append(f'<div class="remat-{line.mark}" title="{line.mark}" {indent}>{text}</div>')
                else:
                    out.append(f"<div {indent}>{text}</div>")
            return (f'<div><div class="remat-fb-title">{title}</div>'
                    f'<div class="remat-fb-code">{"".join(out)}</div></div>')

        legend = " ".join(f'<span class="remat-{m}">{_GUTTER[m].strip()} = {m}</span>'
                          for m in (SAVED, RECOMPUTED))
        return (f"<style>{_CSS}</style>"
                f'<div class="remat-fwd-bwd"><p class="remat-fb-legend">{legend}</p>'
                f'<div class="remat-fb-columns">{column("forward computation", self.forward)}'
                f'{column("backward computation", self.backward)}</div></div>')

    def __rich__(self) -> Any:
        """A ``rich`` table of the two columns, for ``rich.print`` in a terminal."""
        from rich.table import Table
        from rich.text import Text

        def column(lines: Sequence[Line]) -> Text:
            text = Text()
            for i, line in enumerate(lines):
                if i:
                    text.append("\n")
                text.append(_GUTTER[line.mark] + "  " * line.depth + line.text,
                            style=_RICH_STYLES.get(line.mark, ""))
            return text

        table = Table(title=_LEGEND, show_lines=False)
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


def _render(jaxpr: jcore.Jaxpr, names: _Names, marks: dict[int, str], depth: int,
            out: list[Line]) -> None:
    invars = " ".join(names.typed(v) for v in jaxpr.invars)
    out.append(Line(f"{{ lambda ; {invars}. let", depth))
    for eqn in jaxpr.eqns:
        ins = " ".join(names(v) for v in eqn.invars)
        outs = " ".join(names.typed(v) if not isinstance(v, jcore.DropVar) else "_"
                        for v in eqn.outvars)
        text = f"{eqn.primitive.name}{_param_text(eqn.primitive.name, eqn.params)} {ins}".rstrip()
        text = f"{outs} = {text}" if outs else text
        out.append(Line(text, depth + 1, eqn.primitive.name, marks.get(id(eqn), "")))
        for key, value in eqn.params.items():
            values = value if isinstance(value, (tuple, list)) else (value,)
            for sub in filter(None, map(_inner_jaxpr, values)):
                out.append(Line(f"{key}=", depth + 2))
                _render(sub, names, marks, depth + 3, out)
    results = ", ".join(names(v) for v in jaxpr.outvars)
    out.append(Line(f"in ({results}) }}", depth))


# --- the public function ----------------------------------------------------------------


def fwd_bwd(f: Callable, /, *args: Any, argnums: int | Sequence[int] | None = None, **kwargs: Any) -> FwdBwd:
    """Shows the forward and backward computations of ``jax.vjp(f, ...)`` side by side.

    The forward computation is the jaxpr of ``jax.vjp`` of ``f`` with respect to the
    arguments that ``argnums`` chooses (by default all of them): it returns ``f``'s output
    and the residuals. The backward computation is the jaxpr of the VJP
    function applied to an output cotangent: its inputs are the residuals, then the
    cotangent. Two kinds of equations are marked:

    * ``S`` (saved), in the forward computation: an equation whose output is a residual.
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

    residual_vars = {v for v in fwd.outvars[len(fwd.outvars) - len(res_specs):]
                     if isinstance(v, jcore.Var)}
    fwd_marks = {id(eqn): SAVED for eqn in fwd.eqns
                 if any(v in residual_vars for v in eqn.outvars)}
    bwd_marks: dict[int, str] = {}
    in_flags = [(False, True)] * len(res_specs) + [(True, False)] * len(ct_specs)
    _analyse(bwd, in_flags, bwd_marks)

    forward: list[Line] = []
    backward: list[Line] = []
    _render(fwd, _Names(), fwd_marks, 0, forward)
    _render(bwd, _Names(), bwd_marks, 0, backward)
    return FwdBwd(forward, backward)
