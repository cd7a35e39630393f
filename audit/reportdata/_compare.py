"""``build_compare``: several stored runs compared on their shared source pairs."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from audit.reportdata._comparisons import (
    COMPARISON_COLUMNS,
    NOISE_COLUMNS,
    comparison_row,
    with_holm,
)
from audit.reportdata._context import Options, pair_bounds, pair_values, proportion_columns
from audit.reportdata._glance import integrity_alert
from audit.rundir import RunData, load_source_pairs
from audit.scoring import (
    PairedTable,
    detectable_difference,
    paired_comparison,
    reader_agreement,
    score_results,
)
from compressors import UnknownCompressorError, parse_spec
from reports import (
    Block,
    Bullets,
    Chart,
    Code,
    Column,
    Document,
    Facts,
    Inline,
    Paragraph,
    Section,
    Table,
    Text,
)

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


def _power_of(row: dict[str, Any], comparisons: int) -> dict[str, Any]:
    """The minimum detectable difference of one comparison among ``comparisons``."""
    table = PairedTable(row["both_pass"], row["only_a"], row["only_b"], row["neither"])
    detectable = detectable_difference(table, comparisons=comparisons)
    return {
        "min_detectable": detectable,
        "underpowered": bool(math.isnan(detectable) or abs(row["delta"]) < detectable),
    }


def pair_identities(run: RunData) -> tuple[dict[str, str], str | None]:
    """Each source pair id of a run -> the sha256 of the pair itself, so runs are paired
    on the same histories, not on ids that different seeds or files reuse; and a note
    when the pairs cannot be rebuilt (then ids stand in, only within one dataset)."""
    source = load_source_pairs(run)
    if source.note is not None:
        return {}, source.note
    return {
        pid: hashlib.sha256(pair.to_json().encode()).hexdigest()
        for pid, pair in source.pairs.items()
    }, None


def build_compare(runs: Sequence[RunData], options: Options | None = None) -> Document:
    """Systems across runs on the source pairs they share (the same histories, by
    content): paired deltas of joint J at identity, every reader with every reader."""
    options = options or Options()
    labels = _labels(runs)
    values: dict[RunSystem, dict[str, float]] = {}
    bounds: dict[RunSystem, dict[str, tuple[int, int]]] = {}
    families: dict[str, str] = {}
    order: list[RunSystem] = []
    notes: list[str] = []
    digests = {
        lab: run.raw_config.get("pairs_sha256") for lab, run in zip(labels, runs, strict=True)
    }
    one_dataset = len(set(digests.values())) == 1 and None not in digests.values()
    for label, run in zip(labels, runs, strict=True):
        scores = score_results(run.results, run.conditions)
        identities, note = pair_identities(run)
        if note is not None:
            if not one_dataset:
                notes.append(
                    f"{label}: left out: its pairs cannot be rebuilt ({note}), so which of "
                    "its pairs are the same histories as another run's is unknown"
                )
                continue
            notes.append(f"{label}: pairs not rebuilt ({note}); paired by id within one dataset")
        for pid, family in scores.families.items():
            families.setdefault(identities.get(pid, pid), family)
        per_system = pair_values(scores, "joint_J")
        per_system_bounds = pair_bounds(scores, "joint_J")
        for system in scores.systems:
            if system in per_system:
                key = (label, *system)
                values[key] = {
                    identities.get(pid, pid): value for pid, value in per_system[system].items()
                }
                bounds[key] = {
                    identities.get(pid, pid): b for pid, b in per_system_bounds[system].items()
                }
                order.append(key)
    included = list(dict.fromkeys(key[0] for key in order)) or labels
    shared = (
        set.intersection(
            *(set().union(*(set(v) for k, v in values.items() if k[0] == lab)) for lab in included)
        )
        if values
        else set()
    )
    systems = []
    for key in order:
        label, reader, condition, budget = key
        shared_bounds = [bounds[key][p] for p in sorted(shared) if p in bounds[key]]
        row = {"run": label, "reader": reader, "condition": condition, "budget": budget}
        row.update(
            proportion_columns(
                "joint_J",
                {
                    "joint_J_pairs_k": sum(lo for lo, _ in shared_bounds),
                    "joint_J_pairs_k_high": sum(hi for _, hi in shared_bounds),
                    "joint_J_pairs_n": len(shared_bounds),
                },
            )
        )  # the same counting as the report's: NA gives bounds, never a smaller n
        systems.append(row)
    baseline = included[0]
    rows = []
    for key in order if shared else []:  # no shared pair: nothing to compare, no test
        label, reader, condition, budget = key
        if label == baseline:
            continue
        candidates = [  # every reader of the baseline: backends against each other and exact
            other
            for other in order
            if other[0] == baseline
            and other[3] == budget
            and system_name(other[2]) == system_name(options.reference or condition)
        ]
        for ref in candidates:
            result = paired_comparison(
                {p: v for p, v in values[ref].items() if p in shared},
                {p: v for p, v in values[key].items() if p in shared},
                families,
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
                label=f"{row['b']} minus {row['a']}",
            )
            rows.append(row)
    floors = {lab: _reader_floors(run) for lab, run in zip(labels, runs, strict=True)}
    for row in rows:  # alpha / m: the minimum detectable difference over the whole table
        row.update(_power_of(row, len(rows)))
        row.update(_noise_of(row, floors))
    comparisons = with_holm(pd.DataFrame(rows))
    if not one_dataset:
        notes.append(
            "the runs were made on different pair sets: they are compared on the pairs whose "
            "histories are identical (matched by content, not by id)"
        )
    notes.append(
        f"{len(shared)} source pairs shared by all runs; every rate and test below uses only them"
    )
    left = uncompared(pd.DataFrame(systems), comparisons, baseline)
    unpaired: list[Inline] = []
    if left:  # names are data: pieces of text, never read for backquotes
        unpaired = [
            f"not compared (the baseline {baseline} has no system to pair them with): "
            + "; ".join(left)
        ]
        if not options.reference:
            unpaired += ["; ", Code("--reference CONDITION"), " compares every system with "
                         "one condition of the baseline"]  # fmt: skip
    method = (
        f"baseline: {baseline}; each system of another run against the baseline's "
        + (f"{options.reference!r}" if options.reference else "same condition")
        + " at the same budget, read by every reader of the baseline (an LLM backend against "
        "another and against the exact reader); unit: the source pair shared by all runs "
        "(passes when joint J passes on every block of it at identity); exact McNemar on the "
        "discordant pairs, Holm-corrected across every comparison in this table; delta "
        "intervals: Newcombe's for paired proportions; underpowered: the observed difference "
        "is below what these pairs detect with 80 % power (a miss is not evidence of no "
        "difference; a significant one is real but its size likely overstated)"
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
    notes += _noise_notes(floors, rows)
    empty = (
        None
        if shared
        else "No source pair is shared by every run: nothing to compare (a paired test needs "
        "the same histories in both runs)."
    )
    alerts = [block for run in runs for block in integrity_alert(run)]
    return _document(
        labels, pd.DataFrame(run_rows), pd.DataFrame(systems), comparisons,
        [*notes, *([unpaired] if unpaired else [])], method, alerts, empty,
    )  # fmt: skip


def system_name(condition: str) -> str:
    """A condition label as a system (``ConditionSpec.system``): the budget is a column
    of its own, so ``bm25:budget=1200`` at 1200 B is ``bm25`` at 1200 B."""
    try:
        return parse_spec(condition).system
    except UnknownCompressorError:
        return condition


def uncompared(systems: pd.DataFrame, comparisons: pd.DataFrame, baseline: str) -> list[str]:
    """The systems of later runs that no comparison pairs with the baseline, one entry
    per run, reader and budget: ``b (exact, 1200 B): full, bm25``."""
    if systems.empty:
        return []
    paired = (
        set()
        if comparisons.empty
        else set(
            zip(
                comparisons["run_b"], comparisons["condition_b"], comparisons["budget"],
                comparisons["reader_b"], strict=True,
            )
        )
    )  # fmt: skip
    groups: dict[tuple[str, str, int], list[str]] = {}
    for run, condition, budget, reader in zip(
        systems["run"], systems["condition"], systems["budget"], systems["reader"], strict=True
    ):
        if run != baseline and (run, condition, budget, reader) not in paired:
            groups.setdefault((str(run), str(reader), int(budget)), []).append(str(condition))
    return [
        f"{run} ({reader}, {budget} B): {', '.join(names)}"
        for (run, reader, budget), names in groups.items()
    ]


def _reader_floors(run: RunData) -> dict[str, float | None]:
    """Per reader of a run: the share of source pairs whose pass the reader alone moved
    (0 for the exact reader, a function; None: no memory was read twice)."""
    floors: dict[str, float | None] = {"exact": 0.0}
    for agreement in reader_agreement(run.results):
        floors[agreement.reader] = agreement.pair_disagreement
    return floors


def _noise_of(row: dict[str, Any], floors: dict[str, dict[str, float | None]]) -> dict[str, Any]:
    """The larger noise floor of the comparison's two readers, and whether the
    difference is within it (a difference at or below it can be the readers alone; with
    a floor of 0 nothing is)."""
    first = floors.get(row["run_a"], {}).get(str(row["reader_a"]))
    second = floors.get(row["run_b"], {}).get(str(row["reader_b"]))
    if first is None or second is None:
        return {"noise_floor": None, "within_noise": None}
    floor = max(first, second)
    delta = row.get("delta")
    # a reader that never changed its answer (the exact reader, floor 0) has no noise
    # for a difference to hide in: even a zero difference is "none", not "within noise"
    within = None if delta is None or pd.isna(delta) else bool(floor > 0 and abs(delta) <= floor)
    return {"noise_floor": floor, "within_noise": within}


def _noise_notes(
    floors: dict[str, dict[str, float | None]], rows: list[dict[str, Any]]
) -> list[str]:
    notes = []
    unknown = sorted(
        {f"{lab}: {reader}" for lab, by in floors.items() for reader, v in by.items() if v is None}
    )
    if unknown:
        notes.append(
            "noise floor unknown for "
            + ", ".join(unknown)
            + " (no memory read twice: run with --repeats 2 or more); a difference between "
            "their runs may be the reader's own nondeterminism"
        )
    within = sum(1 for r in rows if r.get("within_noise"))
    if within:
        notes.append(
            f"{within} difference(s) at or below the readers' noise floor (the share of "
            "source pairs whose pass the same reader changed on re-reading an identical "
            "memory): not distinguishable from reader noise"
        )
    return notes


def _listed(labels: list[str]) -> list[Inline]:
    """Run labels as code, separated by commas."""
    out: list[Inline] = []
    for index, label in enumerate(labels):
        out += [", "] if index else []
        out.append(Code(label))
    return out


def _document(
    labels: list[str],
    runs: pd.DataFrame,
    systems: pd.DataFrame,
    comparisons: pd.DataFrame,
    notes: Sequence[Text],
    method: str,
    alerts: Sequence[Block] = (),
    empty: str | None = None,
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
                empty
                or "No system of a later run matches a baseline system (same condition, "
                "budget and reader kind): nothing to compare."
            )
        )
    else:
        blocks.append(
            Table(
                "comparisons-table",
                [*COMPARISON_COLUMNS, *NOISE_COLUMNS],
                comparisons,
                csv="compare.csv",
            )
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
                "Newcombe intervals; filled: Holm-corrected exact McNemar p < 0.05.",
            )
        )
    return Document(
        title="memory audit: comparison of " + ", ".join(labels),
        facts=Facts([("runs", _listed(labels))]),
        summary=[*alerts, Bullets(notes)],
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
