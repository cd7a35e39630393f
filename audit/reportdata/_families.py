"""Section "families": joint J and adequacy per pair family, at identity."""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext, proportion_columns
from reports import Chart, Column, Paragraph, Section, Table


def family_frame(ctx: ReportContext) -> pd.DataFrame:
    families = list(dict.fromkeys(ctx.scores.families.values()))
    rows = []
    for system in ctx.scores.systems:
        for family in families:
            cell = ctx.identity_cell(system, family)
            if cell is None:
                continue
            row: dict[str, Any] = {
                **ctx.system_keys(system),
                "label": ctx.label(system),
                "family": family,
            }
            row.update(proportion_columns("joint_J", cell))
            row.update(proportion_columns("adequacy", cell))
            row["text"] = f"{row['joint_J_k']}/{row['joint_J_n']}" if row["joint_J_n"] else "-"
            rows.append(row)
    return pd.DataFrame(rows)


def build(ctx: ReportContext) -> Section:
    frame = family_frame(ctx)
    if frame.empty:
        return Section("families", "Families", [Paragraph("No family scores.", muted=True)])
    columns = [
        Column("family", "family", "label"),
        *ctx.system_columns(),
        Column("joint_J", "joint J (source pairs)", "proportion"),
        Column("adequacy", "adequacy (source pairs)", "proportion"),
    ]
    return Section(
        "families",
        "Families",
        [
            Chart(
                "heatmap-chart",
                "heatmap",
                frame,
                {"row": "label", "column": "family", "value": "joint_J_rate", "text": "text"},
                caption="Joint J per family and condition at identity; each cell gives passing "
                "source pairs / pairs of that family.",
            ),
            Table(
                "families-table", columns, frame, csv="families.csv", collapsed=True, markdown=True
            ),
        ],
    )
