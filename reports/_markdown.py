"""Markdown for a pull request: the headline, the warnings, the tests; no model output.

Every text from data goes through ``md``: characters Markdown or HTML would act
on are backslash-escaped or entity-encoded, control characters shown as escapes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, cast

import pandas as pd

from reports import _format
from reports._model import CompareInput, ReportInput

_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(value: object) -> str:
    """Inline-safe Markdown text (table cells included)."""
    text = _format.visible("" if value is None else value).replace("\n", " ")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", text)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]


def _prop(row: dict[str, Any], metric: str) -> str:
    text = _format.kn(row, metric)
    if text == "-":
        return "-"
    return f"{text} {_format.ci(row, metric)}".strip()


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    if frame is None or frame.empty:
        return []
    return cast(list[dict[str, Any]], frame.to_dict("records"))


def render_report_markdown(data: ReportInput) -> str:
    meta = data.meta
    several = len(meta.get("readers") or []) > 1
    lines = [
        f"## {md(data.title)}",
        "",
        f"{meta.get('n_source_pairs')} independent source pairs, "
        f"{_format.number(meta.get('n_reads'))} reads; conditions: "
        f"{md(', '.join(map(str, meta.get('conditions') or [])))}; budgets: "
        f"{md(', '.join(map(str, meta.get('budgets') or [])))} B; transforms: "
        f"{md(', '.join(map(str, meta.get('transforms') or [])))}; readers: "
        f"{md(', '.join(map(str, meta.get('readers') or [])))}"
        + ("" if meta.get("has_llm") else " (no LLM reader in this run)"),
        "",
        "k/n counts source pairs (a pair passes when both variants pass); intervals are 95 % "
        "Wilson; `..` marks NA bounds \\[NA as fail, NA as pass\\].",
        "",
    ]
    for warning in data.ranking:
        where = f"{warning['budget']} B" + (f", reader {md(warning['reader'])}" if several else "")
        lines.append(
            f"> **Warning ({where}):** current accuracy ranks "
            f"{md(', '.join(warning['best_by_current']))} best, reveal accuracy ranks "
            f"{md(', '.join(warning['best_by_reveal']))} best"
            + (
                f"; choosing by current accuracy could pick {md(', '.join(warning['misleading']))}."
                if warning["misleading"]
                else "."
            )
        )
        lines.append("")
    header = [
        "condition",
        "budget",
        *(["reader"] if several else []),
        "current",
        "reveal",
        "override",
        "joint J",
        "adequacy",
        "collisions",
        "mean bytes",
        "rank now/reveal",
    ]
    rows = []
    for row in _records(data.headline):
        rows.append(
            [
                f"**{md(row['condition'])}**",
                str(row["budget"]),
                *([md(row["reader"])] if several else []),
                _prop(row, "current"),
                _prop(row, "reveal"),
                _prop(row, "override"),
                _prop(row, "joint_J"),
                _prop(row, "adequacy"),
                _prop(row, "collision"),
                _format.number(row.get("memory_bytes_mean"), 1),
                f"{row['rank_current']}/{row['rank_reveal']}"
                + (" ⚠" if row["rank_differs"] else ""),
            ]
        )
    lines += ["### Headline (identity)", "", *_table(header, rows)]
    comparisons = _records(data.comparisons)
    if comparisons:
        lines += ["### Paired comparisons (joint J, same pairs)", "", md(data.comparison_note), ""]
        lines += _comparison_lines(comparisons, several)
    transforms = [r for r in _records(data.transforms) if r["transform"] != "identity"]
    if transforms:
        lines += ["### Transform robustness (reveal, pairs passing every instance)", ""]
        header = [
            "condition",
            "budget",
            *(["reader"] if several else []),
            "transform",
            "reveal",
            "gap",
            "late-ref adequacy",
            "gap",
            "equivariance violations",
        ]
        rows = [
            [
                md(r["condition"]),
                str(r["budget"]),
                *([md(r["reader"])] if several else []),
                md(r["transform"]),
                _prop(r, "reveal"),
                _format.signed(r["gap_reveal"]),
                _prop(r, "late_reference_adequacy"),
                _format.signed(r["gap_late_reference_adequacy"]),
                (
                    "{}/{} pairs".format(
                        r["equivariance_violation_pairs_k"], r["equivariance_violation_pairs_n"]
                    )
                    if r["equivariance_violation_pairs_n"]
                    else "-"
                ),
            ]
            for r in transforms
        ]
        lines += _table(header, rows)
    taxonomy = _records(data.taxonomy)
    if taxonomy:
        causes = [k for k in data.attribution_labels if any(r[f"cause_{k}"] for r in taxonomy)]
        lines += ["### Why reads failed (reads at identity)", ""]
        if not meta.get("has_llm"):
            lines += ["No LLM reader in this run: strict and lenient scores are equal.", ""]
        header = [
            "condition",
            "budget",
            *(["reader"] if several else []),
            "J strict",
            "J lenient",
            *(md(data.attribution_labels[c]) for c in causes),
        ]
        rows = [
            [
                md(r["condition"]),
                str(r["budget"]),
                *([md(r["reader"])] if several else []),
                _prop(r, "joint_J"),
                _prop(r, "joint_J_lenient"),
                *(str(r[f"cause_{c}"]) for c in causes),
            ]
            for r in taxonomy
        ]
        lines += _table(header, rows)
    notes = [*data.cost_notes, *data.drilldown_notes, *(meta.get("notes") or [])]
    if notes:
        lines += ["### Notes", "", *(f"- {md(n)}" for n in notes), ""]
    lines += ["The full report (charts, per-pair drill-down) is report.html next to this file.", ""]
    return "\n".join(lines)


def _comparison_lines(comparisons: Sequence[dict[str, Any]], several: bool) -> list[str]:
    header = [
        "first",
        "second",
        "budget",
        *(["reader"] if several else []),
        "pairs",
        "only first",
        "only second",
        "delta [95 %]",
        "McNemar p",
        "Holm p",
    ]
    rows = [
        [
            md(r["a"]),
            md(r["b"]),
            str(r["budget"]),
            *([md(r["reader"])] if several else []),
            str(r["n_pairs"]),
            str(r["only_a"]),
            str(r["only_b"]),
            f"{_format.signed(r['delta'])} {_format.interval(r['delta_low'], r['delta_high'])}",
            _format.pvalue(r["p_value"]),
            ("**" + _format.pvalue(r["p_holm"]) + "**")
            if r.get("significant")
            else _format.pvalue(r["p_holm"]),
        ]
        for r in comparisons
    ]
    return _table(header, rows)


def render_compare_markdown(data: CompareInput) -> str:
    lines = [f"## {md(data.title)}", ""]
    lines += _table(
        ["run", "conditions", "budgets", "readers", "source pairs"],
        [
            [
                md(r["label"]),
                md(", ".join(r.get("conditions") or [])),
                md(", ".join(map(str, r.get("budgets") or []))),
                md(", ".join(r["readers"])),
                str(r["n_source_pairs"]),
            ]
            for r in data.runs
        ],
    )
    lines += [f"- {md(n)}" for n in data.notes] + [""]
    lines += ["### Joint J on the shared pairs", ""]
    lines += _table(
        ["run", "condition", "budget", "reader", "joint J"],
        [
            [
                md(r["run"]),
                md(r["condition"]),
                str(r["budget"]),
                md(r["reader"]),
                (f"{r['k']}/{r['n']} {_format.interval(r['low'], r['high'])}" if r["n"] else "-"),
            ]
            for r in _records(data.systems)
        ],
    )
    comparisons = _records(data.comparisons)
    lines += ["### Paired differences", "", md(data.method), ""]
    lines += _comparison_lines(comparisons, False) if comparisons else ["Nothing to compare.", ""]
    return "\n".join(lines)
