"""Replication across generation seeds: is a finding more than one dataset's accident?

``audit run --seeds 1,2,3`` runs the same audit on datasets generated with each seed
(the same families, sizes and labels; other histories).  Per system, at identity
and over all families, each seed's k/n source pairs is kept; the **pooled**
estimate adds them up (the seeds' pairs are independent histories, so the pooled
source pairs are independent too) with a Wilson interval; **heterogeneity** is the
p-value of a chi-square test of homogeneity of the seeds' pass rates (exact Fisher
for two seeds): a small p says the seeds disagree, and the pooled number hides it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from audit.scoring._metrics import ALL, IDENTITY
from audit.scoring._stats import wilson

REPLICATED = ("joint_J", "reveal", "current")


def heterogeneity_p(counts: list[tuple[int, int]]) -> float | None:
    """p-value that the seeds share one pass rate (None: fewer than two seeds with data,
    or every seed at the same all-pass or all-fail)."""
    table = np.array([[k, n - k] for k, n in counts if n > 0], dtype=np.int64)
    if len(table) < 2 or (table.sum(axis=0) == 0).any():
        return None
    from scipy.stats import chi2_contingency, fisher_exact  # type: ignore[import-untyped]

    if len(table) == 2:
        return float(fisher_exact(table).pvalue)
    return float(chi2_contingency(table, correction=False).pvalue)


def replicate(summaries: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (reader, condition, budget) and score: each seed's k/n, the pooled k/n with
    its Wilson interval, the spread of the seeds' rates and the heterogeneity p."""
    cells: dict[tuple[str, str, int], dict[int, Mapping[str, Any]]] = {}
    for seed, summary in summaries.items():
        for entry in summary["scores"]:
            if entry["transform"] == IDENTITY and entry["family"] == ALL:
                key = (entry["reader"], entry["condition"], entry["budget"])
                cells.setdefault(key, {})[seed] = entry
    out = []
    for (reader, condition, budget), by_seed in cells.items():
        row: dict[str, Any] = {"reader": reader, "condition": condition, "budget": budget}
        for metric in REPLICATED:
            counts = {
                seed: entry["source pairs"][metric]
                for seed, entry in sorted(by_seed.items())
                if metric in entry["source pairs"]
            }
            k = sum(c["k"] for c in counts.values())
            n = sum(c["n"] for c in counts.values())
            rates = [c["k"] / c["n"] for c in counts.values() if c["n"]]
            low, high = wilson(k, n) if n else (math.nan, math.nan)
            row[metric] = {
                "per_seed": {str(seed): {"k": c["k"], "n": c["n"]} for seed, c in counts.items()},
                "pooled": {"k": k, "n": n, "low": low, "high": high},
                "seed_rates": {"min": min(rates, default=None), "max": max(rates, default=None)},
                "heterogeneity_p": heterogeneity_p([(c["k"], c["n"]) for c in counts.values()]),
            }
        out.append(row)
    return out
