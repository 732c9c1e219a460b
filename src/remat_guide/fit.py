"""Will a training step fit: where its device memory goes, and the largest batch that fits under a policy."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np
import pandas as pd

from remat_guide import _validation as validation
from remat_guide._measure import BASELINE, as_policies, budget_or_usable, check_inputs, target_step
from remat_guide.compare import PolicyRow
from remat_guide.residuals import saved_residuals
from remat_guide.sharded import is_sharded, residual_shardings
from remat_guide.tables import Table

__all__ = ["BatchFit", "BatchPlan", "MemoryBreakdown", "PolicyBatch", "device_nbytes", "largest_batch",
           "recommend_batch", "step_memory"]


def device_nbytes(tree: Any) -> int:
    """The bytes one device holds of a pytree of arrays or ``jax.ShapeDtypeStruct`` values.

    A leaf sharded with a ``NamedSharding`` counts its shard; any other leaf counts whole.

    Raises:
        TypeError: If a leaf has no shape and dtype.

    Examples:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from remat_guide.fit import device_nbytes
        >>> device_nbytes({"w": jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16), "step": jnp.int32(0)})
        2097156
    """
    total = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(f"tree{jax.tree_util.keystr(path)} must be an array or a jax.ShapeDtypeStruct, "
                            f"got {type(leaf).__name__}")
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, jax.sharding.NamedSharding):
            shape = sharding.shard_shape(tuple(shape))
        total += math.prod(shape) * np.dtype(dtype).itemsize
    return total


@dataclasses.dataclass(frozen=True)
class MemoryBreakdown:
    """One compiled step's device memory, part by part, on one device (see :func:`step_memory`).

    Attributes:
        row: The compiled step's row (from :func:`remat_guide.compare_policies` with
            ``step=True``).
        parts: ``(part, bytes, counted in)`` in the order shown: the arguments
            (parameters, optimizer state, batch), the outputs that reuse no argument's
            buffer, then what the compiler's temporary memory holds (the gradients, each
            saved residual by its name, the values given as ``also``, and the rest, whose
            name says so where it is negative).
        residuals: ``(name, layers, bytes)`` of each residual kept on the device, its
            bytes over every layer; offloaded ones are in ``host_residuals``.
        host_residuals: The same for residuals a policy offloads to host memory.
    """

    row: PolicyRow
    parts: tuple[tuple[str, int, str], ...]
    residuals: tuple[tuple[str, int, int], ...]
    host_residuals: tuple[tuple[str, int, int], ...]

    @property
    def total_bytes(self) -> int:
        """The sum of the parts, which on a GPU or TPU target is the row's ``device_bytes`` (what decides the fit)."""
        return sum(nbytes for _, nbytes, _ in self.parts)

    def to_pandas(self) -> pd.DataFrame:
        """The parts as a DataFrame: ``part``, ``bytes``, ``counted in``, exact byte counts."""
        return pd.DataFrame(list(self.parts), columns=["part", "bytes", "counted in"])

    def table(self) -> Table:
        """The parts as a :class:`~remat_guide.tables.Table`, one unit for the column."""
        return Table(self.to_pandas(), units={"bytes": "bytes"})

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __str__(self) -> str:
        return str(self.table())


def _residual_label(residual: Any) -> str:
    if residual.kind == "named":
        return residual.name.strip("'")
    return f"{residual.name} at {residual.location.split(' ')[0]}" if residual.location else residual.name


def step_memory(row: PolicyRow, loss: Callable, params: Any, opt_state: Any, batch: Any, /, *,
                also: Mapping[str, int] | None = None) -> MemoryBreakdown:
    """Splits a compiled training step's device memory into what holds it, per device.

    The arguments are counted from their shapes and shardings (the parameters, the
    optimizer's state, the batch); the gradients are as large as the parameters (their
    dtype) and live in the compiler's temporary memory, as do the residuals that the
    forward pass keeps for the backward pass, listed by
    :func:`remat_guide.saved_residuals` (per device with
    :func:`remat_guide.sharded.residual_shardings` when sharded) for ``loss`` with the
    row's policy. What the temporary memory holds beyond them (the logits, the update,
    the recomputed activations, XLA's scratch) is the rest; it is negative when XLA
    frees some of them before others are made, since the parts are sizes, not
    lifetimes.

    Args:
        row: The step's row, from :func:`remat_guide.compare_policies` with
            ``step=True`` (compiled for a target, or for this machine).
        loss: The loss the step differentiates, checkpointed with the row's policy:
            ``loss(params, batch)``.
        params: The step's parameters, as it was compiled with.
        opt_state: The step's optimizer state.
        batch: The step's batch.
        also: Further values to single out of the temporary memory, by label, in bytes
            per device (such as the float32 logits).

    Returns:
        A :class:`MemoryBreakdown`; it renders as a table.

    Raises:
        TypeError: If ``row`` is not a :class:`~remat_guide.PolicyRow`, ``loss`` is not callable, a
            leaf of the arguments is not an array, or ``also`` is not a mapping from
            str to ints.
        ValueError: If the row was refused by the compiler (there is nothing to split).

    Examples:
        >>> import functools
        >>> from remat_guide import compare_policies
        >>> from remat_guide.fit import step_memory
        >>> from remat_guide.models import LLAMA3, decoder_args, decoder_loss, decoder_step
        >>> config = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
        >>> args = decoder_args(config, batch=2, seq=16)
        >>> rows = compare_policies(functools.partial(decoder_step, config), *args, step=True, target="h100",
        ...                         policies=["nothing_saveable"])
        >>> memory = step_memory(rows[1], decoder_loss(config, rows[1].policy), args[0], *args[1:])
        >>> memory.to_pandas()["part"].tolist()[:4]
        ['parameters', 'optimizer state', 'batch', 'outputs (not reusing an argument)']
        >>> sum(b for _, b, _ in memory.parts) == memory.total_bytes
        True
    """
    if not isinstance(row, PolicyRow):
        raise TypeError(f"row must be a PolicyRow, got {type(row).__name__}")
    if row.refused:
        raise ValueError(f"row {row.name!r} was refused by the compiler ({row.refused}); there is no memory "
                         "to split")
    validation.callable_arg(loss, "loss")
    extra = {} if also is None else dict(also) if isinstance(also, Mapping) else None
    if extra is None:
        raise TypeError(f"also must be None or a mapping from labels to bytes, got {type(also).__name__}")
    for label, value in extra.items():
        validation.string(label, "also's labels")
        extra[label] = validation.integer(value, f"also[{label!r}]", minimum=0)
    parameters, state, data = device_nbytes(params), device_nbytes(opt_state), device_nbytes(batch)
    gradients = parameters
    on_device: dict[str, list[int]] = {}
    on_host: dict[str, list[int]] = {}
    if is_sharded(params, batch):
        kept = [(r.residual, r.device_nbytes) for r in residual_shardings(loss, params, batch, argnums=0)]
    else:
        kept = [(r, r.nbytes) for r in saved_residuals(loss, params, batch, argnums=0)]
    for residual, nbytes in kept:
        if residual.kind == "argument":
            continue  # the parameters and the batch, counted as arguments
        where = on_host if residual.memory == "host" else on_device
        layers = math.prod(residual.stacked) if residual.stacked else 1
        entry = where.setdefault(_residual_label(residual), [0, 0])
        entry[0] = max(entry[0], layers)
        entry[1] += nbytes
    saved = sum(nbytes for _, nbytes in on_device.values())
    parts: list[tuple[str, int, str]] = [
        ("parameters", parameters, "arguments"),
        ("optimizer state", state, "arguments"),
        ("batch", data, "arguments"),
        ("outputs (not reusing an argument)", row.output_bytes - row.alias_bytes, "outputs"),
        ("gradients", gradients, "temp"),
    ]
    parts += [(f"residual {name}", nbytes, "temp") for name, (_, nbytes) in on_device.items()]
    parts += [(label, value, "temp") for label, value in extra.items()]
    rest = row.temp_bytes - gradients - saved - sum(extra.values())
    # Negative when XLA frees some values before others are made: the part's name says so.
    parts.append(("rest of temp (recomputed values, update, scratch)" if rest >= 0 else
                  "rest of temp, negative: the parts are sizes, not lifetimes, and XLA reuses "
                  "the memory of values it frees", rest, "temp"))
    counted = parameters + state + data
    if counted != row.argument_bytes:
        parts.append(("arguments' padding (compiler's layout)", row.argument_bytes - counted, "arguments"))
    held = row.argument_bytes + row.output_bytes - row.alias_bytes + row.temp_bytes
    if row.target is not None and row.device_bytes != held:  # a TPU: its compiler's peak decides
        parts.append(("compiler's peak beyond these", row.device_bytes - held, "peak"))
    return MemoryBreakdown(row, tuple(parts),
                           tuple((name, layers, nbytes) for name, (layers, nbytes) in on_device.items()),
                           tuple((name, layers, nbytes) for name, (layers, nbytes) in on_host.items()))


@dataclasses.dataclass(frozen=True)
class BatchFit:
    """The largest batch that fits under one policy (see :func:`largest_batch`).

    Attributes:
        batch: The largest batch that fits; 0 when not even the smallest does.
        device_bytes: What that batch needs (``PolicyRow.device_bytes``); for ``batch``
            0, what the smallest batch needs.
        compiled: Every batch compiled, with what it needs, in the order compiled.
        refused: The batches XLA's TPU compiler refused (their figure in ``compiled`` is
            the one its message gave); none of them fits, whatever that figure.
        budget_bytes: The budget the batches were held to.
        step_seconds: The estimated time of a step at ``batch`` (as
            ``PolicyRow.step_seconds``): ``None`` for batch 0, or on a TPU for a program
            that moves bytes to or from host memory.
    """

    batch: int
    device_bytes: int
    compiled: tuple[tuple[int, int], ...]
    refused: tuple[int, ...]
    budget_bytes: int
    step_seconds: float | None = None


def largest_batch(loss_for: Callable[[Any], Callable[..., Any]], args_for: Callable[[int], tuple], /, *,
                  policy: Any, target: str, budget_bytes: int | None = None, multiple: int = 1, limit: int = 2**16,
                  step: bool = False, donate_argnums: Any = None) -> BatchFit:
    """The largest batch whose compiled program fits ``budget_bytes`` on a target, found by compiling.

    Each candidate batch is compiled for the target ahead of time (never run), as
    :func:`remat_guide.compare_policies` compiles it, and fits when its
    ``device_bytes`` is at most the budget and XLA's TPU compiler did not refuse it (a
    refused program never fits, even when its message's figure is within the budget: the
    compiler's usable HBM is less than the chip's ``memory_bytes``). A step's memory
    grows about linearly with its batch, so the search compiles the smallest batch and
    twice it, predicts the boundary from the line through them, and compiles around the
    prediction, each time from the two nearest batches compiled (halving the interval
    instead where those two need the same memory, as batches padded to one tile do on a
    TPU), until it holds a batch that fits next to one that does not (usually four or
    five compiles). Only the target's program is compiled: no FLOPs are counted.

    Args:
        loss_for: As for :func:`remat_guide.compare_policies` (with ``step=True``, a
            ``step_for``); called once, and its function traced at every batch tried.
        args_for: Called as ``args_for(batch)``; returns the positional arguments for
            that batch (abstract ones are enough, such as those of
            :func:`remat_guide.models.decoder_args`).
        policy: The policy to measure, or ``None`` for ``loss_for(None)``.
        target: The accelerator, as for :func:`remat_guide.compare_policies`.
        budget_bytes: The device memory one device may use, in bytes. Left out on a TPU
            target, the chip's usable HBM (:func:`remat_guide.targets.usable_bytes`); a
            GPU target needs one (leave autotuning's margin out of it).
        multiple: The batch's step: the batches tried are multiples of it (the devices
            the batch is split over).
        limit: The largest batch to try.
        step: As for :func:`remat_guide.compare_policies`.
        donate_argnums: As for :func:`remat_guide.compare_policies`.

    Returns:
        A :class:`BatchFit`.

    Raises:
        TypeError, ValueError: If an argument is wrong as for
            :func:`remat_guide.compare_policies`, or ``multiple``, ``limit`` or
            ``budget_bytes`` is not a positive int (``limit`` at least ``multiple``).

    Examples:
        >>> import functools
        >>> import jax
        >>> from remat_guide.fit import largest_batch
        >>> from remat_guide.models import LLAMA3, decoder_args, decoder_step
        >>> config = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
        >>> fit = largest_batch(functools.partial(decoder_step, config), lambda b: decoder_args(config, b, 64),
        ...                     policy=jax.checkpoint_policies.nothing_saveable, budget_bytes=2**23,
        ...                     target="h100", step=True)
        >>> fit.batch > 0, fit.device_bytes <= 2**23
        (True, True)
        >>> dict(fit.compiled)[fit.batch + 1] > 2**23
        True
    """
    if target is None:
        raise TypeError("target must name an accelerator to compile for, such as 'h100' or 'tpu-v5p'; got None")
    budget_bytes = budget_or_usable(budget_bytes, [target])
    multiple = validation.integer(multiple, "multiple", minimum=1)
    limit = validation.integer(limit, "limit", minimum=multiple)
    validation.callable_arg(loss_for, "loss_for")
    validation.callable_arg(args_for, "args_for")
    if policy is not None:
        validation.policy(policy, "policy")
    needs: dict[int, int] = {}
    refused: list[int] = []
    seconds: dict[int, float | None] = {}
    made: list[Callable[..., Any]] = []

    def made_once(policy: Any) -> Callable[..., Any]:
        # One function for every batch of the search: JAX then traces once what does not
        # depend on the batch (an optimizer's update of the parameters, for one).
        if not made:
            made.append(loss_for(policy))
        return made[0]

    def need(batch: int) -> int:
        if batch not in needs:
            inputs = check_inputs(tuple(args_for(batch)), 0, None, False, target, step, donate_argnums)
            needs[batch], was_refused, seconds[batch] = target_step(made_once, policy, inputs)
            if was_refused:
                refused.append(batch)
        return needs[batch]

    def fits(batch: int) -> bool:
        return need(batch) <= budget_bytes and batch not in refused

    def found(batch: int) -> BatchFit:
        return BatchFit(batch, needs[batch if batch else multiple], tuple(needs.items()), tuple(refused),
                        budget_bytes, seconds[batch] if batch else None)

    if not fits(multiple):
        return found(0)
    low, high = multiple, None
    if 2 * multiple <= limit:
        if fits(2 * multiple):
            low = 2 * multiple
        else:
            high = 2 * multiple
    else:
        high = low + multiple
    while high is None or high - low > multiple:
        nearest = sorted(needs, key=lambda b: abs(needs[b] - budget_bytes))[:2]
        (b1, m1), (b2, m2) = sorted((b, needs[b]) for b in nearest)
        slope = (m2 - m1) / (b2 - b1) if m2 != m1 else 0.0
        if slope > 0:
            guess = b1 + int((budget_bytes - m1) / slope)
        else:  # a plateau (a TPU pads the batch to its tiles): halve the interval, or double
            guess = 2 * low if high is None else (low + high) // 2
        guess = guess // multiple * multiple
        ceiling = limit if high is None else high - multiple
        guess = min(max(guess, low + multiple), ceiling)
        if high is None and low >= limit:
            break
        if fits(guess):
            low = guess
            if high is None and guess >= limit:
                break
        else:
            high = guess
    return found(low)


@dataclasses.dataclass(frozen=True)
class PolicyBatch:
    """One policy at the batch :func:`recommend_batch` holds it to.

    Attributes:
        name: The policy's label.
        policy: The object to pass as ``jax.checkpoint(..., policy=...)`` (``None``: no checkpoint).
        batch: The largest batch that fits, or the required global batch when one is
            given and fits; 0 when no batch fits.
        device_bytes: What ``batch`` needs per device (``PolicyRow.device_bytes``).
        step_seconds: The estimated time of a step at ``batch`` (``None`` where ``PolicyRow.step_seconds`` is).
        tokens_per_second: ``batch * tokens_per_example / step_seconds``, or ``None``.
        fit: The search behind ``batch`` (:class:`BatchFit`); ``None`` with a global batch.
    """

    name: str
    policy: Any
    batch: int
    device_bytes: int
    step_seconds: float | None
    tokens_per_second: float | None
    fit: BatchFit | None


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """A policy and a batch for a training step (see :func:`recommend_batch`).

    Attributes:
        rows: Every policy at its batch, in the order given.
        pick: The chosen row; ``None`` when no policy fits.
        basis: What the pick rests on, in words.
        global_batch: The required global batch, or ``None``.
    """

    rows: tuple[PolicyBatch, ...]
    pick: PolicyBatch | None
    basis: str
    global_batch: int | None

    def to_pandas(self) -> pd.DataFrame:
        """One row per policy: batch, memory, estimated step and tokens per second, and ``picked``."""
        return pd.DataFrame({
            "policy": [row.name for row in self.rows],
            "batch": [row.batch for row in self.rows],
            "memory": [row.device_bytes for row in self.rows],
            "est. step": [row.step_seconds for row in self.rows],
            "tokens/s": [row.tokens_per_second for row in self.rows],
            "picked": [row is self.pick for row in self.rows],
        })


def recommend_batch(step_for: Callable[[Any], Callable[..., Any]], args_for: Callable[[int], tuple], /, *,
                    policies: Any, target: str, tokens_per_example: int, budget_bytes: int | None = None,
                    multiple: int = 1, limit: int = 2**16, global_batch: int | None = None, step: bool = True,
                    donate_argnums: Any = None, include_none: bool = True) -> BatchPlan:
    """A policy and a batch: per policy the largest batch that fits, and the one with the most tokens per second.

    For each policy, :func:`largest_batch` finds the largest batch that fits the budget
    by compiling for the target (a refused program never fits), and the same compile
    gives the estimated step time at that batch. On a GPU target the pick is the policy
    with the most tokens per second at its largest batch (``batch * tokens_per_example /
    step_seconds``). Given ``global_batch``, each policy is compiled at that batch only,
    and the pick is the fastest of those that fit it. On a TPU target, where no run has
    checked the estimate, the rows show it but the pick is the policy with the largest
    batch (given a global batch: the least memory at it), and ``basis`` says so: it is
    not a statement about speed. A tie goes to the policy listed first.

    Args:
        step_for: As for :func:`largest_batch` (``step=True``: a training step; with
            ``step=False``, a ``loss_for``).
        args_for: As for :func:`largest_batch`.
        policies: As for :func:`remat_guide.compare_policies`: names from
            ``jax.checkpoint_policies`` or ``{label: policy}``.
        target: The accelerator to compile for.
        tokens_per_example: Tokens in one example of the batch (the sequence length).
        budget_bytes: As for :func:`largest_batch`.
        multiple: As for :func:`largest_batch`.
        limit: As for :func:`largest_batch`.
        global_batch: A batch the step must run at, a multiple of ``multiple``; ``None``
            to search each policy's largest batch.
        step: As for :func:`largest_batch` (here ``True`` by default).
        donate_argnums: As for :func:`largest_batch`.
        include_none: Whether ``step_for(None)``, no checkpoint, is a candidate too (the
            first row, ``"no checkpoint"``).

    Returns:
        A :class:`BatchPlan`.

    Raises:
        TypeError, ValueError: As for :func:`largest_batch`, or if ``tokens_per_example``
            or ``global_batch`` is not a positive int, or ``global_batch`` is not a
            multiple of ``multiple``.

    Examples:
        >>> import functools
        >>> from remat_guide.fit import recommend_batch
        >>> from remat_guide.models import LLAMA3, MAXTEXT_PRESETS, decoder_args, decoder_step
        >>> config = LLAMA3["8b"].smaller(layers=2, d_model=64, heads=4, kv_heads=2, mlp_dim=128, vocab=256)
        >>> plan = recommend_batch(functools.partial(decoder_step, config), lambda b: decoder_args(config, b, 64),
        ...                        policies={"full": MAXTEXT_PRESETS["full"], "minimal": MAXTEXT_PRESETS["minimal"]},
        ...                        target="h100", tokens_per_example=64, budget_bytes=2**23)
        >>> [row.name for row in plan.rows]
        ['no checkpoint', 'full', 'minimal']
        >>> plan.pick.tokens_per_second == max(row.tokens_per_second for row in plan.rows if row.batch)
        True
    """
    if target is None:
        raise TypeError("target must name an accelerator to compile for, such as 'h100' or 'tpu-v5p'; got None")
    from remat_guide.targets import target as find_target

    chosen = find_target(target)
    budget_bytes = budget_or_usable(budget_bytes, [target])
    tokens_per_example = validation.integer(tokens_per_example, "tokens_per_example", minimum=1)
    multiple = validation.integer(multiple, "multiple", minimum=1)
    named = {BASELINE: None} if validation.boolean(include_none, "include_none") else {}
    named.update(as_policies(policies))
    if global_batch is not None:
        global_batch = validation.integer(global_batch, "global_batch", minimum=1)
        if global_batch % multiple:
            raise ValueError(f"global_batch ({global_batch}) must be a multiple of multiple ({multiple})")
    rows = []
    for name, policy in named.items():
        if global_batch is None:
            fit = largest_batch(step_for, args_for, policy=policy, target=target, budget_bytes=budget_bytes,
                                multiple=multiple, limit=limit, step=step, donate_argnums=donate_argnums)
            batch, need, seconds = fit.batch, fit.device_bytes, fit.step_seconds
        else:
            fit = None
            inputs = check_inputs(tuple(args_for(global_batch)), 0, None, False, target, step, donate_argnums)
            need, refused, seconds = target_step(step_for, policy, inputs)
            batch = global_batch if not refused and need <= budget_bytes else 0
        tokens = batch * tokens_per_example / seconds if batch and seconds else None
        rows.append(PolicyBatch(name, policy, batch, need, seconds if batch else None, tokens, fit))
    fitting = [row for row in rows if row.batch]
    unranked = "the step-time estimate is shown but not ranked on: no run on this target has checked it"
    if chosen.ranks_by_time:
        pick = max(fitting, key=lambda row: row.tokens_per_second or 0.0, default=None)
        basis = ("the least estimated step time at the global batch" if global_batch else
                 "the most tokens per second by estimate, each policy at its largest batch")
    elif global_batch is None:
        pick = max(fitting, key=lambda row: row.batch, default=None)
        basis = f"the largest batch ({unranked})"
    else:
        pick = min(fitting, key=lambda row: row.device_bytes, default=None)
        basis = f"the least memory at the global batch ({unranked})"
    return BatchPlan(tuple(rows), pick, basis, global_batch)
