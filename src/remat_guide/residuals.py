"""What a function's backward pass keeps from its forward pass, as data."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core
import jax.extend.source_info_util
import pandas as pd

from remat_guide import _validation as validation
from remat_guide._tracing import argument_names, check_arguments, trace_vjp
from remat_guide.tables import Table

__all__ = ["Residual", "Residuals", "saved_residuals"]

# Notebook cells are compiled from files like /tmp/ipykernel_12345/678.py, whose folder
# changes with every kernel, or "<cell N>" under remat_guide.site.page_setup: both show as "<cell>".
_NOTEBOOK_CELL = re.compile(r"ipykernel_\d+|^<cell \d+>$")

RESIDUAL_KINDS = ("argument", "named", "primitive", "constant")
MEMORIES = ("device", "host")


@dataclasses.dataclass(frozen=True)
class Residual:
    """One value that the forward pass keeps for the backward pass.

    Attributes:
        shape: The value's shape.
        dtype: The value's dtype (a NumPy dtype, or JAX's dtype of a typed PRNG key).
        kind: ``"argument"`` (an input of the function), ``"named"`` (a value tagged
            with ``jax.ad_checkpoint.checkpoint_name``), ``"primitive"`` (the output of
            a primitive) or ``"constant"`` (a constant captured by the function).
        name: The argument's name (with its pytree path), the checkpoint name, or the
            primitive's name.
        location: Where the value was computed, as ``file:line (function)`` with the
            file's base name only (``<cell>`` for a notebook cell), so that it is the
            same on every run; empty for arguments and constants.
        memory: Where the value is kept: ``"device"``, or ``"host"`` for a value that a
            policy offloads (``jax.ad_checkpoint.Offloadable``).

    Raises:
        TypeError: If a field has the wrong type (``shape`` must hold ints).
        ValueError: If a dimension is negative, or ``kind`` or ``memory`` is unknown.
    """

    shape: tuple[int, ...]
    dtype: Any
    kind: str
    name: str
    location: str = ""
    memory: str = "device"

    def __post_init__(self) -> None:
        shape = tuple(validation.integer(d, "Residual.shape", minimum=0)
                      for d in validation.iterable(self.shape, "Residual.shape", what="ints"))
        object.__setattr__(self, "shape", shape)
        try:
            object.__setattr__(self, "dtype", validation.dtype_of(self.dtype))
        except TypeError as error:
            raise TypeError(f"Residual.dtype must be a dtype, got {self.dtype!r}") from error
        for field in ("kind", "name", "location", "memory"):
            validation.string(getattr(self, field), f"Residual.{field}")
        if self.kind not in RESIDUAL_KINDS:
            raise ValueError(f"Residual.kind must be one of {RESIDUAL_KINDS}, got {self.kind!r}")
        if self.memory not in MEMORIES:
            raise ValueError(f"Residual.memory must be one of {MEMORIES}, got {self.memory!r}")

    @property
    def nbytes(self) -> int:
        """Bytes the value occupies (an exact Python int for any shape)."""
        return validation.nbytes(self.shape, self.dtype)

    @property
    def source(self) -> str:
        """The name and, for computed values, where they were computed."""
        return f"{self.name} at {self.location}" if self.location else self.name

    @property
    def type_str(self) -> str:
        """The value's type in JAX's short notation, such as ``f32[5,3]`` or ``f32<host>[5,3]``."""
        space = jax.memory.Space[self.memory.capitalize()]
        return jax.core.ShapedArray(self.shape, self.dtype, memory_space=space).str_short(short_dtypes=True)


class Residuals(Sequence[Residual]):
    """The residuals of a function, in the order JAX keeps them, with their total size.

    Printing it (or leaving it as the last value of a notebook cell) shows a table.

    Raises:
        TypeError: If ``items`` is not an iterable of :class:`Residual` values.
    """

    def __init__(self, items: Iterable[Residual]) -> None:
        self._items = tuple(validation.iterable(items, "items", what="Residual values"))
        for item in self._items:
            if not isinstance(item, Residual):
                raise TypeError(f"items must hold Residual values, got {type(item).__name__}")

    def __getitem__(self, index):  # type: ignore[override]
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Residual]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Residuals) and self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    @property
    def total_bytes(self) -> int:
        """The sum of the residuals' sizes in bytes."""
        return sum(r.nbytes for r in self._items)

    def by_kind(self, kind: str) -> Residuals:
        """Only the residuals of one kind (see :class:`Residual`)."""
        if kind not in RESIDUAL_KINDS:
            raise ValueError(f"kind must be one of {RESIDUAL_KINDS}, got {kind!r}")
        return Residuals([r for r in self._items if r.kind == kind])

    def table(self) -> Table:
        """The residuals as a :class:`~remat_guide.tables.Table`: one row each, the total in the caption.

        ``str()`` of it (and of the residuals) is plain text; in a notebook it is HTML.
        """
        frame = pd.DataFrame([(r.type_str, r.nbytes, r.kind, r.source) for r in self._items],
                             columns=["type", "bytes", "kind", "source"])
        count = len(self._items)
        caption = f"{count} residual{'' if count == 1 else 's'}, {self.total_bytes:,} bytes in all"
        return Table(frame, units={"bytes": "count"}, caption=caption)

    def to_pandas(self) -> pd.DataFrame:
        """The residuals as a DataFrame: one row each, with exact byte counts.

        Returns:
            A DataFrame with the columns ``type`` (as in :attr:`Residual.type_str`),
            ``bytes``, ``kind``, ``name``, ``location`` and ``memory``.

        Examples:
            >>> import jax.numpy as jnp
            >>> from remat_guide import saved_residuals
            >>> frame = saved_residuals(lambda x: jnp.sum(jnp.sin(x)), jnp.ones(3)).to_pandas()
            >>> frame[["type", "bytes", "kind", "name"]].to_dict("records")
            [{'type': 'f32[3]', 'bytes': 12, 'kind': 'primitive', 'name': 'cos'}]
        """
        return pd.DataFrame(
            [(r.type_str, r.nbytes, r.kind, r.name, r.location, r.memory) for r in self._items],
            columns=["type", "bytes", "kind", "name", "location", "memory"])

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:
        return str(self.table())


def _memory_name(aval: Any) -> str:
    space = getattr(aval, "memory_space", jax.memory.Space.Device)
    return "host" if space == jax.memory.Space.Host else "device"


# How jax.extend.source_info_util.summarize names the user's frame: "file:line:column (function)".
_SUMMARY = re.compile(r"^(?P<file>.*):(?P<line>\d+):\d+ \((?P<function>.*)\)$")


def _stable_location(source_info: Any) -> str:
    summary = _SUMMARY.match(jax.extend.source_info_util.summarize(source_info))
    if summary is None:  # no frame of the user's code ("unknown")
        return ""
    file_name = summary["file"]
    file_name = "<cell>" if _NOTEBOOK_CELL.search(file_name) else os.path.basename(file_name)
    return f"{file_name}:{summary['line']} ({summary['function']})"


def saved_residuals(f: Callable, /, *args: Any, argnums: int | Sequence[int] | None = None,
                    **kwargs: Any) -> Residuals:
    """Lists what the gradient of ``f`` keeps from the forward pass for the backward pass.

    The residuals of ``jax.vjp`` of ``f``, which ``jax.grad`` and ``jax.vjp`` share: each
    has a shape, dtype, size, kind and a source whose location does not change from run to
    run. They depend on what is differentiated. By default every argument is, as
    ``jax.ad_checkpoint.print_saved_residuals(f, *args, **kwargs)`` lists them;
    ``argnums`` chooses the arguments as ``jax.grad(f, argnums)`` does, so that
    ``saved_residuals(f, *args, argnums=0)`` is what ``jax.grad(f)(*args)`` keeps.
    Arguments that are not differentiated are still traced: when the backward pass reads
    one, it is listed as an ``"argument"``. Nothing is executed: ``f`` is only traced, so
    arguments may be ``jax.ShapeDtypeStruct`` values.

    Args:
        f: The function to differentiate (positional only, so ``f`` may itself take a
            keyword argument named ``f``). Its arguments may be pytrees; its output
            must be floating-point arrays.
        *args: Positional arguments for ``f``: arrays, pytrees of arrays, numbers, or
            ``jax.ShapeDtypeStruct`` values.
        argnums: ``None`` (the default): every leaf of every argument, positional and
            keyword, is differentiated, as ``print_saved_residuals`` does (at least one
            must be floating-point; integers, bools and PRNG keys get no gradient). An
            int or a sequence of ints: those positional arguments only, as for
            ``jax.grad``, each leaf of them floating-point; the other arguments, keyword
            arguments included, are not differentiated. This keyword belongs to
            ``saved_residuals``: to pass ``f`` a keyword argument named ``argnums``, bind
            it first (``functools.partial``).
        **kwargs: Keyword arguments for ``f``, traced like the positional ones.

    Returns:
        The residuals, in the order JAX keeps them, with their ``total_bytes``.

    Raises:
        TypeError: If ``f`` is not callable, an argument is not an array, a number or
            a ``jax.ShapeDtypeStruct``, no argument is floating-point (there is nothing
            to differentiate), an argument in ``argnums`` is not floating-point (an
            integer, a bool, a PRNG key), ``argnums`` is not an int or a sequence of
            ints, a keyword argument is also passed by position, an output of ``f`` is
            not floating-point, or the policy of a ``jax.checkpoint`` in ``f`` has the
            wrong signature or answers other than True/False (the message names the
            policy).
        ValueError: If an argument has a negative dimension or a size no machine
            holds, ``argnums`` is empty, out of range or names an argument twice, or
            ``f`` returns no array (such as ``None``: a missing ``return``).

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide import saved_residuals
        >>> def f(x):
        ...     return jnp.sum(jnp.sin(jnp.sin(x)))
        >>> res = saved_residuals(f, jnp.ones(3))
        >>> [(r.kind, r.name) for r in res]
        [('primitive', 'cos'), ('primitive', 'cos')]
        >>> res.total_bytes
        24
        >>> res = saved_residuals(jax.checkpoint(f), jnp.ones(3))
        >>> print(res)
        1 residual, 12 bytes in all
        type    bytes  kind      source
        ------  -----  --------  ------
        f32[3]     12  argument  x

        With several arguments, ``argnums`` says which are differentiated. The gradient
        with respect to ``w`` alone needs ``x`` and the derivative of ``tanh``, not ``w``:

        >>> def layer(w, x):
        ...     return jnp.sum(jnp.tanh(x @ w))
        >>> w, x = jnp.ones((4, 4)), jnp.ones((2, 4))
        >>> [(r.kind, r.name) for r in saved_residuals(layer, w, x)]
        [('argument', 'w'), ('argument', 'x'), ('primitive', 'one_minus_square')]
        >>> [(r.kind, r.name) for r in saved_residuals(layer, w, x, argnums=0)]
        [('argument', 'x'), ('primitive', 'one_minus_square')]
    """
    validation.callable_arg(f, "f")
    differentiated = check_arguments(f, args, kwargs, argnums)
    jaxpr, out_shape, vjp_shape = trace_vjp(f, args, kwargs, differentiated)
    validation.check_outputs(out_shape, "f")
    num_residuals = jax.tree_util.tree_structure(vjp_shape).num_leaves
    residual_vars = jaxpr.outvars[len(jaxpr.outvars) - num_residuals:]

    # reduce_precision only re-rounds a value and device_put only moves it (an offloading
    # policy): report the value it came from, in the memory it is kept in.
    through = {e.outvars[0]: e.invars[0] for e in jaxpr.eqns
               if e.primitive.name in ("reduce_precision", "device_put") and len(e.invars) == 1}
    wanted = {}
    for v in residual_vars:
        if isinstance(v, jax.extend.core.Var):
            source = v
            while source in through:
                source = through[source]
            wanted[source] = _memory_name(v.aval)

    def record(var: Any, kind: str, name: str, location: str = "") -> Residual:
        memory = wanted.get(var, "device") if isinstance(var, jax.extend.core.Var) else "device"
        return Residual(tuple(var.aval.shape), var.aval.dtype, kind, name, location, memory)

    arg_names = argument_names(f, args, kwargs)
    items = []
    for var in residual_vars:
        if not isinstance(var, jax.extend.core.Var):
            items.append(record(var, "constant", "literal"))
    for var in jaxpr.constvars:
        if var in wanted:
            items.append(record(var, "constant", "captured"))
    for var, name in zip(jaxpr.invars, arg_names):
        if var in wanted:
            items.append(record(var, "argument", name))
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            if var not in wanted:
                continue
            hi_prim = eqn.params.get("_prim")  # checkpoint_name(_fwd) under the jax_remat3 flag
            if eqn.primitive.name == "name":
                kind, name = "named", repr(eqn.params["name"])
            elif type(hi_prim).__name__ in ("CheckpointName", "CheckpointNameFwd"):
                kind, name = "named", repr(hi_prim.params["name"])
            elif eqn.primitive.name in ("jit", "pjit"):
                kind, name = "primitive", f"jit({eqn.params['name']})"
            else:
                kind, name = "primitive", eqn.primitive.name
            items.append(record(var, kind, name, _stable_location(eqn.source_info)))
    return Residuals(items)
