"""Where current accuracy would pick a different condition than reveal accuracy.

The audit's central warning: a memory correct now can be insufficient later.  Per
(reader, budget), at identity, the strict conditions are ranked by source pairs
passing, current accuracy's best (ties included) against reveal accuracy's.  An
*inversion* is two conditions the two scores strictly order the other way round (a
tie on current that reveal splits is counted apart).  Each carries the exact McNemar
p of both scores on the pairs both determined, and is ``within_noise`` unless both are
below 0.05; each wrong pick carries the p of its reveal difference from reveal
accuracy's best.  A warning whose every reversal is within noise says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._stats import ALPHA, PairedTable, mcnemar_exact
from audit.scoring._table import Scores

System = tuple[str, str, int]
Passes = dict[System, dict[str, int]]
"""Per system: each source pair's pass (1) or fail (0), where NA leaves it determined."""


def _passes(scores: Scores, metric: str) -> Passes:
    frame = scores.pairs.get(metric)
    out: Passes = {}
    if frame is None or frame.empty:
        return out
    frame = frame[(frame["transform"] == IDENTITY) & (frame["every_lo"] == frame["every_hi"])]
    columns = ["reader", "condition", "budget", "source_pair_id", "every_lo"]
    for reader, condition, budget, pair, value in zip(
        *(frame[c].tolist() for c in columns), strict=True
    ):
        out.setdefault((reader, condition, int(budget)), {})[pair] = int(value)
    return out


def _mcnemar(passes: Passes, a: System, b: System) -> float | None:
    """Exact McNemar p of two systems on the source pairs both determined (None: none)."""
    first, second = passes.get(a, {}), passes.get(b, {})
    shared = first.keys() & second.keys()
    if not shared:
        return None
    pairs = [(first[p], second[p]) for p in shared]
    table = PairedTable(
        both=sum(bool(x and y) for x, y in pairs),
        only_a=sum(bool(x and not y) for x, y in pairs),
        only_b=sum(bool(y and not x) for x, y in pairs),
        neither=sum(bool(not x and not y) for x, y in pairs),
    )
    return mcnemar_exact(table)


def _noise(p: float | None) -> bool:
    return p is None or p >= ALPHA


def _bounds(cell: dict[str, Any], metric: str) -> tuple[float, float] | None:
    """The source-pair rate, NA as fail and NA as pass; None when nothing was measured."""
    n = cell[f"{metric}_pairs_n"]
    if not n:
        return None
    return cell[f"{metric}_pairs_k"] / n, cell[f"{metric}_pairs_k_high"] / n


class Inversion(BaseModel):
    """Two conditions current accuracy ranks one way and reveal accuracy the other."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    current_prefers: str
    reveal_prefers: str
    current: tuple[float, float]
    """Current accuracy's source-pair rates of (``current_prefers``, ``reveal_prefers``)."""
    reveal: tuple[float, float]
    current_p: float | None = None
    """Exact McNemar p of the two on current accuracy (None: no pair both determined)."""
    reveal_p: float | None = None
    within_noise: bool = True
    """Not significant on both accuracies (uncorrected p < ``ALPHA`` on each)."""


class SelectionWarning(BaseModel):
    """Per (reader, budget): what current and reveal accuracy each rank best, with the
    one text the console and the report both show (summary.json keeps the fields)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    reader: str
    budget: int
    best_by_current: list[str]
    best_by_reveal: list[str]
    misleading: list[str]
    """Conditions current accuracy ranks best that reveal accuracy does not."""
    misleading_reveal_p: dict[str, dict[str, float | None]]
    """Each misleading condition -> reveal accuracy's best -> their reveal McNemar p."""
    inversions: list[Inversion]
    ties_split_by_reveal: int
    warn: bool
    within_noise: bool

    def text(self) -> str:
        """Which condition each accuracy ranks best, which one current accuracy would
        pick wrongly, the p of its reveal difference, and, when every reversal is
        within noise, that no reversal is significant on both accuracies.  Every p here
        is uncorrected."""
        text = (
            f"at {self.budget} B, current accuracy (answers right now) ranks "
            f"{', '.join(self.best_by_current)} best, but reveal accuracy (after the future "
            f"update) ranks {', '.join(self.best_by_reveal)} best"
        )
        if self.misleading:
            text += f": choosing by current accuracy would pick {', '.join(self.misleading)}"
            ps = [p for found in self.misleading_reveal_p.values() for p in found.values()]
            shown = ", ".join(dict.fromkeys(f"{p:.2g}" for p in ps if p is not None))
            if shown:
                text += f" (reveal difference: exact McNemar p {shown}, uncorrected)"
        if self.within_noise:
            text += (
                ". Within noise: no reversal is significant on both current and reveal "
                "accuracy (exact McNemar on these source pairs, uncorrected p < 0.05 on each)"
            )
        return text + "."


def noise_note(flags: Sequence[SelectionWarning]) -> str:
    """Reversals all within noise, at several budgets, in one line: the console's
    default (three such warnings took 18 lines of a four-budget run); each one's
    ``text`` is under --verbose and in the report."""
    readers = sorted({flag.reader for flag in flags})
    who = "" if readers == ["exact"] else f" (reader {', '.join(readers)})"
    budgets = ", ".join(dict.fromkeys(str(flag.budget) for flag in flags))
    return (
        f"at {budgets} B{who}, current accuracy and reveal accuracy rank different "
        "conditions best, within noise: no reversal is significant on both (--verbose: "
        "each)"
    )


def selection_warnings(scores: Scores, skip_readers: Sequence[str] = ()) -> list[SelectionWarning]:
    """One entry per (reader, budget) with two or more measured strict conditions;
    ``warn`` is true where current accuracy's best differs from reveal accuracy's or
    an inversion exists.  ``skip_readers`` (readers that cannot read the histories,
    ``_readers``) rank nothing.

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
        if cell is None or reader in skip_readers:
            continue
        now, later = _bounds(cell, "current"), _bounds(cell, "reveal")
        if now is not None and later is not None:
            by_block.setdefault((reader, budget), {})[condition] = (now, later)
    out: list[SelectionWarning] = []
    found: dict[str, Passes] = {}

    def passes(metric: str) -> Passes:  # per-pair passes, only where a warning needs them
        if metric not in found:
            found[metric] = _passes(scores, metric)
        return found[metric]

    for (reader, budget), rates in by_block.items():
        if len(rates) < 2:
            continue
        current = {c: r[0] for c, r in rates.items()}
        reveal = {c: r[1] for c, r in rates.items()}
        top_current = max(lo for lo, _ in current.values())
        top_reveal = max(lo for lo, _ in reveal.values())
        best_current = [c for c, (_, hi) in current.items() if hi >= top_current]
        best_reveal = [c for c, (_, hi) in reveal.items() if hi >= top_reveal]
        preferred = [
            (a, b)
            for a in current
            for b in current
            if a != b and current[a][0] > current[b][1] and reveal[a][1] < reveal[b][0]
        ]
        ties = sum(
            1
            for i, a in enumerate(current)
            for b in list(current)[i + 1 :]
            if current[a] == current[b] and reveal[a] != reveal[b]
        )
        misleading = [c for c in best_current if c not in best_reveal]
        inversions: list[Inversion] = []
        for a, b in preferred:
            now_p = _mcnemar(passes("current"), (reader, a, budget), (reader, b, budget))
            later_p = _mcnemar(passes("reveal"), (reader, a, budget), (reader, b, budget))
            inversions.append(
                Inversion(
                    current_prefers=a, reveal_prefers=b,
                    current=(current[a][0], current[b][0]), reveal=(reveal[a][0], reveal[b][0]),
                    current_p=now_p, reveal_p=later_p,
                    within_noise=_noise(now_p) or _noise(later_p),
                )
            )  # fmt: skip
        misleading_p = {
            c: {
                b: _mcnemar(passes("reveal"), (reader, c, budget), (reader, b, budget))
                for b in best_reveal
            }
            for c in misleading
        }
        within_noise = all(i.within_noise for i in inversions) and all(
            _noise(p) for found in misleading_p.values() for p in found.values()
        )
        out.append(
            SelectionWarning(
                reader=reader, budget=budget, best_by_current=best_current,
                best_by_reveal=best_reveal, misleading=misleading,
                misleading_reveal_p=misleading_p, inversions=inversions,
                ties_split_by_reveal=ties, warn=bool(misleading) or bool(inversions),
                within_noise=within_noise,
            )
        )  # fmt: skip
    return out
