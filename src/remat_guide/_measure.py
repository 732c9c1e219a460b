"""Checking a model's loss and measuring one policy on it: shared by compare_policies and plan_names."""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import numbers
import re
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from remat_guide import _cache as cache
from remat_guide import _validation as validation
from remat_guide._labels import names_label
from remat_guide._tracing import check_keywords
from remat_guide.flops import count_flops
from remat_guide.residuals import saved_residuals
from remat_guide.sharded import is_sharded, residual_shardings
from remat_guide.targets import Estimate, Target, device_bytes, estimate_step, lowering_for, place, target, usable_bytes

__all__ = ["BASELINE", "CHECKPOINTED_BASELINE", "STANDARD_POLICIES", "Inputs", "Measurement", "Program",
           "as_policies", "budget_or_usable", "call_loss", "check_inputs", "default_policies", "measure",
           "refused_bytes", "standard_policy", "target_memory", "target_step", "trace_baseline", "trace_policy"]

BASELINE = "no checkpoint"
CHECKPOINTED_BASELINE = "loss_for(None)"
"""The label of the baseline row when ``loss_for(None)`` still uses ``jax.checkpoint``."""

# The standard policies that take no arguments and run on every backend (the offloading
# ones need a host memory space to matter; the aliases checkpoint_dots and
# checkpoint_dots_with_no_batch_dims are the same objects as two of these).
STANDARD_POLICIES = (
    "everything_saveable",
    "dots_saveable",
    "dots_with_no_batch_dims_saveable",
    "nothing_saveable",
)


def standard_policy(name: str) -> Any:
    """The policy of ``jax.checkpoint_policies`` called ``name``; a ValueError for a factory or an unknown name."""
    policy = getattr(jax.checkpoint_policies, name, None)
    if policy is None or name.startswith("_"):
        known = ", ".join(sorted(n for n in vars(jax.checkpoint_policies) if not n.startswith("_")))
        raise ValueError(f"policies: unknown policy name {name!r}; jax.checkpoint_policies has {known}")
    if name in ("save_only_these_names", "save_any_names_but_these", "save_anything_except_these_names",
                "save_from_both_policies", "offload_dot_with_no_batch_dims",
                "save_and_offload_only_these_names"):
        raise ValueError(
            f"policies: {name!r} needs arguments; pass the policy object under a label, "
            f"e.g. {{'{name}(...)': jax.checkpoint_policies.{name}(...)}}"
        )
    return policy


def default_policies(tags: Sequence[str]) -> dict[str, Any]:
    """The standard policies, then one ``save_only_these_names`` per tag and one for all."""
    policies = {name: getattr(jax.checkpoint_policies, name) for name in STANDARD_POLICIES}
    for name in tags:
        policies[names_label([name])] = jax.checkpoint_policies.save_only_these_names(name)
    if len(tags) > 1:
        policies[names_label(tags)] = jax.checkpoint_policies.save_only_these_names(*tags)
    return policies


def as_policies(policies: Any) -> dict[str, Any]:
    """The ``policies`` argument of compare_policies as a dict from labels to checked policies."""
    validation.ordered(policies, "policies")
    if isinstance(policies, Mapping):
        result = {}
        for label, policy in policies.items():
            if not isinstance(label, str):
                raise TypeError(f"policies: labels must be str, got {type(label).__name__}")
            if label in (BASELINE, CHECKPOINTED_BASELINE):
                raise ValueError(f"policies: {label!r} is the baseline row, always included")
            result[label] = validation.policy(policy, f"policies[{label!r}]")
        return result
    if isinstance(policies, (str, bytes)) or not isinstance(policies, Iterable):
        raise TypeError(
            "policies must be None, a sequence of names from jax.checkpoint_policies, or a "
            f"mapping from labels to policies, got {type(policies).__name__}"
        )
    policies = list(policies)
    for name in policies:
        if not isinstance(name, str):
            raise TypeError(f"policies: names must be str, got {type(name).__name__}")
        if policies.count(name) > 1:
            raise ValueError(f"policies: {name!r} is given twice")
    return {name: standard_policy(name) for name in policies}


def call_loss(loss_for: Callable, policy: Any) -> Callable:
    """``loss_for(policy)``, refused unless it is a function."""
    loss = loss_for(policy)
    if not callable(loss):
        raise TypeError(f"loss_for(policy) must return a loss function, got {type(loss).__name__}")
    return loss


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The checked inputs of a measurement.

    Either ``jax.grad(loss, argnums, has_aux)(*args, **kwargs)``, or, with ``step``, the
    training step itself, ``jax.jit(step, donate_argnums=donate)(*args, **kwargs)``.
    """

    args: tuple
    kwargs: dict[str, Any]
    argnums: int | tuple[int, ...]
    has_aux: bool
    target: Target | None = None
    step: bool = False
    donate: tuple[int, ...] = ()

    @property
    def per_device(self) -> bool:
        """Whether the arguments are sharded, so that XLA compiles a program per device."""
        return is_sharded(*self.args, self.kwargs)


def _donated(value: Any, nargs: int) -> tuple[int, ...]:
    """``donate_argnums`` of a step: ``None`` for its first two arguments, else ints as ``jax.jit`` takes them."""
    if value is None:
        return tuple(range(min(2, nargs)))
    donated = validation.argnums(value, nargs, "the step", name="donate_argnums",
                                 forms="None, an int or a sequence of ints", empty=True)
    return (donated,) if isinstance(donated, int) else tuple(sorted(donated))


def check_inputs(args: tuple, argnums: Any, kwargs: Any = None, has_aux: Any = False,
                 target_name: Any = None, step: Any = False, donate_argnums: Any = None) -> Inputs:
    """The arguments, ``argnums``, ``kwargs``, ``has_aux``, ``target``, ``step`` and ``donate_argnums``, checked."""
    step = validation.boolean(step, "step")
    if not step:
        if donate_argnums is not None:
            raise ValueError("donate_argnums applies to a training step (step=True); a loss's gradient donates "
                             "nothing")
    else:
        if not (isinstance(argnums, int) and not isinstance(argnums, bool) and argnums == 0):
            raise ValueError("argnums applies to a loss; with step=True the step differentiates what it "
                             "chooses, so leave argnums out")
        if has_aux is not False:
            raise ValueError("has_aux applies to a loss; with step=True the step's outputs are returned as "
                             "they are, so leave has_aux out")
    chosen_target = None if target_name is None else target(target_name)
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be None or a mapping from names to the loss's keyword arguments, "
                        f"got {type(kwargs).__name__}")
    kwargs = dict(kwargs)
    for key in kwargs:
        if not isinstance(key, str):
            raise TypeError(f"kwargs must have str keys (keyword names), got {type(key).__name__}")
    has_aux = validation.boolean(has_aux, "has_aux")
    paths, _ = jax.tree_util.tree_flatten_with_path(args)
    names = [f"args{jax.tree_util.keystr(path)}" for path, _ in paths]
    validation.arguments([leaf for _, leaf in paths], names)
    keyword_paths, _ = jax.tree_util.tree_flatten_with_path(kwargs)
    validation.arguments([leaf for _, leaf in keyword_paths],
                         [f"kwargs{jax.tree_util.keystr(path)}" for path, _ in keyword_paths])
    if step:
        if not args:
            raise TypeError("a training step (step=True) needs its positional arguments, such as "
                            "params, opt_state, batch; got none")
        return Inputs(tuple(args), kwargs, 0, False, chosen_target, True, _donated(donate_argnums, len(args)))
    argnums = validation.argnums(argnums, len(args))
    selected = {argnums} if isinstance(argnums, int) else set(argnums)
    chosen = [(leaf, name) for (path, leaf), name in zip(paths, names) if path[0].idx in selected]
    why = f"jax.grad differentiates argnums={argnums}"
    validation.require_floating([leaf for leaf, _ in chosen], [name for _, name in chosen], every=True, why=why)
    for leaf, name in chosen:
        dtype = leaf.dtype if hasattr(leaf, "dtype") else np.result_type(leaf)
        if jnp.issubdtype(dtype, jnp.complexfloating):
            raise TypeError(f"argument {name} must have a real floating-point dtype ({why}; complex "
                            f"inputs need jax.grad(..., holomorphic=True)), got {dtype}")
    return Inputs(tuple(args), kwargs, argnums, has_aux, chosen_target)


def _abstract(value: Any) -> Any:
    """A loss's output as ``validation.floating_scalar`` reads it: its shape and dtype if it has them."""
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, bool):
        return jax.ShapeDtypeStruct((), jnp.result_type(value))
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return jax.ShapeDtypeStruct(tuple(value.shape), value.dtype)
    return value


def _checked_loss(loss: Callable, has_aux: bool, name: str) -> Callable:
    """``loss``, refusing with our wording an output that ``jax.grad`` cannot differentiate."""

    @functools.wraps(loss)
    def checked(*args: Any, **kwargs: Any) -> Any:
        out = loss(*args, **kwargs)
        value = out
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                if isinstance(out, tuple):
                    got = f"a tuple of {len(out)}"
                elif hasattr(out, "shape") and hasattr(out, "dtype"):
                    got = f"one array of shape {tuple(out.shape)}"
                else:
                    got = type(out).__name__
                raise TypeError(f"{name} must return a loss that returns a pair (loss, aux), as has_aux=True "
                                f"says, got a loss returning {got}")
            value = out[0]
        validation.floating_scalar(_abstract(value), name)
        return out

    return checked


@dataclasses.dataclass(frozen=True)
class Program:
    """One row: its loss and ``jax.jit(jax.grad(loss, argnums, has_aux))``, traced once.

    The trace serves the checks and the compilation; the loss serves the residual listing.
    """

    label: str
    policy: Any
    loss: Callable
    traced: Any
    """The program traced with the arguments as given; ``None`` for a target's program whose
    local FLOPs the cache has (:attr:`local_flops`)."""
    on_target: Any = None
    """The same program traced with the arguments placed on ``inputs.target``'s devices, lowered."""
    local_flops: dict[str, int] | None = None
    """The FLOPs of a target's program on this machine, as the cache keeps them under ``on_target``."""


def _is_flax_trace_error(error: BaseException) -> bool:
    """Whether ``error`` is Flax's ``TraceContextError`` (Flax need not be installed to ask)."""
    kind = type(error)
    return kind.__name__ == "TraceContextError" and kind.__module__.startswith("flax")


def _trace_program(program: Any, args: tuple, kwargs: dict, name: str) -> Any:
    """``program.trace(*args, **kwargs)``; Flax NNX's trace-level error explained in our words.

    ``jax.grad`` traces the arguments it differentiates one level inside the others. An NNX
    model rebuilt by ``nnx.merge`` without ``copy=True`` reuses the variables of the states it
    is given, so a module that updates a variable of an argument not differentiated (a
    dropout's RNG count, a batch norm's statistics) updates one of the outer level, which
    Flax refuses deep inside the trace.
    """
    try:
        return program.trace(*args, **kwargs)
    except Exception as error:
        if not _is_flax_trace_error(error):
            raise
        flax_says = str(error).partition(" (http")[0]
        raise ValueError(
            f"{name}: Flax refused to trace it ({flax_says}). A Flax NNX model rebuilt "
            "with nnx.merge(graphdef, params, rest) reuses the variables of `rest`, which "
            "jax.grad traces outside the gradient, so the model may not update them (a "
            "dropout's RNG count, a batch norm's statistics). Rebuild it inside the loss "
            "with nnx.merge(graphdef, params, rest, copy=True): its variables are then the "
            "loss's own (the guide's frameworks page shows the whole recipe)."
        ) from error


def _trace(loss_for: Callable, policy: Any, name: str, inputs: Inputs,
           flops: bool = True) -> tuple[Callable, Any, Any, dict[str, int] | None, Any]:
    """``loss_for(policy)``, its program traced and checked (no compilation), and for the target, lowered.

    The program is the loss's gradient, or with ``inputs.step`` the step itself, jitted with
    its donated arguments. Returns the loss, the local trace, the target's lowered program,
    its local FLOPs when the cache has them, and the jaxpr that was checked. With a target,
    the local trace serves only to count FLOPs on this machine: it is made when ``flops`` is
    asked for and the cache has not kept them under the target's program, else it is
    ``None``; the target's trace is the one checked.
    """
    if inputs.step:
        loss = loss_for(policy)
        if not callable(loss):
            raise TypeError(f"step_for(policy) must return a training step function, got {type(loss).__name__}")
        check_keywords(loss, inputs.args, inputs.kwargs, "kwargs")
        program = jax.jit(loss, donate_argnums=inputs.donate)
        what = f"the step {name.replace('loss_for', 'step_for')}"
    else:
        loss = call_loss(loss_for, policy)
        check_keywords(loss, inputs.args, inputs.kwargs, "kwargs")
        gradient = jax.grad(_checked_loss(loss, inputs.has_aux, name), argnums=inputs.argnums,
                            has_aux=inputs.has_aux)
        program = jax.jit(gradient)
        what = f"the gradient of {name}"
    called = name.replace("loss_for", "step_for") if inputs.step else name
    if inputs.target is None:
        traced = _trace_program(program, inputs.args, inputs.kwargs, called)
        validation.check_program(traced.jaxpr.jaxpr, what)
        return loss, traced, None, None, traced.jaxpr.jaxpr
    args, kwargs = place((inputs.args, inputs.kwargs), inputs.target)  # together: one set of devices
    on_target = _trace_program(program, args, kwargs, called)
    validation.check_program(on_target.jaxpr.jaxpr, what)
    with lowering_for(inputs.target):
        lowered = on_target.lower()
    local_flops = _kept_flops(cache.stored("local-flops", _flops_compiler(inputs.target), lowered)) if flops else None
    traced = None
    if flops and local_flops is None:
        traced = _trace_program(program, inputs.args, inputs.kwargs, called)
    return loss, traced, lowered, local_flops, on_target.jaxpr.jaxpr


def _flops_compiler(chosen: Target) -> str:
    """What the cache calls the FLOPs of a target's program counted on this machine."""
    return f"{jax.default_backend()} for {chosen.name}"


def trace_baseline(loss_for: Callable, inputs: Inputs) -> tuple[Program, list[str]]:
    """Traces and checks ``loss_for(None)``; returns its row's program and the ``checkpoint_name`` tags it uses.

    The row is labelled ``"no checkpoint"``, or ``"loss_for(None)"`` (with a warning) when
    the loss still uses ``jax.checkpoint``, so that no row calls a checkpointed program
    "no checkpoint".
    """
    loss, traced, on_target, local_flops, jaxpr = _trace(loss_for, None, "loss_for(None)", inputs)
    label = BASELINE
    if validation.contains_checkpoint(jaxpr):
        label = CHECKPOINTED_BASELINE
        warnings.warn(
            f"loss_for(None) still uses jax.checkpoint, so the baseline row is labelled "
            f"{CHECKPOINTED_BASELINE!r}, not {BASELINE!r}: it and every FLOPs ratio describe that "
            "checkpointed program; loss_for(None) should return the loss without any jax.checkpoint",
            UserWarning, stacklevel=3)
    return Program(label, None, loss, traced, on_target, local_flops), validation.tagged_names(jaxpr)


def trace_policy(loss_for: Callable, label: str, policy: Any, inputs: Inputs, tags: Sequence[str]) -> Program:
    """Checks one policy (its signature, answers and names) and traces ``loss_for`` with it, once."""
    name = f"policies[{label!r}]"
    validation.policy(policy, name)
    validation.check_policy_names(policy, name, tags)
    probe = validation.PolicyProbe(policy, name)
    loss, traced, on_target, local_flops, _ = _trace(loss_for, probe, f"loss_for({name})", inputs)
    if not probe.called:
        raise ValueError(
            f"loss_for ignores its policy: JAX never consults {name} when it "
            "differentiates loss_for(policy), so the row would be the same for every "
            "policy; loss_for(policy) must pass it on, as jax.checkpoint(..., policy=policy)"
        )
    return Program(label, policy, loss, traced, on_target, local_flops)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What compiling one program gives: residual and memory bytes, true and reported FLOPs.

    With a target, the memory figures and the step-time estimate are the target's, the
    FLOPs the local program's.
    """

    residual_bytes: int | None
    temp_bytes: int
    flops: int
    reported_flops: int
    peak_bytes: int
    host_bytes: int
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    step_seconds: float | None
    refused: str | None = None
    collective_seconds: float | None = None


def _residual_bytes(loss: Callable, inputs: Inputs) -> int | None:
    """The bytes of the residuals of ``jax.grad(loss, argnums, has_aux)``; per device when sharded.

    ``None`` for a training step: its gradient is taken inside it, where the forward and
    backward passes are one program and no residual can be told apart.
    """
    if inputs.step:
        return None

    def positional(*values: Any) -> Any:  # the keyword arguments come last, never differentiated
        *args, kwargs = values
        out = loss(*args, **kwargs)
        return out[0] if inputs.has_aux else out

    args = (*inputs.args, inputs.kwargs)
    if inputs.per_device:
        return sum(r.device_nbytes for r in residual_shardings(positional, *args, argnums=inputs.argnums))
    return saved_residuals(positional, *args, argnums=inputs.argnums).total_bytes


# The FLOPs of programs compiled for this machine only to count them (a target's rows), by
# their lowered text: comparing one model on several targets compiles each program here once.
_TARGET_FLOPS: dict[str, dict[str, Any]] = {}
_TARGET_FLOPS_KEPT = 256


def _memory(memory: Any) -> dict[str, int]:
    """The memory figures of a row, from ``memory_analysis()`` (or its sizes as attributes)."""
    return {"temp_bytes": memory.temp_size_in_bytes, "peak_bytes": memory.peak_memory_in_bytes,
            "host_bytes": memory.host_temp_size_in_bytes, "argument_bytes": memory.argument_size_in_bytes,
            "output_bytes": memory.output_size_in_bytes, "alias_bytes": memory.alias_size_in_bytes}


def _local_figures(lowered: Any) -> dict[str, int]:
    """FLOPs and memory of a program lowered for this machine, compiled, or read from the figure store or the cache.

    On a CPU, the figure store is read first when one is set (see ``remat_guide._cache.cpu_figures``).
    """
    if jax.default_backend() == "cpu":
        figures = cache.cpu_figures(lowered)
        return {"flops": figures["flops"]["total"], "reported_flops": figures["flops"]["reported"],
                **_memory(types.SimpleNamespace(**figures["memory"]))}

    def compute() -> dict[str, int]:
        # XLA's warnings (the SPMD partitioner's, for one) would reach a notebook only when the
        # program is not cached: kept out of sight, as the target's compiler's are.
        with cache.captured_stderr():
            compiled = cache.compile_unrun(lowered)
        flops = count_flops(compiled)
        return {"flops": flops.total, "reported_flops": flops.reported, **_memory(compiled.memory_analysis())}

    return cache.figures("figures", jax.default_backend(), lowered, compute)


def _local_flops(traced: Any) -> dict[str, Any]:
    """The FLOPs of a program compiled for this machine (``flops``, ``reported_flops``), and on a CPU
    the figure store's key of the program they were counted in (``entry``, else ``None``)."""
    lowered = traced.lower()
    text = lowered.as_text()
    if text not in _TARGET_FLOPS:
        if len(_TARGET_FLOPS) >= _TARGET_FLOPS_KEPT:
            _TARGET_FLOPS.pop(next(iter(_TARGET_FLOPS)))
        local = _local_figures(lowered)
        _TARGET_FLOPS[text] = {"flops": local["flops"], "reported_flops": local["reported_flops"],
                               "entry": cache.cpu_entry_key(text) if jax.default_backend() == "cpu" else None}
    return _TARGET_FLOPS[text]


def _kept_flops(kept: dict[str, Any] | None) -> dict[str, int] | None:
    """Local FLOPs as the cache keeps them (see :func:`_local_flops`), without their program's key.

    A build records the read of that program's entry in the figure store even when the
    cache answered, so that what it records does not depend on what an earlier run left in
    the cache: ``make figures`` keeps the entries a build reads.
    """
    if kept is None:
        return None
    cache.record_read(kept.get("entry"))
    return {"flops": kept["flops"], "reported_flops": kept["reported_flops"]}


def _figures(program: Program, chosen: Target | None) -> dict[str, int]:
    """The program's FLOPs (always this machine's) and memory (the target's, when there is one).

    The cache keeps a target's program's local FLOPs under the target's program too, so that
    a program measured before is traced for the target alone (see :func:`_trace`).
    """
    if chosen is None:
        return _local_figures(program.traced.lower())
    flops = program.local_flops
    if flops is None:
        flops = _kept_flops(cache.figures("local-flops", _flops_compiler(chosen), program.on_target,
                                          lambda: _local_flops(program.traced)))
    compiled, refusal = _on_target(program.on_target, chosen)
    if refusal is not None:
        nothing = dict.fromkeys(("temp_bytes", "host_bytes", "argument_bytes", "output_bytes", "alias_bytes"), 0)
        return {**flops, **nothing, "peak_bytes": refused_bytes(refusal), "step_seconds": None,
                "refused": refusal.splitlines()[0]}
    estimate = _estimate(compiled, chosen)
    return {**flops, **_memory(types.SimpleNamespace(**compiled["memory"])),
            "step_seconds": None if estimate is None else estimate.seconds,
            "collective_seconds": None if estimate is None else estimate.collective_seconds}


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_REFUSALS = (re.compile(r"required for HLO temporaries \(([\d.]+)([KMGTP]?)B?\) exceeds available HBM"),
             re.compile(r"Used ([\d.]+)([KMGTP]?)B? of [\d.]+[KMGTP]?B? hbm"))


def refused_bytes(message: str) -> int | None:
    """The memory a TPU program needs, from the message of XLA's TPU compiler refusing it; ``None`` for other errors.

    XLA's TPU compiler refuses a program that does not fit the chip's HBM
    (``RESOURCE_EXHAUSTED: ... CompileTimeHbmOom``) and prints what it would need, in
    units of 1024 to two decimals: that figure, in bytes.

    Examples:
        >>> refused_bytes("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, "
        ...               "the total memory required for HLO temporaries (149.64G) exceeds available HBM (95.73G).")
        160674726543
        >>> refused_bytes("INVALID_ARGUMENT: something else") is None
        True
    """
    if "RESOURCE_EXHAUSTED" not in message:
        return None
    for pattern in _REFUSALS:
        found = pattern.search(message)
        if found:
            return round(float(found.group(1)) * _UNITS[found.group(2)])
    return None


def _on_target(lowered: Any, chosen: Target) -> tuple[dict[str, Any] | None, str | None]:
    """A lowered program's figures on its target, or ``None`` and XLA's message when its TPU compiler refused it
    for memory."""
    try:
        return cache.target_figures(lowered, chosen.name, chosen.platform,
                                    cache.unrun_options(chosen.platform)), None
    except jax.errors.JaxRuntimeError as error:
        if refused_bytes(str(error)) is None:
            raise
        return None, str(error)


def _estimate(compiled: dict[str, Any], chosen: Target) -> Estimate | None:
    """The estimated step of a program compiled for ``chosen``; ``None`` where the target's host link,
    which the program uses, has no published rate (TPU chips)."""
    kernels = compiled["kernels"]
    if chosen.hardware.host_bandwidth is None and (kernels["host_out"] or kernels["host_in"]):
        return None
    return estimate_step(kernels, chosen)


def _step_seconds(compiled: dict[str, Any], chosen: Target) -> float | None:
    """The estimated step time of a program compiled for ``chosen`` (see :func:`_estimate`)."""
    estimate = _estimate(compiled, chosen)
    return None if estimate is None else estimate.seconds


def target_step(loss_for: Callable, policy: Any, inputs: Inputs) -> tuple[int, bool, float | None]:
    """What ``loss_for(policy)``'s program needs on ``inputs.target`` (``device_bytes``), whether it was refused,
    and its estimated step time (``None`` when refused, or where ``_step_seconds`` gives none).

    Only the target's program is compiled. A program XLA's TPU compiler refuses needs what
    its error message says; it never fits, whatever that figure.
    """
    memory, refusal, seconds = target_memory(loss_for, policy, inputs)
    if refusal is not None:
        return refused_bytes(refusal), True, None
    return device_bytes(types.SimpleNamespace(**memory), inputs.target), False, seconds


def target_memory(loss_for: Callable, policy: Any,
                  inputs: Inputs) -> tuple[dict[str, int] | None, str | None, float | None]:
    """The memory figures of ``loss_for(policy)``'s program on ``inputs.target``, as ``memory_analysis()`` names
    them, with the compiler's refusal (``None`` when it compiled) and the estimated step time.

    Only the target's program is compiled; a refused program has no figures (``None``).
    """
    _, _, on_target, _, _ = _trace(loss_for, policy, "loss_for(policy)", inputs, flops=False)
    compiled, refusal = _on_target(on_target, inputs.target)
    if refusal is not None:
        return None, refusal, None
    return dict(compiled["memory"]), None, _step_seconds(compiled, inputs.target)


def budget_or_usable(budget_bytes: Any, targets: Iterable[str | None]) -> int:
    """``budget_bytes``, checked; left out (``None``), the usable HBM of the one TPU target of ``targets``."""
    if budget_bytes is not None:
        budget_bytes = validation.integer(budget_bytes, "budget_bytes")
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
        return budget_bytes
    names = {None if name is None else target(name).name for name in targets}
    if len(names) != 1 or None in names or target(next(iter(names))).platform != "tpu":
        raise TypeError("budget_bytes is required, in bytes of one device's memory; it may be left out only for "
                        f"one TPU target, where it is the chip's usable HBM (got target {sorted(map(str, names))})")
    return usable_bytes(next(iter(names)))


def _measurement(figures: dict[str, Any], residual_bytes: int | None) -> Measurement:
    return Measurement(residual_bytes, figures["temp_bytes"], figures["flops"], figures["reported_flops"],
                       figures["peak_bytes"], figures["host_bytes"], figures["argument_bytes"],
                       figures["output_bytes"], figures["alias_bytes"], figures.get("step_seconds"),
                       figures.get("refused"), figures.get("collective_seconds"))


def measure(programs: Sequence[Program], inputs: Inputs) -> list[Measurement]:
    """Compiles traced programs, in order and never run, and lists their losses' residuals.

    With a target, each program is compiled twice: for the target (its memory) and for
    this machine (its FLOPs, which XLA's target programs do not give: the TPU compiler's
    loops carry no trip count, the GPU compiler reports no cost analysis).

    XLA compiles in one background thread, one program at a time (counting its FLOPs
    there too, a few percent of the compile), while this thread does the Python work
    around it: tracing the next program, listing residuals. So the wall time is close to
    the sum of the compile times. On an error, the programs not yet compiling are dropped.

    A target's program is read from the figure store when ``REMAT_GUIDE_FIGURES`` names
    one (the site's build does). When the environment variable ``REMAT_GUIDE_CACHE_DIR``
    names a folder, each program's figures are kept there, by its lowered text, the compiler, the XLA flags, the
    versions of JAX and jaxlib and this package's source; a program measured before, by any
    process, is not compiled again.
    """
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="remat_guide-compile")
    try:
        waiting: collections.deque = collections.deque()
        measured = []
        for program in programs:
            waiting.append((pool.submit(_figures, program, inputs.target), _residual_bytes(program.loss, inputs)))
            while waiting and waiting[0][0].done():
                compiling, residual_bytes = waiting.popleft()
                measured.append(_measurement(compiling.result(), residual_bytes))
        for compiling, residual_bytes in waiting:
            measured.append(_measurement(compiling.result(), residual_bytes))
        return measured
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
