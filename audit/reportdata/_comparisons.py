"""Section "comparisons": how sure, by paired tests on the same source pairs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from audit.reportdata._context import READER, ReportContext, System, pair_values
from audit.scoring import PairedComparison, holm, paired_comparison
from reports import Chart, Column, Paragraph, Section, Strong, Table, with_code

COMPARISON_COLUMNS = [
    Column("a", "first", "label"),
    Column("b", "second", "label"),
    Column("budget", "budget (B)", "integer"),
    Column("n_pairs", "source pairs", "integer"),
    Column("both_pass", "both pass", "integer"),
    Column("only_a", "only first", "integer"),
    Column("only_b", "only second", "integer"),
    Column("neither", "neither", "integer"),
    Column(
        "delta",
        "delta (second - first)",
        "signed",
        interval=("delta_low", "delta_high"),
        interval_label="Newcombe",
        help="difference in joint J pass rate, with a 95 % Newcombe interval for paired data",
    ),
    Column("p_value", "McNemar p", "pvalue"),
    Column("p_holm", "Holm p", "pvalue"),
    Column("significant", "p < 0.05 after Holm?", "flag", flag_text="yes"),
    Column(
        "min_detectable",
        "detectable at 80 % power",
        "rate",
        help="the smallest difference the exact test detects with 80 % power on these "
        "pairs, at alpha over the comparisons of the table",
    ),
    Column(
        "power_reading",
        "power",
        "text",
        help="underpowered: too few pairs to tell a difference this size from none (a miss "
        "is not evidence of no difference); size likely overstated: significant, but below "
        "what these pairs detect with 80 % power, so its size is likely an overestimate",
    ),
]
NOISE_COLUMNS = [
    Column(
        "noise_floor",
        "reader noise floor",
        "rate",
        help="the larger share, of the two readers, of source pairs whose pass changed when "
        "the same reader read an identical memory again (repeats); 0 for the exact reader; "
        "blank: not measured",
    ),
    Column("within_noise", "within noise?", "flag", flag_text="within reader noise"),
]
"""``audit compare`` only: runs made apart can differ by the readers' own noise."""


def comparison_row(
    reader: str, budget: int, a: str, b: str, result: PairedComparison
) -> dict[str, Any]:
    t = result.table
    return {
        "reader": reader,
        "budget": budget,
        "a": a,
        "b": b,
        "n_pairs": t.n,
        "both_pass": t.both,
        "only_a": t.only_a,
        "only_b": t.only_b,
        "neither": t.neither,
        "rate_a": (t.both + t.only_a) / t.n if t.n else math.nan,
        "rate_b": (t.both + t.only_b) / t.n if t.n else math.nan,
        "delta": result.delta,
        "delta_low": result.low,
        "delta_high": result.high,
        "p_value": result.p_value,
        "excluded_pairs": result.excluded,
        "interval_method": result.interval_method,
        "interval_degenerate": result.degenerate,
        "min_detectable": result.min_detectable,
        "underpowered": result.underpowered,
    }


def with_holm(table: pd.DataFrame) -> pd.DataFrame:
    """Holm-adjusted p-values across every comparison of the table."""
    if table.empty:
        return table
    table["p_holm"] = holm(table["p_value"].tolist())
    table["significant"] = table["p_holm"] < 0.05
    table["power_reading"] = [
        power_reading(bool(under), bool(significant))
        for under, significant in zip(table["underpowered"], table["significant"], strict=True)
    ]
    return table


def power_reading(underpowered: bool, significant: bool) -> str:
    """What "underpowered" means for this row: a non-significant one could not tell,
    a significant one is real at its level but its size is likely overstated (a small
    study that reaches significance does so with a lucky draw)."""
    if not underpowered:
        return ""
    return "size likely overstated" if significant else "underpowered"


def comparison_frame(ctx: ReportContext) -> pd.DataFrame:
    """Paired comparisons of joint J at identity on the same source pairs, Holm-corrected."""
    options = ctx.options
    values = pair_values(ctx.scores, "joint_J")
    blocks: dict[tuple[str, int], list[str]] = {}
    for reader, condition, budget in ctx.scores.systems:
        blocks.setdefault((reader, budget), []).append(condition)
    planned: list[tuple[str, int, str, str]] = []
    for (reader, budget), names in blocks.items():
        if len(names) < 2 or reader in ctx.unreadable:
            continue  # a reader that cannot read the histories is compared with nothing

        def rate(condition: str, reader: str = reader, budget: int = budget) -> float:
            found = list(values.get((reader, condition, budget), {}).values())
            return float(np.nanmean(found)) if found and not np.isnan(found).all() else -1.0

        if options.pairwise:
            pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
        else:
            reference = ctx.reference if ctx.reference in names else None
            if reference is None:  # the best strict condition: never a ceiling or a probe
                strict = [c for c in names if ctx.scores.kinds.get(c, "strict") == "strict"]
                reference = max(strict or names, key=lambda c: (rate(c), -names.index(c)))
            pairs = [(reference, c) for c in names if c != reference]
        planned += [(reader, budget, a, b) for a, b in pairs]
    rows = []
    for reader, budget, a, b in planned:  # alpha / m over every comparison of the table
        system_a: System = (reader, a, budget)
        system_b: System = (reader, b, budget)
        result = paired_comparison(
            values.get(system_a, {}),
            values.get(system_b, {}),
            ctx.scores.families,
            comparisons=len(planned),
        )
        row = comparison_row(reader, budget, a, b, result)
        row["reference"] = (
            "pairwise"
            if options.pairwise
            else ctx.reference_status
            if a == ctx.reference
            else "from the data"
        )
        row["facet"] = ctx.where(reader, budget)
        row["label"] = f"{b} minus {a}"
        rows.append(row)
    return with_holm(pd.DataFrame(rows))


def forest_chart(
    frame: pd.DataFrame, facet: str | None, axis: str, caption: str, collapsed: bool = False
) -> Chart:
    """Each comparison's difference with its interval, filled where significant."""
    columns = {"label": "label", "value": "delta", "low": "delta_low", "high": "delta_high"}
    options = {**columns, "filled": "significant", "facet": facet, "axis": axis}
    return Chart("forest-chart", "forest", frame, options, caption=caption, collapsed=collapsed)


def method_note(ctx: ReportContext) -> str:
    status, pre = ctx.reference_status, ctx.preregistered_reference
    if status == "pairwise":
        what = "every two conditions (exploratory: no reference)"
    elif status == "preregistered":
        what = f"each condition against {ctx.reference!r} (preregistered: fixed in the run's plan)"
    elif status == "post hoc":
        what = f"each condition against {ctx.reference!r}, named after the run (post hoc)" + (
            f"; the run preregistered {pre!r}: these are not the preregistered comparisons"
            if pre is not None
            else ""
        )
    else:
        what = (
            "each condition against the best strict condition by joint J (per reader and "
            "budget; an archive or a probe is the reference only where the run has no "
            "strict condition), chosen from the data: "
            "post hoc. Holm corrects for the number of comparisons, not for picking the "
            "best as the reference, so differences from it lean away from zero; preregister "
            "a reference with `audit run --reference`"
        )
    if status in ("preregistered", "post hoc"):
        what += " (where it is absent at a budget, the best strict condition, from the data)"
    return (
        f"{what}; unit: the source pair (it passes when joint J passes on every block of it "
        "at identity); exact McNemar on the discordant pairs, Holm-corrected across every "
        "comparison in this table; delta intervals: Newcombe's hybrid score interval for "
        "paired proportions. Delta is second minus first. Underpowered: the observed "
        "difference is smaller than the one these pairs detect with 80 % power (at alpha "
        "over the comparisons of the table): a miss there is not evidence of no difference, "
        "and a significant one is real but its size likely overstated; `audit power` says "
        "how many pairs an effect needs."
    )


def build(ctx: ReportContext) -> Section:
    frame = comparison_frame(ctx)
    columns = [*COMPARISON_COLUMNS]
    if ctx.several_readers:
        columns.insert(3, READER)
    blocks: list[Any] = [Paragraph(with_code(method_note(ctx)), muted=True)]
    if frame.empty:
        blocks.append(Paragraph("Fewer than two conditions at every budget: nothing to compare."))
    else:
        caption: Any = ""
        firsts = frame["a"].unique()
        if not ctx.options.pairwise and len(firsts) == 1:
            # one reference: named once here instead of in a column of identical cells
            columns = [c for c in columns if c.key != "a"]
            caption = [
                "First, in every row (the reference): ",
                Strong(str(firsts[0])),
                ". Second: the condition compared with it.",
            ]
        blocks += [
            Table("comparisons-table", columns, frame, csv="comparisons.csv", caption=caption),
            forest_chart(
                frame,
                "facet" if frame["facet"].nunique() > 1 else None,
                "difference in joint J pass rate (second minus first), source pairs",
                "Difference in joint J pass rate on shared source pairs with 95 % Newcombe "
                "intervals; filled markers: Holm-corrected exact McNemar p < 0.05.",
            ),
        ]
    return Section("comparisons", "How sure: paired comparisons on the same pairs", blocks)
