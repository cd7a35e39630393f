"""Shortcut gaps: how much a score falls once labels or order change.

A compressor that keeps what the future needs keeps it whatever the labels are called
and whatever order the log came in.  Per system and transform, the identity rate minus
the transformed rate, in two forms:

* ``gap_blocks``: in block pass rates, the typical loss, tested per source pair (a
  cluster bootstrap interval; a two-sided sign-flip permutation p, exact up to 16
  non-zero differences, else seeded Monte Carlo);
* ``gap_pairs``: in source pairs passing every block, the worst case (it grows with
  the instances, so it is never compared across runs with different K).

Rates count NA as fail (``k``): a gap over NA reads is a bound, not a measurement.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._stats import DEFAULT_RESAMPLES, DEFAULT_SEED, bootstrap_mean
from audit.scoring._table import Scores

GAP_METRICS = ("reveal", "joint_J", "adequacy", "late_reference_adequacy", "current")
TESTED = ("reveal", "joint_J")
"""The gaps given an interval and a test (the others are reported as rates only)."""
EXACT_UP_TO = 16


def _rate(cell: dict[str, Any], metric: str, unit: str) -> float | None:
    n = cell.get(f"{metric}_{unit}_n", 0)
    return None if not n else cell[f"{metric}_{unit}_k"] / n


def sign_flip_p(
    differences: npt.ArrayLike, resamples: int = 10_000, seed: int = DEFAULT_SEED
) -> float:
    """Two-sided p-value that paired differences are symmetric about 0 (no gap): the
    share of sign assignments whose |mean| is at least the observed |mean|."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    observed = abs(d.sum()) - 1e-12
    if d.size <= EXACT_UP_TO:  # every assignment, the observed one among them: never 0
        return float(np.mean(np.abs(_half_of_all_signs(d.size) @ d) >= observed))
    signs = _random_signs(resamples, d.size, seed)
    # the observed assignment counts as one draw (Phipson and Smyth 2010): a Monte
    # Carlo p is never 0, which no finite sample can show
    return float((np.sum(np.abs(signs @ d) >= observed) + 1) / (resamples + 1))


_SIGNS: dict[int, npt.NDArray[np.float64]] = {}
SIGNS_BYTES = 512 << 20
"""Drawn signs kept at most (64M, as floats: a cast per test made each matrix anyway)."""


def _random_signs(resamples: int, n: int, seed: int) -> npt.NDArray[np.float64]:
    """The signs ``default_rng(seed)`` draws for ``resamples`` assignments of ``n``.
    The generator fills its draws in order, so every size's matrix is the start of one
    stream a seed: drawn once (grown by doubling) and kept; a report tests hundreds of
    gaps at a few dozen sizes."""
    size = resamples * n
    found = _SIGNS.get(seed)
    if found is None or found.size < size:
        size = max(size, min(2 * (0 if found is None else found.size), SIGNS_BYTES // 8))
        # rng.choice((1.0, -1.0), size) draws these very indices: the same signs
        found = np.random.default_rng(seed).integers(0, 2, size=size).astype(np.float64)
        found *= -2
        found += 1
        _SIGNS.pop(seed, None)
        while _SIGNS and sum(kept.nbytes for kept in _SIGNS.values()) + found.nbytes > SIGNS_BYTES:
            del _SIGNS[next(iter(_SIGNS))]
        if found.nbytes <= SIGNS_BYTES:
            found.setflags(write=False)
            _SIGNS[seed] = found
    return found[: resamples * n].reshape(resamples, n)


@functools.cache
def _half_of_all_signs(n: int) -> npt.NDArray[np.float64]:
    """Every sign assignment of ``n`` differences with the first one's sign fixed: an
    assignment and its negation have one |sum|, so this half gives the exact p (the
    enumeration was most of the summary's CPU when built per call)."""
    rest = np.arange(2 ** (n - 1))[:, None] >> np.arange(n - 2, -1, -1)
    return np.hstack([np.ones((2 ** (n - 1), 1)), 1.0 - 2.0 * (rest & 1)])


class _Paired:
    """Per (system, transform): each source pair's counts, indexed once per metric."""

    def __init__(self, scores: Scores, metric: str) -> None:
        frame = scores.pairs[metric]
        columns = ["reader", "condition", "budget", "transform", "source_pair_id", "family",
                   "every_lo", "every_hi", "blocks_lo", "blocks_hi", "blocks"]  # fmt: skip
        self.groups: dict[tuple[Any, ...], dict[str, tuple[Any, ...]]] = {}
        # by column lists: a pandas string column yields its items one call at a time
        for row in zip(*(frame[column].tolist() for column in columns), strict=True):
            self.groups.setdefault(tuple(row[:4]), {})[row[4]] = row[5:]

    def differences(
        self, system: tuple[str, str, int], transform: str
    ) -> tuple[npt.NDArray[np.float64], list[str]]:
        """Per source pair determined at both: identity minus transformed block rate."""
        base = self.groups.get((*system, IDENTITY), {})
        moved = self.groups.get((*system, transform), {})
        values, families = [], []
        for pair, (family, _, _, lo, hi, blocks) in base.items():
            other = moved.get(pair)
            if other is None or lo != hi or other[3] != other[4]:
                continue  # undetermined (NA bounds disagree) or absent
            values.append(lo / blocks - other[3] / other[5])
            families.append(family)
        return np.asarray(values, dtype=np.float64), families

    def rates(
        self, system: tuple[str, str, int], transform: str, family: str, unit: str
    ) -> tuple[float | None, float | None]:
        """Identity and transformed rate (NA as fail) over the source pairs the
        transform gave an instance: where it gave some none (``revalue`` on a natural
        pair, ``entity`` on a pair with no entity), the identity rate of every pair
        would compare other pairs."""
        base = self.groups.get((*system, IDENTITY), {})
        moved = self.groups.get((*system, transform), {})
        kept = [p for p, row in moved.items() if p in base and family in (ALL, row[0])]

        def rate(group: dict[str, tuple[Any, ...]]) -> float | None:
            rows = [group[p] for p in kept if group[p][5] > 0]
            if not rows:
                return None
            if unit == "blocks":
                return float(sum(r[3] for r in rows) / sum(r[5] for r in rows))
            return float(sum(r[1] for r in rows) / len(rows))

        return rate(base), rate(moved)


def shortcut_gaps(
    scores: Scores,
    family: str = ALL,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """One entry per (system, non-identity transform) with an identity cell to compare:
    each metric's ``_gap_blocks`` and ``_gap_pairs``; for reveal and joint J (all
    families) the paired interval (``_gap_low``, ``_gap_high``) and ``_gap_p``."""
    out: list[dict[str, Any]] = []
    paired = {metric: _Paired(scores, metric) for metric in TESTED} if family == ALL else {}
    shared: dict[str, _Paired] = dict(paired)
    transforms = scores.shortcut_transforms()
    for system in scores.systems:
        base = scores.cell(system, IDENTITY, family)
        if base is None:
            continue
        for transform in transforms:
            moved = scores.cell(system, transform, family) if transform != IDENTITY else None
            if moved is None:
                continue
            entry: dict[str, Any] = {
                "reader": system[0], "condition": system[1], "budget": system[2],
                "transform": transform, "family": family,
            }  # fmt: skip
            partial = moved["n_source_pairs"] != base["n_source_pairs"]
            for metric in GAP_METRICS:
                if partial and metric not in shared:
                    shared[metric] = _Paired(scores, metric)
                for unit in ("blocks", "pairs"):
                    before, after = (
                        shared[metric].rates(system, transform, family, unit)
                        if partial
                        else (_rate(base, metric, unit), _rate(moved, metric, unit))
                    )
                    gap = None if before is None or after is None else round(before - after, 4)
                    entry[f"{metric}_gap_{unit}"] = gap
            if family == ALL:
                for metric in TESTED:
                    differences, families = paired[metric].differences(system, transform)
                    low, high = (
                        bootstrap_mean(differences, families, resamples=resamples, seed=seed,
                                       key=f"gap/{metric}/{system}/{transform}")
                        if differences.size
                        else (math.nan, math.nan)
                    )  # fmt: skip
                    entry[f"{metric}_gap_low"] = None if math.isnan(low) else round(low, 4)
                    entry[f"{metric}_gap_high"] = None if math.isnan(high) else round(high, 4)
                    entry[f"{metric}_gap_p"] = (
                        round(sign_flip_p(differences, seed=seed), 6) if differences.size else None
                    )
            out.append(entry)
    return out
