"""One job of a deterministic audit: a source pair through every condition and transform.

For every transformed instance of the pair, each variant's prefix is streamed
through the compressor chunk by chunk; the prefix memory is read (current), then
each future is streamed on from it and read again (reveal, override).  Keeping a
source pair's transforms in one job lets the equivariance check compare
C(rename(H)) with rename(C(H)) directly, and computes each transform once.
"""

from __future__ import annotations

import hashlib
import json
import operator
import traceback
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from audit._columns import RESULT_COLUMNS, ColumnBuilder
from audit._exact import read_exact
from audit._transforms_spec import TransformSpec
from compressors import ArchiveCompressor, ChunkView, Compressor, build, dump, load, parse_spec
from histories import BRANCHES, FUTURES, VARIANTS, Branch, Pair, Record, VariantName
from histories._render import RenderParseError
from histories._transforms import rename_record, transform

SHARED_COLUMNS = (
    "job_key", "pair_id", "source_pair_id", "family", "repeat", "condition", "compressor",
    "kind", "budget", "reader", "transform", "transform_index", "collision",
)  # fmt: skip
"""Columns whose value is the same for every read of one (condition, instance)."""
READ_COLUMNS = (
    "variant", "branch", "outcome", "correct", "adequate", "memory_bytes", "memory_sha256",
    "overflow", "equivariant", "answer", "gold", "error",
)  # fmt: skip
"""Columns that differ from read to read."""


@dataclass
class JobResult:
    """Rows (column by column), distinct memories (sha -> text) and log lines of one
    finished job."""

    key: str
    columns: ColumnBuilder = field(
        default_factory=lambda: ColumnBuilder(SHARED_COLUMNS, READ_COLUMNS)
    )
    memories: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    @property
    def lists(self) -> list[list[Any]]:
        """The rows as value lists in RESULT_COLUMNS order."""
        return self.columns.rows()

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows as dicts (for inspection; the run stores ``columns``)."""
        return [dict(zip(RESULT_COLUMNS, values, strict=True)) for values in self.lists]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _chunk_seed(pair: Pair, variant: str, index: int) -> int:
    # the source id, so a renamed pair is phrased like its source (prose renderings)
    return zlib.crc32(f"{pair.source_id}/{variant}/{index}".encode())


@dataclass
class Streamed:
    """What a reader is shown per branch, and over-budget events up to each branch."""

    memories: dict[Branch, str]
    overflow: dict[Branch, int]


UpdateMemo = dict[tuple[str, tuple[int, ...], int], tuple[str, bool]]
"""(memory, ids of the chunk's records, chunk index) -> (new memory, over budget)."""


ChunkPlan = tuple[ChunkView, tuple[int, ...], int]
"""(the chunk as compressors see it, ids of its records, chunk index) of one chunk of
a stream; one view per chunk of a pair instance, shown to every condition."""
VariantPlan = tuple[list[ChunkPlan], dict[Branch, list[ChunkPlan]]]
"""A variant's prefix chunks, and each future's chunks after them."""


def plan_variant(pair: Pair, variant: VariantName) -> VariantPlan:
    """The chunks one variant streams: worked out once per pair instance, shared by
    every condition streaming it."""

    def chunk(records: Sequence[Record], index: int) -> ChunkPlan:
        view = ChunkView(records, pair.render, _chunk_seed(pair, variant, index))
        return (view, tuple(map(id, view.records)), index)

    prefix = pair.variants.of(variant).chunks
    futures: dict[Branch, list[ChunkPlan]] = {
        future: [chunk(c, len(prefix) + i) for i, c in enumerate(pair.futures.of(future))]
        for future in FUTURES
    }
    return [chunk(c, i) for i, c in enumerate(prefix)], futures


def stream_variant(
    compressor: Compressor,
    pair: Pair,
    variant: VariantName,
    budget: int,
    memo: UpdateMemo | None = None,
    plan: VariantPlan | None = None,
) -> Streamed:
    """Stream the prefix, then each future from the prefix memory (strict protocol).

    ``memo`` shares updates between streams of one pair, compressor and budget: A
    and B share every chunk before the hidden distinction, and both futures start
    from the prefix memory.  Only for deterministic compressors, whose update is a
    pure function of (memory, chunk, query, budget) by the protocol.
    """
    if compressor.uses_llm:
        memo = None
    if _streams_nothing(compressor):  # an archive's memory stays empty until recall
        return finish_streams(compressor, pair, variant, budget, dict.fromkeys(BRANCHES, ("", 0)))
    prefix, futures = plan if plan is not None else plan_variant(pair, variant)
    update, query = compressor.update, pair.query
    budgeted = compressor.budgeted

    def step(memory: str, chunk: ChunkPlan, overflow: int) -> tuple[str, int]:
        view, ids, index = chunk
        key = (memory, ids, index)
        found = memo.get(key) if memo is not None else None
        if found is not None:
            new, over = found
        else:
            new = update(memory, view, query, budget)
            over = budgeted and (
                len(new) > budget or (not new.isascii() and len(new.encode("utf-8")) > budget)
            )
            if memo is not None:
                memo[key] = (new, over)
        return ("", overflow + 1) if over else (new, overflow)

    memory, overflow = "", 0
    for chunk in prefix:
        memory, overflow = step(memory, chunk, overflow)
    states: dict[Branch, tuple[str, int]] = {"current": (memory, overflow)}
    for future, chunks in futures.items():
        m, o = memory, overflow
        for chunk in chunks:
            m, o = step(m, chunk, o)
        states[future] = (m, o)

    return finish_streams(compressor, pair, variant, budget, states)


def _streams_nothing(compressor: Compressor) -> bool:
    """An archive that keeps the base class's update, which returns the memory as is."""
    return (
        isinstance(compressor, ArchiveCompressor)
        and type(compressor).update is ArchiveCompressor.update
    )


def finish_streams(
    compressor: Compressor,
    pair: Pair,
    variant: VariantName,
    budget: int,
    states: Mapping[Branch, tuple[str, int]],
) -> Streamed:
    """What the reader is shown per branch: the memory, or an archive's recall of the
    raw history (budget-checked like any memory)."""
    memories: dict[Branch, str] = {}
    overflows: dict[Branch, int] = {}
    for branch, (m, o) in states.items():
        if isinstance(compressor, ArchiveCompressor):
            m = compressor.recall(m, pair.history(variant, branch), pair.query, budget)
            if compressor.budgeted and len(m.encode("utf-8")) > budget:
                m, o = "", o + 1
        memories[branch], overflows[branch] = m, o
    return Streamed(memories, overflows)


def rename_memory(
    memory: str, mapping: Mapping[str, str], renamed: Mapping[int, Record] | None = None
) -> str | None:
    """rename(C(H)): the memory's records relabelled; None if it is not a record log.

    ``renamed`` maps id(source record) -> its renamed record (from the transformed
    pair): a memory that kept whole records then reuses them instead of renaming again.
    """
    try:
        renamed = renamed or {}
        return dump(renamed.get(id(r)) or rename_record(r, mapping) for r in load(memory))
    except (RenderParseError, KeyError):
        return None


def instances(pair: Pair, transforms: Sequence[TransformSpec], seed: int) -> list[Pair]:
    """The source pair (if identity is asked) and its transformed copies, in order."""
    out: list[Pair] = []
    for spec in transforms:
        out.extend(transform(pair, spec.kind, spec.count, seed))  # type: ignore[arg-type]
    return out


def share_identical_records(pair: Pair) -> Pair:
    """Make B's records that equal A's at the same position the same objects (in place).

    Equal records are indistinguishable to a compressor, so sharing them changes no
    result; it lets the update memo (keyed by record identity) reuse A's updates for
    every chunk B shares with A, and the per-record caches serve both variants.
    """
    for chunk_a, chunk_b in zip(pair.variants.A.chunks, pair.variants.B.chunks, strict=False):
        for position, (a, b) in enumerate(zip(chunk_a, chunk_b, strict=False)):
            if a is not b and type(a) is type(b) and a.__dict__ == b.__dict__:
                chunk_b[position] = a
    return pair


class _Reads:
    """Per-job memo of what a read needs from a memory: its sha256, its bytes, and
    E_q's answer per query.  Conditions often leave identical memories (an archive and
    a packer that kept everything), and the exact reader is a pure function."""

    __slots__ = ("answers", "digests")

    def __init__(self) -> None:
        self.digests: dict[str, tuple[str, int]] = {}
        self.answers: dict[tuple[str, tuple[str, ...]], Any] = {}

    def digest(self, memory: str) -> tuple[str, int]:
        found = self.digests.get(memory)
        if found is None:
            raw = memory.encode("utf-8")
            found = self.digests[memory] = (hashlib.sha256(raw).hexdigest(), len(raw))
        return found

    def read(self, memory: str, query: tuple[str, ...]) -> Any:
        """E_q's answer on the memory, or None when it is not a record log."""
        key = (memory, query)
        if key not in self.answers:
            self.answers[key] = read_exact(memory, query, {}).answer
        return self.answers[key]


def _same_records(identity: str, memory: str, renamed: Mapping[int, Record]) -> bool:
    """Whether ``memory`` holds exactly the renamed counterparts of ``identity``'s
    records, as the very objects (a cheap sufficient test for rename(C(H)) == C(rename(H)))."""
    try:
        source, target = load(identity), load(memory)
    except RenderParseError:
        return False
    return len(source) == len(target) and all(
        map(operator.is_, map(renamed.get, map(id, source)), target)
    )


def run_job(
    key: str,
    pair: Pair,
    conditions: Sequence[tuple[str, int]],
    transforms: Sequence[TransformSpec],
    seed: int,
) -> JobResult:
    """Every (condition, budget) x transformed instance x variant x branch of one pair."""
    result = JobResult(key)
    pairs = instances(pair, transforms, seed)
    for instance in pairs:
        if instance is not pair:  # ours to change; the caller's pair is left alone
            share_identical_records(instance)
    source_records = list(pair.all_records())
    correspondence = {
        instance.pair_id: {
            id(old): new for old, new in zip(source_records, instance.all_records(), strict=True)
        }
        for instance in pairs
        if instance.transform is not None and instance.transform.mapping
    }
    reads = _Reads()
    assert all(instance.gold is not None for instance in pairs)
    golds: dict[tuple[str, str, str], tuple[dict[str, str | None], str]] = {
        (instance.pair_id, variant, branch): (
            answer := instance.gold.of(variant).of(branch),  # type: ignore[union-attr]
            json.dumps(answer),
        )
        for instance in pairs
        for variant in VARIANTS
        for branch in BRANCHES
    }
    plans = {
        instance.pair_id: {variant: plan_variant(instance, variant) for variant in VARIANTS}
        for instance in pairs
    }
    for label, budget in conditions:
        compressor = build(parse_spec(label))
        identity: dict[tuple[str, str], str] = {}
        for instance in pairs:
            _run_instance(
                result, compressor, label, budget, instance, identity, reads, golds,
                plans[instance.pair_id], correspondence.get(instance.pair_id),
            )  # fmt: skip
    return result


def _run_instance(
    result: JobResult,
    compressor: Compressor,
    label: str,
    budget: int,
    pair: Pair,
    identity: dict[tuple[str, str], str],
    reads: _Reads,
    golds: Mapping[tuple[str, str, str], tuple[dict[str, str | None], str]],
    plans: Mapping[VariantName, VariantPlan],
    renamed: Mapping[int, Record] | None = None,
) -> None:
    transform_kind = pair.transform.kind if pair.transform else "identity"
    shared = [
        result.key,
        pair.pair_id,
        pair.source_id,
        pair.family,
        0,
        label,
        compressor.label,
        compressor.kind,
        budget,
        "exact",
        transform_kind,
        pair.transform.index if pair.transform else 0,
    ]  # fmt: skip (SHARED_COLUMNS order; collision is appended below)
    memo: UpdateMemo = {}
    try:
        streamed = {
            v: stream_variant(compressor, pair, v, budget, memo, plans[v]) for v in VARIANTS
        }
    except Exception:
        trace = traceback.format_exc()
        result.log.append(f"{label} on {pair.pair_id}: compressor raised\n{trace}")
        error = trace.strip().splitlines()[-1]
        failed = [
            {"variant": variant, "branch": branch, "outcome": "error", "correct": 0,
             "gold": golds[(pair.pair_id, variant, branch)][1], "error": error}
            for variant in VARIANTS
            for branch in BRANCHES
        ]  # fmt: skip
        result.columns.add_group(
            [*shared, None], [[row.get(c) for c in READ_COLUMNS] for row in failed]
        )
        return
    collision = int(streamed["A"].memories["current"] == streamed["B"].memories["current"])
    query = tuple(pair.query)
    mapping = pair.transform.mapping if pair.transform else None
    rows: list[list[Any]] = []
    for variant in VARIANTS:
        for branch in BRANCHES:
            memory = streamed[variant].memories[branch]
            gold, gold_json = golds[(pair.pair_id, variant, branch)]
            answer = reads.read(memory, query)
            if answer is None:
                outcome, adequate, answer_json = "unparsed", None, None
            elif answer == gold:
                outcome, adequate, answer_json = "pass", 1, gold_json
            else:
                outcome, adequate, answer_json = "wrong_log", 0, json.dumps(answer)
            digest, size = reads.digest(memory)
            if digest not in result.memories:
                result.memories[digest] = memory
            equivariant: int | None = None
            if transform_kind == "identity":
                identity[(variant, branch)] = memory
            elif mapping and (variant, branch) in identity:
                source = identity[(variant, branch)]
                if renamed is not None and _same_records(source, memory, renamed):
                    equivariant = 1
                else:
                    expected = rename_memory(source, mapping, renamed)
                    equivariant = None if expected is None else int(expected == memory)
            rows.append(
                [
                    variant,
                    branch,
                    outcome,
                    int(outcome == "pass"),
                    adequate,
                    size,
                    digest,
                    streamed[variant].overflow[branch],
                    equivariant,
                    answer_json,
                    gold_json,
                    None,
                ]
            )  # fmt: skip (READ_COLUMNS order)
    result.columns.add_group([*shared, collision], rows)
