"""Scores of a run, from its per-read results table (PROTOCOL.md, "Scores").

Every score is kept as k/n, per condition x budget x transform x family (family
``all`` aggregates).  Counting units: accuracies and adequacy count reads; joint J
counts pair-repeat blocks (a block passes only if both variants pass on both the
reveal and the override branch); the collision rate counts pair instances.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def _codes(values: Any, *, missing_is_value: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes in order of first appearance, and the distinct values; a missing
    value gets -1 unless ``missing_is_value``."""
    codes, uniques = pd.factorize(values, use_na_sentinel=not missing_is_value)
    return np.asarray(codes, dtype=np.int64), np.asarray(uniques, dtype=object)


def _combine(*codes: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Codes of the tuples of several code arrays, in first-appearance order among the
    kept rows; -1 for rows not kept or with any part missing (-1)."""
    combined = np.zeros(len(codes[0]), dtype=np.int64)
    usable = np.ones(len(codes[0]), dtype=bool) if keep is None else keep.copy()
    for part in codes:
        combined = combined * (int(part.max(initial=0)) + 1) + np.maximum(part, 0)
        usable &= part >= 0
    result = np.full(len(combined), -1, dtype=np.int64)
    result[usable] = _codes(combined[usable])[0]
    return result


class _Cells:
    """Every row belongs to two cells: its group's ``all`` cell and its family's cell.
    Cells are numbered groups first (0..G-1), then family cells (G..G+C-1)."""

    def __init__(self, group: np.ndarray, family_cell: np.ndarray) -> None:
        self.group, self.family_cell = group, family_cell
        self.n_groups = int(group.max()) + 1
        self.width = self.n_groups + int(family_cell.max()) + 1

    def total(self, weights: Any) -> np.ndarray:
        """Per cell: the sum of ``weights`` (booleans count) over its rows."""
        w = np.asarray(weights, dtype=float)
        return np.bincount(self.group, w, self.width) + np.bincount(
            self.family_cell + self.n_groups, w, self.width
        )

    def blocks(
        self, keep: np.ndarray, *parts: np.ndarray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """For the ``all`` cells and then the family cells: (block of each row, cell of
        each block), a block being one (cell, *parts) tuple among the kept rows (-1 for
        rows outside any block)."""
        for cells in (self.group, self.family_cell + self.n_groups):
            block = _combine(cells, *parts, keep=keep)
            rows = block >= 0
            cell_of_block = np.zeros(int(block.max(initial=-1)) + 1, dtype=np.int64)
            cell_of_block[block[rows]] = cells[rows]
            yield block, cell_of_block


def score_table(df: pd.DataFrame) -> list[dict[str, Any]]:
    """One entry per condition x budget x transform x reader x family (and family ``all``).

    Computed for every cell at once (weighted counts over integer cell codes), not
    group by group: a 100,000-read run has hundreds of cells.  Cells come in the
    order their rows first appear, ``all`` before the families of its group.
    """
    keys = ["condition", "budget", "transform", "reader"]
    df = df[[c for c in SCORED_COLUMNS if c in df]].reset_index(drop=True)
    group = df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy().astype(np.int64)
    family_names = df["family"].astype(str).to_numpy()
    family_code, families = _codes(family_names)
    family_cell = _combine(group, family_code)
    cells = _Cells(group, family_cell)
    n_groups = cells.n_groups
    first_row = np.concatenate(
        [
            np.unique(group, return_index=True)[1],
            np.unique(family_cell, return_index=True)[1],
        ]
    )
    cell_group = group[first_row]

    branch = df["branch"].astype(str).to_numpy()
    correct = df["correct"].astype(float).to_numpy()

    def kn(values: np.ndarray, mask: Any = True) -> tuple[np.ndarray, np.ndarray]:
        """(sum, count) of the present values where ``mask`` holds."""
        counted = ~np.isnan(values) & mask
        return cells.total(np.where(counted, values, 0.0)), cells.total(counted)

    metrics: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in BRANCH_NAMES:
        metrics[f"{name}_accuracy"] = kn(correct, branch == name)
    lenient_present = "correct_lenient" in df
    if lenient_present:
        lenient = df["correct_lenient"].astype(float).to_numpy()
        has_lenient = cells.total(~np.isnan(lenient)) > 0
        for name in BRANCH_NAMES:
            metrics[f"{name}_accuracy_lenient"] = kn(lenient, branch == name)
    outcome = df["outcome"]
    na_reads = cells.total(outcome.astype(str).to_numpy() == "na")

    # joint J: a pair-repeat block passes when every future read passes; it is
    # possible when none failed (NA reads are unknown, not failures)
    pair_code = _codes(df["pair_id"])[0]
    repeat_code = _codes(df["repeat"])[0]
    future = (branch == "reveal") | (branch == "override")
    passed = correct == 1
    possible = passed | np.isnan(correct)
    joint: dict[int, tuple[int, int, int, int]] = {}
    for block, cell_of_block in cells.blocks(future, pair_code, repeat_code):
        rows = block >= 0
        n_blocks = len(cell_of_block)
        failed = np.bincount(block[rows], ~passed[rows], n_blocks) > 0
        impossible = np.bincount(block[rows], ~possible[rows], n_blocks) > 0
        size = np.bincount(cell_of_block, minlength=cells.width)
        ok = np.bincount(cell_of_block, ~failed, cells.width)
        maybe = np.bincount(cell_of_block, ~impossible, cells.width)
        for block_cell in np.flatnonzero(size):
            joint[int(block_cell)] = (
                int(ok[block_cell]),
                int(size[block_cell]),
                int(maybe[block_cell]),
                int(size[block_cell]),
            )

    reveal = branch == "reveal"
    adequate = df["adequate"].astype(float).to_numpy()
    metrics["adequacy"] = kn(adequate, reveal)
    metrics["late_reference_adequacy"] = kn(adequate, reveal & (family_names == LATE_REFERENCE))

    # collision: once per pair-repeat block of current reads (its first read)
    collision = df["collision"].astype(float).to_numpy()
    collision_k, collision_n = np.zeros(cells.width), np.zeros(cells.width)
    pair_any = _codes(df["pair_id"], missing_is_value=True)[0]
    repeat_any = _codes(df["repeat"], missing_is_value=True)[0]
    for block, cell_of_block in cells.blocks(branch == "current", pair_any, repeat_any):
        members = np.flatnonzero(block >= 0)
        firsts = members[np.unique(block[members], return_index=True)[1]]
        firsts = firsts[~np.isnan(collision[firsts])]
        collision_k += np.bincount(cell_of_block[block[firsts]], collision[firsts], cells.width)
        collision_n += np.bincount(cell_of_block[block[firsts]], minlength=cells.width)

    equivariant = df["equivariant"].astype(float).to_numpy()
    violations = (cells.total(equivariant == 0), cells.total(~np.isnan(equivariant)))
    overflow = df["overflow"].astype(float).to_numpy()
    over_budget = (cells.total(overflow > 0), cells.total(~np.isnan(overflow)))
    bytes_sum, bytes_count = kn(df["memory_bytes"].astype(float).to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_bytes = bytes_sum / bytes_count
    source_code = _codes(df["source_pair_id"])[0]
    n_sources = np.zeros(cells.width)
    for _, cell_of_block in cells.blocks(source_code >= 0, source_code):
        n_sources += np.bincount(cell_of_block, minlength=cells.width)

    outcome_code, outcome_names = _codes(outcome)
    n_outcomes = max(len(outcome_names), 1)
    outcomes: dict[int, dict[str, int]] = {}
    named = outcome_code >= 0
    counts = np.zeros((cells.width, n_outcomes), dtype=np.int64)
    for cell_codes in (group, family_cell + cells.n_groups):
        np.add.at(counts, (cell_codes[named], outcome_code[named]), 1)
    for where, code in zip(*np.nonzero(counts), strict=True):
        outcomes.setdefault(int(where), {})[str(outcome_names[code])] = int(counts[where, code])
    seen_outcomes = sorted(str(name) for name in outcome_names)  # an empty outcome is none

    entries: list[dict[str, Any]] = []
    order: list[int] = [
        cell
        for g in range(n_groups)
        for cell in (g, *(n_groups + int(c) for c in np.flatnonzero(cell_group[n_groups:] == g)))
    ]
    labels = {key: df[key].to_numpy(dtype=object)[first_row] for key in keys}
    for cell in order:
        entry: dict[str, Any] = {
            "condition": labels["condition"][cell],
            "budget": int(str(labels["budget"][cell])),
            "transform": labels["transform"][cell],
            "reader": labels["reader"][cell],
            "family": ALL if cell < n_groups else str(families[family_code[first_row[cell]]]),
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
        if cell in joint:
            passed_k, passed_n, possible_k, possible_n = joint[cell]
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
        entry["collision_rate"] = _kn(collision_k[cell], collision_n[cell])
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
