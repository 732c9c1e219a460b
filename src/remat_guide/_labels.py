"""Short, deterministic names for checkpoint policies, for rows, messages and listings."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax

__all__ = ["names_label", "policy_label"]


def policy_label(policy: Callable) -> str:
    """A short, deterministic name for a policy, for messages and printed listings.

    The ``repr`` of a policy is useless for that: policies are plain functions and
    closures whose ``repr`` holds a memory address.

    Args:
        policy: A policy (any callable).

    Returns:
        The name(s) under which ``jax.checkpoint_policies`` holds ``policy``, joined by
        ``" / "`` (aliases share one function); else, for a function built inside a
        factory, the factory's name followed by ``(...)``; else the function's qualified
        name (without the functions it is nested in); else the class name of a
        callable object.

    Raises:
        TypeError: If ``policy`` is not callable.

    Examples:
        >>> import jax
        >>> from remat_guide import policy_label
        >>> P = jax.checkpoint_policies
        >>> policy_label(P.everything_saveable)
        'everything_saveable'
        >>> policy_label(P.save_any_names_but_these("act"))
        'save_any_names_but_these(...)'
        >>> def mine(prim, *avals, **params):
        ...     return False
        >>> policy_label(mine)
        'mine'
        >>> policy_label(P.save_from_both_policies(mine, P.nothing_saveable))
        'mine'
    """
    if not callable(policy):
        raise TypeError(f"policy must be callable, got {type(policy).__name__}")
    names = [name for name, p in vars(jax.checkpoint_policies).items() if p is policy]
    if names:
        return " / ".join(names)
    qualname = getattr(policy, "__qualname__", None)
    if not isinstance(qualname, str):
        return type(policy).__name__
    if ".<locals>." not in qualname:
        return qualname
    outer, _, inner = qualname.rpartition(".<locals>.")
    factory = getattr(jax.checkpoint_policies, outer, None)
    if factory is not None and getattr(factory, "__module__", None) == getattr(
            policy, "__module__", ""):
        return f"{outer}(...)"
    return inner



def names_label(names: Sequence[str]) -> str:
    """The label of ``save_only_these_names(*names)``, as the rows of a comparison show it."""
    return "save_only_these_names(" + ", ".join(repr(name) for name in names) + ")"
