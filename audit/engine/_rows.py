"""The result rows of one job: built here, for both stages, and packed for the store.

A (condition, instance, reader) group shares most of its columns (``SHARED``); its
reads differ in the rest (``READ``, plus ``LLM_READ`` for an LLM reader).  Rows go
column by column into a ``rundir.ColumnBuilder`` (no row dicts on the hot path), and
a job is packed with its distinct memories for the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from audit.rundir import RESULT_COLUMNS, ColumnBuilder, PackedJob, pack_job
from compressors import Compressor
from histories import BRANCHES, VARIANTS, Branch, Pair, VariantName

SHARED = (
    "job_key", "pair_id", "source_pair_id", "family", "repeat", "condition", "compressor",
    "kind", "budget", "reader", "transform", "transform_index", "collision",
)  # fmt: skip
"""Columns whose value is the same for every read of one (condition, instance, reader)."""
READ = (
    "variant", "branch", "outcome", "correct", "adequate", "memory_bytes", "memory_sha256",
    "overflow", "equivariant", "answer", "gold", "error",
)  # fmt: skip
"""Columns that differ from read to read."""
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


@dataclass
class JobRows:
    """Rows (column by column), distinct memories (sha -> text) and log lines of one job."""

    key: str
    llm: bool = False
    """Rows of the LLM stage: they carry the ``LLM_READ`` columns too."""
    columns: ColumnBuilder = field(init=False)
    memories: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

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
        info = pair.transform
        return [
            self.key, pair.pair_id, pair.source_id, pair.family, repeat, label, compressor.label,
            compressor.kind, budget, reader, info.kind if info else "identity",
            info.index if info else 0, collision,
        ]  # fmt: skip

    def add(self, shared: Sequence[Any], reads: Sequence[Sequence[Any]]) -> None:
        """One group: its shared values and, per read, its values in column order."""
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
