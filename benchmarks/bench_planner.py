"""Benchmark of plan_names: compiles and wall time per budget and target, and its answers against every plan.

Part 1, the reference transformer (four blocks, five names): a sweep of device budgets
planned for this machine (keep or recompute), a TPU v5e and an H100 (keep, offload or
recompute), one ``measured`` dict per target shared by the sweep; then each budget planned
on its own, from an empty dict. Each call's wall time, compiles and answer.

Part 2, a small five-name transformer (with ``--exhaustive-models small reference``, the
reference transformer too): all 3**5 = 243 plans, the baseline and the standard
policies compiled once for each exhaustive target; then plan_names' answer for every budget
of several sweeps (five budgets where the plans of names lie; six from below
nothing_saveable to no checkpoint; every distinct device figure and the midpoints, without
and with host budgets) checked against ``pick`` over all of them. A plan that ties with
that answer on FLOPs (within the tolerance), host and device bytes counts as the same
answer. In part 2 the planner runs its own code with each compile answered from that
table, and the answers it asked for are counted; each sweep runs as plan_names does by
default and with ``exact=True`` (no device-byte prediction leaves a plan uncompiled).

Run by `make bench`; writes planner.json and planner.md to the folder given by --out. With
``--before planner.json`` (an earlier run's output) the Markdown shows both runs' figures.
Timings belong here, never on the site's pages.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import time

import jax

import remat_guide.planner
from remat_guide import compare_policies, models, plan_names
from remat_guide._measure import Measurement
from remat_guide.compare import STANDARD_POLICIES
from remat_guide.planner import KEEP, OFFLOAD, RECOMPUTE, cost, pick, plan_label, plan_policy

REFERENCE = dict(layers=4, batch=4, seq=128, d_model=256, heads=4, mlp_dim=1024)
SMALL = dict(layers=2, batch=2, seq=64, d_model=64, heads=2, mlp_dim=256)
NAMES = models.TRANSFORMER_NAMES
PER_BUDGET_LIMIT, PER_SWEEP_LIMIT = 30, 60


def _budgets(rows: dict) -> list[int]:
    """Six device budgets from just below nothing_saveable's figure to no checkpoint's."""
    low = rows["nothing_saveable"].device_bytes
    high = rows["no checkpoint"].device_bytes
    return [round(0.97 * low)] + [round(low + (high - low) * k / 4) for k in range(5)]


def _rows(measured: dict) -> int:
    return sum(isinstance(key, str) for key in measured)


def _plan(target, budget, measured) -> dict:
    start, known = time.perf_counter(), _rows(measured)
    try:
        row = plan_names(models.transformer_loss, *models.transformer_args(**REFERENCE),
                         budget_bytes=budget, measured=measured, target=target)
    except ValueError as error:  # nothing fits: what it compiled to find out is in measured
        return {"budget_bytes": budget, "seconds": time.perf_counter() - start,
                "compiled": _rows(measured) - known, "chosen": "nothing fits", "error": str(error)}
    return {"budget_bytes": budget, "seconds": time.perf_counter() - start, "compiled": row.compiled,
            "chosen": row.name, "choices": row.choices, "device_bytes": row.device_bytes,
            "host_bytes": row.host_bytes, "flops_ratio": row.flops_ratio, "search": row.search}


def reference_sweeps(targets: list[str | None]) -> list[dict]:
    """Part 1: a shared sweep, then each budget alone, per target (None: this machine)."""
    results = []
    args = models.transformer_args(**REFERENCE)
    for target in targets:
        standard = {row.name: row for row in compare_policies(
            models.transformer_loss, *args, policies=list(STANDARD_POLICIES), target=target)}
        budgets = _budgets(standard)
        measured: dict = {}
        start = time.perf_counter()
        shared = [_plan(target, budget, measured) for budget in budgets]
        sweep_s = time.perf_counter() - start
        alone = [_plan(target, budget, {}) for budget in budgets]
        results.append({"target": target, "label": target or "this machine (keep or recompute)",
                        "sweep_seconds": sweep_s,
                        "sweep_compiled": sum(p["compiled"] for p in shared),
                        "shared": shared, "alone": alone})
        print(f"{target}: sweep {sweep_s:.1f} s, {results[-1]['sweep_compiled']} compiled; alone "
              f"{[p['compiled'] for p in alone]}", flush=True)
    return results


def _equally_good(row, truth, tolerance: float = 5e-3) -> bool:
    """The planner's row is the answer of all plans, or ties with it on every figure of the objective."""
    if row is None or truth is None:
        return row is truth
    return row.name == truth.name or (
        row.host_bytes == truth.host_bytes and row.device_bytes == truth.device_bytes
        and abs(cost(row) - cost(truth)) <= tolerance * min(cost(row), cost(truth)))


def _plans():
    for answers in itertools.product((KEEP, OFFLOAD, RECOMPUTE), repeat=len(NAMES)):
        keep = [n for n, a in zip(NAMES, answers) if a == KEEP]
        offload = [n for n, a in zip(NAMES, answers) if a == OFFLOAD]
        if keep or offload:
            yield plan_label(keep, offload), plan_policy(keep, offload)


MODELS = {"small": SMALL, "reference": REFERENCE}


def exhaustive(target: str, model: str = "small") -> dict:
    """Part 2: every plan of a model compiled, then dense sweeps checked against them."""
    args = models.transformer_args(**MODELS[model])
    policies = {**{s: getattr(jax.checkpoint_policies, s) for s in STANDARD_POLICIES}, **dict(_plans())}
    start = time.perf_counter()
    rows = {row.name: row for row in compare_policies(models.transformer_loss, *args, policies=policies,
                                                      target=target)}
    compile_s = time.perf_counter() - start
    asked = []

    def answered(programs, inputs):  # the planner's compiles, answered from the table
        asked.extend(program.label for program in programs)
        return [Measurement(rows[p.label].residual_bytes, rows[p.label].temp_bytes, rows[p.label].flops,
                            rows[p.label].reported_flops, rows[p.label].peak_bytes, rows[p.label].host_bytes,
                            rows[p.label].argument_bytes, rows[p.label].output_bytes, rows[p.label].alias_bytes,
                            rows[p.label].step_seconds)
                for p in programs]

    figures = sorted({row.device_bytes for row in rows.values()})
    dense = sorted(figures + [(a + b) // 2 for a, b in zip(figures, figures[1:])])
    hosts = sorted({row.host_bytes for row in rows.values()})
    low, high = rows["nothing_saveable"].device_bytes, rows["dots_with_no_batch_dims_saveable"].device_bytes
    sweeps_to_check = [("names (5 budgets)", [round(low + (high - low) * k / 4) for k in range(5)], None),
                       ("wide (6 budgets)", _budgets(rows), None)]
    sweeps_to_check += [(f"every figure ({len(dense)} budgets)", dense, host)
                        for host in [None, 0, *hosts[1:-1:max(1, (len(hosts) - 2) // 3)]]]
    real = remat_guide.planner.measure
    remat_guide.planner.measure = answered
    sweeps = []
    try:
        for (label, budgets, host_budget), exact, offload in itertools.product(
                sweeps_to_check, (False, True), (True, False)):
            candidates = [row for row in rows.values() if offload or row.host_bytes == 0
                          and "offload" not in row.name]
            measured: dict = {}
            asked.clear()
            wrong, per_budget = [], []
            for budget in budgets:
                before = len(asked)
                truth = pick(candidates, budget, host_budget)
                try:
                    row = plan_names(models.transformer_loss, *args, budget_bytes=budget,
                                     host_budget_bytes=host_budget, measured=measured, target=target,
                                     offload=offload, exact=exact)
                except ValueError:
                    row = None
                per_budget.append(len(asked) - before)
                if not _equally_good(row, truth):
                    wrong.append({"budget": budget, "planner": row and row.name,
                                  "every plan": truth and truth.name})
            sweeps.append({"sweep": label, "host_budget_bytes": host_budget, "offload": offload, "exact": exact,
                           "budgets": len(budgets), "compiled": len(asked), "per_budget": per_budget,
                           "max_per_budget": max(per_budget), "wrong": wrong})
            print(f"  {target} {label} host {host_budget} offload {offload} exact {exact}: "
                  f"{len(asked)} compiled, max {max(per_budget)} per budget, "
                  f"{len(wrong)} not as good as all plans", flush=True)
    finally:
        remat_guide.planner.measure = real
    return {"target": target, "model": model, "plans": len(rows), "compile_seconds": compile_s,
            "sweeps": sweeps}


def _mib(value) -> str:
    return "—" if value is None else f"{value / 2**20:.2f}"


def _lines(report: dict, before: dict | None) -> list[str]:
    lines = ["# plan_names benchmark", "",
             f"JAX {report['jax']} on {report['platform']}, {report['cpu_count']} CPUs. Reference "
             f"transformer {REFERENCE}; small model {SMALL}.", "",
             f"## Reference transformer: compiles and wall time per budget (limits: {PER_BUDGET_LIMIT} "
             f"per budget alone, {PER_SWEEP_LIMIT} per sweep)", ""]
    old = {r["target"]: r for r in (before or {}).get("reference", [])}
    for result in report["reference"]:
        prior = old.get(result["target"])
        lines += [f"### {result['label']}", "",
                  f"Sweep of {len(result['shared'])} budgets sharing one measured dict: "
                  f"{result['sweep_compiled']} programs compiled in {result['sweep_seconds']:.1f} s"
                  + (f" (before: {prior['sweep_compiled']} in {prior['sweep_seconds']:.1f} s)" if prior else "")
                  + ".", "",
                  "| budget MiB | chosen | device MiB | host MiB | FLOPs ratio | shared: compiled | s "
                  "| alone: compiled | s |" + (" before alone: compiled | s |" if prior else ""),
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if prior else "")]
        for i, (shared, alone) in enumerate(zip(result["shared"], result["alone"])):
            cells = [_mib(shared["budget_bytes"]), shared["chosen"], _mib(shared.get("device_bytes")),
                     _mib(shared.get("host_bytes")),
                     f"{shared['flops_ratio']:.3f}" if "flops_ratio" in shared else "—",
                     str(shared["compiled"]), f"{shared['seconds']:.1f}", str(alone["compiled"]),
                     f"{alone['seconds']:.1f}"]
            if prior and i < len(prior["alone"]):
                cells += [str(prior["alone"][i]["compiled"]), f"{prior['alone'][i]['seconds']:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## The planner against all 243 plans", ""]
    for result in report["exhaustive"]:
        lines += [f"### {result['model']} model, {result['target']}: {result['plans']} rows compiled in "
                  f"{result['compile_seconds']:.0f} s", "",
                  "| sweep | host budget | offload | exact | compiled by the sweep | most for one budget "
                  "| not as good as all plans |",
                  "|---|---|---|---|---:|---:|---:|"]
        lines += [f"| {s['sweep']} | {s['host_budget_bytes'] if s['host_budget_bytes'] is not None else 'none'} | "
                  f"{s['offload']} | {s['exact']} | {s['compiled']} | {s['max_per_budget']} "
                  f"| {len(s['wrong'])} |"
                  for s in result["sweeps"]]
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("_build/bench"))
    parser.add_argument("--targets", nargs="*", default=["cpu", "tpu-v5e", "h100"],
                        help="targets of the reference sweeps (cpu: this machine, keep or recompute)")
    parser.add_argument("--exhaustive", nargs="*", default=["tpu-v5e", "h100"],
                        help="targets to compile all 243 plans of each exhaustive model for")
    parser.add_argument("--exhaustive-models", nargs="*", default=["small"], choices=sorted(MODELS),
                        help="models to compile all 243 plans of, for each exhaustive target")
    parser.add_argument("--before", type=pathlib.Path, default=None,
                        help="an earlier planner.json, shown beside this run")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    before = json.loads(options.before.read_text()) if options.before else None
    report = {"jax": jax.__version__, "platform": jax.devices()[0].platform, "cpu_count": os.cpu_count(),
              "reference": reference_sweeps([None if t == "cpu" else t for t in options.targets]),
              "exhaustive": [exhaustive(target, model) for model in options.exhaustive_models
                             for target in options.exhaustive]}
    report["limits_met"] = all(
        p["compiled"] <= PER_BUDGET_LIMIT for r in report["reference"] for p in r["alone"]) and all(
        r["sweep_compiled"] <= PER_SWEEP_LIMIT for r in report["reference"])
    report["answers_match"] = all(not s["wrong"] for r in report["exhaustive"] for s in r["sweeps"]
                                  if not s["exact"])
    report["exact_answers_match"] = all(not s["wrong"] for r in report["exhaustive"] for s in r["sweeps"]
                                        if s["exact"])
    (options.out / "planner.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = _lines(report, before)
    lines += [f"Compile limits met: {report['limits_met']}. Every answer that of all plans: "
              f"{report['answers_match']}; with exact=True: {report['exact_answers_match']}."]
    (options.out / "planner.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {options.out / 'planner.json'} and {options.out / 'planner.md'}")


if __name__ == "__main__":
    main()
