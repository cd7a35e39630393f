"""The result rows of one job: built here, for both stages, and packed for the store.

A (condition, instance, reader) group shares most of its columns (``SHARED``); its
reads differ in the rest (``READ``, plus ``LLM_READ`` for an LLM reader).  Rows go
column by column into a ``rundir.ColumnBuilder`` (no row dicts on the hot path), and
a job is packed with its distinct memories for the store.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from audit.rundir import (
    RESULT_COLUMNS,
    ColumnBuilder,
    ErrorSite,
    ErrorStage,
    JobLog,
    PackedJob,
    compressor_error,
    pack_job,
)
from compressors import Compressor
from histories import (
    BRANCHES,
    VARIANTS,
    AnswerClasses,
    Branch,
    MemoryAuditError,
    Pair,
    VariantName,
    WrongAnswer,
)

if TYPE_CHECKING:
    from audit.engine._streaming import UpdateRaised

SHARED = (
    "job_key", "pair_id", "source_pair_id", "family", "repeat", "condition", "compressor",
    "kind", "budget", "reader", "transform", "transform_index", "collision",
)  # fmt: skip
"""Columns whose value is the same for every read of one (condition, instance, reader)."""
READ = (
    "variant", "branch", "outcome", "correct", "adequate", "memory_bytes", "memory_sha256",
    "overflow", "equivariant", "answer", "gold", "error", "wrong_answer",
)  # fmt: skip
"""Columns that differ from read to read (``wrong_answer`` filled in by ``JobRows.add``)."""
_CORRECT, _ANSWER, _WRONG = READ.index("correct"), READ.index("answer"), READ.index("wrong_answer")
LLM_READ = (
    "reader_model", "writer_model", "correct_lenient", "finish_reason", "reasoning_chars",
    "tokens_prompt", "tokens_completion", "latency_s", "cache_hit", "raw_answer",
    "writer_finish_reason", "writer_reasoning_tokens", "writer_content_tokens",
    "writer_reasoning_chars",
)  # fmt: skip
"""What an LLM stage's read adds: the models, the lenient score, the reader request's
figures, and the LLM writer's figures for the memory read (``writer_*``)."""

Gold = tuple[dict[str, str | None], str]
"""A gold answer and its JSON text."""


def error_cause(error: BaseException) -> str:
    """A compressor error as the results' ``error`` column holds it: an error raised on
    purpose (an external system's ``{"error"}``) is its message alone; a plugin's bug
    is the traceback's last line, which names its class."""
    if isinstance(error, MemoryAuditError):
        return str(error)
    return "".join(traceback.format_exception_only(error)).strip().splitlines()[-1]


def source_file(compressor: Compressor) -> str | None:
    """The file defining the compressor's class (where its errors are located)."""
    try:
        return inspect.getsourcefile(type(compressor))
    except TypeError:  # a class made at run time
        return None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def golds_of(pair: Pair) -> dict[tuple[VariantName, Branch], Gold]:
    """Every (variant, branch) gold answer of a pair, with its JSON text."""
    assert pair.gold is not None, f"{pair.pair_id} has no gold answers"
    out: dict[tuple[VariantName, Branch], Gold] = {}
    for variant in VARIANTS:
        for branch in BRANCHES:
            answer = pair.gold.of(variant).of(branch)
            out[(variant, branch)] = (answer, json.dumps(answer))
    return out


class AnswerMemo:
    """The class of each wrong read's answer (``histories.AnswerClasses``) by its JSON
    text: one per job, shared by its cells, since the same wrong answer on the same
    history recurs across conditions and is classed once."""

    def __init__(self) -> None:
        self.pairs: dict[str, Pair] = {}
        self.classes = AnswerClasses()
        self._memo: dict[tuple[str, str, str, str | None], WrongAnswer] = {}

    def of(
        self, pair_id: str, variant: VariantName, branch: Branch, answer: str | None
    ) -> WrongAnswer:
        key = (pair_id, variant, branch, answer)
        found = self._memo.get(key)
        if found is None:
            values = None if answer is None else json.loads(answer)
            found = self.classes.classify(self.pairs[pair_id], variant, branch, values)
            self._memo[key] = found
        return found


@dataclass
class JobRows:
    """Rows (column by column), distinct memories (sha -> text) and the log of one job
    (its compressor errors, each distinct one counted once, and other lines)."""

    key: str
    llm: bool = False
    """Rows of the LLM stage: they carry the ``LLM_READ`` columns too."""
    classes: AnswerMemo = field(default_factory=AnswerMemo)
    columns: ColumnBuilder = field(init=False)
    memories: dict[str, str] = field(default_factory=dict)
    log: JobLog = field(default_factory=JobLog)

    def __post_init__(self) -> None:
        self.columns = ColumnBuilder(SHARED, READ + LLM_READ if self.llm else READ)

    def shared(
        self,
        pair: Pair,
        label: str,
        compressor: Compressor,
        budget: int,
        *,
        reader: str,
        repeat: int = 0,
        collision: int | None = None,
    ) -> list[Any]:
        """The ``SHARED`` values of a group."""
        self.classes.pairs.setdefault(pair.pair_id, pair)
        info = pair.transform
        return [
            self.key, pair.pair_id, pair.source_id, pair.family, repeat, label, compressor.label,
            compressor.kind, budget, reader, info.kind if info else "identity",
            info.index if info else 0, collision,
        ]  # fmt: skip

    def add(self, shared: Sequence[Any], reads: Sequence[list[Any]]) -> None:
        """One group: its shared values and, per read, its values in column order (a
        wrong read's ``wrong_answer`` filled in, by the pair ``shared`` named)."""
        for values in reads:
            if values[_CORRECT] == 0 and values[_WRONG] is None:
                values[_WRONG] = self.classes.of(shared[1], values[0], values[1], values[_ANSWER])
        self.columns.add_group(shared, reads)

    def read(self, **values: Any) -> list[Any]:
        """One read's values in column order (unnamed columns empty)."""
        names = READ + LLM_READ if self.llm else READ
        unknown = values.keys() - set(names)
        if unknown:
            raise ValueError(f"not a read column: {sorted(unknown)}")
        return [values.get(name) for name in names]

    def failed(
        self,
        shared: Sequence[Any],
        golds: Mapping[tuple[VariantName, Branch], Gold],
        error: str,
        *,
        outcome: str,
        correct: int | None,
        variants: Sequence[VariantName] = VARIANTS,
    ) -> None:
        """Reads that never happened: the compressor raised (``error``, scored 0) or its
        writer was unavailable (``na``, not scored)."""
        self.add(
            shared,
            [
                self.read(variant=variant, branch=branch, outcome=outcome, correct=correct,
                          gold=golds[(variant, branch)][1], error=error)
                for variant in variants
                for branch in BRANCHES
            ],
        )  # fmt: skip

    def raised(
        self,
        condition: str,
        stage: ErrorStage,
        error: BaseException,
        cause: str,
        pair: Pair,
        where: UpdateRaised | None,
        reads: int,
        source: str | None = None,
    ) -> None:
        """Count a stream that ``error`` stopped, and where (``where``: the chunk the
        update raised on; None when the compressor raised outside an update; ``source``:
        the file of the compressor's class, ``source_file``)."""
        site = ErrorSite(
            pair_id=pair.pair_id,
            transform=pair.transform.kind if pair.transform else "identity",
            **(
                {"variant": where.variant, "branch": where.branch, "chunk": where.chunk,
                 "records": where.records}
                if where is not None
                else {}
            ),
        )  # fmt: skip
        self.log.add(compressor_error(condition, stage, error, cause, site, reads, source))

    def extend(self, other: JobRows) -> None:
        """Append another set's rows, memories and log (one cell of the job)."""
        self.columns.extend(other.columns)
        for digest, memory in other.memories.items():
            self.keep(memory, digest)
        for found in other.log.errors:
            self.log.add(found)
        self.log.lines.extend(other.log.lines)

    def keep(self, memory: str, digest: str) -> None:
        """Store a memory once per job, by its sha256."""
        if digest not in self.memories:
            self.memories[digest] = memory

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts (for inspection; the run stores the table)."""
        return [dict(zip(RESULT_COLUMNS, values, strict=True)) for values in self.columns.rows()]

    def pack(self) -> PackedJob:
        return pack_job(self.key, self.columns.table(), self.memories, self.log)
