"""Measure every checkpoint policy on a model (memory, true FLOPs) and pick one under a budget."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core

from remat_guide.flops import count_flops
from remat_guide.residuals import saved_residuals
from remat_guide.sharded import is_sharded, residual_shardings

__all__ = [
    "BASELINE",
    "STANDARD_POLICIES",
    "PolicyRow",
    "compare_policies",
    "policy_table",
    "recommend_policy",
]

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


@dataclasses.dataclass(frozen=True)
class PolicyRow:
    """What one policy costs on one model, measured by compiling ``jax.jit(jax.grad(loss))``.

    Attributes:
        name: The policy's label, ``"no checkpoint"`` for the baseline.
        policy: The object to pass as ``jax.checkpoint(..., policy=...)``; ``None`` for
            the baseline, which uses no ``jax.checkpoint`` at all.
        residual_bytes: What the forward pass keeps for the backward pass at the jaxpr
            level, before XLA (``saved_residuals(...).total_bytes``).
        temp_bytes: XLA's temporary memory for the compiled program (activations and
            scratch; arguments and outputs are not included).
        flops: The program's FLOPs, each loop body counted once per iteration.
        reported_flops: The FLOPs as ``cost_analysis()`` reports them (loop bodies once).
        flops_ratio: ``flops`` divided by the baseline's.
        per_device: ``True`` when the arguments are sharded over several devices: then
            ``residual_bytes``, ``temp_bytes`` and both FLOPs counts are those of one
            device (the residuals' per-device pieces, the SPMD program XLA compiles for
            each device), not of the whole computation.
        compiled: How many policies :func:`plan_names` compiled to find this row (one
            ``jax.jit(jax.grad)`` program each); 0 in the rows of :func:`compare_policies`.
    """

    name: str
    policy: Any
    residual_bytes: int
    temp_bytes: int
    flops: int
    reported_flops: int
    flops_ratio: float
    per_device: bool = False
    compiled: int = 0


def _standard(name: str) -> Any:
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


def _checkpoint_names(loss_for: Callable, args: tuple) -> list[str]:
    """The ``checkpoint_name`` tags the model uses, in order of first appearance."""
    policy = jax.checkpoint_policies.nothing_saveable
    closed = jax.make_jaxpr(_call(loss_for, policy))(*args)
    names: list[str] = []

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "name" and eqn.params["name"] not in names:
                names.append(eqn.params["name"])
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(closed.jaxpr)
    return names


def _default_policies(loss_for: Callable, args: tuple) -> dict[str, Any]:
    policies = {name: getattr(jax.checkpoint_policies, name) for name in STANDARD_POLICIES}
    names = _checkpoint_names(loss_for, args)
    for name in names:
        policies[f"save_only_these_names({name!r})"] = (
            jax.checkpoint_policies.save_only_these_names(name))
    if len(names) > 1:
        label = ", ".join(repr(n) for n in names)
        policies[f"save_only_these_names({label})"] = (
            jax.checkpoint_policies.save_only_these_names(*names))
    return policies


def _as_policies(policies: Any) -> dict[str, Any]:
    if isinstance(policies, Mapping):
        result = {}
        for label, policy in policies.items():
            if not isinstance(label, str):
                raise TypeError(f"policies: labels must be str, got {type(label).__name__}")
            if label == BASELINE:
                raise ValueError(f"policies: {BASELINE!r} is the baseline row, always included")
            if not callable(policy):
                raise TypeError(
                    f"policies[{label!r}] must be a jax.checkpoint policy (a callable), "
                    f"got {type(policy).__name__}"
                )
            result[label] = policy
        return result
    if isinstance(policies, str) or not isinstance(policies, Sequence):
        raise TypeError(
            "policies must be None, a sequence of names from jax.checkpoint_policies, or a "
            f"mapping from labels to policies, got {type(policies).__name__}"
        )
    for name in policies:
        if not isinstance(name, str):
            raise TypeError(f"policies: names must be str, got {type(name).__name__}")
    return {name: _standard(name) for name in policies}


def _call(loss_for: Callable, policy: Any) -> Callable:
    loss = loss_for(policy)
    if not callable(loss):
        raise TypeError(f"loss_for(policy) must return a loss function, got {type(loss).__name__}")
    return loss


def _measure(loss: Callable, args: tuple, argnums: int | tuple[int, ...]) -> tuple[int, int, int, int]:
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


def compare_policies(
    loss_for: Callable[[Any], Callable[..., jax.Array]],
    *args: Any,
    policies: Sequence[str] | Mapping[str, Any] | None = None,
    argnums: int | tuple[int, ...] = 0,
) -> list[PolicyRow]:
    """Measures what each checkpoint policy costs on a model, by compiling its gradient.

    For every policy, ``loss_for(policy)`` builds the loss, and ``jax.jit(jax.grad(loss))``
    is lowered and compiled, never run: the rows report XLA's temporary memory and the
    program's true FLOPs (see :func:`count_flops`), with the residuals ``jax.grad``
    keeps at the jaxpr level. Arguments may be ``jax.ShapeDtypeStruct`` values, so a
    model too large for this machine can still be measured.

    Arguments may be sharded (arrays placed with a ``jax.sharding.NamedSharding``, or
    ``jax.ShapeDtypeStruct`` values with a ``sharding``). Then XLA compiles one SPMD
    program per device, and every row is per device (``per_device`` is ``True``): the
    temporary memory and FLOPs of that program, and the residuals' per-device pieces
    (see :func:`remat_guide.sharded.residual_shardings`).

    Args:
        loss_for: Called as ``loss_for(policy)``; returns the scalar loss function of
            ``*args`` that checkpoints with that policy. ``loss_for(None)`` must return
            the loss without any ``jax.checkpoint``: it is the baseline row.
        *args: The loss's arguments: arrays, pytrees, or ``jax.ShapeDtypeStruct`` values.
        policies: ``None`` for the default set: the standard policies in
            ``STANDARD_POLICIES``, ``save_only_these_names`` for each ``checkpoint_name``
            tag in the model, and for all of them together. Otherwise a sequence of
            names from ``jax.checkpoint_policies`` or a mapping from labels to policies.
        argnums: The arguments to differentiate, as for ``jax.grad``.

    Returns:
        One row per policy, the baseline first, then the policies in the order given.

    Raises:
        TypeError: If ``loss_for`` is not callable or does not return a function, or
            ``policies`` is not one of the forms above.
        ValueError: If a policy name is unknown or needs arguments, or the loss is not
            scalar.

    Examples:
        >>> import jax
        >>> from remat_guide import compare_policies
        >>> from remat_guide.models import mlp_args, mlp_scan_loss
        >>> rows = compare_policies(mlp_scan_loss, *mlp_args(layers=8, n=64, d=32))
        >>> [row.name for row in rows]
        ['no checkpoint', 'everything_saveable', 'dots_saveable',
         'dots_with_no_batch_dims_saveable', 'nothing_saveable']
        >>> by_name = {row.name: row for row in rows}
        >>> by_name["nothing_saveable"].temp_bytes < by_name["no checkpoint"].temp_bytes
        True
        >>> by_name["nothing_saveable"].flops_ratio > 1.2
        True
        >>> compare_policies(mlp_scan_loss, *mlp_args(8, 64, 32), policies=["dots_savable"])
        Traceback (most recent call last):
        ...
        ValueError: policies: unknown policy name 'dots_savable'; jax.checkpoint_policies has ...
    """
    if not callable(loss_for):
        raise TypeError(f"loss_for must be callable, got {type(loss_for).__name__}")
    chosen = _default_policies(loss_for, args) if policies is None else _as_policies(policies)
    measured = [(BASELINE, None, _measure(_call(loss_for, None), args, argnums))]
    for label, policy in chosen.items():
        measured.append((label, policy, _measure(_call(loss_for, policy), args, argnums)))
    base_flops = measured[0][2][2]
    per_device = is_sharded(*args)
    return [
        PolicyRow(label, policy, residual, temp, flops, reported,
                  flops / base_flops if base_flops else float("nan"), per_device)
        for label, policy, (residual, temp, flops, reported) in measured
    ]


def recommend_policy(
    loss_for: Callable[[Any], Callable[..., jax.Array]],
    *args: Any,
    budget_bytes: int,
    policies: Sequence[str] | Mapping[str, Any] | None = None,
    argnums: int | tuple[int, ...] = 0,
) -> PolicyRow:
    """The cheapest policy whose compiled temporary memory fits a budget.

    Every candidate is measured by :func:`compare_policies` (compiled, not estimated).
    Among the rows whose ``temp_bytes`` is at most ``budget_bytes``, the one with the
    fewest FLOPs wins; on a tie, the one using less memory. The row's ``policy`` is
    the object to pass to ``jax.checkpoint`` (``None``: no checkpoint is needed).
    With sharded arguments the rows are per device, so ``budget_bytes`` is the temporary
    memory of one device.

    Args:
        loss_for: As for :func:`compare_policies`.
        *args: As for :func:`compare_policies`.
        budget_bytes: The most temporary memory the compiled gradient may use, in bytes.
        policies: As for :func:`compare_policies`.
        argnums: As for :func:`compare_policies`.

    Returns:
        The chosen row.

    Raises:
        TypeError: If ``budget_bytes`` is not an int (or an argument is wrong as for
            :func:`compare_policies`).
        ValueError: If ``budget_bytes`` is not positive, or no policy fits; the message
            names the smallest memory any policy reaches.

    Examples:
        >>> import jax
        >>> from remat_guide import compare_policies, recommend_policy
        >>> from remat_guide.models import mlp_args, mlp_scan_loss
        >>> args = mlp_args(layers=8, n=64, d=32)
        >>> names = ["dots_saveable", "nothing_saveable"]
        >>> rows = {row.name: row for row in compare_policies(mlp_scan_loss, *args, policies=names)}
        >>> budget = rows["no checkpoint"].temp_bytes - 1
        >>> best = recommend_policy(mlp_scan_loss, *args, budget_bytes=budget, policies=names)
        >>> best.name, best.temp_bytes <= budget, best.flops < rows["nothing_saveable"].flops
        ('dots_saveable', True, True)
        >>> recommend_policy(mlp_scan_loss, *args, budget_bytes=1, policies=names)
        Traceback (most recent call last):
        ...
        ValueError: no policy fits budget_bytes=1: the smallest temporary memory is ... bytes, with ...
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise TypeError(f"budget_bytes must be an int, got {type(budget_bytes).__name__}")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    rows = compare_policies(loss_for, *args, policies=policies, argnums=argnums)
    fitting = [row for row in rows if row.temp_bytes <= budget_bytes]
    if not fitting:
        smallest = min(rows, key=lambda row: row.temp_bytes)
        raise ValueError(
            f"no policy fits budget_bytes={budget_bytes}: the smallest temporary memory is "
            f"{smallest.temp_bytes} bytes, with {smallest.name}"
        )
    return min(fitting, key=lambda row: (row.flops, row.temp_bytes))


def policy_table(rows: Sequence[PolicyRow]) -> str:
    """Formats rows of :func:`compare_policies` as a plain-text table (MiB and GFLOPs).

    Args:
        rows: The rows to show, in order.

    Returns:
        A header and one line per row, with residual and temporary memory in MiB, the
        true FLOPs and XLA's reported FLOPs in GFLOPs, and the ratio to the baseline.

    Raises:
        TypeError: If a row is not a :class:`PolicyRow`.

    Examples:
        >>> from remat_guide import PolicyRow, policy_table
        >>> row = PolicyRow("no checkpoint", None, 2**20, 3 * 2**20, 4 * 10**9, 10**9, 1.0)
        >>> print(policy_table([row]))
        policy         residual MiB  temp MiB  GFLOPs  XLA-reported GFLOPs  FLOPs ratio
        -------------  ------------  --------  ------  -------------------  -----------
        no checkpoint          1.00      3.00   4.000                1.000        1.000
    """
    for row in rows:
        if not isinstance(row, PolicyRow):
            raise TypeError(f"rows must hold PolicyRow values, got {type(row).__name__}")
    header = ("policy", "residual MiB", "temp MiB", "GFLOPs", "XLA-reported GFLOPs", "FLOPs ratio")
    body = [(row.name, f"{row.residual_bytes / 2**20:.2f}", f"{row.temp_bytes / 2**20:.2f}",
             f"{row.flops / 1e9:.3f}", f"{row.reported_flops / 1e9:.3f}", f"{row.flops_ratio:.3f}")
            for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])])

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])
