"""Section "drilldown": every failing memory of a source pair, beside its history.

Per source pair (identity instances only): both variants with the distinguishing
records marked, both futures, and per failing condition both memories and every
read with its cause.  Pairs with the most failing conditions come first.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pandas as pd

from audit.reportdata._causes import ATTRIBUTIONS
from audit.reportdata._context import ReportContext
from audit.rundir import MemoryStore, RunData, SourcePairs
from audit.scoring import IDENTITY
from histories import distinguishing_ids
from reports import DrillDown, Section, with_code

SYSTEM = ["reader", "condition", "budget"]
BRANCH_ORDER = {"current": 0, "reveal": 1, "override": 2}
_LINE_ID = re.compile(r"[A-Za-z0-9_.:\-]+")


def _lines(text: str, marks: frozenset[str]) -> list[dict[str, Any]]:
    """A memory's lines; ``mark``: the line names a distinguishing record (whole label).
    One search for any of them first: most lines name none."""
    named = re.compile("|".join(map(re.escape, sorted(marks)))).search if marks else None
    return [
        {"text": line, "mark": bool(named and named(line) and set(_LINE_ID.findall(line)) & marks)}
        for line in text.split("\n")
    ]


def _answer_text(value: Any) -> str | None:
    return None if _is_nan(value) else str(value)


def drilldown(
    run: RunData,
    source: SourcePairs,
    causes: pd.Series,
    memories: MemoryStore,
    systems: Sequence[tuple[str, str, int]],
    max_pairs: int,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Per source pair (identity instances only): variants, memories, reads, attribution."""
    notes = [
        "transformed instances are summarized in the tables above, not drilled into; "
        "the drill-down shows identity instances"
    ]
    if source.note:
        return [], [source.note, *notes]
    df = run.results
    identity = df[df["transform"] == IDENTITY]
    order = {s: i for i, s in enumerate(systems)}
    failing = (
        identity.assign(fail=(identity["correct"] != 1).astype(int))
        .groupby(["source_pair_id", *SYSTEM], observed=True)["fail"]
        .max()
        .groupby(level=0, observed=True)
        .sum()
    )
    ranked = sorted(
        (pid for pid in failing.index.astype(str) if pid in source.pairs),
        key=lambda pid: (-int(failing[pid]), source.pairs[pid].family, pid),
    )
    missing = len(set(failing.index.astype(str)) - source.pairs.keys())
    if missing:
        notes.append(f"{missing} source pair(s) of the results are not in the rebuilt pairs")
    if max_pairs and len(ranked) > max_pairs:
        notes.append(
            f"drilled into the first {max_pairs} of {len(ranked)} source pairs (failures "
            "first); `audit report --max-pairs 0` drills into all"
        )
        ranked = ranked[:max_pairs]
    wanted = identity[identity["source_pair_id"].astype(str).isin(set(ranked))]
    by_pair = _rows_by_pair(wanted)
    texts = memories.many(  # only the memories of the cells shown (failing or NA)
        sha
        for systems in by_pair.values()
        for rows in systems.values()
        if _drilled(rows)
        for _, row in rows
        if isinstance(sha := row.get("memory_sha256"), str)
    )
    cause_of = {int(cast(Any, k)): str(v) for k, v in causes.items()} if not causes.empty else {}
    out = []
    for pid in ranked:
        pair = source.pairs[pid]
        marks = frozenset(distinguishing_ids(pair))
        entry: dict[str, Any] = {
            "pair_id": pid,
            "family": pair.family,
            "query": list(pair.query),
            "distinguishing": sorted(marks),
            "variants": {
                v: [{"text": r.canonical_json(), "mark": r.id in marks} for r in pair.prefix(v)]
                for v in ("A", "B")
            },
            "futures": {
                f: [{"text": r.canonical_json(), "mark": False} for r in pair.future(f)]
                for f in ("reveal", "override")
            },
            "gold": {
                v: {
                    b: json.dumps(getattr(pair.gold.of(v), b)) if pair.gold else None
                    for b in ("current", "reveal", "override")
                }
                for v in ("A", "B")
            },
            "cells": [],
            "passing": [],
        }
        cells_out: list[dict[str, Any]] = []
        lines: dict[str, list[dict[str, Any]]] = {}  # a memory's lines, by sha256
        for system, rows in by_pair.get(pid, {}).items():
            failed = any(r["correct"] == 0 for _, r in rows)
            na = any(_is_nan(r["correct"]) for _, r in rows)
            label = _label(system)
            if not failed and not na:
                entry["passing"].append(label)
                continue
            cells_out.append(_cell(system, label, failed, na, rows, texts, marks, cause_of, lines))
        cells_out.sort(key=lambda c: (not c["failed"], order.get(c["system"], 1 << 30)))
        entry["cells"] = cells_out
        out.append(entry)
    return out, notes


_DRILL_COLUMNS = (
    "source_pair_id",
    "reader",
    "condition",
    "budget",
    "variant",
    "branch",
    "repeat",
    "outcome",
    "correct",
    "memory_sha256",
    "memory_bytes",
    "answer",
    "gold",
    "error",
    "finish_reason",
    "raw_answer",
)


def _label(system: tuple[str, str, int]) -> str:
    reader, condition, budget = system
    return f"{condition} @ {budget} B" + ("" if reader == "exact" else f" ({reader})")


def _is_nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _drilled(rows: Sequence[tuple[int, dict[str, Any]]]) -> bool:
    """Whether a system's reads of a pair are shown: one failed or NA."""
    return any(r["correct"] == 0 or _is_nan(r["correct"]) for _, r in rows)


def _rows_by_pair(
    frame: pd.DataFrame,
) -> dict[str, dict[tuple[str, str, int], list[tuple[int, dict[str, Any]]]]]:
    """Reads as plain dicts: pair -> system -> [(row index, row)], in read order."""
    columns = [c for c in _DRILL_COLUMNS if c in frame]
    plain = {
        c: frame[c].astype(object).tolist()
        if isinstance(frame[c].dtype, pd.CategoricalDtype)
        else frame[c].tolist()
        for c in columns
    }
    out: dict[str, dict[tuple[str, str, int], list[tuple[int, dict[str, Any]]]]] = {}
    for i, index in enumerate(frame.index.tolist()):
        row = {c: plain[c][i] for c in columns}
        system = (str(row["reader"]), str(row["condition"]), int(row["budget"]))
        out.setdefault(str(row["source_pair_id"]), {}).setdefault(system, []).append(
            (int(index), row)
        )
    for systems in out.values():
        for rows in systems.values():
            rows.sort(
                key=lambda item: (
                    item[1]["repeat"],
                    str(item[1]["variant"]),
                    BRANCH_ORDER.get(str(item[1]["branch"]), 9),
                )
            )
    return out


def _cell(
    system: tuple[str, str, int],
    label: str,
    failed: bool,
    na: bool,
    rows: Sequence[tuple[int, dict[str, Any]]],
    texts: Mapping[str, str],
    marks: frozenset[str],
    cause_of: Mapping[int, str],
    lines: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    memo: dict[str, dict[str, Any]] = {"A": {}, "B": {}}
    reads = []
    for index, row in rows:
        variant, branch = str(row["variant"]), str(row["branch"])
        sha = row.get("memory_sha256")
        text = texts.get(str(sha)) if sha else None
        if variant in memo and branch not in memo[variant]:
            size = row.get("memory_bytes")
            if text is not None and str(sha) not in lines:
                lines[str(sha)] = _lines(text, marks)
            memo[variant][branch] = {
                "lines": None if text is None else lines[str(sha)],
                "bytes": None if size is None or _is_nan(size) else int(size),
                "sha": sha,
            }
        correct = row["correct"]
        reads.append(
            {
                "variant": variant,
                "branch": branch,
                "repeat": int(row["repeat"]),
                "outcome": str(row["outcome"]),
                "correct": None if _is_nan(correct) else int(correct),
                "answer": _answer_text(row.get("answer")),
                "gold": _answer_text(row.get("gold")),
                "error": _answer_text(row.get("error")),
                "attribution": ATTRIBUTIONS.get(cause_of.get(index, "")),
                "finish_reason": _answer_text(row.get("finish_reason")),
                "raw_answer": _answer_text(row.get("raw_answer")),
            }
        )
    a_now = memo["A"].get("current", {}).get("sha")
    b_now = memo["B"].get("current", {}).get("sha")
    return {
        "system": system,
        "label": label,
        "failed": failed,
        "na": na,
        "identical": bool(a_now and a_now == b_now),
        "memories": memo,
        "reads": reads,
    }


def build(ctx: ReportContext) -> Section:
    pairs, notes = drilldown(
        ctx.run, ctx.source, ctx.causes, ctx.memories, ctx.scores.systems, ctx.options.max_pairs
    )
    notes.append(
        "each failed read's cause follows its outcome: 'evidence dropped' only where the "
        "memory is a record log that E_q answers wrong; a memory that is no record log "
        "(prose) is 'undetermined'; right values in a wrong form are a 'format failure'; "
        "an LLM writer cut off or empty is the writer's; NA is 'infrastructure'"
    )
    if ctx.source.note is None:
        notes.append(
            "'written wrong' is checked against the pair's history at identity (a well-formed "
            "record line of the memory that is no record of the history)"
        )
    else:
        notes.append(
            "without the pairs, 'written wrong' cannot be told from 'evidence dropped'; both "
            "are counted as dropped"
        )
    notes.append(
        "pairs with the most failing conditions first; within a pair, failing conditions first"
    )
    systems = [_label(system) for system in ctx.scores.systems]
    return Section(
        "drilldown",
        "Per-pair drill-down",
        [DrillDown(pairs, [with_code(note) for note in notes], systems)],
        markdown=False,
    )
