"""Sample ``Document``s for the renderer tests: realistic sizes, long names, hostile text.

``realistic()`` is what ``audit report`` could build from a mid-sized run: 10
conditions (long names among them), 2 budgets, 2 readers (one with a long model
name), NA bounds, 12 families, a forest plot with 3 facets, a stacked chart of 6
causes with long names, a budget curve where two conditions coincide, a drill-down
of 30 pairs, and hostile strings (markup, bidi overrides, 50 KB lines) where
untrusted text can come from.  Everything is seeded: the same call gives the same
document.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pandas as pd

from reports import (
    Alert,
    Bullets,
    Chart,
    Code,
    Column,
    Document,
    DrillDown,
    Facts,
    Flag,
    Paragraph,
    Section,
    Strong,
    Table,
)

SCRIPT = '<script>alert("x")</script>'
BIDI = "evil\u202eoverride\u200bzero-width\x1b[31m"
LONG_LINE = "L" * 50_000
"""A 50 KB line with no space in it."""
HOSTILE = f"{SCRIPT} {BIDI} <img src=x onerror=alert(1)> javascript:alert(2) https://evil.example"

CONDITIONS = [
    "frontier",
    "frontier_latest",
    "frontier_alpha:budget=2400",
    "tail",
    "head_tail",
    "bm25_retrieval",
    "prose_high",
    "prose_low",
    "summary_rolling_window",
    f"plugin{SCRIPT}",
]
BUDGETS = [600, 1200]
READERS = ["exact", "local:SmolLM2-135M-Instruct-Q4_1"]
FAMILIES = [
    "rollback",
    "late_reference",
    "override_chain",
    "renamed_key",
    "distractor_burst",
    "stale_default",
    "nested_scope",
    "delete_recreate",
    "alias_swap",
    "counter_drift",
    "conditional_set",
    "bulk_import",
]
CAUSES = [
    ("dropped", "evidence dropped by the compressor"),
    ("written_wrong", "written wrong (a record never in the history)"),
    ("misread", "retained but misread"),
    ("wrapper_only", "wrapper-only (right values, wrong envelope)"),
    ("na", "NA (infrastructure failure, not scored)"),
    ("raised", "compressor raised an exception"),
]
METRICS = ["current", "reveal", "override", "joint_J", "adequacy", "collision"]
PAIRS = 40


def system(condition: str, budget: int, reader: str) -> str:
    """How a system is labelled in the drill-down (as ``audit`` does)."""
    return f"{condition} @ {budget} B" + ("" if reader == "exact" else f" ({reader})")


def _proportion(
    prefix: str, rng: random.Random, n: int = PAIRS, na: bool = False
) -> dict[str, Any]:
    k = rng.randint(0, n)
    k_high = min(n, k + rng.randint(1, 4)) if na else k
    low, high = max(0.0, k / n - 0.15), min(1.0, k_high / n + 0.15)
    return {
        f"{prefix}_k": k,
        f"{prefix}_k_high": k_high,
        f"{prefix}_n": n,
        f"{prefix}_rate": k / n,
        f"{prefix}_low": low,
        f"{prefix}_high": high,
    }


def _headline(rng: random.Random) -> pd.DataFrame:
    rows = []
    for reader in READERS:
        for budget in BUDGETS:
            for c, condition in enumerate(CONDITIONS):
                row: dict[str, Any] = {"reader": reader, "condition": condition, "budget": budget}
                for metric in METRICS:
                    row |= _proportion(metric, rng, na=reader != "exact" and metric != "adequacy")
                if c == 3:  # not measured: shown as "-"
                    row |= {"collision_n": 0, "collision_k": 0, "collision_k_high": 0}
                row["joint_J_boot_low"] = max(0.0, row["joint_J_rate"] - 0.1)
                row["joint_J_boot_high"] = min(1.0, row["joint_J_rate"] + 0.1)
                row["memory_bytes_mean"] = budget * rng.uniform(0.5, 0.99)
                row["rank_current"], row["rank_reveal"] = c + 1, (c * 7) % 10 + 1
                row["rank_differs"] = row["rank_current"] != row["rank_reveal"]
                rows.append(row)
    return pd.DataFrame(rows)


def _comparisons(rng: random.Random) -> pd.DataFrame:
    rows = []
    facets = [(600, READERS[0]), (1200, READERS[0]), (1200, READERS[1])]
    for budget, reader in facets:
        for condition in CONDITIONS[1:]:
            delta = rng.uniform(-0.6, 0.4)
            p = rng.choice([0.00001, 0.003, 0.04, 0.5, 1.0])
            rows.append(
                {
                    "facet": f"{budget} B, reader {reader}",
                    "comparison": f"{CONDITIONS[0]} vs {condition}",
                    "a": CONDITIONS[0],
                    "b": condition,
                    "budget": budget,
                    "reader": reader,
                    "n_pairs": PAIRS,
                    "only_a": rng.randint(0, 10),
                    "only_b": rng.randint(0, 10),
                    "delta": delta,
                    "delta_low": delta - 0.2,
                    "delta_high": delta + 0.15,
                    "p_value": p,
                    "p_holm": min(1.0, p * 9),
                    "significant": p * 9 < 0.05,
                }
            )
    return pd.DataFrame(rows)


def _families(rng: random.Random) -> pd.DataFrame:
    rows = []
    for family in FAMILIES:
        for condition in CONDITIONS:
            n = rng.randint(0, 6)
            k = rng.randint(0, n)
            rows.append(
                {
                    "family": family,
                    "condition": condition,
                    "value": k / n if n else float("nan"),
                    "text": f"{k}/{n}" if n else "-",
                    "joint_J_k": k,
                    "joint_J_n": n,
                }
            )
    return pd.DataFrame(rows)


def _transforms(rng: random.Random) -> pd.DataFrame:
    rows = []
    for condition in CONDITIONS:
        for transform in ("identity", "rename:2", "permute", "decoy"):
            rows.append(
                {"condition": condition, "transform": transform} | _proportion("reveal", rng)
            )
    return pd.DataFrame(rows)


def _taxonomy(rng: random.Random) -> pd.DataFrame:
    rows = []
    for reader in READERS:
        for condition in CONDITIONS:
            row: dict[str, Any] = {
                "system": f"{condition} @ 1200 B ({reader})",
                "reader": reader,
                "condition": condition,
            }
            row |= {f"cause_{key}": rng.randint(0, 30) for key, _ in CAUSES}
            row |= _proportion("joint_J", rng, na=reader != "exact")
            rows.append(row)
    return pd.DataFrame(rows)


def _curve(rng: random.Random) -> pd.DataFrame:
    rows = []
    for reader in READERS:
        for condition in CONDITIONS:
            for budget in BUDGETS:
                rows.append(
                    {"reader": f"reader {reader}", "condition": condition, "budget": budget}
                    | _proportion("joint_J", rng)
                )
    frame = pd.DataFrame(rows)
    # frontier_latest coincides with frontier everywhere: both must stay visible
    for reader in READERS:
        source = frame[(frame["condition"] == "frontier") & (frame["reader"] == f"reader {reader}")]
        target = (frame["condition"] == "frontier_latest") & (frame["reader"] == f"reader {reader}")
        for column in [c for c in frame.columns if c.startswith("joint_J")]:
            frame.loc[target, column] = source[column].to_numpy()
    return frame


def _lines(rng: random.Random, count: int, marks: int = 1) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        out.append(
            {
                "text": f'{{"id":"r{i}","op":"set","key":"k{rng.randint(0, 9)}","value":"v{i}","rev":{i}}}',
                "mark": i < marks,
            }
        )
    return out


def _read(
    variant: str, branch: str, outcome: str, rng: random.Random, hostile: bool
) -> dict[str, Any]:
    correct = {"pass": 1, "na": None}.get(outcome, 0)
    return {
        "variant": variant,
        "branch": branch,
        "repeat": 0,
        "outcome": outcome,
        "correct": correct,
        "answer": (HOSTILE + LONG_LINE) if hostile else '{"k1": "v3"}',
        "gold": '{"k1": "v2"}',
        "error": "timeout {{ 7*7 }}" if outcome == "na" else None,
        "attribution": None if correct == 1 else CAUSES[rng.randint(0, 5)][1],
        "finish_reason": "stop",
        "raw_answer": (SCRIPT + BIDI) if hostile else None,
    }


def _drilldown(rng: random.Random, count: int = 30) -> list[dict[str, Any]]:
    systems = [system(c, b, r) for r in READERS for b in BUDGETS for c in CONDITIONS[:4]]
    pairs = []
    for p in range(count):
        hostile = p % 7 == 0
        cells, passing = [], []
        for s, label in enumerate(systems):
            state = (p + s) % 5
            if state in (0, 1):
                passing.append(label)
                continue
            failed, na = state != 2, state == 2 or (state == 4)
            outcome = "na" if state == 2 else "wrong_log"
            memory_lines = _lines(rng, 6) + ([{"text": HOSTILE, "mark": False}] if hostile else [])
            if hostile and s == 2:
                memory_lines.append({"text": LONG_LINE, "mark": False})
            memory = {"lines": memory_lines, "bytes": 512, "sha": f"{p:04d}{s:04d}"}
            cells.append(
                {
                    "label": label,
                    "failed": failed,
                    "na": na,
                    "identical": state == 3,
                    "memories": {
                        v: {b: memory for b in ("current", "reveal", "override")} for v in "AB"
                    },
                    "reads": [
                        _read(v, b, outcome if (v, b) == ("B", "reveal") else "pass", rng, hostile)
                        for v in "AB"
                        for b in ("current", "reveal", "override")
                    ],
                }
            )
        pairs.append(
            {
                "pair_id": f"{FAMILIES[p % 12]}-{p:03d}" + (SCRIPT if hostile else ""),
                "family": FAMILIES[p % 12],
                "query": ["k1", "k2"],
                "distinguishing": ["r0"],
                "variants": {v: _lines(rng, 12) for v in "AB"},
                "futures": {f: _lines(rng, 4, marks=0) for f in ("reveal", "override")},
                "gold": {
                    v: {b: '{"k1": "v2"}' for b in ("current", "reveal", "override")} for v in "AB"
                },
                "cells": cells,
                "passing": passing,
            }
        )
    return pairs


def proportion_columns(metrics: list[str], unit: str = "source pairs") -> list[Column]:
    return [
        Column(m, f"{m.replace('_', ' ')} ({unit})", "proportion", help=f"{m}: k/n {unit} passing")
        for m in metrics
    ]


def realistic(seed: int = 7) -> Document:
    """The sample report (see the module docstring)."""
    rng = random.Random(seed)
    headline = _headline(rng)
    comparisons = _comparisons(rng)
    taxonomy = _taxonomy(rng)
    curve = _curve(rng)
    headline["facet"] = [
        f"{b} B, reader {r}" for b, r in zip(headline["budget"], headline["reader"], strict=True)
    ]
    identity = Column(
        "joint_J",
        "joint J (source pairs)",
        "proportion",
        interval=("joint_J_boot_low", "joint_J_boot_high"),
        interval_label="boot",
        help="Both variants right on both futures.",
    )
    head_columns = [
        Column("condition", "condition", "label", help="The compressor and its settings."),
        Column("budget", "budget (B)", "integer", help="Memory budget in UTF-8 bytes."),
        Column("reader", "reader", "text"),
        *proportion_columns(["current", "reveal", "override"]),
        identity,
        *proportion_columns(["adequacy", "collision"]),
        Column("memory_bytes_mean", "mean memory bytes", "number", digits=1),
        Column(
            "rank_differs",
            "rank",
            "flag",
            flag_text="ranked differently",
            help="Current and reveal accuracy rank it differently.",
        ),
    ]
    return Document(
        title=f"Memory audit: sample run {SCRIPT}",
        facts=Facts(
            [
                ("run", [Code("runs/sample-2024")]),
                ("pairs", f"{PAIRS} independent source pairs in {len(FAMILIES)} families"),
                ("conditions", ", ".join(CONDITIONS)),
                ("budgets", "600, 1200 B"),
                ("readers", ", ".join(READERS)),
                ("note from a plugin", HOSTILE),
            ]
        ),
        summary=[
            Alert(
                "warn",
                [
                    "Current accuracy ranks ",
                    Strong("frontier_alpha:budget=2400"),
                    " best; reveal accuracy ranks ",
                    Strong("frontier"),
                    " best",
                ],
                body="Choosing by current accuracy could pick the wrong condition.",
                items=[f"current prefers {a} over {b}" for a, b in itertools.pairwise(CONDITIONS)],
            ),
            Alert("ok", "Every memory was stored."),
            Bullets(
                [
                    ["Best joint J at 1200 B: ", Strong("frontier"), ", 31/40 pairs [0.62, 0.88]."],
                    [Flag("Some reads are NA: their scores are bounds.")],
                ]
            ),
        ],
        sections=[
            Section(
                "headline",
                "Headline table: what each condition keeps for the future",
                [
                    Paragraph(
                        "At identity (no transform). k/n counts independent source pairs.",
                        muted=True,
                    ),
                    Table(
                        "headline-table",
                        head_columns,
                        headline,
                        csv="headline.csv",
                        caption="One row per reader, condition and budget.",
                    ),
                    Chart(
                        "headline-chart",
                        "dots",
                        headline,
                        {
                            "label": "condition",
                            "series": [
                                ("current", "current accuracy"),
                                ("reveal", "reveal accuracy"),
                                ("joint_J", "joint J"),
                            ],
                            "facet": "facet",
                        },
                        caption="Share of source pairs passing, with 95 % Wilson intervals.",
                        title="Current, reveal and joint J per condition",
                    ),
                ],
            ),
            Section(
                "sure",
                "How sure: paired comparisons on the same pairs",
                [
                    Table(
                        "comparisons-table",
                        [
                            Column("a", "first", "label"),
                            Column("b", "second", "label"),
                            Column("budget", "budget (B)", "integer"),
                            Column("reader", "reader"),
                            Column("n_pairs", "pairs", "integer"),
                            Column("only_a", "only first", "integer"),
                            Column("only_b", "only second", "integer"),
                            Column(
                                "delta",
                                "delta [95 % boot]",
                                "signed",
                                interval=("delta_low", "delta_high"),
                                interval_label="boot",
                            ),
                            Column("p_value", "McNemar p", "pvalue"),
                            Column(
                                "p_holm",
                                "Holm p",
                                "pvalue",
                                help="Holm-corrected across the table.",
                            ),
                            Column("significant", "", "flag", flag_text="significant"),
                        ],
                        comparisons,
                        csv="comparisons.csv",
                    ),
                    Chart(
                        "forest-chart",
                        "forest",
                        comparisons,
                        {
                            "label": "comparison",
                            "value": "delta",
                            "low": "delta_low",
                            "high": "delta_high",
                            "filled": "significant",
                            "facet": "facet",
                            "axis": "difference in joint J (second minus first; 95 % bootstrap)",
                        },
                        title="Paired differences in joint J",
                    ),
                ],
            ),
            Section(
                "families",
                "Families",
                [
                    Chart(
                        "families-chart",
                        "heatmap",
                        _families(rng),
                        {"row": "family", "column": "condition", "value": "value", "text": "text"},
                        title="Joint J by family",
                    ),
                    Table(
                        "families-table",
                        [
                            Column("family", "family", "label"),
                            Column("condition", "condition", "label"),
                            Column("joint_J", "joint J", "count"),
                        ],
                        _families(random.Random(seed)),
                        csv="families.csv",
                        collapsed=True,
                    ),
                ],
            ),
            Section(
                "transforms",
                "Transform robustness",
                [
                    Chart(
                        "transforms-chart",
                        "bars",
                        _transforms(rng),
                        {"group": "condition", "series": "transform", "prefix": "reveal"},
                        title="Reveal accuracy under each transform",
                    )
                ],
            ),
            Section(
                "failures",
                "Why reads failed",
                [
                    Table(
                        "taxonomy-table",
                        [
                            Column("condition", "condition", "label"),
                            Column("reader", "reader"),
                            *proportion_columns(["joint_J"]),
                            *(Column(f"cause_{k}", name, "integer") for k, name in CAUSES),
                        ],
                        taxonomy,
                        csv="taxonomy.csv",
                    ),
                    Chart(
                        "taxonomy-chart",
                        "stacked",
                        taxonomy,
                        {
                            "label": "system",
                            "parts": [(f"cause_{k}", name) for k, name in CAUSES],
                            "axis": "failed reads at identity",
                        },
                        title="Why reads failed",
                    ),
                ],
            ),
            Section(
                "budget",
                "Budget curve",
                [
                    Chart(
                        "budget-chart",
                        "curve",
                        curve,
                        {
                            "x": "budget",
                            "prefix": "joint_J",
                            "series": "condition",
                            "facet": "reader",
                            "x_title": "memory budget (UTF-8 bytes, log scale)",
                        },
                        title="Joint J against the budget",
                    )
                ],
                markdown=False,
            ),
            Section(
                "cost",
                "Cost per stage",
                [
                    Table(
                        "cost-table",
                        [
                            Column("stage", "stage"),
                            Column("requests", "requests", "integer"),
                            Column("seconds", "seconds", "number", digits=1),
                            Column("note", "note"),
                        ],
                        pd.DataFrame(
                            [
                                {
                                    "stage": "deterministic",
                                    "requests": 0,
                                    "seconds": 12.25,
                                    "note": "",
                                    "hidden": 1.5,
                                },
                                {
                                    "stage": "llm reads",
                                    "requests": 14_400,
                                    "seconds": 1234.5,
                                    "note": HOSTILE,
                                    "hidden": 2.0,
                                },
                                {
                                    "stage": "plugin",
                                    "requests": float("nan"),
                                    "seconds": float("nan"),
                                    "note": LONG_LINE,
                                    "hidden": 3.25,
                                },
                            ]
                        ),
                        csv="costs.csv",
                    ),
                    Paragraph(["Long note: ", LONG_LINE]),
                ],
            ),
            Section(
                "drilldown",
                "Per-pair drill-down",
                [
                    DrillDown(
                        _drilldown(rng),
                        notes=["Transformed instances are summarized above.", HOSTILE],
                    )
                ],
                markdown=False,
            ),
            Section(
                "method",
                "Method",
                [
                    Bullets(
                        [
                            "Unit: the independent source pair.",
                            ["Intervals: 95 % Wilson; ", Code("--seed"), " for the bootstrap."],
                        ],
                        muted=True,
                    )
                ],
            ),
        ],
        stem="report",
    )


def drilled_systems() -> list[str]:
    """The system labels the sample's drill-down uses."""
    return [system(c, b, r) for r in READERS for b in BUDGETS for c in CONDITIONS[:4]]
