"""Scores of a run, from its per-read results table (PROTOCOL.md, "Scores").

Every score is kept as k/n, per condition x budget x transform x family (family
``all`` aggregates).  Counting units: accuracies and adequacy count reads; joint J
counts pair-repeat blocks (a block passes only if both variants pass on both the
reveal and the override branch); the collision rate counts pair instances.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

ALL = "all"
SCORED_COLUMNS = (
    "condition", "budget", "transform", "reader", "family", "branch", "pair_id",
    "source_pair_id", "repeat", "outcome", "correct", "correct_lenient", "adequate",
    "collision", "equivariant", "overflow", "memory_bytes",
)  # fmt: skip
LATE_REFERENCE = "late_reference"
BRANCH_NAMES = ("current", "reveal", "override")


def _kn(k: Any, n: Any) -> dict[str, int]:
    return {"k": int(k), "n": int(n)}


def score_table(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per condition x budget x transform x reader x family (and family ``all``).

    Computed for every cell at once (a few grouped sums over the whole table), not
    group by group: a 100,000-read run has hundreds of cells.  Cells come in the
    order their rows first appear, ``all`` before the families of its group.
    """
    keys = ["condition", "budget", "transform", "reader"]
    df = df[[c for c in SCORED_COLUMNS if c in df]].reset_index(drop=True)
    group = df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    family = df["family"].astype(str).to_numpy()
    # every row counts once in its family's cell and once in its group's ``all`` cell
    both = pd.concat([df, df], ignore_index=True)
    both["_group"] = np.concatenate([group, group])
    both["_family"] = np.concatenate([np.full(len(df), ALL, dtype=object), family])
    cells = both.groupby(["_group", "_family"], sort=False).ngroup()
    firsts = both.assign(_cell=cells).drop_duplicates("_cell")
    firsts = firsts.assign(_all=firsts["_family"] != ALL, _seen=np.arange(len(firsts)))
    order = firsts.sort_values(["_group", "_all", "_seen"], kind="stable")
    both["_cell"] = cells.to_numpy()
    by_cell = both.groupby("_cell", sort=False)
    branch = both["branch"].astype(str)

    def kn(values: pd.Series, mask: Any = None) -> tuple[pd.Series, pd.Series]:
        kept = values if mask is None else values.where(mask)
        grouped = kept.groupby(both["_cell"])
        return grouped.sum(min_count=0), grouped.count()

    correct = both["correct"].astype(float)
    metrics: dict[str, tuple[pd.Series, pd.Series]] = {}
    for name in BRANCH_NAMES:
        metrics[f"{name}_accuracy"] = kn(correct, branch == name)
    lenient_present = "correct_lenient" in both
    if lenient_present:
        lenient = both["correct_lenient"].astype(float)
        has_lenient = lenient.notna().groupby(both["_cell"]).any()
        for name in BRANCH_NAMES:
            metrics[f"{name}_accuracy_lenient"] = kn(lenient, branch == name)
    na_reads = (both["outcome"].astype(str) == "na").groupby(both["_cell"]).sum()
    future = branch.isin(["reveal", "override"])
    blocks = both[future].assign(
        _pass=(correct[future] == 1), _possible=(correct[future] == 1) | correct[future].isna()
    )
    per_block = blocks.groupby(["_cell", "pair_id", "repeat"], sort=False, observed=True)[
        ["_pass", "_possible"]
    ].all()
    joint = per_block.groupby(level="_cell").agg(["sum", "size"])
    joint_by_cell = {
        int(cell): (int(a), int(b), int(c), int(d))
        for cell, a, b, c, d in zip(
            joint.index,
            joint[("_pass", "sum")],
            joint[("_pass", "size")],
            joint[("_possible", "sum")],
            joint[("_possible", "size")],
            strict=True,
        )
    }
    reveal = branch == "reveal"
    adequate = both["adequate"].astype(float)
    metrics["adequacy"] = kn(adequate, reveal)
    late = reveal & (both["family"].astype(str) == LATE_REFERENCE)
    metrics["late_reference_adequacy"] = kn(adequate, late)
    current = both[branch == "current"].drop_duplicates(["_cell", "pair_id", "repeat"])
    collision = current["collision"].astype(float).groupby(current["_cell"])
    equivariant = both["equivariant"].astype(float)
    overflow = both["overflow"].astype(float)
    violations = kn((equivariant == 0).astype(float).where(equivariant.notna()))
    over_budget = kn((overflow > 0).astype(float).where(overflow.notna()))
    mean_bytes = both["memory_bytes"].astype(float).groupby(both["_cell"]).mean()
    n_sources = by_cell["source_pair_id"].nunique()
    outcome_counts = both.groupby(["_cell", "outcome"], sort=False, observed=True).size()
    outcomes: dict[int, dict[str, int]] = {}
    for index, count in outcome_counts.items():
        cell_id: Any = index[0]  # type: ignore[index]
        outcome: Any = index[1]  # type: ignore[index]
        outcomes.setdefault(int(cell_id), {})[str(outcome)] = int(count)
    seen_outcomes = sorted({str(o) for o in both["outcome"].unique()})
    collision_k, collision_n = collision.sum(min_count=0), collision.count()

    entries: list[dict[str, Any]] = []
    labels = zip(*(order[c] for c in ("_cell", *keys, "_family")), strict=True)
    for cell, condition, budget, transform, reader, family_label in labels:
        entry: dict[str, Any] = {
            "condition": condition,
            "budget": int(str(budget)),
            "transform": transform,
            "reader": reader,
            "family": family_label,
            "n_source_pairs": int(n_sources[cell]),
        }
        for name in BRANCH_NAMES:
            k, n = metrics[f"{name}_accuracy"]
            entry[f"{name}_accuracy"] = _kn(k[cell], n[cell])
        if lenient_present and bool(has_lenient[cell]):
            for name in BRANCH_NAMES:
                k, n = metrics[f"{name}_accuracy_lenient"]
                entry[f"{name}_accuracy_lenient"] = _kn(k[cell], n[cell])
        entry["na_reads"] = int(na_reads[cell])
        if cell in joint_by_cell:
            passed_k, passed_n, possible_k, possible_n = joint_by_cell[cell]
            if passed_k != possible_k:
                # NA present: J is only known within bounds (NA as fail, NA as pass)
                entry["joint_J_bounds"] = {
                    "low": _kn(passed_k, passed_n),
                    "high": _kn(possible_k, possible_n),
                }
            else:
                entry["joint_J"] = _kn(passed_k, passed_n)
        for name in ("adequacy", "late_reference_adequacy"):
            k, n = metrics[name]
            entry[name] = _kn(k[cell], n[cell])
        entry["collision_rate"] = _kn(collision_k.get(cell, 0), collision_n.get(cell, 0))
        entry["equivariance_violations"] = _kn(violations[0][cell], violations[1][cell])
        entry["over_budget_reads"] = _kn(over_budget[0][cell], over_budget[1][cell])
        entry["mean_memory_bytes"] = round(float(mean_bytes[cell]), 1)
        counted = {name: 0 for name in seen_outcomes} | outcomes.get(cell, {})
        entry["outcomes"] = dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))
        entries.append(entry)
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
