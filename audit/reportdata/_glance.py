"""The summary at the top of a report: what to see in ten seconds.

A run that is not whole comes before anything (incomplete: what is missing and how
to finish it; damaged: which file, and where the results were read from instead),
then a reader that cannot read the histories.  Then the verdicts (``Verdict``: one
row per strict condition, the ceiling and the floor, the console's lines cell for
cell), shortcut findings (a probe that does as well as a condition under every
transform; a condition that loses under a transform), where current accuracy would
pick a different condition than reveal accuracy, the best strict condition per
budget with every tie named, NA, and the run's notes.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.reportdata._context import ReportContext, System
from audit.rundir import RunData
from audit.scoring import (
    ALPHA,
    VERDICT_COLUMNS,
    VERDICT_LEGEND,
    EquivarianceFinding,
    FloorFinding,
    Inversion,
    SelectionWarning,
    budget_alerts,
    equivariance_alerts,
    floor_message,
    sentence,
    spelling_text,
    verdict_rows,
)
from reports import Alert, Block, Bullets, Column, Flag, Strong, Table, with_code

GAP_SHOWN = 0.05
"""A block gap at least this large (and significant) is a finding in the summary."""


def _probe_alerts(ctx: ReportContext) -> list[Block]:
    """Conditions this audit cannot tell from the probe floor: one box per reader and
    budget, one line per condition (``floor_message``, the console's text too)."""
    by_where: dict[tuple[str, int], list[FloorFinding]] = {}
    for finding in ctx.floor_findings:
        by_where.setdefault((finding.reader, finding.budget), []).append(finding)
    blocks: list[Block] = []
    for (reader, budget), findings in by_where.items():
        strict = [s for s in ctx.scores.contestants() if (s[0], s[2]) == (reader, budget)]
        message = floor_message(findings, len(strict))
        items: list[Any] = [[Strong(name), ": " + where] for name, where in message.items]
        title: Any = [Flag(message.headline), f" ({ctx.where(reader, budget)})"]
        beaten = f"{sentence(message.beaten)}. " if message.beaten else ""
        blocks.append(Alert("warn", title, beaten + message.body, items))
    return blocks


def reader_alerts(ctx: ReportContext) -> list[Block]:
    """A reader that cannot read the histories (its check on ``full``) and a writer no
    valid reader can read: their scores are no verdict, and rank nothing."""
    blocks: list[Block] = []
    for check in ctx.reader_checks:
        if check.verdict:
            blocks.append(Alert("warn", [Strong(check.reader), ": ", Flag(check.verdict)],
                                f"{sentence(check.text())}. Its scores "
                                "are shown marked and take no part in any ranking."))  # fmt: skip
    for writer in ctx.writer_checks:
        blocks.append(Alert("warn", [Strong(f"{writer.condition} @ {writer.budget} B"), ": ",
                                     Flag(writer.verdict)],
                            f"{sentence(writer.text())}."))  # fmt: skip
    return blocks


def _shortcut_alerts(ctx: ReportContext) -> list[Block]:
    blocks: list[Block] = _probe_alerts(ctx)
    findings: list[Any] = []
    spelled: list[EquivarianceFinding] = []
    for finding in equivariance_alerts(ctx.scores):
        where = ctx.where(finding.reader, finding.budget)
        if finding.check == "order":
            blocks.append(
                Alert(
                    "warn",
                    [Strong(finding.condition), Flag(" claims order invariance, and the "
                     "claim is false"), f" ({where})"],
                    [sentence(finding.text()) + " Log order carries no "
                     "meaning and the condition declares order_invariant."],
                )
            )  # fmt: skip
        elif finding.kind == "strict":
            spelled.append(finding)
    if spelled:  # one finding, however many conditions show it (the console's text too)
        label = ctx.label
        parts = spelling_text(spelled, lambda f: Strong(label((f.reader, f.condition, f.budget))))
        findings.append([Flag("Spelling dependence: "), *parts])
    for gap in ctx.shortcut_gaps:
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
    for warning in ctx.selection_warnings:
        if not warning.warn:
            continue

        def counts(condition: str, metric: str, warning: SelectionWarning = warning) -> str:
            cell = ctx.identity_cell((warning.reader, condition, warning.budget))
            return (
                "-" if cell is None else f"{cell[f'{metric}_pairs_k']}/{cell[f'{metric}_pairs_n']}"
            )

        items = [
            f"current prefers {inv.current_prefers} over {inv.reveal_prefers} "
            f"({counts(inv.current_prefers, 'current')} vs "
            f"{counts(inv.reveal_prefers, 'current')} source pairs), reveal the opposite "
            f"({counts(inv.current_prefers, 'reveal')} vs "
            f"{counts(inv.reveal_prefers, 'reveal')})" + _noise_note(inv)
            for inv in warning.inversions[:12]
        ]
        if len(warning.inversions) > 12:
            items.append(f"... and {len(warning.inversions) - 12} more (ranking.csv)")
        noise = warning.within_noise
        where = f"{ctx.where(warning.reader, warning.budget)}{', within noise' if noise else ''}"
        body: list[Any] = [
            sentence(warning.text()),  # the console's text too
            " (Strict conditions only: archives and probes are not choices.)",
        ]
        title = (
            "Current accuracy would pick a different condition than reveal accuracy"
            if warning.misleading
            else "Current and reveal accuracy pick the same best condition, but rank others "
            "in opposite orders"
        )
        blocks.append(Alert("info" if noise else "warn", f"{title} ({where})", body, items))
    agree = (
        "Current accuracy and reveal accuracy pick the same best strict condition(s) at every "
        "budget."
    )
    return blocks or [Alert("ok", agree)]


def _noise_note(inversion: Inversion) -> str:
    """How sure a reversal is: the exact McNemar p on each branch, uncorrected, and,
    when it is within noise, on which branch it is not significant (a significant p
    never stands beside a bare "within noise")."""
    now, later = inversion.current_p, inversion.reveal_p
    if now is None or later is None:
        return ""
    shown = f"exact McNemar p {now:.2g} now, {later:.2g} after the reveal, uncorrected"
    if not inversion.within_noise:
        return f" ({shown})"
    weak = [w for w, p in (("now", now), ("after the reveal", later)) if p >= ALPHA]
    return f"; within noise, not significant {' or '.join(weak)} ({shown})"


def _best(ctx: ReportContext) -> list[Any]:
    """Per (reader, budget): the best strict condition by joint J (every tie named; the
    ceiling and the floor are rows of the verdicts table), and how the comparisons'
    reference was chosen."""
    lines: list[Any] = []
    groups: dict[tuple[str, int], list[tuple[float, str, dict[str, Any]]]] = {}
    for system in ctx.scores.systems:
        if system[0] in ctx.unreadable:
            continue  # no verdict: no best, ceiling or floor
        cell = ctx.identity_cell(system)
        if cell is not None and cell["joint_J_pairs_n"]:
            rate = float(cell["joint_J_pairs_k"]) / float(cell["joint_J_pairs_n"])
            groups.setdefault((system[0], system[2]), []).append((rate, system[1], cell))
    for (reader, budget), entries in groups.items():
        found = [entry for entry in entries if ctx.kind(entry[1]) == "strict"]
        if not found:  # the ceiling and the floor are rows of the verdicts table
            continue
        top = max(rate for rate, _, _ in found)
        winners = [(c, cell) for rate, c, cell in found if rate == top]
        cell = winners[0][1]
        tie = f" (a tie of {len(winners)})" if len(winners) > 1 else ""
        lines.append(
            [f"Best joint J at {ctx.where(reader, budget)}{tie}: ",
             Strong(", ".join(c for c, _ in winners)),
             f", {cell['joint_J_pairs_k']}/{cell['joint_J_pairs_n']} source pairs."]
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


def verdict_table(ctx: ReportContext) -> list[Block]:
    """The answer first: per reader and budget, a row per strict condition and the
    ceiling and floor rows (``scoring.verdict_rows``: the console's lines, cell for
    cell), after the legend that says what the words mean."""
    groups: dict[tuple[str, int], list[Any]] = {}
    for verdict in ctx.verdicts:
        groups.setdefault((verdict.reader, verdict.budget), []).append(verdict)
    rows = []
    for (reader, budget), here in groups.items():
        for row in verdict_rows(here):
            v = row.verdict
            rows.append(
                {"condition": row.label, "reader": reader, "budget": budget, **row.cells,
                 "note": row.remark.strip("()") or _raised(v.raised_reads), "kind": v.kind,
                 "keeps_k": v.keeps_k, "keeps_k_high": v.keeps_k_high, "n": v.n,
                 "keeps_low": v.keeps_low, "keeps_high": v.keeps_high, "flatter_p": v.flatter_p,
                 "not_a_verdict": v.not_a_verdict or ""}
            )  # fmt: skip
    if not rows:
        return []
    frame = pd.DataFrame(rows)
    titles = dict(VERDICT_COLUMNS)
    columns = [
        Column("condition", "condition", "label"),
        *([Column("budget", "budget (B)", "integer")] if len(groups) > 1 else []),
        *ctx.reader_column(),
        *(Column(key, titles[key], "text") for key, _ in VERDICT_COLUMNS),
        *([Column("note", "note", "text")] if frame["note"].ne("").any() else []),
    ]
    budgets = ", ".join(str(b) for b in sorted({b for _, b in groups}))
    return [
        Table(
            "verdicts-table", columns, frame, csv="verdicts.csv",
            caption=f"Verdicts at {budgets} B, at identity over all families. {VERDICT_LEGEND}",
        )
    ]  # fmt: skip


def _raised(reads: int) -> str:
    if not reads:
        return ""
    return f"its compressor raised: {reads} reads at identity failed, scored 0 (run.log)"


def _budget_alerts(ctx: ReportContext) -> list[Block]:
    """A condition whose memory went over the budget (emptied): its scores are not of
    what it kept."""
    return [
        Alert(
            "warn",
            [Strong(finding.condition), Flag(" went over the budget"), f" ({finding.budget} B)"],
            [sentence(finding.text()) + "."],
        )
        for finding in budget_alerts(ctx.scores)
    ]


def build(ctx: ReportContext) -> list[Block]:
    blocks: list[Block] = [
        *integrity_alert(ctx.run),
        *reader_alerts(ctx),
        *_budget_alerts(ctx),
        *verdict_table(ctx),
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
    for warning in ctx.selection_warnings:
        shown: list[Inversion | None] = [*warning.inversions] or [None]
        for inversion in shown:
            rows.append(
                {
                    "reader": warning.reader,
                    "budget": warning.budget,
                    "best_by_current": " ".join(warning.best_by_current),
                    "best_by_reveal": " ".join(warning.best_by_reveal),
                    "current_prefers": inversion and inversion.current_prefers,
                    "reveal_prefers": inversion and inversion.reveal_prefers,
                    "current_of_preferred": _at(inversion and inversion.current, 0),
                    "current_of_other": _at(inversion and inversion.current, 1),
                    "reveal_of_preferred": _at(inversion and inversion.reveal, 0),
                    "reveal_of_other": _at(inversion and inversion.reveal, 1),
                }
            )
    columns = [
        Column("budget", "budget (B)", "integer"),
        *ctx.reader_column(),
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
