"""A figure of what checkpoint policies keep, offload and recompute of a function's values."""

from __future__ import annotations

import dataclasses
import html
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core as jcore
import pandas as pd

from remat_guide import _validation as validation
from remat_guide._labels import policy_label
from remat_guide._measure import standard_policy
from remat_guide._provenance import user_location
from remat_guide._tracing import argument_names, check_arguments, trace_vjp
from remat_guide.fwd_bwd import RECOMPUTED as RECOMPUTED_MARK
from remat_guide.fwd_bwd import fwd_bwd
from remat_guide.residuals import Residual, saved_residuals
from remat_guide.tables import unit_for

__all__ = ["FATES", "KEPT", "NOT_NEEDED", "OFFLOADED", "RECOMPUTED", "Lane", "PolicyDiagram", "Value",
           "policy_diagram"]

KEPT = "kept"
OFFLOADED = "offloaded"
RECOMPUTED = "recomputed"
NOT_NEEDED = "not needed"
#: What a policy does with a value of the forward pass, in the order the legend lists them.
FATES = (KEPT, OFFLOADED, RECOMPUTED, NOT_NEEDED)
VALUE_KINDS = ("argument", "primitive", "named", "constant", "carry")

# Long primitive names shortened for the figure's boxes; the data keep the full name.
_SHORT = {
    "dot_general": "dot",
    "one_minus_square": "1−x²",
    "reduce_sum": "sum",
    "reduce_max": "max",
    "reduce_min": "min",
    "broadcast_in_dim": "broadcast",
    "conv_general_dilated": "conv",
    "convert_element_type": "convert",
    "integer_pow": "pow",
    "dynamic_slice": "slice",
    "dynamic_update_slice": "update",
}
_NAME_PRIMITIVES = ("CheckpointName", "CheckpointNameFwd")


@dataclasses.dataclass(frozen=True)
class Value:
    """One value of a function's forward pass: a column of the diagram.

    Attributes:
        label: A short name, unique in its diagram: the argument's name, the
            ``checkpoint_name`` tag, or the primitive (``dot`` for ``dot_general``),
            followed by ``#2``, ``#3`` ... for a second and third value of that name.
        kind: ``"argument"``, ``"primitive"``, ``"named"`` (the output of a primitive that
            the function tags with ``checkpoint_name``), ``"constant"`` or ``"carry"``, as
            in :class:`~remat_guide.Residual`.
        name: The argument's name, the primitive's name, the tag, or what
            :class:`~remat_guide.Residual` names a constant or a carry.
        type: The value's type in JAX's short notation, such as ``f32[2,4]`` (for a value
            computed in a loop body, one iteration's).
        nbytes: Its size in bytes (one iteration's).
        location: Where the user's code computes it, as ``file:line (function)``; empty
            for arguments, constants and carries.
    """

    label: str
    kind: str
    name: str
    type: str
    nbytes: int
    location: str = ""

    def __post_init__(self) -> None:
        for field in ("label", "kind", "name", "type", "location"):
            validation.string(getattr(self, field), f"Value.{field}")
        object.__setattr__(self, "nbytes", validation.integer(self.nbytes, "Value.nbytes", minimum=0))
        if self.kind not in VALUE_KINDS:
            raise ValueError(f"Value.kind must be one of {VALUE_KINDS}, got {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class Lane:
    """What one policy does with each value: a row of the diagram.

    Attributes:
        label: The policy's label (a key of ``policies``).
        policy: The policy's name (:func:`~remat_guide.policy_label`), or ``""`` for no
            checkpoint.
        fates: One of :data:`~remat_guide.diagram.FATES` per value of the diagram, in its order.
        in_forward: Per value, whether the forward pass computes it (an argument is
            always there). With ``jax.checkpoint`` the forward pass computes only what
            the function's output needs and what the policy keeps.
        device_bytes: The size of all residuals kept in device memory (as
            :func:`~remat_guide.saved_residuals` counts them, loops stacked).
        host_bytes: The size of all residuals offloaded to host memory.

    Raises:
        TypeError: If a field has the wrong type.
        ValueError: If a fate is unknown, ``fates`` and ``in_forward`` differ in length or
            a size is negative.
    """

    label: str
    policy: str
    fates: tuple[str, ...]
    in_forward: tuple[bool, ...]
    device_bytes: int = 0
    host_bytes: int = 0

    def __post_init__(self) -> None:
        validation.string(self.label, "Lane.label")
        validation.string(self.policy, "Lane.policy")
        fates = tuple(validation.string(f, "Lane.fates")
                      for f in validation.iterable(self.fates, "Lane.fates", what="strings"))
        for fate in fates:
            if fate not in FATES:
                raise ValueError(f"Lane.fates must hold values of {FATES}, got {fate!r}")
        in_forward = tuple(validation.boolean(b, "Lane.in_forward")
                           for b in validation.iterable(self.in_forward, "Lane.in_forward", what="bools"))
        if len(in_forward) != len(fates):
            raise ValueError(f"Lane.in_forward must have one entry per fate ({len(fates)}), got {len(in_forward)}")
        object.__setattr__(self, "fates", fates)
        object.__setattr__(self, "in_forward", in_forward)
        for field in ("device_bytes", "host_bytes"):
            object.__setattr__(self, field, validation.integer(getattr(self, field), f"Lane.{field}", minimum=0))

    def count(self, fate: str) -> int:
        """How many values have ``fate``."""
        if fate not in FATES:
            raise ValueError(f"fate must be one of {FATES}, got {fate!r}")
        return self.fates.count(fate)


class PolicyDiagram:
    """What a few policies do with the values of one function, as data and as an SVG figure.

    Returned by :func:`~remat_guide.policy_diagram`. In a notebook it shows as the figure; printed, as a
    grid of letters (``K`` kept, ``O`` offloaded, ``R`` recomputed, ``-`` not needed).

    Attributes:
        values: The columns: the values that at least one policy keeps, offloads or
            recomputes, arguments first, then in program order.
        lanes: The rows: one :class:`~remat_guide.diagram.Lane` per policy, in the order given.
        omitted: The labels of the values that the forward pass computes but no policy
            keeps or recomputes (such as the function's output); not drawn.

    Raises:
        TypeError: If ``values`` does not hold :class:`~remat_guide.diagram.Value`,
            ``lanes`` :class:`~remat_guide.diagram.Lane`, or ``omitted`` strings.
        ValueError: If a lane has not one fate per value, or two values or two lanes
            share a label.
    """

    def __init__(self, values: Iterable[Value], lanes: Iterable[Lane], omitted: Iterable[str] = ()) -> None:
        self.values = tuple(validation.iterable(values, "values", what="Value objects"))
        self.lanes = tuple(validation.iterable(lanes, "lanes", what="Lane objects"))
        self.omitted = tuple(validation.string(o, "omitted")
                             for o in validation.iterable(omitted, "omitted", what="strings"))
        for name, items, kind in (("values", self.values, Value), ("lanes", self.lanes, Lane)):
            labels = []
            for item in items:
                if not isinstance(item, kind):
                    raise TypeError(f"{name} must hold {kind.__name__} objects, got {type(item).__name__}")
                labels.append(item.label)
            twice = sorted({label for label in labels if labels.count(label) > 1})
            if twice:
                raise ValueError(f"{name} must have distinct labels, got {twice[0]!r} twice")
        for lane in self.lanes:
            if len(lane.fates) != len(self.values):
                raise ValueError(f"lanes: lane {lane.label!r} has {len(lane.fates)} fates for "
                                 f"{len(self.values)} values")

    def fate(self, lane: str, value: str) -> str:
        """What the policy labelled ``lane`` does with the value labelled ``value``.

        Raises:
            KeyError: If no lane or no value has that label.
        """
        lanes = {item.label: item for item in self.lanes}
        columns = {item.label: index for index, item in enumerate(self.values)}
        if lane not in lanes:
            raise KeyError(f"no lane {lane!r}; the lanes: {', '.join(map(repr, lanes))}")
        if value not in columns:
            raise KeyError(f"no value {value!r}; the values: {', '.join(map(repr, columns))}")
        return lanes[lane].fates[columns[value]]

    def fates(self, lane: str) -> dict[str, str]:
        """The fate of every value under the policy labelled ``lane``, by value label."""
        return {value.label: self.fate(lane, value.label) for value in self.values}

    def to_pandas(self) -> pd.DataFrame:
        """One row per (policy, value): the columns ``policy``, ``value``, ``kind``, ``name``,
        ``type``, ``bytes``, ``fate`` and ``in_forward``."""
        rows = [(lane.label, value.label, value.kind, value.name, value.type, value.nbytes, fate, forward)
                for lane in self.lanes
                for value, fate, forward in zip(self.values, lane.fates, lane.in_forward)]
        return pd.DataFrame(rows, columns=["policy", "value", "kind", "name", "type", "bytes", "fate",
                                           "in_forward"])

    def to_svg(self) -> str:
        """The figure as SVG text (the same text on every call and every run)."""
        return _svg(self)

    @property
    def svg(self) -> str:
        """Returns the figure as SVG text, the same as :meth:`~remat_guide.PolicyDiagram.to_svg`."""
        return self.to_svg()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the figure to ``path`` as an SVG file (UTF-8).

        Raises:
            TypeError: If ``path`` is neither a str nor a path.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
        with open(path, "w", encoding="utf-8") as file:
            file.write(self.to_svg())

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def __str__(self) -> str:
        letters = {KEPT: "K", OFFLOADED: "O", RECOMPUTED: "R", NOT_NEEDED: "-"}
        first = max([len("policy"), *(len(lane.label) for lane in self.lanes)])
        widths = [max(len(value.label), 1) for value in self.values]
        rows = ["policy".ljust(first) + "".join(f"  {v.label.ljust(w)}" for v, w in zip(self.values, widths))]
        for lane in self.lanes:
            rows.append(lane.label.ljust(first)
                        + "".join(f"  {letters[f].ljust(w)}" for f, w in zip(lane.fates, widths)))
        legend = "K kept, O offloaded to host, R recomputed, - not needed"
        return "\n".join([legend, *(row.rstrip() for row in rows)])

    def __repr__(self) -> str:
        return str(self)


# --- the values of a forward pass --------------------------------------------------------


def _is_name(eqn: Any) -> str | None:
    """The tag of a ``checkpoint_name`` equation, else None."""
    if eqn.primitive.name == "name":
        return eqn.params["name"]
    hi_prim = eqn.params.get("_prim")
    if type(hi_prim).__name__ in _NAME_PRIMITIVES:
        return hi_prim.params["name"]
    return None


def _leaf_equations(jaxpr: Any) -> Iterator[Any]:
    """The equations of a jaxpr that apply a primitive, inside its calls, loops and branches, in order."""
    for eqn in jaxpr.eqns:
        inner = list(jcore.jaxprs_in_params(eqn.params))
        if inner:
            for sub in inner:
                yield from _leaf_equations(sub)
        else:
            yield eqn


def _key(primitive: str, location: str, shape: Sequence[int], dtype: Any) -> tuple[Any, ...]:
    return (primitive, location, tuple(shape), str(validation.dtype_of(dtype)))


@dataclasses.dataclass
class _Column:
    kind: str
    name: str
    primitive: str
    shape: tuple[int, ...]
    dtype: Any
    location: str = ""

    @property
    def key(self) -> tuple[Any, ...]:
        return _key(self.primitive, self.location, self.shape, self.dtype)


def _short_type(shape: Sequence[int], dtype: Any) -> str:
    return jax.core.ShapedArray(tuple(shape), dtype).str_short(short_dtypes=True)


def _columns(jaxpr: Any, names: Sequence[str]) -> list[_Column]:
    """The values of a forward pass (a traced VJP without checkpoint): arguments, then each equation's outputs.

    A ``checkpoint_name`` equation names the value it passes on instead of adding one.
    """
    columns = [_Column("argument", name, "", tuple(var.aval.shape), var.aval.dtype)
               for var, name in zip(jaxpr.invars, names)]
    produced: dict[Any, _Column] = {}
    for eqn in _leaf_equations(jaxpr):
        tag = _is_name(eqn)
        if tag is not None:
            source = eqn.invars[0] if eqn.invars else None
            if source in produced and produced[source].kind == "primitive":
                produced[source].kind, produced[source].name = "named", repr(tag)
                for out in eqn.outvars:
                    produced[out] = produced[source]
                continue
        location = user_location(eqn.source_info)
        for var in eqn.outvars:
            aval = var.aval
            if isinstance(var, jcore.DropVar) or not hasattr(aval, "shape"):
                continue
            if tag is not None:
                column = _Column("named", repr(tag), eqn.primitive.name, tuple(aval.shape), aval.dtype, location)
            else:
                column = _Column("primitive", eqn.primitive.name, eqn.primitive.name, tuple(aval.shape),
                                 aval.dtype, location)
            produced[var] = column
            columns.append(column)
    return columns


class _Claims:
    """Finds the columns that values of another trace stand for: the first unclaimed one with the same key."""

    def __init__(self, columns: Sequence[_Column]) -> None:
        self._columns = columns
        self.claimed: set[int] = set()

    def claim(self, match: Callable[[_Column], bool], skip: set[int] = frozenset()) -> int | None:
        for index, column in enumerate(self._columns):
            if index not in self.claimed and index not in skip and match(column):
                self.claimed.add(index)
                return index
        return None


def _residual_match(residual: Residual) -> Callable[[_Column], bool]:
    shape = residual.per_iteration_shape
    if residual.kind == "argument":
        return lambda c: c.kind == "argument" and c.name == residual.name
    if residual.kind == "named":
        return lambda c: c.kind == "named" and c.name == residual.name
    if residual.kind == "primitive":
        key = _key(residual.name, residual.location, shape, residual.dtype)
        return lambda c: c.kind != "argument" and c.key == key
    return lambda c: c.kind == residual.kind and c.name == residual.name and c.shape == shape


def _leaf_lines(lines: Sequence[Any]) -> Iterator[Any]:
    """The lines of a :class:`~remat_guide.FwdBwd` listing that apply a primitive (not those that call a jaxpr)."""
    for index, line in enumerate(lines):
        if not line.primitive:
            continue
        following = lines[index + 1] if index + 1 < len(lines) else None
        opens_jaxpr = (following is not None and not following.primitive and following.text.endswith("=")
                       and following.depth == line.depth + 1)
        if not opens_jaxpr:
            yield line


@dataclasses.dataclass
class _LaneData:
    label: str
    policy: str
    fates: dict[int, str]
    in_forward: set[int]
    device_bytes: int
    host_bytes: int


def _lane(label: str, policy: Any, fn: Callable, args: tuple, kwargs: dict, argnums: Any,
          differentiated: list[bool], columns: list[_Column]) -> _LaneData:
    """What ``policy`` (None: no checkpoint) does with each column."""
    if policy is None:
        g = fn
    else:
        g = jax.checkpoint(fn, policy=validation.PolicyProbe(policy, f"policies[{label!r}]"))
    residuals = saved_residuals(g, *args, argnums=argnums, **kwargs)
    fates: dict[int, str] = {}
    kept = _Claims(columns)
    for residual in residuals:
        index = kept.claim(_residual_match(residual))
        if index is None:  # a constant, a carry, or a value this trace alone computes: a new column
            primitive = residual.name if residual.kind == "primitive" else ""
            columns.append(_Column(residual.kind, residual.name, primitive, residual.per_iteration_shape,
                                   residual.dtype, residual.location))
            index = len(columns) - 1
            kept.claimed.add(index)
        fates[index] = OFFLOADED if residual.memory == "host" else KEPT

    # What the backward pass computes again, matched in order among the values not kept.
    recomputed = _Claims(columns)
    for line in _leaf_lines(fwd_bwd(g, *args, argnums=argnums, **kwargs).backward):
        if line.mark != RECOMPUTED_MARK:
            continue
        index = recomputed.claim(lambda c, p=line.primitive: c.primitive == p, skip=set(fates))
        if index is not None:
            fates[index] = RECOMPUTED

    # What the forward pass computes.
    if policy is None:
        in_forward = set(range(len(columns)))
    else:
        jaxpr, _, _ = trace_vjp(g, args, kwargs, differentiated)
        computed = _Claims(columns)
        in_forward = {i for i, c in enumerate(columns) if c.kind == "argument"} | set(
            i for i, f in fates.items() if f in (KEPT, OFFLOADED))
        for eqn in _leaf_equations(jaxpr):
            if _is_name(eqn) is not None:
                continue
            location = user_location(eqn.source_info)
            for var in eqn.outvars:
                if isinstance(var, jcore.DropVar) or not hasattr(var.aval, "shape"):
                    continue
                key = _key(eqn.primitive.name, location, var.aval.shape, var.aval.dtype)
                index = computed.claim(lambda c, k=key: c.key == k)
                if index is not None:
                    in_forward.add(index)
    device = sum(r.nbytes for r in residuals if r.memory != "host")
    host = sum(r.nbytes for r in residuals if r.memory == "host")
    return _LaneData(label, "" if policy is None else policy_label(policy), fates, in_forward, device, host)


def _labels(columns: Sequence[_Column]) -> list[str]:
    labels = []
    for column in columns:
        if column.kind == "named":
            base = column.name.strip("'\"")
        elif column.kind == "primitive":
            base = _SHORT.get(column.name, column.name)
        else:
            base = column.name
        label, n = base, 1
        while label in labels:
            n += 1
            label = f"{base}#{n}"
        labels.append(label)
    return labels


def _default_policies() -> dict[str, Any]:
    P = jax.checkpoint_policies
    return {
        "no checkpoint": None,
        "nothing_saveable": P.nothing_saveable,
        "dots_saveable": P.dots_saveable,
        "offload_dot_with_no_batch_dims": P.offload_dot_with_no_batch_dims("device", "pinned_host"),
    }


def _as_policies(policies: Any) -> dict[str, Any]:
    """``policies`` as a dict from labels to policies (None for no checkpoint), each checked."""
    if policies is None:
        return _default_policies()
    validation.ordered(policies, "policies")
    if isinstance(policies, Mapping):
        items = list(policies.items())
    elif isinstance(policies, (str, bytes)) or not isinstance(policies, Iterable):
        raise TypeError("policies must be None, a mapping from labels to policies (None for no "
                        f"checkpoint, a name in jax.checkpoint_policies, or a policy) or a sequence "
                        f"of names, got {type(policies).__name__}")
    else:
        items = []
        for name in policies:
            if not isinstance(name, str):
                raise TypeError(f"policies: names must be str, got {type(name).__name__}")
            items.append((name, name))
    if not items:
        raise ValueError("policies must hold at least one policy, got none")
    result: dict[str, Any] = {}
    for label, policy in items:
        if not isinstance(label, str):
            raise TypeError(f"policies: labels must be str, got {type(label).__name__}")
        if label in result:
            raise ValueError(f"policies: {label!r} is given twice")
        if isinstance(policy, str):
            policy = standard_policy(policy)
        elif policy is not None:
            if not callable(policy):
                raise TypeError(f"policies[{label!r}] must be None, a name in jax.checkpoint_policies or "
                                f"a policy (a callable), got {type(policy).__name__}")
            policy = validation.policy(policy, f"policies[{label!r}]")
        result[label] = policy
    return result


def policy_diagram(fn: Callable, /, *args: Any, policies: Any = None, argnums: int | Sequence[int] | None = None,
                   **kwargs: Any) -> PolicyDiagram:
    """Draws what a few checkpoint policies keep, offload and recompute of ``fn``'s values.

    The values are those of ``jax.vjp(fn, ...)``'s forward pass without
    checkpoint: the arguments, then each primitive's output in program order (a value
    tagged with ``checkpoint_name`` goes by its tag). Under each policy, applied as
    ``jax.checkpoint(fn, policy=...)``, each value is:

    * ``"kept"``: a residual in device memory (:func:`~remat_guide.saved_residuals`);
    * ``"offloaded"``: a residual the policy moves to host memory;
    * ``"recomputed"``: computed by the backward pass from what was kept (the ``R``
      lines of :func:`~remat_guide.fwd_bwd`);
    * ``"not needed"``: neither; the backward pass does without it.

    The values of different traces are matched by primitive, source line and type, in
    order. Values that no policy keeps or recomputes are left out of the figure and the
    data (their labels are in ``omitted``). The figure has a lane per policy: the forward
    pass above (a dashed box: a value it does not compute), the backward pass below;
    a kept value crosses from one to the other, an offloaded one passes through host
    memory. Seven values fit in 710 pixels; each further value widens the figure by 88.
    Nothing is executed: ``fn`` is only traced, so arguments may be
    ``jax.ShapeDtypeStruct`` values. A function with many values makes a wide figure:
    draw a small one, such as one layer, to see what a policy does.

    Args:
        fn: The function to differentiate (positional only). Its arguments may be
            pytrees; its output must be floating-point arrays.
        *args: Positional arguments for ``fn``: arrays, pytrees of arrays, numbers, or
            ``jax.ShapeDtypeStruct`` values.
        policies: The lanes: a mapping from labels to policies, where a policy is
            ``None`` (no checkpoint), the name of a policy in ``jax.checkpoint_policies``
            or a policy itself; or a sequence of names, each its own label. ``None`` (the
            default) for no checkpoint, ``nothing_saveable``, ``dots_saveable`` and
            ``offload_dot_with_no_batch_dims("device", "pinned_host")``.
        argnums: Which arguments are differentiated, as for
            :func:`~remat_guide.saved_residuals` (``None``: all of them).
        **kwargs: Keyword arguments for ``fn``, traced like the positional ones. The
            keywords ``policies`` and ``argnums`` belong to ``policy_diagram``.

    Returns:
        A :class:`~remat_guide.PolicyDiagram`: its ``svg`` is the figure (a notebook
        shows it), its ``values``, ``lanes`` and
        :meth:`~remat_guide.PolicyDiagram.to_pandas` the data.

    Raises:
        TypeError: If ``fn`` is not callable, ``policies`` is not one of the forms above
            (a label not a str, a policy neither None, a str nor a callable, a policy with
            the wrong signature or answering other than True/False), or an argument is
            wrong as for :func:`~remat_guide.saved_residuals`.
        ValueError: If ``policies`` is empty, names a policy that
            ``jax.checkpoint_policies`` does not have (or a factory that needs
            arguments), or an argument is wrong as for
            :func:`~remat_guide.saved_residuals`.

    Examples:
        >>> import jax.numpy as jnp
        >>> from remat_guide import policy_diagram
        >>> def layer(w, x):
        ...     return jnp.sum(jnp.tanh(jnp.sin(x) @ w))
        >>> diagram = policy_diagram(layer, jnp.ones((4, 4)), jnp.ones((2, 4)))
        >>> print(diagram)
        K kept, O offloaded to host, R recomputed, - not needed
        policy                          w  x  sin  cos  dot  tanh  1−x²
        no checkpoint                   K  -  K    K    -    -     K
        nothing_saveable                K  K  R    R    R    R     R
        dots_saveable                   K  K  R    R    K    R     R
        offload_dot_with_no_batch_dims  K  K  R    R    O    R     R
        >>> diagram.fate("dots_saveable", "dot"), diagram.fate("dots_saveable", "sin")
        ('kept', 'recomputed')
        >>> diagram.svg.startswith("<svg")
        True

        A policy may be given by name, and ``None`` stands for no checkpoint:

        >>> print(policy_diagram(layer, jnp.ones((4, 4)), jnp.ones((2, 4)),
        ...                      policies={"none": None, "all": "everything_saveable"}))
        K kept, O offloaded to host, R recomputed, - not needed
        policy  w  sin  cos  1−x²
        none    K  K    K    K
        all     K  K    K    K
    """
    validation.callable_arg(fn, "fn")
    chosen = _as_policies(policies)
    differentiated = check_arguments(fn, args, kwargs, argnums)
    jaxpr, out_shape, _ = trace_vjp(fn, args, kwargs, differentiated, name="fn")
    validation.check_outputs(out_shape, "fn")
    columns = _columns(jaxpr, argument_names(fn, args, kwargs))
    lanes = [_lane(label, policy, fn, args, kwargs, argnums, differentiated, columns)
             for label, policy in chosen.items()]
    labels = _labels(columns)
    shown = [i for i in range(len(columns)) if any(i in lane.fates for lane in lanes)]
    values = [Value(labels[i], columns[i].kind, columns[i].name, _short_type(columns[i].shape, columns[i].dtype),
                    validation.nbytes(columns[i].shape, columns[i].dtype), columns[i].location) for i in shown]
    rows = [Lane(lane.label, lane.policy, tuple(lane.fates.get(i, NOT_NEEDED) for i in shown),
                 tuple(i in lane.in_forward for i in shown), lane.device_bytes, lane.host_bytes) for lane in lanes]
    omitted = [labels[i] for i in range(len(columns)) if i not in shown and columns[i].kind != "argument"]
    return PolicyDiagram(values, rows, omitted)


# --- the figure ------------------------------------------------------------------------------

_FONT = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
_INK = "#1f2328"
_MUTED = "#57606a"
# Fill, edge and letter of each fate: mid-tones of the theme's success, info and warning
# colours, dark enough to show on white and to survive the site's dark-mode inversion.
_STYLE = {
    KEPT: ("#9fd5b3", "#00843f", "K"),
    OFFLOADED: ("#a9c3f2", "#1457d3", "O"),
    RECOMPUTED: ("#f4bf8f", "#d25a07", "R"),
    NOT_NEEDED: ("#ffffff", "#8c959f", "–"),
}
_LEGEND_TEXT = {KEPT: "kept", OFFLOADED: "offloaded to host", RECOMPUTED: "recomputed",
                NOT_NEEDED: "not needed"}
_FORWARD_FILL = "#e6e8eb"

_MARGIN = 12
_GUTTER = 80          # the row names, left of the boxes
_COLUMN = 88          # one value
_BOX_W, _BOX_H = 78, 36
_TITLE_H = 30
_BASELINE = 24        # of a box's text, below its top
_GAP = 36             # between the forward and the backward row
_LANE_GAP = 16
_MAX_CHARS = 7        # longer labels are cut short in a box
_CHAR = 0.62          # the width of a character, in font sizes (for laying out the legend)
_MIN_WIDTH = 560


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def _text(x: float, y: float, text: str, size: int, *, anchor: str = "start", weight: str = "normal",
          fill: str = _INK) -> str:
    bold = ' font-weight="bold"' if weight == "bold" else ""
    return (f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{bold}>'
            f"{html.escape(text, quote=False)}</text>")


def _box_label(label: str) -> str:
    return label if len(label) <= _MAX_CHARS else label[:_MAX_CHARS - 1] + "…"


def _format_bytes(n: int) -> str:
    unit, size = unit_for([n], "bytes")
    return f"{n:,} B" if size == 1 else f"{n / size:.3g} {unit}"


def _swatch(fill: str, edge: str, *, dashed: bool = False, letter: str = "") -> list[str]:
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    parts = [f'<rect x="0" y="0" width="26" height="24" rx="3" fill="{fill}" stroke="{edge}" '
             f'stroke-width="1.5"{dash}/>']
    if letter:
        parts.append(_text(13, 18, letter, 16, anchor="middle", weight="bold"))
    return parts


def _legend(width: float, y: float) -> tuple[list[str], float]:
    """The legend's elements, laid out in rows that fit ``width``; returns them and the height used."""
    size = 15
    items = [(_LEGEND_TEXT[fate], _swatch(_STYLE[fate][0], _STYLE[fate][1], dashed=fate == NOT_NEEDED,
                                          letter=_STYLE[fate][2])) for fate in FATES]
    items.append(("computed forward", _swatch(_FORWARD_FILL, _MUTED)))
    items.append(("not computed forward", _swatch("none", _MUTED, dashed=True)))
    out = ['<g class="legend">']
    x, row_y = 0.0, y
    for text, parts in items:
        w = 34 + len(text) * size * _CHAR
        if x and x + w > width:
            x, row_y = 0.0, row_y + 32
        out.append(f'<g transform="translate({_MARGIN + x:g},{row_y:g})">' + "".join(parts)
                   + _text(34, 18, text, size) + "</g>")
        x += w + 20
    out.append("</g>")
    return out, row_y + 32 - y


def _cell(lane: Lane, value: Value, fate: str, forward: bool, bx: float, forward_y: float,
          backward_y: float) -> list[str]:
    """One value under one policy: its box in the forward row, its box in the backward row, the link between."""
    fill, edge, letter = _STYLE[fate]
    cx = bx + _BOX_W / 2
    label = _box_label(value.label)
    out = [f'<g class="cell fate-{fate.replace(" ", "-")}" data-policy="{_attr(lane.label)}" '
           f'data-value="{_attr(value.label)}" data-fate="{fate}">',
           f"<title>{html.escape(f'{lane.label}: {value.label} ({value.type}) {fate}')}</title>"]
    box = f'x="{bx:g}" width="{_BOX_W}" height="{_BOX_H}" rx="4"'
    if forward:
        out.append(f'<rect {box} y="{forward_y:g}" fill="{_FORWARD_FILL}" stroke="{_MUTED}" stroke-width="1"/>')
        out.append(_text(cx, forward_y + _BASELINE, label, 17, anchor="middle"))
    else:
        out.append(f'<rect {box} y="{forward_y:g}" fill="none" stroke="{_MUTED}" stroke-width="1.5" '
                   'stroke-dasharray="4 3"/>')
        out.append(_text(cx, forward_y + _BASELINE, label, 17, anchor="middle", fill=_MUTED))
    top, bottom = forward_y + _BOX_H, backward_y
    if fate == KEPT:
        out.append(f'<line x1="{cx:g}" y1="{top:g}" x2="{cx:g}" y2="{bottom:g}" stroke="{edge}" stroke-width="4"/>')
    elif fate == OFFLOADED:
        chip_y = top + 6
        chip_h = bottom - top - 12
        out.append(f'<line x1="{cx:g}" y1="{top:g}" x2="{cx:g}" y2="{bottom:g}" stroke="{edge}" stroke-width="4" '
                   'stroke-dasharray="5 3"/>')
        out.append(f'<rect x="{bx + 10:g}" y="{chip_y:g}" width="{_BOX_W - 20}" height="{chip_h:g}" rx="3" '
                   f'fill="url(#remat-host)" stroke="{edge}" stroke-width="1.5"/>')
        out.append(_text(cx, chip_y + chip_h / 2 + 5, "host", 14, anchor="middle", weight="bold", fill=edge))
    if fate == NOT_NEEDED:
        out.append(_text(cx, backward_y + _BASELINE, letter, 18, anchor="middle", fill=_MUTED))
    else:
        out.append(f'<rect {box} y="{backward_y:g}" fill="{fill}" stroke="{edge}" stroke-width="2"/>')
        text = f"{letter} {label}" if len(label) <= 5 else letter
        out.append(_text(cx, backward_y + _BASELINE, text, 17, anchor="middle", weight="bold"))
    out.append("</g>")
    return out


def _svg(diagram: PolicyDiagram) -> str:
    n = len(diagram.values)
    width = max(2 * _MARGIN + _GUTTER + n * _COLUMN - (_COLUMN - _BOX_W), _MIN_WIDTH)
    body: list[str] = []
    legend, used = _legend(width - 2 * _MARGIN, _MARGIN)
    body += legend
    y = _MARGIN + used + 10
    x0 = _MARGIN + _GUTTER
    for lane in diagram.lanes:
        body.append(f'<g class="lane" data-policy="{_attr(lane.label)}">')
        body.append(_text(_MARGIN, y + 21, lane.label, 18, weight="bold"))
        summary = f"keeps {_format_bytes(lane.device_bytes)}"
        if lane.host_bytes:
            summary += f" + {_format_bytes(lane.host_bytes)} on host"
        body.append(_text(width - _MARGIN, y + 21, summary, 15, anchor="end", fill=_MUTED))
        forward_y = y + _TITLE_H
        backward_y = forward_y + _BOX_H + _GAP
        body.append(_text(_MARGIN, forward_y + _BASELINE, "forward", 15, fill=_MUTED))
        body.append(_text(_MARGIN, backward_y + _BASELINE, "backward", 15, fill=_MUTED))
        for column, (value, fate, forward) in enumerate(zip(diagram.values, lane.fates, lane.in_forward)):
            body += _cell(lane, value, fate, forward, x0 + column * _COLUMN, forward_y, backward_y)
        body.append("</g>")
        y = backward_y + _BOX_H + _LANE_GAP
    if diagram.omitted:
        text = "Not needed by any policy, not drawn: " + ", ".join(diagram.omitted)
        limit = int((width - 2 * _MARGIN) / (14 * _CHAR))
        body.append(_text(_MARGIN, y + 8, text if len(text) <= limit else text[:limit - 1] + "…", 14, fill=_MUTED))
        y += 22
    height = y - _LANE_GAP + _MARGIN + (8 if diagram.omitted else 0)
    fates = ", ".join(_LEGEND_TEXT[f] for f in FATES)
    title = (f"What {len(diagram.lanes)} checkpoint policies do with {n} values of the forward pass "
             f"({fates})")
    defs = ('<defs><pattern id="remat-host" width="8" height="8" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="8" height="8" fill="#ffffff"/>'
            f'<line x1="0" y1="0" x2="0" y2="8" stroke="{_STYLE[OFFLOADED][0]}" stroke-width="4"/></pattern></defs>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
            f'viewBox="0 0 {width:g} {height:g}" font-family="{_FONT}" role="img">'
            f"<title>{html.escape(title)}</title>{defs}"
            f'<rect width="{width:g}" height="{height:g}" fill="#ffffff"/>'
            + "".join(body) + "</svg>\n")
