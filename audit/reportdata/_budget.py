"""Section "budget": joint J and adequacy against the memory budget, at identity."""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext, proportion_columns
from reports import Block, Chart, Column, Paragraph, Section, Table


def budget_frame(ctx: ReportContext) -> pd.DataFrame:
    rows = []
    for system in ctx.scores.systems:
        cell = ctx.identity_cell(system)
        if cell is None:
            continue
        row: dict[str, Any] = {**ctx.system_keys(system), "series": ctx.series(*system[:2])}
        row.update(proportion_columns("joint_J", cell))
        row.update(proportion_columns("adequacy", cell))
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.sort_values(["series", "budget"], kind="stable") if len(frame) else frame


def build(ctx: ReportContext) -> Section:
    frame = budget_frame(ctx)
    budgets = sorted(frame["budget"].unique()) if len(frame) else []
    columns = [
        *ctx.system_columns(),
        Column("joint_J", "joint J (source pairs)", "proportion"),
        Column("adequacy", "adequacy (source pairs)", "proportion"),
    ]
    table = Table("budget-table", columns, frame, csv="budget.csv", collapsed=True, markdown=True)
    if len(budgets) < 2:
        text = ", ".join(str(b) for b in budgets)
        first: Block = Paragraph(f"One budget in this run ({text} B): no curve.", muted=True)
    else:
        first = Chart(
            "budget-chart",
            "curve",
            frame,
            {
                "x": "budget",
                "prefix": "joint_J",
                "series": "series",
                "x_title": "memory budget (bytes)",
                "axis": "joint J, share of source pairs (95 % Wilson interval)",
            },
            caption="Joint J at identity against the memory budget.",
        )
    return Section("budget", "Budget curve", [first, table])
