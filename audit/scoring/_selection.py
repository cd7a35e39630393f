"""Where current accuracy would pick a different condition than reveal accuracy.

The audit's central warning: a condition that is correct now can be insufficient
later, so choosing by current accuracy can pick the wrong memory.  Per (reader,
budget), at identity, over all families, conditions are ranked by their rate of
source pairs passing: current accuracy's best (ties included) against reveal
accuracy's best.  An *inversion* is two conditions where current accuracy strictly
prefers one and reveal accuracy strictly prefers the other; a tie on current
accuracy is no preference, and is counted apart when reveal accuracy splits it.
"""

from __future__ import annotations

from typing import Any

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._table import Scores


def _rate(cell: dict[str, Any], metric: str) -> float:
    n = cell[f"{metric}_pairs_n"]
    return cell[f"{metric}_pairs_k"] / n if n else 0.0


def selection_warnings(scores: Scores) -> list[dict[str, Any]]:
    """One entry per (reader, budget) with two or more conditions; ``warn`` is true
    where current accuracy's best differs from reveal accuracy's or an inversion exists."""
    by_block: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for reader, condition, budget in scores.systems:
        cell = scores.cell((reader, condition, budget), IDENTITY, ALL)
        if cell is not None:
            by_block.setdefault((reader, budget), {})[condition] = cell
    out: list[dict[str, Any]] = []
    for (reader, budget), cells in by_block.items():
        if len(cells) < 2:
            continue
        current = {c: _rate(cell, "current") for c, cell in cells.items()}
        reveal = {c: _rate(cell, "reveal") for c, cell in cells.items()}
        best_current = [c for c, v in current.items() if v == max(current.values())]
        best_reveal = [c for c, v in reveal.items() if v == max(reveal.values())]
        inversions = [
            {"current_prefers": a, "reveal_prefers": b,
             "current": [current[a], current[b]], "reveal": [reveal[a], reveal[b]]}
            for a in current
            for b in current
            if a != b and current[a] > current[b] and reveal[a] < reveal[b]
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
