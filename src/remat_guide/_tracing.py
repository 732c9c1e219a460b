"""Tracing a function's VJP over its flattened arguments, shared by the tools that read residuals."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from remat_guide import _validation as validation
from remat_guide._labels import policy_label

__all__ = ["argument_names", "check_arguments", "check_keywords", "explain_policy_error", "flat_vjp", "trace_vjp"]


def _positional_names(f: Callable, args: tuple) -> list[str] | None:
    """The names of the parameters that ``args`` fill when ``f`` is called; None when unknown."""
    try:
        signature = inspect.signature(f)
        bound = signature.bind_partial(*args)
    except (TypeError, ValueError):
        return None
    named_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [name for name in list(bound.arguments)[: len(args)] if signature.parameters[name].kind in named_kinds]


def argument_names(f: Callable, args: tuple, kwargs: dict) -> list[str]:
    """One name per flattened leaf of ``(args, kwargs)``, such as ``params['w']``."""
    positional_names = _positional_names(f, args) or []
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path((args, kwargs))[0]:
        top, key, *rest = path
        if top.idx == 0:
            index = key.idx
            base = positional_names[index] if index < len(positional_names) else f"args[{index}]"
        else:
            base = key.key
        names.append(base + jax.tree_util.keystr(tuple(rest)))
    return names


def check_keywords(f: Callable, args: tuple, kwargs: dict, what: str) -> None:
    """Refuses a keyword argument of ``f`` that ``args`` already passes by position.

    Args:
        f: The function to be called as ``f(*args, **kwargs)``.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        what: How messages name the keyword arguments: ``"keyword argument"`` or ``"kwargs"``.
    """
    for key in kwargs:
        if not isinstance(key, str):
            raise TypeError(f"{what} must have str keys, got {type(key).__name__}")
    positional_names = _positional_names(f, args) or []
    for index, name in enumerate(positional_names):
        if name in kwargs:
            where = f"{what}[{name!r}]" if what == "kwargs" else f"{what} {name!r}"
            raise TypeError(f"{where} is also passed by position (positional argument {index}, "
                            f"{name}): Python would give {name} two values")


def check_arguments(f: Callable, args: tuple, kwargs: dict, argnums: Any) -> list[bool]:
    """The arguments of a function to differentiate; returns which flattened leaves are differentiated.

    Args:
        f: The function.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        argnums: ``None`` for every leaf of every argument, positional and keyword (at least
            one floating-point); else an int or a sequence of ints, as for ``jax.grad``: every
            leaf of those positional arguments, each floating-point. Keyword arguments are
            then never differentiated.

    Returns:
        One bool per leaf of ``(args, kwargs)``, in ``jax.tree_util`` order.
    """
    check_keywords(f, args, kwargs, "keyword argument")
    flat = jax.tree_util.tree_flatten_with_path((args, kwargs))[0]
    leaves = [leaf for _, leaf in flat]
    names = argument_names(f, args, kwargs)
    validation.arguments(leaves, names)
    if argnums is None:
        validation.require_floating(leaves, names, every=False,
                                    why="only floating-point values have gradients, as for jax.grad")
        return [True] * len(leaves)
    argnums = validation.argnums(argnums, len(args), "f")
    selected = {argnums} if isinstance(argnums, int) else set(argnums)
    chosen = [path[0].idx == 0 and path[1].idx in selected for path, _ in flat]
    validation.require_floating([leaf for leaf, c in zip(leaves, chosen) if c],
                                [name for name, c in zip(names, chosen) if c],
                                every=True, why=f"argnums={argnums} differentiates it, as jax.grad would")
    return chosen


_JAX_VALUES = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


def _check_returned(out: Any, name: str) -> Any:
    """``out`` if every leaf of it is a value JAX can differentiate, else a TypeError naming ``name``."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        if not isinstance(leaf, _JAX_VALUES):
            where = f"output{jax.tree_util.keystr(path)}" if path else "output"
            raise TypeError(f"{name} must return arrays (or a pytree of arrays); its {where} "
                            f"is a {type(leaf).__name__}: {leaf!r:.40}")
    return out


def flat_vjp(f: Callable, args: tuple, kwargs: dict, differentiated: Sequence[bool] | None = None,
             *, name: str = "f") -> tuple[Callable, list[Any]]:
    """``jax.vjp`` of ``f`` with respect to some leaves of its arguments, as a function of all the leaves.

    Args:
        f: The function.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        differentiated: One bool per leaf of ``(args, kwargs)`` (see :func:`check_arguments`);
            ``None`` for all of them.
        name: How messages name ``f``, if it returns something other than arrays.

    Returns:
        A function of the flattened leaves of ``(args, kwargs)`` that returns
        ``jax.vjp(...)``: the output of ``f`` and the VJP function, whose leaves are the
        residuals. The leaves not differentiated are closed over, as ``jax.grad`` closes
        over the arguments outside ``argnums``. Then the leaves themselves.
    """
    leaves, in_tree = jax.tree_util.tree_flatten((args, kwargs))
    chosen = [True] * len(leaves) if differentiated is None else list(differentiated)

    def vjp_of_chosen(*flat_args):
        def of_chosen(*values):
            supplied = iter(values)
            full = [next(supplied) if c else leaf for leaf, c in zip(flat_args, chosen)]
            call_args, call_kwargs = jax.tree_util.tree_unflatten(in_tree, full)
            return _check_returned(f(*call_args, **call_kwargs), name)

        return jax.vjp(of_chosen, *(leaf for leaf, c in zip(flat_args, chosen) if c))

    return vjp_of_chosen, leaves


def trace_vjp(f: Callable, args: tuple, kwargs: dict, differentiated: Sequence[bool] | None = None,
              *, name: str = "f") -> tuple[Any, Any, Any]:
    """Traces :func:`flat_vjp`: every leaf of the arguments is an input of the jaxpr.

    So the residuals that are arguments show as the jaxpr's input variables, differentiated
    or not.

    Returns:
        The jaxpr, whose outputs end with the residuals, the shape of ``f``'s output,
        and the shape of the VJP function, a pytree whose leaves are the residuals.
    """
    vjp_of_chosen, leaves = flat_vjp(f, args, kwargs, differentiated, name=name)
    try:
        closed, (out_shape, vjp_shape) = jax.make_jaxpr(vjp_of_chosen, return_shape=True)(*leaves)
    except TypeError as error:
        explain_policy_error(f, args, kwargs, error)
        raise
    return closed.jaxpr, out_shape, vjp_shape


def explain_policy_error(f: Callable, args: tuple, kwargs: dict, error: TypeError) -> None:
    """Names the policy of ``f``'s ``jax.checkpoint`` that a TypeError came from, if one did."""
    try:
        forward = jax.make_jaxpr(f)(*args, **kwargs).jaxpr
    except Exception:  # the error is not the policy's: the original one is raised
        return
    policies = [e.params["policy"] for e in validation.walk(forward)
                if e.primitive.name in validation.CHECKPOINT_PRIMITIVES and e.params.get("policy")]
    for policy in policies:
        validation.policy(policy, f"the policy {policy_label(policy)} of a jax.checkpoint in f")
    if policies and "remat policy" in str(error):
        labels = ", ".join(dict.fromkeys(policy_label(p) for p in policies))
        raise TypeError(f"a jax.checkpoint policy in f ({labels}) answered other than True/False "
                        f"(or Saveable, Recompute, Offloadable(...)): {error}") from error
