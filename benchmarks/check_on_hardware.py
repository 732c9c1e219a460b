"""Measures the reference transformer's gradient on a real NVIDIA GPU, beside the package's predictions.

What ``docs/_hardware/h200-2026-11-27.json`` holds, measured again on the local GPU: for
``jax.jit(jax.grad(transformer_loss(policy)))`` of ``remat_guide.models`` under six policies
at four sizes, each program in a fresh process,

- ``run_noat``: compiled on the device without autotuning (as the package compiles GPU
  targets), ``memory_analysis()``, one run, the allocator's peak (arguments included);
- ``run``: the same with XLA's defaults (autotuning on, as users run);
- ``time``: as ``run``, then 2 warm-up steps and 8 timed ones (their median);
- the host link: ``jax.device_put`` of 64 MiB and 1 GiB between device and pinned host
  memory, each way, best and median of 5.

Beside each program it prints the package's prediction for the matching target
(``remat_guide.targets``): ``device_bytes`` (arguments + outputs + temp) and the estimated
step time, from the same program compiled without autotuning. It writes the JSON with the
same fields as the stored measurement, which the site's accelerators page reads.

It needs only JAX (0.11 or newer) with its CUDA plugin on the GPU machine, not the site's
pinned versions: when the package is not installed there, the modules it needs
(``models``, ``targets``; they import only JAX and NumPy) are loaded from this checkout's
``src/`` without the package's ``__init__``. Run it on that machine::

    python benchmarks/check_on_hardware.py --out results/
    python benchmarks/check_on_hardware.py --sizes large,xl_bf16 --time-sizes xl_bf16
    python benchmarks/check_on_hardware.py --sizes llama1b --time-sizes llama1b --modes run_noat

Do not set ``JAX_PLATFORMS=cpu`` there (``make`` sets it; this script does not). On a
machine without an NVIDIA GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import time

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"
SIZES = {
    "page": dict(layers=4, batch=4, seq=128, d_model=256, heads=4, mlp_dim=1024, dtype="float32"),
    "large": dict(layers=8, batch=8, seq=1024, d_model=1024, heads=8, mlp_dim=4096, dtype="float32"),
    "large_bf16": dict(layers=8, batch=8, seq=1024, d_model=1024, heads=8, mlp_dim=4096, dtype="bfloat16"),
    "xl_bf16": dict(layers=16, batch=8, seq=2048, d_model=2048, heads=16, mlp_dim=8192, dtype="bfloat16"),
}
# Whole training steps of remat_guide.models' Llama 3 decoder (decoder_step: AdamW, float32 master
# weights, parameters and optimizer state donated), one GPU, unsharded; names from STEP_POLICIES.
STEPS = {"llama1b": dict(model="1b", batch=1, seq=4096)}
STEP_POLICIES = ("none", "full", "minimal", "save_qkv_proj", "qkv_proj_offloaded")
MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                 "host_temp_size_in_bytes", "peak_memory_in_bytes")
MODES = {
    "run": "compiled on the device with XLA's defaults (autotuning on); one run",
    "run_noat": "compiled on the device with --xla_gpu_autotune_level=0 (as remat_guide compiles GPU targets); "
                "one run",
    "time": "as run (autotuning on), then 2 warm-up steps and 8 timed steps; step_ms sorted, step_ms_median "
            "their median",
}
FIELDS = {
    "*_size_in_bytes, peak_memory_in_bytes": "compiled.memory_analysis() of the on-device compile",
    "in_use_args": "allocator bytes_in_use with the arguments resident, before compiling",
    "peak_after_compile": "allocator peak_bytes_in_use after compiling (autotuning allocates scratch)",
    "peak_after_run": "allocator peak_bytes_in_use after the run(s): the real peak of the process, "
                      "arguments included",
    "predicted_*": "remat_guide's figures for the matching target, from the run_noat compile",
}


def package_modules():
    """``remat_guide.models`` and ``remat_guide.targets``: installed, or loaded from ``src/`` without ``__init__``."""
    try:
        from remat_guide import models, targets
        return models, targets
    except ImportError:
        pass
    spec = importlib.machinery.ModuleSpec("remat_guide", None, is_package=True)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = [str(SRC / "remat_guide")]
    sys.modules["remat_guide"] = package
    from remat_guide import models, targets
    return models, targets


def matching_target(targets, device_kind: str) -> str | None:
    """The package's target for the local GPU, by its device kind (a real H200 reports ``NVIDIA H200``)."""
    for name, chosen in targets.TARGETS.items():
        if chosen.platform == "cuda" and (chosen.device_kind == device_kind
                                          or chosen.device_kind.startswith(device_kind + " ")):
            return name
    return None


def run_and_read(run, compiled, device, record: dict, mode: str, timed: int) -> None:
    """After a first run: in the ``time`` mode 2 warm-up runs and ``timed`` timed ones; then the peak and memory."""
    if mode == "time":
        for _ in range(2):
            run()
        steps = []
        for _ in range(timed):
            start = time.perf_counter()
            run()
            steps.append(time.perf_counter() - start)
        steps.sort()
        record["step_ms"] = [round(s * 1e3, 3) for s in steps]
        record["step_ms_median"] = round(steps[len(steps) // 2] * 1e3, 3)
    record["peak_after_run"] = (device.memory_stats() or {}).get("peak_bytes_in_use")
    memory = compiled.memory_analysis()
    record.update({field: getattr(memory, field, None) for field in MEMORY_FIELDS})


def step_program(models, size: str, name: str):
    """A Llama training step of :data:`STEPS` under a policy: the jitted step and real arguments on the GPU."""
    import jax
    import jax.numpy as jnp

    config = models.LLAMA3[STEPS[size]["model"]]
    policy = None if name == "none" else models.MAXTEXT_PRESETS[name]
    params, opt_state, batch = models.decoder_args(config, STEPS[size]["batch"], STEPS[size]["seq"])
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(0), len(leaves) + 1)
    params = jax.tree.unflatten(tree, [jax.random.normal(k, s.shape, s.dtype) * 0.02 for k, s in zip(keys, leaves)])
    opt_state = models.decoder_optimizer().init(params)
    tokens = jax.random.randint(keys[-1], batch["inputs"].shape, 0, config.vocab, jnp.int32)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    step = jax.jit(models.decoder_step(config, policy), donate_argnums=(0, 1))
    return step, [params, opt_state, batch]


def child(size: str, name: str, mode: str) -> dict:
    """One program in this process: compile on the GPU, run, and read the allocator."""
    import jax
    import jax.numpy as jnp

    models, targets = package_modules()
    if size in STEPS:
        return step_child(models, targets, size, name, mode)
    sizes = dict(SIZES[size])
    dtype = jnp.dtype(sizes.pop("dtype"))
    params, x = models.transformer_args(**sizes)
    device = jax.devices()[0]
    keys = jax.random.split(jax.random.key(0), len(jax.tree.leaves(params)) + 1)
    leaves, tree = jax.tree.flatten(params)
    values = [jax.random.normal(k, s.shape, jnp.float32).astype(dtype) * 0.02 for k, s in zip(keys, leaves)]
    params = jax.tree.unflatten(tree, values)
    x = jax.random.normal(keys[-1], x.shape, jnp.float32).astype(dtype)
    jax.block_until_ready((params, x))
    record = {"cfg": size, "policy": name, "mode": mode, "jax": jax.__version__, "device_kind": device.device_kind,
              "in_use_args": (device.memory_stats() or {}).get("bytes_in_use")}
    gradient = jax.jit(jax.grad(models.transformer_loss(models.measured_policy(name))))
    compiled = gradient.lower(params, x).compile()
    record["peak_after_compile"] = (device.memory_stats() or {}).get("peak_bytes_in_use")
    jax.block_until_ready(compiled(params, x))
    run_and_read(lambda: jax.block_until_ready(compiled(params, x)), compiled, device, record, mode, timed=8)
    chosen = matching_target(targets, device.device_kind)
    if chosen is not None:  # from the program compiled without autotuning, as the package compiles
        planned = (compiled if mode == "run_noat" else
                   gradient.lower(params, x).compile(compiler_options={"xla_gpu_autotune_level": 0}))
        record["predicted_target"] = chosen
        record["predicted_device_bytes"] = targets.device_bytes(planned.memory_analysis(), chosen)
        record["predicted_step_seconds"] = targets.estimate_step(planned, chosen).seconds
    return record


def step_child(models, targets, size: str, name: str, mode: str) -> dict:
    """One training step of :data:`STEPS`: as :func:`child`, its donated arguments replaced after each run."""
    import jax

    device = jax.devices()[0]
    step, arguments = step_program(models, size, name)
    jax.block_until_ready(arguments)
    record = {"cfg": size, "policy": name, "mode": mode, "jax": jax.__version__, "device_kind": device.device_kind,
              "in_use_args": (device.memory_stats() or {}).get("bytes_in_use")}
    planned = step.lower(*arguments).compile(compiler_options={"xla_gpu_autotune_level": 0})
    compiled = planned if mode == "run_noat" else step.lower(*arguments).compile()
    record["peak_after_compile"] = (device.memory_stats() or {}).get("peak_bytes_in_use")

    def run():
        params, opt_state, loss = compiled(*arguments)
        arguments[:2] = [params, opt_state]  # the donated buffers are gone: the next step takes the new ones
        return jax.block_until_ready(loss)

    record["loss"] = float(run())
    run_and_read(run, compiled, device, record, mode, timed=6)
    chosen = matching_target(targets, device.device_kind)
    if chosen is not None:
        record["predicted_target"] = chosen
        record["predicted_device_bytes"] = targets.device_bytes(planned.memory_analysis(), chosen)
        record["predicted_step_seconds"] = targets.estimate_step(planned, chosen).seconds
    return record


def host_link() -> dict:
    """``jax.device_put`` between device and pinned host memory, each way: best and median GB/s of 5."""
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    on_device = jax.sharding.SingleDeviceSharding(device, memory_kind="device")
    on_host = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    found = {}
    for mib in (64, 1024):
        value = jax.device_put(jnp.ones((mib * 2**19,), jnp.bfloat16), on_device)
        rates = {"d2h": [], "h2d": []}
        for _ in range(5):
            start = time.perf_counter()
            host = jax.block_until_ready(jax.device_put(value, on_host))
            rates["d2h"].append(mib * 2**20 / (time.perf_counter() - start) / 1e9)
            start = time.perf_counter()
            jax.block_until_ready(jax.device_put(host, on_device))
            rates["h2d"].append(mib * 2**20 / (time.perf_counter() - start) / 1e9)
        found[f"{mib}MiB"] = {
            **{f"{way}_GBps": round(max(r), 1) for way, r in rates.items()},
            **{f"{way}_median_GBps": round(sorted(r)[2], 1) for way, r in rates.items()}}
    return found


def run_child(arguments: list[str], environment: dict) -> tuple[dict | None, str]:
    done = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True,
                          env=environment)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:]), ""
    return None, done.stderr[-1500:]


def policies(size: str = "") -> tuple[str, ...]:
    """The measured policies' names, as ``remat_guide.models`` lists them (:data:`STEP_POLICIES` for a step)."""
    if size in STEPS:
        return STEP_POLICIES
    models, _ = package_modules()
    return models.MEASURED_POLICIES


def schedule(jobs: list[tuple[str, str, str]], parallel: int, limit_s: float) -> tuple[list[dict], list, list]:
    """Runs every job in its own process; timing and the largest size run alone on the GPU.

    Returns the records, the jobs not started within ``limit_s``, and each failed job with
    the last line of its error.
    """
    base = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    no_autotune = dict(base, XLA_FLAGS=(base.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip())
    results, skipped, failed, start = [], [], [], time.time()
    pending = list(jobs)
    running: list[tuple[tuple, subprocess.Popen]] = []
    while pending or running:
        for job, process in list(running):
            if process.poll() is None:
                continue
            running.remove((job, process))
            out, err = process.communicate()
            record = next((json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")), None)
            if record is None:
                print(f"failed: {job}\n{err[-1500:]}", flush=True)
                failed.append({"job": list(job), "error": (err.strip().splitlines() or [""])[-1][:500]})
            else:
                results.append(record)
                print(f"done: {' '.join(job)}", flush=True)
        while pending and time.time() - start < limit_s:
            job = pending[0]
            alone = job[2] == "time" or job[0] in ("xl_bf16", *STEPS)
            if running and (alone or len(running) >= parallel or any(
                    j[2] == "time" or j[0] in ("xl_bf16", *STEPS) for j, _ in running)):
                break
            pending.pop(0)
            environment = no_autotune if job[2] == "run_noat" else base
            process = subprocess.Popen([sys.executable, __file__, "--child", *job], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, env=environment)
            running.append((job, process))
        if pending and time.time() - start >= limit_s and not running:
            skipped, pending = list(pending), []
        time.sleep(0.2)
    return results, skipped, failed


def summary(rows: list[dict]) -> None:
    """Each program's measured figures beside the package's predictions (MiB, ms)."""
    mib = 2**20
    by = {(r["cfg"], r["policy"], r["mode"]): r for r in rows}

    def cell(value, width, digits=1):
        return f"{value:{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"

    print(f"\n{'size':10} {'policy':32} {'predicted':>9} {'real':>9} {'XLA peak':>9} {'autotune':>8} "
          f"{'step ms':>8} {'est ms':>8} {'ratio':>6} {'est':>6}   (memory in MiB, without autotuning)")
    def predicted(size: str, name: str) -> float | None:
        # The run_noat compile's, where there is one: a compile without autotuning in a
        # process that autotuned the same program first can reuse what autotuning chose.
        row = by.get((size, name, "run_noat")) or by.get((size, name, "time")) or {}
        return row.get("predicted_step_seconds")

    for size in (*SIZES, *STEPS):
        base = by.get((size, "none", "time")) or {}
        for name in policies(size):
            noat, timed = by.get((size, name, "run_noat")), by.get((size, name, "time"))
            tuned = timed or by.get((size, name, "run"))
            any_row = noat or tuned
            if any_row is None:
                continue
            growth = (tuned["temp_size_in_bytes"] / noat["temp_size_in_bytes"] - 1
                      if tuned and noat and noat["temp_size_in_bytes"] else None)
            step, estimate = (timed or {}).get("step_ms_median"), predicted(size, name)
            planned_bytes = any_row.get("predicted_device_bytes")
            measured_ratio = step / base["step_ms_median"] if step and base.get("step_ms_median") else None
            estimated_ratio = (estimate / predicted(size, "none")
                               if estimate and predicted(size, "none") else None)
            print(f"{size:10} {name:32} {cell(planned_bytes and planned_bytes / mib, 9)} "
                  f"{cell(noat and noat['peak_after_run'] / mib, 9)} "
                  f"{cell(noat and noat['peak_memory_in_bytes'] / mib, 9)} "
                  f"{cell(None if growth is None else growth * 100, 7)}% {cell(step, 8)} "
                  f"{cell(None if estimate is None else estimate * 1e3, 8)} "
                  f"{cell(measured_ratio, 6, 3)} {cell(estimated_ratio, 6, 3)}")


def software() -> str:
    import jax
    plugins = []
    for name in ("jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin"):
        try:
            plugins.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join([f"jax {jax.__version__}", *plugins])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES),
                        help=f"sizes to measure (default: the four gradients; training steps: {', '.join(STEPS)})")
    parser.add_argument("--time-sizes", default="large_bf16,xl_bf16", help="sizes whose step time is measured")
    parser.add_argument("--modes", default="run_noat,run", help="memory modes besides time")
    parser.add_argument("--policies", default="", help="only these policies (default: every one of the size)")
    parser.add_argument("--parallel", type=int, default=3, help="programs at once on the GPU (small sizes)")
    parser.add_argument("--limit-s", type=float, default=480, help="start no program after this many seconds")
    parser.add_argument("--out", type=pathlib.Path, help="write the JSON into this folder")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--host-link", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child or options.host_link:
        found = child(*options.child) if options.child else host_link()
        print("RESULT " + json.dumps(found), flush=True)
        return 0
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    devices = [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        print(f"no NVIDIA GPU here (JAX sees {jax.devices()[0].platform}); nothing to measure")
        return 0
    kind = devices[0].device_kind
    print(f"local GPU: {kind}; {software()}", flush=True)
    sizes = [s for s in options.sizes.split(",") if s]
    timed = {s for s in options.time_sizes.split(",") if s}
    modes = [m for m in options.modes.split(",") if m]
    # Step times first, the largest size first: what the stored measurement has least of.
    chosen = {p for p in options.policies.split(",") if p}
    jobs = [(size, name, "time") for size in reversed(sizes) if size in timed for name in policies(size)]
    jobs += [(size, name, mode) for size in sizes for mode in modes for name in policies(size)]
    jobs = [job for job in jobs if not chosen or job[1] in chosen]
    link, error = run_child(["--host-link"], dict(os.environ))
    results, skipped, failed = schedule(jobs, options.parallel, options.limit_s)
    summary(results)
    found = {
        "what": ("jax.jit(jax.grad(transformer_loss(policy))) of remat_guide.models (argnums=0)"
                 if not set(sizes) & set(STEPS) else
                 "jax.jit(decoder_step(LLAMA3[model], MAXTEXT_PRESETS[policy]), donate_argnums=(0, 1)) of "
                 "remat_guide.models (float32 master weights, AdamW)") + f", compiled and run on one {kind}",
        "measured_on": datetime.date.today().isoformat(), "device": kind, "software": software(),
        "configs": {s: SIZES.get(s) or STEPS[s] for s in sizes}, "modes": MODES, "fields": FIELDS,
        "method": "benchmarks/check_on_hardware.py: one fresh process per program, "
                  "XLA_PYTHON_CLIENT_PREALLOCATE=false, parameters and input random normal x 0.02",
        "host_link": link or {"error": error}, "rows": results,
        "not_measured": [list(job) for job in skipped], "failed": failed}
    if skipped:
        print(f"not measured within --limit-s: {len(skipped)} programs", flush=True)
    if options.out:
        options.out.mkdir(parents=True, exist_ok=True)
        path = options.out / f"{kind.lower().replace(' ', '-')}-{found['measured_on']}.json"
        path.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
