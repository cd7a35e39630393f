"""The LLM stage of ``audit run``: model-written memories and the LLM reader.

It runs on a stated sample of source pairs; every (pair instance, condition, budget,
repeat) is one unit of six reads per reader, committed to the store as it finishes.
LLM-written conditions are read by the exact reader too; deterministic ones by the LLM
reader only (their exact reads are the deterministic stage's).  A writer's answers are
kept per update (``WriterLog``), so each memory carries the figures of the updates on
its path; a memory whose path holds a cut-off or empty answer (``writer_truncated``,
``writer_empty``), or that repeats its prompt's instructions (``writer_echo``), is the
compressor's failure: scored 0, never a wrong log, and the LLM reader is not asked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from audit.engine._exact import read_exact
from audit.engine._llm_reader import judge, reader_request
from audit.engine._progress import client_roles
from audit.engine._rows import JobRows, error_cause, golds_of, sha256, source_file
from audit.engine._streaming import (
    Streamed,
    UpdateRaised,
    VariantPlan,
    astream_variant,
    plan_variant,
)
from audit.plan import LLMStagePlan, cells_of
from audit.rundir import RunStore, table_from_bytes
from audit.scoring import READER_CONTROL
from compressors import (
    ChatClient,
    ChatRequest,
    ChatResponse,
    ChatUnavailableError,
    ChunkView,
    Compressor,
    ConditionSpec,
    build,
)
from histories import BRANCHES, FAMILIES, VARIANTS, Branch, Pair, VariantName, transform


def sample_pairs(pairs: Sequence[Pair], n: int) -> list[Pair]:
    """Round-robin over families in registry order: a stated, reproducible sample."""
    by_family: dict[str, list[int]] = {}  # indexes: pairs held as lines stay lines
    for index, pair in enumerate(pairs):
        by_family.setdefault(pair.family, []).append(index)
    order = [f for f in FAMILIES if f in by_family] + [f for f in by_family if f not in FAMILIES]
    chosen: list[int] = []
    depth = 0
    while len(chosen) < min(n, len(pairs)):
        for family in order:
            if depth < len(by_family[family]) and len(chosen) < n:
                chosen.append(by_family[family][depth])
        depth += 1
    return [pairs[index] for index in chosen]


@dataclass(frozen=True)
class Unit:
    key: str
    pair: Pair
    condition: ConditionSpec
    budget: int
    repeat: int


def plan_units(
    stage: LLMStagePlan, pairs: Sequence[Pair], budgets: Sequence[int], seed: int
) -> list[Unit]:
    """Every unit of the stage, keyed by what determines its rows."""
    identity = json.dumps(stage.model_dump(mode="json"), sort_keys=True)
    cells = cells_of(stage.conditions, budgets)
    # what names a condition's rows: its compressor's version, and its parameters when
    # it has any (two parameter sets of one compressor are two units; a condition
    # without parameters keeps the key it always had, so older runs still resume)
    versions = {
        spec.label: build(spec).label + (f" {spec.label}" if spec.params else "")
        for spec in stage.conditions
    }
    units = []
    for source in sample_pairs(pairs, stage.sample):
        for spec in stage.transforms:
            for instance in transform(source, spec.kind, spec.count, seed):
                text = instance.to_json()
                # streamed as a pairs file gives it, like the deterministic stage's:
                # the generator's own objects tell its task records from its
                # distractors (which fields were set, the order they were made in)
                pair = Pair.model_validate_json(text)
                for condition, budget in cells:
                    for repeat in range(stage.repeats):
                        parts = [
                            identity,
                            versions[condition.label],
                            str(budget),
                            str(repeat),
                            text,
                        ]
                        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]
                        units.append(Unit(f"llm-{digest}", pair, condition, budget, repeat))
    return units


WriterFailure = Literal["writer_truncated", "writer_empty", "writer_echo"]

ECHO_SHARE = 0.5
"""A memory whose 8-word runs are at least this share the prompt's instructions'
echoes its prompt (``echoes``)."""
_RUN = 8


def _runs(text: str) -> set[tuple[str, ...]]:
    words = text.split()
    return {tuple(words[i : i + _RUN]) for i in range(len(words) - _RUN + 1)}


def echoes(memory: str, instructions: Collection[str]) -> tuple[int, int]:
    """(runs of 8 words the memory shares with the instructions, the memory's runs).
    The instructions are the system messages the writer was sent (its rules and task,
    never the history it was given): a memory that is mostly their words repeats its
    prompt (a small model's habit) and keeps nothing a reader could use."""
    mine = _runs(memory)
    theirs: set[tuple[str, ...]] = set()
    for text in instructions:
        theirs |= _runs(text)
    return len(mine & theirs), len(mine)


def echo_failure(shared: int, runs: int) -> bool:
    return runs > 0 and shared >= ECHO_SHARE * runs


@dataclass
class WriterLog:
    """A ``ChatClient`` between an LLM compressor and its backend that keeps every
    answer of one variant's stream, grouped by update (``observe`` marks each)."""

    client: ChatClient | None
    updates: list[list[ChatResponse]] = field(default_factory=list)
    instructions: dict[str, None] = field(default_factory=dict)
    """The system messages sent, each once, in order (``echoes``)."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The client's answer, kept.  Whatever the client raises (or a non-answer it
        returns) is its failure, not the compressor's: ``ChatUnavailableError``, so the
        reads are NA, never scored wrong."""
        if self.client is None:
            raise ChatUnavailableError("no writer backend was given (--writer)")
        for message in request.messages:
            if message.role == "system":
                self.instructions.setdefault(message.content, None)
        try:
            response = await self.client.chat(request)
        except Exception as error:
            raise ChatUnavailableError(
                f"the writer's chat client failed: {type(error).__name__}: {error}"
            ) from error
        if not isinstance(response, ChatResponse):
            raise ChatUnavailableError(
                f"the writer's chat client returned {type(response).__name__}, not a ChatResponse"
            )
        if not self.updates:
            self.updates.append([])
        self.updates[-1].append(response)
        return response


def observe(compressor: Compressor, writer: ChatClient | None) -> WriterLog:
    """Give ``compressor`` a ``WriterLog`` over ``writer`` and mark each of its updates."""
    log = WriterLog(writer)
    compressor.client = log
    inner = compressor.aupdate

    async def aupdate(
        memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int, repeat: int = 0
    ) -> str:
        log.updates.append([])
        return await inner(memory, chunk, query_keys, budget, repeat)

    compressor.aupdate = aupdate  # type: ignore[method-assign]
    return log


def _complete_json(content: str | None) -> bool:
    """A whole JSON object or array (a cut-off that fell after it: trailing padding)."""
    try:
        return isinstance(json.loads(content or ""), dict | list)
    except (ValueError, RecursionError):
        return False


def answer_failure(response: ChatResponse) -> WriterFailure | None:
    """``writer_truncated``: stopped at the token limit (reasoning included), unless
    the answer is a whole JSON document; ``writer_empty``: no content at all (an
    answer that landed only in the reasoning field is not a memory)."""
    if response.finish_reason == "length" and not _complete_json(response.content):
        return "writer_truncated"
    if not (response.content or "").strip():
        return "writer_empty"
    return None


@dataclass(frozen=True)
class WriterFigures:
    """What the updates that wrote one memory say."""

    finish_reason: str | None
    """Of the first update that failed, else of the last update."""
    reasoning_tokens: int | None
    """Summed over the updates; a server's ``completion_tokens_details.reasoning_tokens``,
    0 for an answer with no reasoning text; None when a server did not say."""
    content_tokens: int | None
    """Completion tokens less reasoning tokens, summed; None when unknown."""
    reasoning_chars: int
    failure: WriterFailure | None
    error: str | None
    """What failed, for the ``error`` column."""

    def columns(self) -> dict[str, Any]:
        return {
            "writer_finish_reason": self.finish_reason,
            "writer_reasoning_tokens": self.reasoning_tokens,
            "writer_content_tokens": self.content_tokens,
            "writer_reasoning_chars": self.reasoning_chars,
        }


def _tokens(response: ChatResponse) -> tuple[int | None, int | None]:
    """(reasoning, content) tokens of one answer."""
    usage = response.usage
    reasoning = usage.get("reasoning_tokens")
    if reasoning is None and not response.reasoning:
        reasoning = 0
    completion = usage.get("completion_tokens")
    content = None if completion is None or reasoning is None else completion - reasoning
    return reasoning, content


def _sum(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def summarize_path(updates: Sequence[Sequence[ChatResponse]]) -> WriterFigures:
    """The figures of a memory written by ``updates`` (in order)."""
    answers = [r for update in updates for r in update]
    tokens = [_tokens(r) for r in answers]
    for number, update in enumerate(updates, start=1):
        for response in update:
            failure = answer_failure(response)
            if failure is None:
                continue
            reasoning, content = _tokens(response)
            what = (
                "cut off at its token limit"
                if failure == "writer_truncated"
                else "answered nothing (empty content)"
            )
            error = (
                f"LLM writer {what} in update {number} of {len(updates)} "
                f"(finish_reason {response.finish_reason}; reasoning tokens "
                f"{'unknown' if reasoning is None else reasoning}, content tokens "
                f"{'unknown' if content is None else content}, reasoning characters "
                f"{len(response.reasoning or '')})"
            )
            return WriterFigures(
                response.finish_reason,
                _sum([t[0] for t in tokens]),
                _sum([t[1] for t in tokens]),
                sum(len(r.reasoning or "") for r in answers),
                failure,
                error,
            )
    return WriterFigures(
        answers[-1].finish_reason if answers else None,
        _sum([t[0] for t in tokens]) if answers else None,
        _sum([t[1] for t in tokens]) if answers else None,
        sum(len(r.reasoning or "") for r in answers),
        None,
        None,
    )


def branch_figures(
    updates: Sequence[Sequence[ChatResponse]], plan: VariantPlan
) -> dict[Branch, WriterFigures]:
    """Per branch, the figures of its path: the prefix's updates, then its future's (the
    order the streaming loop makes them in)."""
    prefix, futures = plan
    total = len(prefix) + sum(len(chunks) for chunks in futures.values())
    if len(updates) != total:
        raise RuntimeError(f"expected {total} writer updates, saw {len(updates)}")
    head = list(updates[: len(prefix)])
    paths: dict[Branch, list[Sequence[ChatResponse]]] = {"current": head}
    at = len(prefix)
    for future, chunks in futures.items():
        paths[future] = head + list(updates[at : at + len(chunks)])
        at += len(chunks)
    return {branch: summarize_path(path) for branch, path in paths.items()}


async def run_unit(
    unit: Unit,
    stage: LLMStagePlan,
    writer: ChatClient | None,
    reader: ChatClient | None,
) -> JobRows:
    """Rows, memories and log lines of one unit."""
    compressor = build(unit.condition)
    pair, label = unit.pair, unit.condition.label
    golds = golds_of(pair)
    rows = JobRows(unit.key, llm=True)
    writer_model = stage.writer_model if compressor.uses_llm else None
    streamed: dict[VariantName, Streamed | str] = {}
    figures: dict[VariantName, dict[Branch, WriterFigures]] = {}
    instructions: dict[VariantName, list[str]] = {}
    reader_name = stage.reader or "llm"
    readers = (["exact"] if compressor.uses_llm else []) + ([reader_name] if reader else [])
    failures: dict[VariantName, tuple[BaseException, str, UpdateRaised | None]] = {}

    async def stream(variant: VariantName) -> None:
        plan = plan_variant(pair, variant)
        # an LLM compressor per variant, so each stream's answers are kept apart
        streaming = build(unit.condition) if compressor.uses_llm else compressor
        log = observe(streaming, writer) if compressor.uses_llm else None
        try:
            streamed[variant] = await astream_variant(
                streaming, pair, variant, unit.budget, unit.repeat, plan
            )
            if log is not None:
                figures[variant] = branch_figures(log.updates, plan)
                instructions[variant] = list(log.instructions)
        except ChatUnavailableError as error:
            streamed[variant] = f"unavailable: {error}"
        except Exception as error:  # the stream says where: UpdateRaised
            where = error if isinstance(error, UpdateRaised) else None
            raised = where.error if where is not None else error
            cause = error_cause(raised)
            streamed[variant] = "error: " + cause
            failures[variant] = (raised, cause, where)

    try:
        await asyncio.gather(*(stream(v) for v in VARIANTS))
    finally:
        try:
            if type(compressor).finish is not Compressor.finish:  # no thread for a no-op
                await asyncio.to_thread(compressor.finish)
        except ChatUnavailableError as error:  # a broken protocol: the whole unit is NA
            streamed = {v: f"unavailable: {error}" for v in VARIANTS}
    for variant in VARIANTS:  # A before B, however their streams interleaved
        if variant not in failures:
            continue
        raised, cause, where = failures[variant]
        if streamed[variant] == "error: " + cause:  # not NA after all (a broken protocol)
            reads = len(BRANCHES) * len(readers)
            rows.raised(label, "llm", raised, cause, pair, where, reads, source_file(compressor))
    a, b = streamed["A"], streamed["B"]
    collision = (
        None
        if isinstance(a, str) or isinstance(b, str)
        else int(a.memories["current"] == b.memories["current"])
    )
    found: dict[tuple[VariantName, Branch, str], list[Any]] = {}

    async def read(variant: VariantName, branch: Branch) -> None:
        gold, gold_json = golds[(variant, branch)]
        state = streamed[variant]
        if isinstance(state, str):  # no memory: writer NA, or the compressor raised
            failed = state.startswith("error")
            for name in readers:
                found[(variant, branch, name)] = rows.read(
                    variant=variant, branch=branch, outcome="error" if failed else "na",
                    correct=0 if failed else None, gold=gold_json, error=state,
                    writer_model=writer_model,
                )  # fmt: skip
            return
        memory = state.memories[branch]
        digest = sha256(memory)
        rows.keep(memory, digest)
        exact = read_exact(memory, pair.query, gold)
        adequate = None if exact.outcome == "unparsed" else int(exact.adequate)
        written = figures[variant][branch] if variant in figures else None
        common: dict[str, Any] = {
            "variant": variant, "branch": branch, "gold": gold_json, "adequate": adequate,
            "memory_bytes": len(memory.encode("utf-8")), "memory_sha256": digest,
            "overflow": state.overflow[branch], "writer_model": writer_model,
            **(written.columns() if written is not None else {}),
        }  # fmt: skip
        failure: WriterFailure | None = written.failure if written is not None else None
        error = written.error if written is not None else None
        if failure is None and variant in instructions:
            shared, runs = echoes(memory, instructions[variant])
            if echo_failure(shared, runs):
                failure = "writer_echo"
                error = (
                    f"the LLM writer's memory repeats its prompt's instructions ({shared} of "
                    f"its {runs} runs of {_RUN} words are theirs)"
                )
        if compressor.uses_llm:
            found[(variant, branch, "exact")] = rows.read(
                **common,
                outcome=failure or exact.outcome,
                correct=0 if failure else int(exact.outcome == "pass"),
                answer=None if exact.answer is None else json.dumps(exact.answer),
                error=error,
            )
        if reader is None:
            return
        if failure is not None:  # the writer failed: no memory worth asking about
            found[(variant, branch, reader_name)] = rows.read(
                **common, reader_model=stage.reader_model, outcome=failure, correct=0,
                correct_lenient=0, error=error,
            )  # fmt: skip
            return
        request = reader_request(
            memory, pair.query, use_schema=stage.use_schema, repeat=unit.repeat,
            tag=f"reader:{stage.reader}",
        )  # fmt: skip
        try:
            response: ChatResponse | None = await reader.chat(request)
        except Exception as error:  # a client bug must not lose the read: record NA
            rows.log.lines.append(f"reader failed on {pair.pair_id}: {error!r}")
            response = None
        verdict = judge(response, gold, exact)
        usage = dict(response.usage) if response is not None else {}
        found[(variant, branch, reader_name)] = rows.read(
            **common,
            reader_model=(response.model if response else None) or stage.reader_model,
            outcome=verdict.outcome,
            correct=verdict.correct,
            correct_lenient=verdict.correct_lenient,
            answer=None if verdict.answer is None else json.dumps(verdict.answer),
            raw_answer=None if response is None else (response.content or "")[:2000],
            finish_reason=response.finish_reason if response else None,
            reasoning_chars=len(response.reasoning or "") if response else None,
            tokens_prompt=usage.get("prompt_tokens"),
            tokens_completion=usage.get("completion_tokens"),
            latency_s=round(response.latency_s, 4) if response else None,
            cache_hit=int(response.cached) if response else None,
            error=_reader_error(response),
        )

    await asyncio.gather(*(read(v, b) for v in VARIANTS for b in BRANCHES))
    for variant in VARIANTS:  # reads in a fixed order: A then B, by branch, exact first
        for branch in BRANCHES:
            for name in readers:
                values = found.get((variant, branch, name))
                if values is not None:
                    shared = rows.shared(
                        pair, label, compressor, unit.budget, reader=name, repeat=unit.repeat,
                        collision=collision,
                    )  # fmt: skip
                    rows.add(shared, [values])
    return rows


def _reader_error(response: ChatResponse | None) -> str | None:
    if response is None:
        return "reader client raised"
    if response.rejected is not None:
        return f"request refused (HTTP {response.status}): {response.rejected}"
    return response.error


def planned_requests(
    units: Sequence[Unit], writer: ChatClient | None, reader: ChatClient | None
) -> tuple[tuple[str, int], ...]:
    """The requests ``units`` will ask, by role (``RequestEstimate``): an LLM writer one
    per update of each variant's stream (the prefix's chunks, then every future's), an
    LLM reader one per read (both variants, every branch).  An upper bound for the
    built-in writers, which ask once an update: a writer that fails spares the reads of
    its memory."""
    writes = reads = 0
    uses_llm: dict[str, bool] = {}
    for unit in units:
        label = unit.condition.label
        if label not in uses_llm:
            uses_llm[label] = build(unit.condition).uses_llm
        if uses_llm[label] and writer is not None:
            for variant in VARIANTS:
                prefix, futures = plan_variant(unit.pair, variant)
                writes += len(prefix) + sum(len(chunks) for chunks in futures.values())
        if reader is not None:
            reads += len(VARIANTS) * len(BRANCHES)
    counts = {"writer": writes, "reader": reads, "writer+reader": writes + reads}
    return tuple((role, counts[role]) for role, _ in client_roles(writer, reader))


async def run_stage(
    units: Sequence[Unit],
    stage: LLMStagePlan,
    store: RunStore,
    writer: ChatClient | None,
    reader: ChatClient | None,
    on_done: Callable[[list[str], pa.Table, str], object],
    concurrency: int = 16,
    redo: Collection[str] = (),
    note: Callable[[str], object] | None = None,
) -> None:
    """Run the units not yet in the store (and those in ``redo``: units whose reads an
    outage left NA, whose new rows replace the old), committing each as it finishes.

    The reader's check comes first: the units of ``full`` (docs/method.md, "Can the
    reader read?") run before any other, so a reader's reading of whole histories is
    known early; ``note`` hears when that step starts and ends."""
    done = store.finished_jobs()
    todo = [u for u in units if u.key not in done or u.key in redo]
    check = [u for u in todo if reader is not None and u.condition.target == READER_CONTROL]
    gate = asyncio.Semaphore(concurrency)

    async def one(unit: Unit) -> None:
        async with gate:
            rows = await run_unit(unit, stage, writer, reader)
        packed = rows.pack()
        if store.add_job(packed, replace=unit.key in redo):
            on_done(rows.log.lines, table_from_bytes(packed.results), unit.key)

    if check:
        began = time.monotonic()
        if note is not None:
            share = (
                "the stage's only unit" if len(todo) == 1 else f"{len(check)} of {len(todo)} units"
            )
            note(f"reader's check: reading {READER_CONTROL}, the whole history, first ({share})")
        await asyncio.gather(*(one(u) for u in check))
        if note is not None:
            note(f"reader's check: read in {time.monotonic() - began:.0f} s")
    first = {u.key for u in check}
    await asyncio.gather(*(one(u) for u in todo if u.key not in first))
