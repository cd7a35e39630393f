"""Section "failures": why reads failed, strict vs lenient, outcomes and causes."""

from __future__ import annotations

from typing import Any, cast

import pandas as pd

from audit.reportdata._causes import ATTRIBUTIONS, CAUSE_HELP
from audit.reportdata._context import ReportContext, proportion_columns
from audit.rundir import OUTCOMES
from audit.scoring import IDENTITY
from histories import WRONG_ANSWERS
from reports import Bullets, Chart, Column, Paragraph, Section, Table

SYSTEM = ["reader", "condition", "budget"]


def _counts(sizes: pd.Series) -> dict[tuple[Any, ...], int]:
    return {tuple(cast(tuple[Any, ...], k)): int(v) for k, v in sizes.items()}


def failure_frame(ctx: ReportContext) -> pd.DataFrame:
    """Per system at identity: outcome, wrong-answer and cause counts (reads), joint J
    strict and lenient (source pairs)."""
    results = ctx.run.results
    identity = results[results["transform"] == IDENTITY]
    outcomes = identity.groupby([*SYSTEM, "outcome"], observed=True).size()
    causes = ctx.causes
    counted = (
        results.loc[causes.index, SYSTEM]
        .assign(cause=causes.to_numpy())
        .groupby([*SYSTEM, "cause"], observed=True)
        .size()
        if not causes.empty
        else pd.Series(dtype=int)
    )
    outcome_counts, cause_counts = _counts(outcomes), _counts(counted)
    wrong_counts: dict[tuple[Any, ...], int] = {}
    if "wrong_answer" in identity:  # not in a run made before the column
        wrong_counts = _counts(identity.groupby([*SYSTEM, "wrong_answer"], observed=True).size())
    rows = []
    lenient = any(m.name == "joint_J_lenient" for m in ctx.scores.metrics)
    for system in ctx.scores.systems:
        row: dict[str, Any] = {**ctx.system_keys(system), "label": ctx.label(system)}
        for outcome in OUTCOMES:
            row[f"outcome_{outcome}"] = outcome_counts.get((*system, outcome), 0)
        if "wrong_answer" in identity:
            for name in WRONG_ANSWERS:
                row[f"wrong_{name}"] = wrong_counts.get((*system, name), 0)
        for cause in ATTRIBUTIONS:
            row[f"cause_{cause}"] = cause_counts.get((*system, cause), 0)
        cell = ctx.identity_cell(system)
        row.update(proportion_columns("joint_J", cell))
        if lenient:  # only where an LLM reader read: the exact reader has one score
            row.update(proportion_columns("joint_J_lenient", cell))
        rows.append(row)
    return pd.DataFrame(rows)


def build(ctx: ReportContext) -> Section:
    frame = failure_frame(ctx)
    has_llm = ctx.run.has_llm
    exact_only = (
        "No LLM reader in this run: every read is the exact reader's, so strict and "
        "lenient scores are equal and no read is NA, a format failure or a misread."
    )
    blocks: list[Any] = [] if has_llm else [Paragraph(exact_only)]
    blocks += [
        Paragraph("Reads at identity. Causes of failed reads:", muted=True),
        Bullets(
            [
                "evidence dropped: the memory is a record log and E_q on it gives a wrong "
                "answer (the compressor lost the evidence);",
                "written wrong: as dropped, and the memory holds a well-formed record that "
                "never was in the history;",
                "retained but misread: E_q on the memory is right, the reader answered wrong;",
                "format failure: right values in a wrong form (a bare map, which the lenient "
                "score accepts, a code fence, prose around the JSON, the answer only in the "
                "reasoning field, a cut-off after the right values);",
                "undetermined: the memory is not a record log (prose, say), so whether it "
                "kept the evidence cannot be told;",
                "writer cut off or empty: an LLM writer's answer was cut off at its token "
                "limit or empty (the compressor failed);",
                "compressor raised;",
                "infrastructure (NA): no answer after retries, or a request the server "
                "refused; not scored.",
            ],
            muted=True,
        ),
        Paragraph(
            "The wrong: columns say what the answer of each wrong read is, whatever its "
            "cause (each column's help; docs/method.md, Wrong answers).",
            muted=True,
        ),
    ]
    outcome_columns = [
        Column(f"outcome_{o}", f"{o.replace('_', ' ')} (reads)", "integer", help=OUTCOMES[o])
        for o in OUTCOMES
        if not frame.empty and frame[f"outcome_{o}"].any()
    ]
    wrong_columns = [
        Column(f"wrong_{w}", f"wrong: {w.replace('_', ' ')} (reads)", "integer",
               help=WRONG_ANSWERS[w])
        for w in WRONG_ANSWERS
        if f"wrong_{w}" in frame and frame[f"wrong_{w}"].any()
    ]  # fmt: skip
    cause_columns = [
        Column(f"cause_{key}", f"{label} (reads)", "integer", help=CAUSE_HELP[key])
        for key, label in ATTRIBUTIONS.items()
    ]
    system_columns = ctx.system_columns()
    columns = [
        *system_columns,
        Column("joint_J", "joint J strict (source pairs)", "proportion"),
        Column("joint_J_lenient", "joint J lenient (source pairs)", "proportion"),
        *outcome_columns,
        *cause_columns,
    ]
    columns = [c for c in columns if has_llm or c.key != "joint_J_lenient"]
    # every column, the wrong: ones too, goes to taxonomy.csv; on the page what the wrong
    # answers are is a table of its own (one table of both is wider than a window)
    blocks.append(Table("taxonomy-table", columns, frame, csv="taxonomy.csv"))
    if wrong_columns:
        blocks.append(Table("wrong-answers-table", [*system_columns, *wrong_columns], frame))
    failed = frame[[f"cause_{key}" for key in ATTRIBUTIONS]].to_numpy().sum() if len(frame) else 0
    if failed:
        blocks.append(
            Chart(
                "taxonomy-chart",
                "stacked",
                frame,
                {
                    "label": "label",
                    "parts": [(f"cause_{key}", label) for key, label in ATTRIBUTIONS.items()],
                    "axis": "failed reads at identity",
                },
                caption="Failed reads at identity per condition, by cause.",
            )
        )
    else:
        blocks.append(Paragraph("No failed read at identity.", muted=True))
    return Section("failures", "Why reads failed: strict vs lenient, outcomes, causes", blocks)
