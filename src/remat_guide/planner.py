"""Pick which ``checkpoint_name`` values to save under a memory budget, confirmed by compiling."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax

from remat_guide import _validation as validation
from remat_guide._labels import names_label
from remat_guide._measure import (
    STANDARD_POLICIES,
    Inputs,
    Program,
    check_inputs,
    measure,
    standard_policy,
    trace_baseline,
    trace_policy,
)
from remat_guide.compare import PolicyRow, memory_figure, row_of

__all__ = ["plan_names"]


# Keys of a measured dict that are not labels (labels are str): the model it belongs to,
# and the checkpoint_name tags and baseline label that tracing loss_for(None) gave.
_ARGUMENTS = ("arguments",)
_BASELINE = ("baseline",)


def _fingerprint(loss_for: Callable, inputs: Inputs) -> tuple:
    """What a measured dict's rows depend on: the model, the arguments' types, argnums, has_aux, target."""
    leaves, tree = jax.tree.flatten((inputs.args, inputs.kwargs))
    types = tuple((tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", type(leaf))),
                   str(getattr(leaf, "sharding", None))) for leaf in leaves)
    return loss_for, tree, types, inputs.argnums, inputs.has_aux, inputs.target


def _names(names: Any, tagged: list[str]) -> tuple[str, ...]:
    if names is None:
        if not tagged:
            raise ValueError(
                "names: loss_for(policy) tags no value with checkpoint_name, so there is no "
                "name to choose; tag values with jax.ad_checkpoint.checkpoint_name")
        return tuple(tagged)
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"names must be None or an iterable of str, got {type(names).__name__}")
    names = list(names)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"names must hold str values, got {type(name).__name__}")
    if not names:
        raise ValueError("names must not be empty (None means every name the model tags)")
    if len(set(names)) != len(names):
        raise ValueError(f"names must not repeat a name, got {list(names)}")
    unknown = [name for name in names if name not in tagged]
    if unknown:
        raise ValueError(
            f"names: {unknown} are not tagged by loss_for(policy); its checkpoint_name tags "
            f"are {tagged}")
    return tuple(names)


def plan_names(
    loss_for: Callable[[Any], Callable[..., Any]],
    /,
    *args: Any,
    budget_bytes: int,
    names: Iterable[str] | None = None,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    kwargs: Mapping[str, Any] | None = None,
    measured: dict | None = None,
    target: str | None = None,
) -> PolicyRow:
    """The set of named values to save with the fewest FLOPs whose compiled memory fits a budget.

    Same conventions as :func:`recommend_policy`: ``loss_for(policy)`` returns the loss,
    every candidate is measured by compiling ``jax.jit(jax.grad(loss, argnums,
    has_aux=has_aux))`` (never run), its residuals counted for the same ``argnums``, and
    the winner is the fitting candidate (``device_bytes <= budget_bytes``) with the fewest
    true FLOPs, then the least memory. The candidates are the subsets of ``names``, each
    as ``jax.checkpoint_policies.save_only_these_names(*subset)``, and, so that the answer
    is never worse than a preset, the baseline and the standard policies of
    ``STANDARD_POLICIES``. The returned row's ``name`` lists the chosen names (or names
    the standard policy, or ``"no checkpoint"``, when no subset of names does as well),
    its ``policy`` is the object to pass to ``jax.checkpoint``, and its ``compiled``
    says how many policies were compiled. (When ``loss_for(None)`` still checkpoints, its
    row is named ``"loss_for(None)"``, as in :func:`compare_policies`.)

    The search:

    1. Compile the baseline and the standard policies (the empty set of names is
       ``nothing_saveable``), then each name alone.
    2. Walk down from the set of all names: compile a set; if it fits, it is a candidate
       and the walk stops there (a subset saves less, so it cannot take fewer FLOPs); if
       it does not fit and takes fewer FLOPs than the best candidate so far, try each set
       with one name fewer. A set is skipped without compiling when a compiled superset
       already takes at least the FLOPs of the best candidate.
    3. The skips assume that saving more names never adds FLOPs. Every pair of compiled
       sets is checked against that; if one contradicts it, every remaining subset is
       compiled.

    Every decision is taken on compiled numbers, none on an estimate. The cost is
    ``5 + len(names)`` compilations, plus those of step 2: one when all names fit, and up
    to all ``2 ** len(names)`` subsets when the budget is tight (compiled memory does not
    always grow with the set saved, so every set with fewer FLOPs than the answer has to
    be compiled to show that it does not fit). The measurements do not depend on the
    budget: to plan several budgets for the same model, pass the same ``measured`` dict
    to each call, and no policy is compiled twice.

    Args:
        loss_for: Called as ``loss_for(policy)``; returns the scalar loss function of
            ``*args`` checkpointed with that policy (``loss_for(None)``: no checkpoint).
        *args: The loss's arguments, as for :func:`compare_policies` (sharded ones
            included: then the budget and every figure are per device).
        budget_bytes: The most device memory the compiled gradient may use, in bytes, as
            ``PolicyRow.device_bytes`` counts it (temporary memory on this machine, the
            peak on an accelerator ``target``).
        names: The ``checkpoint_name`` tags to choose from; ``None`` for every tag the
            traced loss uses.
        argnums: As for :func:`compare_policies`: the positional arguments to
            differentiate, as for ``jax.grad``.
        has_aux: As for :func:`compare_policies`: the loss returns ``(loss, aux)``.
        kwargs: As for :func:`compare_policies`: the loss's keyword arguments, as a
            mapping, never differentiated.
        measured: ``None``, or a dict that keeps every row compiled, for later calls with
            the same ``loss_for``, arguments, ``argnums`` and ``has_aux`` (start with an
            empty dict, or with the rows of :func:`compare_policies` for the same model,
            keyed by name). A later call reads the model's tags from it and traces nothing.
        target: As for :func:`compare_policies`: the accelerator to compile for, ahead of
            time (``None``: this machine).

    Returns:
        The chosen row; its ``compiled`` counts the policies this call compiled.

    Raises:
        TypeError: If ``loss_for`` is not callable, ``budget_bytes`` is not an int,
            ``names`` is not an iterable of str, ``measured`` is not a dict, or an
            argument, ``argnums``, ``has_aux`` or ``kwargs`` is wrong as for
            :func:`compare_policies`.
        ValueError: If ``budget_bytes`` is not positive, ``names`` is empty, repeats a
            name or holds one the model does not tag, the model tags nothing, ``measured``
            holds rows of another model, other arguments or another target, ``target`` is
            unknown, or no candidate fits; that
            message names the smallest memory reached.

    Examples:
        >>> from remat_guide import plan_names
        >>> from remat_guide.models import transformer_args, transformer_loss
        >>> args = transformer_args(layers=2, batch=1, seq=16, d_model=32, heads=2, mlp_dim=64)
        >>> measured = {}
        >>> loose = plan_names(transformer_loss, *args, budget_bytes=2**30,
        ...                    names=["attn_out", "mlp_hidden"], measured=measured)
        >>> loose.name, loose.compiled  # 5 standard rows, 2 names alone, both together
        ('no checkpoint', 8)
        >>> budget = measured["nothing_saveable"].temp_bytes + 2**10
        >>> tight = plan_names(transformer_loss, *args, budget_bytes=budget,
        ...                    names=["attn_out", "mlp_hidden"], measured=measured)
        >>> tight.name, tight.temp_bytes <= budget, tight.compiled
        ("save_only_these_names('attn_out')", True, 0)
        >>> tight.flops < measured["nothing_saveable"].flops
        True
        >>> plan_names(transformer_loss, *args, budget_bytes=1, names=["attn_out"],
        ...            measured=measured)
        Traceback (most recent call last):
        ...
        ValueError: nothing fits budget_bytes=1: the smallest temporary memory reached is ... bytes, with ...
    """
    validation.callable_arg(loss_for, "loss_for")
    budget_bytes = validation.integer(budget_bytes, "budget_bytes")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    if measured is None:
        measured = {}
    elif not isinstance(measured, dict):
        raise TypeError(f"measured must be None or a dict, got {type(measured).__name__}")
    inputs = check_inputs(args, argnums, kwargs, has_aux, target)
    key = _fingerprint(loss_for, inputs)
    target_name = None if inputs.target is None else inputs.target.name
    for row in measured.values():
        if isinstance(row, PolicyRow) and row.target != target_name:
            raise ValueError(f"measured holds rows of another target: {row.name!r} was compiled for "
                             f"{row.target or 'this machine'}, not for {target_name or 'this machine'}; "
                             "start each target with an empty dict")
    if measured.setdefault(_ARGUMENTS, key) != key:
        raise ValueError("measured holds rows of another loss_for, other args, argnums, has_aux or target; "
                         "start each model with an empty dict")
    base: Program | None = None
    if _BASELINE in measured:
        tags, base_label = measured[_BASELINE]
    else:
        base, tags = trace_baseline(loss_for, inputs)
        base_label = base.label
        measured[_BASELINE] = (tags, base_label)
    names = _names(names, tags)

    labels = [base_label, *STANDARD_POLICIES]
    compiled = 0
    if not all(label in measured for label in labels):
        if base is None:
            base, _ = trace_baseline(loss_for, inputs)
        programs = [base] + [trace_policy(loss_for, label, standard_policy(label), inputs, tags)
                             for label in STANDARD_POLICIES]
        results = measure(programs, inputs)
        for program, result in zip(programs, results):
            measured[program.label] = row_of(program, result, results[0].flops, inputs)
        compiled += len(programs)
    standard = [measured[label] for label in labels]
    base_flops = standard[0].flops
    sets: dict[frozenset[str], PolicyRow] = {
        frozenset(): next(row for row in standard if row.name == "nothing_saveable")}

    def measure_set(subset: frozenset[str]) -> PolicyRow:
        nonlocal compiled
        chosen = [name for name in names if name in subset]
        label = names_label(chosen)
        if label not in measured:
            policy = jax.checkpoint_policies.save_only_these_names(*chosen)
            program = trace_policy(loss_for, label, policy, inputs, tags)
            measured[label] = row_of(program, measure([program], inputs)[0], base_flops, inputs)
            compiled += 1
        sets[subset] = measured[label]
        return sets[subset]

    def best() -> PolicyRow | None:
        fitting = [row for row in [*standard, *sets.values()] if row.device_bytes <= budget_bytes]
        return min(fitting, key=lambda row: (row.flops, row.device_bytes), default=None)

    for name in names:
        measure_set(frozenset([name]))
    level = {frozenset(names)} if len(names) > 1 else set()
    while level:
        below: set[frozenset[str]] = set()
        for subset in sorted(level, key=lambda s: [n for n in names if n in s]):
            leader = best()
            if subset not in sets:
                if leader is not None and any(
                        row.flops >= leader.flops for other, row in sets.items() if other > subset):
                    continue
                measure_set(subset)
            row = sets[subset]
            if row.device_bytes > budget_bytes and (leader is None or row.flops < leader.flops):
                below.update(subset - {name} for name in subset)
        level = below

    if any(sets[big].flops > sets[small].flops for big in sets for small in sets if small < big):
        for size in range(len(names) + 1):
            for subset in map(frozenset, itertools.combinations(names, size)):
                if subset not in sets:
                    measure_set(subset)

    chosen = best()
    if chosen is None:
        smallest = min([*standard, *sets.values()], key=lambda row: row.device_bytes)
        raise ValueError(
            f"nothing fits budget_bytes={budget_bytes}: the smallest {memory_figure(smallest)} reached "
            f"is {smallest.device_bytes} bytes, with {smallest.name} ({compiled} policies compiled)")
    return dataclasses.replace(chosen, compiled=compiled)
