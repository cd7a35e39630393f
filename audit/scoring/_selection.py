"""Where current accuracy would pick a different condition than reveal accuracy.

The audit's central warning: a condition that is correct now can be insufficient
later, so choosing by current accuracy can pick the wrong memory.  Per (reader,
budget), at identity, over all families, the strict conditions (archives are
ceilings and probes the floor: neither is a choice) are ranked by their rate of
source pairs passing: current accuracy's best (ties included) against reveal
accuracy's best.  An *inversion* is two conditions where current accuracy strictly
prefers one and reveal accuracy strictly prefers the other; a tie on current
accuracy is no preference, and is counted apart when reveal accuracy splits it.
"""

from __future__ import annotations

from typing import Any

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._table import Scores


def _bounds(cell: dict[str, Any], metric: str) -> tuple[float, float] | None:
    """The source-pair rate, NA as fail and NA as pass; None when nothing was measured."""
    n = cell[f"{metric}_pairs_n"]
    if not n:
        return None
    return cell[f"{metric}_pairs_k"] / n, cell[f"{metric}_pairs_k_high"] / n


def selection_warnings(scores: Scores) -> list[dict[str, Any]]:
    """One entry per (reader, budget) with two or more measured strict conditions;
    ``warn`` is true where current accuracy's best differs from reveal accuracy's or
    an inversion exists.

    With NA reads a rate is only known within bounds, and a claim must hold whatever
    the NA reads were: a condition is among the best when its upper bound reaches the
    others' best lower bound; an inversion needs current accuracy to prefer ``a``
    even at ``a``'s lower and ``b``'s upper bound, and reveal accuracy the opposite.
    Without NA this is plain ranking, ties included.
    """
    by_block: dict[tuple[str, int], dict[str, tuple[tuple[float, float], tuple[float, float]]]]
    by_block = {}
    for reader, condition, budget in scores.contestants():
        cell = scores.cell((reader, condition, budget), IDENTITY, ALL)
        if cell is None:
            continue
        now, later = _bounds(cell, "current"), _bounds(cell, "reveal")
        if now is not None and later is not None:
            by_block.setdefault((reader, budget), {})[condition] = (now, later)
    out: list[dict[str, Any]] = []
    for (reader, budget), rates in by_block.items():
        if len(rates) < 2:
            continue
        current = {c: r[0] for c, r in rates.items()}
        reveal = {c: r[1] for c, r in rates.items()}
        top_current = max(lo for lo, _ in current.values())
        top_reveal = max(lo for lo, _ in reveal.values())
        best_current = [c for c, (_, hi) in current.items() if hi >= top_current]
        best_reveal = [c for c, (_, hi) in reveal.items() if hi >= top_reveal]
        inversions = [
            {"current_prefers": a, "reveal_prefers": b,
             "current": [current[a][0], current[b][0]], "reveal": [reveal[a][0], reveal[b][0]]}
            for a in current
            for b in current
            if a != b and current[a][0] > current[b][1] and reveal[a][1] < reveal[b][0]
        ]  # fmt: skip
        ties = sum(
            1
            for i, a in enumerate(current)
            for b in list(current)[i + 1 :]
            if current[a] == current[b] and reveal[a] != reveal[b]
        )
        misleading = [c for c in best_current if c not in best_reveal]
        out.append(
            {
                "reader": reader,
                "budget": budget,
                "best_by_current": best_current,
                "best_by_reveal": best_reveal,
                "misleading": misleading,
                "inversions": inversions,
                "ties_split_by_reveal": ties,
                "warn": bool(misleading) or bool(inversions),
            }
        )
    return out
