"""Does a verdict transfer from one pair set to another (synthetic to natural)?

The two runs share conditions, not pairs: their source pairs are different
histories, so nothing is paired.  Two numbers answer it: the rank correlation of the
conditions' joint J (Kendall's tau-b, ties allowed, ``scipy.stats.kendalltau``) with
a percentile bootstrap interval that resamples each run's source pairs
independently; and, per condition, whether its joint J differs between the two sets
(Fisher's exact test on two independent proportions, Holm across conditions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from audit.scoring._stats import ALPHA, _cell_seed


@dataclass(frozen=True)
class RankAgreement:
    """Kendall's tau-b between two rankings of the same conditions, and its interval."""

    tau: float
    low: float
    high: float
    conditions: int
    resamples: int
    """Bootstrap resamples whose tau was defined (a resample where every condition
    ties in one run has none)."""


def _rates(values: np.ndarray) -> np.ndarray:
    """Each condition's pass rate over its pairs (NaN: undetermined, left out)."""
    with np.errstate(invalid="ignore"):
        rates: np.ndarray = np.nanmean(values, axis=1)
    return rates


def _tau(first: np.ndarray, second: np.ndarray) -> float:
    # imported when used: scipy.stats costs a second
    from scipy.stats import kendalltau  # type: ignore[import-untyped]

    if np.ptp(first) == 0 or np.ptp(second) == 0:
        return math.nan  # a ranking with every condition tied ranks nothing
    return float(kendalltau(first, second).statistic)


def rank_agreement(
    first: Mapping[str, Mapping[str, float]],
    second: Mapping[str, Mapping[str, float]],
    conditions: Sequence[str],
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = ALPHA,
) -> RankAgreement:
    """Tau between the conditions' joint J in ``first`` and in ``second`` (each:
    condition -> source pair -> pass 1.0 / fail 0.0 / NaN), and a percentile
    bootstrap interval: each resample draws each run's source pairs with replacement,
    the same draw for every condition of that run (its pairs are the unit)."""
    matrices = []
    for run in (first, second):
        pairs = sorted(set().union(*(run[c] for c in conditions)))
        matrices.append(
            np.array([[run[c].get(p, math.nan) for p in pairs] for c in conditions], dtype=float)
        )
    tau = _tau(_rates(matrices[0]), _rates(matrices[1]))
    rng = np.random.default_rng(_cell_seed(seed, "transfer/tau"))
    taus = []
    for _ in range(resamples):
        drawn = [m[:, rng.integers(0, m.shape[1], m.shape[1])] for m in matrices]
        taus.append(_tau(_rates(drawn[0]), _rates(drawn[1])))
    defined = np.array([t for t in taus if not math.isnan(t)])
    if not len(defined):
        return RankAgreement(tau, math.nan, math.nan, len(conditions), 0)
    low, high = np.quantile(defined, [alpha / 2, 1 - alpha / 2])
    return RankAgreement(tau, float(low), float(high), len(conditions), len(defined))


def independent_difference_p(k_first: int, n_first: int, k_second: int, n_second: int) -> float:
    """Two-sided Fisher exact p that two independent proportions are equal (NaN when
    either has no unit)."""
    from scipy.stats import fisher_exact

    if not n_first or not n_second:
        return math.nan
    table = [[k_first, n_first - k_first], [k_second, n_second - k_second]]
    return float(fisher_exact(table).pvalue)
