"""Section "compactions": adequacy against how many updates the prefix took.

Real systems compact again and again.  A run with ``--transforms ...,rechunk:K``
streams each pair's prefix also in more, smaller chunks (``histories.rechunk``:
the chunk size halved, then halved again, ...), so the memory read after the
futures has been through more updates; this section draws adequacy (and lists
joint J) per condition against the number of prefix updates, next to the budget
curve (the other axis a memory is squeezed along).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from audit.reportdata._context import ReportContext
from audit.scoring import compaction_curve, wilson_arrays
from histories import rechunked_updates
from reports import Chart, Column, Paragraph, Section, Table


def _updates(ctx: ReportContext, levels: pd.DataFrame) -> dict[tuple[str, int], float]:
    """Mean prefix updates over the run's source pairs, per (transform, index)."""
    pairs = list(ctx.source.pairs.values())
    out: dict[tuple[str, int], float] = {}
    for transform, index in levels.itertuples(index=False):
        counts = [
            len(p.variants.A.chunks)
            if transform == "identity"
            else rechunked_updates(p, int(index))
            for p in pairs
        ]
        out[(transform, index)] = float(np.mean(counts)) if pairs else float("nan")
    return out


def compactions_frame(ctx: ReportContext) -> pd.DataFrame:
    results = ctx.run.results
    if not (results["transform"] == "rechunk").any():  # nothing to draw: score nothing
        return compaction_curve(results.iloc[0:0])
    curve = compaction_curve(results)
    if curve.empty or not (curve["transform"] == "rechunk").any():
        return curve.iloc[0:0]
    levels = curve[["transform", "transform_index"]].drop_duplicates()
    updates = _updates(ctx, levels)
    rows: list[dict[str, Any]] = []
    for record in curve.to_dict("records"):
        row = {str(key): value for key, value in record.items()}
        row["series"] = ctx.series(row["reader"], row["condition"])
        row["updates"] = updates[(row["transform"], row["transform_index"])]
        row["level"] = (
            "identity" if row["transform"] == "identity" else f"rechunk{row['transform_index']:02d}"
        )
        rows.append(row)
    frame = pd.DataFrame(rows)
    for prefix in ("adequacy", "joint_J"):
        high = f"{prefix}_k_high"
        k, n = frame[f"{prefix}_k"].to_numpy(), frame[f"{prefix}_n"].to_numpy()
        frame[f"{prefix}_rate"] = np.where(n > 0, k / np.maximum(n, 1), np.nan)
        frame[f"{prefix}_low"] = wilson_arrays(k, n)[0]
        frame[f"{prefix}_high"] = wilson_arrays(frame[high].to_numpy(), n)[1]
    return frame.sort_values(["series", "budget", "updates"], kind="stable")


def build(ctx: ReportContext) -> Section:
    frame = compactions_frame(ctx)
    if frame.empty:
        text = (
            "No rechunk transform in this run: add --transforms ...,rechunk:3 to stream each "
            "prefix in more, smaller chunks and see how adequacy decays with the number of "
            "compactions."
        )
        return Section("compactions", "Repeated compaction", [Paragraph(text, muted=True)])
    columns = [
        *ctx.system_columns(),
        Column("level", "instance", "label"),
        Column("updates", "prefix updates (mean)", "number"),
        Column("adequacy", "adequacy (blocks)", "proportion"),
        Column("joint_J", "joint J (blocks)", "proportion"),
    ]
    table = Table(
        "compactions-table", columns, frame, csv="compactions.csv", collapsed=True, markdown=True
    )
    facet = {"facet": "facet"} if frame["budget"].nunique() > 1 else {}
    chart_data = frame.assign(facet=frame["budget"].map(lambda b: f"budget {b} B"))
    return Section(
        "compactions",
        "Repeated compaction",
        [
            Paragraph(
                "The same prefix streamed in more, smaller chunks (rechunk): each memory has "
                "been compacted more times before the same futures. Adequacy is the exact "
                "reader's verdict after the reveal future, both variants, per block; a "
                "memory the exact reader cannot judge (a summary) makes its block "
                "undetermined (bounds k..k_high), a compressor that raised fails it."
            ),
            Chart(
                "compactions-chart",
                "curve",
                chart_data,
                {
                    "x": "updates",
                    "prefix": "adequacy",
                    "series": "series",
                    "x_title": "prefix updates (compactions), mean over source pairs",
                    "axis": "adequacy, share of blocks (95 % Wilson interval)",
                    **facet,
                },
                caption="Adequacy against the number of prefix updates, per condition.",
            ),
            table,
        ],
    )
