"""The recipe page's narrow tables: a comparison's rows in four columns a phone can show."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from remat_guide.compare import PolicyRow
from remat_guide.tables import Table
from remat_guide.targets import target


def narrow(rows: Iterable[PolicyRow]) -> Table:
    """Rows compiled for one target as four columns: the policy, the memory that decides the fit, then time and FLOPs.

    On a GPU target the third column is the estimated step time; on a TPU target, where
    no pick ranks on the estimate, whether XLA's TPU compiler compiled the program or refused it.

    Args:
        rows: Rows of ``compare_policies(..., target=...)``, all for the same target.

    Returns:
        The table, with ``table_class="remat-compact"``.

    Raises:
        ValueError: If the rows are empty, have no target, or have several.
    """
    rows = list(rows)
    targets = {row.target for row in rows}
    if not rows or None in targets or len(targets) != 1:
        raise ValueError(f"rows must be compiled for one target, got {sorted(map(str, targets))}")
    gpu = target(rows[0].target).platform != "tpu"
    third = "est. step" if gpu else "compiled"
    frame = pd.DataFrame({
        "policy": [row.name for row in rows],
        "memory": [row.device_bytes for row in rows],
        third: [row.step_seconds if gpu else ("refused" if row.refused else "yes")
                for row in rows],
        "FLOPs vs none": [row.flops_ratio for row in rows],
    })
    units = {"memory": "bytes", "FLOPs vs none": "ratio"}
    if gpu:
        units["est. step"] = "seconds"
    return Table(frame, units=units, table_class="remat-compact")
