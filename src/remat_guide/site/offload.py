"""The "Host offloading in practice" page: host transfers in compiled HLO, and what an H200 measured of them."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from remat_guide.site import hardware

__all__ = ["HOST_SPACE", "MEASURED_PAIRS", "host_transfers", "link_seconds", "measured_pairs", "provenance"]

HOST_SPACE = "S(5)"
"""How a compiled program's HLO text marks a buffer in host memory (XLA's memory space 5), in its layout."""

_HEADER = re.compile(r"^(?:ENTRY )?%(\S+) .*\{$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][\w-]*)\((.*)$")
_CALLS = re.compile(r"calls=%wrapped_([\w-]+?)_computation")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_KERNELS = ("fusion", "custom-call", "convolution", "dot")


def host_transfers(text: str) -> pd.DataFrame:
    """Each asynchronous transfer to or from host memory in a compiled program's HLO text, in schedule order.

    A transfer is an instruction whose opcode ends in ``-start`` and whose shape holds a
    buffer in host memory (:data:`HOST_SPACE`), paired with the ``-done`` that waits
    for it in the same computation. XLA prints a scheduled module's instructions in the
    order they run, so what lies between the two lines is what the schedule places while
    the transfer is in flight.

    Args:
        text: ``compiled.as_text()`` of a scheduled module.

    Returns:
        One row per transfer: ``pass`` (``"forward"``, or ``"backward"`` when JAX's
        ``op_name`` says ``transpose``), ``start`` (the start's opcode), ``operation``
        (what it does: the opcode without ``-start``, or the computation a
        ``fusion-start`` wraps), ``direction`` (``"to host"`` when the ``-done`` is in
        host memory, else ``"from host"``), ``kernels_between`` (fusions, custom
        calls, dots and convolutions scheduled between the start and its done) and
        ``in_loop_body`` (whether JAX's ``op_name`` places it in a ``while`` body).

    Raises:
        TypeError: If ``text`` is not a str.
        ValueError: If a start has no done in its computation.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be the str of compiled.as_text(), got {type(text).__name__}")
    rows = []
    computation: list[tuple[str, str, str, str]] = []
    for line in [*text.splitlines(), "}"]:
        if _HEADER.match(line):
            computation = []
        elif line.startswith("}"):
            rows += _transfers_in(computation)
            computation = []
        else:
            found = _INSTRUCTION.match(line)
            if found:
                computation.append(found.groups())
    return pd.DataFrame(rows, columns=["pass", "start", "operation", "direction", "kernels_between",
                                       "in_loop_body"])


def _transfers_in(instructions: list[tuple[str, str, str, str]]) -> list[dict[str, Any]]:
    rows = []
    for at, (name, shape, opcode, rest) in enumerate(instructions):
        if not opcode.endswith("-start") or HOST_SPACE not in shape:
            continue
        done = next((i for i in range(at + 1, len(instructions))
                     if instructions[i][2].endswith("-done") and re.match(rf"%{re.escape(name)}[),\s]",
                                                                           instructions[i][3])), None)
        if done is None:
            raise ValueError(f"text: the transfer {name} has no done in its computation")
        wrapped = _CALLS.search(rest)
        op_name = _OP_NAME.search(rest) or _OP_NAME.search(instructions[done][3])
        rows.append({
            "pass": "backward" if op_name and "transpose(" in op_name.group(1) else "forward",
            "start": opcode,
            "operation": wrapped.group(1) if wrapped else opcode.removesuffix("-start"),
            "direction": "to host" if HOST_SPACE in instructions[done][1] else "from host",
            "kernels_between": sum(op in _KERNELS for _, _, op, _ in instructions[at + 1:done]),
            "in_loop_body": bool(op_name) and "/while/body/" in op_name.group(1)})
    return rows


MEASURED_PAIRS = (
    ("page", "dots_with_no_batch_dims_saveable", "offload_dot_with_no_batch_dims", hardware.TIMED),
    ("large", "dots_with_no_batch_dims_saveable", "offload_dot_with_no_batch_dims", hardware.TIMED),
    ("large_bf16", "dots_with_no_batch_dims_saveable", "offload_dot_with_no_batch_dims", hardware.TIMED),
    ("xl_bf16", "dots_with_no_batch_dims_saveable", "offload_dot_with_no_batch_dims", hardware.TIMED),
    ("llama1b", "save_qkv_proj", "qkv_proj_offloaded",
     hardware.TIMED.with_name("h200-2026-11-27-llama1b-timed.json")),
)
"""The measured programs that keep the same values, once on the device and once offloaded to the host.

Each entry: the size, the policy that keeps the values in device memory, the policy that
offloads the same values to ``pinned_host``, and the file of ``docs/_hardware/`` that
timed both (the ``time`` mode).
"""


def link_seconds(host_bytes: int, found: dict[str, Any]) -> float:
    """The time ``host_bytes`` take out to the host and back at the best rates a measurement's host link moved 1 GiB."""
    link = found["host_link"]["1024MiB"]
    return host_bytes / (link["d2h_GBps"] * 1e9) + host_bytes / (link["h2d_GBps"] * 1e9)


def measured_pairs() -> pd.DataFrame:
    """Each pair of :data:`MEASURED_PAIRS` as the H200 measured it.

    Returns:
        One row per pair: ``config``, ``kept`` and ``offloaded`` (the policies),
        ``host_bytes`` (the offloading program's ``host_temp_size_in_bytes``),
        ``kept_peak`` and ``offloaded_peak`` (the allocator's peak over the timed run,
        arguments included), ``kept_seconds`` and ``offloaded_seconds`` (median step
        times), ``link_seconds`` (:func:`link_seconds` of the host bytes, with the same
        file's link), ``software`` (the file's JAX and plugin versions) and ``file``
        (the file's name).
    """
    rows = []
    for config, kept, offloaded, path in MEASURED_PAIRS:
        found = hardware.measurement(path)
        timed = {r["policy"]: r for r in found["rows"] if r["cfg"] == config and r["mode"] == "time"}
        on_device, on_host = timed[kept], timed[offloaded]
        rows.append({
            "config": config, "kept": kept, "offloaded": offloaded,
            "host_bytes": on_host["host_temp_size_in_bytes"],
            "kept_peak": on_device["peak_after_run"], "offloaded_peak": on_host["peak_after_run"],
            "kept_seconds": on_device["step_ms_median"] / 1e3,
            "offloaded_seconds": on_host["step_ms_median"] / 1e3,
            "link_seconds": link_seconds(on_host["host_temp_size_in_bytes"], found),
            "software": found["software"], "file": path.name})
    return pd.DataFrame(rows)


def provenance(path: Any = hardware.TIMED) -> str:
    """One measurement file's device, software and date, in words."""
    found = hardware.measurement(path)
    return f"{found['device']}, {found['software']}, measured on {found['measured_on']}"
