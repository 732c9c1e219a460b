"""Checks the ahead-of-time memory figures against the compiler of a real GPU or TPU.

``compare_policies(..., target="h100")`` and the other targets compile for an accelerator
that is not on the machine. Run on a machine that has one, this script compiles the same
programs, ``jax.jit(jax.grad(loss))`` of the reference transformer and of the exercise
pipeline under a few checkpoint policies, twice: once for the local device, with the
arguments placed on it, and once for the matching entry of
``remat_guide.targets.TARGETS``, ahead of time as the site does. It prints the two
``memory_analysis()`` figures side by side (temp, peak, host temp, argument and output
bytes) and their differences. These are compiler figures, XLA's buffer assignment, not a
measurement of a run; ``--run`` also runs each local program once and reports the
backend's ``peak_bytes_in_use`` where it provides one.

How to run it, on the machine with the GPU or TPU::

    pip install -e .            # in a checkout of this repository, with JAX for that device
    python benchmarks/check_on_hardware.py                  # compile only
    python benchmarks/check_on_hardware.py --run --out results/

Do not set ``JAX_PLATFORMS=cpu`` there (``make`` sets it; this script does not): JAX must
start the accelerator. The target is found by comparing ``jax.devices()[0].device_kind``
with ``Target.device_kind``; ``--target NAME`` picks one by hand. On a machine without an
accelerator the script says so and exits 0, compiling nothing.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax

from remat_guide import models
from remat_guide.targets import TARGETS, place, target, target_devices

TRANSFORMER = dict(layers=4, batch=4, seq=128, d_model=256, heads=4, mlp_dim=1024)
EXERCISE = dict(n=1024, d=512)
POLICIES = {
    "no checkpoint": None,
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "save_only_these_names('mlp_hidden')": jax.checkpoint_policies.save_only_these_names("mlp_hidden"),
    "offload 'mlp_hidden' to pinned_host": jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["mlp_hidden"],
        offload_src="device", offload_dst="pinned_host"),
}
# The exercise pipeline tags no value with checkpoint_name, so the name-based policies
# would only repeat nothing_saveable there.
NAME_BASED = {"save_only_these_names('mlp_hidden')", "offload 'mlp_hidden' to pinned_host"}
MODELS = {
    "transformer": (models.transformer_loss, models.transformer_args(**TRANSFORMER), set()),
    "exercise": (models.exercise_loss, models.exercise_args(**EXERCISE), NAME_BASED),
}
FIGURES = {  # the name printed, and the attribute of memory_analysis()
    "temp": "temp_size_in_bytes",
    "peak": "peak_memory_in_bytes",
    "host temp": "host_temp_size_in_bytes",
    "argument": "argument_size_in_bytes",
    "output": "output_size_in_bytes",
}


def memory_figures(compiled) -> dict[str, int]:
    memory = compiled.memory_analysis()
    return {name: int(getattr(memory, attribute)) for name, attribute in FIGURES.items()}


def on_device(specs, device):
    """The abstract arguments, each placed on ``device``."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), specs)


def run_once(compiled, specs, device) -> dict:
    """Runs a compiled program once on random arguments; the backend's memory statistics after it."""
    leaves, tree = jax.tree.flatten(specs)
    keys = jax.random.split(jax.random.key(0), len(leaves))
    values = jax.device_put(
        jax.tree.unflatten(tree, [0.05 * jax.random.normal(k, s.shape, s.dtype) for k, s in zip(keys, leaves)]),
        device)
    before = device.memory_stats() or {}
    jax.block_until_ready(compiled(*values))
    after = device.memory_stats() or {}
    if "peak_bytes_in_use" not in after:
        return {"peak_bytes_in_use": None, "note": f"{device.platform} reports no peak_bytes_in_use"}
    # The backend's peak is the high-water mark of the whole process, never reset.
    return {"peak_bytes_in_use": after["peak_bytes_in_use"],
            "raised_by_this_run": after["peak_bytes_in_use"] > before.get("peak_bytes_in_use", 0)}


def matching_target(device) -> str | None:
    """The target whose device_kind is the device's, else the one target whose device_kind begins with it.

    A real H200 reports 'NVIDIA H200' (seen on one, with JAX 0.11.2), XLA's target description
    'NVIDIA H200 141GB HBM3e'; two candidates (an H100 SXM and PCIe) leave the choice to --target.
    """
    kinds = {name: candidate.device_kind for name, candidate in TARGETS.items()}
    exact = [name for name, kind in kinds.items() if kind == device.device_kind]
    if exact:
        return exact[0]
    prefixed = [name for name, kind in kinds.items() if kind.startswith(device.device_kind + " ")]
    return prefixed[0] if len(prefixed) == 1 else None


def print_comparison(model: str, label: str, local: dict, ahead: dict, local_name: str, target_name: str) -> None:
    width = max(len(local_name), len(target_name), 14)
    print(f"\n{model} / {label}")
    print(f"  {'bytes':<10} {local_name:>{width}} {target_name:>{width}} {'difference':>14} {'relative':>8}")
    for name in FIGURES:
        difference = ahead[name] - local[name]
        relative = f"{difference / local[name]:+.1%}" if local[name] else ""
        print(f"  {name:<10} {local[name]:>{width},} {ahead[name]:>{width},} {difference:>+14,} {relative:>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=list(TARGETS), help="the ahead-of-time target to compare with "
                        "(default: the one whose device_kind is the local device's)")
    parser.add_argument("--run", action="store_true",
                        help="also run each local program once and report the backend's peak_bytes_in_use")
    parser.add_argument("--out", type=pathlib.Path, help="write check_on_hardware.json to this folder")
    # For testing without hardware: an ahead-of-time target stands in for the local device,
    # so both columns come from the same compiler and must agree.
    parser.add_argument("--pretend-local", choices=list(TARGETS), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.pretend_local and options.run:
        parser.error("--run needs a real device; --pretend-local has none")

    if options.pretend_local:
        device = target_devices(options.pretend_local, 1)[0]
        local_name = f"pretend local ({options.pretend_local})"
    else:
        devices = jax.devices()
        device = devices[0]
        if device.platform == "cpu":
            print(f"No accelerator: jax.devices() reports {devices} (platform {device.platform!r}, "
                  f"device_kind {device.device_kind!r}). Nothing compiled. Run this script on a machine "
                  "with a GPU or TPU, without JAX_PLATFORMS=cpu.")
            return 0
        local_name = f"local ({device.device_kind})"

    name = options.target or options.pretend_local or matching_target(device)
    if name is None:
        known = ", ".join(f"{n} ({t.device_kind!r})" for n, t in TARGETS.items())
        print(f"No target has the device_kind {device.device_kind!r} of the local device {device}; "
              f"pick one with --target NAME. Known targets: {known}", file=sys.stderr)
        return 2
    chosen = target(name)
    print(f"JAX {jax.__version__}; local device: {device} ({device.device_kind!r}, platform {device.platform})")
    print(f"ahead-of-time target: {chosen.name} ({chosen.device_kind!r}), compiled by {chosen.compiler}")
    print("Figures are memory_analysis() of the compiled programs: the compiler's buffer assignment, not a run.")

    results, failed = [], 0
    for model, (loss_for, specs, skipped) in MODELS.items():
        local_args = place(specs, options.pretend_local) if options.pretend_local else on_device(specs, device)
        target_args = place(specs, chosen)
        for label, policy in POLICIES.items():
            if label in skipped:
                continue
            gradient = jax.jit(jax.grad(loss_for(policy)))
            record = {"model": model, "policy": label}
            try:
                local_compiled = gradient.lower(*local_args).compile()
                record["local"] = memory_figures(local_compiled)
                record["target"] = memory_figures(gradient.lower(*target_args).compile())
                record["difference"] = {k: record["target"][k] - record["local"][k] for k in FIGURES}
                print_comparison(model, label, record["local"], record["target"], local_name, chosen.name)
                if options.run:
                    record["run"] = run = run_once(local_compiled, specs, device)
                    if run["peak_bytes_in_use"] is None:
                        print(f"  run: {run['note']}")
                    else:
                        print(f"  run: peak_bytes_in_use {run['peak_bytes_in_use']:,} (the process's high-water "
                              f"mark; {'raised' if run['raised_by_this_run'] else 'not raised'} by this run)")
            except Exception as error:  # one failing program should not hide the others' figures
                failed += 1
                record["error"] = f"{type(error).__name__}: {error}"
                print(f"\n{model} / {label}\n  FAILED: {record['error']}")
            results.append(record)

    if options.out:
        options.out.mkdir(parents=True, exist_ok=True)
        report = {"jax": jax.__version__, "local_device": str(device), "local_device_kind": device.device_kind,
                  "pretend_local": options.pretend_local, "target": chosen.name,
                  "target_device_kind": chosen.device_kind, "target_compiler": chosen.compiler,
                  "transformer": TRANSFORMER, "exercise": EXERCISE, "programs": results}
        path = options.out / "check_on_hardware.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
