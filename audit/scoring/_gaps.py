"""Shortcut gaps: how much a score falls once labels or order change.

A compressor that keeps what the future needs keeps it whatever the labels are
called and whatever order the log came in; one that leans on a naming or order
accident loses it under renaming or permutation.  Per system and transform, the gap
is the identity rate minus the transformed rate, in two named forms:

* ``gap_blocks``: identity pass rate minus the transformed *block* pass rate (every
  instance and repeat counts once), the typical loss;
* ``gap_pairs``: identity pass rate minus the rate of source pairs that pass on
  *every* transformed instance, the worst case (it grows with the number of
  instances, so it is never compared across runs with different K).
"""

from __future__ import annotations

from typing import Any

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._table import Scores

GAP_METRICS = ("reveal", "adequacy", "late_reference_adequacy", "current")


def _rate(cell: dict[str, Any], metric: str, unit: str) -> float | None:
    n = cell.get(f"{metric}_{unit}_n", 0)
    return None if not n else cell[f"{metric}_{unit}_k"] / n


def shortcut_gaps(scores: Scores, family: str = ALL) -> list[dict[str, Any]]:
    """One entry per (system, non-identity transform) with an identity cell to compare."""
    out: list[dict[str, Any]] = []
    for system in scores.systems:
        base = scores.cell(system, IDENTITY, family)
        if base is None:
            continue
        for transform in scores.transforms():
            moved = scores.cell(system, transform, family) if transform != IDENTITY else None
            if moved is None:
                continue
            entry: dict[str, Any] = {
                "reader": system[0], "condition": system[1], "budget": system[2],
                "transform": transform, "family": family,
            }  # fmt: skip
            for metric in GAP_METRICS:
                before = _rate(base, metric, "pairs")
                for unit in ("blocks", "pairs"):
                    after = _rate(moved, metric, unit)
                    gap = None if before is None or after is None else round(before - after, 4)
                    entry[f"{metric}_gap_{unit}"] = gap
            out.append(entry)
    return out
