"""XLA's measured matmul throughput on an H100 by shape, for the step-time estimate of a GPU's dots."""

from __future__ import annotations

import functools
import itertools
import math
import pathlib

__all__ = ["TABLES", "dot_rate"]

_FOLDER = pathlib.Path(__file__).resolve().parent / "data"
TABLES = {"sm_90": ("xla-sm90-matmul.txt", "h100")}
"""The tables this package carries, by XLA's key, each with its file and the target it was measured on:
``"sm_90"``, measured by XLA on an NVIDIA H100 (SXM)."""
_KINDS = ("bf16", "f32")  # the table's columns: bf16 (float16 runs at its rate) and f32 (TF32)
_RANGES = ((1, 4), (256, 4096), (256, 4096), (256, 4096))  # b, m, n, k: the sizes the table was measured at


@functools.cache
def _table(name: str) -> dict[tuple[int, int, int, int], dict[str, float]]:
    """A table's FLOP/s by ``(b, m, n, k)`` and operand kind."""
    rows = {}
    for line in (_FOLDER / TABLES[name][0]).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            b, m, n, k, bf16, f32 = (int(value) for value in line.split())
            rows[(b, m, n, k)] = {"bf16": float(bf16), "f32": float(f32)}
    return rows


def _corners(size: int, low: int, high: int) -> list[tuple[int, float]]:
    """The table's sizes on either side of ``size`` (powers of two), each with its weight, linear in log2 of size."""
    position = math.log2(min(max(size, low), high))
    below = 2 ** math.floor(position)
    share = position - math.floor(position)
    return [(below, 1 - share)] + ([(below * 2, share)] if share else [])


def dot_rate(name: str, b: int, m: int, n: int, k: int, kind: str) -> float | None:
    """The FLOP/s of one dot of ``b`` batches of ``m x k`` by ``k x n`` in a table, ``None`` for a kind it lacks.

    The table holds sizes that are powers of two: b from 1 to 4, m, n and k from 256 to
    4096. Between them the rate is interpolated linearly in the logarithm of each size;
    outside them each size is held at the table's edge, as XLA's own interpolator does
    (so a 64-batch dot, or one with k = 128, runs at the rate of the nearest measured one).

    Examples:
        >>> round(dot_rate("sm_90", 1, 4096, 4096, 4096, "bf16") / 1e12, 1)  # measured at this size
        786.0
        >>> dot_rate("sm_90", 1, 8192, 8192, 8192, "bf16") == dot_rate("sm_90", 1, 4096, 4096, 4096, "bf16")
        True
        >>> 786.1e12 > dot_rate("sm_90", 1, 3000, 4096, 4096, "bf16") > 760.4e12  # between 2048 and 4096 rows
        True
        >>> dot_rate("sm_90", 1, 4096, 4096, 4096, "f8") is None
        True
    """
    if kind not in _KINDS:
        return None
    table = _table(name)
    corners = [_corners(size, low, high) for size, (low, high) in zip((b, m, n, k), _RANGES, strict=True)]
    rate = 0.0
    for picked in itertools.product(*corners):
        weight = math.prod(share for _, share in picked)
        rate += weight * table[tuple(size for size, _ in picked)][kind]
    return rate
