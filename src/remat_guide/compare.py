"""Measure every checkpoint policy on a model (memory, true FLOPs, step time on a GPU) and pick one under a budget."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from remat_guide import _validation as validation
from remat_guide._measure import (
    BASELINE,
    CHECKPOINTED_BASELINE,
    STANDARD_POLICIES,
    Inputs,
    Measurement,
    Program,
    as_policies,
    budget_or_usable,
    check_inputs,
    default_policies,
    measure,
    trace_baseline,
    trace_policy,
)
from remat_guide.tables import Table
from remat_guide.targets import device_bytes, target

#: The caption of a comparison whose two FLOP counts differ.
LOOP_CAPTION = ("XLA-reported FLOPs count a loop's body once; true FLOPs count every "
                "iteration (remat_guide.count_flops).")

__all__ = [
    "LOOP_CAPTION",
    "BASELINE",
    "CHECKPOINTED_BASELINE",
    "STANDARD_POLICIES",
    "Comparison",
    "PolicyRow",
    "compare_policies",
    "policy_table",
    "recommend_policy",
    "memory_figure",
    "row_of",
]

@dataclasses.dataclass(frozen=True)
class PolicyRow:
    """What one policy costs on one model, measured by compiling ``jax.jit(jax.grad(loss))``.

    Attributes:
        name: The policy's label. The baseline, the loss of ``loss_for(None)``, is
            ``"no checkpoint"``, or ``"loss_for(None)"`` when that loss still uses
            ``jax.checkpoint``.
        policy: The object to pass as ``jax.checkpoint(..., policy=...)``; ``None`` for
            the baseline, the loss ``loss_for(None)`` returns.
        residual_bytes: What the forward pass keeps for the backward pass at the jaxpr
            level, before XLA: ``saved_residuals(loss, *args, argnums=argnums).total_bytes``,
            the residuals of the same gradient that is compiled (only the arguments in
            ``argnums`` are differentiated). ``None`` for a training step (``step=True``),
            which takes its gradient inside: list its loss's residuals with
            :func:`remat_guide.saved_residuals`.
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
            ``jax.jit(jax.grad)`` program each, counted even when ``REMAT_GUIDE_CACHE_DIR``
            gave its figures); 0 in the rows of :func:`compare_policies`.
        peak_bytes: XLA's ``memory_analysis().peak_memory_in_bytes`` of the program, its
            own figure. On a TPU target it decides the fit (see ``device_bytes``); on a
            GPU target it is not the device's real peak (an H200 measured it 36% too high
            for a program that offloads); on the CPU it counts only the arguments and
            outputs, the same for every policy.
        host_bytes: Host memory the program uses for values it offloads
            (``memory_analysis().host_temp_size_in_bytes``); 0 when nothing is offloaded.
        target: The accelerator whose compiler produced the memory figures and
            ``step_seconds`` (a name from :data:`remat_guide.targets.TARGETS`), compiled
            ahead of time on this machine, no device run; ``None`` for this machine's own
            backend. The FLOPs are always those of the program compiled for this machine.
        argument_bytes: ``memory_analysis().argument_size_in_bytes``.
        output_bytes: ``memory_analysis().output_size_in_bytes``.
        alias_bytes: ``memory_analysis().alias_size_in_bytes``: outputs that reuse an
            argument's buffer (donated arguments).
        step_seconds: On a target, the estimated time of one run of the program
            (:func:`remat_guide.targets.estimate_step`: the compiled program's kernels
            timed from the device's rates, plus its host transfers); ``None`` on the CPU, and on a TPU target
            for a program that moves bytes to or from host memory (no published
            host-link rate). On a TPU it is shown, not ranked on.
        collective_seconds: The part of ``step_seconds`` that the program's collectives
            between devices take at their links' published rates
            (``collective_seconds`` of :func:`remat_guide.targets.estimate_step`): 0 on
            one device, ``None`` where ``step_seconds`` is.
        refused: The first line of XLA's TPU compiler's error when it refused to compile
            the program because it does not fit the chip's memory; then ``peak_bytes``
            (and ``device_bytes``) is the memory that message says the program needs
            (to its two printed decimals), and the other memory figures are 0. ``None``
            for a compiled program.

    Raises:
        TypeError: If a field has the wrong type (``policy`` must be callable or None).
        ValueError: If a byte or FLOP count is negative.
    """

    name: str
    policy: Any
    residual_bytes: int | None
    temp_bytes: int
    flops: int
    reported_flops: int
    flops_ratio: float
    per_device: bool = False
    compiled: int = 0
    peak_bytes: int = 0
    host_bytes: int = 0
    target: str | None = None
    argument_bytes: int = 0
    output_bytes: int = 0
    alias_bytes: int = 0
    step_seconds: float | None = None
    refused: str | None = None
    collective_seconds: float | None = None

    @property
    def device_bytes(self) -> int:
        """The figure that decides whether the program fits on its device.

        On a GPU target, arguments + outputs + temporary memory - aliased bytes (what an
        H200's allocator really held); on a TPU target, ``peak_bytes`` (what the TPU
        compiler holds against the chip's memory); on this machine's CPU, ``temp_bytes``
        (XLA's CPU peak counts only the arguments and outputs). See
        :func:`remat_guide.targets.device_bytes`.
        """
        return device_bytes(types.SimpleNamespace(
            argument_size_in_bytes=self.argument_bytes, output_size_in_bytes=self.output_bytes,
            alias_size_in_bytes=self.alias_bytes, temp_size_in_bytes=self.temp_bytes,
            peak_memory_in_bytes=self.peak_bytes), self.target)

    @property
    def ranked_by_time(self) -> bool:
        """Whether picks rank this row by ``step_seconds``: estimated, on a target whose estimate is ranked on.

        A GPU row's is (see :attr:`remat_guide.targets.Target.ranks_by_time`); a TPU row's
        estimate is shown but not ranked on, and a row of this machine's CPU has none.

        Examples:
            >>> from remat_guide import PolicyRow
            >>> timed = dict(step_seconds=0.01, argument_bytes=1)
            >>> [PolicyRow("p", None, 0, 1, 1, 1, 1.0, target=name, **timed).ranked_by_time
            ...  for name in ("h100", "tpu-v5e")]
            [True, False]
        """
        return self.step_seconds is not None and self.target is not None and target(self.target).ranks_by_time

    def __post_init__(self) -> None:
        validation.string(self.name, "PolicyRow.name")
        if self.policy is not None and not callable(self.policy):
            raise TypeError(f"PolicyRow.policy must be a policy (callable) or None, got "
                            f"{type(self.policy).__name__}")
        for field in ("residual_bytes", "temp_bytes", "flops", "reported_flops", "peak_bytes", "host_bytes",
                      "argument_bytes", "output_bytes", "alias_bytes"):
            if field == "residual_bytes" and self.residual_bytes is None:
                continue
            value = validation.integer(getattr(self, field), f"PolicyRow.{field}", minimum=0)
            object.__setattr__(self, field, value)
        if self.refused is not None:
            validation.string(self.refused, "PolicyRow.refused")
        ratio = self.flops_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
            raise TypeError(f"PolicyRow.flops_ratio must be a number, got {type(ratio).__name__}")
        if not isinstance(self.per_device, bool):
            raise TypeError(f"PolicyRow.per_device must be a bool, got {type(self.per_device).__name__}")
        object.__setattr__(self, "compiled",
                           validation.integer(self.compiled, "PolicyRow.compiled", minimum=0))
        if self.target is not None:
            object.__setattr__(self, "target", target(self.target).name)
        for field in ("step_seconds", "collective_seconds"):
            seconds = getattr(self, field)
            if seconds is None:
                continue
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise TypeError(f"PolicyRow.{field} must be a number or None, got {type(seconds).__name__}")
            if not seconds >= 0:
                raise ValueError(f"PolicyRow.{field} must not be negative, got {seconds}")
            object.__setattr__(self, field, float(seconds))


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
    FLOPs ratio to the baseline; on a GPU target also the estimated step time and its
    ratio to the baseline's); ``str()`` gives the same table as plain text, and
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
            ``flops``, ``reported_flops`` and ``flops_ratio``; when rows were compiled for
            a target, also ``target``, ``device_bytes`` (the figure that decides the fit),
            ``peak_bytes`` and ``host_bytes``, and where estimated ``step_seconds``.

        Examples:
            >>> from remat_guide import PolicyRow
            >>> from remat_guide.compare import Comparison
            >>> rows = Comparison([PolicyRow("no checkpoint", None, 8, 16, 10**9, 10**9, 1.0)])
            >>> rows.to_pandas().to_dict("records")
            [{'policy': 'no checkpoint', 'residual_bytes': 8, 'temp_bytes': 16, 'flops': 1000000000,
              'reported_flops': 1000000000, 'flops_ratio': 1.0}]
        """
        frame = pd.DataFrame(
            [(row.name, row.residual_bytes, row.temp_bytes, row.flops, row.reported_flops,
              row.flops_ratio) for row in self],
            columns=["policy", "residual_bytes", "temp_bytes", "flops", "reported_flops",
                     "flops_ratio"])
        if any(row.target is not None for row in self):
            frame.insert(2, "target", [row.target for row in self])
            frame.insert(3, "device_bytes", [row.device_bytes for row in self])
            frame.insert(4, "peak_bytes", [row.peak_bytes for row in self])
            frame.insert(6, "host_bytes", [row.host_bytes for row in self])
            if any(row.step_seconds is not None for row in self):
                frame["step_seconds"] = [row.step_seconds for row in self]
            if any(row.collective_seconds for row in self):
                frame["collective_seconds"] = [row.collective_seconds for row in self]
        return frame

    def table(self) -> Table:
        """The rows as a :class:`~remat_guide.tables.Table`, with readable headers and units.

        Where XLA's own FLOP count differs from the true one (a loop's body counted once),
        the table's caption says why. On a target, the memory that decides the fit comes
        first, then XLA's own peak and temporary memory; on a GPU target, the estimated
        step time and its ratio to the baseline's close the row (a TPU row's estimate,
        which no pick ranks on, is in :meth:`to_pandas` and the rows, not the table).

        The ratios' headers name the baseline: ``FLOPs vs no checkpoint``, or ``FLOPs vs
        loss_for(None)`` when the rows hold a baseline labelled so.
        """
        baseline = CHECKPOINTED_BASELINE if any(row.name == CHECKPOINTED_BASELINE and row.policy is None
                                                for row in self) else BASELINE
        ratio = f"FLOPs vs {baseline}"
        frame = self.to_pandas().rename(columns={
            "residual_bytes": "residuals", "temp_bytes": "XLA temp", "flops": "true FLOPs",
            "reported_flops": "XLA-reported FLOPs", "flops_ratio": ratio, "device_bytes": "device memory",
            "peak_bytes": "XLA peak", "host_bytes": "host (offloaded)", "step_seconds": "est. step time",
            "collective_seconds": "est. collectives"})
        units = {"residuals": "bytes", "XLA temp": "bytes", "true FLOPs": "flops", "XLA-reported FLOPs": "flops",
                 ratio: "ratio"}
        caption = None
        if all(row.residual_bytes is None for row in self):
            frame = frame.drop(columns="residuals")  # training steps: their residuals are inside them
        if any(row.refused for row in self):
            frame["compiled"] = ["refused: too large" if row.refused else "yes" for row in self]
            caption = ("XLA's TPU compiler refused the programs marked 'refused': their device memory is what "
                       "its error message says they need.")
        if "target" in frame.columns:
            # The FLOPs are the CPU program's: say so, and leave out what XLA reports for it.
            frame = frame.drop(columns="XLA-reported FLOPs").rename(columns={"true FLOPs": "FLOPs (CPU program)"})
            units = {"residuals": "bytes", "device memory": "bytes", "XLA peak": "bytes", "XLA temp": "bytes",
                     "host (offloaded)": "bytes", "FLOPs (CPU program)": "flops", ratio: "ratio"}
            if "est. step time" in frame.columns and not any(row.ranked_by_time for row in self):
                # A TPU's estimate, which nothing ranks on, stays in to_pandas() and the rows.
                frame = frame.drop(columns=[c for c in ("est. step time", "est. collectives") if c in frame])
            if "est. step time" in frame.columns:
                units["est. step time"] = units["est. collectives"] = "seconds"
                base = next((row.step_seconds for row in self if row.name == baseline and row.policy is None), None)
                if base:
                    time_ratio = f"time vs {baseline}"
                    frame[time_ratio] = [None if row.step_seconds is None else row.step_seconds / base
                                         for row in self]
                    units[time_ratio] = "ratio"
            if frame["target"].nunique() == 1:
                frame = frame.drop(columns="target")
            return Table(frame, units={k: v for k, v in units.items() if k in frame.columns}, caption=caption)
        differ = any(row.reported_flops != row.flops for row in self)
        return Table(frame, units={k: v for k, v in units.items() if k in frame.columns},
                     caption=LOOP_CAPTION if differ else None)

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())

    def __repr__(self) -> str:
        return str(self.table())


def row_of(program: Program, m: Measurement, base_flops: int, inputs: Inputs) -> PolicyRow:
    """One program's row, from its measurement and the baseline's FLOPs."""
    return PolicyRow(program.label, program.policy, m.residual_bytes, m.temp_bytes, m.flops, m.reported_flops,
                     m.flops / base_flops if base_flops else float("nan"), inputs.per_device,
                     peak_bytes=m.peak_bytes, host_bytes=m.host_bytes,
                     target=None if inputs.target is None else inputs.target.name,
                     argument_bytes=m.argument_bytes, output_bytes=m.output_bytes, alias_bytes=m.alias_bytes,
                     step_seconds=m.step_seconds, refused=m.refused, collective_seconds=m.collective_seconds)


def _rows(programs: Sequence[Program], inputs: Inputs) -> Comparison:
    """Compiles each traced program, the baseline first, into a row."""
    measured = measure(programs, inputs)
    return Comparison(row_of(program, m, measured[0].flops, inputs) for program, m in zip(programs, measured))


def compare_policies(
    loss_for: Callable[[Any], Callable[..., Any]],
    /,
    *args: Any,
    policies: Sequence[str] | Mapping[str, Any] | None = None,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    kwargs: Mapping[str, Any] | None = None,
    target: str | None = None,
    step: bool = False,
    donate_argnums: int | Sequence[int] | None = None,
) -> Comparison:
    """Measures what each checkpoint policy costs on a model, by compiling its gradient or its training step.

    For every policy, ``loss_for(policy)`` builds the loss, once, and
    ``jax.jit(jax.grad(loss, argnums, has_aux=has_aux))`` is traced, checked, lowered and
    compiled from that one trace, never run: the rows report XLA's temporary memory and the
    program's true FLOPs (see :func:`count_flops`), with the residuals that the same
    gradient keeps at the jaxpr level (see :func:`saved_residuals`), the arguments in
    ``argnums`` differentiated and no other. Arguments may be ``jax.ShapeDtypeStruct``
    values, so a model too large for this machine can still be measured. With the
    environment variable ``REMAT_GUIDE_CACHE_DIR`` set to a folder, each program's figures
    are kept there, and a program measured before, by any process, is read back instead of
    compiled (as in :func:`recommend_policy` and :func:`plan_names`).

    Arguments may be sharded (arrays placed with a ``jax.sharding.NamedSharding``, or
    ``jax.ShapeDtypeStruct`` values with a ``sharding``). Then XLA compiles one SPMD
    program per device, and every row is per device (``per_device`` is ``True``): the
    temporary memory and FLOPs of that program, and the residuals' per-device pieces
    (see :func:`remat_guide.sharded.residual_shardings`, with the same ``argnums``).

    With ``step=True``, the program measured is a whole training step as a training loop
    runs it: ``loss_for`` is then a ``step_for(policy)`` that returns the step, such as
    ``step(params, opt_state, batch) -> (params, opt_state, loss)`` with an optax
    optimizer, and ``jax.jit(step, donate_argnums=donate_argnums)`` is compiled. The
    memory then holds the optimizer's state, the gradients and the update, and donated
    buffers that the step's outputs reuse count once (``alias_bytes``). A step's rows
    have no ``residual_bytes``: the step takes its gradient inside, and
    :func:`remat_guide.saved_residuals` of its loss lists them.

    Args:
        loss_for: Called as ``loss_for(policy)``; returns the scalar loss function of
            ``*args`` that checkpoints with that policy (with ``step=True``, the
            training step instead). ``loss_for(None)`` is the
            baseline row and should return the loss without any ``jax.checkpoint``; if
            it still checkpoints, its row is labelled ``"loss_for(None)"`` instead of
            ``"no checkpoint"`` (with a warning), since it is not the program without
            checkpoints.
        *args: The loss's positional arguments: arrays, numbers, pytrees, or
            ``jax.ShapeDtypeStruct`` values.
        policies: ``None`` for the default set: the standard policies in
            ``STANDARD_POLICIES``, ``save_only_these_names`` for each ``checkpoint_name``
            tag in the model, and for all of them together. Otherwise a sequence of
            names from ``jax.checkpoint_policies`` (any iterable: a list, a generator) or a
            mapping from labels to policies.
        argnums: The positional arguments to differentiate, as for ``jax.grad``: an int
            or a sequence of ints, ``0`` by default. Every leaf of them must be a real
            floating-point value (bfloat16, float16 and float8 included); the other
            arguments may be anything JAX traces (integers, bools, PRNG keys).
        has_aux: As for ``jax.grad``: the loss returns a pair ``(loss, aux)``, and only
            ``loss`` is differentiated; ``aux`` is an output of the compiled program, as
            ``jax.grad`` returns it, and counts as a residual only where the backward
            pass reads the same value.
        kwargs: The loss's keyword arguments, as a mapping: the loss is called as
            ``loss(*args, **kwargs)``. As with ``jax.grad``, they are never
            differentiated; ``jax.jit`` traces them like the positional arguments, so
            they are arrays, numbers or ``jax.ShapeDtypeStruct`` values (bind other
            options inside ``loss_for``). A mapping rather than ``**kwargs``, so that a
            keyword of the loss never collides with one of this function.
        target: ``None`` to compile for this machine's backend, or an accelerator to
            compile for ahead of time, without the device: a name from
            :data:`remat_guide.targets.TARGETS` such as ``"tpu-v5e"`` or ``"h100"``.
            Unsharded arguments are placed on one device of it; sharded ones keep their
            specs on a mesh of the same shape over its devices (see
            :func:`remat_guide.targets.place`). The rows' memory figures (``temp_bytes``,
            ``peak_bytes``, ``host_bytes``, ...) are then that compiler's buffer
            assignment, not a run, and on a GPU ``step_seconds`` an estimate from the
            program compiled for it; their FLOPs are those of the same gradient compiled
            for this machine. XLA's TPU compiler comes with ``pip install '.[tpu]'`` in a clone of this site,
            its GPU compiler with ``pip install '.[gpu]'`` (and
            ``JAX_PLATFORMS=cpu`` on a machine without an NVIDIA driver).
            A program that does not fit a TPU chip's memory is refused by XLA's TPU
            compiler; its row says so (``refused``) with the memory the compiler said it
            needs.
        step: ``False`` to compile the gradient of a loss; ``True`` when ``loss_for``
            returns a whole training step, compiled as it is (then leave ``argnums`` and
            ``has_aux`` out: the step differentiates what it chooses).
        donate_argnums: With ``step=True``, the step's arguments whose buffers it
            donates, as for ``jax.jit``: ``None`` (the default) for the first two, the
            parameters and the optimizer state, as training loops donate them; ``()``
            for none. Leave it out for a loss.

    Returns:
        One row per policy, the baseline first, then the policies in the order given, as a
        :class:`Comparison` (a list that renders as a table in a notebook).

    Raises:
        TypeError: If ``loss_for`` is not callable or does not return a function;
            ``policies`` is not one of the forms above, or a policy is not callable as
            ``policy(prim, *avals, **params)`` or answers other than True/False (or
            ``Saveable``, ``Recompute``, ``Offloadable``); ``argnums`` is not an int or
            a sequence of ints; ``has_aux`` is not a bool; ``kwargs`` is not a mapping
            with str keys, or names an argument also passed by position; an argument
            is not an array, a number or a ``jax.ShapeDtypeStruct``; an argument in
            ``argnums`` is not real floating-point; or the loss does not return a real
            floating-point scalar (with ``has_aux``, a pair whose first item is one).
        ValueError: If a policy name is unknown, needs arguments or is given twice;
            ``argnums`` is empty, out of range or repeats an argument; the loss's output
            is not a scalar; an argument or the compiled program would be larger than
            any machine holds (before XLA sees it); ``loss_for(policy)`` never consults
            its policy (the row would not depend on it); a name-based policy names
            only tags the loss never uses (the names it uses are listed); or ``target``
            is not a known name (the known ones are listed); ``donate_argnums`` is given
            without ``step=True``, or is out of range or repeats an argument; or
            ``argnums`` or ``has_aux`` is given with ``step=True``.
        ImportError: If ``target`` needs a compiler that is not installed; the message
            names the ``pip install`` to run.

    Warns:
        UserWarning: If ``loss_for(None)``, the baseline, still uses ``jax.checkpoint``
            (its row is then ``"loss_for(None)"`` and every ratio is against that
            checkpointed program), or a name-based policy names some tags the loss never
            uses.

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

        Keyword arguments and an auxiliary output, as ``jax.grad`` takes them:

        >>> import jax.numpy as jnp
        >>> def loss_for(policy):
        ...     def loss(w, x, *, scale):
        ...         y = jnp.tanh(x @ w)
        ...         return scale * jnp.sum(y ** 2), {"mean": jnp.mean(y)}
        ...     return loss if policy is None else jax.checkpoint(loss, policy=policy)
        >>> rows = compare_policies(loss_for, jnp.ones((8, 8)), jnp.ones((4, 8)), has_aux=True,
        ...                         kwargs={"scale": 0.5}, policies=["nothing_saveable"])
        >>> [row.name for row in rows]
        ['no checkpoint', 'nothing_saveable']

        The same model compiled for a TPU v5e, ahead of time, where the peak decides:

        >>> rows = compare_policies(mlp_scan_loss, *mlp_args(8, 64, 32), target="tpu-v5e",
        ...                         policies=["nothing_saveable"])
        >>> [(row.target, row.device_bytes == row.peak_bytes) for row in rows]
        [('tpu-v5e', True), ('tpu-v5e', True)]
        >>> rows[1].peak_bytes < rows[0].peak_bytes
        True

        On an NVIDIA GPU, arguments + outputs + temporary memory decide, and every row has
        an estimated step time (:func:`remat_guide.targets.estimate_step`):

        >>> rows = compare_policies(mlp_scan_loss, *mlp_args(8, 64, 32), target="h100",
        ...                         policies=["nothing_saveable"])
        >>> row = rows[1]
        >>> row.device_bytes == row.argument_bytes + row.output_bytes + row.temp_bytes - row.alias_bytes
        True
        >>> row.step_seconds > 0
        True

        A whole training step, Adam's state and donated buffers included:

        >>> import optax
        >>> from remat_guide.models import mlp_scan_loss
        >>> optimizer = optax.adam(1e-3)
        >>> def step_for(policy):
        ...     def step(params, opt_state, x):
        ...         loss, grads = jax.value_and_grad(mlp_scan_loss(policy))(params, x)
        ...         updates, opt_state = optimizer.update(grads, opt_state)
        ...         return optax.apply_updates(params, updates), opt_state, loss
        ...     return step
        >>> params, x = mlp_args(8, 64, 32)
        >>> opt_state = jax.eval_shape(optimizer.init, params)
        >>> rows = compare_policies(step_for, params, opt_state, x, step=True, target="h100",
        ...                         policies=["nothing_saveable"])
        >>> rows[0].alias_bytes == 3 * 8 * 32 * 32 * 4 * 2 + 4  # params, two moments, the count
        True
    """
    validation.callable_arg(loss_for, "loss_for")
    inputs = check_inputs(args, argnums, kwargs, has_aux, target, step, donate_argnums)
    base, tags = trace_baseline(loss_for, inputs)
    chosen = default_policies(tags) if policies is None else as_policies(policies)
    programs = [base] + [trace_policy(loss_for, label, policy, inputs, tags) for label, policy in chosen.items()]
    return _rows(programs, inputs)


def recommend_policy(
    loss_for: Callable[[Any], Callable[..., Any]] | None = None,
    /,
    *args: Any,
    budget_bytes: int | None = None,
    rows: Iterable[PolicyRow] | None = None,
    policies: Sequence[str] | Mapping[str, Any] | None = None,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    kwargs: Mapping[str, Any] | None = None,
    target: str | None = None,
    step: bool = False,
    donate_argnums: int | Sequence[int] | None = None,
) -> PolicyRow:
    """The policy that fits a memory budget and, of those, runs fastest by estimate (fewest FLOPs off a GPU).

    The candidates are the rows of :func:`compare_policies` (compiled, not estimated):
    either ``loss_for`` and its arguments are given and every candidate is measured
    here, or the rows of an earlier :func:`compare_policies` (or :func:`plan_names`)
    are given as ``rows``, and nothing is compiled again. A row fits when its
    ``device_bytes`` is at most ``budget_bytes``: arguments + outputs + temporary memory
    - aliased bytes on a GPU target, XLA's peak on a TPU target, the temporary memory
    on this machine's CPU. A program XLA's TPU compiler refused never fits, whatever the
    figure its message gave (the compiler's usable HBM is below the chip's
    ``memory_bytes``). Of the rows that fit, on a GPU target the one with the least
    estimated step time (``step_seconds``) is chosen; elsewhere (on a TPU, where no run
    has checked the estimate, and on the CPU) the one with the fewest FLOPs, which says
    what is recomputed, not how long a step takes. A tie goes to the one using less memory.
    The estimate is a model with host copies and collectives between devices after the
    kernels, not overlapped (the collectives at their links' published rates, unchecked
    by any multi-device run); its error
    against an H200's measured steps, program by program, is on the guide's page on time
    on accelerators, and two policies whose estimates are closer than that error are not
    ranked by it, whichever the pick names. Copies can hide: at a 70B model's width an
    H200 hid most of those of the query, key and value (the guide's page on kernels), so
    the estimate is pessimistic for small offloads.

    On a GPU, XLA's defaults autotune kernels, and autotuning can change the plan: on an
    H200, arguments + outputs + temporary memory with autotuning were up to 10% above the
    figure compiled without it, as here (the temporary memory alone up to 17%). Leave
    that margin out of ``budget_bytes`` for a GPU.

    The row's ``policy`` is the object to pass to ``jax.checkpoint``; ``None`` means the
    loss that ``loss_for(None)`` returns, which uses no checkpoint when the row is named
    ``"no checkpoint"`` (see :func:`compare_policies` for a baseline that still
    checkpoints). With sharded arguments the rows are per device, so ``budget_bytes`` is
    the memory of one device.

    Args:
        loss_for: As for :func:`compare_policies`; leave it out when ``rows`` is given.
        *args: As for :func:`compare_policies`.
        budget_bytes: The most device memory the compiled gradient may use, in bytes
            (as ``PolicyRow.device_bytes`` counts it). Left out for a TPU target (or rows
            of one), the chip's usable HBM (:func:`remat_guide.targets.usable_bytes`).
        rows: Rows measured already (a :class:`Comparison` or any iterable of
            :class:`PolicyRow`), instead of ``loss_for`` and its arguments.
        policies: As for :func:`compare_policies`.
        argnums: As for :func:`compare_policies`.
        has_aux: As for :func:`compare_policies`.
        kwargs: As for :func:`compare_policies`.
        target: As for :func:`compare_policies`: the accelerator to compile for.
        step: As for :func:`compare_policies`: ``loss_for`` returns a whole training step.
        donate_argnums: As for :func:`compare_policies`, with ``step=True``.

    Returns:
        The chosen row.

    Raises:
        TypeError: If ``budget_bytes`` is not an int (or is left out, off a TPU
            target), ``rows`` is not an iterable of :class:`PolicyRow`, neither
            ``loss_for`` nor ``rows`` is given (or an argument is wrong as for
            :func:`compare_policies`).
        ValueError: If ``budget_bytes`` is not positive; ``rows`` is empty, or given
            together with ``loss_for``, arguments, ``policies``, ``argnums``,
            ``has_aux``, ``kwargs``, ``target``, ``step`` or ``donate_argnums``; or no
            policy fits: the message names the smallest memory any policy reaches (or an argument is wrong as for
            :func:`compare_policies`).

    Warns:
        UserWarning: As for :func:`compare_policies`.

    Examples:
        >>> import jax
        >>> from remat_guide import compare_policies, recommend_policy
        >>> from remat_guide.models import mlp_args, mlp_scan_loss
        >>> args = mlp_args(layers=8, n=64, d=32)
        >>> names = ["dots_saveable", "nothing_saveable"]
        >>> rows = compare_policies(mlp_scan_loss, *args, policies=names)
        >>> by_name = {row.name: row for row in rows}
        >>> budget = by_name["no checkpoint"].temp_bytes - 1
        >>> best = recommend_policy(rows=rows, budget_bytes=budget)
        >>> best.name, best.temp_bytes <= budget, best.flops < by_name["nothing_saveable"].flops
        ('dots_saveable', True, True)
        >>> recommend_policy(mlp_scan_loss, *args, budget_bytes=budget, policies=names) == best
        True
        >>> recommend_policy(rows=rows, budget_bytes=1)
        Traceback (most recent call last):
        ...
        ValueError: no policy fits budget_bytes=1: the smallest temporary memory is ... bytes, with ...
    """
    if budget_bytes is not None or rows is None:
        budget_bytes = budget_or_usable(budget_bytes, [target])
    if rows is None:
        if loss_for is None:
            raise TypeError("recommend_policy needs loss_for (a callable) with its arguments, or rows measured "
                            "already; got neither")
        candidates = compare_policies(loss_for, *args, policies=policies, argnums=argnums, has_aux=has_aux,
                                      kwargs=kwargs, target=target, step=step, donate_argnums=donate_argnums)
    else:
        given = [name for name, unset in (("loss_for", loss_for is None), ("args", not args),
                                          ("policies", policies is None), ("has_aux", has_aux is False),
                                          ("kwargs", kwargs is None), ("target", target is None),
                                          ("step", step is False), ("donate_argnums", donate_argnums is None))
                 if not unset]
        if not (isinstance(argnums, int) and not isinstance(argnums, bool) and argnums == 0):
            given.append("argnums")
        if given:
            raise ValueError(f"rows are measured already: {', '.join(given)} would not be used; pass either "
                             "rows or loss_for with its arguments")
        candidates = _policy_rows(rows)
        if not candidates:
            raise ValueError("rows must hold at least one PolicyRow")
    if budget_bytes is None:
        budget_bytes = budget_or_usable(None, [row.target for row in candidates])
    fitting = [row for row in candidates if row.refused is None and row.device_bytes <= budget_bytes]
    if not fitting:
        smallest = min(candidates, key=lambda row: row.device_bytes)
        refused = sum(row.refused is not None for row in candidates)
        raise ValueError(
            f"no policy fits budget_bytes={budget_bytes}: the smallest {memory_figure(smallest)} is "
            f"{smallest.device_bytes} bytes, with {smallest.name}"
            + (f"; XLA's TPU compiler refused {refused} of the {len(candidates)} programs" if refused else "")
        )
    if all(row.ranked_by_time for row in fitting):
        return min(fitting, key=lambda row: (row.step_seconds, row.device_bytes))
    return min(fitting, key=lambda row: (row.flops, row.device_bytes))


def memory_figure(row: PolicyRow) -> str:
    """What ``row.device_bytes`` counts, in words, for messages."""
    if row.target is None:
        return "temporary memory"
    if target(row.target).platform == "tpu":
        return f"XLA peak on {row.target}"
    return f"device memory (arguments + outputs + temp) on {row.target}"


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
        >>> table.caption  # the true count differs from XLA's, which skips loop iterations
        "XLA-reported FLOPs count a loop's body once; true FLOPs count every iteration (remat_guide.count_flops)."
        >>> str(table).splitlines()[3].split()
        ['no', 'checkpoint', '1.000', '3.000', '4.000', '1.000', '1.000×']
    """
    return Comparison(rows).table()
