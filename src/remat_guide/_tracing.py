"""Tracing a function's VJP over its flattened arguments, shared by the tools that read residuals."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax

from remat_guide import _validation as validation
from remat_guide._labels import policy_label

__all__ = ["argument_names", "check_arguments", "explain_policy_error", "trace_vjp"]


def argument_names(f: Callable, args: tuple, kwargs: dict) -> list[str]:
    """One name per flattened leaf of ``(args, kwargs)``, such as ``params['w']``."""
    try:
        signature = inspect.signature(f)
        bound = signature.bind(*args, **kwargs)
        named_kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        positional_names = [name for name in list(bound.arguments)[: len(args)]
                            if signature.parameters[name].kind in named_kinds]
    except (TypeError, ValueError):
        positional_names = []
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


def check_arguments(f: Callable, args: tuple, kwargs: dict) -> None:
    """The arguments of a function to differentiate: arrays, at least one floating-point."""
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    names = argument_names(f, args, kwargs)
    validation.arguments(leaves, names)
    validation.require_floating(leaves, names, every=False,
                                why="only floating-point values have gradients, as for jax.grad")


def trace_vjp(f: Callable, args: tuple, kwargs: dict) -> tuple[Any, Any, Any]:
    """Traces ``jax.vjp(f, *args, **kwargs)`` over the flattened arguments.

    Returns its jaxpr, whose outputs end with the residuals, the shape of ``f``'s output,
    and the shape of the VJP function, a pytree whose leaves are the residuals.
    """
    leaves, in_tree = jax.tree_util.tree_flatten((args, kwargs))

    def flat_f(*flat_args):
        call_args, call_kwargs = jax.tree_util.tree_unflatten(in_tree, flat_args)
        return f(*call_args, **call_kwargs)

    try:
        closed, (out_shape, vjp_shape) = jax.make_jaxpr(
            lambda *flat_args: jax.vjp(flat_f, *flat_args), return_shape=True
        )(*leaves)
    except TypeError as error:
        explain_policy_error(flat_f, leaves, error)
        raise
    return closed.jaxpr, out_shape, vjp_shape


def explain_policy_error(flat_f: Callable, leaves: list, error: TypeError) -> None:
    """Names the policy of ``f``'s ``jax.checkpoint`` that a TypeError came from, if one did."""
    try:
        forward = jax.make_jaxpr(flat_f)(*leaves).jaxpr
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
