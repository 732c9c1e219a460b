"""What each residual occupies on one device when a function's arguments are sharded."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.extend.core
import numpy as np

from remat_guide import _cache as cache
from remat_guide import _validation as validation
from remat_guide._tracing import check_arguments, flat_vjp, trace_vjp
from remat_guide.residuals import Residual, saved_residuals

__all__ = ["ShardedResidual", "is_sharded", "residual_shardings"]


@dataclasses.dataclass(frozen=True)
class ShardedResidual:
    """One residual with the sharding XLA gives it and the part of it each device holds.

    Attributes:
        residual: The residual as :func:`remat_guide.saved_residuals` lists it (global shape).
        spec: Its sharding, as a string such as ``"P(None, 'data', None, 'model')"``
            (``"P()"``: every device holds all of it).
        device_shape: The shape of the piece each device holds.
    """

    residual: Residual
    spec: str
    device_shape: tuple[int, ...]

    @property
    def device_nbytes(self) -> int:
        """Bytes the residual occupies on each device."""
        return int(np.prod(self.device_shape, dtype=np.int64)) * self.residual.dtype.itemsize


def _leaf_sharding(leaf: Any) -> Any:
    sharding = getattr(leaf, "sharding", None)
    return sharding if isinstance(sharding, jax.sharding.Sharding) else None


def is_sharded(*args: Any) -> bool:
    """Whether any leaf of ``args`` is placed on more than one device.

    Leaves count when they are arrays (``jax.Array``) or ``jax.ShapeDtypeStruct`` values
    whose ``sharding`` spans several devices.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.sharded import is_sharded
        >>> is_sharded(jnp.ones(4), {"w": jax.ShapeDtypeStruct((2, 2), jnp.float32)})
        False
    """
    for leaf in jax.tree.leaves(args):
        sharding = _leaf_sharding(leaf)
        if sharding is not None and len(sharding.device_set) > 1:
            return True
    return False


def _spec_text(sharding: Any, ndim: int) -> str:
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return "P()" if sharding.is_fully_replicated else str(sharding)
    entries = list(spec) + [None] * (ndim - len(spec))
    while entries and entries[-1] is None:
        entries.pop()
    return "P(" + ", ".join(repr(e) if e is not None else "None" for e in entries) + ")"


def _key(var: Any, index: int) -> Any:
    return var if isinstance(var, jax.extend.core.Var) else ("literal", index)


def _saved_order(jaxpr: Any, residual_vars: list[Any]) -> list[Any]:
    """Keys of the residuals (see ``_key``) in the order :func:`saved_residuals` lists them."""
    wanted = set(v for v in residual_vars if isinstance(v, jax.extend.core.Var))
    order: list[Any] = [_key(v, i) for i, v in enumerate(residual_vars)
                        if not isinstance(v, jax.extend.core.Var)]
    order += [v for v in jaxpr.constvars if v in wanted]
    order += [v for v in jaxpr.invars if v in wanted]
    order += [v for eqn in jaxpr.eqns for v in eqn.outvars if v in wanted]
    return order


def residual_shardings(f: Callable, *args: Any, argnums: int | Sequence[int] | None = None) -> list[ShardedResidual]:
    """Each residual of the gradient of ``f`` with its sharding and its per-device shape.

    The residuals are the leaves of the function that ``jax.vjp`` returns, so a program
    that returns them, ``jax.jit(lambda *a: jax.vjp(f, *a)[1])`` (with respect to the
    arguments in ``argnums``), is compiled (never run) for ``args``, and XLA's sharding of
    each output is read. Inside one ``jax.jit(jax.grad(f))`` program the same propagation
    decides the residuals' sharding; this shows it as data. With ``REMAT_GUIDE_CACHE_DIR``
    set (see :func:`remat_guide.compare_policies`), the shardings are kept there.

    Args:
        f: The function to differentiate.
        *args: Its arguments: arrays placed with a ``jax.sharding.NamedSharding``, or
            ``jax.ShapeDtypeStruct`` values with a ``sharding``, or unsharded values.
        argnums: The arguments differentiated, as for :func:`remat_guide.saved_residuals`:
            ``None`` (the default) for all of them, or an int or a sequence of ints as
            for ``jax.grad`` (``argnums=0`` gives the residuals of ``jax.grad(f)``).

    Returns:
        One entry per residual, in the order of :func:`remat_guide.saved_residuals`.

    Raises:
        TypeError: If ``f`` is not callable, or an argument or ``argnums`` is wrong as for
            :func:`remat_guide.saved_residuals`.
        ValueError: As for :func:`remat_guide.saved_residuals`.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.sharded import residual_shardings
        >>> [(r.spec, r.device_shape) for r in residual_shardings(jnp.sin, jnp.ones(4))]
        [('P()', (4,))]
    """
    validation.callable_arg(f, "f")
    listed = saved_residuals(f, *args, argnums=argnums)
    differentiated = check_arguments(f, args, {}, argnums)
    jaxpr, _, vjp_shape = trace_vjp(f, args, {}, differentiated)
    leaves = jax.tree.leaves(vjp_shape)
    residual_vars = jaxpr.outvars[len(jaxpr.outvars) - len(leaves):]
    vjp_of_chosen, arg_leaves = flat_vjp(f, args, {}, differentiated)
    lowered = jax.jit(lambda *a: vjp_of_chosen(*a)[1]).lower(*arg_leaves)

    def compute() -> list:
        out_shardings = jax.tree.leaves(cache.compile_unrun(lowered).output_shardings)
        return [(_spec_text(sharding, len(leaf.shape)), list(sharding.shard_shape(tuple(leaf.shape))))
                for leaf, sharding in zip(leaves, out_shardings)]

    pieces = cache.figures("residual shardings", jax.default_backend(), lowered, compute)
    by_var = {}
    for index, (var, piece) in enumerate(zip(residual_vars, pieces)):
        by_var.setdefault(_key(var, index), piece)
    result = []
    for residual, key in zip(listed, _saved_order(jaxpr, list(residual_vars))):
        spec, shard_shape = by_var[key]
        result.append(ShardedResidual(residual, spec, tuple(shard_shape)))
    return result
