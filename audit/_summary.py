"""Scores of a run, from its per-read results table (PROTOCOL.md, "Scores").

Every score is kept as k/n, per condition x budget x transform x family (family
``all`` aggregates).  Counting units: accuracies and adequacy count reads; joint J
counts pair-repeat blocks (a block passes only if both variants pass on both the
reveal and the override branch); the collision rate counts pair instances.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

ALL = "all"
SCORED_COLUMNS = (
    "condition", "budget", "transform", "reader", "family", "branch", "pair_id",
    "source_pair_id", "repeat", "outcome", "correct", "correct_lenient", "adequate",
    "collision", "equivariant", "overflow", "memory_bytes",
)  # fmt: skip
LATE_REFERENCE = "late_reference"


def frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df
    for column in ("correct", "correct_lenient", "adequate", "collision", "equivariant",
                   "overflow", "memory_bytes", "tokens_prompt", "tokens_completion",
                   "latency_s", "cache_hit"):  # fmt: skip
        if column in df:
            df[column] = pd.to_numeric(df[column], errors="coerce")
    return df


def _kn(series: pd.Series) -> dict[str, int]:
    valid = series.dropna()
    return {"k": int(valid.sum()), "n": int(valid.size)}


def _group_scores(df: pd.DataFrame) -> dict[str, Any]:
    """All scores of one group of rows (one condition, budget, transform, family)."""
    by_branch = {b: df[df["branch"] == b] for b in ("current", "reveal", "override")}
    scores: dict[str, Any] = {
        f"{branch}_accuracy": _kn(rows["correct"]) for branch, rows in by_branch.items()
    }
    if "correct_lenient" in df and df["correct_lenient"].notna().any():
        scores.update(
            {f"{b}_accuracy_lenient": _kn(rows["correct_lenient"]) for b, rows in by_branch.items()}
        )
    scores["na_reads"] = int((df["outcome"] == "na").sum())
    futures = df[df["branch"].isin(["reveal", "override"])]
    if not futures.empty:
        keys = [futures["pair_id"], futures["repeat"]]
        passed = (futures["correct"] == 1).groupby(keys).all()
        possible = ((futures["correct"] == 1) | futures["correct"].isna()).groupby(keys).all()
        if bool((possible != passed).any()):
            # NA present: J is only known within bounds (NA as fail, NA as pass)
            scores["joint_J_bounds"] = {
                "low": {"k": int(passed.sum()), "n": int(passed.size)},
                "high": {"k": int(possible.sum()), "n": int(possible.size)},
            }
        else:
            scores["joint_J"] = {"k": int(passed.sum()), "n": int(passed.size)}
    scores["adequacy"] = _kn(by_branch["reveal"]["adequate"])
    late = by_branch["reveal"][by_branch["reveal"]["family"] == LATE_REFERENCE]
    scores["late_reference_adequacy"] = _kn(late["adequate"])
    current = by_branch["current"]
    instances = current.drop_duplicates(["pair_id", "repeat"])
    scores["collision_rate"] = _kn(instances["collision"])
    equivariance = df["equivariant"].dropna()
    scores["equivariance_violations"] = {
        "k": int((equivariance == 0).sum()),
        "n": int(equivariance.size),
    }
    overflow = df["overflow"].dropna()
    scores["over_budget_reads"] = {"k": int((overflow > 0).sum()), "n": int(overflow.size)}
    scores["mean_memory_bytes"] = round(float(df["memory_bytes"].mean()), 1)
    scores["outcomes"] = {str(k): int(v) for k, v in df["outcome"].value_counts().items()}
    return scores


def score_table(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per condition x budget x transform x family (and family ``all``)."""
    entries: list[dict[str, Any]] = []
    keys = ["condition", "budget", "transform", "reader"]
    df = df[[c for c in SCORED_COLUMNS if c in df]].copy()
    for column in ("branch", "family", "outcome", "pair_id", "source_pair_id"):
        df[column] = df[column].astype("category")
    for (condition, budget, transform, reader), group in df.groupby(keys, sort=False):
        families = [(ALL, group), *group.groupby("family", sort=False, observed=True)]
        for family, rows in families:
            entries.append(
                {
                    "condition": condition,
                    "budget": int(str(budget)),
                    "transform": transform,
                    "reader": reader,
                    "family": family,
                    "n_source_pairs": int(rows["source_pair_id"].nunique()),
                    **_group_scores(rows),
                }
            )
    return entries


def rate(kn: dict[str, int]) -> float | None:
    return None if kn["n"] == 0 else kn["k"] / kn["n"]


def shortcut_gaps(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Identity minus transformed, for reveal accuracy and late-reference adequacy."""
    identity = {
        (e["condition"], e["budget"], e["reader"], e["family"]): e
        for e in entries
        if e["transform"] == "identity"
    }
    gaps = []
    for entry in entries:
        base = identity.get((entry["condition"], entry["budget"], entry["reader"], entry["family"]))
        if entry["transform"] == "identity" or base is None:
            continue
        gap: dict[str, Any] = {
            "condition": entry["condition"],
            "budget": entry["budget"],
            "transform": entry["transform"],
            "reader": entry["reader"],
            "family": entry["family"],
        }
        for metric in ("reveal_accuracy", "late_reference_adequacy", "current_accuracy"):
            before, after = rate(base[metric]), rate(entry[metric])
            gap[metric] = None if before is None or after is None else round(before - after, 4)
        gaps.append(gap)
    return gaps


def selection_flags(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where current accuracy would pick a different condition than reveal accuracy.

    Per budget, at identity, over all families: the conditions current accuracy
    ranks best (ties included) versus the one(s) reveal accuracy ranks best.
    """
    flags = []
    overall = [e for e in entries if e["transform"] == "identity" and e["family"] == ALL]
    for budget, reader in sorted({(e["budget"], e["reader"]) for e in overall}):
        rows = [e for e in overall if e["budget"] == budget and e["reader"] == reader]
        current = {e["condition"]: rate(e["current_accuracy"]) or 0.0 for e in rows}
        reveal = {e["condition"]: rate(e["reveal_accuracy"]) or 0.0 for e in rows}
        if len(rows) < 2:
            continue
        best_current = sorted(c for c, v in current.items() if v == max(current.values()))
        best_reveal = sorted(c for c, v in reveal.items() if v == max(reveal.values()))
        misled = [c for c in best_current if c not in best_reveal]
        inversions = [
            {"preferred_by_current": a, "preferred_by_reveal": b}
            for a in current
            for b in current
            if a != b and current[a] >= current[b] and reveal[a] < reveal[b] and a in best_current
        ]
        flags.append(
            {
                "budget": budget,
                "reader": reader,
                "best_by_current": best_current,
                "best_by_reveal": best_reveal,
                "current_would_pick_differently": bool(misled),
                "misleading_choices": misled,
                "inversions": inversions,
            }
        )
    return flags


def summarize(df: pd.DataFrame, meta: dict[str, Any]) -> dict[str, Any]:
    entries = score_table(df) if not df.empty else []
    return {
        "run": meta,
        "n_reads": len(df),
        "n_source_pairs": int(df["source_pair_id"].nunique()) if not df.empty else 0,
        "scores": entries,
        "shortcut_gaps": shortcut_gaps(entries),
        "selection": selection_flags(entries),
    }
