"""The summary at the top of a report: what to see in ten seconds.

A run that is not whole comes before anything (incomplete: what is missing and how
to finish it; damaged: which file, and where the results were read from instead).
Then shortcut findings (a probe that does as well as a condition under every
transform; a condition that loses under a transform), then where current accuracy
would pick a different condition than reveal accuracy, then the best strict
condition per budget with every tie named, the ceiling (archives) and the floor
(probes), NA, and the run's notes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext, System
from audit.rundir import RunData
from audit.scoring import (
    article,
    equivariance_alerts,
    grouped_matches,
    listed,
    probe_advice,
    probe_matches,
    selection_warnings,
    shortcut_gaps,
)
from reports import Alert, Block, Bullets, Column, Flag, Strong, Table, with_code

GAP_SHOWN = 0.05
"""A block gap at least this large (and significant) is a finding in the summary."""


def _rate(cell: dict[str, Any] | None, metric: str, unit: str = "pairs") -> float | None:
    if cell is None or not cell[f"{metric}_{unit}_n"]:
        return None
    return float(cell[f"{metric}_{unit}_k"]) / float(cell[f"{metric}_{unit}_n"])


def _where(ctx: ReportContext, reader: str, budget: int) -> str:
    return f"{budget} B" + (f", reader {reader}" if ctx.several_readers else "")


def _probe_alerts(ctx: ReportContext) -> list[Block]:
    """Conditions no better than a shortcut probe: one box per reader and budget, one
    line per condition (its probes, joint J at identity, what to do), so that five
    conditions matched by three probes read in one glance instead of fifteen boxes."""
    by_where: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for group in grouped_matches(probe_matches(ctx.scores)):
        by_where.setdefault((group["reader"], group["budget"]), []).append(group)
    blocks: list[Block] = []
    for (reader, budget), groups in by_where.items():
        where = _where(ctx, reader, budget)
        strict = [s for s in ctx.scores.contestants() if (s[0], s[2]) == (reader, budget)]
        kinds = listed(list(dict.fromkeys(h for g in groups for h in g["heuristics"])), "or")
        if len(groups) == 1:
            title: Any = [
                Flag("This audit cannot tell "),
                Strong(groups[0]["condition"]),
                Flag(f" from {article(kinds)} {kinds} heuristic"),
                f" ({where})",
            ]
        else:
            title = [
                Flag(
                    f"This audit cannot tell {len(groups)} of {len(strict)} strict "
                    f"conditions from {article(kinds)} {kinds} heuristic"
                ),
                f" ({where})",
            ]
        transforms = groups[0]["transforms"]
        matched = list({m["probe"]: m for g in groups for m in g["matches"]}.values())
        one = len(groups) == 1
        advice = probe_advice(groups[0]["condition"] if one else "each matched condition",
                              matched, transforms)  # fmt: skip
        legend = "; ".join(
            m["probe"] + (f" exploits {m['exploits']}" if m["exploits"] else "") for m in matched
        )
        probes = "A probe that knows" if len(matched) == 1 else "Probes that know"
        body = (
            f"{probes} nothing of semantics ({legend}) did at least as well on joint J "
            f"(blocks) under every transform of this run ({', '.join(transforms)}). "
            f"{advice[0].upper()}{advice[1:]}. Joint J at {transforms[0]}, probe vs condition:"
        )
        items: list[Any] = [
            [Strong(group["condition"]), ": " + ", ".join(
                f"{m['probe']} {m['probe_joint_J'][transforms[0]]:.2f} vs "
                f"{m['condition_joint_J'][transforms[0]]:.2f}" for m in group["matches"])]
            for group in groups
        ]  # fmt: skip
        blocks.append(Alert("warn", title, body, items))
    return blocks


def _shortcut_alerts(ctx: ReportContext) -> list[Block]:
    blocks: list[Block] = _probe_alerts(ctx)
    findings: list[Any] = []
    for alert in equivariance_alerts(ctx.scores):
        where = _where(ctx, alert["reader"], alert["budget"])
        if alert["check"] == "order":
            blocks.append(
                Alert(
                    "warn",
                    [Strong(alert["condition"]), Flag(" claims order invariance, and the "
                     "claim is false"), f" ({where})"],
                    [f"Under {alert['transform']}, its memory held other lines than at "
                     f"identity on {alert['k']}/{alert['n']} source pairs "
                     f"({alert['reads_k']}/{alert['reads_n']} reads), though log order "
                     "carries no meaning and the condition declares order_invariant."],
                )
            )  # fmt: skip
        elif alert["kind"] == "strict":
            findings.append(
                [Flag("Spelling dependence: "), Strong(ctx.label((alert["reader"],
                 alert["condition"], alert["budget"]))), " keeps other records when labels "
                 f"are renamed (equivariance violated under {alert['transform']} on "
                 f"{alert['k']}/{alert['n']} source pairs): its choices depend on how "
                 "identifiers are spelled."]
            )  # fmt: skip
    for gap in shortcut_gaps(ctx.scores, resamples=ctx.options.resamples, seed=ctx.options.seed):
        value, p = gap["reveal_gap_blocks"], gap.get("reveal_gap_p")
        system: System = (gap["reader"], gap["condition"], gap["budget"])
        if value is None or value < GAP_SHOWN or p is None or p >= 0.05:
            continue
        if ctx.kind(system[1]) == "probe":
            continue  # a probe losing under a transform is the transform working
        base = ctx.identity_cell(system)
        moved = ctx.scores.cell(system, gap["transform"])
        if base is None or moved is None:
            continue
        findings.append(
            [Flag("Shortcut: "), Strong(ctx.label(system)), " passes the reveal future on "
             f"{base['reveal_blocks_k']}/{base['reveal_blocks_n']} blocks at identity but "
             f"on {moved['reveal_blocks_k']}/{moved['reveal_blocks_n']} blocks under "
             f"{gap['transform']} (gap {value:+.2f} [{gap['reveal_gap_low']:+.2f}, "
             f"{gap['reveal_gap_high']:+.2f}], p {p:.3g})."]
        )  # fmt: skip
    if findings:
        blocks.append(Bullets(findings))
    return blocks


def _selection_alerts(ctx: ReportContext) -> list[Block]:
    blocks: list[Block] = []
    for warning in selection_warnings(ctx.scores):
        if not warning["warn"]:
            continue
        items = [
            f"current prefers {inv['current_prefers']} over {inv['reveal_prefers']} "
            f"({inv['current'][0]:.2f} vs {inv['current'][1]:.2f}), reveal the opposite "
            f"({inv['reveal'][0]:.2f} vs {inv['reveal'][1]:.2f})" + _noise_note(inv)
            for inv in warning["inversions"][:12]
        ]
        if len(warning["inversions"]) > 12:
            items.append(f"... and {len(warning['inversions']) - 12} more (ranking.csv)")
        body: list[Any] = [
            "Current accuracy ranks ", Strong(", ".join(warning["best_by_current"])),
            " best; reveal accuracy ranks ", Strong(", ".join(warning["best_by_reveal"])),
            " best (strict conditions; archives and probes are not choices).",
        ]  # fmt: skip
        if warning["misleading"]:
            body += [" Choosing by current accuracy could pick ",
                     Strong(", ".join(warning["misleading"])),
                     ", which the reveal future shows to be worse."]  # fmt: skip
        where = _where(ctx, warning["reader"], warning["budget"])
        noise = warning.get("within_noise", False)
        if noise:
            body += [" Every reversal here is within noise: none is significant by an exact "
                     "McNemar test on these source pairs (p < 0.05 on both current and "
                     "reveal accuracy)."]  # fmt: skip
        title = (
            "Current accuracy would pick a different condition than reveal accuracy"
            if warning["misleading"]
            else "Current and reveal accuracy pick the same best condition, but rank others "
            "in opposite orders"
        )
        blocks.append(
            Alert(
                "info" if noise else "warn",
                f"{title} ({where}{', within noise' if noise else ''})",
                body,
                items,
            )
        )
    if not blocks:
        blocks.append(
            Alert(
                "ok",
                "Current accuracy and reveal accuracy pick the same best strict "
                "condition(s) at every budget.",
            )
        )
    return blocks


def _noise_note(inversion: dict[str, Any]) -> str:
    """How sure a reversal is: the exact McNemar p on each branch."""
    ps = [inversion.get("current_p"), inversion.get("reveal_p")]
    if any(p is None for p in ps):
        return ""
    shown = f"McNemar p {ps[0]:.2g} now, {ps[1]:.2g} after the reveal"
    return f"; within noise ({shown})" if inversion.get("within_noise") else f" ({shown})"


def _best(ctx: ReportContext) -> list[Any]:
    """Per (reader, budget): the best strict condition by joint J (every tie named),
    the ceiling (archives) and the floor (the best probe)."""
    lines: list[Any] = []
    groups: dict[tuple[str, int], list[tuple[float, str, dict[str, Any]]]] = {}
    for system in ctx.scores.systems:
        cell = ctx.identity_cell(system)
        rate = _rate(cell, "joint_J")
        if rate is not None and cell is not None:
            groups.setdefault((system[0], system[2]), []).append((rate, system[1], cell))
    for (reader, budget), entries in groups.items():
        where = _where(ctx, reader, budget)
        by_kind: dict[str, list[tuple[float, str, dict[str, Any]]]] = {}
        for entry in entries:
            by_kind.setdefault(ctx.kind(entry[1]), []).append(entry)
        for kind, title in (("strict", "Best joint J"), ("archive", "Ceiling"),
                            ("probe", "Floor (best probe)")):  # fmt: skip
            found = by_kind.get(kind)
            if not found:
                continue
            top = max(rate for rate, _, _ in found)
            winners = [(c, cell) for rate, c, cell in found if rate == top]
            cell = winners[0][1]
            tie = f" (a tie of {len(winners)})" if len(winners) > 1 else ""
            note = {"archive": " (archives re-read the raw history: extra storage)",
                    "probe": " (a shortcut heuristic)"}.get(kind, "")  # fmt: skip
            lines.append(
                [f"{title} at {where}{tie}: ", Strong(", ".join(c for c, _ in winners)),
                 f", {cell['joint_J_pairs_k']}/{cell['joint_J_pairs_n']} source pairs{note}."]
            )  # fmt: skip
    if len(ctx.scores.systems) > 1:  # how the comparisons' reference was chosen
        sentence = with_code(ctx.reference_sentence())
        lines.append(
            sentence
            if ctx.reference_status in ("preregistered", "pairwise")
            else [Flag("Post hoc reference. "), *sentence]
        )
    return lines


def integrity_alert(run: RunData) -> list[Block]:
    """One alert when the run is incomplete or damaged (``rundir.RunIntegrity``)."""
    integrity = run.integrity
    problems = integrity.problems(str(run.path))
    if not problems:
        return []
    title = (
        "This run is damaged: read what was intact"
        if integrity.damaged
        else "This run is incomplete: its scores cover only what finished"
    )
    return [Alert("warn", [Flag(title)], "", [with_code(p) for p in problems])]


def build(ctx: ReportContext) -> list[Block]:
    blocks: list[Block] = [
        *integrity_alert(ctx.run),
        *_shortcut_alerts(ctx),
        *_selection_alerts(ctx),
    ]
    notes: list[Any] = _best(ctx)
    if bool(ctx.run.results["correct"].isna().any()):
        notes.append("Some reads are NA (infrastructure failures): their scores are bounds, "
                     "never counted as failures.")  # fmt: skip
    notes += list(ctx.run.notes) + ctx.notes
    if notes:
        blocks.append(Bullets(notes))
    blocks.append(_ranking_table(ctx))
    return blocks


def _at(values: Any, index: int) -> float:
    return float(values[index]) if values else float("nan")


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
                    "current_of_preferred": _at(inversion.get("current"), 0),
                    "current_of_other": _at(inversion.get("current"), 1),
                    "reveal_of_preferred": _at(inversion.get("reveal"), 0),
                    "reveal_of_other": _at(inversion.get("reveal"), 1),
                }
            )
    columns = [
        Column("budget", "budget (B)", "integer"),
        *([Column("reader", "reader", "label")] if ctx.several_readers else []),
        Column("current_prefers", "current accuracy prefers", "label"),
        Column("reveal_prefers", "reveal accuracy prefers", "label"),
        Column("current_of_preferred", "current: preferred (rate, source pairs)", "rate"),
        Column("current_of_other", "current: other (rate)", "rate"),
        Column("reveal_of_preferred", "reveal: preferred (rate)", "rate"),
        Column("reveal_of_other", "reveal: other (rate)", "rate"),
    ]
    frame = pd.DataFrame(rows, columns=[
        "reader", "budget", "best_by_current", "best_by_reveal", "current_prefers",
        "reveal_prefers", "current_of_preferred", "current_of_other", "reveal_of_preferred",
        "reveal_of_other",
    ])  # fmt: skip
    return Table(
        "ranking-table", columns, frame, csv="ranking.csv", collapsed=True, markdown=False,
        caption="Pairs of conditions that current accuracy and reveal accuracy rank in "
        "opposite orders.", empty="No inversion: current and reveal accuracy agree.",
    )  # fmt: skip
