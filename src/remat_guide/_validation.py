"""Shared input checks: each refuses bad input with a ValueError or TypeError that names the argument."""

from __future__ import annotations

import inspect
import math
import numbers
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.ad_checkpoint
import jax.extend.core
import jax.numpy as jnp
import numpy as np

__all__ = [
    "CHECKPOINT_PRIMITIVES",
    "MAX_BYTES",
    "MAX_FLOPS",
    "PolicyProbe",
    "arguments",
    "argnums",
    "boolean",
    "callable_arg",
    "check_outputs",
    "check_policy_names",
    "check_program",
    "contains_checkpoint",
    "dtype_of",
    "floating_scalar",
    "integer",
    "iterable",
    "nbytes",
    "ordered",
    "policy",
    "require_floating",
    "string",
    "tagged_names",
    "walk",
]

MAX_BYTES = 2**62
"""The most bytes one value, or all the values of one program together, may occupy.

No machine holds 4 EiB, and XLA counts bytes in signed 64-bit integers: a larger shape
makes XLA fail (or abort the process) instead of reporting a size.
"""

MAX_FLOPS = 2**62
"""The most FLOPs a program may need: XLA's cost analysis counts them in 64-bit integers."""

CHECKPOINT_PRIMITIVES = ("remat2", "checkpoint", "remat")
_ANSWERS = (bool, type(jax.ad_checkpoint.Saveable), type(jax.ad_checkpoint.Recompute),
            jax.ad_checkpoint.Offloadable)


def _type(value: Any) -> str:
    return type(value).__name__


def callable_arg(value: Any, name: str) -> Callable:
    """``value`` if it is callable, else a TypeError naming ``name``."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {_type(value)}")
    return value


def integer(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as a Python int (NumPy integers accepted, bools refused), at least ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_type(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def boolean(value: Any, name: str) -> bool:
    """``value`` if it is a bool (or a NumPy bool), else a TypeError naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_type(value)}")
    return bool(value)


def string(value: Any, name: str) -> str:
    """``value`` if it is a str, else a TypeError naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {_type(value)}")
    return value


def iterable(value: Any, name: str, *, what: str = "values") -> list:
    """The items of ``value`` (any iterable, generators included, but not a single str nor a set)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be an iterable of {what}, got {_type(value)}")
    return list(ordered(value, name))


def ordered(value: Any, name: str) -> Any:
    """``value``, unless it is a set: refused, naming ``name``, since its order is not the caller's.

    A set of strings iterates in hash order, and Python salts the hashes of strings anew
    in every process, so what it gives would come out in a different order on every run.
    """
    if isinstance(value, (set, frozenset)):
        raise TypeError(
            f"{name} must be ordered, got a {_type(value)}, whose order changes from one run "
            "to the next; pass a list or a tuple, in the order you want"
        )
    return value


def dtype_of(dtype: Any) -> Any:
    """A dtype as JAX sees it: a NumPy dtype (bfloat16 and the float8 types included), or
    JAX's own extended dtype such as a typed PRNG key's ``key<fry>``, which NumPy cannot read."""
    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return dtype
    return np.dtype(dtype)


def nbytes(shape: Sequence[Any], dtype: Any) -> int:
    """The exact size in bytes of an array, as a Python int (no 64-bit wrap-around)."""
    return math.prod(int(d) for d in shape) * dtype_of(dtype).itemsize


_SCALAR_DTYPES = {bool: np.dtype(bool), int: np.dtype(np.int64), float: np.dtype(np.float64),
                  complex: np.dtype(np.complex128)}


def _leaf_shape_dtype(leaf: Any) -> tuple[tuple[Any, ...], Any]:
    if type(leaf) in _SCALAR_DTYPES:
        return (), _SCALAR_DTYPES[type(leaf)]
    if isinstance(leaf, (bool, int, float, complex)):  # a subclass, such as an IntEnum
        return (), np.dtype(np.float64)
    return tuple(leaf.shape), dtype_of(leaf.dtype)


def arguments(leaves: Sequence[Any], names: Sequence[str]) -> None:
    """Every leaf is an array, a number or a ``jax.ShapeDtypeStruct`` of a size that can exist.

    Args:
        leaves: The flattened arguments.
        names: One name per leaf, such as ``x`` or ``params['w']``, used in messages.
    """
    for leaf, name in zip(leaves, names):
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct,
                                 bool, int, float, complex)):
            raise TypeError(
                f"argument {name} must be an array, a number or a jax.ShapeDtypeStruct, "
                f"got {_type(leaf)}"
            )
        shape, dtype = _leaf_shape_dtype(leaf)
        if any(isinstance(d, int) and d < 0 for d in shape):
            raise ValueError(f"argument {name} has a negative dimension: shape {shape}")
        if all(isinstance(d, int) for d in shape) and nbytes(shape, dtype) > MAX_BYTES:
            raise ValueError(
                f"argument {name} of shape {shape} and dtype {dtype} would take "
                f"{nbytes(shape, dtype):,} bytes, more than any machine holds (at most "
                f"{MAX_BYTES:,}); XLA cannot even describe it"
            )


def _is_floating(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        return isinstance(leaf, (float, complex))
    # jnp.issubdtype knows ml_dtypes' bfloat16 and float8 types (NumPy's does not) and
    # answers False for a PRNG key.
    return bool(jnp.issubdtype(dtype_of(dtype), jnp.inexact))


def require_floating(leaves: Sequence[Any], names: Sequence[str], *, every: bool,
                     why: str) -> None:
    """Floating-point dtypes where a gradient is taken: in every leaf, or in at least one."""
    if every:
        for leaf, name in zip(leaves, names):
            if not _is_floating(leaf):
                dtype = getattr(leaf, "dtype", _type(leaf))
                raise TypeError(f"argument {name} must have a floating-point dtype ({why}), "
                                f"got {dtype}")
    elif not any(_is_floating(leaf) for leaf in leaves):
        found = ", ".join(f"{n}: {getattr(leaf, 'dtype', _type(leaf))}"
                          for leaf, n in zip(leaves, names)) or "no arguments"
        raise TypeError(f"the arguments must include a floating-point array ({why}); "
                        f"got {found}")


def check_outputs(out_shape: Any, name: str) -> None:
    """A differentiated function's output: at least one array, every one floating-point."""
    leaves = jax.tree_util.tree_leaves(out_shape)
    if not leaves:
        raise ValueError(
            f"{name} returned {out_shape!r}, which holds no array to differentiate "
            "(is a return statement missing?)"
        )
    for path, leaf in jax.tree_util.tree_flatten_with_path(out_shape)[0]:
        if not _is_floating(leaf):
            where = f"output{jax.tree_util.keystr(path)}" if path else "output"
            raise TypeError(
                f"{name}'s {where} must have a floating-point dtype to be differentiated, "
                f"got {getattr(leaf, 'dtype', _type(leaf))}"
            )


def floating_scalar(out_shape: Any, name: str) -> None:
    """The output of the loss that ``name`` returns: one real floating-point scalar, as ``jax.grad`` needs."""
    if not isinstance(out_shape, jax.ShapeDtypeStruct):
        raise TypeError(f"{name} must return a loss with a scalar output, got a loss returning "
                        f"{_type(out_shape)}"
                        + (" (is a return statement missing?)" if out_shape is None else ""))
    if out_shape.shape != ():
        raise ValueError(f"{name} must return a loss with a scalar output, got shape "
                         f"{out_shape.shape}")
    if not jnp.issubdtype(out_shape.dtype, jnp.floating):
        raise TypeError(f"{name} must return a loss with a real floating-point output, got "
                        f"dtype {out_shape.dtype}")


def argnums(value: Any, nargs: int, function: str = "the loss", *, name: str = "argnums",
            forms: str = "an int or a sequence of ints", empty: bool = False) -> int | tuple[int, ...]:
    """``argnums`` as ``jax.grad`` takes it, checked against the number of positional arguments of ``function``.

    Returns an int for an int and a tuple for any iterable of ints, negative indices
    counted from the end. ``name`` is the argument's name in the messages (such as
    ``donate_argnums``), ``forms`` what it may be, and ``empty`` whether an empty
    sequence is allowed.
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        items, single = [value], True
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        items, single = list(value), False
        if not items and not empty:
            raise ValueError(f"{name} must name at least one argument, got an empty sequence")
    else:
        raise TypeError(f"{name} must be {forms}, got {_type(value)}")
    result = []
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Integral):
            raise TypeError(f"{name} must hold ints, got {_type(item)}")
        if not -nargs <= item < nargs:
            raise ValueError(
                f"{name} {int(item)} is out of range: {function} gets {nargs} positional "
                f"argument{'' if nargs == 1 else 's'}"
            )
        result.append(int(item) % nargs)
    if len(set(result)) != len(result):
        raise ValueError(f"{name} names an argument twice: {tuple(int(i) for i in items)}")
    return result[0] if single else tuple(result)


def policy(value: Any, name: str) -> Callable:
    """A checkpoint policy: callable as ``policy(prim, *avals, **params)``."""
    if not callable(value):
        raise TypeError(f"{name} must be a jax.checkpoint policy (a callable), got {_type(value)}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # some builtins have none: leave them to the probe
        return value
    kinds = {p.kind for p in signature.parameters.values()}
    try:
        signature.bind(jax.extend.core.Primitive("p"), object(), object(), param=None)
    except TypeError:
        ok = False
    else:
        ok = inspect.Parameter.VAR_POSITIONAL in kinds and inspect.Parameter.VAR_KEYWORD in kinds
    if not ok:
        raise TypeError(
            f"{name} has the signature {signature}; JAX calls a policy as "
            "policy(prim, *avals, **params): write it as def policy(prim, *avals, **params)"
        )
    return value


class PolicyProbe:
    """Wraps a policy: notes whether JAX consults it and checks each answer it gives.

    Args:
        policy: The policy to wrap.
        name: How messages name it, such as ``policies['mine']``.
    """

    def __init__(self, policy: Callable, name: str) -> None:
        self.policy = policy
        self.name = name
        self.called = False

    def __call__(self, prim: Any, *avals: Any, **params: Any) -> Any:
        self.called = True
        try:
            answer = self.policy(prim, *avals, **params)
        except TypeError as error:
            raise TypeError(f"{self.name} failed when JAX called it as policy({prim}, *avals, "
                            f"**params): {error}") from error
        except Exception as error:  # the policy's own bug: keep its type, say whose it is
            error.add_note(f"raised by {self.name} when JAX called it for {prim}")
            raise
        if not isinstance(answer, _ANSWERS):
            raise TypeError(
                f"{self.name} must answer True or False (or jax.ad_checkpoint.Saveable, "
                f"Recompute, Offloadable(...)), got {_type(answer)} {answer!r} for {prim}"
            )
        return answer


def _sub_jaxprs(eqn: Any) -> list[Any]:
    return list(jax.extend.core.jaxprs_in_params(eqn.params))


def walk(jaxpr: Any) -> Iterable[Any]:
    """Every equation of a jaxpr and of the jaxprs nested in it, depth first."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in _sub_jaxprs(eqn):
            yield from walk(sub)


def contains_checkpoint(jaxpr: Any) -> bool:
    """Whether a jaxpr (or one nested in it) applies ``jax.checkpoint``."""
    return any(eqn.primitive.name in CHECKPOINT_PRIMITIVES for eqn in walk(jaxpr))


def tagged_names(jaxpr: Any) -> list[str]:
    """The ``checkpoint_name`` tags in a jaxpr, in order of first appearance."""
    names: list[str] = []
    for eqn in walk(jaxpr):
        hi_prim = eqn.params.get("_prim")
        if eqn.primitive.name == "name":
            name = eqn.params["name"]
        elif type(hi_prim).__name__ in ("CheckpointName", "CheckpointNameFwd"):
            name = hi_prim.params["name"]
        else:
            continue
        if name not in names:
            names.append(name)
    return names


_NAME_FACTORIES = {
    "save_only_these_names": ("names_which_can_be_saved",),
    "save_any_names_but_these": ("names_not_to_save",),
    "save_and_offload_only_these_names": ("names_which_can_be_saved",
                                          "names_which_can_be_offloaded"),
}


def _policy_names(policy: Any) -> tuple[str | None, set[str]]:
    """The names a policy made by a ``jax.checkpoint_policies`` factory refers to."""
    qualname = getattr(policy, "__qualname__", "")
    if getattr(policy, "__module__", None) != jax.checkpoint_policies.nothing_saveable.__module__:
        return None, set()
    factory = qualname.partition(".<locals>.")[0]
    try:
        nonlocals = inspect.getclosurevars(policy).nonlocals
    except (TypeError, ValueError):
        return None, set()
    if factory == "save_from_both_policies":
        names: set[str] = set()
        found = None
        for inner in (nonlocals.get("policy_1"), nonlocals.get("policy_2")):
            inner_factory, inner_names = _policy_names(inner)
            found = found or inner_factory
            names |= inner_names
        return found, names
    if factory not in _NAME_FACTORIES:
        return None, set()
    names = set()
    for variable in _NAME_FACTORIES[factory]:
        names |= set(nonlocals.get(variable, ()))
    return factory, names


def check_policy_names(value: Any, name: str, tags: Sequence[str]) -> None:
    """A name-based policy's names against the ``checkpoint_name`` tags a model uses.

    A ValueError if none of the policy's names is tagged (the policy then equals
    ``nothing_saveable`` or ``everything_saveable``); a UserWarning if only some are.
    """
    factory, names = _policy_names(value)
    missing = sorted(n for n in names if n not in tags)
    if not missing:
        return
    tagged = ", ".join(repr(t) for t in tags) or "none"
    text = (f"{name} ({factory}) names {', '.join(repr(n) for n in missing)}, which the "
            f"function never tags with checkpoint_name; the names it tags: {tagged}")
    if len(missing) == len(names):
        raise ValueError(text)
    warnings.warn(text, UserWarning, stacklevel=3)


def _dims(aval: Any) -> list[int] | None:
    shape = getattr(aval, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return [int(d) for d in shape]


def _eqn_flops(eqn: Any) -> int:
    """A generous estimate of an equation's FLOPs, as exact Python ints."""
    outs = [_dims(v.aval) for v in eqn.outvars]
    out_elements = sum(math.prod(d) for d in outs if d is not None)
    if eqn.primitive.name == "dot_general":
        (lhs_contract, _), _ = eqn.params["dimension_numbers"]
        lhs = _dims(eqn.invars[0].aval) or []
        return 2 * out_elements * math.prod(lhs[i] for i in lhs_contract)
    if eqn.primitive.name == "conv_general_dilated":
        rhs = _dims(eqn.invars[1].aval) or []
        return 2 * out_elements * math.prod(rhs)
    ins = [_dims(getattr(v, "aval", None)) for v in eqn.invars]
    return out_elements + sum(math.prod(d) for d in ins if d is not None)


def _program_totals(jaxpr: Any, times: int = 1) -> tuple[int, int]:
    total_bytes, total_flops = 0, 0
    for var in [*jaxpr.invars, *jaxpr.constvars]:
        dims = _dims(var.aval)
        if dims is not None:
            total_bytes += nbytes(dims, var.aval.dtype)
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            dims = _dims(var.aval)
            if dims is not None and hasattr(var.aval, "dtype"):
                total_bytes += nbytes(dims, var.aval.dtype)
        total_flops += times * _eqn_flops(eqn)
        trips = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
        for sub in _sub_jaxprs(eqn):
            sub_bytes, sub_flops = _program_totals(sub, times * trips)
            total_bytes += sub_bytes
            total_flops += sub_flops
    return total_bytes, total_flops


def check_program(jaxpr: Any, name: str) -> None:
    """Refuses a program XLA could not size: its values or FLOPs overflow 64-bit counts."""
    total_bytes, total_flops = _program_totals(jaxpr)
    if total_bytes > MAX_BYTES:
        raise ValueError(
            f"{name} holds {total_bytes:,} bytes of values, more than any machine holds (at "
            f"most {MAX_BYTES:,}), so XLA cannot size it: make the arguments smaller"
        )
    if total_flops > MAX_FLOPS:
        raise ValueError(
            f"{name} needs about {total_flops:,} FLOPs, more than XLA's 64-bit cost "
            f"analysis can count (at most {MAX_FLOPS:,}): make the arguments smaller"
        )
