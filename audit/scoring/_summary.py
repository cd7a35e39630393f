"""``summary.json``: every score of a run, named with its unit.

Per cell (reader x condition x budget x transform x family, family ``all``
included): each metric's counts in source pairs, blocks and (one-branch metrics)
reads, as ``{"k", "k_high", "n"}`` (``k_high`` > ``k`` only with NA reads: the
bounds NA as fail / NA as pass); NA and over-budget reads; equivariance violations
in source pairs and reads; mean memory bytes; outcomes (reads); what the answers of
wrong reads are (``wrong answers (reads)``, ``rundir.WRONG_ANSWERS``).  Then the shortcut
gaps, where current accuracy would pick a different condition, the conditions the
floor check cannot tell from a probe (``probe_matches``, ``_probes``), the
equivariance checks that failed (``equivariance_alerts``) and each system's verdict
(``verdicts``, ``_verdicts``).  ``readers``: each LLM
reader's check on ``full`` (``_readers``); a reader that fails it has every score
marked ``not_a_verdict`` and ranks nothing; ``writers``: the LLM-written conditions
no valid reader can read, marked likewise.  The console, the
report and ``audit compare`` use the same numbers (``audit.scoring``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from audit.scoring._claims import equivariance_alerts
from audit.scoring._gaps import shortcut_gaps
from audit.scoring._metrics import UNITS
from audit.scoring._probes import floor_findings
from audit.scoring._readers import reader_checks, unreadable, writer_checks
from audit.scoring._selection import selection_warnings
from audit.scoring._table import CELL, WRONG_PREFIX, Scores, score_results
from audit.scoring._verdicts import verdicts
from histories import WRONG_ANSWERS

UNIT_NOTES = {
    "source pairs": "independent evidence: a source pair passes when every block of it passes",
    "blocks": "one (instance, repeat) of a pair: passes when all its reads pass",
    "reads": "one reader's answer on one memory",
}


def _kn(cell: dict[str, Any], prefix: str) -> dict[str, int]:
    return {
        "k": int(cell[f"{prefix}_k"]),
        "k_high": int(cell.get(f"{prefix}_k_high", cell[f"{prefix}_k"])),
        "n": int(cell[f"{prefix}_n"]),
    }


def cell_entry(scores: Scores, cell: dict[str, Any]) -> dict[str, Any]:
    """One cell of ``summary.json``."""
    entry: dict[str, Any] = {key: cell[key] for key in CELL}
    entry["n_source_pairs"] = int(cell["n_source_pairs"])
    for suffix, unit in UNITS.items():
        found = {
            metric.name: _kn(cell, f"{metric.name}_{suffix}")
            for metric in scores.metrics
            if f"{metric.name}_{suffix}_n" in cell
        }
        entry[unit] = found
    entry["reads"]["na"] = {"k": int(cell["na_reads"]), "n": int(cell["n_reads"])}
    entry["reads"]["over_budget"] = _kn(cell, "over_budget_reads")
    entry["equivariance_violations"] = {
        "source pairs": _kn(cell, "equivariance_violation_pairs"),
        "reads": _kn(cell, "equivariance_violation_reads"),
    }
    mean = cell["mean_memory_bytes"]
    entry["mean_memory_bytes"] = None if pd.isna(mean) else float(mean)
    outcomes = {
        name[len("outcome_") :]: int(value)
        for name, value in cell.items()
        if name.startswith("outcome_") and value
    }
    entry["outcomes (reads)"] = dict(sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0])))
    if f"{WRONG_PREFIX}no_answer" in cell:  # not in a run made before the column
        counts = ((name, int(cell[f"{WRONG_PREFIX}{name}"])) for name in WRONG_ANSWERS)
        entry["wrong answers (reads)"] = {name: k for name, k in counts if k}
    return entry


def summarize(
    df: pd.DataFrame, meta: dict[str, Any], conditions: list[str] | None = None
) -> dict[str, Any]:
    """``summary.json`` of a normalized results frame."""
    if df.empty:
        return {"run": meta, "units": UNIT_NOTES, "n_reads": 0, "n_source_pairs": 0,
                "scores": [], "shortcut_gaps": [], "selection": [], "probe_matches": [],
                "equivariance_alerts": [], "kinds": {}, "readers": [],
                "writers": [], "verdicts": []}  # fmt: skip
    scores = score_results(df, conditions or ())
    return summary_of(scores, meta, len(df), int(df["source_pair_id"].nunique()))


def summary_of(scores: Scores, meta: dict[str, Any], n_reads: int, n_pairs: int) -> dict[str, Any]:
    checks = reader_checks(scores)
    skip = unreadable(checks)
    marks = {c.reader: c.verdict for c in checks if c.verdict}
    unread = writer_checks(scores, checks)
    writers = {(w.condition, w.budget): w.verdict for w in unread}
    entries = []
    for cell in scores.records():
        entry = cell_entry(scores, cell)
        mark = marks.get(cell["reader"]) or writers.get((cell["condition"], cell["budget"]))
        if mark:
            entry["not_a_verdict"] = mark
        entries.append(entry)
    findings = floor_findings(scores, skip)
    return {
        "run": meta,
        "units": UNIT_NOTES,
        "n_reads": n_reads,
        "n_source_pairs": n_pairs,
        "readers": [c.model_dump(mode="json") for c in checks],
        "writers": [w.model_dump(mode="json") for w in unread],
        "scores": entries,
        "shortcut_gaps": shortcut_gaps(scores),
        "selection": [w.model_dump(mode="json") for w in selection_warnings(scores, skip)],
        "probe_matches": [f.model_dump(mode="json") for f in findings],
        "verdicts": [v.model_dump(mode="json") for v in verdicts(scores, findings, checks, unread)],
        "equivariance_alerts": [f.model_dump(mode="json") for f in equivariance_alerts(scores)],
        "kinds": scores.kinds,
    }
