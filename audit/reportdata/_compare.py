"""``build_compare``: several stored runs compared on their shared source pairs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from audit.reportdata._comparisons import COMPARISON_COLUMNS, comparison_row, with_holm
from audit.reportdata._context import Options, pair_values
from audit.rundir import RunData
from audit.scoring import paired_comparison, score_results, wilson_arrays
from reports import Bullets, Chart, Code, Column, Document, Facts, Paragraph, Section, Table

RunSystem = tuple[str, str, str, int]
"""(run label, reader, condition, budget)."""


def _labels(runs: Sequence[RunData]) -> list[str]:
    labels: list[str] = []
    for run in runs:
        label = run.label
        while label in labels:
            label += "'"
        labels.append(label)
    return labels


def build_compare(runs: Sequence[RunData], options: Options | None = None) -> Document:
    """Systems across runs on their shared source pairs: paired deltas of joint J at identity."""
    options = options or Options()
    labels = _labels(runs)
    values: dict[RunSystem, dict[str, float]] = {}
    families: dict[str, str] = {}
    reader_kinds: dict[tuple[str, str], str] = {}
    order: list[RunSystem] = []
    for label, run in zip(labels, runs, strict=True):
        scores = score_results(run.results, run.conditions)
        for pid, family in scores.families.items():
            families.setdefault(pid, family)
        kinds = run.results.drop_duplicates("reader")
        for reader, kind in zip(
            kinds["reader"].astype(str), kinds["reader_kind"].astype(str), strict=True
        ):
            reader_kinds[(label, reader)] = kind
        per_system = pair_values(scores, "joint_J")
        for system in scores.systems:
            if system in per_system:
                values[(label, *system)] = per_system[system]
                order.append((label, *system))
    shared = (
        set.intersection(
            *(set().union(*(set(v) for k, v in values.items() if k[0] == lab)) for lab in labels)
        )
        if values
        else set()
    )
    systems = []
    for key in order:
        label, reader, condition, budget = key
        kept = [values[key][p] for p in sorted(shared) if p in values[key]]
        kept = [v for v in kept if not math.isnan(v)]
        k, n = int(sum(kept)), len(kept)
        low, high = wilson_arrays([k], [n])
        systems.append(
            {
                "run": label,
                "reader": reader,
                "condition": condition,
                "budget": budget,
                "joint_J_k": k,
                "joint_J_k_high": k,
                "joint_J_n": n,
                "joint_J_rate": k / n if n else math.nan,
                "joint_J_low": float(low[0]),
                "joint_J_high": float(high[0]),
            }
        )
    baseline = labels[0]
    rows = []
    for key in order:
        label, reader, condition, budget = key
        if label == baseline:
            continue
        kind = reader_kinds.get((label, reader), reader)
        candidates = [
            other
            for other in order
            if other[0] == baseline
            and other[3] == budget
            and reader_kinds.get((baseline, other[1]), other[1]) == kind
            and other[2] == (options.reference or condition)
        ]
        for ref in candidates[:1]:
            result = paired_comparison(
                {p: v for p, v in values[ref].items() if p in shared},
                {p: v for p, v in values[key].items() if p in shared},
                families,
                resamples=options.resamples,
                seed=options.seed,
                key=f"compare/{ref}/{key}",
            )
            row = comparison_row(
                reader,
                budget,
                f"{ref[0]}: {ref[2]} ({ref[1]})",
                f"{label}: {condition} ({reader})",
                result,
            )
            row.update(
                run_a=ref[0],
                run_b=label,
                condition_a=ref[2],
                condition_b=condition,
                reader_a=ref[1],
                reader_b=reader,
                label=f"{row['b']} vs {row['a']}",
            )
            rows.append(row)
    comparisons = with_holm(pd.DataFrame(rows))
    notes = []
    digests = {
        lab: run.raw_config.get("pairs_sha256") for lab, run in zip(labels, runs, strict=True)
    }
    if len(set(digests.values())) > 1:
        notes.append(
            "the runs were made on different pair sets (pairs_sha256 differs): compared only on "
            "source pair ids they share; make sure equal ids mean equal pairs"
        )
    notes.append(
        f"{len(shared)} source pairs shared by all runs; every rate and test below uses only them"
    )
    method = (
        f"baseline: {baseline}; each system of another run against the baseline's "
        + (f"{options.reference!r}" if options.reference else "same condition")
        + " at the same budget and reader kind; unit: the source pair shared by all runs "
        "(passes when joint J passes on every block of it at identity); exact McNemar on the "
        "discordant pairs, Holm-corrected across every comparison in this table; delta "
        f"intervals: cluster bootstrap within family ({options.resamples} resamples, seed "
        f"{options.seed})"
    )
    run_rows = [
        {
            "label": lab,
            "path": str(run.path),
            "created": run.created or "",
            "conditions": ", ".join(run.conditions),
            "budgets": ", ".join(map(str, run.plan.budgets)) if run.plan else "",
            "readers": ", ".join(dict.fromkeys(run.results["reader"].astype(str))),
            "pairs_sha256": (digests[lab] or "")[:16],
            "n_source_pairs": int(run.results["source_pair_id"].nunique()),
            "baseline": lab == baseline,
        }
        for lab, run in zip(labels, runs, strict=True)
    ]
    return _document(
        labels, pd.DataFrame(run_rows), pd.DataFrame(systems), comparisons, notes, method
    )


def _document(
    labels: list[str],
    runs: pd.DataFrame,
    systems: pd.DataFrame,
    comparisons: pd.DataFrame,
    notes: list[str],
    method: str,
) -> Document:
    run_columns = [
        Column("label", "run", "label"),
        Column("baseline", "", "flag", flag_text="baseline"),
        Column("path", "path", "text"),
        Column("created", "created", "text"),
        Column("conditions", "conditions", "text"),
        Column("budgets", "budgets (B)", "text"),
        Column("readers", "readers", "text"),
        Column("n_source_pairs", "source pairs", "integer"),
        Column("pairs_sha256", "pairs sha256", "text"),
    ]
    system_columns = [
        Column("run", "run", "label"),
        Column("condition", "condition", "label"),
        Column("budget", "budget (B)", "integer"),
        Column("reader", "reader", "label"),
        Column("joint_J", "joint J (shared source pairs)", "proportion"),
    ]
    blocks: list[Any] = [Paragraph(method, muted=True)]
    if comparisons.empty:
        blocks.append(
            Paragraph(
                "No system of a later run matches a baseline system (same condition, "
                "budget and reader kind): nothing to compare."
            )
        )
    else:
        blocks.append(
            Table("comparisons-table", [*COMPARISON_COLUMNS], comparisons, csv="compare.csv")
        )
        blocks.append(
            Chart(
                "forest-chart",
                "forest",
                comparisons,
                {
                    "label": "label",
                    "value": "delta",
                    "low": "delta_low",
                    "high": "delta_high",
                    "filled": "significant",
                    "facet": None,
                    "axis": "difference in joint J pass rate (second minus first), source pairs",
                },
                caption="Difference in joint J pass rate on shared source pairs, 95 % "
                "cluster-bootstrap intervals; filled: Holm-corrected exact McNemar p < 0.05.",
            )
        )
    return Document(
        title="memory audit: comparison of " + ", ".join(labels),
        facts=Facts([("runs", [Code(label) for label in labels])]),
        summary=[Bullets(notes)],
        sections=[
            Section("runs", "Runs", [Table("runs-table", run_columns, runs)]),
            Section(
                "systems",
                "Joint J per system on the shared pairs",
                [Table("systems-table", system_columns, systems, csv="systems.csv")],
            ),
            Section("comparisons", "Paired differences", blocks),
        ],
        stem="compare",
    )
