"""Statistics of a run: intervals, cluster bootstrap, paired tests, multiplicity.

Everything here counts **independent source pairs**, never reads (``docs/method.md``,
"Statistics"): transformed instances and repeats of a pair are folded into one value
per source pair first.

Closed forms replace statsmodels (importing it for three formulas cost most of a
second in every process that scored; a test checks them against it to 1e-12): Wilson
intervals, the exact McNemar test (integer sums; its mid-p form for the gate's
``--test mid-p``) and Holm's step-down.  The cluster bootstrap is numpy's, seeded:
``scipy.stats.bootstrap`` resamples observations, not clusters within strata.  Paired
differences take Newcombe's hybrid score interval (a bootstrap of 24 pass/fail
differences is too coarse, and collapses on homogeneous families), and the gate's
non-inferiority margin Tango's, which statsmodels lacks; power is ``_power``'s.

NA (an LLM reader's infrastructure failure) is never scored as 0: a value that depends
on an NA read is computed NA as fail and NA as pass, and the two are **bounds**.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt

from audit.scoring._power import DEFAULT_TARGET, minimum_detectable_difference

ALPHA = 0.05
"""Two-sided level of every interval (95 %) and test."""
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
MIN_STRATUM_CLUSTERS = 10
"""The cluster bootstrap resamples within strata only when every stratum has this many."""

BOOTSTRAP_WITHIN = "bootstrap within family"
BOOTSTRAP_POOLED = "bootstrap pooled"
NEWCOMBE = "Newcombe hybrid score"
"""What made an interval (``Interval.method``, ``PairedComparison.interval_method``)."""

FloatArray = npt.NDArray[np.float64]
PairedTest = Literal["exact", "mid-p"]
"""The McNemar test of a paired comparison: ``exact`` (conservative: at alpha 0.05 its
type-I error is 0.030 on 84 pairs at discordance 0.3) or its ``mid-p`` form (0.045)."""


def _z(alpha: float) -> float:
    """The two-sided standard normal quantile of level ``alpha`` (1.96 at 0.05)."""
    return NormalDist().inv_cdf(1.0 - alpha / 2.0)


def _wilson_bounds(
    k: FloatArray | float, n: FloatArray | float, alpha: float
) -> tuple[FloatArray, FloatArray]:
    """The Wilson score interval's limits, unclipped (n > 0)."""
    z = _z(alpha)
    z2 = z * z
    rate = np.asarray(k, dtype=np.float64) / n
    denominator = 1.0 + z2 / n
    center = (rate + z2 / (2.0 * n)) / denominator
    half = z * np.sqrt(rate * (1.0 - rate) / n + z2 / (4.0 * np.square(n))) / denominator
    return np.asarray(center - half), np.asarray(center + half)


def wilson(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials; (nan, nan) when n == 0."""
    if n <= 0:
        return (math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, n], got k={k}, n={n}")
    low, high = _wilson_bounds(float(k), float(n), alpha)
    return (max(0.0, float(low)), min(1.0, float(high)))


def wilson_arrays(
    k: npt.ArrayLike, n: npt.ArrayLike, alpha: float = ALPHA
) -> tuple[FloatArray, FloatArray]:
    """Vectorized Wilson bounds; NaN where n == 0."""
    k_array = np.asarray(k, dtype=np.float64)
    n_array = np.asarray(n, dtype=np.float64)
    safe = np.where(n_array > 0, n_array, 1.0)
    low, high = _wilson_bounds(np.minimum(k_array, safe), safe, alpha)
    low = np.where(n_array > 0, np.clip(low, 0.0, 1.0), np.nan)
    high = np.where(n_array > 0, np.clip(high, 0.0, 1.0), np.nan)
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)


@dataclass(frozen=True)
class Proportion:
    """k/n over source pairs, with its Wilson interval.

    When NA reads are involved, ``k_low`` counts NA as fail and ``k_high`` NA as
    pass; the interval then spans [Wilson low of k_low, Wilson high of k_high] and
    ``is_bound`` is true.  Without NA both counts are equal.
    """

    k_low: int
    k_high: int
    n: int
    low: float
    high: float

    @property
    def is_bound(self) -> bool:
        return self.k_low != self.k_high

    @property
    def k(self) -> int:
        """The count (NA as fail where there are bounds)."""
        return self.k_low

    @property
    def rate(self) -> float:
        return math.nan if self.n == 0 else self.k_low / self.n

    def text(self) -> str:
        """``k/n`` or, with NA bounds, ``k_low..k_high/n (bounds)``."""
        if self.n == 0:
            return "-"
        if self.is_bound:
            return f"{self.k_low}..{self.k_high}/{self.n} (bounds)"
        return f"{self.k_low}/{self.n}"


def proportion(k_low: int, n: int, k_high: int | None = None, alpha: float = ALPHA) -> Proportion:
    """A ``Proportion`` with Wilson interval (an envelope over the NA bounds)."""
    k_high = k_low if k_high is None else k_high
    if k_high < k_low:
        raise ValueError(f"k_high ({k_high}) < k_low ({k_low})")
    low = wilson(k_low, n, alpha)[0]
    high = wilson(k_high, n, alpha)[1]
    return Proportion(k_low, k_high, n, low, high)


def _cell_seed(seed: int, key: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(key.encode("utf-8"))) % 2**63


def is_degenerate(low: float, high: float, values: Sequence[float] | FloatArray) -> bool:
    """True for a zero-width interval over values that are not all equal.

    Such an interval claims certainty the data do not have (a bootstrap over
    homogeneous strata, say); the report flags it instead of printing [x, x].  An
    interval over identical values (24/24 resampled) is zero-width honestly: False.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not (math.isfinite(low) and math.isfinite(high)) or v.size < 2:
        return False
    return bool(high - low <= 1e-12 and np.ptp(v) > 0)


@dataclass(frozen=True)
class Interval:
    """An interval, what made it, and whether it is degenerate (``is_degenerate``)."""

    low: float
    high: float
    method: str
    degenerate: bool


def _percentile_bootstrap(
    k: FloatArray,
    n: FloatArray,
    strata: npt.NDArray[np.object_] | None,
    resamples: int,
    seed: int,
    alpha: float,
) -> tuple[float, float]:
    """Percentile interval of sum(k)/sum(n) over clusters drawn with replacement.

    ``strata`` None draws all clusters together; otherwise each stratum is drawn at
    its own size.
    """
    rng = np.random.default_rng(seed)
    groups = (
        [np.arange(k.size)]
        if strata is None
        else [np.flatnonzero(strata == s) for s in sorted(set(strata.tolist()))]
    )
    num = np.zeros(resamples)
    den = np.zeros(resamples)
    # equal whole trials (one a pair, say) sum to the same exact whole number in any draw
    same = float(n[0]) if np.all(n == n[0]) and float(n[0]).is_integer() else None
    for members in groups:
        drawn = rng.integers(0, members.size, size=(resamples, members.size))
        # the stratum's values gathered once: k[members][drawn] is k[members[drawn]]
        num += k.take(members).take(drawn).sum(axis=1)
        den += n.take(members).take(drawn).sum(axis=1) if same is None else same * members.size
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = num / den
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return (math.nan, math.nan)
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return (float(low), float(high))


def cluster_bootstrap_interval(
    successes: Sequence[float] | FloatArray,
    trials: Sequence[float] | FloatArray,
    strata: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    key: str = "",
    alpha: float = ALPHA,
) -> Interval:
    """Percentile interval of sum(successes)/sum(trials), resampling clusters (source pairs).

    One entry per cluster: its successes and trials (1 and 1 for a pass/fail pair).
    ``key`` names the cell, so each cell has its own reproducible stream; nan bounds
    when there is nothing to resample.

    Strata (each pair's family) are kept only when every one has at least
    ``MIN_STRATUM_CLUSTERS`` pairs and the result is not degenerate; otherwise pairs
    are drawn from all families together.  A family of 4 pass/fail pairs is often
    all-pass or all-fail and adds no variance (8/24 as two passing and four failing
    families gave [0.33, 0.33]); pooled draws let the family mix vary, adding the
    between-family variance the design has.
    """
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if k.size == 0 or k.size != n.size or k.size != len(strata) or n.sum() <= 0:
        return Interval(math.nan, math.nan, BOOTSTRAP_POOLED, False)
    stream = _cell_seed(seed, key)
    labels = np.asarray(strata, dtype=object)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.where(n > 0, k / n, np.nan)
    _, sizes = np.unique(labels.astype(str), return_counts=True)
    if sizes.size > 1 and sizes.min() >= MIN_STRATUM_CLUSTERS:
        low, high = _percentile_bootstrap(k, n, labels, resamples, stream, alpha)
        if not is_degenerate(low, high, rates):
            return Interval(low, high, BOOTSTRAP_WITHIN, False)
    low, high = _percentile_bootstrap(k, n, None, resamples, stream, alpha)
    return Interval(low, high, BOOTSTRAP_POOLED, is_degenerate(low, high, rates))


def cluster_bootstrap(
    successes: Sequence[float] | FloatArray,
    trials: Sequence[float] | FloatArray,
    strata: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    key: str = "",
    alpha: float = ALPHA,
) -> tuple[float, float]:
    """(low, high) of ``cluster_bootstrap_interval``: (nan, nan) when nothing to resample."""
    found = cluster_bootstrap_interval(
        successes, trials, strata, resamples=resamples, seed=seed, key=key, alpha=alpha
    )
    return (found.low, found.high)


def bootstrap_mean(
    values: Sequence[float] | FloatArray,
    strata: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    key: str = "",
    alpha: float = ALPHA,
) -> tuple[float, float]:
    """Cluster-bootstrap interval of the mean of one value per source pair."""
    v = np.asarray(values, dtype=np.float64)
    return cluster_bootstrap(
        v, np.ones_like(v), strata, resamples=resamples, seed=seed, key=key, alpha=alpha
    )


@dataclass(frozen=True)
class PairedTable:
    """2x2 table of two conditions on the same source pairs (pass/fail each)."""

    both: int
    only_a: int
    only_b: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.only_a + self.only_b + self.neither


def mcnemar(table: PairedTable, test: PairedTest = "exact") -> float:
    """The two-sided McNemar p of ``test``: ``exact`` is twice the binomial(d, 1/2)
    probability of at most the smaller discordant count (summed exactly, in integers);
    ``mid-p`` takes the observed split's own probability off (half from each tail):
    less conservative, its type-I error near alpha, at times a little above.  Capped at 1."""
    discordant = table.only_a + table.only_b
    if discordant == 0:
        return 1.0
    smaller = min(table.only_a, table.only_b)
    tail = 2 * sum(math.comb(discordant, i) for i in range(smaller + 1))
    if test == "mid-p":
        tail -= math.comb(discordant, smaller)
    return min(1.0, float(tail / 2**discordant))


def mcnemar_exact(table: PairedTable) -> float:
    """The exact two-sided McNemar p (``mcnemar``)."""
    return mcnemar(table)


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> list[float]:
    """Holm-adjusted p-values (family-wise error across exactly the values given):
    the i-th smallest of m times (m - i), made monotone, capped at 1.

    NaN entries (comparisons without shared pairs) stay NaN and do not count.
    ``alpha`` does not change the adjusted values (kept for the callers' symmetry).
    """
    values = np.asarray(pvalues, dtype=np.float64)
    adjusted = np.full(values.shape, math.nan)
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size:
        order = finite[np.argsort(values[finite], kind="mergesort")]
        scaled = values[order] * (finite.size - np.arange(finite.size))
        adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return [float(x) for x in adjusted]


def newcombe_paired(table: PairedTable, alpha: float = ALPHA) -> tuple[float, float]:
    """Newcombe's hybrid score interval for the paired difference, B's rate minus A's.

    Newcombe (1998), Statistics in Medicine 17:2635, method 10: the two rates' Wilson
    intervals combined through their correlation phi (a positive ad - bc reduced by
    n/2, not below 0; phi = 0 when a margin is empty).  Never zero-width for n > 0,
    inside [-1, 1], no resampling, near 95 % coverage at n = 24 (checked by exact
    enumeration in the tests).  (nan, nan) without pairs.
    """
    n = table.n
    if n == 0:
        return (math.nan, math.nan)
    k_b, k_a = table.both + table.only_b, table.both + table.only_a
    rate_b, rate_a = k_b / n, k_a / n
    low_b, high_b = wilson(k_b, n, alpha)
    low_a, high_a = wilson(k_a, n, alpha)
    margins = k_b * (n - k_b) * k_a * (n - k_a)
    cross = float(table.both * table.neither - table.only_a * table.only_b)
    if cross > 0:
        cross = max(cross - n / 2, 0.0)
    phi = cross / math.sqrt(margins) if margins > 0 else 0.0
    # square and add the half-widths that move the difference down (B down, A up) and up
    down_b, up_a = rate_b - low_b, high_a - rate_a
    up_b, down_a = high_b - rate_b, rate_a - low_a
    below = math.sqrt(max(down_b**2 - 2 * phi * down_b * up_a + up_a**2, 0.0))
    above = math.sqrt(max(up_b**2 - 2 * phi * up_b * down_a + down_a**2, 0.0))
    delta = rate_b - rate_a
    return (max(-1.0, delta - below), min(1.0, delta + above))


def tango_paired(table: PairedTable, alpha: float = ALPHA) -> tuple[float, float]:
    """Tango's score interval for the paired difference, B's rate minus A's.

    Tango (1998), Statistics in Medicine 17:891: every d whose score statistic
    ``(b - c - n d) / sqrt(n (2 q + d (1 - d)))`` (b only B, c only A, q the
    closed-form maximum-likelihood share of only-A pairs under d) is within z of 0.
    For a non-inferiority margin: it depends on the discordant pairs alone, so no
    discordant pair gives its honest width (0.044 each way at n = 84), where Newcombe's
    leans on the concordant pairs and claims less.  (nan, nan) without pairs.
    """
    n = table.n
    if n == 0:
        return (math.nan, math.nan)
    b, c = table.only_b, table.only_a
    z = _z(alpha)

    def score(d: float) -> float:  # decreasing in d: +inf at -1, -inf at 1
        slope = -b - c + (2.0 * n - b + c) * d
        constant = -c * d * (1.0 - d)
        share = (math.sqrt(max(slope * slope - 8.0 * n * constant, 0.0)) - slope) / (4.0 * n)
        variance = n * (2.0 * share + d * (1.0 - d))
        top = b - c - n * d
        if variance <= 0.0:
            return 0.0 if top == 0 else math.copysign(math.inf, top)
        return top / math.sqrt(variance)

    def crossing(level: float) -> float:  # the d where score(d) == level, by bisection
        low, high = -1.0, 1.0
        for _ in range(80):
            middle = (low + high) / 2.0
            low, high = (middle, high) if score(middle) > level else (low, middle)
        return (low + high) / 2.0

    lower = -1.0 if c == n else crossing(z)
    upper = 1.0 if b == n else crossing(-z)
    return (lower, upper)


@dataclass(frozen=True)
class PairedComparison:
    """B minus A on the source pairs where both are determined."""

    table: PairedTable
    delta: float
    """Pass rate of B minus pass rate of A (nan when no shared pair)."""
    low: float
    high: float
    """95 % Newcombe hybrid score interval of the delta (``newcombe_paired``; formerly a
    within-family cluster bootstrap, which collapsed to a point on the pilot)."""
    p_value: float
    """McNemar, two-sided: exact, or mid-p where asked (nan when no shared pair)."""
    excluded: int
    """Pairs present in only one of the two, or undetermined (NA) in either."""
    interval_method: str = NEWCOMBE
    """What made ``low``/``high``."""
    degenerate: bool = False
    """The interval has zero width although the pairs' differences vary (never, for
    Newcombe with n > 0; kept so the report can say so whatever made the interval)."""
    min_detectable: float = math.nan
    """Smallest |delta| the exact McNemar test detects with 80 % power on these n pairs
    at alpha / comparisons, with the observed discordance (``_power``); nan when no
    effect is detectable or there are no pairs."""
    underpowered: bool = False
    """|delta| < ``min_detectable`` (or nothing detectable): too few pairs to tell an
    effect this size from none; a miss here is not evidence of no difference."""


def detectable_difference(
    table: PairedTable,
    comparisons: int = 1,
    alpha: float = ALPHA,
    target: float = DEFAULT_TARGET,
) -> float:
    """Minimum detectable |delta| for a comparison's n and observed discordance.

    The discordance is max(|delta|, observed share of discordant pairs): what this
    comparison showed, raised where a larger effect would force more discordant pairs.
    Level alpha / comparisons (the number of comparisons in the report's table).
    """
    if table.n == 0:
        return math.nan
    observed = (table.only_a + table.only_b) / table.n
    return minimum_detectable_difference(table.n, observed, alpha, comparisons, target)


def paired_comparison(
    a: Mapping[str, float],
    b: Mapping[str, float],
    family: Mapping[str, str],
    *,
    comparisons: int = 1,
    target: float = DEFAULT_TARGET,
    test: PairedTest = "exact",
) -> PairedComparison:
    """Compare pass/fail per source pair: {pair id: 1.0 pass, 0.0 fail, nan undetermined}.

    The interval is Newcombe's (``newcombe_paired``).  ``comparisons`` (the number of
    comparisons in the table, for alpha / m) and ``target`` set the minimum detectable
    difference and the underpowered flag (of the exact test, whichever ``test`` gives
    the p-value).
    """
    ids = sorted(
        pid
        for pid in a.keys() & b.keys()
        if not (math.isnan(a[pid]) or math.isnan(b[pid])) and pid in family
    )
    excluded = len(a.keys() | b.keys()) - len(ids)
    va = np.array([a[pid] >= 0.5 for pid in ids], dtype=bool)
    vb = np.array([b[pid] >= 0.5 for pid in ids], dtype=bool)
    table = PairedTable(
        both=int((va & vb).sum()),
        only_a=int((va & ~vb).sum()),
        only_b=int((~va & vb).sum()),
        neither=int((~va & ~vb).sum()),
    )
    if not ids:
        return PairedComparison(table, math.nan, math.nan, math.nan, math.nan, excluded)
    diff = vb.astype(np.float64) - va.astype(np.float64)
    delta = float(diff.mean())
    low, high = newcombe_paired(table)
    detectable = detectable_difference(table, comparisons, ALPHA, target)
    return PairedComparison(
        table,
        delta,
        low,
        high,
        mcnemar(table, test),
        excluded,
        interval_method=NEWCOMBE,
        degenerate=is_degenerate(low, high, diff),
        min_detectable=detectable,
        underpowered=not abs(delta) >= detectable,
    )
