"""Section "transforms": robustness to renaming, permutation and decoys (shortcut gaps)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from audit.reportdata._context import ReportContext, by_system, proportion_columns
from audit.scoring import IDENTITY, cluster_bootstrap
from reports import Chart, Column, Paragraph, Section, Table


def transform_frame(ctx: ReportContext) -> pd.DataFrame:
    """One row per system x transform: reveal in blocks (with a cluster-bootstrap
    interval) and in source pairs passing every instance, adequacy, late-reference
    adequacy, the shortcut gaps, equivariance violations."""
    options = ctx.options
    gaps = {
        (g["reader"], g["condition"], g["budget"], g["transform"]): g for g in ctx.shortcut_gaps
    }
    groups = by_system(ctx.scores.pairs["reveal"], "transform")
    rows = []
    transforms = ctx.scores.shortcut_transforms()  # rechunk: its own section
    for system in ctx.scores.systems:
        for transform in transforms:
            cell = ctx.scores.cell(system, transform)
            if cell is None:
                continue
            row: dict[str, Any] = {
                **ctx.system_keys(system),
                "label": ctx.label(system),
                "transform": transform,
            }
            row.update(proportion_columns("reveal_every", cell, "reveal_pairs"))
            row.update(proportion_columns("reveal_blocks", cell, "reveal_blocks"))
            row.update(proportion_columns("adequacy", cell))
            row.update(proportion_columns("late_reference_adequacy", cell))
            group = groups.get((*system, transform))
            if group is not None and len(group) and transform != IDENTITY:
                row["reveal_blocks_boot_low"], row["reveal_blocks_boot_high"] = cluster_bootstrap(
                    group["blocks_lo"].to_numpy(),
                    group["blocks"].to_numpy(),
                    group["family"].tolist(),
                    resamples=options.resamples,
                    seed=options.seed,
                    key=f"inst/{(*system, transform)}",
                )
            else:
                row["reveal_blocks_boot_low"] = row["reveal_blocks_boot_high"] = math.nan
            gap = gaps.get((*system, transform), {})
            for name in (
                "reveal_gap_blocks",
                "reveal_gap_low",
                "reveal_gap_high",
                "reveal_gap_p",
                "reveal_gap_pairs",
                "adequacy_gap_pairs",
                "late_reference_adequacy_gap_pairs",
            ):
                value = gap.get(name)
                row[name] = np.nan if value is None else value
            for unit in ("pairs", "reads"):
                name = f"equivariance_violation_{unit}"
                row[f"{name}_k"], row[f"{name}_n"] = int(cell[f"{name}_k"]), int(cell[f"{name}_n"])
            rows.append(row)
    return pd.DataFrame(rows)


def build(ctx: ReportContext) -> Section:
    frame = transform_frame(ctx)
    if frame.empty or frame["transform"].nunique() < 2:
        text = (
            "This run has only the identity instances: no renaming, permutation or decoy to "
            "compare with."
        )
        return Section("transforms", "Transform robustness", [Paragraph(text, muted=True)])
    columns = [
        *ctx.system_columns(),
        Column("transform", "transform", "label"),
        Column(
            "reveal_blocks",
            "reveal (blocks)",
            "proportion",
            interval=("reveal_blocks_boot_low", "reveal_blocks_boot_high"),
            interval_label="boot",
            help="share of blocks (every instance and repeat) passing the reveal future",
        ),
        Column(
            "reveal_gap_blocks",
            "gap (blocks)",
            "signed",
            interval=("reveal_gap_low", "reveal_gap_high"),
            interval_label="boot",
            help="identity rate minus this transform's block rate: the typical loss, with a "
            "cluster-bootstrap interval over source pairs",
        ),
        Column(
            "reveal_gap_p",
            "gap p",
            "pvalue",
            help="two-sided sign-flip permutation test of the per-pair gaps",
        ),
        Column(
            "reveal_every",
            "reveal on every instance (source pairs)",
            "proportion",
            help="source pairs passing the reveal future on every instance: the worst case",
        ),
        Column(
            "reveal_gap_pairs",
            "gap (every instance)",
            "signed",
            help="identity rate minus the every-instance rate; grows with the instances",
        ),
        Column("late_reference_adequacy", "late-ref adequacy (source pairs)", "proportion"),
        Column(
            "equivariance_violation_pairs",
            "equivariance violations (source pairs)",
            "count",
            help="C(rename(H)) != rename(C(H)) on some read of the pair",
        ),
        Column("equivariance_violation_reads", "equivariance violations (reads)", "count"),
    ]
    moved = frame[frame["transform"] != IDENTITY]
    return Section(
        "transforms",
        "Transform robustness: shortcut gaps",
        [
            Paragraph(
                "Under a transform, a block is one transformed instance (and repeat) of a "
                "source pair. The shortcut gap is the identity rate minus the transformed "
                "rate: positive when the condition did worse once labels or order changed. "
                "Equivariance, C(rename(H)) == rename(C(H)), is checked per read under every "
                "renaming; under relabel labels change length, so a budgeted memory may "
                "rightly keep other records there, and only rename and decoy are a strict "
                "test. Under permute, a condition that claims order invariance (it says so "
                "in audit compressors) must keep the same lines whatever the order: its "
                "violations are counted here too.",
                muted=True,
            ),
            Table(
                "transforms-table",
                columns,
                frame,
                csv="transforms.csv",
                collapsed=True,
                caption="Every condition under every transform: reveal, gaps, late-ref adequacy, "
                "equivariance",
            ),
            Chart(
                "transforms-chart",
                "bars",
                frame,
                {
                    "group": "label",
                    "series": "transform",
                    "prefix": "reveal_blocks",
                    "axis": "share of blocks passing the reveal future (95 % Wilson interval)",
                },
                caption="Reveal accuracy per transform, in blocks. A drop from identity under "
                "rename or decoy is a shortcut on identifier spelling; under permute, on log "
                "order.",
                collapsed=True,
            )
            if not moved.empty
            else Paragraph(""),
        ],
    )
