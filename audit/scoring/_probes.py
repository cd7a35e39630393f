"""Where a shortcut probe does as well as a real condition: the audit's blind spots.

A probe (``compressors`` kind ``probe``) knows nothing of semantics, only labels and
arrival order.  If a probe's joint J (blocks) is at least a strict condition's under
*every* transform the run made, then this audit cannot tell that condition from a
naming or order heuristic: add a transform that breaks the heuristic (``relabel``
breaks label length and order, ``permute`` arrival order), or do not trust the
condition's score.
"""

from __future__ import annotations

from typing import Any

from audit.scoring._metrics import ALL
from audit.scoring._table import Scores


def _rate(cell: dict[str, Any] | None) -> float | None:
    if cell is None or not cell["joint_J_blocks_n"]:
        return None
    return float(cell["joint_J_blocks_k"]) / float(cell["joint_J_blocks_n"])


def _at_least(probe: float | None, condition: float | None) -> bool:
    return probe is not None and condition is not None and probe >= condition


def probe_matches(scores: Scores) -> list[dict[str, Any]]:
    """One entry per (strict condition, probe) pair at the same reader and budget where
    the probe's joint J is at least the condition's under every transform."""
    probes = [s for s in scores.systems if scores.kinds.get(s[1]) == "probe"]
    transforms = scores.transforms()
    out = []
    for system in scores.contestants():
        reader, condition, budget = system
        own = {t: _rate(scores.cell(system, t, ALL)) for t in transforms}
        if not any(rate for rate in own.values()):
            continue  # a condition that passes nothing needs no probe to be doubted
        for probe in probes:
            if (probe[0], probe[2]) != (reader, budget):
                continue
            theirs = {t: _rate(scores.cell(probe, t, ALL)) for t in transforms}
            if all(_at_least(theirs[t], own[t]) for t in transforms):
                out.append(
                    {
                        "reader": reader,
                        "budget": budget,
                        "condition": condition,
                        "probe": probe[1],
                        "transforms": transforms,
                        "condition_joint_J": own,
                        "probe_joint_J": theirs,
                    }
                )
    return out
