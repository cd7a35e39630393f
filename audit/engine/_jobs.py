"""One job of the deterministic stage: a source pair through every cell and transform.

For every transformed instance of the pair, each variant is streamed through the
compressor (``_streaming``) and every branch's memory is read by the exact reader.
Keeping a source pair's transforms in one job lets the equivariance check compare
C(rename(H)) with rename(C(H)) directly, and computes each transform once.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

from audit.engine._exact import memory_records
from audit.engine._rows import (
    AnswerMemo,
    Gold,
    JobRows,
    error_cause,
    golds_of,
    source_file,
)
from audit.engine._streaming import (
    ImpureUpdateError,
    UpdateMemo,
    UpdateRaised,
    VariantPlan,
    plan_variant,
    stream_variant,
)
from audit.plan import Cell, TransformSpec
from compressors import ChatUnavailableError, Compressor, ConditionSpec, build, load
from histories import (
    BRANCHES,
    FUTURES,
    TRANSFORMS,
    VARIANTS,
    Branch,
    LogIndex,
    Pair,
    RenderParseError,
    VariantName,
    rename_record,
    transform,
)


def rename_memory(
    memory: str, mapping: Mapping[str, str], renamed: Mapping[str, str] | None = None
) -> str | None:
    """rename(C(H)): the memory's records relabelled; None if it is not a record log.

    ``renamed`` maps a source record's canonical line to its counterpart's in the
    transformed pair (matched by record id through ``mapping``, so a transform that
    also reorders, redraws values or revisions is followed): a memory that kept whole
    records gets those counterparts. Keyed by text, never by object identity, so the
    answer does not depend on what a parse cache happens to hold.
    """
    try:
        records = load(memory)
    except RenderParseError:
        return None
    found = renamed or {}
    try:
        return "\n".join(
            found.get(record.canonical_line) or rename_record(record, mapping).canonical_line
            for record in records
        )
    except KeyError:
        return None


def counterparts(source: Pair, instance: Pair) -> dict[str, str]:
    """Each source record's canonical line -> its transformed counterpart's, matched by
    id within each variant's prefix and each future (a variant may hold its own record
    under an id the other variant also uses)."""
    mapping = instance.transform.mapping if instance.transform else {}
    sections = [(source.prefix(v), instance.prefix(v)) for v in VARIANTS]
    sections += [(source.future(f), instance.future(f)) for f in FUTURES]
    out = {}
    for old, new in sections:
        by_id = {record.id: record for record in new}
        for record in old:
            found = by_id.get(mapping.get(record.id, record.id))
            if found is not None:
                out[record.canonical_line] = found.canonical_line
    return out


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


EXTERNAL_SYSTEMS = frozenset({"cmd", "http"})
"""Condition targets that run a system outside the audit, which can have an outage."""


def _raised(
    rows: JobRows,
    compressor: Compressor,
    label: str,
    budget: int,
    pair: Pair,
    golds: Mapping[tuple[VariantName, Branch], Gold],
    error: BaseException,
) -> None:
    """Every read of the instance failed because the compressor raised (the stream says
    where: UpdateRaised; an archive's recall raises unwrapped)."""
    site = error if isinstance(error, UpdateRaised) else None
    raised = site.error if site is not None else error
    shared = rows.shared(pair, label, compressor, budget, reader="exact")
    cause = error_cause(raised)
    rows.failed(shared, golds, cause, outcome="error", correct=0)
    failed = len(VARIANTS) * len(BRANCHES)  # both variants stream together: all fail
    rows.raised(label, "deterministic", raised, cause, pair, site, failed,
                source_file(compressor))  # fmt: skip


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
    correspondence = {
        instance.pair_id: counterparts(pair, instance)
        for instance in pairs
        if instance.transform is not None and instance.transform.mapping
    }
    reads = _Reads()
    classes = AnswerMemo()  # each wrong answer classed once for every cell
    golds = {instance.pair_id: golds_of(instance) for instance in pairs}
    plans = {
        instance.pair_id: {variant: plan_variant(instance, variant) for variant in VARIANTS}
        for instance in pairs
    }
    for spec, budget in cells:
        began = time.perf_counter()
        compressor = build(spec)
        # an outage is NA only where a system outside the audit can have one (cmd:, http:):
        # an in-process compressor that says it is "unavailable" raised (it could turn
        # every read it would fail into NA, out of its score)
        external = spec.target in EXTERNAL_SYSTEMS
        identity: dict[tuple[str, str], str] = {}
        cell = JobRows(key, classes=classes)  # kept once the compressor's finish says it held
        try:
            for instance in pairs:
                _run_instance(
                    cell, compressor, spec.label, budget, instance, identity, reads,
                    golds[instance.pair_id], plans[instance.pair_id],
                    correspondence.get(instance.pair_id), external,
                )  # fmt: skip
            # (an external system is audited as it is: its state is its own)
            impure = None if external else _impure(compressor, spec, budget, pairs, plans,
                                                   identity)  # fmt: skip
            if impure is not None:  # no read of it here can be trusted
                cell = JobRows(key, classes=classes)
                for instance in pairs:
                    _raised(cell, compressor, spec.label, budget, instance,
                            golds[instance.pair_id], impure)  # fmt: skip
        finally:
            try:
                compressor.finish()
            except ChatUnavailableError as error:  # a broken protocol: the whole cell is NA
                if not external:
                    raise
                cell = JobRows(key, classes=classes)
                cell.log.lines.append(f"{spec.label} on {pair.pair_id}: unavailable: {error}")
                for instance in pairs:
                    shared = cell.shared(instance, spec.label, compressor, budget, reader="exact")
                    cell.failed(shared, golds[instance.pair_id], f"unavailable: {error}",
                                outcome="na", correct=None)  # fmt: skip
        rows.extend(cell)
        spent = rows.log.seconds.get(spec.label, 0.0) + time.perf_counter() - began
        rows.log.seconds[spec.label] = round(spent, 4)
    return rows


def _impure(
    compressor: Compressor,
    spec: ConditionSpec,
    budget: int,
    pairs: Sequence[Pair],
    plans: Mapping[str, Mapping[VariantName, VariantPlan]],
    identity: Mapping[tuple[str, str], str],
) -> UpdateRaised | None:
    """Whether the source pair's variant A, streamed again without the memo, gives
    other memories than the first time: by the same object after every instance (state
    kept on it, a counter), then by a new one (randomness it caches on itself).  The
    memory string is the only state a deterministic compressor may carry.  Where it
    differs first, as an update error; None when it does not (or nothing to check)."""
    source = next((p for p in pairs if p.transform is None), None)
    if source is None or ("A", "current") not in identity:  # no source, or it raised
        return None
    plan = plans[source.pair_id]["A"]
    prefix, futures = plan
    for how, fresh in (("by the same object, after every instance", False),
                       ("by a new instance", True)):  # fmt: skip
        streamer = build(spec) if fresh else compressor
        try:
            again = stream_variant(streamer, source, "A", budget, None, plan).memories
        except (Exception, SystemExit) as error:  # (where: the update's site, else recall's)
            raised = error.error if isinstance(error, UpdateRaised) else error
            site = error if isinstance(error, UpdateRaised) else UpdateRaised(
                raised, "A", plan, prefix[-1])  # fmt: skip
            site.error = ImpureUpdateError(
                f"the same history streamed again ({how}) raised {type(raised).__name__}: "
                f"{raised}: {_NOT_PURE}"
            )
            return site
        finally:
            if fresh:
                with suppress(Exception):
                    streamer.finish()
        for branch in BRANCHES:
            if again[branch] != identity[("A", branch)]:
                found = ImpureUpdateError(
                    f"the same history streamed again ({how}) gave another {branch} memory: "
                    f"{_NOT_PURE}"
                )
                last = prefix[-1] if branch == "current" else futures[branch][-1]
                return UpdateRaised(found, "A", plan, last)
    return None


_NOT_PURE = (
    "the compressor is not a pure function of (memory, chunk, query, budget), so its "
    "scores would depend on the order the audit ran things in (its only state may be the "
    "memory string: no randomness, counter or state kept on the instance)"
)


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
    renamed: Mapping[str, str] | None = None,
    external: bool = False,
) -> None:
    memo: UpdateMemo = {}
    try:
        streamed = {
            v: stream_variant(compressor, pair, v, budget, memo, plans[v]) for v in VARIANTS
        }
    except ChatUnavailableError as error:  # infrastructure (an external system): NA
        if not external:
            _raised(rows, compressor, label, budget, pair, golds, error)
            return
        rows.log.lines.append(f"{label} on {pair.pair_id}: unavailable: {error}")
        shared = rows.shared(pair, label, compressor, budget, reader="exact")
        rows.failed(shared, golds, f"unavailable: {error}", outcome="na", correct=None)
        return
    except (Exception, SystemExit) as error:  # a plugin that exits is a compressor that raised
        _raised(rows, compressor, label, budget, pair, golds, error)
        return
    same_memory = streamed["A"].memories["current"] == streamed["B"].memories["current"]
    revealed: list[Any] = []
    query = tuple(pair.query)
    identity_instance = pair.transform is None
    mapping = pair.transform.mapping if pair.transform else None
    declared = TRANSFORMS[pair.transform.kind] if pair.transform else None
    reorders = declared is not None and declared.reorders
    check_order = compressor.order_invariant and declared is not None and declared.order_only
    values: list[list[Any]] = []
    for variant in VARIANTS:
        for branch in BRANCHES:
            memory = streamed[variant].memories[branch]
            gold, gold_json = golds[(variant, branch)]
            answer, complete = reads.read(memory, query)
            if branch == "reveal":
                revealed.append(answer)
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
                expected = rename_memory(identity[(variant, branch)], mapping, renamed)
                if expected is not None and reorders:  # arrival order is the transform's
                    equivariant = int(sorted(expected.split("\n")) == sorted(memory.split("\n")))
                elif expected is not None:
                    equivariant = int(expected == memory)
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
                    None,
                ]
            )  # fmt: skip (READ order)
    # collided: one memory for both histories, or one answer to both after the reveal
    # (their right answers differ, so one is wrong): junk bytes that make two memories
    # differ without telling them apart do not escape it
    collision = int(same_memory or (revealed[0] is not None and revealed[0] == revealed[1]))
    rows.add(
        rows.shared(pair, label, compressor, budget, reader="exact", collision=collision), values
    )
