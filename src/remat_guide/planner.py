"""Plan each ``checkpoint_name`` value: keep it, offload it or recompute it, under a memory budget."""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax

from remat_guide import _validation as validation
from remat_guide._labels import names_label
from remat_guide._measure import (
    STANDARD_POLICIES,
    Inputs,
    Program,
    budget_or_usable,
    check_inputs,
    measure,
    standard_policy,
    trace_baseline,
    trace_policy,
)
from remat_guide.compare import PolicyRow, memory_figure, row_of

__all__ = ["KEEP", "OFFLOAD", "RECOMPUTE", "NamePlan", "cost", "pick", "plan_label", "plan_names", "plan_policy"]

KEEP, OFFLOAD, RECOMPUTE = "keep", "offload", "recompute"
"""The three answers :func:`plan_names` gives a name."""

# Keys of a measured dict that are not labels (labels are str): the model it belongs to,
# and the checkpoint_name tags and baseline label that tracing loss_for(None) gave.
_ARGUMENTS = ("arguments",)
_BASELINE = ("baseline",)
_FIGURES = ("flops", "device_bytes", "host_bytes")
"""What a plan's prediction adds up; the first is replaced by ``step_seconds`` on a GPU target."""


def cost(row: PolicyRow) -> float:
    """What the planner minimises for a row: its estimated step time on a GPU target, else its FLOPs.

    A TPU row's estimated time is not ranked on (see :attr:`remat_guide.PolicyRow.ranked_by_time`).
    """
    return row.step_seconds if row.step_seconds is not None and row.ranked_by_time else row.flops


@dataclasses.dataclass(frozen=True)
class NamePlan(PolicyRow):
    """The row :func:`plan_names` returns: a :class:`PolicyRow` with the answer for each name.

    Attributes:
        choices: Each name planned, in order, with its answer: ``"keep"`` (saved on the
            device), ``"offload"`` (saved in host memory) or ``"recompute"``. Empty when
            the answer is the baseline or a standard policy, which are not plans of names.
        search: How the search ended, in a sentence: how many plans it compiled of how
            many, and the prediction errors it allowed for when it stopped.
    """

    choices: dict[str, str] = dataclasses.field(default_factory=dict, hash=False)
    search: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.choices, dict):
            raise TypeError(f"NamePlan.choices must be a dict from names to answers, got "
                            f"{type(self.choices).__name__}")
        for name, answer in self.choices.items():
            if not isinstance(name, str) or answer not in (KEEP, OFFLOAD, RECOMPUTE):
                raise ValueError(f"NamePlan.choices must map names (str) to 'keep', 'offload' or "
                                 f"'recompute', got {name!r}: {answer!r}")
        validation.string(self.search, "NamePlan.search")

    @property
    def kept(self) -> tuple[str, ...]:
        """The names kept on the device."""
        return tuple(name for name, answer in self.choices.items() if answer == KEEP)

    @property
    def offloaded(self) -> tuple[str, ...]:
        """The names offloaded to host memory."""
        return tuple(name for name, answer in self.choices.items() if answer == OFFLOAD)


def plan_label(keep: Sequence[str], offload: Sequence[str] = ()) -> str:
    """The row label of a plan: the policy call that makes it, with its names.

    Examples:
        >>> from remat_guide.planner import plan_label
        >>> plan_label(["attn_out"])
        "save_only_these_names('attn_out')"
        >>> plan_label(["attn_out"], ["mlp_hidden"])
        "save_and_offload_only_these_names(['attn_out'], ['mlp_hidden'])"
    """
    if not offload:
        return names_label(keep)
    return f"save_and_offload_only_these_names({list(keep)!r}, {list(offload)!r})"


def plan_policy(keep: Sequence[str], offload: Sequence[str] = ()) -> Callable:
    """The policy that keeps ``keep`` on the device, offloads ``offload`` to pinned host memory and recomputes the rest.

    Examples:
        >>> from remat_guide.planner import plan_policy
        >>> from remat_guide import policy_label
        >>> policy_label(plan_policy(["attn_out"], ["mlp_hidden"]))
        'save_and_offload_only_these_names(...)'
    """
    if not offload:
        return jax.checkpoint_policies.save_only_these_names(*keep)
    return jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=list(keep), names_which_can_be_offloaded=list(offload),
        offload_src="device", offload_dst="pinned_host")


def _fingerprint(loss_for: Callable, inputs: Inputs) -> tuple:
    """What a measured dict's rows depend on: the model, the arguments' types, argnums, has_aux, target, step."""
    leaves, tree = jax.tree.flatten((inputs.args, inputs.kwargs))
    types = tuple((tuple(getattr(leaf, "shape", ())), str(getattr(leaf, "dtype", type(leaf))),
                   str(getattr(leaf, "sharding", None))) for leaf in leaves)
    return loss_for, tree, types, inputs.argnums, inputs.has_aux, inputs.target, inputs.step, inputs.donate


def _names(names: Any, tagged: list[str]) -> tuple[str, ...]:
    if names is None:
        if not tagged:
            raise ValueError(
                "names: loss_for(policy) tags no value with checkpoint_name, so there is no "
                "name to choose; tag values with jax.ad_checkpoint.checkpoint_name")
        return tuple(tagged)
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"names must be None or an iterable of str, got {type(names).__name__}")
    names = list(validation.ordered(names, "names"))
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


def _tolerance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"flops_tolerance must be a number, got {type(value).__name__}")
    value = float(value)
    if not 0 <= value < 1:
        raise ValueError(f"flops_tolerance must be at least 0 and below 1, got {value}")
    return value


def _fits(row: PolicyRow, budget_bytes: int, host_budget_bytes: int | None) -> bool:
    """Within both budgets, and not refused by XLA's TPU compiler (whatever figure its message gave)."""
    return (row.refused is None and row.device_bytes <= budget_bytes
            and (host_budget_bytes is None or row.host_bytes <= host_budget_bytes))


def pick(rows: Iterable[PolicyRow], budget_bytes: int, host_budget_bytes: int | None = None,
         flops_tolerance: float = 5e-3) -> PolicyRow | None:
    """The row :func:`~remat_guide.plan_names` prefers among ``rows``: its objective, on rows already measured.

    Of the rows that fit (not refused by XLA's TPU compiler, ``device_bytes <=
    budget_bytes`` and, with a host budget, ``host_bytes <= host_budget_bytes``), those
    whose :func:`cost` (the estimated step time on a GPU target, FLOPs elsewhere) is
    within ``flops_tolerance`` of the least are equal; of them, the fewest host bytes,
    then the least device memory, then the least cost, then the name, decide.

    Returns:
        The row, or ``None`` when none fits.

    Examples:
        >>> from remat_guide import PolicyRow
        >>> from remat_guide.planner import pick
        >>> keep = PolicyRow("keep", None, 0, 90, 10**6, 10**6, 1.0, target="h100", step_seconds=0.010)
        >>> offload = PolicyRow("offload", None, 0, 60, 10**6, 10**6, 1.0, host_bytes=30, target="h100",
        ...                     step_seconds=0.013)
        >>> pick([keep, offload], 100).name, pick([keep, offload], 80).name
        ('keep', 'offload')
    """
    fitting = [row for row in rows if _fits(row, budget_bytes, host_budget_bytes)]
    if not fitting:
        return None
    least = min(cost(row) for row in fitting)
    equal = [row for row in fitting if cost(row) <= least * (1 + flops_tolerance)]
    return min(equal, key=lambda row: (row.host_bytes, row.device_bytes, cost(row), row.name))


def plan_names(
    loss_for: Callable[[Any], Callable[..., Any]],
    /,
    *args: Any,
    budget_bytes: int | None = None,
    host_budget_bytes: int | None = None,
    names: Iterable[str] | None = None,
    offload: bool | None = None,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    kwargs: Mapping[str, Any] | None = None,
    measured: dict | None = None,
    target: str | None = None,
    flops_tolerance: float = 5e-3,
    exact: bool = False,
    step: bool = False,
    donate_argnums: int | Sequence[int] | None = None,
) -> NamePlan:
    """For each named value, keep it on the device, offload it to host memory or recompute it.

    Same conventions as :func:`recommend_policy`: ``loss_for(policy)`` returns the loss,
    and every plan is measured by compiling ``jax.jit(jax.grad(loss, argnums,
    has_aux=has_aux))`` (never run), for ``target`` when one is given. A plan gives each
    of ``names`` one answer; it is the policy ``save_and_offload_only_these_names`` (or
    ``save_only_these_names`` when nothing is offloaded), with ``offload_src="device"``,
    ``offload_dst="pinned_host"``; the model's other tags are recomputed.

    The objective: of the plans, the baseline and the standard policies of
    ``STANDARD_POLICIES`` whose compiled device memory fits ``budget_bytes`` (and whose
    host memory fits ``host_budget_bytes``, if given), those of least cost
    (:func:`remat_guide.planner.cost`). On a GPU target the cost is the estimated step
    time (``step_seconds``), in which an offloaded value costs its trip to host memory
    and back, and on several devices each collective its bytes at its link's published
    rate, after the kernels (not overlapped; its error against an H200's measured steps
    is on the guide's page on time on accelerators, and at a 70B model's width an H200 hid
    most of the copies of the query, key and value, so small offloads cost less than
    this); on a TPU target (where no run has
    checked the estimate) and on this
    machine, it is the true FLOPs, which say what is recomputed but not how long a step takes. Costs
    within ``flops_tolerance`` (0.5%) of the least count as equal: keeping and
    offloading the same value recompute the same matmuls, but XLA fuses the two programs
    differently, and their elementwise FLOPs can differ by a few tenths of a percent.
    Among equal costs, the fewest offloaded bytes, then the least device memory
    (:func:`remat_guide.planner.pick`).

    The search compiles few of the ``3 ** len(names)`` plans:

    1. Compile the baseline, the standard policies and, for each name, the plan that keeps
       it alone and the one that offloads it alone (recomputing everything is
       ``nothing_saveable``); then the plans that keep every name and that offload every
       name, where the names' effects interact the most.
    2. Predict every other plan's cost, device and host bytes by adding up the single
       names' effects, each against recomputing everything.
    3. Of the plans that could still beat the best plan compiled so far, compile the one
       the objective would choose if the predictions held (predicted to fit; cost within
       the tolerance of the least, then the fewest host bytes, then the least device
       memory), or, when none is predicted to fit, the one of least cost; repeat.
       A plan could beat it unless, even with each prediction lowered by the largest
       error that prediction has made on a plan compiled so far, it does not fit or it
       costs more (or, at equal cost, more host and device bytes).
    4. Stop when no plan could beat the best compiled one. When a compiled plan shows a
       prediction wrong by more than allowed for, the allowance grows, more plans could
       beat the best, and more are compiled; in the worst case every plan is.

    The answer is always a compiled row; the predictions only order the search and
    decide what is left uncompiled, within the errors they have shown. They can miss:
    XLA's planned memory is not the sum of the names' effects (on a GPU, keeping more
    values can lower it), so a plan left uncompiled may fit at a lower cost; the
    guide's page on planning each name for an accelerator shows one.

    ``exact=True`` leaves nothing to the device-memory prediction: a plan is left
    uncompiled only when its predicted cost or host bytes, each lowered by its largest
    error seen, show that it cannot fit the host budget or beat the best plan compiled.
    Cost and host bytes follow from what is recomputed and what is offloaded; device
    memory also depends on how XLA schedules and packs the program's buffers. It costs
    more compiles, most near a tight device budget, where few plans fit and most cost
    less than the answer; when nothing fits, it compiles every plan that could fit the
    host budget before saying so.

    Plans that tie on every figure (symmetric names often do) are equally good answers,
    and the first compiled stands. ``search`` on the row says how it ended. The
    measurements do not depend on the budget: to plan several budgets for the same
    model, pass the same ``measured`` dict to each call; no plan is compiled twice, and
    the prediction errors seen by earlier calls carry over.

    Args:
        loss_for: Called as ``loss_for(policy)``; returns the scalar loss function of
            ``*args`` checkpointed with that policy (``loss_for(None)``: no checkpoint).
        *args: The loss's arguments, as for :func:`compare_policies` (sharded ones
            included: then the budgets and every figure are per device).
        budget_bytes: The most device memory the compiled gradient may use, in bytes, as
            ``PolicyRow.device_bytes`` counts it (temporary memory on this machine;
            arguments + outputs + temporary memory on a GPU target, less XLA's
            autotuning margin, see :func:`recommend_policy`; XLA's peak on a TPU). Left
            out on a TPU target, the chip's usable HBM
            (:func:`remat_guide.targets.usable_bytes`).
        host_budget_bytes: The most host memory the offloaded values may use, in bytes
            (``PolicyRow.host_bytes``); ``None`` for no limit.
        names: The ``checkpoint_name`` tags to plan; ``None`` for every tag the traced
            loss uses.
        offload: Whether a name may be offloaded. ``None``: when there is a ``target``
            (a TPU or GPU has host memory to offload to; this machine's CPU does not, so
            there the answers are keep and recompute).
        argnums: As for :func:`compare_policies`: the positional arguments to
            differentiate, as for ``jax.grad``.
        has_aux: As for :func:`compare_policies`: the loss returns ``(loss, aux)``.
        kwargs: As for :func:`compare_policies`: the loss's keyword arguments, as a
            mapping, never differentiated.
        measured: ``None``, or a dict that keeps every row compiled, for later calls with
            the same ``loss_for``, arguments, ``argnums``, ``has_aux`` and ``target``
            (start with an empty dict, or with the rows of :func:`compare_policies` for the
            same model, keyed by name). A later call reads the model's tags from it and
            traces nothing.
        target: As for :func:`compare_policies`: the accelerator to compile for, ahead of
            time (``None``: this machine).
        flops_tolerance: The relative difference in cost (estimated time on a GPU target,
            FLOPs elsewhere) up to which two rows count as equal, from 0 (below 1); 0
            compares them exactly.
        exact: ``True``: never leave a plan uncompiled on its predicted device bytes (see
            above); ``False``: do, and compile far fewer plans.
        step: As for :func:`compare_policies`: ``loss_for`` returns a whole training
            step (``step(params, opt_state, batch)``), and each plan compiles that step.
        donate_argnums: As for :func:`compare_policies`, with ``step=True``.

    Returns:
        The chosen row, a :class:`NamePlan`: its ``name`` and ``policy`` (the label and
        object to pass to ``jax.checkpoint``), figures, ``choices`` per name, ``compiled``
        (the programs this call compiled) and ``search``.

    Raises:
        TypeError: If ``loss_for`` is not callable, a budget is not an int, ``names`` is
            not an iterable of str, ``offload`` or ``exact`` is not a bool, ``measured`` is
            not a dict, ``flops_tolerance`` is not a number, or an argument, ``argnums``,
            ``has_aux`` or ``kwargs`` is wrong as for :func:`compare_policies`.
        ValueError: If ``budget_bytes`` is not positive, ``host_budget_bytes`` is
            negative, ``offload=True`` without a ``target``, ``names`` is empty, repeats
            a name or holds one the model does not tag, the model tags nothing,
            ``measured`` holds rows of another model, other arguments or another target,
            ``target`` is unknown, ``flops_tolerance`` is outside [0, 1), or nothing fits;
            that message names the smallest memory reached.

    Examples:
        >>> from remat_guide import plan_names
        >>> from remat_guide.models import transformer_args, transformer_loss
        >>> args = transformer_args(layers=2, batch=1, seq=16, d_model=32, heads=2, mlp_dim=64)
        >>> measured = {}
        >>> loose = plan_names(transformer_loss, *args, budget_bytes=2**30,
        ...                    names=["attn_out", "mlp_hidden"], measured=measured)
        >>> loose.name, loose.compiled  # no checkpoint, 4 standard policies, 2 names alone, both
        ('no checkpoint', 8)
        >>> budget = measured["nothing_saveable"].temp_bytes + 2**10
        >>> tight = plan_names(transformer_loss, *args, budget_bytes=budget,
        ...                    names=["attn_out", "mlp_hidden"], measured=measured)
        >>> tight.choices, tight.temp_bytes <= budget, tight.compiled
        ({'attn_out': 'keep', 'mlp_hidden': 'recompute'}, True, 0)
        >>> sure = plan_names(transformer_loss, *args, budget_bytes=budget,
        ...                   names=["attn_out", "mlp_hidden"], measured=measured, exact=True)
        >>> sure.name == tight.name, sure.search.split(";")[0]
        (True, '4 of 4 plans compiled (exact)')
        >>> plan_names(transformer_loss, *args, budget_bytes=1, names=["attn_out"],
        ...            measured=measured)
        Traceback (most recent call last):
        ...
        ValueError: nothing fits budget_bytes=1: the smallest temporary memory reached is ... bytes, with ...
    """
    validation.callable_arg(loss_for, "loss_for")
    budget_bytes = budget_or_usable(budget_bytes, [target])
    if host_budget_bytes is not None:
        host_budget_bytes = validation.integer(host_budget_bytes, "host_budget_bytes", minimum=0)
    if offload is not None:
        offload = validation.boolean(offload, "offload")
    exact = validation.boolean(exact, "exact")
    flops_tolerance = _tolerance(flops_tolerance)
    if measured is None:
        measured = {}
    elif not isinstance(measured, dict):
        raise TypeError(f"measured must be None or a dict, got {type(measured).__name__}")
    inputs = check_inputs(args, argnums, kwargs, has_aux, target, step, donate_argnums)
    if offload is None:
        offload = inputs.target is not None
    elif offload and inputs.target is None:
        raise ValueError("offload=True needs a target: this machine's CPU has no separate host memory, so "
                         "an offloaded value stays where it was; pass target='tpu-v5e', 'h100', ...")
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
    return _Search(loss_for, inputs, names, tags, measured, base, base_label,
                   (KEEP, OFFLOAD, RECOMPUTE) if offload else (KEEP, RECOMPUTE)).run(
        budget_bytes, host_budget_bytes, flops_tolerance, exact)


Plan = tuple[str, ...]


class _Search:
    """The plans of one model's names, what is known of them, and the search for one budget."""


    def __init__(self, loss_for: Callable, inputs: Inputs, names: tuple[str, ...], tags: list[str],
                 measured: dict, base: Program | None, base_label: str, answers: tuple[str, ...]) -> None:
        self.loss_for, self.inputs, self.names, self.tags = loss_for, inputs, names, tags
        self.measured, self.base, self.base_label = measured, base, base_label
        self.plans: list[Plan] = list(itertools.product(answers, repeat=len(names)))
        self.none: Plan = (RECOMPUTE,) * len(names)
        self.answers = answers
        self.singles: list[Plan] = [plan for plan in self.plans if sum(a != RECOMPUTE for a in plan) == 1]
        self.compiled = 0
        timed = inputs.target is not None and inputs.target.ranks_by_time
        self.figures = (("step_seconds",) if timed else ("flops",)) + _FIGURES[1:]

    def label(self, plan: Plan) -> str:
        if plan == self.none:
            return "nothing_saveable"
        return plan_label([n for n, a in zip(self.names, plan) if a == KEEP],
                          [n for n, a in zip(self.names, plan) if a == OFFLOAD])

    def _measure(self, programs: list[Program], base_flops: int) -> None:
        for program, result in zip(programs, measure(programs, self.inputs)):
            self.measured[program.label] = row_of(program, result, base_flops, self.inputs)
        self.compiled += len(programs)

    def fixed(self) -> list[PolicyRow]:
        """The baseline and the standard policies, compiled if not yet measured."""
        labels = [self.base_label, *STANDARD_POLICIES]
        if self.base_label not in self.measured:
            base = self.base or trace_baseline(self.loss_for, self.inputs)[0]
            result = measure([base], self.inputs)[0]
            self.measured[base.label] = row_of(base, result, result.flops, self.inputs)
            self.compiled += 1
        missing = [label for label in STANDARD_POLICIES if label not in self.measured]
        if missing:
            self._measure([trace_policy(self.loss_for, label, standard_policy(label), self.inputs, self.tags)
                           for label in missing], self.measured[self.base_label].flops)
        return [self.measured[label] for label in labels]

    def ensure(self, plans: Sequence[Plan]) -> None:
        """Compiles the plans not yet measured, in one batch."""
        missing = [plan for plan in plans if self.label(plan) not in self.measured]
        programs = [trace_policy(self.loss_for, self.label(plan), self.policy(plan), self.inputs, self.tags)
                    for plan in missing]
        if programs:
            self._measure(programs, self.measured[self.base_label].flops)

    def policy(self, plan: Plan) -> Callable:
        if plan == self.none:
            return jax.checkpoint_policies.nothing_saveable
        return plan_policy([n for n, a in zip(self.names, plan) if a == KEEP],
                           [n for n, a in zip(self.names, plan) if a == OFFLOAD])

    def known(self, plan: Plan) -> PolicyRow | None:
        return self.measured.get(self.label(plan))

    def predict(self, plan: Plan) -> tuple[float, ...]:
        """Cost, device and host bytes of ``plan``: recomputing everything plus each answer's effect alone."""
        none = self.known(self.none)
        figures = [float(getattr(none, f)) for f in self.figures]
        for i, answer in enumerate(plan):
            if answer != RECOMPUTE:
                single = self.known(tuple(answer if j == i else RECOMPUTE for j in range(len(plan))))
                for k, f in enumerate(self.figures):
                    figures[k] += getattr(single, f) - getattr(none, f)
        return tuple(figures)

    def errors(self) -> tuple[float, ...]:
        """The largest error of each prediction on a plan compiled beyond the single answers."""
        worst = [0.0, 0.0, 0.0]
        for plan in self.plans:
            row = self.known(plan)
            if row is None or plan == self.none or plan in self.singles:
                continue
            for k, (f, guess) in enumerate(zip(self.figures, self.predict(plan))):
                worst[k] = max(worst[k], abs(getattr(row, f) - guess))
        return tuple(worst)

    @staticmethod
    def order(waiting: list[tuple], least: float | None, tolerance: float) -> Callable[[tuple], tuple]:
        """The search order: the objective on the predictions, then the plans predicted not to fit.

        First the plans predicted to fit, as ``pick`` would rank them if the predictions
        held (costs within ``tolerance`` of the least, predicted or compiled, count as
        equal; then host bytes, device bytes); then the others, least cost first.
        """
        least_fitting = min([spent for fits, spent, *_ in waiting if fits] + ([] if least is None else [least]),
                             default=0.0)

        def key(candidate: tuple) -> tuple:
            fits, spent, host, device, _ = candidate
            level = least_fitting if fits and spent <= least_fitting * (1 + tolerance) else spent
            return (not fits, level, host, device, spent)

        return key

    def run(self, budget: int, host_budget: int | None, tolerance: float, exact: bool) -> NamePlan:
        fixed = self.fixed()
        # Every name kept, and every name offloaded: where the single effects interact the
        # most, so that the predictions' errors are seen before the first decision.
        every = [(answer,) * len(self.names) for answer in self.answers if answer != RECOMPUTE]
        self.ensure([self.none, *self.singles, *(plan for plan in every if plan not in self.singles)])
        widened = 0
        while True:
            rows = fixed + [row for plan in self.plans if (row := self.known(plan)) is not None]
            best = pick(rows, budget, host_budget, tolerance)
            least = min((cost(row) for row in rows if _fits(row, budget, host_budget)), default=0)
            margin = self.errors()
            if exact:  # no device-byte prediction, however far off, leaves a plan out
                margin = (margin[0], math.inf, margin[2])
            waiting = []
            for plan in self.plans:
                if self.known(plan) is not None:
                    continue
                spent, device, host = self.predict(plan)
                low = (spent - margin[0], device - margin[1], host - margin[2])
                if low[1] > budget or (host_budget is not None and low[2] > host_budget):
                    continue
                if best is not None and not (
                        low[0] < least
                        or (low[0] <= least * (1 + tolerance)
                            and (low[2], low[1]) < (best.host_bytes, best.device_bytes))):
                    continue
                fits = device <= budget and (host_budget is None or host <= host_budget)
                waiting.append((fits, spent, host, device, plan))
            if not waiting:
                break
            plan = min(waiting, key=self.order(waiting, least if best is not None else None, tolerance))[4]
            self.ensure([plan])
            guess, row = self.predict(plan), self.known(plan)
            if any(abs(getattr(row, f) - g) > m for f, g, m in zip(self.figures, guess, margin)):
                widened += 1
        measured_plans = sum(self.known(plan) is not None for plan in self.plans)
        if best is None:
            smallest = min(rows, key=lambda row: row.device_bytes)
            unseen = len(self.plans) - measured_plans
            why = ("their predicted host bytes over the host budget" if exact
                   else "their predictions over the budget: exact=True compiles them")
            raise ValueError(
                f"nothing fits budget_bytes={budget}"
                + ("" if host_budget is None else f" with host_budget_bytes={host_budget}")
                + f": the smallest {memory_figure(smallest)} reached is {smallest.device_bytes} bytes, with "
                f"{smallest.name} ({self.compiled} policies compiled)"
                + (f"; {unseen} of the {len(self.plans)} plans were not compiled, {why}" if unseen else ""))
        plans = {self.label(plan): plan for plan in self.plans}
        chosen = plans.get(best.name)
        timed = self.figures[0] == "step_seconds"
        objective = "estimated time" if timed else "FLOPs"
        error = (f"time {margin[0] * 1e3:.3f} ms" if timed else f"FLOPs {_amount(margin[0])}")
        if exact:
            search = (f"{measured_plans} of {len(self.plans)} plans compiled (exact); the others could not "
                      f"fit the host budget or beat it in {objective} even with each prediction lowered by its "
                      f"largest error on a compiled plan ({error}, host {_amount(margin[2])} bytes)")
        else:
            search = (f"{measured_plans} of {len(self.plans)} plans compiled; the others could not fit and "
                      f"beat it even with each prediction lowered by its largest error on a compiled plan "
                      f"({error}, device {_amount(margin[1])} bytes, "
                      f"host {_amount(margin[2])} bytes)")
        if widened:
            search += (f"; {widened} compiled plans lay further from their predictions than allowed for, "
                       "which widened the allowance and the search")
        fields = {f.name: getattr(best, f.name) for f in dataclasses.fields(PolicyRow)}
        fields["compiled"] = self.compiled
        return NamePlan(**fields, choices={} if chosen is None else dict(zip(self.names, chosen)),
                        search=search)


def _amount(value: float) -> str:
    return f"{math.ceil(max(value, 0)):,}"
