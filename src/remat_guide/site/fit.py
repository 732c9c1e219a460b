"""The "Will it fit?" page's figures: Llama 3 training steps per policy on the hardware people rent."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pandas as pd

from remat_guide import _cache as cache
from remat_guide import compare_policies, plan_names, recommend_policy
from remat_guide.compare import Comparison, PolicyRow
from remat_guide.fit import BatchFit, BatchPlan, PolicyBatch, largest_batch, recommend_batch, step_memory
from remat_guide.models import LLAMA3, MAXTEXT_PRESETS, decoder_args, decoder_loss, decoder_step
from remat_guide.site import hardware
from remat_guide.targets import target, usable_bytes

__all__ = ["ATTENTION", "DEVICES_NEEDED", "LONG", "LONG_POLICIES", "LONG_SETUPS", "MEASURED", "MEASURED_POLICIES",
           "PLAIN", "PLANNED", "POLICIES", "SEARCHED", "SEARCHED_TPU", "SEQ", "SETUPS", "Setup", "answers",
           "batches", "breakdown", "budget", "contrast", "h200_check", "h200_none_bytes", "h200_software",
           "host_table", "long_table", "memory_only", "plan", "recommended", "rows", "searched", "summary"]

SEQ = 4096
"""Tokens per sequence in every setup."""

LONG = 32_768
"""The long context: tokens per sequence in the long-context tables."""

ATTENTION = "fused"
"""The attention of every figure but the contrast's: a fused kernel (splash on TPUs, Pallas's Triton
kernel on the H100), as training at these sizes runs (see :func:`remat_guide.models.decoder_loss`)."""

PLAIN = "xla"
"""The contrast: XLA's plain ``softmax(q k^T) v``, whose float32 seq x seq scores a policy may keep."""

DEVICES_NEEDED = 64
"""The simulated CPU devices the page's kernel asks for: the largest mesh's."""

POLICIES = {
    "full": MAXTEXT_PRESETS["full"],
    "minimal": MAXTEXT_PRESETS["minimal"],
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "save_dot_except_mlp": MAXTEXT_PRESETS["save_dot_except_mlp"],
    "save_qkv_proj": MAXTEXT_PRESETS["save_qkv_proj"],
    "qkv_proj_offloaded": MAXTEXT_PRESETS["qkv_proj_offloaded"],
}
"""The policies compared, by MaxText's preset names where one exists (``full`` is
``nothing_saveable``, ``minimal`` is ``dots_with_no_batch_dims_saveable``)."""

SEARCHED = ("full", "minimal", "save_qkv_proj")
"""The policies whose largest batch is searched by compiling on the H100, with no checkpoint (each
search compiles about 4 programs)."""

SEARCHED_TPU = ("full",)
"""The policies searched on TPU chips, with no checkpoint: with no time estimate there, the pick is the
largest batch, and each TPU program takes XLA's TPU compiler one to two minutes here."""

LONG_POLICIES = ("full", "minimal", "save_qkv_proj")
"""The policies compiled at the long context, with no checkpoint."""


@dataclasses.dataclass(frozen=True)
class Setup:
    """One model on one set of devices."""

    key: str
    model: str
    target: str
    devices: int
    fsdp: int
    tensor: int

    @property
    def config(self) -> Any:
        return LLAMA3[self.model]

    @property
    def label(self) -> str:
        chips = "chip" if self.target.startswith("tpu") else ""
        kind = {"h100": "H100", "tpu-v5e": "TPU v5e", "tpu-v5p": "TPU v5p"}[self.target]
        label = f"{self.config.name} on {self.devices} {kind}{' ' + chips + 's' if chips else 's'}"
        return label.replace("on 1 H100s", "on one H100").replace("on 1 TPU v5e chips", "on one TPU v5e chip")

    @property
    def short(self) -> str:
        """The label in a few characters, for narrow tables: ``"8B, 8 H100"``."""
        kind = {"h100": "H100", "tpu-v5e": "v5e", "tpu-v5p": "v5p"}[self.target]
        return f"{self.model.upper()}, {self.devices} {kind}"

    @property
    def mesh(self) -> Any:
        if self.devices == 1:
            return None
        devices = np.array(jax.devices()[:self.devices]).reshape(self.fsdp, self.tensor)
        return jax.sharding.Mesh(devices, ("fsdp", "tensor"))

    @property
    def multiple(self) -> int:
        """The batch's step: one sequence per FSDP group."""
        return self.fsdp

    def args(self, batch: int, seq: int = SEQ) -> tuple:
        return decoder_args(self.config, batch, seq, mesh=self.mesh)

    def step_for(self, policy: Any, attention: str = ATTENTION) -> Any:
        """The setup's training step: one function per policy and attention for the whole page.

        JAX then traces what the page's tables and searches share once (a step at a batch
        already compiled, the optimizer's update at every batch): the page's code, run as a
        script with this machine's figures already cached, took 104 s instead of 252 s, with
        the same programs read from the store and the same output.
        """
        return _step(self, policy, attention)


@functools.cache
def _step(setup: Setup, policy: Any, attention: str) -> Any:
    return decoder_step(setup.config, policy, setup.mesh, attention=attention)


SETUPS = (
    Setup("1b-h100", "1b", "h100", 1, 1, 1),
    Setup("1b-v5e", "1b", "tpu-v5e", 1, 1, 1),
    Setup("1b-v5e4", "1b", "tpu-v5e", 4, 4, 1),
    Setup("8b-h100", "8b", "h100", 8, 8, 1),
    Setup("8b-v5p", "8b", "tpu-v5p", 8, 8, 1),
    Setup("70b-h100", "70b", "h100", 64, 8, 8),
)
"""The page's setups: batch one sequence per FSDP group, 4096 tokens each; FSDP over the
devices (8 for the 8B, 4 for the 1B on TPU v5e chips), and for the 70B FSDP over 8 and
tensor parallelism over 8. The 70B has no TPU setup: each of its steps for 64 TPU v5p chips
takes XLA's TPU compiler one to two minutes here, and the page compiles a dozen."""

LONG_SETUPS = ("1b-h100", "8b-h100", "8b-v5p", "70b-h100")
"""The setups compiled at the long context (one TPU setup: each TPU program takes XLA's TPU compiler
one to two minutes here)."""


def budget(setup: Setup) -> int:
    """The memory a step may use on one device: a TPU's usable HBM (at most its published memory); 90% of a GPU's.

    On a TPU chip, what XLA's TPU compiler lets one program use; a GPU's 10% is the margin
    autotuning can add on the device.
    """
    chosen = target(setup.target)
    if chosen.platform == "tpu":
        return min(chosen.memory_bytes, usable_bytes(chosen))
    return chosen.memory_bytes * 9 // 10


# The searches and comparisons below are kept whole in the cache (``REMAT_GUIDE_CACHE_DIR``, with the
# figure store's entries they read): several pages ask for the same setup, and the downloaded
# notebook's rerun in `make test` asks again. Pages get what the cache gives back, computed or not.


def _row_json(row: Any) -> dict[str, Any]:
    """A dataclass row as JSON, without its policy (found again by its name)."""
    return {field.name: getattr(row, field.name) for field in dataclasses.fields(row) if field.name != "policy"}


def _kept_rows(parts: list[Any], compare: Callable[[], Comparison]) -> Comparison:
    """``compare()``, kept in the cache under ``parts``; each row's policy is found again in :data:`POLICIES`."""
    kept = cache.cached("site fit rows", parts, lambda: [_row_json(row) for row in compare()])
    return Comparison(PolicyRow(policy=POLICIES.get(row["name"]), **row) for row in kept)


@functools.cache
def rows(key: str, attention: str = ATTENTION) -> Comparison:
    """The compared policies of one setup, compiled for its target (one sequence per FSDP group)."""
    setup = _setup(key)
    return _kept_rows([key, attention], lambda: compare_policies(
        functools.partial(setup.step_for, attention=attention), *setup.args(setup.multiple),
        step=True, target=setup.target, policies=POLICIES))


@functools.cache
def batches(key: str) -> BatchPlan:
    """:func:`remat_guide.fit.recommend_batch` for the setup: no checkpoint and :data:`SEARCHED`, fused attention."""
    setup = _setup(key)
    policies = {name: POLICIES[name] for name in searched(setup)}

    def search() -> dict[str, Any]:
        plan = recommend_batch(setup.step_for, setup.args, policies=policies, target=setup.target,
                               tokens_per_example=SEQ, budget_bytes=budget(setup), multiple=setup.multiple,
                               limit=64 * setup.multiple)
        return {"rows": [{**_row_json(row), "fit": row.fit and dataclasses.asdict(row.fit)} for row in plan.rows],
                "pick": next((i for i, row in enumerate(plan.rows) if row is plan.pick), None),
                "basis": plan.basis, "global_batch": plan.global_batch}

    kept = cache.cached("site fit batches", [key], search)
    found = tuple(PolicyBatch(**{**row, "policy": policies.get(row["name"]), "fit": _fit_of(row["fit"])})
                  for row in kept["rows"])
    return BatchPlan(found, None if kept["pick"] is None else found[kept["pick"]], kept["basis"], kept["global_batch"])


def _fit_of(kept: dict[str, Any] | None) -> BatchFit | None:
    """A :class:`remat_guide.fit.BatchFit` from its JSON (lists for tuples)."""
    if kept is None:
        return None
    return BatchFit(**{**kept, "compiled": tuple(map(tuple, kept["compiled"])), "refused": tuple(kept["refused"])})


def searched(setup: Setup) -> tuple[str, ...]:
    """The policies whose largest batch the page searches in a setup: :data:`SEARCHED`, or :data:`SEARCHED_TPU`."""
    return SEARCHED_TPU if setup.target.startswith("tpu") else SEARCHED


def _fits(row: Any, setup: Setup) -> str:
    """Whether a program fits the setup's budget: a row of :func:`rows`, or a one-batch :class:`BatchFit`."""
    return "refused" if row.refused else "yes" if row.device_bytes <= budget(setup) else "no"


def summary(key: str, attention: str = ATTENTION) -> pd.DataFrame:
    """One setup's figures at one sequence per FSDP group: per policy, memory per device, fit, time (and of it,
    the collectives' on several devices), host, FLOPs."""
    setup = _setup(key)
    compared = rows(key, attention)
    frame = pd.DataFrame({
        "policy": [row.name for row in compared],
        "memory": [row.device_bytes for row in compared],
        "fits": [_fits(row, setup) for row in compared],
        "est. step": [row.step_seconds for row in compared],
        "collectives": [row.collective_seconds for row in compared],
        "host": [row.host_bytes for row in compared],
        "FLOPs": [row.flops for row in compared],
    })
    return frame if any(row.collective_seconds for row in compared) else frame.drop(columns="collectives")


def answers() -> pd.DataFrame:
    """The page's opening table: per setup, the pick as a policy and a batch, its tokens per second, the batches."""
    lines = []
    for setup in SETUPS:
        found = batches(setup.key)
        picked = found.pick
        lines.append({
            "setup": setup.short,
            "pick": "none fits" if picked is None else f"{picked.name} at {picked.batch}",
            "tokens/s": _rate(picked),
            "largest batch": " / ".join(next((str(row.batch) for row in found.rows if row.name == name), "–")
                                        for name in ("no checkpoint", *SEARCHED)),
        })
    return pd.DataFrame(lines)


def _rate(row: Any) -> str:
    """Tokens per second in thousands (``"52.6 k"``), or why there is no figure."""
    if row is None:
        return "–"
    return "no estimate" if row.tokens_per_second is None else f"{row.tokens_per_second / 1e3:.1f} k"


def long_table() -> pd.DataFrame:
    """At :data:`LONG` tokens, one sequence per FSDP group: memory and fit per setup and policy."""
    lines = []
    for key in LONG_SETUPS:
        frame = memory_only(key, ATTENTION, LONG)
        lines += [{"setup": _setup(key).short, **line} for line in frame.to_dict("records")]
    return pd.DataFrame(lines)


def host_table(name: str) -> pd.DataFrame:
    """What policy ``name`` moves to host memory per device in each setup; ``"refused"`` where refused."""
    lines = []
    for setup in SETUPS:
        row = next(row for row in rows(setup.key) if row.name == name)
        lines.append({"setup": setup.label, "host": "refused" if row.refused else _gib(row.host_bytes)})
    return pd.DataFrame(lines)


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


@functools.cache
def memory_only(key: str, attention: str = PLAIN, seq: int = SEQ) -> pd.DataFrame:
    """:func:`summary`'s ``memory`` and ``fits`` per policy (no checkpoint first), from the target's programs alone.

    Each program is compiled as :func:`remat_guide.fit.largest_batch` compiles it, at one
    sequence per FSDP group only: the same ``device_bytes`` and refusals as
    :func:`remat_guide.compare_policies`, without the FLOPs it counts by compiling each
    program for this machine too (the tables of memory and fit need none). At another
    ``seq`` than :data:`SEQ`, the policies are :data:`LONG_POLICIES`.
    """
    setup = _setup(key)
    step_for = functools.partial(setup.step_for, attention=attention)
    policies = POLICIES if seq == SEQ else {name: POLICIES[name] for name in LONG_POLICIES}
    lines = []
    for name, policy in {"no checkpoint": None, **policies}.items():
        found = largest_batch(step_for, lambda batch: setup.args(batch, seq), policy=policy, target=setup.target,
                              budget_bytes=budget(setup), multiple=setup.multiple, limit=setup.multiple, step=True)
        lines.append({"policy": name, "memory": found.device_bytes, "fits": _fits(found, setup)})
    return pd.DataFrame(lines)


def contrast() -> pd.DataFrame:
    """Per setup, what the fused kernel changes: no checkpoint's memory and how many programs fit, each attention."""
    lines = []
    for setup in SETUPS:
        line = {"setup": setup.short}
        for attention, label in ((ATTENTION, "fused"), (PLAIN, "plain")):
            frame = summary(setup.key) if attention == ATTENTION else memory_only(setup.key, attention)
            line[f"no checkpoint, {label}"] = frame["memory"].iloc[0]
            line[f"fit, {label}"] = f"{(frame['fits'] == 'yes').sum()}/{len(frame)}"
        lines.append(line)
    return pd.DataFrame(lines)


def recommended(key: str, attention: str = ATTENTION) -> Any:
    """What :func:`remat_guide.recommend_policy` picks from the setup's rows at its budget (``None``: none fits)."""
    setup = _setup(key)
    try:
        return recommend_policy(rows=rows(key, attention), budget_bytes=budget(setup))
    except ValueError:
        return None


PLANNED = ("context", "out_proj", "mlpwi_0", "mlpwi_1")
"""The names :func:`plan` gives an answer for: the attention's output before and after its
projection, and the MLP's two inputs, the largest values of a block."""


@functools.cache
def plan(key: str) -> Any:
    """:func:`remat_guide.plan_names` at the setup's budget, for :data:`PLANNED` (keep, offload or recompute)."""
    setup = _setup(key)
    return plan_names(setup.step_for, *setup.args(setup.multiple), budget_bytes=budget(setup), names=PLANNED,
                      target=setup.target, step=True)


def breakdown(key: str, name: str) -> pd.DataFrame:
    """Where one policy's memory goes in one setup (see :func:`remat_guide.fit.step_memory`), as a table.

    The residuals are those of the loss with the blockwise stand-in of the fused kernel
    (``"fused"`` would list those of every kernel it may lower to). A residual that a
    policy keeps as a matmul's output, not by its name, is listed by the line of
    ``remat_guide.models`` that computes it; here it is named by the ``checkpoint_name``
    tag on that line, or as the block's input. The float32 logits
    are singled out of the rest of the temporary memory unless a residual holds them.
    """
    setup = _setup(key)
    row = next(row for row in rows(key) if row.name == name)
    params, opt_state, batch = setup.args(setup.multiple)
    tokens = setup.multiple // setup.fsdp * SEQ  # per device: one sequence per FSDP group
    logits = "logits (float32)"
    # The kernels lower only for their accelerator, and the residuals' shardings are read from a
    # CPU program: the stand-in, which keeps what they keep, lists the residuals.
    frame = step_memory(row, decoder_loss(setup.config, row.policy, setup.mesh, "blockwise"), params, opt_state,
                        batch,
                        also={logits: tokens * setup.config.vocab * 4 // setup.tensor}).to_pandas()
    frame["part"] = [_named(part) for part in frame["part"]]
    if "residual logits" in set(frame["part"]):  # the policy keeps them: listed already, not part of the rest
        rest = frame["part"].str.startswith("rest of temp")
        frame.loc[rest, "bytes"] += frame.loc[frame["part"] == logits, "bytes"].sum()
        frame = frame[frame["part"] != logits].reset_index(drop=True)
    return frame


@functools.cache
def _tags_by_line() -> dict[str, str]:
    """Each line of ``remat_guide.models`` that starts a ``checkpoint_name`` call (``models.py:N``), with its tag."""
    import inspect
    import re

    from remat_guide import models

    lines, _ = inspect.getsourcelines(models)
    found = {}
    for index, line in enumerate(lines):
        if "checkpoint_name(" in line:
            statement = line + (lines[index + 1] if index + 1 < len(lines) else "")
            tag = re.search(r'"(\w+)"\)', statement[statement.index("checkpoint_name("):])
            if tag:
                found[f"models.py:{index + 1}"] = tag.group(1)
    return found


def _named(part: str) -> str:
    """A residual part named by what it is: a matmul's output by its tag, the sharding constraint as a block's input."""
    if not part.startswith("residual ") or " at " not in part:
        return part
    primitive, where = part[len("residual "):].rsplit(" at ", 1)
    if primitive == "sharding_constraint":
        return "residual: each block's input"
    tag = _tags_by_line().get(where) if primitive == "dot_general" else None
    return part if tag is None else f"residual {tag}"


def _setup(key: str) -> Setup:
    return next(setup for setup in SETUPS if setup.key == key)


MEASURED = {"time": hardware.FOLDER / "h200-2026-11-27-llama1b-timed.json",
            "memory": hardware.FOLDER / "h200-2026-11-27-llama1b-noat.json"}
"""The Llama 3.2 1B training steps measured on an H200 (see ``docs/_hardware/README.md``)."""


MEASURED_POLICIES = ("full", "minimal", "save_qkv_proj", "qkv_proj_offloaded")
"""The policies whose 1B step the H200 ran (its no-checkpoint step did not run)."""


@functools.cache
def _h200_rows() -> Comparison:
    config = LLAMA3["1b"]
    return _kept_rows(["h200", "1b"], lambda: compare_policies(
        functools.partial(decoder_step, config), *decoder_args(config, 1, SEQ), step=True, target="h200",
        policies={name: POLICIES[name] for name in MEASURED_POLICIES}))


def h200_software() -> str:
    """The JAX that ran the H200's measurements, as its files record it (``jax 0.11.2, ...``)."""
    found = {hardware.measurement(path)["software"] for path in MEASURED.values()}
    if len(found) != 1:
        raise ValueError(f"the H200's measurements ran on different software: {sorted(found)}")
    return found.pop().split(",")[0].replace("jax", "JAX")


def h200_none_bytes() -> int:
    """What the package plans for the 1B's step without a checkpoint on an H200 (``device_bytes``)."""
    return _h200_rows()[0].device_bytes


def h200_check() -> pd.DataFrame:
    """The package's figures for the 1B step on ``target="h200"`` beside what a real H200 measured.

    Memory: ``device_bytes`` against the allocator's peak over one run compiled without
    autotuning (arguments included). Time: the estimate against the median measured step
    (autotuning on), each also as a ratio to ``full``.
    """
    measured = {kind: {r["policy"]: r for r in hardware.measurement(path)["rows"]}
                for kind, path in MEASURED.items()}
    names = [name for name in MEASURED_POLICIES if name in measured["time"]]
    by_name = {row.name: row for row in _h200_rows()}
    frame = pd.DataFrame({
        "policy": names,
        "predicted memory": [by_name[n].device_bytes for n in names],
        "H200 peak": [measured["memory"][n]["peak_after_run"] for n in names],
        "est. step": [by_name[n].step_seconds for n in names],
        "H200 step": [measured["time"][n]["step_ms_median"] / 1e3 for n in names],
    })
    frame["est. vs full"] = frame["est. step"] / frame["est. step"][0]
    frame["H200 vs full"] = frame["H200 step"] / frame["H200 step"][0]
    return frame
