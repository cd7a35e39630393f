"""``summary.json``: every score of a run, named with its unit (``Summary``).

Per cell (reader x condition x budget x transform x family, family ``all``
included; ``SummaryCell``): each metric's counts in source pairs, blocks and
(one-branch metrics) reads, as ``{"k", "k_high", "n"}`` (``Count``: ``k_high`` > ``k``
only with NA reads: the bounds NA as fail / NA as pass); NA and over-budget reads;
equivariance violations in source pairs and reads; mean memory bytes; outcomes
(reads); what the answers of wrong reads are (``wrong answers (reads)``,
``rundir.WRONG_ANSWERS``).  Then the shortcut gaps, where current accuracy would pick
a different condition, the conditions the floor check cannot tell from a probe
(``probe_matches``, ``_probes``), the equivariance checks that failed
(``equivariance_alerts``) and each system's verdict (``verdicts``, ``_verdicts``).
``readers``: each LLM reader's check on ``full`` (``_readers``); a reader that fails
it has every score marked ``not_a_verdict`` and ranks nothing; ``writers``: the
LLM-written conditions no valid reader can read, marked likewise.  The console, the
report and ``audit compare`` use the same numbers (``audit.scoring``).  The file is
``Summary.dump()`` indented by two; ``load_summary`` reads one back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from audit.errors import RunDataError
from audit.scoring._claims import (
    BudgetFinding,
    EquivarianceFinding,
    budget_alerts,
    equivariance_alerts,
)
from audit.scoring._gaps import shortcut_gaps
from audit.scoring._metrics import ALL, UNITS
from audit.scoring._probes import FloorFinding, floor_findings
from audit.scoring._readers import (
    ReaderCheck,
    WriterCheck,
    reader_checks,
    unreadable,
    writer_checks,
)
from audit.scoring._selection import SelectionWarning, selection_warnings
from audit.scoring._table import CELL, WRONG_PREFIX, Scores, score_results
from audit.scoring._verdicts import Verdict, verdicts
from histories import WRONG_ANSWERS

UNIT_NOTES = {
    "source pairs": "independent evidence: a source pair passes when every block of it passes",
    "blocks": "one (instance, repeat) of a pair: passes when all its reads pass",
    "reads": "one reader's answer on one memory",
}


def _absent(value: object) -> bool:
    """An optional field that is None is left out of the file."""
    return value is None


class _Written(BaseModel):
    """A part of summary.json, written under its aliases (a file read back is written
    back byte for byte)."""

    model_config = ConfigDict(frozen=True, validate_by_name=True, serialize_by_alias=True)


class Count(_Written):
    """k of n (``k_high``: k with NA reads counted as passes; absent for NA reads)."""

    k: int
    k_high: int | None = Field(None, exclude_if=_absent)
    n: int

    def text(self) -> str:
        """``k/n``, ``k..k_high/n`` when NA reads leave a range, ``-`` when n is 0."""
        if self.n == 0:
            return "-"
        if self.k_high is not None and self.k_high != self.k:
            return f"{self.k}..{self.k_high}/{self.n}"
        return f"{self.k}/{self.n}"


class SummaryCell(_Written):
    """One cell of ``summary.json``'s ``scores``."""

    reader: str
    condition: str
    budget: int
    transform: str
    family: str
    n_source_pairs: int
    source_pairs: dict[str, Count] = Field(alias="source pairs")
    blocks: dict[str, Count]
    reads: dict[str, Count]
    """One-branch metrics, then ``na`` and ``over_budget``."""
    equivariance_violations: dict[str, Count]
    """In ``source pairs`` and ``reads``."""
    mean_memory_bytes: float | None
    outcomes: dict[str, int] = Field(alias="outcomes (reads)")
    wrong_answers: dict[str, int] | None = Field(
        None, alias="wrong answers (reads)", exclude_if=_absent
    )
    """None in a run made before the column."""
    not_a_verdict: str | None = Field(None, exclude_if=_absent)

    def text(self, metric: str, unit: str = "source pairs") -> str:
        """A metric's count in a unit as text (``-`` where the cell has none)."""
        found = {"source pairs": self.source_pairs, "blocks": self.blocks}.get(unit, self.reads)
        return found[metric].text() if metric in found else "-"

    @classmethod
    def of(cls, scores: Scores, cell: dict[str, Any], mark: str | None = None) -> SummaryCell:
        """A scored cell (``Scores.records``), ``mark``: why it is no verdict."""

        def kn(prefix: str) -> Count:
            k = int(cell[f"{prefix}_k"])
            return Count(k=k, k_high=cell.get(f"{prefix}_k_high", k), n=cell[f"{prefix}_n"])

        units = {
            unit: {
                metric.name: kn(f"{metric.name}_{suffix}")
                for metric in scores.metrics
                if f"{metric.name}_{suffix}_n" in cell
            }
            for suffix, unit in UNITS.items()
        }
        units["reads"]["na"] = Count(k=cell["na_reads"], n=cell["n_reads"])
        units["reads"]["over_budget"] = kn("over_budget_reads")
        outcomes = [
            (name[len("outcome_") :], int(value))
            for name, value in cell.items()
            if name.startswith("outcome_") and value
        ]
        wrong = None
        if f"{WRONG_PREFIX}no_answer" in cell:  # not in a run made before the column
            counts = ((name, int(cell[f"{WRONG_PREFIX}{name}"])) for name in WRONG_ANSWERS)
            wrong = {name: k for name, k in counts if k}
        mean = cell["mean_memory_bytes"]
        return cls(
            **{key: cell[key] for key in CELL},
            n_source_pairs=cell["n_source_pairs"],
            source_pairs=units["source pairs"], blocks=units["blocks"], reads=units["reads"],
            equivariance_violations={"source pairs": kn("equivariance_violation_pairs"),
                                     "reads": kn("equivariance_violation_reads")},
            mean_memory_bytes=None if pd.isna(mean) else float(mean),
            outcomes=dict(sorted(outcomes, key=lambda kv: (-kv[1], kv[0]))),
            wrong_answers=wrong, not_a_verdict=mark,
        )  # fmt: skip


class Summary(_Written):
    """``summary.json``: what ``summarize`` computes and the console prints."""

    run: dict[str, Any]
    """``{"config": the run plan as config.json holds it}``."""
    units: dict[str, str]
    n_reads: int
    n_source_pairs: int
    readers: list[ReaderCheck]
    writers: list[WriterCheck]
    scores: list[SummaryCell]
    shortcut_gaps: list[dict[str, Any]]
    """``_gaps.shortcut_gaps``."""
    selection: list[SelectionWarning]
    probe_matches: list[FloorFinding]
    verdicts: list[Verdict]
    equivariance_alerts: list[EquivarianceFinding]
    kinds: dict[str, str]
    budget_alerts: list[BudgetFinding] | None = Field(None, exclude_if=_absent)
    """None when no memory went over its budget (and in runs made before the field)."""
    compressor_errors: list[dict[str, object]] | None = Field(None, exclude_if=_absent)
    """Added by the run once its errors are merged (``rundir.summary_errors``: each a
    ``rundir.CompressorError``, a room above this one)."""

    @classmethod
    def of(cls, scores: Scores, meta: dict[str, Any], n_reads: int, n_pairs: int) -> Summary:
        """The summary of a scored run."""
        checks = reader_checks(scores)
        skip = unreadable(checks)
        unread = writer_checks(scores, checks)
        marks = {c.reader: c.verdict for c in checks if c.verdict}
        writers = {(w.condition, w.budget): w.verdict for w in unread}
        cells = [
            SummaryCell.of(scores, c, marks.get(c["reader"]) or writers.get(
                (c["condition"], c["budget"])))
            for c in scores.records()
        ]  # fmt: skip
        findings = floor_findings(scores, skip)
        # a frame made by hand has NaN kinds: strict (``kind``), left out of the JSON
        kinds = {name: kind for name, kind in scores.kinds.items() if isinstance(kind, str)}
        return cls(
            run=meta, units=UNIT_NOTES, n_reads=n_reads, n_source_pairs=n_pairs,
            readers=checks, writers=unread, scores=cells, shortcut_gaps=shortcut_gaps(scores),
            selection=selection_warnings(scores, skip), probe_matches=findings,
            verdicts=verdicts(scores, findings, checks, unread),
            equivariance_alerts=equivariance_alerts(scores), kinds=kinds,
            budget_alerts=budget_alerts(scores) or None,
        )  # fmt: skip

    def dump(self) -> dict[str, Any]:
        """The JSON object summary.json holds."""
        return self.model_dump(mode="json")

    def kind(self, condition: str) -> str:
        """A condition's kind: ``strict``, ``archive`` or ``probe``."""
        return self.kinds.get(condition, "strict")

    def overall(self, exact: bool) -> list[SummaryCell]:
        """The cells over all families, of the exact reader or of the LLM readers."""
        return [c for c in self.scores if c.family == ALL and (c.reader == "exact") == exact]

    @property
    def config(self) -> dict[str, Any]:
        """The run's plan (empty when the summary was made without one)."""
        return dict(self.run.get("config") or {})


def load_summary(path: Path) -> Summary:
    """A run's summary.json; a file that does not parse or fit names the field."""
    try:
        return Summary.model_validate_json(path.read_bytes())
    except OSError as e:
        raise RunDataError(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the whole file"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RunDataError(f"{path}: {where}: {first['msg']}{more}") from None


def summarize(
    df: pd.DataFrame, meta: dict[str, Any], conditions: list[str] | None = None
) -> dict[str, Any]:
    """``summary.json``'s object for a normalized results frame (``Summary.dump``)."""
    if df.empty:
        lists = ("readers", "writers", "scores", "shortcut_gaps", "selection", "probe_matches",
                 "verdicts", "equivariance_alerts")  # fmt: skip
        empty = {"run": meta, "units": UNIT_NOTES, "n_reads": 0, "n_source_pairs": 0, "kinds": {}}
        return Summary.model_validate(empty | {key: [] for key in lists}).dump()
    scores = score_results(df, conditions or ())
    return summary_of(scores, meta, len(df), int(df["source_pair_id"].nunique()))


def summary_of(scores: Scores, meta: dict[str, Any], n_reads: int, n_pairs: int) -> dict[str, Any]:
    """``summary.json``'s object for a scored run."""
    return Summary.of(scores, meta, n_reads, n_pairs).dump()
