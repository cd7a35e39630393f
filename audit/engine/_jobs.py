"""One job of the deterministic stage: a source pair through every cell and transform.

For every transformed instance of the pair, each variant is streamed through the
compressor (``_streaming``) and every branch's memory is read by the exact reader.
Keeping a source pair's transforms in one job lets the equivariance check compare
C(rename(H)) with rename(C(H)) directly, and computes each transform once.
"""

from __future__ import annotations

import hashlib
import json
import operator
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from audit.engine._exact import memory_records
from audit.engine._rows import Gold, JobRows, golds_of
from audit.engine._streaming import (
    UpdateMemo,
    VariantPlan,
    plan_variant,
    share_identical_records,
    stream_variant,
)
from audit.plan import Cell, TransformSpec
from compressors import ChatUnavailableError, Compressor, build, dump, load
from histories import (
    BRANCHES,
    VARIANTS,
    Branch,
    LogIndex,
    Pair,
    Record,
    RenderParseError,
    VariantName,
    rename_record,
    transform,
)


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
        out.extend(transform(pair, spec.kind, spec.count, seed))
    return out


class _Reads:
    """Per-job memo of what a read needs from a memory: its sha256, its bytes, and
    E_q's answer per query.  Conditions often leave identical memories (an archive and
    a packer that kept everything), and the exact reader is a pure function."""

    __slots__ = ("answers", "digests")

    def __init__(self) -> None:
        self.digests: dict[str, tuple[str, int]] = {}
        self.answers: dict[tuple[str, tuple[str, ...]], tuple[Any, bool]] = {}

    def digest(self, memory: str) -> tuple[str, int]:
        found = self.digests.get(memory)
        if found is None:
            raw = memory.encode("utf-8")
            found = self.digests[memory] = (hashlib.sha256(raw).hexdigest(), len(raw))
        return found

    def read(self, memory: str, query: tuple[str, ...]) -> tuple[Any, bool]:
        """E_q's answer on the memory (None when it holds no records E_q can read),
        and whether a wrong answer is conclusive (the records are all the memory holds,
        ``read_exact``)."""
        key = (memory, query)
        found = self.answers.get(key)
        if found is None:
            records, complete = memory_records(memory)
            answer = None if records is None else LogIndex(records).resolve(query)
            found = self.answers[key] = (answer, complete)
        return found


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
    cells: Sequence[Cell],
    transforms: Sequence[TransformSpec],
    seed: int,
) -> JobRows:
    """Every (condition, budget) x transformed instance x variant x branch of one pair."""
    rows = JobRows(key)
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
    golds = {instance.pair_id: golds_of(instance) for instance in pairs}
    plans = {
        instance.pair_id: {variant: plan_variant(instance, variant) for variant in VARIANTS}
        for instance in pairs
    }
    for spec, budget in cells:
        compressor = build(spec)
        identity: dict[tuple[str, str], str] = {}
        for instance in pairs:
            _run_instance(
                rows, compressor, spec.label, budget, instance, identity, reads,
                golds[instance.pair_id], plans[instance.pair_id],
                correspondence.get(instance.pair_id),
            )  # fmt: skip
    return rows


def _run_instance(
    rows: JobRows,
    compressor: Compressor,
    label: str,
    budget: int,
    pair: Pair,
    identity: dict[tuple[str, str], str],
    reads: _Reads,
    golds: Mapping[tuple[VariantName, Branch], Gold],
    plans: Mapping[VariantName, VariantPlan],
    renamed: Mapping[int, Record] | None = None,
) -> None:
    memo: UpdateMemo = {}
    try:
        streamed = {
            v: stream_variant(compressor, pair, v, budget, memo, plans[v]) for v in VARIANTS
        }
    except ChatUnavailableError as error:  # infrastructure (an external system): NA
        rows.log.append(f"{label} on {pair.pair_id}: unavailable: {error}")
        shared = rows.shared(pair, label, compressor, budget, reader="exact")
        rows.failed(shared, golds, f"unavailable: {error}", outcome="na", correct=None)
        return
    except (Exception, SystemExit):  # a plugin that exits is a compressor that raised
        trace = traceback.format_exc()
        rows.log.append(f"{label} on {pair.pair_id}: compressor raised\n{trace}")
        shared = rows.shared(pair, label, compressor, budget, reader="exact")
        rows.failed(shared, golds, trace.strip().splitlines()[-1], outcome="error", correct=0)
        return
    collision = int(streamed["A"].memories["current"] == streamed["B"].memories["current"])
    query = tuple(pair.query)
    identity_instance = pair.transform is None
    mapping = pair.transform.mapping if pair.transform else None
    check_order = (
        compressor.order_invariant
        and pair.transform is not None
        and (pair.transform.kind == "permute")
    )
    values: list[list[Any]] = []
    for variant in VARIANTS:
        for branch in BRANCHES:
            memory = streamed[variant].memories[branch]
            gold, gold_json = golds[(variant, branch)]
            answer, complete = reads.read(memory, query)
            if answer is None:
                outcome, adequate, answer_json = "unparsed", None, None
            elif answer == gold:
                outcome, adequate, answer_json = "pass", 1, gold_json
            elif complete:
                outcome, adequate, answer_json = "wrong_log", 0, json.dumps(answer)
            else:  # a transcript with a summary: its record lines alone are not conclusive
                outcome, adequate, answer_json = "unparsed", None, json.dumps(answer)
            digest, size = reads.digest(memory)
            rows.keep(memory, digest)
            equivariant: int | None = None
            if identity_instance:
                identity[(variant, branch)] = memory
            elif check_order and (variant, branch) in identity:
                # a condition that claims order invariance keeps the same lines
                source = identity[(variant, branch)]
                equivariant = int(sorted(memory.split("\n")) == sorted(source.split("\n")))
            elif mapping and (variant, branch) in identity:
                source = identity[(variant, branch)]
                if renamed is not None and _same_records(source, memory, renamed):
                    equivariant = 1
                else:
                    expected = rename_memory(source, mapping, renamed)
                    equivariant = None if expected is None else int(expected == memory)
            values.append(
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
            )  # fmt: skip (READ order)
    rows.add(
        rows.shared(pair, label, compressor, budget, reader="exact", collision=collision), values
    )
