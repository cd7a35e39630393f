"""Exact power of the exact McNemar test, the pairs a comparison needs, and `audit power`.

Reference values come from closed forms (with every discordant pair one way, the
power is a binomial tail), from a brute-force enumeration of every table that
decides with the audit's own ``mcnemar_exact``, and from Connor's (1987) normal
approximation, which the exact test must need at least as many pairs as.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom, norm
from typer.testing import CliRunner

from audit.cli import app
from audit.scoring import PairedTable, minimum_detectable_difference, pairs_needed, power
from audit.scoring._power import (
    MAX_PAIRS,
    _critical_values,
    _power_curve,
    _rejection_probability,
    alpha_per_test,
)
from audit.scoring._stats import mcnemar_exact

runner = CliRunner()


def brute_force_power(n: int, delta: float, psi: float, level: float) -> float:
    """Sum P(table) over every (B, C) split the audit's McNemar test rejects."""
    p10 = (psi + delta) / 2
    total = 0.0
    for d in range(n + 1):
        for b in range(d + 1):
            if d and mcnemar_exact(PairedTable(0, d - b, b, n - d)) <= level:
                total += binom.pmf(d, n, psi) * binom.pmf(b, d, p10 / psi if psi else 0.5)
    return total


# ---------------------------------------------------------------------------- known values


def test_the_pilot_has_19_percent_power_for_a_20_point_gap():
    # 24 pairs, 3 comparisons: alpha 0.05/3.  With every discordant pair one way the
    # test needs 7 of them (2 * 0.5**7 = 0.0156 <= 0.0167 < 2 * 0.5**6), so the power
    # is P(Bin(24, 0.2) >= 7).
    assert 2 * 0.5**7 <= 0.05 / 3 < 2 * 0.5**6
    expected = binom.sf(6, 24, 0.2)
    assert expected == pytest.approx(0.1889, abs=1e-4)
    assert power(24, 0.2, comparisons=3) == pytest.approx(expected, rel=1e-9)
    assert power(24, -0.2, comparisons=3) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("n", "delta", "psi", "level"),
    [(24, 0.2, 0.3, 0.05 / 3), (30, 0.1, 0.5, 0.05), (18, 0.5, 1.0, 0.05), (40, 0.05, 0.15, 0.01)],
)
def test_power_equals_brute_force_enumeration_with_the_audits_test(n, delta, psi, level):
    expected = brute_force_power(n, delta, psi, level)
    assert power(n, delta, psi, alpha=level) == pytest.approx(expected, rel=1e-9, abs=1e-12)


LEVELS = [alpha / m for alpha in (0.01, 0.05, 0.1) for m in range(1, 21)]


@pytest.mark.parametrize("max_d", [1, 2, 7, 100, 3000])
def test_critical_values_are_those_of_scipy_stats_binom(max_d):
    # the definition through scipy.stats: the smallest c with P(<= c) >= level / 2,
    # one less unless 2 P(<= c) <= level
    d = np.arange(max_d + 1)
    for level in LEVELS:
        c = binom.ppf(level / 2, d, 0.5)
        expected = np.where(2 * binom.cdf(c, d, 0.5) <= level, c, c - 1).astype(np.int64)
        assert np.array_equal(_critical_values(max_d, level), expected), level


@pytest.mark.parametrize("q", [0.5, 0.6, 0.75, 0.9, 1.0])
def test_rejection_probabilities_are_scipy_stats_binomial_tails(q):
    d = np.arange(3001)
    for level in LEVELS[::7]:
        c = _critical_values(3000, level)
        expected = np.where(c >= 0, binom.cdf(c, d, q) + binom.sf(d - c - 1, d, q), 0.0)
        assert np.allclose(_rejection_probability(d, c, q), expected, rtol=0, atol=1e-12)
        # and the power built on them
        for n, psi in [(24, 0.3), (300, 0.1), (2000, 0.05)]:
            curve = _power_curve([n], psi, expected.__getitem__)
            assert power(n, psi * (2 * q - 1), psi, alpha=level) == pytest.approx(
                float(curve[0]), rel=0, abs=1e-12
            )


def test_power_at_no_effect_is_the_size_of_the_test():
    size = power(200, 0.0, psi=0.5, comparisons=2)
    assert 0.0 < size <= 0.025
    assert power(200, 0.0) == 0.0  # no discordant pair ever: nothing to test


def test_pairs_needed_for_the_pilots_gap_is_a_binomial_tail():
    # with psi = delta the power is P(Bin(n, 0.2) >= 7): the first n where it reaches 0.8
    first = next(n for n in range(7, 200) if binom.sf(6, n, 0.2) >= 0.8)
    assert pairs_needed(0.2, comparisons=3) == first == 44


@pytest.mark.parametrize(("delta", "psi"), [(0.1, 0.2), (0.1, None), (0.15, 0.4)])
def test_pairs_needed_is_at_least_connors_normal_approximation(delta, psi):
    # Connor (1987), Biometrics 43:207: n = (z_a sqrt(psi) + z_b sqrt(psi - delta^2))^2 / delta^2;
    # the exact test is conservative, so it needs at least that many, and not wildly more
    discordance = delta if psi is None else psi
    connor = (
        norm.ppf(0.975) * math.sqrt(discordance) + norm.ppf(0.8) * math.sqrt(discordance - delta**2)
    ) ** 2 / delta**2
    exact = pairs_needed(delta, psi)
    assert connor <= exact <= 1.15 * connor


def test_minimum_detectable_difference_of_the_pilot():
    smallest = minimum_detectable_difference(24, comparisons=3)
    assert smallest == pytest.approx(0.3537, abs=1e-3)
    assert power(24, smallest, comparisons=3) >= 0.8
    assert power(24, smallest - 1e-4, comparisons=3) < 0.8


def test_minimum_detectable_difference_with_an_observed_discordance():
    # discordance 0.5 as a floor: psi = max(delta, 0.5); more noise, a larger effect needed
    floor = minimum_detectable_difference(24, 0.5, comparisons=3)
    assert floor > minimum_detectable_difference(24, comparisons=3)
    assert power(24, floor, 0.5, comparisons=3) >= 0.8
    assert power(24, floor - 1e-4, 0.5, comparisons=3) < 0.8
    # the same as a function
    assert minimum_detectable_difference(24, lambda d: max(d, 0.5), comparisons=3) == pytest.approx(
        floor, abs=1e-9
    )
    # above the floor the effect sets the discordance
    assert minimum_detectable_difference(24, 0.1, comparisons=3) == pytest.approx(
        minimum_detectable_difference(24, comparisons=3), abs=1e-9
    )


def test_minimum_detectable_difference_is_nan_when_the_test_cannot_reject():
    # 4 pairs: even 4 of 4 discordant one way gives p = 2 / 16 = 0.125 > 0.05
    assert math.isnan(minimum_detectable_difference(4))
    assert not math.isnan(minimum_detectable_difference(6))  # 2 / 64 <= 0.05


def test_pairs_needed_returns_the_first_n_even_where_power_dips_after_it():
    # every pair discordant: power is the conditional power, a pronounced saw-tooth
    n = pairs_needed(0.5, 1.0)
    assert n == 30
    assert power(30, 0.5, 1.0) >= 0.8 > power(29, 0.5, 1.0)
    assert power(31, 0.5, 1.0) < 0.8  # one more pair, less power
    assert all(power(k, 0.5, 1.0) < 0.8 for k in range(1, 30))


def test_alpha_is_divided_by_the_comparisons():
    assert alpha_per_test(0.05, 3) == pytest.approx(0.05 / 3)
    assert power(60, 0.2, 0.4, alpha=0.05, comparisons=4) == pytest.approx(
        power(60, 0.2, 0.4, alpha=0.0125)
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: power(0, 0.2), "n must be"),
        (lambda: power(24, 1.2), "effect must be"),
        (lambda: power(24, 0.3, psi=0.2), "discordance must be"),
        (lambda: power(24, 0.3, psi=1.1), "discordance must be"),
        (lambda: power(24, 0.2, alpha=0.0), "alpha must be"),
        (lambda: power(24, 0.2, comparisons=0), "comparisons must be"),
        (lambda: pairs_needed(0.0), "non-zero"),
        (lambda: pairs_needed(0.2, target=1.0), "target power"),
        (lambda: minimum_detectable_difference(24, 1.5), "discordance must be"),
    ],
)
def test_bad_values_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_pairs_needed_stops_at_its_limit():
    with pytest.raises(ValueError, match=f"more than {MAX_PAIRS:,}"):
        pairs_needed(0.005, 0.9)


# ------------------------------------------------------------------------------ properties

effects = st.floats(min_value=0.02, max_value=1.0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 150), delta=effects, m=st.integers(1, 6))
def test_power_grows_with_n_at_the_most_favourable_discordance(n, delta, m):
    assert power(n + 1, delta, comparisons=m) >= power(n, delta, comparisons=m) - 1e-12


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 150),
    low=effects,
    high=effects,
    spare=st.floats(0.0, 1.0),
    m=st.integers(1, 6),
)
def test_power_grows_with_the_effect(n, low, high, spare, m):
    low, high = sorted((low, high))
    assert power(n, high, comparisons=m) >= power(n, low, comparisons=m) - 1e-12
    psi = high + spare * (1 - high)  # one discordance valid for both effects
    assert power(n, high, psi, comparisons=m) >= power(n, low, psi, comparisons=m) - 1e-12


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 150), delta=effects, spare=st.floats(0.0, 1.0), m=st.integers(1, 6))
def test_power_falls_with_the_comparisons(n, delta, spare, m):
    psi = delta + spare * (1 - delta)
    assert power(n, delta, psi, comparisons=m + 1) <= power(n, delta, psi, comparisons=m) + 1e-12


@settings(max_examples=30, deadline=None)
@given(
    delta=st.floats(0.12, 1.0),
    spare=st.floats(0.0, 1.0),
    m=st.integers(1, 5),
    target=st.sampled_from([0.5, 0.8, 0.9]),
)
def test_pairs_needed_is_the_first_n_that_reaches_the_target(delta, spare, m, target):
    psi = delta + spare * (1 - delta)
    n = pairs_needed(delta, psi, comparisons=m, target=target)
    assert power(n, delta, psi, comparisons=m) >= target
    assert n == 1 or power(n - 1, delta, psi, comparisons=m) < target


# ------------------------------------------------------------------------------------ CLI


def run(*args: str):
    return runner.invoke(app, ["power", *args])


def test_cli_prints_power_and_detectable_difference_for_given_pairs():
    result = run("--effect", "0.2", "--comparisons", "3", "--pairs", "24")
    assert result.exit_code == 0, result.output
    assert "0.05 / 3 comparisons = 0.01667 per test" in result.output
    assert "power with 24 source pairs: 18.9%" in result.output
    assert "smallest effect detected with 80% power: 0.354" in result.output


def test_cli_prints_the_pairs_needed():
    result = run("--effect", "0.2", "--comparisons", "3")
    assert result.exit_code == 0, result.output
    assert "source pairs needed for 80% power: 44" in result.output
    result = run("--effect", "0.2", "--discordance", "0.3", "--comparisons", "3", "--power", "0.9")
    assert result.exit_code == 0, result.output
    expected = pairs_needed(0.2, 0.3, comparisons=3, target=0.9)
    assert f"source pairs needed for 90% power: {expected}" in result.output


def test_cli_says_when_more_pairs_dip_below_the_target():
    result = run("--effect", "0.5", "--discordance", "1")
    assert result.exit_code == 0, result.output
    assert "needed for 80% power: 30" in result.output
    assert "31 pairs give 77.1%" in " ".join(result.output.split())  # wrapped at 80


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--effect", "1.5"], "--effect must be in (0, 1]"),
        (["--effect", "0"], "--effect must be in (0, 1]"),
        (["--effect", "0.3", "--discordance", "0.2"], "--discordance must be in [--effect, 1]"),
        (["--effect", "0.3", "--comparisons", "0"], "--comparisons must be at least 1"),
        (["--effect", "0.3", "--alpha", "1"], "--alpha must be in (0, 1)"),
        (["--effect", "0.3", "--power", "1.2"], "--power must be in (0, 1)"),
        (["--effect", "0.3", "--pairs", "0"], "--pairs must be at least 1"),
        (["--effect", "0.005", "--discordance", "0.9"], "more than 20,000 source pairs"),
    ],
)
def test_cli_refuses_bad_values_in_one_line(args, message):
    result = run(*args)
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert message in errors[0]
