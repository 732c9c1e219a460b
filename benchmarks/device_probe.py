"""Measures a small AdamW training step's real device memory with and without buffer donation.

What ``docs/device.md`` needs from a real GPU and ``docs/_hardware/`` lacks: for one
training step of a plain MLP (``step(params, opt_state, x, y) -> (params, opt_state,
loss)``, ``optax.adamw``, float32), each variant in a fresh process so that every
allocator peak is its own,

- ``donate`` ``none`` or ``0,1`` (the parameters and the optimizer state), each compiled
  with XLA's defaults (autotuning on) and without autotuning: the allocator's
  ``bytes_in_use`` with the arguments resident, its ``peak_bytes_in_use`` after
  compiling and after three steps, and ``compiled.memory_analysis()`` with the package's
  prediction, arguments + outputs + temp - alias (``predicted_device_bytes``);
- the allocator's limits: ``memory_stats()`` after one tiny array in a process with JAX's
  default settings (preallocation on), with ``XLA_PYTHON_CLIENT_PREALLOCATE=false``, with
  ``XLA_PYTHON_CLIENT_MEM_FRACTION=0.5`` and with ``XLA_CLIENT_MEM_FRACTION=0.5`` (jaxlib
  0.12 reads the second and calls the first deprecated).

It needs only the standard library, JAX and optax (not this package). It runs on a CPU
too, where ``memory_stats()`` is ``None`` and only the compiler's figures are recorded::

    python benchmarks/device_probe.py --out docs/_hardware/h200-2026-11-27-probe.json
    JAX_PLATFORMS=cpu python benchmarks/device_probe.py --small --out /tmp/probe.json

The program is the one ``remat_guide.site.device.mlp_step`` builds; ``--small`` shrinks it
(the default on a CPU). The whole run takes about a minute on a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

SIZES = {"gpu": dict(width=4096, depth=4, batch=1024), "small": dict(width=256, depth=2, batch=64)}
"""The MLP's sizes: on a GPU about 0.27 GB of float32 parameters (0.8 GB with AdamW's moments)."""

MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                 "host_temp_size_in_bytes", "peak_memory_in_bytes")
STEPS = 3
CHILD_TIMEOUT_S = 150

FIELDS = {
    "*_size_in_bytes, peak_memory_in_bytes": "compiled.memory_analysis() of the compile on the device",
    "predicted_device_bytes": "argument + output + temp - alias, from that memory_analysis()",
    "in_use_args": "allocator bytes_in_use with the arguments resident, before compiling",
    "peak_after_compile": "allocator peak_bytes_in_use after compiling (autotuning allocates scratch)",
    "peak_after_step": "allocator peak_bytes_in_use after the first step: arguments included",
    "peak_after_steps": f"allocator peak_bytes_in_use after {STEPS} steps, each step's outputs the next's inputs",
    "in_use_after_steps": "allocator bytes_in_use after those steps, the last outputs resident",
    "stats_*": "the whole memory_stats() dict at that point (None on a CPU)",
}


def mlp_step(width: int, depth: int, batch: int, learning_rate: float = 1e-3):
    """The probed program: ``(step, params, opt_state, x, y)``, all arrays abstract."""
    import jax
    import jax.numpy as jnp
    import optax

    params = [{"w": jax.ShapeDtypeStruct((width, width), jnp.float32),
               "b": jax.ShapeDtypeStruct((width,), jnp.float32)} for _ in range(depth)]
    optimizer = optax.adamw(learning_rate)
    opt_state = jax.eval_shape(optimizer.init, params)
    x = jax.ShapeDtypeStruct((batch, width), jnp.float32)

    def loss(params, x, y):
        for layer in params:
            x = jnp.tanh(x @ layer["w"] + layer["b"])
        return jnp.mean((x - y) ** 2)

    def step(params, opt_state, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, params, opt_state, x, x


def _stats(device) -> dict | None:
    stats = device.memory_stats()
    return None if stats is None else {key: int(value) for key, value in stats.items()}


def _get(stats: dict | None, key: str) -> int | None:
    return None if stats is None else stats.get(key)


def step_child(sizes: dict, donate: str, autotune: bool) -> dict:
    """One variant, in this process: real arguments, compile, three steps, the allocator read around them."""
    import jax
    import optax

    device = jax.devices()[0]
    step, params, opt_state, x, y = mlp_step(**sizes)
    keys = iter(jax.random.split(jax.random.key(0), 64))

    def real(spec):
        return jax.random.normal(next(keys), spec.shape, spec.dtype) * 0.02

    params = jax.tree.map(real, params)
    opt_state = optax.adamw(1e-3).init(params)
    x, y = real(x), real(y)
    arguments = [params, opt_state, x, y]
    jax.block_until_ready(arguments)
    donated = () if donate == "none" else tuple(int(i) for i in donate.split(","))
    record = {"donate_argnums": list(donated), "autotune": autotune if device.platform == "gpu" else None}
    record["stats_args"] = _stats(device)
    record["in_use_args"] = _get(record["stats_args"], "bytes_in_use")
    options = {} if autotune or device.platform != "gpu" else {"xla_gpu_autotune_level": 0}
    compiled = jax.jit(step, donate_argnums=donated).lower(*arguments).compile(compiler_options=options)
    record["peak_after_compile"] = _get(_stats(device), "peak_bytes_in_use")
    memory = compiled.memory_analysis()
    record.update({field: getattr(memory, field, None) for field in MEMORY_FIELDS})
    record["predicted_device_bytes"] = (memory.argument_size_in_bytes + memory.output_size_in_bytes
                                        + memory.temp_size_in_bytes - memory.alias_size_in_bytes)
    losses = []
    for index in range(STEPS):
        params, opt_state, loss = compiled(*arguments)
        arguments[:2] = [params, opt_state]  # donated buffers are gone: the next step takes the new ones
        losses.append(float(jax.block_until_ready(loss)))
        if index == 0:
            record["peak_after_step"] = _get(_stats(device), "peak_bytes_in_use")
    record["stats_after_steps"] = _stats(device)
    record["peak_after_steps"] = _get(record["stats_after_steps"], "peak_bytes_in_use")
    record["in_use_after_steps"] = _get(record["stats_after_steps"], "bytes_in_use")
    record["losses"] = losses
    return record


def limit_child() -> dict:
    """The allocator's figures after one tiny array, under whatever environment this process got."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    jax.block_until_ready(jnp.ones((256,), jnp.float32))
    return {"stats": _stats(device)}


def run_child(arguments: list[str], environment: dict) -> dict:
    """One child process; its RESULT line, or what went wrong."""
    try:
        done = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True,
                              env=environment, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
    return {"error": lines[-1][:500]}


def software() -> dict:
    found = {"python": platform.python_version()}
    for name in ("jax", "jaxlib", "optax", "jax-cuda12-plugin", "jax-cuda13-plugin"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, required=False, help="the JSON file to write")
    parser.add_argument("--small", action="store_true", help="the small MLP (the default on a CPU)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        kind, *rest = options.child
        if kind == "step":
            found = step_child(json.loads(rest[0]), rest[1], rest[2] == "1")
        else:
            found = limit_child()
        print("RESULT " + json.dumps(found), flush=True)
        return 0
    if options.out is None:
        parser.error("--out is required")
    start = time.time()
    import jax

    device = jax.devices()[0]
    on_gpu = device.platform == "gpu"
    size = "small" if options.small or not on_gpu else "gpu"
    print(f"device: {device.device_kind} ({device.platform}); sizes: {size} {SIZES[size]}", flush=True)
    base = {key: value for key, value in os.environ.items()
            if key not in ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                           "XLA_CLIENT_MEM_FRACTION")}
    no_prealloc = dict(base, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    rows = []
    for donate in ("none", "0,1"):
        for autotune in ((True, False) if on_gpu else (True,)):
            record = run_child(["--child", "step", json.dumps(SIZES[size]), donate, "1" if autotune else "0"],
                               no_prealloc)
            record.setdefault("donate_argnums", [] if donate == "none" else [0, 1])
            record.setdefault("autotune", autotune if on_gpu else None)
            rows.append(record)
            print(f"step, donate {donate}, autotune {autotune}: "
                  + ("error: " + record["error"] if "error" in record else
                     f"predicted {record['predicted_device_bytes']} peak {record['peak_after_steps']}"), flush=True)
    limits = {}
    for name, environment in (("default", base), ("preallocate_false", no_prealloc),
                              ("python_client_mem_fraction_0.5", dict(base, XLA_PYTHON_CLIENT_MEM_FRACTION="0.5")),
                              ("client_mem_fraction_0.5", dict(base, XLA_CLIENT_MEM_FRACTION="0.5"))):
        limits[name] = run_child(["--child", "limit"], environment)
        print(f"limits, {name}: {limits[name]}", flush=True)
    found = {
        "what": "one optax.adamw training step of a float32 MLP (device_probe.mlp_step), jax.jit with "
                "donate_argnums none or (0, 1), compiled and run on one " + device.device_kind,
        "measured_on": datetime.date.today().isoformat(),
        "device_kind": device.device_kind, "platform": device.platform, "software": software(),
        "method": "benchmarks/device_probe.py: each step variant and each limit in a fresh process; steps with "
                  "XLA_PYTHON_CLIENT_PREALLOCATE=false, parameters and inputs random normal x 0.02",
        "sizes": SIZES[size], "steps": STEPS, "fields": FIELDS,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "rows": rows, "limits": limits,
        "seconds": round(time.time() - start, 1),
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {options.out} in {found['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
