"""Times and profiles kernels, model steps and a 70B-width step on a real NVIDIA GPU, for the step-time estimate.

What issue 50 asks of a lent GPU, in one run of a few minutes, each stage in its own
process under its own time limit (what a stage finished before its limit is kept):

- ``micro``: single kernels under ``jax.profiler``: an elementwise pass over 64 KiB to
  4 GiB (HBM bandwidth by bytes moved), matrix products by shape in bfloat16 and float32
  (against XLA's measured table), and a chain of 64 tiny kernels (launch cost);
- ``large``, ``large_bf16``, ``llama1b``: the stored H200 programs under two to four
  policies (``jax.jit(jax.grad(transformer_loss))`` at 8 layers; a Llama 3.2 1B training
  step), compiled with XLA's defaults, 2 warm-up steps, 8 timed steps, then 2 steps under
  ``jax.profiler``: each kernel's measured duration, by HLO instruction;
- ``wide``: ``jax.jit(jax.value_and_grad(decoder_loss))`` of 4 Llama 3.1 70B layers
  (d_model 8192, MLP 28 672, GQA 64/8 heads), one sequence of 4096 tokens, bfloat16
  parameters, Pallas attention (``"fused"``), under no checkpoint, ``full``, ``minimal``
  and ``minimal_offloaded``: timed and profiled as above.

Each profiled program's optimized HLO (``compiled.as_text()``) comes back with it, so that
the package's per-kernel estimate can be computed here from the very program that ran.
Run it on the GPU machine (``--out`` gets ``gpu-profile.json``, ``hlo.tar.gz`` and the log)::

    python benchmarks/profile_on_gpu.py --out results/ --budget-s 540

``--tiny`` runs the same code on tiny sizes on any machine (``JAX_PLATFORMS=cpu``), to check it.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import glob
import gzip
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_on_hardware import SIZES, package_modules  # noqa: E402

PROGRAMS = {
    "large": ("none", "nothing_saveable", "dots_with_no_batch_dims_saveable", "offload_dot_with_no_batch_dims"),
    "llama1b": ("full", "minimal"),
    "wide": ("none", "full", "minimal", "minimal_offloaded"),
    "large_bf16": ("none", "nothing_saveable", "offload_dot_with_no_batch_dims"),
    "xl_bf16": ("none", "nothing_saveable"),
}
# Seconds each stage may take at most (the run's budget caps the last ones).
STAGE_LIMITS = {"micro": 75, "large": 100, "llama1b": 130, "wide": 220, "large_bf16": 80, "xl_bf16": 100}
# Run by default: every stage but xl_bf16 (the 0.8 B model, profiled on request).
DEFAULT_STAGES = ("micro", "large", "llama1b", "wide", "large_bf16")
WIDE = dict(layers=4, batch=1, seq=4096)
MATMULS = [(1, s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192)] + [
    (1, 8192, 1024, 1024), (1, 8192, 4096, 1024), (1, 8192, 1024, 4096),  # the 8-layer model's projections
    (1, 16384, 2048, 2048), (1, 16384, 8192, 2048), (1, 16384, 2048, 8192),  # the 0.8 B model's
    (1, 4096, 2048, 8192), (1, 4096, 8192, 2048), (1, 4096, 128256, 2048),  # Llama 3.2 1B's, and its logits
    (1, 4096, 8192, 8192), (1, 4096, 28672, 8192), (1, 4096, 8192, 28672),  # the 70B width's
    (64, 1024, 1024, 128), (64, 1024, 128, 1024), (32, 4096, 4096, 64),  # attention's batched dots
]
COPY_BYTES = [2**k for k in range(16, 33, 2)]


def versions() -> dict[str, str]:
    found = {}
    for name in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "nvidia-cudnn-cu13", "optax"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def device_events(log_dir: str) -> list[tuple[str, str, str, int, int, str]]:
    """Every device-side event of the trace in ``log_dir``: (module, HLO op, kernel, start ns, duration ns, line)."""
    from jax.profiler import ProfileData

    events = []
    for path in glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True):
        data = ProfileData.from_file(path)
        for plane in data.planes:
            if not (plane.name.startswith("/device:GPU") or (TINY and plane.name == "/host:CPU")):
                continue
            for line in plane.lines:
                for event in line.events:
                    stats = dict(event.stats)
                    if TINY and "hlo_op" not in stats:
                        continue
                    events.append((str(stats.get("hlo_module", "")), str(stats.get("hlo_op", "")), event.name,
                                   int(event.start_ns), int(event.duration_ns), line.name))
    return events


def traced(run, steps: int) -> list[tuple[str, str, str, int, int, str]]:
    import jax

    log_dir = tempfile.mkdtemp(prefix="trace")
    jax.profiler.start_trace(log_dir)
    try:
        for _ in range(steps):
            run()
    finally:
        jax.profiler.stop_trace()
    return device_events(log_dir)


def by_op(events, steps: int) -> dict:
    """Kernel time per HLO instruction and per step, the step's span on the device, and its busy time."""
    ops: dict = collections.defaultdict(lambda: [0, 0, ""])
    for module, op, kernel, _, duration, _ in events:
        entry = ops[kernel if not op or op.startswith("command_buffer") else op]
        entry[0] += duration
        entry[1] += 1
        entry[2] = entry[2] or kernel[:120]
    starts = [e[3] for e in events]
    ends = [e[3] + e[4] for e in events]
    busy = sum(e[4] for e in events if not e[2].startswith("Memcpy"))  # copies to and from the host apart
    return {"span_ms": round((max(ends) - min(starts)) / 1e6 / steps, 4) if events else None,
            "kernel_ms": round(busy / 1e6 / steps, 4),
            "lines": sorted({e[5] for e in events}),
            "ops": {name: [round(total / 1e3 / steps, 3), count / steps, kernel]
                    for name, (total, count, kernel) in sorted(ops.items(), key=lambda kv: -kv[1][0])}}


def timed(run, warm: int, steps: int) -> list[float]:
    for _ in range(warm):
        run()
    found = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        found.append(round((time.perf_counter() - start) * 1e3, 3))
    return sorted(found)


def micro() -> dict:
    import jax
    import jax.numpy as jnp

    # MICRO_DATA=random fills the matrices with normal samples instead of ones (which draw less power).
    random = os.environ.get("MICRO_DATA", "ones") == "random"
    key = jax.random.key(0)

    def filled(shape, dtype):
        return jax.random.normal(key, shape, jnp.float32).astype(dtype) if random else jnp.ones(shape, dtype)

    jobs = []  # (label, function, arguments)
    for size in COPY_BYTES[: 3 if TINY else None]:
        x = jnp.ones((size // 4,), jnp.float32)
        jobs.append((f"copy_{size}", lambda x: x * 1.0001 + 1.0, (x,)))
    for dtype in ("bfloat16", "float32"):
        for b, m, n, k in MATMULS[: 3 if TINY else None]:
            lhs = filled((b, m, k) if b > 1 else (m, k), dtype)
            rhs = filled((b, k, n) if b > 1 else (k, n), dtype)
            jobs.append((f"dot_{dtype}_{b}x{m}x{n}x{k}", (lambda a, c: jnp.einsum("bmk,bkn->bmn", a, c)) if b > 1
                         else (lambda a, c: a @ c), (lhs, rhs)))

    def chain(x):
        for _ in range(64):
            x = jax.lax.optimization_barrier(jnp.sin(x))
        return x

    jobs.insert(0, ("launch_chain_64", chain, (jnp.ones((1024,), jnp.float32),)))
    runs, found = [], {}
    for label, function, arguments in jobs:
        function.__name__ = label
        compiled = jax.jit(function).lower(*arguments).compile()

        def run(compiled=compiled, arguments=arguments):
            jax.block_until_ready(compiled(*arguments))

        found[label] = {"wall_ms": timed(run, 2, 5)}
        runs.append(run)
    try:
        events = traced(lambda: [run() for run in runs[1:]], 5)  # one trace: every job 5 times
        events += traced(runs[0], 1)  # the chain alone, once: its span is 64 launches and their gaps
    except Exception as error:  # noqa: BLE001 - the wall-clock times still stand
        found["trace_error"] = f"{type(error).__name__}: {error}"[:600]
        return found
    for label, _, _ in jobs:
        steps = 1 if label == jobs[0][0] else 5
        summary = by_op([e for e in events if e[0].startswith(f"jit_{label}")], steps)
        found[label].update(kernel_ms=summary["kernel_ms"], kernels=len(summary["ops"]),
                            ops=dict(list(summary["ops"].items())[:4]),
                            **({"span_ms": summary["span_ms"]} if steps == 1 else {}))
        print(f"{label}: kernel {summary['kernel_ms']} ms, span {found[label].get('span_ms')} ms", flush=True)
    return found


def program(stage: str, name: str):
    """The jitted function and its arguments for one profiled program."""
    import jax
    import jax.numpy as jnp

    models, _ = package_modules()
    if stage in ("large", "large_bf16", "xl_bf16"):
        sizes = dict(SIZES[stage])
        if TINY:
            sizes.update(layers=2, batch=1, seq=64, d_model=64, heads=2, mlp_dim=128)
        dtype = jnp.dtype(sizes.pop("dtype"))
        params, x = models.transformer_args(**sizes)
        leaves, tree = jax.tree.flatten(params)
        keys = jax.random.split(jax.random.key(0), len(leaves) + 1)
        params = jax.tree.unflatten(tree, [jax.random.normal(k, s.shape, jnp.float32).astype(dtype) * 0.02
                                           for k, s in zip(keys, leaves)])
        x = jax.random.normal(keys[-1], x.shape, jnp.float32).astype(dtype)
        return jax.jit(jax.grad(models.transformer_loss(models.measured_policy(name)))), [params, x], None, {}
    config = models.LLAMA3["1b" if stage == "llama1b" else "70b"]
    batch, seq = (1, 4096) if stage == "llama1b" else (WIDE["batch"], WIDE["seq"])
    if stage == "wide":
        config = dataclasses.replace(config, layers=WIDE["layers"])
    if TINY:
        config = dataclasses.replace(config, layers=2, d_model=128, heads=4, kv_heads=2, mlp_dim=256, vocab=512)
        seq = 256
    policy = None if name == "none" else models.MAXTEXT_PRESETS[name]
    param_dtype = jnp.bfloat16 if stage == "wide" else jnp.float32
    params, _, batch_spec = models.decoder_args(config, batch, seq, param_dtype=param_dtype)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(0), len(leaves) + 1)
    params = jax.tree.unflatten(tree, [(jax.random.normal(k, s.shape, jnp.float32) * 0.02).astype(s.dtype)
                                       for k, s in zip(keys, leaves)])
    tokens = jax.random.randint(keys[-1], batch_spec["inputs"].shape, 0, config.vocab, jnp.int32)
    batch_value = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    if stage == "llama1b":
        opt_state = models.decoder_optimizer().init(params)
        step = jax.jit(models.decoder_step(config, policy), donate_argnums=(0, 1))
        return step, [params, opt_state, batch_value], 2, {"attention": "xla"}
    for attention in ("fused", "xla"):
        function = jax.jit(jax.value_and_grad(models.decoder_loss(config, policy, attention=attention)))
        try:
            compiled = function.lower(params, batch_value).compile()
        except Exception as error:  # noqa: BLE001 - the fallback is recorded with its reason
            print(f"attention {attention!r} does not compile here: {type(error).__name__}: {error}"[:400], flush=True)
            continue
        return compiled, [params, batch_value], None, {"attention": attention, "config": dataclasses.asdict(config)}
    raise RuntimeError("no attention lowers")


def profiled(stage: str, hlo_dir: pathlib.Path) -> None:
    """Each program of ``stage``: compile (XLA's defaults), time, trace; one RESULT line each as it finishes."""
    import jax

    # PROFILE_PROGRAMS="wide:none,full;llama1b:full" runs those policies of those stages instead.
    chosen = dict(part.split(":") for part in os.environ.get("PROFILE_PROGRAMS", "").split(";") if part)
    for name in chosen[stage].split(",") if stage in chosen else PROGRAMS[stage]:
        record = {"stage": stage, "policy": name}
        try:
            start = time.perf_counter()
            function, arguments, donated, extra = program(stage, name)
            record.update(extra)
            jax.block_until_ready(arguments)
            compiled = function if stage == "wide" else function.lower(*arguments).compile()
            record["compile_s"] = round(time.perf_counter() - start, 1)
            memory = compiled.memory_analysis()
            record.update({field: getattr(memory, field, None) for field in (
                "argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "host_temp_size_in_bytes")})
            text = compiled.as_text()
            with gzip.open(hlo_dir / f"{stage}-{name}.hlo.gz", "wt", encoding="utf-8") as handle:
                handle.write(text)

            def run():
                out = compiled(*arguments)
                if donated:
                    arguments[:donated] = list(out[:donated])
                jax.block_until_ready(out)

            run()
            steps = timed(run, 2, 8)
            record["step_ms"] = steps
            record["step_ms_median"] = steps[len(steps) // 2]
            record["profile"] = by_op(traced(run, 2), 2)
            print(f"{stage} {name}: {record['step_ms_median']} ms (compile {record['compile_s']} s), kernels "
                  f"{record['profile']['kernel_ms']} ms, span {record['profile']['span_ms']} ms", flush=True)
            arguments.clear()  # the next program's arguments need the memory
        except Exception as error:  # noqa: BLE001 - one failed program must not lose the others
            record["error"] = f"{type(error).__name__}: {error}"[:600]
            print(f"{stage} {name} failed: {record['error']}", flush=True)
        print("RESULT " + json.dumps(record), flush=True)


def child(stage: str, hlo_dir: pathlib.Path) -> None:
    if stage == "micro":
        print("RESULT " + json.dumps({"stage": "micro", "kernels": micro()}), flush=True)
    else:
        profiled(stage, hlo_dir)


def nvidia_smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                               "clocks.max.mem,power.limit", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"nvidia-smi failed: {error}"


def main() -> int:
    global TINY
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("gpu-profile"))
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--stages", default=",".join(DEFAULT_STAGES))
    parser.add_argument("--tiny", action="store_true", help="tiny sizes on any machine, to check the script")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    options = parser.parse_args()
    TINY = options.tiny
    if options.child:
        child(options.child[0], pathlib.Path(options.child[1]))
        return 0
    start = time.time()
    options.out.mkdir(parents=True, exist_ok=True)
    hlo_dir = pathlib.Path(tempfile.mkdtemp(prefix="hlo"))
    environment = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", XLA_PYTHON_CLIENT_MEM_FRACTION="0.92",
                       PYTHONUNBUFFERED="1")
    found = {"what": __doc__.splitlines()[0], "measured_on": datetime.date.today().isoformat(),
             "nvidia_smi": nvidia_smi(), "versions": versions(), "python": sys.version.split()[0],
             "xla_flags": os.environ.get("XLA_FLAGS", ""), "programs_chosen": os.environ.get("PROFILE_PROGRAMS", ""),
             "micro_data": os.environ.get("MICRO_DATA", "ones"),
             "method": "benchmarks/profile_on_gpu.py: each stage in a fresh process, XLA_PYTHON_CLIENT_PREALLOCATE="
                       "false, XLA_PYTHON_CLIENT_MEM_FRACTION=0.92, compiled with XLA's defaults (autotuning on); "
                       "kernel durations from jax.profiler (CUPTI) device events, per step",
             "configs": {"large": SIZES["large"], "large_bf16": SIZES["large_bf16"], "xl_bf16": SIZES["xl_bf16"],
                         "llama1b": {"model": "1b", "batch": 1, "seq": 4096, "optimizer": "AdamW, float32 master"},
                         "wide": {"model": "70b", **WIDE, "param_dtype": "bfloat16", "what": "value_and_grad of "
                                  "decoder_loss (no optimizer)"}},
             "tiny": TINY, "stages": {}, "programs": [], "failed": []}
    path = options.out / "gpu-profile.json"
    for stage in [s for s in options.stages.split(",") if s]:
        left = options.budget_s - (time.time() - start)
        limit = min(STAGE_LIMITS[stage], left)
        if limit < 20:
            found["stages"][stage] = "not run: out of time"
            continue
        process = subprocess.Popen([sys.executable, __file__, *(["--tiny"] if TINY else []), "--child", stage,
                                    str(hlo_dir)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=environment)
        try:
            output, _ = process.communicate(timeout=limit)
            found["stages"][stage] = f"finished in {time.time() - start:.0f} s of the run"
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            found["stages"][stage] = f"stopped at its limit of {limit:.0f} s"
        for line in output.splitlines():
            if line.startswith("RESULT "):
                record = json.loads(line[7:])
                if stage == "micro":
                    found["micro"] = record["kernels"]
                else:
                    found["programs"].append(record)
            else:
                print(line, flush=True)
        if process.returncode not in (0, None) and not any(p["stage"] == stage for p in found["programs"]):
            found["failed"].append({"stage": stage, "tail": output[-800:]})
        path.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
        with tarfile.open(options.out / "hlo.tar.gz", "w:gz") as archive:
            for hlo in sorted(hlo_dir.glob("*.hlo.gz")):
                archive.add(hlo, arcname=hlo.name)
    print(f"wrote {path} after {time.time() - start:.0f} s", flush=True)
    return 0


TINY = False

if __name__ == "__main__":
    sys.exit(main())
