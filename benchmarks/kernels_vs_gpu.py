"""Each kernel's estimate beside its measured duration, from a run of ``profile_on_gpu.py``.

For every profiled program: the package's :func:`remat_guide.targets.kernel_times` of the
very program that ran (its HLO came back with the profile), joined to the profile's
device time per instruction (``hlo_op``). Prints, per program, the step's measured time,
the profile's kernel time, the estimate's, and the errors of matmul-bound and
memory-bound kernels apart, then the kernels the estimate misses most::

    python benchmarks/kernels_vs_gpu.py docs/_hardware/h200-2026-11-30-kernels.json \
        docs/_hardware/h200-2026-11-30-kernels-hlo.tar.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile

from remat_guide.targets import kernel_times


def compare(record: dict, text: str, target: str) -> dict:
    """One program's kernels, estimated and measured (microseconds per step), and its totals."""
    measured = {name: entry[0] for name, entry in record["profile"]["ops"].items()}
    rows = []
    for kernel in kernel_times(text, target):
        bound = "matmul" if kernel.matmul_seconds > kernel.memory_seconds else "memory"
        rows.append((kernel.name, bound, kernel.seconds * 1e6, measured.pop(kernel.name, 0.0), kernel.count))
    unmatched = sum(measured.values())
    totals = {bound: [sum(r[2] for r in rows if r[1] == bound), sum(r[3] for r in rows if r[1] == bound)]
              for bound in ("matmul", "memory")}
    return {"rows": rows, "unmatched_us": unmatched, "unmatched": sorted(measured.items(), key=lambda kv: -kv[1])[:5],
            "totals": totals}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("hlo")
    parser.add_argument("--target", default="h200")
    parser.add_argument("--top", type=int, default=6)
    options = parser.parse_args()
    found = json.loads(open(options.profile, encoding="utf-8").read())
    with tarfile.open(options.hlo) as archive:
        texts = {member.name.removesuffix(".hlo.gz"): gzip.decompress(archive.extractfile(member).read()).decode()
                 for member in archive.getmembers()}
    for record in found["programs"]:
        key = f"{record['stage']}-{record['policy']}"
        if "profile" not in record or key not in texts:
            print(f"{key}: {record.get('error', 'no profile')}")
            continue
        result = compare(record, texts[key], options.target)
        estimate = sum(r[2] for r in result["rows"]) / 1e3
        profiled = record["profile"]["kernel_ms"]
        print(f"\n{key}: step {record['step_ms_median']:.2f} ms, device span {record['profile']['span_ms']:.2f} ms, "
              f"kernels {profiled:.2f} ms; estimate {estimate:.2f} ms ({estimate / profiled - 1:+.1%} of the kernels)")
        for bound, (est, meas) in result["totals"].items():
            print(f"  {bound}-bound kernels: estimate {est / 1e3:.2f} ms, measured {meas / 1e3:.2f} ms"
                  + (f" ({est / meas - 1:+.1%})" if meas else ""))
        print(f"  measured in no estimated kernel: {result['unmatched_us'] / 1e3:.2f} ms "
              f"{[(n[:40], round(t)) for n, t in result['unmatched']]}")
        misses = sorted(result["rows"], key=lambda r: -abs(r[3] - r[2]))[:options.top]
        for name, bound, est, meas, count in misses:
            print(f"    {name[:48]:48} {bound:6} x{count:<4} est {est:9.1f} us  measured {meas:9.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
