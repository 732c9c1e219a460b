"""An NVIDIA H200's measured memory and step times beside the package's figures for ``target="h200"``."""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import pandas as pd

from remat_guide import models
from remat_guide.site.stored import compile_ahead
from remat_guide.targets import device_bytes, estimate_step, kernel_rates, place

__all__ = ["FOLDER", "MEASUREMENT", "POLICIES", "TIMED", "autotuning_growth", "comparison", "host_link", "measurement"]

FOLDER = pathlib.Path(__file__).resolve().parents[3] / "docs" / "_hardware"
"""The measurements taken on real hardware, with their provenance (``docs/_hardware``)."""
MEASUREMENT = FOLDER / "h200-2026-11-27.json"
"""The first measurement (memory of every program, step times of the largest size); see the folder's README."""
TIMED = FOLDER / "h200-2026-11-27-timed.json"
"""A second run on an H200, by ``benchmarks/check_on_hardware.py``: step times of every size."""

POLICIES = models.MEASURED_POLICIES
"""The measured policies, by the names the measurement uses (see :func:`remat_guide.models.measured_policy`)."""


@functools.cache
def measurement(path: pathlib.Path = MEASUREMENT) -> dict[str, Any]:
    """The measurement file, as JSON."""
    return json.loads(path.read_text(encoding="utf-8"))


def _row(found: dict[str, Any], config: str, name: str, mode: str) -> dict[str, Any] | None:
    """The measured row of one program in one mode, if the file has it."""
    return next((r for r in found["rows"] if (r["cfg"], r["policy"], r["mode"]) == (config, name, mode)), None)


@functools.cache  # comparison() reads each program once per process, whichever file its times come from
def _compiled(config: str, name: str) -> Any:
    sizes = dict(measurement()["configs"][config])
    dtype = jnp.dtype(sizes.pop("dtype"))
    params, x = models.transformer_args(**sizes)
    params = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, dtype), params)
    x = jax.ShapeDtypeStruct(x.shape, dtype)
    gradient = jax.jit(jax.grad(models.transformer_loss(models.measured_policy(name))))
    lowered = gradient.lower(*place((params, x), "h200"))
    return compile_ahead(lowered, "h200", {"xla_gpu_autotune_level": 0})


def comparison(configs: tuple[str, ...] | None = None, timing: pathlib.Path = MEASUREMENT) -> pd.DataFrame:
    """Each measured program: the package's memory and time for ``target="h200"`` beside the H200's.

    Memory is the package's ``device_bytes`` (arguments + outputs + temp, compiled ahead
    of time, autotuning off) against the allocator's peak over one run compiled on the
    device with autotuning off (``run_noat``), with XLA's ``peak_memory_in_bytes`` beside
    them. Time is the estimated step time against the median measured one (autotuning
    on, as users run), each also as a ratio to no checkpoint of the same size. Memory
    comes from :data:`MEASUREMENT`, step times from ``timing`` (:data:`MEASUREMENT` or
    :data:`TIMED`).

    Returns:
        One row per size and policy: ``config``, ``policy``, ``device_bytes``,
        ``matmul_flops`` (of the program compiled for the H200, loops counted in full),
        ``peak_bytes`` (XLA's, ahead of time), ``measured_peak``, ``memory_ratio``
        (``device_bytes / measured_peak``), ``estimated_seconds``, ``measured_seconds``
        (``NaN`` where no time was measured), ``estimated_ratio``, ``measured_ratio``,
        ``overlapped_seconds`` (host transfers overlapped as the schedule allows), the
        estimate's parts ``compute_seconds``, ``memory_seconds``, ``transfer_seconds``, and
        ``roofline_seconds``: the plain roofline's estimate (``kernel_rates(plain=True)``).
    """
    found, timed_file = measurement(), measurement(timing)
    rows = []
    for config in configs or tuple(found["configs"]):
        for name in POLICIES:
            compiled = _compiled(config, name)
            memory = compiled.memory_analysis()
            estimate = estimate_step(compiled.kernels, "h200")
            peak = _row(found, config, name, "run_noat")
            timed = _row(timed_file, config, name, "time")
            rows.append({
                "config": config, "policy": name, "device_bytes": device_bytes(memory, "h200"),
                "matmul_flops": compiled.matmul_flops,
                "peak_bytes": memory.peak_memory_in_bytes,
                "measured_peak": None if peak is None else peak["peak_after_run"],
                "estimated_seconds": estimate.seconds, "overlapped_seconds": estimate.overlapped_seconds,
                "measured_seconds": None if timed is None else timed["step_ms_median"] / 1e3,
                "compute_seconds": estimate.compute_seconds, "memory_seconds": estimate.memory_seconds,
                "transfer_seconds": estimate.transfer_seconds,
                "roofline_seconds": estimate_step(compiled.kernels, "h200", kernel_rates("h200", plain=True)).seconds})
    frame = pd.DataFrame(rows)
    frame["memory_ratio"] = frame["device_bytes"] / frame["measured_peak"]
    for column, ratio in (("estimated_seconds", "estimated_ratio"), ("measured_seconds", "measured_ratio")):
        base = frame[frame["policy"] == "none"].set_index("config")[column]
        frame[ratio] = frame[column] / frame["config"].map(base)
    return frame


def host_link() -> dict[str, float]:
    """The host link the H200 measured with ``jax.device_put`` of 1 GiB: best GB/s each way."""
    link = measurement()["host_link"]["1024MiB"]
    return {"device_to_host": link["d2h_GBps"], "host_to_device": link["h2d_GBps"]}


def autotuning_growth(whole: bool = False) -> float:
    """The most that XLA's default autotuning added to a measured program's memory, as a share.

    Each program compiled on the H200 with autotuning (``run`` or ``time``) against the
    same program compiled there without it (``run_noat``): its temporary memory, or with
    ``whole`` its arguments + outputs + temporary memory.
    """

    def size(row: dict[str, Any]) -> int:
        if not whole:
            return row["temp_size_in_bytes"]
        return (row["argument_size_in_bytes"] + row["output_size_in_bytes"] + row["temp_size_in_bytes"]
                - row["alias_size_in_bytes"])

    found = measurement()["rows"]
    without = {(r["cfg"], r["policy"]): size(r) for r in found if r["mode"] == "run_noat"}
    return max(size(r) / without[r["cfg"], r["policy"]] - 1 for r in found
               if r["mode"] in ("run", "time") and (r["cfg"], r["policy"]) in without)
