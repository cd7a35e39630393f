"""Whether an LLM reader can read these histories at all: its check on ``full``.

``full`` keeps the whole history, so the exact reader answers every question on it: a
reader that fails there fails at reading, and its scores say nothing of the memories.
Every LLM reader reads ``full`` first; its block pass rate there against the exact
reader's (1 where the run has none) makes it ``reads`` (at least ``READ_THRESHOLD``,
NA as fail), ``cannot read`` (below it, NA as pass) or ``not checked`` (docs/method.md,
"Can the reader read?").  A reader that does not read has every score marked
``NOT_A_VERDICT`` and ranks nothing; ``ReaderCheck`` is the one value all readers of
the summary use.  An LLM-written condition whose memories no valid reader can read, or
that mostly repeat its prompt (``writer_echo`` in half its reads), is marked the same
way (``WriterCheck``).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import pandas as pd
from pydantic import BaseModel, computed_field

from audit.scoring._metrics import IDENTITY
from audit.scoring._table import Scores

EXACT = "exact"
READER_CONTROL = CONTROL = "full"
"""The memory every LLM reader reads first: the whole history."""
READ_THRESHOLD = 0.9
"""A reader's block pass rate on ``full``, as a share of the exact reader's, below
which its scores are no verdict (``docs/method.md``, "Can the reader read?")."""
BRANCH_METRICS = ("current", "reveal", "override")
NOT_A_VERDICT = "this reader cannot read these histories: not a verdict"
NOT_CHECKED = "this reader was not shown to read these histories: not a verdict"
UNREADABLE_WRITER = "no valid reader can read this writer's memories: not a verdict"
ECHOING_WRITER = "this writer's memories repeat its prompt: not a verdict"


class ReaderStatus(StrEnum):
    """What the check on ``full`` found."""

    READS = "reads"
    CANNOT_READ = "cannot read"
    NOT_CHECKED = "not checked"


class ReaderCheck(BaseModel):
    """One LLM reader on ``full``, against the exact reader on the same pairs."""

    reader: str
    k: int
    """Blocks of ``full`` passed, NA as fail."""
    k_high: int
    """NA as pass."""
    n: int
    exact_k: int
    exact_n: int
    """The exact reader's blocks of ``full`` at identity on the same source pairs (0/0:
    the run has none; the reference is then 1)."""
    source_pairs: int
    threshold: float = READ_THRESHOLD

    @property
    def reference(self) -> float:
        return self.exact_k / self.exact_n if self.exact_n else 1.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def share(self) -> float | None:
        """Its rate as a share of the exact reader's (NA as fail); None: not measured."""
        if not self.n or not self.reference:
            return None
        return round(self.k / self.n / self.reference, 4)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> ReaderStatus:
        if not self.n or not self.reference:
            return ReaderStatus.NOT_CHECKED
        if self.k / self.n >= self.threshold * self.reference:
            return ReaderStatus.READS
        if self.k_high / self.n < self.threshold * self.reference:
            return ReaderStatus.CANNOT_READ
        return ReaderStatus.NOT_CHECKED

    @property
    def valid(self) -> bool:
        return self.status is ReaderStatus.READS

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> str | None:
        """The mark on every score of this reader; None for a reader that reads."""
        if self.valid:
            return None
        return NOT_A_VERDICT if self.status is ReaderStatus.CANNOT_READ else NOT_CHECKED

    def text(self) -> str:
        """What the check measured, in one sentence."""
        if not self.n:
            return (
                f"{self.reader} read no {CONTROL} memory (the whole history), so nothing "
                "shows that it can read these histories"
            )
        theirs = f"{self.k}/{self.n}" if self.k == self.k_high else f"{self.k}..{self.k_high}/"
        theirs += "" if self.k == self.k_high else str(self.n)
        exact = f"{self.exact_k}/{self.exact_n}" if self.exact_n else "all"
        return (
            f"on {CONTROL} (the whole history) of {self.source_pairs} source pair"
            f"{'' if self.source_pairs == 1 else 's'}, {self.reader} answered {theirs} blocks "
            f"right, the exact reader {exact}; a reader's scores count only from "
            f"{self.threshold * 100:.0f} % of the exact reader's"
        )


class WriterCheck(BaseModel):
    """An LLM-written condition whose memories no valid reader can read, or which
    repeat its prompt."""

    condition: str
    budget: int
    unparsed: int
    """The exact reader's reads of its memories that found no record log."""
    reads: int
    echoed: int = 0
    """Of those reads, the ones whose memory repeats the prompt (``writer_echo``)."""
    verdict: str = UNREADABLE_WRITER

    def text(self) -> str:
        if self.verdict == ECHOING_WRITER:
            return (
                f"{self.echoed} of {self.reads} memories of {self.condition} at "
                f"{self.budget} B repeat the writer's prompt instead of the history"
            )
        return (
            f"the exact reader found no record log in {self.unparsed} of {self.reads} reads "
            f"of {self.condition}'s memories at {self.budget} B, and no LLM reader of this "
            "run passed its check on full"
        )


def _is_control(conditions: pd.Series) -> pd.Series:
    """``full``, whatever its parameters (``full:budget=600``)."""
    return conditions.map(lambda c: str(c).partition(":")[0] == CONTROL).astype(bool)


def reader_checks(scores: Scores) -> list[ReaderCheck]:
    """One ``ReaderCheck`` per LLM reader of the run, in display order."""
    readers = list(dict.fromkeys(s[0] for s in scores.systems if s[0] != EXACT))
    if not readers:
        return []
    frames = [scores.pairs[m] for m in BRANCH_METRICS if m in scores.pairs]
    out = []
    for reader in readers:
        k = k_high = n = exact_k = exact_n = 0
        pairs: set[str] = set()
        budgets: set[int] = set()
        for frame in frames:
            mine = frame[(frame["reader"] == reader) & _is_control(frame["condition"])]
            k += int(mine["blocks_lo"].sum())
            k_high += int(mine["blocks_hi"].sum())
            n += int(mine["blocks"].sum())
            pairs |= set(mine["source_pair_id"])
            budgets |= {int(b) for b in mine["budget"]}
        for frame in frames:
            exact = frame[
                (frame["reader"] == EXACT)
                & _is_control(frame["condition"])
                & (frame["transform"] == IDENTITY)
                & frame["source_pair_id"].isin(pairs)
                & frame["budget"].isin(budgets)
            ]
            exact_k += int(exact["blocks_lo"].sum())
            exact_n += int(exact["blocks"].sum())
        check = ReaderCheck(
            reader=reader, k=k, k_high=k_high, n=n, exact_k=exact_k, exact_n=exact_n,
            source_pairs=len(pairs),
        )  # fmt: skip
        out.append(check)
    return out


def unreadable(checks: Sequence[ReaderCheck]) -> list[str]:
    """The readers whose scores are no verdict."""
    return [c.reader for c in checks if not c.valid]


def llm_written(conditions: Sequence[str]) -> list[str]:
    """The conditions a model writes (a built-in's ``uses_llm``)."""
    from compressors import builtins

    found = builtins()
    return [c for c in conditions if getattr(found.get(c.partition(":")[0]), "uses_llm", False)]


def writer_checks(scores: Scores, checks: Sequence[ReaderCheck]) -> list[WriterCheck]:
    """The LLM-written conditions whose scores are no verdict: at least half their exact
    reads repeat the prompt (``writer_echo``); or, with no valid LLM reader, the exact
    reader found a record log in none of their memories (outcome ``unparsed``; a writer
    cut off or empty is the writer's own failure, a verdict)."""
    any_valid = any(c.valid for c in checks)
    written = set(llm_written([s[1] for s in scores.systems]))
    out = []
    for reader, condition, budget in scores.systems:
        cell = scores.cell((reader, condition, budget))
        if reader != EXACT or condition not in written or cell is None:
            continue
        reads = int(cell["n_reads"])
        unparsed = int(cell.get("outcome_unparsed", 0))
        echoed = int(cell.get("outcome_writer_echo", 0))
        readable = int(cell.get("outcome_pass", 0)) + int(cell.get("outcome_wrong_log", 0))
        if echoed and 2 * echoed >= reads:
            out.append(WriterCheck(condition=condition, budget=budget, unparsed=unparsed,
                                   reads=reads, echoed=echoed, verdict=ECHOING_WRITER))  # fmt: skip
        elif not any_valid and unparsed and not readable:
            out.append(WriterCheck(condition=condition, budget=budget, unparsed=unparsed,
                                   reads=reads, echoed=echoed))  # fmt: skip
    return out
