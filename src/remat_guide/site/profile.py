"""An H200's profiled kernels, single-kernel timings and 70B-width steps beside the package's estimates."""

from __future__ import annotations

import functools
import gzip
import json
import tarfile
from typing import Any

import pandas as pd

from remat_guide import _matmul_table as matmul_table
from remat_guide.site.hardware import FOLDER
from remat_guide.targets import kernel_rates, kernel_times, target

__all__ = ["FILES", "STAGES", "hlo", "kernel_comparison", "kernel_summary", "launch", "matmuls", "memory", "run",
           "steps"]

FILES = {
    "profile": "h200-2026-11-30-profile",
    "wide-offload": "h200-2026-11-30-wide-offload",
    "retime": "h200-2026-11-30-retime",
    "kernels": "h200-2026-11-30-kernels",
    "random": "h200-2026-11-30-random",
}
"""The runs of ``benchmarks/profile_on_gpu.py`` on an H200 (``docs/_hardware``): each a JSON and its programs' HLO.

``profile``: every stage (single kernels; the 8-layer and Llama 1B programs; 4 layers at
the 70B width); ``wide-offload``: the 70B width again, with ``save_qkv_proj`` and
``qkv_proj_offloaded``; ``retime``: the 8-layer float32 ``offload_dot_with_no_batch_dims``
and ``none`` timed again; ``kernels``: six programs with XLA's command buffers off, so
that every kernel's profiler event names its HLO instruction; ``random``: the single
kernels again with the matrices on random data, and the 0.8 B model profiled as
``kernels`` was.
"""

STAGES = {"large": "8 layers, f32", "large_bf16": "8 layers, bf16", "xl_bf16": "0.8 B, bf16",
          "llama1b": "Llama 3.2 1B step", "wide": "70B width, 4 layers"}
"""Each profiled stage in words."""


@functools.cache
def run(name: str) -> dict[str, Any]:
    """One run's JSON (see :data:`FILES`)."""
    return json.loads((FOLDER / f"{FILES[name]}.json").read_text(encoding="utf-8"))


@functools.cache
def hlo(name: str, stage: str, policy: str) -> str:
    """The optimized HLO of one program as the device compiled it (``compiled.as_text()``)."""
    with tarfile.open(FOLDER / f"{FILES[name]}-hlo.tar.gz") as archive:
        member = archive.extractfile(f"{stage}-{policy}.hlo.gz")
        return gzip.decompress(member.read()).decode("utf-8")


def _record(name: str, stage: str, policy: str) -> dict[str, Any]:
    return next(r for r in run(name)["programs"] if (r["stage"], r["policy"]) == (stage, policy))


def steps(names: tuple[str, ...] = ("profile", "wide-offload", "retime")) -> pd.DataFrame:
    """Every timed program of the runs ``names``: its median step and run, one row each."""
    rows = [{"run": name, "stage": r["stage"], "policy": r["policy"], "attention": r.get("attention", "xla"),
             "step": r["step_ms_median"] / 1e3, "steps": len(r["step_ms"]),
             "host_bytes": r.get("host_temp_size_in_bytes") or 0,
             "copy_streams": sum(1 for line in r["profile"]["lines"] if line.startswith("Stream")
                                 and "Compute" not in line)}
            for name in names for r in run(name)["programs"] if "step_ms_median" in r]
    return pd.DataFrame(rows)


def _async_slice(name: str) -> bool:
    """A kernel that slices a scan's stacked residuals, or writes a slice into them, on its own stream."""
    return name.startswith("fusion-start") or "dynamic_slice_fusion" in name or "dynamic_update_slice" in name


@functools.cache
def _estimated(name: str, stage: str, policy: str, device: str) -> tuple[Any, ...]:
    """The kernels of one profiled program as :func:`remat_guide.targets.kernel_times` estimates them."""
    return tuple(kernel_times(hlo(name, stage, policy), target(device)))


def kernel_comparison(stage: str, policy: str, name: str = "kernels", device: str = "h200") -> pd.DataFrame:
    """Each kernel of a profiled program: its share of the estimate beside its measured time per step.

    The estimate is :func:`remat_guide.targets.kernel_times` of the program the device
    compiled (its HLO came back with the profile), joined to the profile's device time
    by instruction name. The scan's asynchronous slices, which the profile names after
    the fusion they run rather than the instruction that starts them, are one row.

    Returns:
        ``kernel``, ``count`` (runs per step), ``bound`` (``"matmul"`` or ``"memory"``:
        the longer part of its estimate), ``estimated`` and ``measured`` (seconds per step),
        ``bytes`` and ``strided`` (its device-memory bytes per step, and what its reads
        across a transpose move beyond them: :class:`remat_guide.targets.KernelTime`), and
        ``by_bytes``: its estimate without ``strided``, its bytes alone at the memory rate.
    """
    measured = {op: entry[0] / 1e6 for op, entry in _record(name, stage, policy)["profile"]["ops"].items()}
    rates = kernel_rates(target(device))

    def by_bytes(kernel: Any) -> float:
        return kernel.count * rates.combined(kernel.matmul_seconds / kernel.count,
                                             kernel.device_bytes / kernel.count / rates.memory_bandwidth)

    rows, sliced = [], []
    for kernel in _estimated(name, stage, policy, device):
        if _async_slice(kernel.name) and kernel.name not in measured:
            sliced.append(kernel)
            continue
        rows.append({"kernel": kernel.name, "count": kernel.count,
                     "bound": "matmul" if kernel.matmul_seconds > kernel.memory_seconds else "memory",
                     "estimated": kernel.seconds, "measured": measured.pop(kernel.name, 0.0),
                     "bytes": kernel.device_bytes, "strided": kernel.strided_bytes,
                     "by_bytes": by_bytes(kernel)})
    if sliced:
        rows.append({"kernel": "asynchronous slices of the stacked residuals",
                     "count": sum(kernel.count for kernel in sliced), "bound": "memory",
                     "estimated": sum(kernel.seconds for kernel in sliced),
                     "measured": sum(measured.pop(op) for op in list(measured) if _async_slice(op)),
                     "bytes": sum(kernel.device_bytes for kernel in sliced), "strided": 0,
                     "by_bytes": sum(by_bytes(kernel) for kernel in sliced)})
    if measured:
        rows.append({"kernel": "measured kernels the estimate has none of", "count": 0, "bound": "memory",
                     "estimated": 0.0, "measured": sum(measured.values()), "bytes": 0, "strided": 0,
                     "by_bytes": 0.0})
    return pd.DataFrame(rows)


def kernel_summary(programs: tuple[tuple[str, str, str], ...]) -> pd.DataFrame:
    """For each profiled ``(stage, policy, run)``: the step, the measured and estimated kernel time, by kind."""
    rows = []
    for stage, policy, name in programs:
        frame = kernel_comparison(stage, policy, name)
        record = _record(name, stage, policy)
        row = {"program": f"{STAGES[stage]}, {policy}", "step": record["step_ms_median"] / 1e3,
               "kernels measured": frame.measured.sum(), "kernels estimated": frame.estimated.sum()}
        for bound in ("matmul", "memory"):
            part = frame[frame.bound == bound]
            row[f"{bound} measured"] = part.measured.sum()
            row[f"{bound} estimated"] = part.estimated.sum()
        rows.append(row)
    return pd.DataFrame(rows)


def memory(device: str = "h200") -> pd.DataFrame:
    """The single elementwise kernel over each size: bytes read and written, its measured time, and the rate."""
    found = run("profile")["micro"]
    peak = target(device).hardware.memory_bandwidth
    rows = []
    for label, entry in found.items():
        if label.startswith("copy_"):
            moved = 2 * int(label.split("_")[1])  # a float32 array read once and written once
            seconds = entry["kernel_ms"] / 1e3
            rows.append({"bytes": moved, "measured": seconds, "rate": moved / seconds,
                         "share of peak": moved / seconds / peak})
    return pd.DataFrame(rows)


def matmuls(name: str = "random", device: str = "h200") -> pd.DataFrame:
    """Each single matmul timed in run ``name``: its shape, measured FLOP/s, and XLA's H100 table's rate for it."""
    found = run(name)["micro"]
    scale = target(device).hardware.matmul_flops["bf16"] / target("h100").hardware.matmul_flops["bf16"]
    rows = []
    for label, entry in found.items():
        if not label.startswith("dot_"):
            continue
        _, dtype, shape = label.split("_")
        b, m, n, k = map(int, shape.split("x"))
        kind = "bf16" if dtype == "bfloat16" else "f32"
        rate = 2 * b * m * n * k / (entry["kernel_ms"] / 1e3)
        table = matmul_table.dot_rate("sm_90", b, m, n, k, kind)
        rows.append({"dtype": kind, "b": b, "m": m, "n": n, "k": k, "measured": rate,
                     "table": None if table is None else table * scale})
    return pd.DataFrame(rows)


def launch() -> dict[str, float]:
    """The chain of 64 tiny kernels: its span on the device and its kernels' own time, per kernel (seconds)."""
    entry = run("profile")["micro"]["launch_chain_64"]
    return {"span": entry["span_ms"] / 1e3 / 64, "kernel": entry["kernel_ms"] / 1e3 / 64, "kernels": entry["kernels"]}
