"""``build_transfer``: does a synthetic run's verdict hold on a natural run?

``audit compare SYNTHETIC NATURAL --transfer``.  The two runs share conditions, not
pairs, so nothing is paired: per condition, each run's joint J at identity over its
own source pairs, side by side with Wilson intervals (and the natural run's per pack,
its families); Kendall's tau between the two rankings of the conditions, with a
bootstrap interval over each run's source pairs; and the conditions whose joint J
differs between the runs (Fisher exact, Holm), each with a natural pair that shows it.
The numbers come from ``audit.scoring``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.reportdata._context import Options, System, pair_values, proportion_columns
from audit.reportdata._glance import integrity_alert
from audit.rundir import RunData, load_source_pairs
from audit.scoring import (
    IDENTITY,
    RankAgreement,
    Scores,
    holm,
    independent_difference_p,
    rank_agreement,
    reader_checks,
    score_results,
    unreadable,
)
from reports import (
    Block,
    Bullets,
    Chart,
    Code,
    Column,
    Document,
    Facts,
    Paragraph,
    Section,
    Table,
    Text,
)


def _shared_systems(first: Scores, second: Scores) -> list[System]:
    """The systems both runs scored, with a reader that can read both runs' histories."""
    blind = set(unreadable(reader_checks(first))) | set(unreadable(reader_checks(second)))
    theirs = set(second.systems)
    return [s for s in first.systems if s in theirs and s[0] not in blind]


def transfer_frame(synthetic: Scores, natural: Scores, packs: list[str]) -> pd.DataFrame:
    """One row per shared system: both runs' joint J (source pairs), the natural run's
    per pack, both ranks, the Fisher p and whether the synthetic J holds."""
    rows = []
    for system in _shared_systems(synthetic, natural):
        reader, condition, budget = system
        row: dict[str, Any] = {
            "reader": reader, "condition": condition, "budget": budget,
            "kind": synthetic.kinds.get(condition, "strict"),
        }  # fmt: skip
        row.update(
            proportion_columns("synthetic", synthetic.cell(system, IDENTITY), "joint_J_pairs")
        )
        row.update(proportion_columns("natural", natural.cell(system, IDENTITY), "joint_J_pairs"))
        for index, pack in enumerate(packs):
            cell = natural.cell(system, IDENTITY, pack)
            row.update(proportion_columns(f"pack{index}", cell, "joint_J_pairs"))
        row["delta"] = row["natural_rate"] - row["synthetic_rate"]
        row["p_value"] = independent_difference_p(
            row["synthetic_k"], row["synthetic_n"], row["natural_k"], row["natural_n"]
        )
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    for run in ("synthetic", "natural"):
        table[f"rank_{run}"] = (
            table.groupby(["reader", "budget"])[f"{run}_rate"]
            .rank(method="min", ascending=False)
            .astype(int)
        )
    table["ranks"] = [
        f"{a} / {b}" for a, b in zip(table["rank_synthetic"], table["rank_natural"], strict=True)
    ]
    tested = table["p_value"].notna()
    table["p_holm"] = float("nan")
    table.loc[tested, "p_holm"] = holm(table.loc[tested, "p_value"].tolist())
    table["holds"] = ~(table["p_holm"] < 0.05)
    table["label"] = [
        f"{c} @ {b} B" + (f" ({r})" if table["reader"].nunique() > 1 else "")
        for r, c, b in zip(table["reader"], table["condition"], table["budget"], strict=True)
    ]
    return table


def rank_frame(
    synthetic: Scores, natural: Scores, table: pd.DataFrame, options: Options
) -> pd.DataFrame:
    """Kendall's tau per reader and budget: over every shared condition, and over the
    strict ones (the contestants a user chooses among)."""
    first, second = pair_values(synthetic, "joint_J"), pair_values(natural, "joint_J")
    rows = []
    for key, group in table.groupby(["reader", "budget"], sort=False):
        reader, budget = str(key[0]), int(str(key[1]))
        for scope, mask in (("every condition", None), ("strict conditions", "strict")):
            chosen = group if mask is None else group[group["kind"] == mask]
            names = chosen["condition"].tolist()
            if len(names) < 2:
                continue
            agreement: RankAgreement = rank_agreement(
                {c: first[(reader, c, budget)] for c in names},
                {c: second[(reader, c, budget)] for c in names},
                names,
                resamples=options.resamples,
                seed=options.seed,
            )
            rows.append(
                {
                    "reader": reader, "budget": budget, "scope": scope,
                    "conditions": agreement.conditions, "tau": agreement.tau,
                    "tau_low": agreement.low, "tau_high": agreement.high,
                    "resamples": agreement.resamples,
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def example_frame(natural: Scores, table: pd.DataFrame, run: RunData) -> pd.DataFrame:
    """Per condition whose synthetic J does not hold: one natural pair that shows it
    (one that fails joint J where J fell, passes where it rose: the first by id not
    already shown for another condition, so the examples differ where they can), with
    its pack and the edit that made it a pair."""
    values = pair_values(natural, "joint_J")
    source = load_source_pairs(run)
    rows = []
    used: set[str] = set()
    for _, row in table[~table["holds"]].iterrows():
        system = (row["reader"], row["condition"], int(row["budget"]))
        want = 0.0 if row["delta"] < 0 else 1.0
        shown = sorted(pid for pid, v in values.get(system, {}).items() if v == want)
        if not shown:
            continue
        pid = next((p for p in shown if p not in used), shown[0])
        used.add(pid)
        pair = source.pairs.get(pid)
        provenance = pair.provenance if pair is not None else None
        rows.append(
            {
                "label": row["label"],
                "direction": "lower on natural" if row["delta"] < 0 else "higher on natural",
                "pair_id": pid,
                "pack": natural.families.get(pid, ""),
                "outcome": "fails joint J" if want == 0.0 else "passes joint J",
                "query": ", ".join(pair.query) if pair is not None else "",
                "edit": provenance.edit if provenance is not None else "",
                "item": provenance.A.item if provenance is not None else "",
            }
        )
    return pd.DataFrame(rows)


def _summary(table: pd.DataFrame, ranks: pd.DataFrame) -> list[Text]:
    notes: list[Text] = []
    for _, row in ranks.iterrows():
        notes.append(
            f"Kendall's tau between the synthetic and the natural ranking of {row['scope']} "
            f"({row['conditions']}, {row['reader']} reader, {row['budget']} B): "
            f"{row['tau']:+.2f} [{row['tau_low']:+.2f}, {row['tau_high']:+.2f}]"
        )
    broken = table[~table["holds"]]
    if len(broken):
        notes.append(
            f"{len(broken)} of {len(table)} conditions' joint J does not hold on natural data "
            "(Fisher exact, Holm p < 0.05): "
            + "; ".join(
                f"{label} {'lower' if delta < 0 else 'higher'}"
                for label, delta in zip(broken["label"], broken["delta"], strict=True)
            )
        )
    elif len(table):
        notes.append(
            f"every one of {len(table)} conditions' joint J holds on natural data (no "
            "difference significant after Holm; a miss is not proof of equality)"
        )
    return notes


METHOD = (
    "The two runs share conditions, not pairs: each condition's joint J is counted over "
    "each run's own source pairs at identity (95 % Wilson intervals). Kendall's tau-b "
    "compares the two rankings of the conditions (ties allowed); its 95 % interval is a "
    "percentile bootstrap that draws each run's source pairs with replacement, the same "
    "draw for every condition. A synthetic verdict does not hold where the natural joint "
    "J differs from the synthetic one: Fisher's exact test on the two independent "
    "proportions, Holm-corrected across the conditions."
)


def build_transfer(
    synthetic: RunData, natural: RunData, options: Options | None = None
) -> Document:
    """The transfer test of ``synthetic`` (the default audit, say) to ``natural``
    (``audit run --preset natural``)."""
    options = options or Options()
    first = score_results(synthetic.results, synthetic.conditions)
    second = score_results(natural.results, natural.conditions)
    packs = list(dict.fromkeys(second.families.values()))
    table = transfer_frame(first, second, packs)
    ranks = rank_frame(first, second, table, options) if len(table) else pd.DataFrame()
    examples = example_frame(second, table, natural) if len(table) else pd.DataFrame()
    columns = [
        Column("label", "condition", "label"),
        Column("kind", "kind", "text"),
        Column("synthetic", "synthetic joint J (source pairs)", "proportion"),
        Column("natural", "natural joint J (source pairs)", "proportion"),
        *[
            Column(f"pack{index}", f"natural: {pack}", "proportion")
            for index, pack in enumerate(packs)
        ],
        Column("ranks", "rank synthetic / natural", "text"),
        Column("delta", "natural minus synthetic", "signed"),
        Column("p_holm", "p (Fisher, Holm)", "pvalue"),
        Column("holds", "", "flag", flag_text="holds",
               help="the natural joint J does not differ significantly from the synthetic"),
    ]  # fmt: skip
    rank_columns = [
        Column("scope", "conditions ranked", "text"),
        Column("conditions", "n", "integer"),
        Column("reader", "reader", "label"),
        Column("budget", "budget (B)", "integer"),
        Column("tau", "Kendall's tau", "signed", interval=("tau_low", "tau_high"),
               interval_label="bootstrap 95 %"),
        Column("resamples", "resamples", "integer"),
    ]  # fmt: skip
    example_columns = [
        Column("label", "condition", "label"),
        Column("direction", "joint J", "text"),
        Column("pair_id", "example pair", "text"),
        Column("pack", "pack", "text"),
        Column("outcome", "there it", "text"),
        Column("item", "source item", "text"),
        Column("edit", "the edit that made the pair", "text"),
    ]
    chart = (
        [
            Chart(
                "transfer-chart", "dots",
                table.assign(facet=[f"{b} B" for b in table["budget"]]),
                {"label": "label", "series": [("synthetic", "synthetic"), ("natural", "natural")],
                 "facet": "facet" if table["budget"].nunique() > 1 else None},
                caption="Joint J at identity per condition, synthetic and natural, 95 % Wilson "
                "intervals over each run's source pairs.",
            )
        ]
        if len(table)
        else []
    )  # fmt: skip
    blocks: list[Block] = [
        Paragraph(METHOD, muted=True),
        *chart,
        Table("transfer-table", columns, table, csv="transfer.csv",
              empty="The runs share no condition at the same budget and reader."),
        Table("transfer-rank-table", rank_columns, ranks, csv="transfer-ranks.csv",
              empty="Fewer than two shared conditions: no ranking to compare."),
        Table("transfer-examples-table", example_columns, examples,
              csv="transfer-examples.csv", caption="A natural pair for each condition whose "
              "synthetic joint J does not hold.",
              empty="Every shared condition's synthetic joint J holds on natural data."),
    ]  # fmt: skip
    alerts = [block for run in (synthetic, natural) for block in integrity_alert(run)]
    return Document(
        title=f"memory audit: transfer from {synthetic.label} to {natural.label}",
        facts=Facts(
            [
                ("synthetic run", [Code(synthetic.label)]),
                ("natural run", [Code(natural.label)]),
                ("natural packs", ", ".join(packs) or "-"),
            ]
        ),
        summary=[*alerts, Bullets(_summary(table, ranks) if len(table) else [])],
        sections=[Section("transfer", "Does the synthetic verdict transfer?", blocks)],
        stem="transfer",
    )
