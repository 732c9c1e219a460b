"""The device-memory page's program (a small AdamW step), its donation figures and the H200's measured peaks."""

from __future__ import annotations

import functools
import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import pandas as pd

from remat_guide import compare_policies
from remat_guide.site import hardware

__all__ = ["H200_FILES", "MEMORY_FIELDS", "PAGE_SIZES", "autotune_scratch", "donation", "h200_peaks",
           "llama_state_bytes", "mlp_program", "probe", "probe_files", "probe_limits", "provenance"]

"""The folder of real measurements (see its README)."""

PAGE_SIZES = {"width": 1024, "depth": 4, "batch": 256}
"""The page's MLP: 4 float32 layers of 1024 x 1024, a batch of 256 rows."""

MEMORY_FIELDS = {"argument_size_in_bytes": "arguments", "output_size_in_bytes": "outputs",
                 "alias_size_in_bytes": "aliased", "temp_size_in_bytes": "temp"}
"""``memory_analysis()`` fields, by the names the page's tables give them."""


def mlp_program(width: int, depth: int, batch: int, learning_rate: float = 1e-3) -> tuple[Any, tuple[Any, ...]]:
    """``(step_for, args)``: an AdamW step of a tanh MLP for ``compare_policies(..., step=True)``.

    The same program as ``benchmarks/device_probe.py``'s ``mlp_step`` (``step_for(None)``),
    with abstract ``(params, opt_state, x, y)``.
    """
    import optax  # the [train] extra, imported where used as in remat_guide.models

    params = [{"w": jax.ShapeDtypeStruct((width, width), jnp.float32),
               "b": jax.ShapeDtypeStruct((width,), jnp.float32)} for _ in range(depth)]
    optimizer = optax.adamw(learning_rate)
    opt_state = jax.eval_shape(optimizer.init, params)
    x = jax.ShapeDtypeStruct((batch, width), jnp.float32)

    def step_for(policy: Any) -> Any:
        def loss(params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
            for layer in params:
                x = jnp.tanh(x @ layer["w"] + layer["b"])
            return jnp.mean((x - y) ** 2)

        if policy is not None:
            loss = jax.checkpoint(loss, policy=policy)

        def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any, jax.Array]:
            value, grads = jax.value_and_grad(loss)(params, x, y)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, value

        return step

    return step_for, (params, opt_state, x, x)


@functools.cache
def donation(target: str | None = None) -> pd.DataFrame:
    """The page's step compiled with ``donate_argnums=()`` and ``(0, 1)``: ``memory_analysis()`` and ``device_bytes``.

    One column per donation (``"none"``, ``"(0, 1)"``), one row per figure.
    """
    step_for, args = mlp_program(**PAGE_SIZES)
    columns = {}
    for label, donate in (("none", ()), ("(0, 1)", (0, 1))):
        row = compare_policies(step_for, *args, step=True, donate_argnums=donate, target=target,
                               policies=[])[0]
        columns[label] = [row.argument_bytes, row.output_bytes, row.alias_bytes, row.temp_bytes,
                          row.argument_bytes + row.output_bytes + row.temp_bytes - row.alias_bytes]
    return pd.DataFrame(columns, index=[*MEMORY_FIELDS.values(), "args + out + temp - alias"])


def _predicted(row: dict[str, Any]) -> int:
    return (row["argument_size_in_bytes"] + row["output_size_in_bytes"] + row["temp_size_in_bytes"]
            - row["alias_size_in_bytes"])


H200_FILES = ("h200-2026-11-27.json", "h200-2026-11-27-llama1b-noat.json")
"""The H200 files whose programs were compiled on the device without autotuning (``run_noat``)."""


def h200_peaks(mode: str = "run_noat") -> pd.DataFrame:
    """Every H200 program of one mode: the compiler's figures of the on-device compile beside the allocator's peak.

    Columns: ``program`` (size / policy), ``predicted`` (arguments + outputs + temp -
    alias), ``others`` (what else the process held: ``bytes_in_use`` with the arguments
    resident, less the arguments), ``peak`` (the allocator's ``peak_bytes_in_use`` after
    the run), ``xla_peak`` (``peak_memory_in_bytes``), ``gap`` (``peak - predicted -
    others``), ``compile_peak`` (``peak_bytes_in_use`` after compiling).
    """
    rows = []
    for name in H200_FILES:
        for row in hardware.measurement(hardware.FOLDER / name)["rows"]:
            if row["mode"] != mode:
                continue
            predicted = _predicted(row)
            others = row["in_use_args"] - row["argument_size_in_bytes"]
            rows.append({"program": f"{row['cfg']} / {row['policy']}", "predicted": predicted, "others": others,
                         "peak": row["peak_after_run"], "xla_peak": row["peak_memory_in_bytes"],
                         "gap": row["peak_after_run"] - predicted - others,
                         "compile_peak": row["peak_after_compile"], "in_use_args": row["in_use_args"]})
    return pd.DataFrame(rows)


def llama_state_bytes() -> int:
    """The measured 1B Llama step's arguments (``argument_size_in_bytes``), the same in every row."""
    found = {row["argument_size_in_bytes"] for row in hardware.measurement(hardware.FOLDER / H200_FILES[1])["rows"]}
    if len(found) != 1:
        raise ValueError(f"the 1B step's rows have different arguments: {sorted(found)}")
    return found.pop()


def autotune_scratch() -> pd.DataFrame:
    """Programs compiled on the H200 with autotuning on: the allocator's peak while compiling, above the arguments.

    Columns: ``file``, ``program``, ``mode``, ``in_use_args`` (``bytes_in_use`` with the
    arguments resident), ``compile_peak`` (``peak_bytes_in_use`` after compiling),
    ``scratch`` (their difference) and ``run_peak`` (after the run).
    """
    rows = []
    for path in sorted(hardware.FOLDER.glob("h200-*.json")):
        # Only benchmarks/check_on_hardware.py's files: their rows name a mode.
        for row in hardware.measurement(path).get("rows", []):
            if row.get("mode") in ("run", "time") and "peak_after_compile" in row:
                rows.append({"file": path.name, "program": f"{row['cfg']} / {row['policy']}", "mode": row["mode"],
                             "in_use_args": row["in_use_args"], "compile_peak": row["peak_after_compile"],
                             "scratch": row["peak_after_compile"] - row["in_use_args"],
                             "run_peak": row["peak_after_run"]})
    return pd.DataFrame(rows)


def provenance(name: str) -> dict[str, str]:
    """A measurement file's device, software, method and date, as it records them."""
    found = hardware.measurement(hardware.FOLDER / name)
    software = found["software"]
    if isinstance(software, dict):
        software = ", ".join(f"{key} {value}" for key, value in software.items())
    return {"device": found.get("device") or found["device_kind"], "software": software,
            "method": found["method"], "date": found["measured_on"]}


def probe_files(folder: pathlib.Path = hardware.FOLDER) -> list[pathlib.Path]:
    """The ``benchmarks/device_probe.py`` results in ``folder`` (``*-probe.json``), oldest first."""
    return sorted(folder.glob("*-probe.json"))


def probe(path: pathlib.Path) -> pd.DataFrame:
    """One ``benchmarks/device_probe.py`` result: per step variant, the compiler's prediction and the real peak.

    Columns: ``donate`` (``"none"`` or ``"(0, 1)"``), ``autotune`` (``True``, ``False``
    or ``None`` off a GPU), the ``memory_analysis()`` fields by the page's names
    (``arguments``, ``outputs``, ``aliased``, ``temp``), ``predicted`` (arguments +
    outputs + temp - aliased), ``others`` (``bytes_in_use`` with the arguments resident,
    less the arguments), ``peak`` (``peak_bytes_in_use`` after the steps; ``None`` where
    ``memory_stats()`` is), ``compile_peak`` and ``error`` (a failed variant's last line).

    Raises:
        ValueError: If the file is not a probe result (no ``rows``).
    """
    found = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    if "rows" not in found or "limits" not in found:
        raise ValueError(f"path: {path} is not a device_probe.py result (it has no rows and limits)")
    rows = []
    for row in found["rows"]:
        donated = row.get("donate_argnums") or []
        record: dict[str, Any] = {"donate": "none" if not donated else str(tuple(donated)),
                                  "autotune": row.get("autotune"), "error": row.get("error")}
        if record["error"] is None:
            record.update({label: row[field] for field, label in MEMORY_FIELDS.items()})
            record["predicted"] = _predicted(row)
            in_use = row.get("in_use_args")
            record["others"] = None if in_use is None else in_use - row["argument_size_in_bytes"]
            record["peak"] = row.get("peak_after_steps")
            record["compile_peak"] = row.get("peak_after_compile")
        rows.append(record)
    return pd.DataFrame(rows)


def probe_limits(path: pathlib.Path) -> pd.DataFrame:
    """A probe result's allocator limits: per setting, ``bytes_limit`` and ``bytes_in_use`` (``None`` off a GPU)."""
    found = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    rows = []
    for setting, result in found["limits"].items():
        stats = result.get("stats") or {}
        rows.append({"setting": setting, "bytes_limit": stats.get("bytes_limit"),
                     "bytes_in_use": stats.get("bytes_in_use"), "error": result.get("error")})
    return pd.DataFrame(rows)
