"""score_table against a plain per-cell oracle written straight from PROTOCOL.md's
scores: the fast version counts over integer cell codes, the oracle loops over rows."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.rundir import RESULT_SCHEMA
from audit.scoring._reads import ALL, BRANCH_NAMES, LATE_REFERENCE, SCORED_COLUMNS, score_table

MAYBE_01 = st.sampled_from([0, 1, None])

rows = st.fixed_dictionaries(
    {
        "condition": st.sampled_from(["tail", "frontier"]),
        "budget": st.sampled_from([600, 1200]),
        "transform": st.sampled_from(["identity", "rename"]),
        "reader": st.just("exact"),
        "family": st.sampled_from(["choice_switch", LATE_REFERENCE]),
        "branch": st.sampled_from(BRANCH_NAMES),
        "pair_id": st.sampled_from(["p1", "p2", "p3", None]),
        "source_pair_id": st.sampled_from(["s1", "s2", None]),
        "repeat": st.sampled_from([0, 1, None]),
        "outcome": st.sampled_from(["pass", "wrong_log", "na", "unparsed", None]),
        "correct": MAYBE_01,
        "correct_lenient": MAYBE_01,
        "adequate": MAYBE_01,
        "collision": MAYBE_01,
        "equivariant": MAYBE_01,
        "overflow": st.sampled_from([0, 1, 2, None]),
        "memory_bytes": st.sampled_from([0, 17, 1200, None]),
    }
)


def kn(k: int, n: int) -> dict[str, int]:
    return {"k": k, "n": n}


def present(values: list[Any]) -> list[Any]:
    return [v for v in values if v is not None]


def oracle(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Scores cell by cell, read off the rows with no vectorisation at all."""
    # cells: groups in the order they first appear, each group's ``all`` cell first,
    # then its families in the order they first appear
    families: dict[tuple[Any, ...], list[str]] = {}
    for row in table:
        group = (row["condition"], row["budget"], row["transform"], row["reader"])
        seen = families.setdefault(group, [ALL])
        if row["family"] not in seen:
            seen.append(row["family"])
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {
        (*group, family): [] for group, names in families.items() for family in names
    }
    for row in table:
        group = (row["condition"], row["budget"], row["transform"], row["reader"])
        cells[(*group, ALL)].append(row)
        cells[(*group, row["family"])].append(row)
    seen_outcomes = {row["outcome"] for row in table if row["outcome"] is not None}
    entries = []
    for (condition, budget, transform, reader, family), members in cells.items():
        entry: dict[str, Any] = {
            "condition": condition,
            "budget": budget,
            "transform": transform,
            "reader": reader,
            "family": family,
            "n_source_pairs": len(set(present([r["source_pair_id"] for r in members]))),
        }

        def accuracy(column: str, branch: str, rows: list[dict[str, Any]] = members) -> Any:
            values = present([r[column] for r in rows if r["branch"] == branch])
            return kn(sum(values), len(values))

        for branch in BRANCH_NAMES:
            entry[f"{branch}_accuracy"] = accuracy("correct", branch)
        if present([r["correct_lenient"] for r in members]):
            for branch in BRANCH_NAMES:
                entry[f"{branch}_accuracy_lenient"] = accuracy("correct_lenient", branch)
        entry["na_reads"] = sum(r["outcome"] == "na" for r in members)
        blocks: dict[tuple[Any, Any], list[Any]] = {}
        for r in members:
            if r["branch"] != "current" and r["pair_id"] is not None and r["repeat"] is not None:
                blocks.setdefault((r["pair_id"], r["repeat"]), []).append(r["correct"])
        if blocks:
            passed = sum(all(c == 1 for c in cs) for cs in blocks.values())
            possible = sum(all(c in (1, None) for c in cs) for cs in blocks.values())
            if passed != possible:
                entry["joint_J_bounds"] = {
                    "low": kn(passed, len(blocks)),
                    "high": kn(possible, len(blocks)),
                }
            else:
                entry["joint_J"] = kn(passed, len(blocks))
        entry["adequacy"] = accuracy("adequate", "reveal")
        late = [r for r in members if r["family"] == LATE_REFERENCE]
        entry["late_reference_adequacy"] = accuracy("adequate", "reveal", late)
        firsts: dict[tuple[Any, Any], Any] = {}
        for r in members:
            if r["branch"] == "current":
                firsts.setdefault((r["pair_id"], r["repeat"]), r["collision"])
        collisions = present(list(firsts.values()))
        entry["collision_rate"] = kn(sum(collisions), len(collisions))
        equivariant = present([r["equivariant"] for r in members])
        entry["equivariance_violations"] = kn(equivariant.count(0), len(equivariant))
        overflow = present([r["overflow"] for r in members])
        entry["over_budget_reads"] = kn(sum(o > 0 for o in overflow), len(overflow))
        sizes = present([r["memory_bytes"] for r in members])
        entry["mean_memory_bytes"] = round(sum(sizes) / len(sizes), 1) if sizes else math.nan
        counted = dict.fromkeys(seen_outcomes, 0)
        for r in members:
            if r["outcome"] is not None:
                counted[r["outcome"]] += 1
        entry["outcomes"] = dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))
        entries.append(entry)
    return entries


def as_results_frame(table: list[dict[str, Any]]) -> Any:
    """The frame ``finish`` hands to the summary: Arrow-typed columns, to pandas."""
    schema = pa.schema([RESULT_SCHEMA.field(c) for c in SCORED_COLUMNS])
    return pa.Table.from_pylist(table, schema=schema).to_pandas()


@settings(max_examples=200, deadline=None)
@given(table=st.lists(rows, min_size=1, max_size=40))
def test_score_table_equals_the_per_cell_oracle(table):
    expected = oracle(table)
    found = score_table(as_results_frame(table))
    # NaN never equals itself; the JSON text compares it as the token NaN
    assert json.dumps(found) == json.dumps(expected)
