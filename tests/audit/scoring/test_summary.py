"""Scores against a plain per-cell oracle written straight from docs/method.md:
the fast version counts over integer cell codes, the oracle loops over rows."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.rundir import label_readers, normalize
from audit.rundir._columns import RESULT_SCHEMA
from audit.scoring import SCORED_COLUMNS, score_results, summarize
from audit.scoring._metrics import ALL, LATE_REFERENCE, LENIENT_METRICS, METRICS

MAYBE_01 = st.sampled_from([0, 1, None])
FAMILY = {"s1": "choice_switch", "s2": LATE_REFERENCE, "s3": LATE_REFERENCE}
"""A source pair belongs to one family."""
BRANCHES = ("current", "reveal", "override")

rows = st.fixed_dictionaries(
    {
        "condition": st.sampled_from(["tail", "frontier"]),
        "budget": st.sampled_from([600, 1200]),
        "transform": st.sampled_from(["identity", "rename"]),
        "reader": st.sampled_from(["exact", "llm"]),
        "reader_model": st.sampled_from([None, "m"]),
        "branch": st.sampled_from(BRANCHES),
        "variant": st.sampled_from(["A", "B"]),
        "pair_id": st.sampled_from(["p1", "p2", "p3"]),
        "source_pair_id": st.sampled_from(["s1", "s2", "s3"]),
        "repeat": st.sampled_from([0, 1]),
        "outcome": st.sampled_from(["pass", "wrong_log", "na", "unparsed", "error"]),
        "correct": MAYBE_01,
        "correct_lenient": MAYBE_01,
        "adequate": MAYBE_01,
        "collision": MAYBE_01,
        "equivariant": MAYBE_01,
        "overflow": st.sampled_from([0, 1, 2, None]),
        "memory_bytes": st.sampled_from([0, 17, 1200, None]),
    }
)


def value_of(row: dict[str, Any], metric: Any) -> Any:
    """A row's value for a metric: a compressor that raised (outcome ``error``) is its
    fault, whatever the column holds (no adequate memory; no memory to tell the
    variants apart: a collision)."""
    if row["outcome"] == "error" and metric.on_error is not None:
        return int(metric.on_error)
    return row[metric.column]


def oracle(
    table: list[dict[str, Any]], metrics: list[Any]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Every cell's counts, read off the rows one by one (no vectorisation at all)."""
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in table:
        reader = row["reader"] + (f":{row['reader_model']}" if row["reader_model"] else "")
        group = (reader, row["condition"], row["budget"], row["transform"])
        cells.setdefault((*group, ALL), []).append(row)
        cells.setdefault((*group, row["family"]), []).append(row)
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, members in cells.items():
        entry: dict[str, Any] = {
            "n_source_pairs": len({r["source_pair_id"] for r in members}),
            "na_reads": sum(r["outcome"] == "na" for r in members),
        }
        for metric in metrics:
            chosen = [
                r for r in members
                if r["branch"] in metric.branches
                and (metric.family is None or r["family"] == metric.family)
            ]  # fmt: skip
            blocks: dict[tuple[Any, ...], list[Any]] = {}
            for r in chosen:
                blocks.setdefault((r["source_pair_id"], r["pair_id"], r["repeat"]), []).append(
                    value_of(r, metric)
                )
            if metric.na == "exclude":
                blocks = {b: v for b, v in blocks.items() if None not in v}
            pairs: dict[str, list[tuple[bool, bool]]] = {}
            for (source, _, _), values in blocks.items():
                lo = all(v == 1 for v in values)
                hi = all(v in (1, None) for v in values)
                pairs.setdefault(source, []).append((lo, hi))
            name = metric.name
            worst = any if metric.failure else all  # a collision counts on any block
            entry[f"{name}_pairs_k"] = sum(worst(lo for lo, _ in b) for b in pairs.values())
            entry[f"{name}_pairs_k_high"] = sum(worst(hi for _, hi in b) for b in pairs.values())
            entry[f"{name}_pairs_n"] = len(pairs)
            entry[f"{name}_blocks_k"] = sum(lo for b in pairs.values() for lo, _ in b)
            entry[f"{name}_blocks_k_high"] = sum(hi for b in pairs.values() for _, hi in b)
            entry[f"{name}_blocks_n"] = sum(len(b) for b in pairs.values())
            if len(metric.branches) == 1 and metric.per_read:
                values = [value_of(r, metric) for r in chosen]
                if metric.na == "exclude":
                    values = [v for v in values if v is not None]
                entry[f"{name}_reads_k"] = sum(v == 1 for v in values)
                entry[f"{name}_reads_k_high"] = sum(
                    v == 1 or (v is None and metric.na == "bounds") for v in values
                )
                entry[f"{name}_reads_n"] = len(values)
        checked = [r for r in members if r["equivariant"] is not None]
        entry["equivariance_violation_reads_k"] = sum(r["equivariant"] == 0 for r in checked)
        entry["equivariance_violation_reads_n"] = len(checked)
        violated = {r["source_pair_id"] for r in checked if r["equivariant"] == 0}
        entry["equivariance_violation_pairs_k"] = len(violated)
        entry["equivariance_violation_pairs_n"] = len({r["source_pair_id"] for r in checked})
        overflow = [r["overflow"] for r in members if r["overflow"] is not None]
        entry["over_budget_reads_k"] = sum(o > 0 for o in overflow)
        entry["over_budget_reads_n"] = len(overflow)
        by_pair: dict[str, list[int]] = {}
        for r in members:
            if r["memory_bytes"] is not None:
                by_pair.setdefault(r["source_pair_id"], []).append(r["memory_bytes"])
        means = [sum(v) / len(v) for v in by_pair.values()]  # the mean of pair means
        entry["mean_memory_bytes"] = round(sum(means) / len(means), 1) if means else math.nan
        out[key] = entry
    return out


def as_results_frame(table: list[dict[str, Any]]) -> pd.DataFrame:
    """The frame ``finish`` scores: Arrow-typed columns, to pandas, normalized."""
    schema = pa.schema([RESULT_SCHEMA.field(c) for c in SCORED_COLUMNS])
    return normalize(pa.Table.from_pylist(table, schema=schema).to_pandas())


@settings(max_examples=200, deadline=None)
@given(table=st.lists(rows, min_size=1, max_size=40))
def test_score_results_equals_the_per_cell_oracle(table):
    table = [row | {"family": FAMILY[row["source_pair_id"]]} for row in table]
    frame = as_results_frame(table)
    scores = score_results(frame)
    has_llm = any(r["reader"] != "exact" for r in table)
    metrics = [*METRICS, *LENIENT_METRICS] if has_llm else list(METRICS)
    expected = oracle([r | {"correct_lenient": _lenient(r)} for r in table], metrics)
    found = {
        tuple(record[k] for k in ("reader", "condition", "budget", "transform", "family")): {
            name: record[name] for name in expected_keys(expected)
        }
        for record in scores.records()
    }
    assert set(found) == set(expected)
    for key, entry in expected.items():
        # NaN never equals itself; the JSON text compares it as the token NaN
        assert json.dumps(found[key], sort_keys=True) == json.dumps(entry, sort_keys=True), key


def _lenient(row: dict[str, Any]) -> Any:
    """What normalize makes of correct_lenient: the exact reader (and a strict pass)
    has one score."""
    known = row["correct_lenient"] is None and row["correct"] is not None
    if known and (row["reader"] == "exact" or row["correct"] == 1):
        return row["correct"]
    return row["correct_lenient"]


def expected_keys(expected: dict[tuple[Any, ...], dict[str, Any]]) -> list[str]:
    return list(next(iter(expected.values())))


def test_summary_names_every_count_by_its_unit():
    table = [
        {"condition": "c", "budget": 1200, "transform": "identity", "reader": "exact",
         "reader_model": None, "family": "f", "branch": branch, "variant": variant,
         "pair_id": "p", "source_pair_id": "p", "repeat": 0, "outcome": "pass", "correct": 1,
         "correct_lenient": None, "adequate": 1, "collision": 0, "equivariant": None,
         "overflow": 0, "memory_bytes": 10}
        for branch in BRANCHES
        for variant in ("A", "B")
    ]  # fmt: skip
    summary = summarize(as_results_frame(table), {"config": {}})
    entry = summary["scores"][0]
    assert entry["source pairs"]["reveal"] == {"k": 1, "k_high": 1, "n": 1}
    assert entry["blocks"]["joint_J"] == {"k": 1, "k_high": 1, "n": 1}
    assert entry["reads"]["reveal"] == {"k": 2, "k_high": 2, "n": 2}
    assert "joint_J" not in entry["reads"]  # J needs both futures: no read-level J
    assert set(summary["units"]) == {"source pairs", "blocks", "reads"}


@pytest.mark.parametrize("metric", [m.name for m in METRICS])
def test_every_metric_is_in_the_summary(metric):
    table = [
        {"condition": "c", "budget": 1200, "transform": "identity", "reader": "exact",
         "reader_model": None, "family": LATE_REFERENCE, "branch": branch, "variant": "A",
         "pair_id": "p", "source_pair_id": "p", "repeat": 0, "outcome": "pass", "correct": 1,
         "correct_lenient": None, "adequate": 1, "collision": 0, "equivariant": None,
         "overflow": 0, "memory_bytes": 10}
        for branch in BRANCHES
    ]  # fmt: skip
    entry = summarize(as_results_frame(table), {"config": {}})["scores"][0]
    assert metric in entry["source pairs"]
    assert metric in entry["blocks"]


def scored_frame(table: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows, each with its pair's family, as results.parquet's scored columns read."""
    table = [row | {"family": FAMILY[row["source_pair_id"]]} for row in table]
    schema = pa.schema([RESULT_SCHEMA.field(c) for c in SCORED_COLUMNS])
    return pa.Table.from_pylist(table, schema=schema).to_pandas()


@settings(max_examples=60, deadline=None)
@given(table=st.lists(rows, min_size=1, max_size=30))
def test_finish_scores_the_raw_table_as_the_report_scores_the_loaded_run(table):
    # finish only labels the readers of the Arrow table; a report normalizes the loaded
    # run fully: both must give the same scores
    raw = scored_frame(table)
    light = summarize(label_readers(raw.copy()), {})
    full = summarize(normalize(raw), {})
    assert json.dumps(light, sort_keys=True) == json.dumps(full, sort_keys=True)


@settings(max_examples=30, deadline=None)
@given(table=st.lists(rows, min_size=1, max_size=20))
def test_normalize_leaves_the_callers_frame_as_it_was(table):
    # it works on a shallow copy (no copy of every column): whole columns only
    raw = scored_frame(table)
    kept = raw.copy()
    normalize(raw)
    pd.testing.assert_frame_equal(raw, kept)
