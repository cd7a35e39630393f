"""The LLM stage of ``audit run``: model-written memories and the LLM reader.

Runs on a stated sample of source pairs (LLM calls are the expensive part): every
(pair instance, condition, budget, repeat) is one unit of six reads per reader,
content-addressed and committed to the run store as it finishes, so a killed run
resumes where it stopped and the cache makes re-sent prompts free.  LLM-written
conditions are read by the exact reader too (a structured log can be resolved);
deterministic conditions are read by the LLM reader only (their exact reads are
in the deterministic stage).

An LLM writer's every answer is kept while it streams (``WriterLog``), grouped by
update, so each memory carries the figures of the updates that wrote it (its
path: the prefix's updates, then its future's): ``writer_finish_reason`` of the
update that decided it (the first that failed, else the last), and reasoning and
content tokens and reasoning characters summed over the path.  A memory whose path
holds an answer cut off at the token limit (``writer_truncated``) or an empty answer
(``writer_empty``) is the compressor's failure: every read of it gets that outcome,
scored 0 and never counted as a wrong log, and the LLM reader is not asked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import traceback
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from audit.engine._exact import read_exact
from audit.engine._llm_reader import judge, reader_request
from audit.engine._rows import JobRows, golds_of, sha256
from audit.engine._streaming import Streamed, VariantPlan, astream_variant, plan_variant
from audit.plan import LLMStagePlan, cells_of
from audit.rundir import RunStore, table_from_bytes
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
    by_family: dict[str, list[Pair]] = {}
    for pair in pairs:
        by_family.setdefault(pair.family, []).append(pair)
    order = [f for f in FAMILIES if f in by_family] + [f for f in by_family if f not in FAMILIES]
    chosen: list[Pair] = []
    depth = 0
    while len(chosen) < min(n, len(pairs)):
        for family in order:
            if depth < len(by_family[family]) and len(chosen) < n:
                chosen.append(by_family[family][depth])
        depth += 1
    return chosen


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
            for pair in transform(source, spec.kind, spec.count, seed):
                text = pair.to_json()
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


WriterFailure = Literal["writer_truncated", "writer_empty"]


@dataclass
class WriterLog:
    """A ``ChatClient`` between an LLM compressor and its backend that keeps every
    answer of one variant's stream, grouped by update (``observe`` marks each)."""

    client: ChatClient | None
    updates: list[list[ChatResponse]] = field(default_factory=list)

    async def chat(self, request: ChatRequest) -> ChatResponse:
        """The client's answer, kept.  Whatever the client raises (or a non-answer it
        returns) is its failure, not the compressor's: ``ChatUnavailableError``, so the
        reads are NA, never scored wrong."""
        if self.client is None:
            raise ChatUnavailableError("no writer backend was given (--writer)")
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
        except ChatUnavailableError as error:
            streamed[variant] = f"unavailable: {error}"
        except Exception:
            trace = traceback.format_exc()
            rows.log.append(f"{label} on {pair.pair_id} (repeat {unit.repeat}): raised\n{trace}")
            streamed[variant] = "error: " + trace.strip().splitlines()[-1]

    await asyncio.gather(*(stream(v) for v in VARIANTS))
    a, b = streamed["A"], streamed["B"]
    collision = (
        None
        if isinstance(a, str) or isinstance(b, str)
        else int(a.memories["current"] == b.memories["current"])
    )
    reader_name = stage.reader or "llm"
    readers = (["exact"] if compressor.uses_llm else []) + ([reader_name] if reader else [])
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
        failure = written.failure if written is not None else None
        if compressor.uses_llm:
            found[(variant, branch, "exact")] = rows.read(
                **common,
                outcome=failure or exact.outcome,
                correct=0 if failure else int(exact.outcome == "pass"),
                answer=None if exact.answer is None else json.dumps(exact.answer),
                error=written.error if written is not None else None,
            )
        if reader is None:
            return
        if failure is not None:  # the writer failed: no memory worth asking about
            found[(variant, branch, reader_name)] = rows.read(
                **common, reader_model=stage.reader_model, outcome=failure, correct=0,
                correct_lenient=0, error=written.error if written is not None else None,
            )  # fmt: skip
            return
        request = reader_request(
            memory, pair.query, use_schema=stage.use_schema, repeat=unit.repeat,
            tag=f"reader:{stage.reader}",
        )  # fmt: skip
        try:
            response: ChatResponse | None = await reader.chat(request)
        except Exception as error:  # a client bug must not lose the read: record NA
            rows.log.append(f"reader failed on {pair.pair_id}: {error!r}")
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


async def run_stage(
    units: Sequence[Unit],
    stage: LLMStagePlan,
    store: RunStore,
    writer: ChatClient | None,
    reader: ChatClient | None,
    on_done: Callable[[list[str], pa.Table, str], object],
    concurrency: int = 16,
    redo: Collection[str] = (),
) -> None:
    """Run the units not yet in the store (and those in ``redo``: units whose reads an
    outage left NA, whose new rows replace the old), committing each as it finishes."""
    done = store.finished_jobs()
    todo = [u for u in units if u.key not in done or u.key in redo]
    gate = asyncio.Semaphore(concurrency)

    async def one(unit: Unit) -> None:
        async with gate:
            rows = await run_unit(unit, stage, writer, reader)
        packed = rows.pack()
        if store.add_job(packed, replace=unit.key in redo):
            on_done(rows.log, table_from_bytes(packed.results), unit.key)

    await asyncio.gather(*(one(u) for u in todo))
