"""Measure every checkpoint policy on a model (memory, true FLOPs) and pick one under a budget."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import pandas as pd

from remat_guide import _validation as validation
from remat_guide._measure import (
    BASELINE,
    STANDARD_POLICIES,
    as_policies,
    call_loss,
    check_baseline,
    check_inputs,
    check_policies,
    default_policies,
    measure,
)
from remat_guide.sharded import is_sharded
from remat_guide.tables import Table

__all__ = [
    "BASELINE",
    "STANDARD_POLICIES",
    "Comparison",
    "PolicyRow",
    "compare_policies",
    "policy_table",
    "recommend_policy",
]

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

    Raises:
        TypeError: If a field has the wrong type (``policy`` must be callable or None).
        ValueError: If a byte or FLOP count is negative.
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

    def __post_init__(self) -> None:
        validation.string(self.name, "PolicyRow.name")
        if self.policy is not None and not callable(self.policy):
            raise TypeError(f"PolicyRow.policy must be a policy (callable) or None, got "
                            f"{type(self.policy).__name__}")
        for field in ("residual_bytes", "temp_bytes", "flops", "reported_flops"):
            value = validation.integer(getattr(self, field), f"PolicyRow.{field}", minimum=0)
            object.__setattr__(self, field, value)
        ratio = self.flops_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
            raise TypeError(f"PolicyRow.flops_ratio must be a number, got {type(ratio).__name__}")
        if not isinstance(self.per_device, bool):
            raise TypeError(f"PolicyRow.per_device must be a bool, got {type(self.per_device).__name__}")
        object.__setattr__(self, "compiled",
                           validation.integer(self.compiled, "PolicyRow.compiled", minimum=0))


def _policy_rows(rows: Any) -> list[PolicyRow]:
    """``rows`` as a list, if it is an iterable of :class:`PolicyRow`; else a TypeError."""
    rows = validation.iterable(rows, "rows", what="PolicyRow values")
    for row in rows:
        if not isinstance(row, PolicyRow):
            raise TypeError(f"rows must hold PolicyRow values, got {type(row).__name__}")
    return rows


class Comparison(list[PolicyRow]):
    """The rows of :func:`compare_policies`: a list of :class:`PolicyRow`, shown as a table.

    In a notebook it renders as an HTML table (memory in KiB/MiB, FLOPs in GFLOP, the
    FLOPs ratio to the baseline); ``str()`` gives the same table as plain text, and
    :meth:`to_pandas` the exact values.

    Args:
        rows: The rows, in order (any iterable).

    Raises:
        TypeError: If ``rows`` is not an iterable of :class:`PolicyRow`.
    """

    def __init__(self, rows: Iterable[PolicyRow] = ()) -> None:
        super().__init__(_policy_rows(rows))

    def to_pandas(self) -> pd.DataFrame:
        """The rows as a DataFrame with exact byte and FLOP counts, one row per policy.

        Returns:
            A DataFrame with the columns ``policy``, ``residual_bytes``, ``temp_bytes``,
            ``flops``, ``reported_flops`` and ``flops_ratio``.

        Examples:
            >>> from remat_guide import PolicyRow
            >>> from remat_guide.compare import Comparison
            >>> rows = Comparison([PolicyRow("no checkpoint", None, 8, 16, 10**9, 10**9, 1.0)])
            >>> rows.to_pandas().to_dict("records")
            [{'policy': 'no checkpoint', 'residual_bytes': 8, 'temp_bytes': 16, 'flops': 1000000000,
              'reported_flops': 1000000000, 'flops_ratio': 1.0}]
        """
        return pd.DataFrame(
            [(row.name, row.residual_bytes, row.temp_bytes, row.flops, row.reported_flops,
              row.flops_ratio) for row in self],
            columns=["policy", "residual_bytes", "temp_bytes", "flops", "reported_flops",
                     "flops_ratio"])

    def table(self) -> Table:
        """The rows as a :class:`~remat_guide.tables.Table`, with readable headers and units."""
        frame = self.to_pandas().rename(columns={
            "residual_bytes": "residuals", "temp_bytes": "XLA temp", "flops": "true FLOPs",
            "reported_flops": "XLA-reported FLOPs", "flops_ratio": f"FLOPs vs {BASELINE}"})
        return Table(frame, units={"residuals": "bytes", "XLA temp": "bytes", "true FLOPs": "flops",
                                   "XLA-reported FLOPs": "flops", f"FLOPs vs {BASELINE}": "ratio"})

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:
        return str(self.table())


def compare_policies(
    loss_for: Callable[[Any], Callable[..., jax.Array]],
    /,
    *args: Any,
    policies: Sequence[str] | Mapping[str, Any] | None = None,
    argnums: int | tuple[int, ...] = 0,
) -> Comparison:
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
            names from ``jax.checkpoint_policies`` (any iterable: a list, a generator) or a
            mapping from labels to policies.
        argnums: The arguments to differentiate, as for ``jax.grad``.

    Returns:
        One row per policy, the baseline first, then the policies in the order given, as a
        :class:`Comparison` (a list that renders as a table in a notebook).

    Raises:
        TypeError: If ``loss_for`` is not callable or does not return a function;
            ``policies`` is not one of the forms above, or a policy is not callable as
            ``policy(prim, *avals, **params)`` or answers other than True/False (or
            ``Saveable``, ``Recompute``, ``Offloadable``); ``argnums`` is not an int or
            a sequence of ints; an argument is not an array, a number or a
            ``jax.ShapeDtypeStruct``; an argument in ``argnums`` is not floating-point;
            or the loss does not return a real floating-point scalar.
        ValueError: If a policy name is unknown, needs arguments or is given twice;
            ``argnums`` is out of range or repeats an argument; the loss's output is not
            a scalar; an argument or the compiled program would be larger than any
            machine holds (before XLA sees it); ``loss_for(policy)`` never consults
            its policy (the row would not depend on it); or a name-based policy names
            only tags the loss never uses (the names it uses are listed).

    Warns:
        UserWarning: If ``loss_for(None)``, the baseline, still uses ``jax.checkpoint``
            (every ratio is then against a checkpointed program), or a name-based policy
            names some tags the loss never uses.

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
    validation.callable_arg(loss_for, "loss_for")
    argnums = check_inputs(args, argnums)
    tags = check_baseline(loss_for, args, argnums)
    chosen = default_policies(tags) if policies is None else as_policies(policies)
    check_policies(loss_for, chosen, args, argnums, tags)
    measured = [(BASELINE, None, measure(call_loss(loss_for, None), args, argnums))]
    for label, policy in chosen.items():
        measured.append((label, policy, measure(call_loss(loss_for, policy), args, argnums)))
    base_flops = measured[0][2][2]
    per_device = is_sharded(*args)
    return Comparison(
        PolicyRow(label, policy, residual, temp, flops, reported,
                  flops / base_flops if base_flops else float("nan"), per_device)
        for label, policy, (residual, temp, flops, reported) in measured
    )


def recommend_policy(
    loss_for: Callable[[Any], Callable[..., jax.Array]],
    /,
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
            names the smallest memory any policy reaches (or an argument is wrong as
            for :func:`compare_policies`).

    Warns:
        UserWarning: As for :func:`compare_policies`.

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
    budget_bytes = validation.integer(budget_bytes, "budget_bytes")
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


def policy_table(rows: Iterable[PolicyRow]) -> Table:
    """Rows of :func:`compare_policies` (or :func:`plan_names`) as one table.

    The same table as ``Comparison(rows).table()``: HTML in a notebook, plain text from
    ``str()``, both with memory and FLOPs in the unit that suits each column.

    Args:
        rows: The rows to show, in order (any iterable, a generator too).

    Returns:
        A :class:`~remat_guide.tables.Table` with one line per row: residual and
        temporary memory, the true FLOPs and XLA's reported FLOPs, and the ratio to the
        baseline.

    Raises:
        TypeError: If ``rows`` is not an iterable, or a row is not a :class:`PolicyRow`.

    Examples:
        >>> from remat_guide import PolicyRow, policy_table
        >>> row = PolicyRow("no checkpoint", None, 2**20, 3 * 2**20, 4 * 10**9, 10**9, 1.0)
        >>> table = policy_table([row])
        >>> list(table.frame.columns)
        ['policy', 'residuals', 'XLA temp', 'true FLOPs', 'XLA-reported FLOPs', 'FLOPs vs no checkpoint']
        >>> "residuals (MiB)" in str(table) and "true FLOPs (GFLOP)" in str(table)
        True
        >>> str(table).splitlines()[2].split()
        ['no', 'checkpoint', '1.00', '3.00', '4.00', '1.00', '1.000×']
    """
    return Comparison(rows).table()
