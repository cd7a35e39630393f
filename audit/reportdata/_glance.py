"""The summary at the top of a report: what to see in ten seconds.

The warning when current accuracy would pick a different condition than reveal
accuracy; the best joint J per budget (every tie named); each shortcut a transform
exposed; NA; the run's notes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext
from audit.scoring import selection_warnings, shortcut_gaps
from reports import Alert, Block, Bullets, Column, Strong, Table


def _rate(cell: dict[str, Any] | None, metric: str) -> float | None:
    if cell is None or not cell[f"{metric}_pairs_n"]:
        return None
    return float(cell[f"{metric}_pairs_k"]) / float(cell[f"{metric}_pairs_n"])


def build(ctx: ReportContext) -> list[Block]:
    blocks: list[Block] = []
    for warning in selection_warnings(ctx.scores):
        if not warning["warn"]:
            continue
        where = f"{warning['budget']} B" + (
            f", reader {warning['reader']}" if ctx.several_readers else ""
        )
        items = [
            f"current prefers {inv['current_prefers']} over {inv['reveal_prefers']} "
            f"({inv['current'][0]:.2f} vs {inv['current'][1]:.2f}), reveal the opposite "
            f"({inv['reveal'][0]:.2f} vs {inv['reveal'][1]:.2f})"
            for inv in warning["inversions"][:12]
        ]
        if len(warning["inversions"]) > 12:
            items.append(f"... and {len(warning['inversions']) - 12} more")
        body: list[Any] = [
            "Current accuracy ranks ",
            Strong(", ".join(warning["best_by_current"])),
            " best; reveal accuracy ranks ",
            Strong(", ".join(warning["best_by_reveal"])),
            " best.",
        ]
        if warning["misleading"]:
            body += [
                " Choosing by current accuracy could pick ",
                Strong(", ".join(warning["misleading"])),
                ", which the reveal future shows to be worse.",
            ]
        blocks.append(
            Alert(
                "warn",
                f"Current accuracy ranks the conditions differently from reveal accuracy ({where})",
                body,
                items,
            )
        )
    if not blocks:
        blocks.append(
            Alert(
                "ok",
                "Current accuracy and reveal accuracy pick the same best "
                "condition(s) at every budget.",
            )
        )
    findings: list[Any] = []
    best: dict[tuple[str, int], list[tuple[float, str, dict[str, Any]]]] = {}
    for system in ctx.scores.systems:
        cell = ctx.identity_cell(system)
        rate = _rate(cell, "joint_J")
        if rate is not None and cell is not None:
            best.setdefault((system[0], system[2]), []).append((rate, system[1], cell))
    for (reader, budget), entries in best.items():
        top = max(rate for rate, _, _ in entries)
        winners = [(c, cell) for rate, c, cell in entries if rate == top]
        names = ", ".join(c for c, _ in winners)
        cell = winners[0][1]
        who = f" ({reader})" if ctx.several_readers else ""
        tie = f" (a tie of {len(winners)})" if len(winners) > 1 else ""
        findings.append(
            [
                f"Best joint J at {budget} B{who}{tie}: ",
                Strong(names),
                f", {cell['joint_J_pairs_k']}/{cell['joint_J_pairs_n']} source pairs.",
            ]
        )
    for gap in shortcut_gaps(ctx.scores):
        value = gap["reveal_gap_blocks"]
        if value is None or value <= 0:
            continue
        system = (gap["reader"], gap["condition"], gap["budget"])
        base = ctx.identity_cell(system)
        moved = ctx.scores.cell(system, gap["transform"])
        if base is None or moved is None:
            continue
        findings.append(
            [
                "Shortcut: ",
                Strong(ctx.label(system)),
                " passes the reveal future on "
                f"{base['reveal_pairs_k']}/{base['reveal_pairs_n']} source pairs at identity but "
                f"on {moved['reveal_blocks_k']}/{moved['reveal_blocks_n']} blocks under "
                f"{gap['transform']} (gap {value:+.2f}).",
            ]
        )
    if bool(ctx.run.results["correct"].isna().any()):
        findings.append(
            "Some reads are NA (infrastructure failures): their scores are bounds, "
            "never counted as failures."
        )
    findings += list(ctx.run.notes) + ctx.notes
    if findings:
        blocks.append(Bullets(findings))
    blocks.append(_ranking_table(ctx))
    return blocks


def _ranking_table(ctx: ReportContext) -> Table:
    """Every inversion of current and reveal accuracy, for ranking.csv."""
    rows = []
    for warning in selection_warnings(ctx.scores):
        for inversion in warning["inversions"] or [{}]:
            rows.append(
                {
                    "reader": warning["reader"],
                    "budget": warning["budget"],
                    "best_by_current": " ".join(warning["best_by_current"]),
                    "best_by_reveal": " ".join(warning["best_by_reveal"]),
                    "current_prefers": inversion.get("current_prefers"),
                    "reveal_prefers": inversion.get("reveal_prefers"),
                    "current_rates": " ".join(f"{x:.4f}" for x in inversion.get("current", ())),
                    "reveal_rates": " ".join(f"{x:.4f}" for x in inversion.get("reveal", ())),
                }
            )
    columns = [
        Column("budget", "budget (B)", "integer"),
        *([Column("reader", "reader", "label")] if ctx.several_readers else []),
        Column("current_prefers", "current accuracy prefers", "label"),
        Column("reveal_prefers", "reveal accuracy prefers", "label"),
        Column("current_rates", "current (source pairs, rates)", "text"),
        Column("reveal_rates", "reveal (source pairs, rates)", "text"),
    ]
    frame = pd.DataFrame(rows, columns=[
        "reader", "budget", "best_by_current", "best_by_reveal", "current_prefers",
        "reveal_prefers", "current_rates", "reveal_rates",
    ])  # fmt: skip
    return Table(
        "ranking-table", columns, frame, csv="ranking.csv", collapsed=True, markdown=False,
        caption="Pairs of conditions that current accuracy and reveal accuracy rank in "
        "opposite orders.", empty="No inversion: current and reveal accuracy agree.",
    )  # fmt: skip
