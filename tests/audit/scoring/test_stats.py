"""audit.scoring's statistics against known values, and pair-level scoring with NA bounds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import binomtest, multinomial, norm

from audit.rundir import normalize
from audit.scoring import (
    MIN_STRATUM_CLUSTERS,
    PairedTable,
    bootstrap_mean,
    cluster_bootstrap,
    cluster_bootstrap_interval,
    detectable_difference,
    heterogeneity_p,
    holm,
    is_degenerate,
    minimum_detectable_difference,
    newcombe_paired,
    paired_comparison,
    proportion,
    score_results,
)
from audit.scoring._replication import heterogeneity_test
from audit.scoring._stats import BOOTSTRAP_POOLED, BOOTSTRAP_WITHIN, NEWCOMBE, mcnemar_exact, wilson

# ------------------------------------------------------------------------------ Wilson


def test_wilson_known_values():
    low, high = wilson(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4)
    assert high == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    # 24/24, the pilot's ceiling: the interval is not [1, 1]
    assert wilson(24, 24)[0] == pytest.approx(0.8620, abs=1e-4)


def test_wilson_edges():
    assert all(math.isnan(x) for x in wilson(0, 0))
    with pytest.raises(ValueError, match="k must be"):
        wilson(11, 10)


def test_proportion_with_na_bounds_is_labelled_and_spans_both():
    exact = proportion(8, 10)
    assert not exact.is_bound
    assert exact.text() == "8/10"
    bounded = proportion(6, 10, k_high=9)
    assert bounded.is_bound
    assert bounded.text() == "6..9/10 (bounds)"
    assert bounded.low == pytest.approx(wilson(6, 10)[0])
    assert bounded.high == pytest.approx(wilson(9, 10)[1])
    assert proportion(0, 0).text() == "-"


# ----------------------------------------------------------------------------- McNemar


def test_mcnemar_exact_known_table():
    # discordant 2 vs 8: two-sided binomial p = 2 * P(X <= 2 | 10, 1/2) = 112/1024
    table = PairedTable(both=10, only_a=2, only_b=8, neither=5)
    assert mcnemar_exact(table) == pytest.approx(0.109375)
    assert mcnemar_exact(PairedTable(3, 0, 6, 1)) == pytest.approx(2 * 0.5**6)
    assert mcnemar_exact(PairedTable(5, 0, 0, 5)) == 1.0


@pytest.mark.parametrize(("b", "c"), [(1, 9), (4, 4), (0, 12), (7, 3), (15, 30)])
def test_mcnemar_exact_equals_scipy_binomial_test(b: int, c: int):
    expected = binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(PairedTable(3, b, c, 2)) == pytest.approx(expected)


# -------------------------------------------------------------------------------- Holm


def test_holm_known_values():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # monotone: adjusted values never fall below an earlier (smaller) one's
    assert holm([0.001, 0.01, 0.02]) == pytest.approx([0.003, 0.02, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_holm_leaves_missing_values_out():
    adjusted = holm([0.01, math.nan, 0.04])
    assert adjusted[0] == pytest.approx(0.02)
    assert math.isnan(adjusted[1])
    assert adjusted[2] == pytest.approx(0.04)
    assert holm([]) == []


# ---------------------------------------------------------------------- cluster bootstrap


def test_cluster_bootstrap_is_seeded_and_covers_the_estimate():
    rng = np.random.default_rng(3)
    n = rng.integers(1, 9, size=40).astype(float)
    k = np.floor(n * rng.random(40))
    families = [f"f{i % 4}" for i in range(40)]
    first = cluster_bootstrap(k, n, families, seed=1, key="x")
    assert first == cluster_bootstrap(k, n, families, seed=1, key="x")
    assert first != cluster_bootstrap(k, n, families, seed=2, key="x")
    assert first != cluster_bootstrap(k, n, families, seed=1, key="y")
    assert first[0] <= k.sum() / n.sum() <= first[1]


def test_cluster_bootstrap_draws_what_its_definition_draws():
    """Every resample drawn, gathered and summed, as the method is defined: the
    shortcuts (no gather of equal whole trials, none of the members of all) change
    no bound by a bit."""
    from audit.scoring._stats import _cell_seed

    def by_definition(k, n, strata, seed):
        rng = np.random.default_rng(seed)
        labels = np.asarray(strata, dtype=object)
        groups = [np.flatnonzero(labels == s) for s in sorted(set(strata))]
        num, den = np.zeros(500), np.zeros(500)
        for members in groups:
            picked = members[rng.integers(0, members.size, size=(500, members.size))]
            num += k[picked].sum(axis=1)
            den += n[picked].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            stats = num / den
        stats = stats[np.isfinite(stats)]
        if stats.size == 0:
            return (math.nan, math.nan)
        low, high = np.quantile(stats, [0.025, 0.975])
        return (float(low), float(high))

    @settings(max_examples=60, deadline=None)
    @given(
        st.integers(2, 40).flatmap(
            lambda size: st.lists(st.tuples(st.integers(0, 9), st.integers(1, 9)), min_size=size)
        ),
        st.sampled_from([None, 1.0, 3.0, 0.5]),
        st.booleans(),
        st.integers(0, 5),
    )
    def check(cells, same, split, seed):
        k = np.array([a / 3 for a, _ in cells])
        n = np.array([float(b) for _, b in cells]) if same is None else np.full(len(cells), same)
        strata = (
            ["a", "b"] * (len(cells) // 2) + ["a"] * (len(cells) % 2)
            if split
            else ["a"] * len(cells)
        )
        found = cluster_bootstrap_interval(k, n, strata, resamples=500, seed=seed, key="x")
        drawn = strata if found.method == BOOTSTRAP_WITHIN else ["all"] * len(cells)
        assert (found.low, found.high) == by_definition(k, n, drawn, _cell_seed(seed, "x"))

    check()


PILOT_FAMILIES = [f"family{i // 4}" for i in range(24)]  # the pilot: 6 families x 4 pairs


def test_cluster_bootstrap_of_the_pilot_is_not_a_point():
    # 8/24 as two all-pass families and four all-fail ones: resampling within families
    # of 4 gave [0.33, 0.33]; small families are resampled together instead
    found = cluster_bootstrap_interval([1.0] * 8 + [0.0] * 16, [1.0] * 24, PILOT_FAMILIES)
    assert found.method == BOOTSTRAP_POOLED
    assert not found.degenerate
    assert found.low < 1 / 3 < found.high
    assert (found.low, found.high) == pytest.approx((0.1667, 0.5417), abs=0.05)
    # families of 4 are resampled together even when mixed (2 of 4 passing in each)
    mixed = cluster_bootstrap_interval([1.0, 1.0, 0.0, 0.0] * 6, [1.0] * 24, PILOT_FAMILIES)
    assert mixed.method == BOOTSTRAP_POOLED


@pytest.mark.parametrize("k", range(1, 24))
def test_cluster_bootstrap_never_collapses_for_0_lt_k_lt_n(k: int):
    # passes packed into as few families as possible: the worst case for strata
    found = cluster_bootstrap_interval([1.0] * k + [0.0] * (24 - k), [1.0] * 24, PILOT_FAMILIES)
    assert found.high > found.low
    assert not found.degenerate


def test_cluster_bootstrap_resamples_within_large_families():
    # two families of 10, 8/10 and 2/10: stratifying keeps the family mix fixed, so
    # the interval is narrower than the pooled one, which lets the mix vary
    size = MIN_STRATUM_CLUSTERS
    k = [1.0] * 8 + [0.0] * 2 + [1.0] * 2 + [0.0] * 8
    families = ["a"] * size + ["b"] * size
    within = cluster_bootstrap_interval(k, [1.0] * 20, families, key="w")
    pooled = cluster_bootstrap_interval(k, [1.0] * 20, ["one"] * 20, key="w")
    assert within.method == BOOTSTRAP_WITHIN
    assert pooled.method == BOOTSTRAP_POOLED
    assert within.high - within.low < pooled.high - pooled.low
    # one family short of the threshold: pooled
    short = cluster_bootstrap_interval(k[1:], [1.0] * 19, families[1:], key="w")
    assert short.method == BOOTSTRAP_POOLED


def test_cluster_bootstrap_leaves_homogeneous_large_families_for_the_pooled_draw():
    # all-pass and all-fail families of 10: every within-family resample gives 1/2
    k = [1.0] * 10 + [0.0] * 10
    found = cluster_bootstrap_interval(k, [1.0] * 20, ["a"] * 10 + ["b"] * 10)
    assert found.method == BOOTSTRAP_POOLED
    assert found.low < 0.5 < found.high
    assert cluster_bootstrap(k, [1.0] * 20, ["a"] * 10 + ["b"] * 10) == (found.low, found.high)


def test_is_degenerate_only_when_the_values_differ():
    assert is_degenerate(0.5, 0.5, [1.0, 0.0])
    assert not is_degenerate(1.0, 1.0, [1.0, 1.0, 1.0])  # 24/24 resampled: honestly a point
    assert not is_degenerate(0.2, 0.8, [1.0, 0.0])
    assert not is_degenerate(math.nan, math.nan, [1.0, 0.0])
    assert not is_degenerate(0.5, 0.5, [1.0])


def test_cluster_bootstrap_weights_clusters_by_their_trials():
    # one pair with 3/4 passing instances, one with 0/4: rate 3/8 when both drawn
    low, high = cluster_bootstrap([3.0, 0.0], [4.0, 4.0], ["f", "f"], resamples=4000)
    assert low == pytest.approx(0.0)
    assert high == pytest.approx(0.75)


def test_bootstrap_mean_and_empty_input():
    assert bootstrap_mean([2.0, 2.0, 2.0], ["a", "b", "b"]) == (2.0, 2.0)
    assert all(math.isnan(x) for x in cluster_bootstrap([], [], []))


# --------------------------------------------------------------------- paired comparison


def test_paired_comparison_counts_pairs_and_skips_undetermined():
    fam = {f"p{i}": "f" if i < 5 else "g" for i in range(10)}
    a = {f"p{i}": 1.0 for i in range(10)}
    b = {f"p{i}": 1.0 if i < 4 else 0.0 for i in range(10)}
    b["p9"] = math.nan  # NA bounds disagree: left out
    result = paired_comparison(a, b, fam)
    assert result.table == PairedTable(both=4, only_a=5, only_b=0, neither=0)
    assert result.excluded == 1
    assert result.delta == pytest.approx(-5 / 9)
    assert result.p_value == pytest.approx(binomtest(0, 5, 0.5).pvalue)
    assert result.low <= result.delta <= result.high


def test_paired_comparison_without_shared_pairs():
    result = paired_comparison({"x": 1.0}, {"y": 0.0}, {"x": "f", "y": "f"})
    assert result.table.n == 0
    assert math.isnan(result.delta)
    assert math.isnan(result.p_value)
    assert result.excluded == 2


def test_paired_comparison_of_the_pilot_has_a_newcombe_interval():
    # A passes all 24, B the 8 pairs of two families: delta -16/24.  The within-family
    # bootstrap gave -0.67 [-0.67, -0.67]; a pooled one about [-0.83, -0.46]
    families = {f"p{i}": PILOT_FAMILIES[i] for i in range(24)}
    a = dict.fromkeys(families, 1.0)
    b = {pid: 1.0 if i < 8 else 0.0 for i, pid in enumerate(families)}
    result = paired_comparison(a, b, families, comparisons=3)
    assert result.delta == pytest.approx(-2 / 3)
    assert result.interval_method == NEWCOMBE
    assert not result.degenerate
    assert (result.low, result.high) == newcombe_paired(result.table)
    assert (result.low, result.high) == pytest.approx((-0.8203, -0.4240), abs=1e-4)


def test_paired_comparison_flags_an_underpowered_difference():
    families = {f"p{i}": PILOT_FAMILIES[i] for i in range(24)}
    a = dict.fromkeys(families, 0.0)
    b = {pid: 1.0 if i < 3 else 0.0 for i, pid in enumerate(families)}  # +3/24
    small = paired_comparison(a, b, families, comparisons=3)
    observed = 3 / 24
    expected = minimum_detectable_difference(24, observed, comparisons=3)
    assert small.min_detectable == pytest.approx(expected)
    assert small.min_detectable == detectable_difference(small.table, comparisons=3)
    assert small.delta < small.min_detectable
    assert small.underpowered
    # more comparisons, a stricter alpha: a larger detectable difference
    assert paired_comparison(a, b, families, comparisons=6).min_detectable > expected
    b = {pid: 1.0 if i < 20 else 0.0 for i, pid in enumerate(families)}  # +20/24
    large = paired_comparison(a, b, families, comparisons=3)
    assert large.min_detectable <= large.delta
    assert not large.underpowered


def test_paired_comparison_with_too_few_pairs_to_reject_is_underpowered():
    families = {f"p{i}": "f" for i in range(4)}
    result = paired_comparison(dict.fromkeys(families, 0.0), dict.fromkeys(families, 1.0), families)
    assert math.isnan(result.min_detectable)  # 4 of 4 discordant: p = 0.125
    assert result.underpowered


# ------------------------------------------------------------- Newcombe's paired interval
# Published 95 % intervals of Newcombe (1998) method 10, as transcribed with their sources
# by the R package ratesci (tests/testthat/test3.R, "MOVER_newc", moverbase "wilson").
# Cells (a, b, c, d) = (both, only the first, only the second, neither); the difference is
# first minus second, which here is B minus A.
PUBLISHED = [
    ((20, 12, 2, 16), (0.0562, 0.3292), 4),  # Newcombe 1998, Statistics in Medicine 17:2635
    ((1, 1, 7, 12), (-0.507, -0.026), 3),  # Fagerland, Lydersen, Laake 2014, Stat Med 33:2850
    ((8, 3, 1, 2), (-0.1574, 0.4136), 4),  # Tang, Li, Tang 2010, Stat Methods Med Res 21:361
    ((7, 25, 2, 68), (0.133, 0.318), 3),  # Chang et al 2024, J Applied Statistics 51:139
]


@pytest.mark.parametrize(("cells", "interval", "digits"), PUBLISHED)
def test_newcombe_matches_published_examples(cells, interval, digits):
    a, b, c, d = cells
    low, high = newcombe_paired(PairedTable(both=a, only_a=c, only_b=b, neither=d))
    assert (round(low, digits), round(high, digits)) == interval


def _wilson_by_root(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson limits as the roots of (k/n - p)^2 = z^2 p (1 - p) / n (no statsmodels)."""
    p = k / n

    def score(x: float) -> float:
        return (p - x) ** 2 - z * z * x * (1 - x) / n

    low = 0.0 if k == 0 else brentq(score, 0.0, p - 1e-15, xtol=1e-14)
    high = 1.0 if k == n else brentq(score, p + 1e-15, 1.0, xtol=1e-14)
    return low, high


def _newcombe_by_paper(
    e: int, f: int, g: int, h: int, alpha: float = 0.05, corrected: bool = True
) -> tuple[float, float]:
    """Method 10 written again in the paper's cells: e both, f first only, g second only."""
    n = e + f + g + h
    z = norm.ppf(1 - alpha / 2)
    p1, p2 = (e + f) / n, (e + g) / n
    l2, u2 = _wilson_by_root(e + f, n, z)
    l3, u3 = _wilson_by_root(e + g, n, z)
    product = (e + f) * (g + h) * (e + g) * (f + h)
    if product == 0:
        phi = 0.0
    elif corrected and e * h > f * g:
        phi = max(e * h - f * g - n / 2, 0) / math.sqrt(product)
    else:
        phi = (e * h - f * g) / math.sqrt(product)
    dl2, du2, dl3, du3 = p1 - l2, u2 - p1, p2 - l3, u3 - p2
    delta = math.sqrt(dl2**2 - 2 * phi * dl2 * du3 + du3**2)
    epsilon = math.sqrt(du2**2 - 2 * phi * du2 * dl3 + dl3**2)
    return p1 - p2 - delta, p1 - p2 + epsilon


def test_the_independent_implementation_matches_both_published_variants():
    # with Newcombe's n/2 correction of phi: method 10; without it, the variant
    # ratesci checks against Newcombe's (0.0618, 0.3242) for the same table
    corrected = _newcombe_by_paper(20, 12, 2, 16)
    plain = _newcombe_by_paper(20, 12, 2, 16, corrected=False)
    assert tuple(round(x, 4) for x in corrected) == (0.0562, 0.3292)
    assert tuple(round(x, 4) for x in plain) == (0.0618, 0.3242)


def test_newcombe_equals_an_independent_implementation_on_every_small_table():
    checked = 0
    for n in range(1, 11):
        for e, f, g in itertools.product(range(n + 1), repeat=3):
            h = n - e - f - g
            if h < 0:
                continue
            ours = newcombe_paired(PairedTable(both=e, only_a=g, only_b=f, neither=h))
            assert ours == pytest.approx(_newcombe_by_paper(e, f, g, h), abs=1e-9), (e, f, g, h)
            checked += 1
    assert checked == 1000


@settings(max_examples=200, deadline=None)
@given(cells=st.tuples(*[st.integers(0, 30)] * 4).filter(lambda c: sum(c) > 0))
def test_newcombe_holds_the_estimate_and_never_has_zero_width(cells):
    table = PairedTable(*cells)
    low, high = newcombe_paired(table)
    delta = (table.only_b - table.only_a) / table.n
    assert -1.0 <= low <= delta <= high <= 1.0
    assert high - low > 1e-6
    # swapping the conditions mirrors the interval
    mirrored = newcombe_paired(PairedTable(table.both, table.only_b, table.only_a, table.neither))
    assert mirrored == pytest.approx((-high, -low), abs=1e-12)


# Coverage settings (both, only_a, only_b, neither): a 20-point gap on the pilot's 24
# pairs, and a 10-point gap with many discordant pairs on 40.
COVERAGE = [(24, (0.3, 0.05, 0.25, 0.4)), (40, (0.3, 0.2, 0.1, 0.4))]


@pytest.mark.parametrize(("n", "probabilities"), COVERAGE)
def test_newcombe_covers_95_percent_by_simulation(n, probabilities):
    rng = np.random.default_rng(20261130)
    tables = rng.multinomial(n, probabilities, size=3000)
    truth = probabilities[2] - probabilities[1]
    found: dict[tuple[int, ...], bool] = {}
    for row in map(tuple, tables):
        if row not in found:
            low, high = newcombe_paired(PairedTable(*row))
            found[row] = low <= truth <= high
    coverage = np.mean([found[tuple(row)] for row in tables])
    assert 0.93 <= coverage <= 0.97


def test_newcombe_covers_95_percent_exactly_on_24_pairs():
    # every one of the 2,925 tables of 24 pairs, weighted by its probability
    tables = [
        (a, b, c, 24 - a - b - c)
        for a in range(25)
        for b in range(25 - a)
        for c in range(25 - a - b)
    ]
    intervals = np.array([newcombe_paired(PairedTable(*t)) for t in tables])
    for probabilities in [(0.3, 0.05, 0.25, 0.4), (0.2, 0.15, 0.15, 0.5), (0.5, 0.0, 0.2, 0.3)]:
        truth = probabilities[2] - probabilities[1]
        covered = (intervals[:, 0] <= truth) & (truth <= intervals[:, 1])
        coverage = multinomial.pmf(tables, 24, probabilities)[covered].sum()
        assert 0.94 <= coverage <= 0.97


# --------------------------------------------------- pair-level scores with NA (LLM rows)


def _reads(pair: str, family: str, values: dict[tuple[str, str], object], **extra) -> list[dict]:
    rows = []
    for (variant, branch), correct in values.items():
        rows.append(
            {
                "pair_id": pair,
                "source_pair_id": pair,
                "family": family,
                "variant": variant,
                "branch": branch,
                "repeat": 0,
                "condition": "c",
                "budget": 1200,
                "reader": "llm",
                "reader_model": "tiny",
                "transform": "identity",
                "outcome": "na" if correct is None else ("pass" if correct else "reader_error"),
                "correct": correct,
                "adequate": 1,
                "collision": 0,
                "memory_bytes": 10,
                **{k: v(variant, branch) if callable(v) else v for k, v in extra.items()},
            }
        )
    return rows


def _all(value: object) -> dict[tuple[str, str], object]:
    return {(v, b): value for v in ("A", "B") for b in ("current", "reveal", "override")}


@pytest.fixture
def na_table() -> pd.DataFrame:
    """Three pairs through an LLM reader: all pass; one NA read; one wrapper-only miss."""
    rows = _reads("p1", "f", _all(1), correct_lenient=1)
    with_na = _all(1) | {("B", "reveal"): None}
    rows += _reads(
        "p2", "f", with_na, correct_lenient=lambda v, b: None if (v, b) == ("B", "reveal") else 1
    )
    wrapper = _all(1) | {("A", "override"): 0}
    rows += _reads("p3", "g", wrapper, correct_lenient=1)
    # an empty string is NA, as results.csv writes it
    frame = pd.DataFrame(rows)
    frame["correct"] = frame["correct"].map(lambda x: "" if x is None else str(x))
    return normalize(frame)


def _cell(frame: pd.DataFrame, transform: str = "identity") -> dict:
    scores = score_results(frame)
    found = scores.cell(scores.systems[0], transform)
    assert found is not None
    return found


def test_joint_j_na_bounds(na_table: pd.DataFrame):
    scores = score_results(na_table)
    pairs = scores.pairs["joint_J"].set_index("source_pair_id")
    assert pairs.loc["p1", ["every_lo", "every_hi"]].tolist() == [1, 1]
    assert pairs.loc["p2", ["every_lo", "every_hi"]].tolist() == [0, 1]  # NA as fail / as pass
    assert pairs.loc["p3", ["every_lo", "every_hi"]].tolist() == [0, 0]
    cell = _cell(na_table)
    assert (cell["joint_J_pairs_k"], cell["joint_J_pairs_k_high"], cell["joint_J_pairs_n"]) == (
        1,
        2,
        3,
    )


def test_strict_vs_lenient(na_table: pd.DataFrame):
    cell = _cell(na_table)
    # lenient accepts p3's bare map; p2 keeps its NA bound
    assert (cell["joint_J_pairs_k"], cell["joint_J_pairs_k_high"]) == (1, 2)
    assert (cell["joint_J_lenient_pairs_k"], cell["joint_J_lenient_pairs_k_high"]) == (2, 3)


def test_current_accuracy_has_no_bounds_without_na(na_table: pd.DataFrame):
    cell = _cell(na_table)
    assert (cell["current_pairs_k"], cell["current_pairs_k_high"], cell["current_pairs_n"]) == (
        3,
        3,
        3,
    )


def test_score_counts_source_pairs_not_reads_and_requires_every_instance():
    rows = _reads("p1", "f", _all(1)) + _reads("p2", "f", _all(1))
    renamed = []
    for index, ok in enumerate((1, 0)):  # p1 passes one renaming, fails the other
        for row in _reads("p1", "f", _all(1) | {("A", "reveal"): ok}):
            renamed.append(row | {"pair_id": f"p1~r{index}", "transform": "rename"})
    for index in range(2):
        for row in _reads("p2", "f", _all(1)):
            renamed.append(row | {"pair_id": f"p2~r{index}", "transform": "rename"})
    frame = normalize(pd.DataFrame(rows + renamed))
    identity, moved = _cell(frame), _cell(frame, "rename")
    assert (identity["reveal_pairs_k"], identity["reveal_pairs_n"]) == (2, 2)
    # n stays 2 source pairs under renaming; p1 fails one instance so it fails
    assert (moved["reveal_pairs_k"], moved["reveal_pairs_n"]) == (1, 2)
    assert (moved["reveal_blocks_k"], moved["reveal_blocks_n"]) == (3, 4)


def test_repeats_are_blocks_never_a_majority_vote():
    # one pair, three repeats of its one instance: 2 pass, 1 fails reveal
    rows = []
    for repeat, ok in enumerate((1, 1, 0)):
        rows += [r | {"repeat": repeat} for r in _reads("p1", "f", _all(1) | {("B", "reveal"): ok})]
    cell = _cell(normalize(pd.DataFrame(rows)))
    assert (cell["reveal_blocks_k"], cell["reveal_blocks_n"]) == (2, 3)
    assert (cell["reveal_pairs_k"], cell["reveal_pairs_n"]) == (0, 1)  # not every block passes


# ------------------------------------------------------------ replication: seeds differ?


def _ffh_exact_p(counts: list[tuple[int, int]]) -> float:
    """Fisher-Freeman-Halton by enumeration: every table of passes per seed with the
    observed margins, weighted by its multivariate hypergeometric probability; the p
    is the mass of tables no more likely than the observed one."""
    sizes = [n for _, n in counts]
    total = sum(k for k, _ in counts)

    def probability(ks: tuple[int, ...]) -> float:
        return math.prod(math.comb(n, k) for k, n in zip(ks, sizes, strict=True)) / math.comb(
            sum(sizes), total
        )

    tables = [ks for ks in itertools.product(*(range(n + 1) for n in sizes)) if sum(ks) == total]
    observed = probability(tuple(k for k, _ in counts))
    return sum(p for ks in tables if (p := probability(ks)) <= observed * (1 + 1e-7))


@pytest.mark.parametrize(
    "counts",
    [
        [(3, 8), (6, 8), (1, 8)],
        [(5, 10), (5, 10), (4, 10)],
        [(0, 6), (6, 6), (3, 6), (2, 6)],
        [(7, 12), (2, 12), (9, 12)],
    ],
)
def test_seeds_differ_p_is_the_exact_fisher_freeman_halton_p(counts):
    # Monte Carlo over 19,999 tables: within 0.015 of the exact p (4 standard errors
    # at p = 0.5), and the same on every call (seeded)
    p = heterogeneity_p(counts)
    assert p == heterogeneity_p(counts)
    assert p == pytest.approx(_ffh_exact_p(counts), abs=0.015)
    assert heterogeneity_test(len(counts)).startswith("Fisher-Freeman-Halton exact test")


def test_seeds_differ_p_of_two_seeds_is_fishers_and_none_without_variation():
    from scipy.stats import fisher_exact

    assert heterogeneity_p([(10, 24), (17, 24)]) == pytest.approx(
        fisher_exact([[10, 14], [17, 7]]).pvalue
    )
    assert heterogeneity_test(2) == "Fisher's exact test"
    assert heterogeneity_p([(24, 24), (24, 24), (24, 24)]) is None  # all pass: no test
    assert heterogeneity_p([(5, 24)]) is None
    assert heterogeneity_p([(12, 24), (12, 24), (12, 24)]) == 1.0


# ------------------------------------------------------------- closed forms vs statsmodels


def test_closed_forms_equal_statsmodels_on_a_grid():
    """Wilson, exact McNemar and Holm are closed forms of ours; statsmodels (a dev
    dependency only) is the oracle, to 1e-12, on every k <= n <= 60 and level."""
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import proportion_confint

    from audit.scoring._stats import wilson_arrays

    for alpha in (0.01, 0.05, 0.1, 0.3):
        ks, ns = zip(*[(k, n) for n in range(1, 61) for k in range(n + 1)], strict=True)
        low, high = proportion_confint(np.array(ks), np.array(ns), alpha=alpha, method="wilson")
        ours_low, ours_high = wilson_arrays(ks, ns, alpha)
        assert np.max(np.abs(ours_low - np.clip(low, 0, 1))) < 1e-12
        assert np.max(np.abs(ours_high - np.clip(high, 0, 1))) < 1e-12
        for k, n, lo, hi in zip(ks[::7], ns[::7], low[::7], high[::7], strict=True):
            assert wilson(k, n, alpha) == pytest.approx((max(0, lo), min(1, hi)), abs=1e-12)
    for only_a in range(0, 41, 3):
        for only_b in range(0, 41, 2):
            table = PairedTable(both=5, only_a=only_a, only_b=only_b, neither=7)
            expected = 1.0 if only_a + only_b == 0 else min(1.0, mcnemar(
                [[5, only_a], [only_b, 7]], exact=True, correction=False).pvalue)  # fmt: skip
            assert abs(mcnemar_exact(table) - expected) < 1e-12
    rng = np.random.default_rng(3)
    for m in (1, 2, 5, 17):
        values = rng.uniform(0, 0.2, m)
        values[rng.integers(0, m)] = values[0]  # a tie
        assert holm(list(values)) == pytest.approx(
            list(multipletests(values, method="holm")[1]), abs=1e-12
        )
    assert math.isnan(holm([math.nan, 0.01])[0])
    assert holm([math.nan, 0.01])[1] == 0.01


def test_scoring_imports_no_statsmodels():
    """statsmodels is off the run's import path: scoring a run never imports it."""
    import subprocess
    import sys

    code = (
        "import sys; from audit.scoring._stats import wilson, mcnemar_exact, holm, PairedTable;"
        "wilson(3, 10); mcnemar_exact(PairedTable(1, 2, 3, 4)); holm([0.1, 0.2]);"
        "import audit.engine; import audit.cli;"
        "print('statsmodels' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
