"""Power of the exact McNemar test on source pairs: how many pairs a comparison needs.

Computed **exactly**, by enumeration (a normal approximation flatters n = 24): D ~
Bin(n, psi) discordant pairs, psi = p10 + p01; given D = d, B ~ Bin(d, p10 / psi)
favour the first condition; the test rejects when ``min(1, 2 P(Bin(d, 1/2) <= min(B,
d - B))) <= alpha / m`` (Bonferroni, Holm's first step: a slight underestimate under
Holm, never an overestimate).  The default discordance psi = |delta| is the most
favourable in practice, so the pairs needed are a lower bound.  Power is not
monotone in n (the exact test's saw-tooth), so ``pairs_needed`` scans n upwards.
docs/method.md, "Power and intervals", has the model and its evidence.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

DEFAULT_ALPHA = 0.05
"""Family-wise level before the division by the number of comparisons (as ``_stats.ALPHA``)."""
DEFAULT_TARGET = 0.8
"""Power the minimum detectable difference and the pairs needed are computed for."""
MAX_PAIRS = 20_000
"""``pairs_needed`` scans up to here (about a second); an audit needing more is answered
'more than 20,000', which is all the answer a generated-pairs audit needs."""

Discordance = float | Callable[[float], float] | None
"""``psi`` for a search over effects: None (= |delta|), a floor, or a function of |delta|."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_TOLERANCE = 1e-6
"""Precision of the minimum detectable difference (an effect, on the 0..1 scale)."""


def alpha_per_test(alpha: float = DEFAULT_ALPHA, comparisons: int = 1) -> float:
    """Bonferroni level of one test among ``comparisons`` (Holm's first step)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if comparisons < 1 or int(comparisons) != comparisons:
        raise ValueError(f"comparisons must be a whole number >= 1, got {comparisons}")
    return alpha / comparisons


def _discordance(delta: float, psi: float | None) -> float:
    """psi for one effect: |delta| by default; it may not be below |delta| or above 1."""
    size = abs(delta)
    if not size <= 1:
        raise ValueError(f"the effect must be in [-1, 1], got {delta}")
    if psi is None:
        return size
    if not size <= psi <= 1:
        raise ValueError(
            f"the discordance must be in [|effect|, 1] = [{size:g}, 1], got {psi}"
            " (every pair that changes the pass rate is discordant)"
        )
    return float(psi)


@functools.lru_cache(maxsize=32)
def _critical_values(max_d: int, level: float) -> IntArray:
    """c_d for d = 0..max_d: the test rejects when min(B, d - B) <= c_d.

    c_d is the largest c with 2 P(Bin(d, 1/2) <= c) <= level (-1 when even B = 0 is
    not significant), found for every d at once by bisection on c in [-1, d / 2]
    (P(Bin(d, 1/2) <= c) rises with c; c_d < d / 2 whenever level < 1).  It does not
    depend on the effect, so a search over effects computes it once (cached; read-only).
    """
    d = np.arange(max_d + 1)
    low = np.full(d.shape, -1)  # 2 P(<= low) <= level, or low = -1
    high = d // 2 + 1  # 2 P(<= high) > level
    while np.any(high - low > 1):
        middle = (low + high) // 2
        fits = 2 * _cdf(middle, d, 0.5) <= level
        low, high = np.where(fits, middle, low), np.where(fits, high, middle)
    critical: IntArray = low.astype(np.int64)
    critical.setflags(write=False)
    return critical


def _cdf(k: IntArray, n: IntArray, p: float) -> FloatArray:
    """P(Bin(n, p) <= k), 0 for k < 0."""
    from scipy.special import bdtr  # type: ignore[import-untyped]

    return np.asarray(np.where(k >= 0, bdtr(np.maximum(k, 0), n, p), 0.0), dtype=np.float64)


def _rejection_probability(d: IntArray, critical: IntArray, q: float) -> FloatArray:
    """P(the exact test rejects | d discordant pairs), B ~ Bin(d, q), for each d."""
    from scipy.special import bdtrc

    c = critical[d]
    tails = _cdf(c, d, q) + bdtrc(np.maximum(d - c - 1, 0), d, q)
    return np.asarray(np.where(c >= 0, tails, 0.0), dtype=np.float64)


def _power_curve(
    ns: npt.ArrayLike, psi: float, reject: Callable[[IntArray], FloatArray]
) -> FloatArray:
    """Exact power for each n of ``ns``: E[reject(D)], D ~ Bin(n, psi).

    ``reject(d)`` is P(the test rejects | d discordant pairs).  The binomial weights
    are summed over D within 12 standard deviations (+ 20) of its mean, where all but
    < 1e-19 of the mass lies; log-gamma tables make a block of consecutive n one
    vectorized step (``pairs_needed`` scans thousands of n).
    """
    from scipy.special import gammaln

    n = np.asarray(ns, dtype=np.int64)
    if psi <= 0:
        return np.zeros(n.shape)
    if psi >= 1:  # every pair discordant: D = n
        return reject(n)
    top = int(n.max())
    spread = 12 * math.sqrt(top * psi * (1 - psi)) + 20
    low = max(0, math.floor(int(n.min()) * psi - spread))
    high = min(top, math.ceil(top * psi + spread))
    d = np.arange(low, high + 1)
    # log C(n, d) + d log psi + (n - d) log(1 - psi), with log((n - d)!) = +inf for d > n
    pad = max(0, high - int(n.min()))
    log_factorial = np.concatenate([np.full(pad, np.inf), gammaln(np.arange(top + 1) + 1.0)])
    by_n = log_factorial[n + pad] + n * math.log1p(-psi)
    by_d = d * math.log(psi / (1 - psi)) - log_factorial[d + pad]
    log_pmf = by_n[:, None] + by_d[None, :] - log_factorial[n[:, None] - d[None, :] + pad]
    return np.asarray(np.clip(np.exp(log_pmf) @ reject(d), 0.0, 1.0), dtype=np.float64)


def _favouring(delta: float, psi: float) -> float:
    """P(a discordant pair favours the better condition) = p10 / psi."""
    return 0.5 if psi <= 0 else (psi + abs(delta)) / (2 * psi)


def power(
    n: int,
    delta: float,
    psi: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    comparisons: int = 1,
) -> float:
    """Exact power of the two-sided exact McNemar test on n source pairs.

    ``delta = p10 - p01`` (its sign does not matter: the test is two-sided), ``psi =
    p10 + p01`` (default |delta|, the most favourable discordance), level alpha /
    ``comparisons``.  24 pairs, delta 0.2, 3 comparisons: 0.189.
    """
    if n < 1 or int(n) != n:
        raise ValueError(f"n must be a whole number of source pairs >= 1, got {n}")
    level = alpha_per_test(alpha, comparisons)
    discordance = _discordance(delta, psi)
    critical = _critical_values(1 << int(n).bit_length(), level)  # cached for nearby n
    q = _favouring(delta, discordance)
    curve = _power_curve([int(n)], discordance, lambda d: _rejection_probability(d, critical, q))
    return float(curve[0])


def _discordance_of(psi: Discordance) -> Callable[[float], float]:
    """The discordance at each effect size of a search (see ``minimum_detectable_difference``)."""
    if psi is None:
        return lambda size: size
    if callable(psi):
        return psi
    floor = float(psi)
    if not 0 <= floor <= 1:
        raise ValueError(f"the discordance must be in [0, 1], got {psi}")
    return lambda size: max(size, floor)


def minimum_detectable_difference(
    n: int,
    psi: Discordance = None,
    alpha: float = DEFAULT_ALPHA,
    comparisons: int = 1,
    target: float = DEFAULT_TARGET,
) -> float:
    """Smallest |delta| that n source pairs detect with power >= ``target``; nan if none.

    ``psi``: None for psi = |delta| (the answer is then a lower bound); a number for
    max(|delta|, psi), a comparison's observed discordance raised where the effect
    exceeds it; or a function of |delta| into [|delta|, 1].  Power grows with |delta|
    along each of these, so the answer is found by bisection.
    """
    if not 0 < target < 1:
        raise ValueError(f"the target power must be in (0, 1), got {target}")
    discordance = _discordance_of(psi)

    def reaches(size: float) -> bool:
        return power(n, size, discordance(size), alpha, comparisons) >= target

    if not reaches(1.0):
        return math.nan
    low, high = 0.0, 1.0  # power(low) < target <= power(high)
    while high - low > _TOLERANCE:
        middle = (low + high) / 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    return high


def _block_size(n: int, psi: float, budget: int = 2_000_000) -> int:
    """Consecutive n per ``_power_curve`` call: about ``budget`` binomial weights."""
    spread = 24 * math.sqrt(n * psi * (1 - psi)) + 40
    block = 4096
    while block > 64 and block * (block * psi + spread) > budget:
        block //= 2
    return block


def pairs_needed(
    delta: float,
    psi: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    comparisons: int = 1,
    target: float = DEFAULT_TARGET,
) -> int:
    """Smallest number of source pairs whose exact McNemar power reaches ``target``.

    ``psi`` is the discordance at this effect (default |delta|: the answer is then,
    in practice, a lower bound over every discordance; see the module note).  Scans
    n = 1, 2, ... (power is not monotone in n, so no bisection), in vectorized
    blocks; raises ValueError beyond MAX_PAIRS.
    """
    if delta == 0:
        raise ValueError("the effect must be non-zero: no number of pairs detects 0")
    if not 0 < target < 1:
        raise ValueError(f"the target power must be in (0, 1), got {target}")
    level = alpha_per_test(alpha, comparisons)
    discordance = _discordance(delta, psi)
    q = _favouring(delta, discordance)
    table = np.zeros(0)
    start, block = 1, 64
    while start <= MAX_PAIRS:
        stop = min(start + block, MAX_PAIRS + 1)
        if stop > table.size:  # rejection probabilities for every d, grown by doubling
            size = min(max(1024, 2 * stop), MAX_PAIRS + 1)
            table = _rejection_probability(np.arange(size), _critical_values(size, level), q)
        curve = _power_curve(np.arange(start, stop), discordance, table.__getitem__)
        reached = np.flatnonzero(curve >= target)
        if reached.size:
            return start + int(reached[0])
        start = stop
        block = _block_size(stop, discordance)
    raise ValueError(
        f"more than {MAX_PAIRS:,} source pairs are needed for {target:.0%} power"
        f" at effect {abs(delta):g}"
    )
