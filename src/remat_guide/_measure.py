"""Checking a model's loss and measuring one policy on it: shared by compare_policies and plan_names."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax

from remat_guide import _validation as validation
from remat_guide._labels import names_label
from remat_guide.flops import count_flops
from remat_guide.residuals import saved_residuals
from remat_guide.sharded import is_sharded, residual_shardings

__all__ = ["BASELINE", "STANDARD_POLICIES", "as_policies", "call_loss", "check_baseline", "check_inputs",
           "check_loss", "check_policies", "default_policies", "measure", "standard_policy"]

BASELINE = "no checkpoint"

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
    if isinstance(policies, Mapping):
        result = {}
        for label, policy in policies.items():
            if not isinstance(label, str):
                raise TypeError(f"policies: labels must be str, got {type(label).__name__}")
            if label == BASELINE:
                raise ValueError(f"policies: {BASELINE!r} is the baseline row, always included")
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


def measure(loss: Callable, args: tuple, argnums: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    """Compiles ``jax.jit(jax.grad(loss))``: its residual bytes, temporary bytes, true and reported FLOPs."""
    out = jax.eval_shape(loss, *args)
    if getattr(out, "shape", None) != ():
        raise ValueError(
            f"loss_for(policy) must return a function with a scalar output, got shape "
            f"{getattr(out, 'shape', type(out).__name__)}"
        )
    compiled = jax.jit(jax.grad(loss, argnums=argnums)).lower(*args).compile()
    flops = count_flops(compiled)
    if is_sharded(*args):  # the bytes each device holds
        residual_bytes = sum(r.device_nbytes for r in residual_shardings(loss, *args))
    else:
        residual_bytes = saved_residuals(loss, *args).total_bytes
    return residual_bytes, compiled.memory_analysis().temp_size_in_bytes, flops.total, flops.reported


def check_inputs(args: tuple, argnums: Any) -> int | tuple[int, ...]:
    """The loss's arguments and ``argnums``; returns ``argnums`` normalised."""
    paths, _ = jax.tree_util.tree_flatten_with_path(args)
    names = [f"args{jax.tree_util.keystr(path)}" for path, _ in paths]
    validation.arguments([leaf for _, leaf in paths], names)
    argnums = validation.argnums(argnums, len(args))
    selected = {argnums} if isinstance(argnums, int) else set(argnums)
    chosen = [(leaf, name) for (path, leaf), name in zip(paths, names) if path[0].idx in selected]
    validation.require_floating([leaf for leaf, _ in chosen], [name for _, name in chosen],
                                every=True, why=f"jax.grad differentiates argnums={argnums}")
    return argnums


def check_loss(loss: Callable, args: tuple, argnums: Any, name: str) -> tuple[Any, Any]:
    """Traces a loss and its gradient (no compilation); returns both jaxprs."""
    forward, out_shape = jax.make_jaxpr(loss, return_shape=True)(*args)
    validation.floating_scalar(out_shape, name)
    gradient = jax.make_jaxpr(jax.grad(loss, argnums=argnums))(*args)
    validation.check_program(gradient.jaxpr, f"the gradient of {name}")
    return forward.jaxpr, gradient.jaxpr


def check_baseline(loss_for: Callable, args: tuple, argnums: Any) -> list[str]:
    """Checks the baseline loss; returns the ``checkpoint_name`` tags it uses."""
    forward, _ = check_loss(call_loss(loss_for, None), args, argnums, "loss_for(None)")
    if validation.contains_checkpoint(forward):
        warnings.warn(
            "loss_for(None) still uses jax.checkpoint, so the 'no checkpoint' row and every "
            "FLOPs ratio are measured against a checkpointed program; loss_for(None) should "
            "return the loss without any jax.checkpoint",
            UserWarning, stacklevel=3)
    return validation.tagged_names(forward)


def check_policies(loss_for: Callable, chosen: Mapping[str, Any], args: tuple, argnums: Any,
                    tags: Sequence[str]) -> None:
    """Each policy: its signature and answers, its names, and that ``loss_for`` uses it."""
    for label, policy in chosen.items():
        name = f"policies[{label!r}]"
        validation.policy(policy, name)
        validation.check_policy_names(policy, name, tags)
        probe = validation.PolicyProbe(policy, name)
        check_loss(call_loss(loss_for, probe), args, argnums, f"loss_for({name})")
        if not probe.called:
            raise ValueError(
                f"loss_for ignores its policy: JAX never consults {name} when it "
                "differentiates loss_for(policy), so the row would be the same for every "
                "policy; loss_for(policy) must pass it on, as jax.checkpoint(..., policy=policy)"
            )
