"""The step-time estimate against every program an H200 timed: ``python benchmarks/estimate_vs_h200.py``.

Prints one row per timed program (the reference transformer at four sizes, six policies
each, and the Llama 3.2 1B training step): the median measured step, the estimate for
``target="h200"`` (host transfers after the kernels), the plain roofline's (every matmul at
70% of the peak, each kernel its longer time: the estimate before it read XLA's matmul
table; reference transformer only), what it would be with the transfers
overlapped as the compiled schedule allows (for the reference transformer; the Llama rows
come from ``compare_policies``, which keeps the estimate only), the estimate's error, and
each policy's time as a ratio to no checkpoint's, estimated and measured. Run it with
``REMAT_GUIDE_FIGURES=docs/_figures`` to read the compiled programs' figures from the
store instead of compiling them.

Then every step that the 2026-11-30 profiling runs timed (``remat_guide.site.profile``),
against the estimate of the very program that H200 compiled, whose HLO came back with
the run: the 8-layer, 0.8 B and Llama 1B programs again, and four layers at the 70B width
with Pallas's attention.
"""

from __future__ import annotations

import pandas as pd

from remat_guide.site import fit, hardware, profile
from remat_guide.targets import estimate_step


def rows() -> pd.DataFrame:
    """Every timed program: measured and estimated seconds, the overlapped bound, and the ratios to no checkpoint."""
    frames = []
    for timing in (hardware.TIMED, hardware.MEASUREMENT):
        compared = hardware.comparison(timing=timing)
        compared = compared[compared.measured_seconds.notna()]
        frames.append(pd.DataFrame({
            "program": compared.config + " " + compared.policy, "file": timing.name,
            "measured": compared.measured_seconds, "estimated": compared.estimated_seconds,
            "roofline": compared.roofline_seconds, "overlapped": compared.overlapped_seconds,
            "est. ratio": compared.estimated_ratio, "meas. ratio": compared.measured_ratio}))
    llama = fit.h200_check()
    frames.append(pd.DataFrame({
        "program": "llama1b " + llama.policy, "file": "h200-2026-11-27-llama1b-timed.json",
        "measured": llama["H200 step"], "estimated": llama["est. step"], "roofline": float("nan"),
        "overlapped": float("nan"),
        "est. ratio": llama["est. vs full"], "meas. ratio": llama["H200 vs full"]}))
    table = pd.concat(frames, ignore_index=True)
    table["error"] = table.estimated / table.measured - 1
    table["roofline error"] = table.roofline / table.measured - 1
    table["ratio error"] = table["est. ratio"] / table["meas. ratio"] - 1
    return table


def device_compiled() -> pd.DataFrame:
    """Every step of the 2026-11-30 runs: measured, and estimated from the program the device compiled."""
    steps = profile.steps(tuple(profile.FILES))
    return pd.DataFrame({
        "run": steps.run, "program": steps.stage.map(profile.STAGES) + ", " + steps.policy,
        "measured": steps.step,
        "estimated": [estimate_step(profile.hlo(r.run, r.stage, r.policy), "h200").seconds
                      for r in steps.itertuples()]}).assign(error=lambda t: t.estimated / t.measured - 1)


def main() -> None:
    table = rows()
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(table.to_string(index=False, formatters={
            "measured": lambda s: f"{s * 1e3:.2f} ms", "estimated": lambda s: f"{s * 1e3:.2f} ms",
            "roofline": lambda s: f"{s * 1e3:.2f} ms", "roofline error": "{:+.1%}".format,
            "overlapped": lambda s: f"{s * 1e3:.2f} ms", "est. ratio": "{:.3f}".format, "meas. ratio": "{:.3f}".format,
            "error": "{:+.1%}".format, "ratio error": "{:+.1%}".format}))
    big = table[table.measured >= 0.01]
    print(f"programs of 10 ms or more: {len(big)}; within 10% of the measured median: "
          f"{(big.error.abs() <= 0.1).sum()}; ratios within 10%: {(big['ratio error'].abs() <= 0.1).sum()}")
    later = device_compiled()
    print("\nThe 2026-11-30 runs, each against the estimate of the program the H200 compiled:")
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(later.to_string(index=False, formatters={
            "measured": lambda s: f"{s * 1e3:.2f} ms", "estimated": lambda s: f"{s * 1e3:.2f} ms",
            "error": "{:+.1%}".format}))
    print(f"steps: {len(later)}; within 10% of the measured median: {(later.error.abs() <= 0.1).sum()}")


if __name__ == "__main__":
    main()
