"""Section "method": the units, intervals, tests and NA rules behind every number."""

from __future__ import annotations

from audit.reportdata._context import ReportContext
from reports import Bullets, Section


def build(ctx: ReportContext) -> Section:
    options = ctx.options
    return Section(
        "method",
        "Method",
        [
            Bullets(
                [
                    "Units: source pairs (independent evidence), blocks (one transformed "
                    "instance and repeat of a pair) and reads (one reader's answer on one "
                    "memory). Every header says which. A source pair passes a score when every "
                    "block of it passes; repeats are never folded by majority vote.",
                    "Intervals: 95 % Wilson score for k/n; cluster bootstrap (boot) for "
                    "joint J's mean block rate, mean bytes, block rates and gaps: source pairs "
                    "resampled with replacement, within each family when every family has 10 "
                    f"or more pairs, else all together ({options.resamples} resamples, seed "
                    f"{options.seed}), percentile interval; a zero-width interval over varying "
                    "pairs is flagged. Paired differences: Newcombe's hybrid score interval.",
                    "Paired tests: exact McNemar (binomial) on the source pairs determined "
                    "in both conditions; Holm correction across every comparison of the table; "
                    "each comparison's minimum detectable difference at 80 % power, and "
                    "'underpowered' where the observed difference is below it.",
                    "NA (an infrastructure failure) is never a failure: a score with NA reads "
                    "is computed NA as fail and NA as pass and shown as bounds k..k_high/n. "
                    "Adequacy and collisions are undefined for a memory the exact reader "
                    "cannot parse; such blocks are left out of their n.",
                    "docs/method.md describes the method and each threat to validity; "
                    "docs/reports.md explains every number of this report.",
                ]
            )
        ],
    )
