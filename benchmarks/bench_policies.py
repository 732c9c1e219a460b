"""Benchmark of the policies on the reference transformer: jit(grad) per policy, compare_policies.

Also the sharded page's build time. compare_policies is timed against the sum of the XLA
compilations it runs (every ``jax.stages.Lowered.compile`` call, timed), whose ratio the
issue bounds by 1.15. And compare_policies per target: for this machine and for
accelerators compiled for ahead of time (``target=``), its wall time, the programs it
compiles (two per row with a target: the target's, for the memory, and this machine's, for
the FLOPs) and each policy's device figure.

plan_names has its own benchmark, bench_planner.py. Run by `make bench`; writes policies.json
and policies.md to the folder given by --out.
``--only compare`` runs the compare_policies timings alone (compare.json), ``--only
targets`` the per-target timings alone (targets.json and targets.md). Timings belong here,
never on the site's pages.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import platform
import re
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from remat_guide import checkpoint_dot_policy, compare_policies, count_flops, models
from remat_guide.compare import STANDARD_POLICIES
from remat_guide.targets import target

CONFIG = dict(layers=4, batch=4, seq=128, d_model=256, heads=4, mlp_dim=1024)
COMPARE_TARGET_S = 15.0
COMPILE_RATIO_TARGET = 1.15  # compare_policies' wall time over the sum of its compile times
FLOPS_TOLERANCE = 0.03
EXERCISE_SHAPE = (1024, 512)  # (N, D) of the exercise pipeline
DOT_OP = re.compile(r"= \S+ dot\(")  # a dot instruction of the compiled HLO
ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARDED_PAGE = ROOT / "docs" / "sharded.md"
TARGET_RUNS = (None, "tpu-v5e", "h100")  # None: this machine's own backend
TARGET_POLICIES = ("dots_saveable", "dots_with_no_batch_dims_saveable", "nothing_saveable")


def _random(specs, seed: int = 0):
    leaves, tree = jax.tree.flatten(specs)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(
        tree, [0.05 * jax.random.normal(k, s.shape, s.dtype) for k, s in zip(keys, leaves)])


def _timed(thunk) -> float:
    start = time.perf_counter()
    thunk()
    return time.perf_counter() - start


@contextlib.contextmanager
def _compile_seconds():
    """Times every ``jax.stages.Lowered.compile`` call made inside, from any thread: yields the list."""
    spent: list[float] = []
    original = jax.stages.Lowered.compile

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    jax.stages.Lowered.compile = timed
    try:
        yield spent
    finally:
        jax.stages.Lowered.compile = original


def _timed_compare(*args, **kwargs) -> tuple[list, dict]:
    """compare_policies(*args, **kwargs): its rows, wall time, and the compilations it ran."""
    with _compile_seconds() as spent:
        start = time.perf_counter()
        rows = compare_policies(*args, **kwargs)
        wall = time.perf_counter() - start
    return rows, {"wall_s": wall, "compile_s": sum(spent), "compiles": len(spent), "rows": len(rows),
                  "wall_over_compile": wall / sum(spent)}


def _step_times(loss, args, repeats: int) -> list[float]:
    step = jax.jit(jax.grad(loss)).lower(*args).compile()
    jax.block_until_ready(step(*args))  # warm-up, not counted
    return [_timed(lambda: jax.block_until_ready(step(*args))) for _ in range(repeats)]


def _target_timings(specs) -> list[dict]:
    """compare_policies on the reference transformer for this machine and for each target."""
    results = []
    for name in TARGET_RUNS:
        first_use_s = None
        if name is not None:
            # The target's compiler starts on first use (libtpu; the CUDA plugin's target
            # descriptions): timed on a tiny model, apart from the timing below.
            first_use_s = _timed(lambda name=name: compare_policies(
                models.mlp_scan_loss, *models.mlp_args(2, 4, 4), policies=[], target=name))
        rows, timing = _timed_compare(models.transformer_loss, *specs, policies=list(TARGET_POLICIES), target=name)
        results.append({
            "target": name, "label": name or f"this machine ({jax.devices()[0].platform})",
            "compiler": "XLA's CPU compiler (jaxlib)" if name is None else target(name).compiler,
            "device_figure": ("temp_bytes" if name is None else "peak_bytes" if target(name).platform == "tpu"
                              else "argument + output + temp - alias bytes"),
            "first_use_s": first_use_s, **timing,
            "policies": [{"policy": row.name, "device_bytes": row.device_bytes, "temp_bytes": row.temp_bytes,
                          "peak_bytes": row.peak_bytes, "host_bytes": row.host_bytes,
                          "step_seconds": row.step_seconds,
                          "residual_bytes": row.residual_bytes, "flops_ratio": row.flops_ratio}
                         for row in rows],
        })
    return results


def _target_lines(results: list[dict]) -> list[str]:
    """The Markdown of the per-target timings: one table of times, one of device figures."""
    mib = 2**20
    lines = [
        f"compare_policies(transformer_loss, ..., policies={list(TARGET_POLICIES)}, target=T): "
        f"{results[0]['rows']} rows each. With a target every row is compiled twice (the target's "
        "program for the memory, this machine's for the FLOPs); \"first use\" is the target's compiler "
        "starting, timed apart on a tiny model.",
        "",
        "| target | compiler | first use s | wall s | programs compiled | sum of compile s | wall / compile |",
        "|---|---|---:|---:|---:|---:|---:|",
        *[f"| {r['label']} | {r['compiler']} | "
          f"{'' if r['first_use_s'] is None else format(r['first_use_s'], '.2f')} | {r['wall_s']:.2f} | "
          f"{r['compiles']} | {r['compile_s']:.2f} | {r['wall_over_compile']:.3f} |" for r in results],
        "",
        "Device figure per policy (`PolicyRow.device_bytes`): XLA temp on this machine's CPU, the "
        "program's peak on a TPU target, arguments + outputs + temp - aliased bytes on a GPU target; host "
        "bytes offloaded in brackets when any.",
        "",
        "| policy | " + " | ".join(f"{r['label']}: {'temp' if r['target'] is None else 'peak'} MiB"
                                   for r in results) + " | FLOPs ratio |",
        "|---|" + "---:|" * (len(results) + 1),
    ]
    for i, first in enumerate(results[0]["policies"]):
        cells = []
        for r in results:
            p = r["policies"][i]
            host = f" (host {p['host_bytes'] / mib:.2f})" if p["host_bytes"] else ""
            cells.append(f"{p['device_bytes'] / mib:.2f}{host}")
        lines.append(f"| {first['policy']} | " + " | ".join(cells) + f" | {first['flops_ratio']:.3f} |")
    return lines


def _page_seconds(page: pathlib.Path) -> float:
    """Seconds to execute one page's cells on the .venv kernel, as the build does."""
    os.environ.setdefault("JUPYTER_PATH", str(pathlib.Path(sys.prefix) / "share" / "jupyter"))
    os.environ["JUPYTER_PLATFORM_DIRS"] = "1"
    from myst_nb.core.read import read_myst_markdown_notebook
    from nbclient import NotebookClient

    notebook = read_myst_markdown_notebook(page.read_text(encoding="utf-8"))
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    client = NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(page.parent)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("_build/bench"))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", choices=["compare", "targets"], default=None,
                        help="run only the compare_policies timings (compile ratio), write compare.json; "
                             "or only the per-target timings, write targets.json and targets.md")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)

    specs = models.transformer_args(**CONFIG)
    # Warm JAX itself up (backend start, first compilation) on a tiny model, so the
    # timings below measure compare_policies and not the process start.
    compare_policies(models.mlp_scan_loss, *models.mlp_args(2, 4, 4), policies=[])

    if options.only == "targets":
        per_target = _target_timings(specs)
        report = {"jax": jax.__version__, "platform": jax.devices()[0].platform, "cpu_count": os.cpu_count(),
                  "config": CONFIG, "compare_policies_per_target": per_target}
        (options.out / "targets.json").write_text(json.dumps(report, indent=2) + "\n")
        lines = ["# compare_policies per target", "",
                 f"JAX {report['jax']} on {report['platform']}, {report['cpu_count']} CPUs. "
                 f"Reference transformer: {CONFIG}.", "", *_target_lines(per_target)]
        (options.out / "targets.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        print(f"\nwrote {options.out / 'targets.json'} and {options.out / 'targets.md'}")
        return

    _, standard = _timed_compare(models.transformer_loss, *specs, policies=list(STANDARD_POLICIES))
    rows, every = _timed_compare(models.transformer_loss, *specs)
    standard_s, all_s = standard["wall_s"], every["wall_s"]
    compile_ratio = {"standard_policies": standard, "all_default_policies": every,
                     "target": COMPILE_RATIO_TARGET,
                     "met": max(standard["wall_over_compile"], every["wall_over_compile"]) <= COMPILE_RATIO_TARGET}
    compare_lines = [
        f"| compare_policies | rows | wall s | sum of compile s | wall / compile (target <= {COMPILE_RATIO_TARGET}) |",
        "|---|---:|---:|---:|---:|",
        *[f"| {label} | {t['rows']} | {t['wall_s']:.2f} | {t['compile_s']:.2f} | {t['wall_over_compile']:.3f} |"
          for label, t in (("standard policies", standard), ("all default policies", every))],
    ]
    if options.only == "compare":
        report = {"jax": jax.__version__, "platform": jax.devices()[0].platform, "cpu_count": os.cpu_count(),
                  "config": CONFIG, "compare_policies_compile_ratio": compile_ratio}
        (options.out / "compare.json").write_text(json.dumps(report, indent=2) + "\n")
        print("\n".join(compare_lines))
        print(f"\nwrote {options.out / 'compare.json'}")
        return

    per_target = _target_timings(specs)
    sharded_page_s = _page_seconds(SHARDED_PAGE)

    analytic = 3 * models.transformer_matmul_flops(**CONFIG)
    baseline = rows[0]
    flops_error = baseline.flops / analytic - 1

    values = _random(specs)
    timings = []
    for row in rows:
        times = _step_times(models.transformer_loss(row.policy), values, options.repeats)
        timings.append({
            "policy": row.name, "median_s": statistics.median(times), "min_s": min(times),
            "repeats": len(times), "temp_bytes": row.temp_bytes, "flops": row.flops,
            "flops_ratio": row.flops_ratio, "residual_bytes": row.residual_bytes,
        })

    n, d = EXERCISE_SHAPE
    w = jnp.ones((d, d))
    x = jnp.ones((n, d))
    one_matmul = 2 * n * d * d

    def exercise_measure(f):
        compiled = jax.jit(jax.grad(f, argnums=(0, 1, 2))).lower(w, w, x).compile()
        return {"flops": count_flops(compiled).total,
                "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
                "dot_ops": len(DOT_OP.findall(compiled.as_text()))}

    exercise = {"shape_n_d": [n, d], "one_matmul_flops": one_matmul,
                "checkpoint_dot_policy": exercise_measure(checkpoint_dot_policy),
                "no_checkpoint": exercise_measure(models.exercise_loss(None))}
    exercise["flops_difference"] = (exercise["checkpoint_dot_policy"]["flops"]
                                    - exercise["no_checkpoint"]["flops"])
    exercise_no_matmul_recomputed = (
        exercise["checkpoint_dot_policy"]["dot_ops"] == exercise["no_checkpoint"]["dot_ops"]
        and 0 <= exercise["flops_difference"] < one_matmul / 100)

    report = {
        "jax": jax.__version__,
        "platform": jax.devices()[0].platform,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "config": CONFIG,
        "compare_policies_s": {"standard_policies": standard_s, "standard_count": len(STANDARD_POLICIES) + 1,
                               "all_default_policies": all_s, "all_count": len(rows)},
        "compare_policies_compile_ratio": compile_ratio,
        "flops": {"analytic_matmul_flops_of_grad": analytic, "measured_no_checkpoint": baseline.flops,
                  "xla_reported_no_checkpoint": baseline.reported_flops, "relative_error": flops_error},
        "exercise_flops": exercise,
        "sharded_page_execute_s": sharded_page_s,
        "jit_grad_step": timings,
        "compare_policies_per_target": per_target,
        "targets": {
            "compare_policies_standard_under_15s": standard_s < COMPARE_TARGET_S,
            "compare_policies_wall_within_1.15x_compile": compile_ratio["met"],
            "flops_within_3_percent_of_analytic": abs(flops_error) <= FLOPS_TOLERANCE,
            "exercise_no_matmul_recomputed": exercise_no_matmul_recomputed,
        },
    }
    (options.out / "policies.json").write_text(json.dumps(report, indent=2) + "\n")

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = [
        "# Policy benchmark",
        "",
        f"JAX {report['jax']} on {report['platform']}, {report['cpu_count']} CPUs. "
        f"Reference transformer: {CONFIG}.",
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| compare_policies over the {len(STANDARD_POLICIES)} standard policies + baseline < "
        f"{COMPARE_TARGET_S:.0f} s | {standard_s:.2f} s | "
        f"{verdict(report['targets']['compare_policies_standard_under_15s'])} |",
        f"| (all {len(rows)} default rows, names included) | {all_s:.2f} s | |",
        f"| compare_policies wall time <= {COMPILE_RATIO_TARGET} x the sum of its compile times | "
        f"{standard['wall_over_compile']:.3f} (standard), {every['wall_over_compile']:.3f} (all) | "
        f"{verdict(compile_ratio['met'])} |",
        f"| FLOPs within 3% of the analytic matmul count (3 x forward) | {baseline.flops:,} vs "
        f"{analytic:,} ({flops_error:+.2%}); XLA reports {baseline.reported_flops:,} | "
        f"{verdict(report['targets']['flops_within_3_percent_of_analytic'])} |",
        f"| exercise jit(grad) at N={n}, D={d}: checkpoint_dot_policy recomputes no matmul "
        f"(same dot ops in the compiled HLO, extra FLOPs < 1% of one matmul) | "
        f"dots {exercise['checkpoint_dot_policy']['dot_ops']} vs {exercise['no_checkpoint']['dot_ops']}; "
        f"FLOPs {exercise['checkpoint_dot_policy']['flops']:,} vs {exercise['no_checkpoint']['flops']:,} "
        f"(difference {exercise['flops_difference']:+,}, one matmul {one_matmul:,}) | "
        f"{verdict(report['targets']['exercise_no_matmul_recomputed'])} |",
        f"| (exercise temp memory, {report['platform']}: checkpoint_dot_policy vs no checkpoint) | "
        f"{exercise['checkpoint_dot_policy']['temp_bytes']:,} vs "
        f"{exercise['no_checkpoint']['temp_bytes']:,} bytes | |",
        "",
        "## compare_policies: wall time and compile time",
        "",
        *compare_lines,
        "",
        f"Sharded training page (docs/sharded.md, 8 simulated devices): executed in "
        f"{sharded_page_s:.1f} s.",
        "",
        "## compare_policies per target",
        "",
        *_target_lines(per_target),
        "",
        f"## jit(grad) step time per policy (median of {options.repeats}, warm-up excluded)",
        "",
        "| policy | median ms | min ms | temp MiB | FLOPs ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in timings:
        lines.append(f"| {t['policy']} | {1e3 * t['median_s']:.1f} | {1e3 * t['min_s']:.1f} | "
                     f"{t['temp_bytes'] / 2**20:.2f} | {t['flops_ratio']:.3f} |")
    (options.out / "policies.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {options.out / 'policies.json'} and {options.out / 'policies.md'}")


if __name__ == "__main__":
    main()
