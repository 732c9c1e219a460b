"""What a function's backward pass keeps from its forward pass, as data."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jax
import jax.extend.core
import pandas as pd

from remat_guide import _validation as validation
from remat_guide._provenance import top_scope
from remat_guide._tracing import argument_names, check_arguments, trace_vjp
from remat_guide.tables import Table, human_bytes

__all__ = ["Residual", "Residuals", "saved_residuals"]

RESIDUAL_KINDS = ("argument", "named", "primitive", "constant", "carry")
MEMORIES = ("device", "host")


@dataclasses.dataclass(frozen=True)
class Residual:
    """One value that the forward pass keeps for the backward pass.

    A value that a ``jax.lax.scan`` (or a Flax or Equinox scan over layers) keeps from
    each iteration is one array stacked over the iterations. It is described by what
    produced it inside the scan's body, with the scan's length in ``stacked``: its
    ``shape`` is ``stacked + per_iteration_shape``.

    Attributes:
        shape: The value's shape (stacked over the iterations of the scans it is kept by).
        dtype: The value's dtype (a NumPy dtype, or JAX's dtype of a typed PRNG key).
        kind: ``"argument"`` (an input of the function), ``"named"`` (a value tagged
            with ``jax.ad_checkpoint.checkpoint_name``), ``"primitive"`` (the output of
            a primitive), ``"constant"`` (a constant captured by the function) or
            ``"carry"`` (the carry that each iteration of a scan receives).
        name: The argument's name (with its pytree path), the checkpoint name, the
            primitive's name, or ``"carry"``.
        location: Where the value was computed, as ``file:line (function)``: the
            innermost line outside JAX, Flax, Equinox and remat_guide, with the file's
            base name only (``<cell>`` for a notebook cell), so that it is the same on
            every run; empty for arguments, constants and carries (whose scan is the
            last of ``within``).
        memory: Where the value is kept: ``"device"``, or ``"host"`` for a value that a
            policy offloads (``jax.ad_checkpoint.Offloadable``).
        stacked: The lengths of the scans that stack the value, outermost first; empty
            for a value not kept by a scan.
        within: Where each of those scans is called, as ``file:line (function)``.

    Raises:
        TypeError: If a field has the wrong type (``shape`` and ``stacked`` must hold ints,
            ``within`` strings).
        ValueError: If a dimension is negative, ``kind`` or ``memory`` is unknown, or
            ``stacked`` is not the start of ``shape`` or has not one entry per ``within``.

    Examples:
        >>> import numpy as np
        >>> from remat_guide import Residual
        >>> r = Residual((4, 8, 64), np.float32, "named", "'attn_out'", "model.py:12 (Block.__call__)",
        ...              stacked=(4,), within=("model.py:30 (Model.__call__)",))
        >>> r.type_str, r.per_iteration_shape, r.nbytes
        ('f32[4,8,64]', (8, 64), 8192)
    """

    shape: tuple[int, ...]
    dtype: Any
    kind: str
    name: str
    location: str = ""
    memory: str = "device"
    stacked: tuple[int, ...] = ()
    within: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for field in ("shape", "stacked"):
            dims = tuple(validation.integer(d, f"Residual.{field}", minimum=0)
                         for d in validation.iterable(getattr(self, field), f"Residual.{field}", what="ints"))
            object.__setattr__(self, field, dims)
        try:
            object.__setattr__(self, "dtype", validation.dtype_of(self.dtype))
        except TypeError as error:
            raise TypeError(f"Residual.dtype must be a dtype, got {self.dtype!r}") from error
        for field in ("kind", "name", "location", "memory"):
            validation.string(getattr(self, field), f"Residual.{field}")
        within = tuple(validation.string(w, "Residual.within")
                       for w in validation.iterable(self.within, "Residual.within", what="strings"))
        object.__setattr__(self, "within", within)
        if self.kind not in RESIDUAL_KINDS:
            raise ValueError(f"Residual.kind must be one of {RESIDUAL_KINDS}, got {self.kind!r}")
        if self.memory not in MEMORIES:
            raise ValueError(f"Residual.memory must be one of {MEMORIES}, got {self.memory!r}")
        if self.shape[:len(self.stacked)] != self.stacked:
            raise ValueError(f"Residual.stacked must be the leading dimensions of Residual.shape "
                             f"{self.shape}, got {self.stacked}")
        if len(self.within) != len(self.stacked):
            raise ValueError(f"Residual.within must name one scan per entry of Residual.stacked "
                             f"{self.stacked}, got {len(self.within)}")

    @property
    def nbytes(self) -> int:
        """Bytes the value occupies, stacked over its scans (an exact Python int for any shape)."""
        return validation.nbytes(self.shape, self.dtype)

    @property
    def per_iteration_shape(self) -> tuple[int, ...]:
        """The shape of what one iteration of the innermost scan keeps (``shape`` if not in a scan)."""
        return self.shape[len(self.stacked):]

    @property
    def source(self) -> str:
        """The name and, for computed values, where they were computed."""
        return f"{self.name} at {self.location}" if self.location else self.name

    @property
    def type_str(self) -> str:
        """The value's type in JAX's short notation, such as ``f32[5,3]`` or ``f32<host>[5,3]``."""
        return _short_type(self.shape, self.dtype, self.memory)

    @property
    def stacked_type_str(self) -> str:
        """The type as the scans stack it, such as ``4 × f32[8,64]`` (``type_str`` if not in a scan)."""
        return " × ".join([*map(str, self.stacked), _short_type(self.per_iteration_shape, self.dtype, self.memory)])


def _short_type(shape: tuple[int, ...], dtype: Any, memory: str) -> str:
    space = jax.memory.Space[memory.capitalize()]
    return jax.core.ShapedArray(shape, dtype, memory_space=space).str_short(short_dtypes=True)


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

        A value kept by a scan shows its type as the scan stacks it (``4 × f32[8,64]``),
        and a ``scan`` column, present only then, names where each scan is called.
        ``str()`` of it (and of the residuals) is plain text; in a notebook it is HTML,
        and a phone shows its type, bytes and source columns.
        """
        rows = [(r.stacked_type_str, r.nbytes, r.kind, r.source) for r in self._items]
        frame = pd.DataFrame(rows, columns=["type", "bytes", "kind", "source"])
        if any(r.stacked for r in self._items):
            frame.insert(3, "scan", [" > ".join(w.split(" (")[0] for w in r.within) for r in self._items])
        count = len(self._items)
        caption = f"{count} residual{'' if count == 1 else 's'}, {human_bytes(self.total_bytes)} in all"
        # A phone shows what is kept, its size and where it comes from; the kind and the
        # scan stay behind the table's switch.
        return Table(frame, units={"bytes": "count"}, caption=caption, key_columns=["type", "bytes", "source"])

    def to_pandas(self) -> pd.DataFrame:
        """The residuals as a DataFrame: one row each, with exact byte counts.

        Returns:
            A DataFrame with the columns ``type`` (as in :attr:`Residual.type_str`),
            ``bytes``, ``kind``, ``name``, ``location``, ``memory``, ``stacked`` and
            ``within`` (tuples, empty for a value not kept by a scan).

        Examples:
            >>> import jax.numpy as jnp
            >>> from remat_guide import saved_residuals
            >>> frame = saved_residuals(lambda x: jnp.sum(jnp.sin(x)), jnp.ones(3)).to_pandas()
            >>> frame[["type", "bytes", "kind", "name", "stacked"]].to_dict("records")
            [{'type': 'f32[3]', 'bytes': 12, 'kind': 'primitive', 'name': 'cos', 'stacked': ()}]
        """
        return pd.DataFrame(
            [(r.type_str, r.nbytes, r.kind, r.name, r.location, r.memory, r.stacked, r.within)
             for r in self._items],
            columns=["type", "bytes", "kind", "name", "location", "memory", "stacked", "within"])

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:
        return str(self.table())


def _memory_name(aval: Any) -> str:
    space = getattr(aval, "memory_space", jax.memory.Space.Device)
    return "host" if space == jax.memory.Space.Host else "device"


def saved_residuals(f: Callable, /, *args: Any, argnums: int | Sequence[int] | None = None,
                    **kwargs: Any) -> Residuals:
    """Lists what the backward pass of ``f`` keeps from the forward pass, per differentiated argument.

    The residuals of ``jax.vjp`` of ``f`` (``jax.grad`` uses the same): each
    has a shape, dtype, size, kind and a source whose location does not change from run to
    run. They depend on what is differentiated. By default every argument is, as
    ``jax.ad_checkpoint.print_saved_residuals(f, *args, **kwargs)`` lists them;
    ``argnums`` chooses the arguments as ``jax.grad(f, argnums)`` does, so that
    ``saved_residuals(f, *args, argnums=0)`` is what ``jax.grad(f)(*args)`` keeps.
    Arguments that are not differentiated are still traced: when the backward pass reads
    one, it is listed as an ``"argument"``. Nothing is executed: ``f`` is only traced, so
    arguments may be ``jax.ShapeDtypeStruct`` values.

    What a scan keeps from each iteration (``jax.lax.scan``, and the scans over layers of
    Flax and Equinox) is one array stacked over the iterations; it is listed as what
    produced it inside the scan's body, looked for through nested scans, ``jax.jit``,
    ``jax.checkpoint`` and custom derivatives, with the scan's length in
    ``Residual.stacked``. The sizes count the stacked arrays, as JAX keeps them.

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
        >>> def layers(ws, x):
        ...     return jnp.sum(jax.lax.scan(lambda h, w: (jnp.sin(h @ w), None), x, ws)[0])
        >>> res = saved_residuals(layers, jnp.ones((4, 3, 3)), jnp.ones(3))
        >>> [(r.kind, r.name, r.stacked_type_str) for r in res]
        [('argument', 'ws', 'f32[4,3,3]'), ('carry', 'carry', '4 × f32[3]'), ('primitive', 'cos', '4 × f32[3]')]
        >>> res.total_bytes == (4 * 3 * 3 + 4 * 3 + 4 * 3) * 4
        True

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

    # A residual is reported as what produced it, looked for inside scans and calls: reduce_precision
    # only re-rounds a value and device_put only moves it (an offloading policy), so the value
    # they came from is reported, in the memory it is kept in.
    scope = top_scope(jaxpr, argument_names(f, args, kwargs))
    wanted = {}
    for v in residual_vars:
        if isinstance(v, jax.extend.core.Var):
            wanted[scope.source(v)] = _memory_name(v.aval)

    def record(var: Any) -> Residual:
        origin = scope.origin(var)
        memory = wanted.get(var, "device") if isinstance(var, jax.extend.core.Var) else "device"
        return Residual(tuple(var.aval.shape), var.aval.dtype, origin.kind, origin.name, origin.location,
                        memory, origin.stacked, origin.within)

    # The order JAX keeps them in: literals, captured constants, arguments, then computed values.
    items = [record(var) for var in residual_vars if not isinstance(var, jax.extend.core.Var)]
    items += [record(var) for var in (*jaxpr.constvars, *jaxpr.invars) if var in wanted]
    items += [record(var) for eqn in jaxpr.eqns for var in eqn.outvars if var in wanted]
    return Residuals(items)
