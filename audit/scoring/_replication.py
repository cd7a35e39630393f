"""Replication across generation seeds: is a finding more than one dataset's accident?

``audit run --seeds 1,2,3`` runs the same audit on datasets generated with each seed
(the same families, sizes and labels; other histories).  Per system, at identity
and over all families, each seed's k/n source pairs is kept; the **pooled**
estimate adds them up (the seeds' pairs are independent histories, so the pooled
source pairs are independent too) with a Wilson interval; **heterogeneity** is the
p-value of an exact test that the seeds share one pass rate: Fisher's for two seeds,
the Fisher-Freeman-Halton test for more, its p-value estimated from 19,999 random
tables with the observed margins (seeded, so the same runs give the same p).  A
chi-square test would be wrong here: with 24 pairs a seed its expected counts are
small.  A small p says the seeds disagree, and the pooled number hides it; a large p
is no evidence that they agree (with a few dozen pairs a seed the test has low power).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._stats import wilson
from audit.scoring._summary import Summary, SummaryCell

REPLICATED = ("joint_J", "reveal", "current")
MONTE_CARLO_TABLES = 19_999
MONTE_CARLO_SEED = 0


def heterogeneity_test(seeds: int) -> str:
    """The test ``heterogeneity_p`` runs for this many seeds with data."""
    if seeds == 2:
        return "Fisher's exact test"
    return (
        f"Fisher-Freeman-Halton exact test, Monte Carlo ({MONTE_CARLO_TABLES} tables, "
        f"seed {MONTE_CARLO_SEED})"
    )


def heterogeneity_p(counts: list[tuple[int, int]]) -> float | None:
    """p-value that the seeds share one pass rate (None: fewer than two seeds with data,
    or every seed at the same all-pass or all-fail): exact, never a chi-square
    approximation (``heterogeneity_test``)."""
    table = np.array([[k, n - k] for k, n in counts if n > 0], dtype=np.int64)
    if len(table) < 2 or (table.sum(axis=0) == 0).any():
        return None
    from scipy.stats import MonteCarloMethod, fisher_exact  # type: ignore[import-untyped]

    if len(table) == 2:
        return float(fisher_exact(table).pvalue)
    method = MonteCarloMethod(
        n_resamples=MONTE_CARLO_TABLES, rng=np.random.default_rng(MONTE_CARLO_SEED)
    )
    return float(fisher_exact(table, method=method).pvalue)


def replicate(summaries: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (reader, condition, budget) and score: each seed's k/n, the pooled k/n with
    its Wilson interval, the spread of the seeds' rates and the heterogeneity p."""
    cells: dict[tuple[str, str, int], dict[int, SummaryCell]] = {}
    for seed, summary in summaries.items():
        for entry in Summary.model_validate(summary).scores:
            if entry.transform == IDENTITY and entry.family == ALL:
                cells.setdefault((entry.reader, entry.condition, entry.budget), {})[seed] = entry
    out = []
    for (reader, condition, budget), by_seed in cells.items():
        row: dict[str, Any] = {"reader": reader, "condition": condition, "budget": budget}
        for metric in REPLICATED:
            counts = {
                seed: entry.source_pairs[metric]
                for seed, entry in sorted(by_seed.items())
                if metric in entry.source_pairs
            }
            k = sum(c.k for c in counts.values())
            n = sum(c.n for c in counts.values())
            rates = [c.k / c.n for c in counts.values() if c.n]
            low, high = wilson(k, n) if n else (math.nan, math.nan)
            row[metric] = {
                "per_seed": {str(seed): {"k": c.k, "n": c.n} for seed, c in counts.items()},
                "pooled": {"k": k, "n": n, "low": low, "high": high},
                "seed_rates": {"min": min(rates, default=None), "max": max(rates, default=None)},
                "heterogeneity_p": heterogeneity_p([(c.k, c.n) for c in counts.values()]),
                "heterogeneity_test": heterogeneity_test(sum(c.n > 0 for c in counts.values())),
            }
        out.append(row)
    return out
