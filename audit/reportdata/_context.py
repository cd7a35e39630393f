"""What every report section is built from: the loaded run, its scores, the options.

Sections never compute a score themselves: they take it from ``scores`` (computed
once by ``audit.scoring``) and turn it into tables, charts and sentences.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from audit.rundir import MemoryStore, RunData, SourcePairs, load_source_pairs
from audit.scoring import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    IDENTITY,
    FloorFinding,
    PairedTest,
    ReaderCheck,
    Scores,
    SelectionWarning,
    Verdict,
    WriterCheck,
    floor_findings,
    reader_checks,
    selection_warnings,
    shortcut_gaps,
    unreadable,
    verdicts,
    wilson_arrays,
    writer_checks,
)
from reports import Column

System = tuple[str, str, int]
"""(reader, condition, budget)."""
CONDITION = Column("condition", "condition", "label")
BUDGET = Column("budget", "budget (B)", "integer")
READER = Column("reader", "reader", "label")


@dataclass
class Options:
    seed: int = DEFAULT_SEED
    resamples: int = DEFAULT_RESAMPLES
    reference: str | None = None
    """Condition every other condition is compared with (default: best joint J per budget)."""
    pairwise: bool = False
    """Compare every two conditions (instead of each against the reference)."""
    max_pairs: int = 200
    """Source pairs drilled into (failures first); 0 = all."""
    only: tuple[str, ...] = ()
    """``audit compare --only``: the conditions (labels or specs) whose comparisons are
    wanted; empty: every one."""
    score: str = "joint_J"
    """``audit compare --score``: the score compared (one of ``scoring.COMPARED_SCORES``)."""
    test: PairedTest = "exact"
    """``audit compare --test``: the McNemar test of every comparison, exact or mid-p."""
    gate: bool = False
    """``audit compare --fail-on-regression``: the gate's answer heads the document."""
    margin: float | None = None
    """``--margin``: the gate fails a system only where the baseline may be ahead of it
    by more than this (non-inferiority) instead of where it is significantly behind."""


@dataclass
class ReportContext:
    """One run, scored, with what its sections share."""

    run: RunData
    scores: Scores
    options: Options
    memories: MemoryStore
    notes: list[str] = field(default_factory=list)

    @property
    def preregistered_reference(self) -> str | None:
        """The reference fixed in the run's plan before it ran (``audit run --reference``)."""
        plan = self.run.plan
        return plan.reference if plan is not None else None

    @property
    def reference(self) -> str | None:
        """The condition every other is compared with: ``--reference`` of the report,
        else the one fixed in the run's plan before it ran, else None (the best)."""
        chosen = self.options.reference
        return chosen if chosen is not None else self.preregistered_reference

    @property
    def reference_status(self) -> str:
        """How the comparisons' reference was chosen: ``pairwise`` (every two),
        ``preregistered`` (fixed before the run), ``post hoc`` (named after the run, by
        ``audit report --reference``) or ``from the data`` (the best strict condition:
        post hoc too, chosen by looking at the results)."""
        if self.options.pairwise:
            return "pairwise"
        pre = self.preregistered_reference
        if pre is not None and self.options.reference in (None, pre):
            return "preregistered"
        return "post hoc" if self.reference is not None else "from the data"

    def reference_sentence(self) -> str:
        """One sentence naming the reference, how it was chosen, and what that means
        (commands in backquotes: ``reports.with_code`` sets them as code)."""
        status, pre = self.reference_status, self.preregistered_reference
        if status == "pairwise":
            return "Comparisons: every two conditions (exploratory: no reference)."
        if status == "preregistered":
            return (
                f"Comparisons: each condition against {self.reference}, preregistered "
                "(fixed in the run's plan before it ran)."
            )
        if status == "post hoc":
            text = (
                f"Comparisons: each condition against {self.reference}, named after the run: "
                "post hoc."
            )
            if pre is not None:
                text += (
                    f" The run preregistered {pre}; these are not the preregistered "
                    "comparisons (`audit report` without `--reference` gives those)."
                )
            return text
        return (
            "Comparisons: each condition against the best strict condition by joint J, "
            "chosen from the data: post hoc (Holm corrects for the number of comparisons, "
            "not for picking the best as the reference, so differences from it lean away "
            "from zero); preregister a reference with `audit run --reference`."
        )

    def kind(self, condition: str) -> str:
        return self.scores.kinds.get(condition, "strict")

    @cached_property
    def reader_checks(self) -> list[ReaderCheck]:
        """Each LLM reader's check on ``full`` (``scoring._readers``)."""
        return reader_checks(self.scores)

    @cached_property
    def unreadable(self) -> list[str]:
        """The readers whose scores are no verdict: they rank nothing."""
        return unreadable(self.reader_checks)

    @cached_property
    def writer_checks(self) -> list[WriterCheck]:
        return writer_checks(self.scores, self.reader_checks)

    @cached_property
    def floor_findings(self) -> list[FloorFinding]:
        """The floor check (``scoring._probes``), run once for the floor box and the
        verdicts."""
        return floor_findings(self.scores, self.unreadable)

    @cached_property
    def shortcut_gaps(self) -> list[dict[str, Any]]:
        """Every system's gaps under each transform (``scoring.shortcut_gaps``, all
        families), computed once for the summary's findings and the transforms section."""
        return shortcut_gaps(self.scores, resamples=self.options.resamples, seed=self.options.seed)

    @cached_property
    def selection_warnings(self) -> list[SelectionWarning]:
        """Where current accuracy would pick another condition than reveal accuracy
        (``scoring.selection_warnings``), for the headline's ranks, the summary and
        ranking.csv; read, never changed."""
        return selection_warnings(self.scores, self.unreadable)

    @cached_property
    def verdicts(self) -> list[Verdict]:
        """Each system's verdict (``scoring._verdicts``): the report's first table."""
        return verdicts(self.scores, self.floor_findings, self.reader_checks, self.writer_checks)

    def verdict(self, system: System) -> str | None:
        """The "not a verdict" mark of a system's scores, or None: its reader cannot read
        the histories, or no valid reader can read its writer's memories."""
        reader, condition, budget = system
        for check in self.reader_checks:
            if check.reader == reader and check.verdict:
                return check.verdict
        for writer in self.writer_checks:
            if (writer.condition, writer.budget) == (condition, budget):
                return writer.verdict
        return None

    @property
    def several_readers(self) -> bool:
        return len({s[0] for s in self.scores.systems}) > 1

    def reader_column(self) -> list[Column]:
        """The reader column, where the run has several readers."""
        return [READER] if self.several_readers else []

    def system_columns(self) -> list[Column]:
        return [CONDITION, BUDGET, *self.reader_column()]

    def where(self, reader: str, budget: int) -> str:
        """``1200 B``, with ``, reader X`` where the run has several readers."""
        return f"{budget} B" + (f", reader {reader}" if self.several_readers else "")

    def series(self, reader: str, condition: str) -> str:
        """A condition as a chart series, with its reader where there are several."""
        return condition + (f" ({reader})" if self.several_readers else "")

    @cached_property
    def source(self) -> SourcePairs:
        """The run's source pairs, rebuilt (for the drill-down and failure causes)."""
        return load_source_pairs(self.run)

    @cached_property
    def causes(self) -> pd.Series:
        """Why each failed read at identity failed (``_causes``)."""
        from audit.reportdata._causes import attribute

        return attribute(self.run.results, self.source, self.memories)

    def system_keys(self, system: System) -> dict[str, Any]:
        reader, condition, budget = system
        return {"reader": reader, "condition": condition, "budget": budget}

    def label(self, system: System) -> str:
        """A system as one label: condition, budget and (with several readers) reader;
        an archive is marked a ceiling, a probe the floor."""
        reader, condition, budget = system
        marks = {"archive": " [ceiling]", "probe": " [probe]"}
        text = f"{condition} @ {budget} B" + marks.get(self.kind(condition), "")
        return f"{text} ({reader})" if self.several_readers else text

    def identity_cell(self, system: System, family: str = "all") -> dict[str, Any] | None:
        return self.scores.cell(system, IDENTITY, family)


def by_system(frame: pd.DataFrame, *extra: str) -> dict[tuple[Any, ...], pd.DataFrame]:
    """The rows of ``frame`` per (reader, condition, budget, *extra), in one pass: not a
    mask per system."""
    groups = frame.groupby(["reader", "condition", "budget", *extra], observed=True, sort=False)
    return {(str(k[0]), str(k[1]), int(str(k[2])), *map(str, k[3:])): g for k, g in groups}


def proportion_columns(
    prefix: str, cell: Mapping[str, Any] | None, source: str | None = None
) -> dict[str, Any]:
    """``prefix_k``, ``_k_high``, ``_n``, ``_rate``, ``_low``, ``_high`` (Wilson, the
    envelope over NA bounds) of a cell's ``source`` counts (default ``{prefix}_pairs``:
    source pairs)."""
    source = source or f"{prefix}_pairs"
    values: tuple[Any, ...] = (0, 0, 0, np.nan, np.nan, np.nan)
    if cell is not None and cell.get(f"{source}_n"):
        k, k_high, n = (int(cell[f"{source}_{part}"]) for part in ("k", "k_high", "n"))
        low, high = wilson_arrays([k, k_high], [n, n])  # each bound's count: k low, k_high high
        values = (k, k_high, n, k / n, float(low[0]), float(high[1]))
    parts = ("k", "k_high", "n", "rate", "low", "high")
    return {f"{prefix}_{part}": value for part, value in zip(parts, values, strict=True)}


def pair_bounds(
    scores: Scores, metric: str, transform: str = IDENTITY
) -> dict[System, dict[str, tuple[int, int]]]:
    """Per system: each source pair's pass on ``metric``, NA as fail and NA as pass."""
    frame = scores.pairs.get(metric)
    out: dict[System, dict[str, tuple[int, int]]] = {}
    if frame is None or frame.empty:
        return out
    frame = frame[frame["transform"] == transform]
    columns = ["reader", "condition", "budget", "source_pair_id", "every_lo", "every_hi"]
    for reader, condition, budget, pair, low, high in zip(
        *(frame[c].tolist() for c in columns), strict=True
    ):
        out.setdefault((reader, condition, int(budget)), {})[pair] = (int(low), int(high))
    return out


def pair_values(
    scores: Scores, metric: str, transform: str = IDENTITY
) -> dict[System, dict[str, float]]:
    """Per system: each source pair's pass (1.0), fail (0.0) or undetermined (NaN, NA
    bounds disagree) on ``metric``: the unit of every paired comparison."""
    return {
        system: {pair: float(lo) if lo == hi else np.nan for pair, (lo, hi) in pairs.items()}
        for system, pairs in pair_bounds(scores, metric, transform).items()
    }
