"""Section "headline": what each condition keeps for the future, at identity."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext, by_system, proportion_columns
from audit.scoring import (
    IDENTITY,
    Verdict,
    best_of,
    bootstrap_mean,
    is_degenerate,
)
from reports import Chart, Column, Section, Table

HEADLINE_METRICS = (
    "current", "reveal", "override", "joint_J", "adequacy", "late_reference_adequacy",
    "collision",
)  # fmt: skip


ROLES = {"archive": "ceiling", "probe": "floor"}
"""What the best archive and the best probe of a reader and budget are (by joint J,
as the verdicts say), in the role column; the others are ``archive`` or ``probe`` (one
word: the caption says the rest, so that the headline fits a 1280 px window); a strict
condition has no role."""


def _roles(ctx: ReportContext) -> dict[tuple[str, str, int], str]:
    """Each archive's and probe's role, keyed like ``System``."""
    groups: dict[tuple[str, int], list[Verdict]] = {}
    for v in ctx.verdicts:
        groups.setdefault((v.reader, v.budget), []).append(v)
    roles = {}
    for group in groups.values():
        for kind, role in ROLES.items():
            best = best_of(group, kind)
            for v in group:
                if v.kind == kind:
                    roles[(v.reader, v.condition, v.budget)] = role if v in best else kind
    return roles


def headline_frame(ctx: ReportContext) -> pd.DataFrame:
    """One row per system at identity: proportions (source pairs), J's bootstrap
    interval, mean memory bytes, ranks by current and by reveal accuracy."""
    options = ctx.options
    sizes, j_pairs = ctx.scores.pair_bytes, ctx.scores.pairs["joint_J"]
    sizes_of = by_system(
        sizes[(sizes["transform"] == IDENTITY) & sizes["mean_memory_bytes"].notna()]
    )
    j_pairs_of = by_system(j_pairs[j_pairs["transform"] == IDENTITY])
    rows = []
    roles = _roles(ctx)
    for system in ctx.scores.systems:
        cell = ctx.identity_cell(system)
        row: dict[str, Any] = {**ctx.system_keys(system), "label": ctx.label(system)}
        verdict = ctx.verdict(system)
        row["role"] = "not a verdict" if verdict else roles.get(system, "")
        row["verdict"] = verdict or ""
        for metric in HEADLINE_METRICS:
            row.update(proportion_columns(metric, cell))
        group = j_pairs_of.get(system)
        row.update(proportion_columns("joint_J_blocks", cell, "joint_J_blocks"))
        low = high = math.nan
        degenerate = False
        if group is not None:
            # the per-pair mean block rate (repeats, never a majority vote), resampled by
            # source pair; NA as fail for the low end, NA as pass for the high end
            key = f"J/{system}"
            families = group["family"].tolist()
            worst = (group["blocks_lo"] / group["blocks"]).to_numpy()
            best = (group["blocks_hi"] / group["blocks"]).to_numpy()
            low, high = bootstrap_mean(
                worst, families, resamples=options.resamples, seed=options.seed, key=key
            )
            if not (worst == best).all():  # without NA reads, one draw gives both
                high = bootstrap_mean(best, families, resamples=options.resamples,
                                      seed=options.seed, key=key)[1]  # fmt: skip
            degenerate = is_degenerate(low, high, worst)
        row["joint_J_boot_degenerate"] = degenerate
        row["joint_J_boot_low"], row["joint_J_boot_high"] = low, high
        mine = sizes_of.get(system)
        if mine is not None:
            row["memory_bytes_mean"] = float(cell["mean_memory_bytes"]) if cell else math.nan
            row["memory_bytes_low"], row["memory_bytes_high"] = bootstrap_mean(
                mine["mean_memory_bytes"].to_numpy(),
                mine["family"].astype(str).tolist(),
                resamples=options.resamples,
                seed=options.seed,
                key=f"bytes/{system}",
            )
        else:
            row["memory_bytes_mean"] = row["memory_bytes_low"] = row["memory_bytes_high"] = math.nan
        row["n_pairs"] = row["current_n"] or row["joint_J_n"]
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    ranked = table["verdict"] == ""  # a score that is no verdict ranks nothing
    for metric in ("current", "reveal"):
        table[f"rank_{metric}"] = (
            table[ranked]
            .groupby(["reader", "budget"])[f"{metric}_rate"]
            .rank(method="min", ascending=False)
            .reindex(table.index)
            .fillna(0)
            .astype(int)
        )
    table["rank_differs"] = False
    for warning in ctx.selection_warnings:
        if not warning.warn:
            continue
        involved = set(warning.misleading) | {
            c for inv in warning.inversions for c in (inv.current_prefers, inv.reveal_prefers)
        }
        mask = (
            (table["reader"] == warning.reader)
            & (table["budget"] == warning.budget)
            & table["condition"].isin(involved)
        )
        table.loc[mask, "rank_differs"] = True
    several = table[["reader", "budget"]].drop_duplicates().shape[0] > 1
    table["facet"] = [
        ctx.where(reader, budget) if several else ""
        for reader, budget in zip(table["reader"], table["budget"], strict=True)
    ]
    table["ranks"] = [
        f"{a} / {b}" if keep else "-"
        for a, b, keep in zip(table["rank_current"], table["rank_reveal"], ranked, strict=True)
    ]
    return table


def build(ctx: ReportContext) -> Section:
    frame = headline_frame(ctx)
    repeated = bool(len(frame)) and bool((frame["joint_J_blocks_n"] != frame["joint_J_n"]).any())
    degenerate = bool(len(frame)) and bool(frame["joint_J_boot_degenerate"].any())
    columns = [
        Column("condition", "condition", "label"),
        Column(
            "role",
            "role",
            "text",
            help="the best archive is the ceiling (extra storage), the best probe the floor "
            "(they know nothing of semantics): no archive or probe is ever the best "
            "condition or the reference; "
            "not a verdict: the reader cannot read these histories (its check on full), or "
            "no valid reader can read the writer's memories: ranked nowhere",
        ),
        Column("budget", "budget (B)", "integer"),
        *ctx.reader_column(),
        Column(
            "current",
            "current (source pairs)",
            "proportion",
            help="both variants answered right before any future",
        ),
        Column(
            "reveal",
            "reveal (source pairs)",
            "proportion",
            help="both variants answered right after the reveal future",
        ),
        Column(
            "override",
            "override (source pairs)",
            "proportion",
            help="both variants answered right after the override future (the control)",
        ),
        Column(
            "joint_J",
            "joint J (source pairs)",
            "proportion",
            interval=("joint_J_boot_low", "joint_J_boot_high"),
            interval_label="boot",
            help="both variants right on both futures, on every block of the pair; boot: "
            "a cluster-bootstrap interval of the pairs' mean block pass rate",
        ),
        Column(
            "joint_J_blocks",
            "joint J (blocks)",
            "proportion",
            help="blocks (instance x repeat) passing: the paper's block J",
        ),
        Column(
            "joint_J_boot_degenerate",
            "boot degenerate?",
            "flag",
            flag_text="zero-width interval over varying pairs",
        ),
        Column(
            "adequacy",
            "adequacy (source pairs)",
            "proportion",
            help="E_q on the memory after the reveal future gives the gold answer, "
            "both variants (no reader involved)",
        ),
        Column(
            "late_reference_adequacy",
            "late-ref (source pairs)",
            "count",  # k/n: its interval is in headline.csv (the table fits 1280 px)
            help="late-reference adequacy: adequacy on the late-reference family alone, "
            "whose reveal makes the query copy a key no earlier update touched: the memory "
            "still answers a late reference",
        ),
        Column(
            "collision",
            "collisions (source pairs)",
            "proportion",
            help="the two variants' memories are byte-identical after the prefix, or the "
            "exact reader gives both one answer after the reveal: no reader can be right "
            "on both",
        ),
        Column(
            "memory_bytes_mean",
            "mean memory (B)",
            "number",
            digits=0,  # whole bytes: a tenth of a byte is noise, and the table fits 1280 px
            interval=("memory_bytes_low", "memory_bytes_high"),
            interval_label="boot",
        ),
        Column("ranks", "rank now / after reveal", "text"),
        Column("rank_differs", "in a reversal?", "flag", flag_text="yes"),
    ]
    hidden = {"joint_J_blocks": not repeated, "joint_J_boot_degenerate": not degenerate}
    columns = [c for c in columns if not hidden.get(c.key)]
    blocks: list[Any] = [
        Table(
            "headline-table",
            columns,
            frame,
            csv="headline.csv",
            caption="At identity (no transform). Every k/n counts independent source pairs; "
            "intervals are 95 % Wilson; boot marks a cluster bootstrap over source pairs (of "
            "joint J: the pairs' mean block pass rate). Roles: the ceiling is the best archive "
            "(it re-reads the raw history: extra storage); the floor is the best probe (a "
            "heuristic that knows nothing of semantics). The ranks count every condition; "
            "in a reversal? marks a strict condition that current accuracy and reveal "
            "accuracy order the other way round against another strict one (the selection "
            "warning), so two ranks may differ without it.",
        )
    ]
    if not frame.empty:
        blocks.append(
            Chart(
                "headline-chart",
                "dots",
                frame,
                {
                    "label": "label",
                    "series": [
                        ("current", "current accuracy"),
                        ("reveal", "reveal accuracy"),
                        ("joint_J", "joint J"),
                    ],
                    "axis": "share of source pairs passing (95 % Wilson interval)",
                    "facet": "facet" if frame["facet"].ne("").any() else None,
                },
                caption="Share of source pairs passing now, after the reveal future, and on "
                "both futures (joint J). A condition far right on current but left on reveal "
                "is correct now and insufficient later.",
            )
        )
    return Section("headline", "Headline: what each condition keeps for the future", blocks)
