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
import traceback
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from audit._exact import read_exact
from audit._transforms_spec import TransformSpec
from compressors import ArchiveCompressor, ChunkView, Compressor, build, dump, load, parse_spec
from histories import BRANCHES, FUTURES, VARIANTS, Branch, Pair, Record, VariantName
from histories._render import RenderParseError
from histories._transforms import rename_record, transform

RESULT_COLUMNS = (
    "job_key",
    "pair_id",
    "source_pair_id",
    "family",
    "variant",
    "branch",
    "repeat",
    "condition",
    "compressor",
    "kind",
    "budget",
    "reader",
    "transform",
    "transform_index",
    "outcome",
    "correct",
    "adequate",
    "memory_bytes",
    "memory_sha256",
    "collision",
    "overflow",
    "equivariant",
    "answer",
    "gold",
    "error",
    "reader_model",
    "writer_model",
    "correct_lenient",
    "finish_reason",
    "reasoning_chars",
    "tokens_prompt",
    "tokens_completion",
    "latency_s",
    "cache_hit",
    "raw_answer",
)
"""Columns of results.csv, one row per read."""


@dataclass
class JobResult:
    """Rows, distinct memories (sha -> text) and log lines of one finished job."""

    key: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    memories: dict[str, str] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)


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


def stream_variant(
    compressor: Compressor,
    pair: Pair,
    variant: VariantName,
    budget: int,
    memo: UpdateMemo | None = None,
) -> Streamed:
    """Stream the prefix, then each future from the prefix memory (strict protocol).

    ``memo`` shares updates between streams of one pair, compressor and budget: A
    and B share every chunk before the hidden distinction, and both futures start
    from the prefix memory.  Only for deterministic compressors, whose update is a
    pure function of (memory, chunk, query, budget) by the protocol.
    """
    if compressor.uses_llm:
        memo = None

    def step(memory: str, records: Sequence[Any], index: int, overflow: int) -> tuple[str, int]:
        key = (memory, tuple(map(id, records)), index) if memo is not None else None
        if key is not None and key in memo:  # type: ignore[operator]
            new, over = memo[key]  # type: ignore[index]
        else:
            view = ChunkView(records, pair.render, _chunk_seed(pair, variant, index))
            new = compressor.update(memory, view, pair.query, budget)
            over = compressor.budgeted and len(new.encode("utf-8")) > budget
            if key is not None:
                memo[key] = (new, over)  # type: ignore[index]
        return ("", overflow + 1) if over else (new, overflow)

    memory, overflow = "", 0
    chunks = pair.variants.of(variant).chunks
    for index, chunk in enumerate(chunks):
        memory, overflow = step(memory, chunk, index, overflow)
    states: dict[Branch, tuple[str, int]] = {"current": (memory, overflow)}
    for future in FUTURES:
        m, o = memory, overflow
        for offset, chunk in enumerate(pair.futures.of(future)):
            m, o = step(m, chunk, len(chunks) + offset, o)
        states[future] = (m, o)

    return finish_streams(compressor, pair, variant, budget, states)


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
    source_records = list(pair.all_records())
    correspondence = {
        instance.pair_id: {
            id(old): new for old, new in zip(source_records, instance.all_records(), strict=True)
        }
        for instance in pairs
        if instance.transform is not None and instance.transform.mapping
    }
    for label, budget in conditions:
        compressor = build(parse_spec(label))
        identity: dict[tuple[str, str], str] = {}
        for instance in pairs:
            _run_instance(
                result, compressor, label, budget, instance, identity,
                correspondence.get(instance.pair_id),
            )  # fmt: skip
    return result


def _run_instance(
    result: JobResult,
    compressor: Compressor,
    label: str,
    budget: int,
    pair: Pair,
    identity: dict[tuple[str, str], str],
    renamed: Mapping[int, Record] | None = None,
) -> None:
    transform_kind = pair.transform.kind if pair.transform else "identity"
    base = {
        "job_key": result.key,
        "pair_id": pair.pair_id,
        "source_pair_id": pair.source_id,
        "family": pair.family,
        "repeat": 0,
        "condition": label,
        "compressor": compressor.label,
        "kind": compressor.kind,
        "budget": budget,
        "reader": "exact",
        "transform": transform_kind,
        "transform_index": pair.transform.index if pair.transform else 0,
    }
    assert pair.gold is not None
    memo: UpdateMemo = {}
    try:
        streamed = {v: stream_variant(compressor, pair, v, budget, memo) for v in VARIANTS}
    except Exception:
        trace = traceback.format_exc()
        result.log.append(f"{label} on {pair.pair_id}: compressor raised\n{trace}")
        for variant in VARIANTS:
            for branch in BRANCHES:
                gold = pair.gold.of(variant).of(branch)
                result.rows.append(
                    {
                        **base,
                        "variant": variant,
                        "branch": branch,
                        "outcome": "error",
                        "correct": 0,
                        "adequate": None,
                        "memory_bytes": None,
                        "memory_sha256": None,
                        "collision": None,
                        "overflow": None,
                        "equivariant": None,
                        "answer": None,
                        "gold": json.dumps(gold),
                        "error": trace.strip().splitlines()[-1],
                    }
                )
        return
    collision = int(streamed["A"].memories["current"] == streamed["B"].memories["current"])
    for variant in VARIANTS:
        for branch in BRANCHES:
            memory = streamed[variant].memories[branch]
            gold = pair.gold.of(variant).of(branch)
            read = read_exact(memory, pair.query, gold)
            digest = sha256(memory)
            result.memories.setdefault(digest, memory)
            equivariant: int | None = None
            if transform_kind == "identity":
                identity[(variant, branch)] = memory
            elif pair.transform and pair.transform.mapping and (variant, branch) in identity:
                expected = rename_memory(
                    identity[(variant, branch)], pair.transform.mapping, renamed
                )
                equivariant = None if expected is None else int(expected == memory)
            result.rows.append(
                {
                    **base,
                    "variant": variant,
                    "branch": branch,
                    "outcome": read.outcome,
                    "correct": int(read.outcome == "pass"),
                    "adequate": None if read.outcome == "unparsed" else int(read.adequate),
                    "memory_bytes": len(memory.encode("utf-8")),
                    "memory_sha256": digest,
                    "collision": collision,
                    "overflow": streamed[variant].overflow[branch],
                    "equivariant": equivariant,
                    "answer": None if read.answer is None else json.dumps(read.answer),
                    "gold": json.dumps(gold),
                    "error": None,
                }
            )
