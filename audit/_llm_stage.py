"""The LLM stage of ``audit run``: model-written memories and the LLM reader.

Runs on a stated sample of source pairs (LLM calls are the expensive part): every
(pair instance, condition, budget, repeat) is one unit of six reads per reader,
content-addressed and committed to the run store as it finishes, so a killed run
resumes where it stopped and the cache makes re-sent prompts free.  LLM-written
conditions are read by the exact reader too (a structured log can be resolved);
deterministic conditions are read by the LLM reader only (their exact reads are
in the deterministic stage).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from audit._evaluate import sha256
from audit._exact import read_exact
from audit._llm_reader import judge, reader_request
from audit._store import RunStore, pack_job, table_from_bytes
from audit._transforms_spec import parse_transforms
from compressors import (
    ChatClient,
    ChatResponse,
    ChatUnavailableError,
    ChunkView,
    Compressor,
    build,
    parse_spec,
)
from histories import BRANCHES, FAMILIES, FUTURES, VARIANTS, Branch, Pair, VariantName
from histories._transforms import transform


class LLMStageConfig(BaseModel):
    """The LLM part of a run (in config.json; compared on resume)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reader: str | None = None
    """Backend name reading memories (None: no LLM reader)."""
    reader_model: str | None = None
    writer: str | None = None
    """Backend name writing memories for LLM conditions."""
    writer_model: str | None = None
    conditions: list[str] = Field(default_factory=list)
    sample: int = Field(default=6, ge=1)
    """Source pairs in the LLM stage (taken round-robin over families)."""
    repeats: int = Field(default=2, ge=1, le=100)
    transforms: list[str] = Field(default_factory=lambda: ["identity"])
    use_schema: bool = True
    """Ask the reader for its envelope through JSON schema (off: study formatting)."""


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
    label: str
    budget: int
    repeat: int


def plan_units(
    stage: LLMStageConfig, pairs: Sequence[Pair], budgets: Sequence[int], seed: int
) -> list[Unit]:
    identity = json.dumps(stage.model_dump(mode="json"), sort_keys=True)
    units = []
    for source in sample_pairs(pairs, stage.sample):
        for spec in (parse_transforms(t)[0] for t in stage.transforms):
            for pair in transform(source, spec.kind, spec.count, seed):  # type: ignore[arg-type]
                for label in stage.conditions:
                    compressor = build(parse_spec(label))
                    own = parse_spec(label).budget
                    for budget in [own] if own is not None else budgets:
                        for repeat in range(stage.repeats):
                            text = "\n".join(
                                [
                                    identity,
                                    compressor.label,
                                    str(budget),
                                    str(repeat),
                                    pair.to_json(),
                                ]
                            )
                            key = "llm-" + hashlib.sha256(text.encode()).hexdigest()[:32]
                            units.append(Unit(key, pair, label, budget, repeat))
    return units


async def astream_variant(
    compressor: Compressor, pair: Pair, variant: VariantName, budget: int, repeat: int
) -> tuple[dict[Branch, str], dict[Branch, int]]:
    """stream_variant for any compressor: LLM writers are awaited."""
    from audit._evaluate import _chunk_seed, finish_streams

    async def step(memory: str, records: Any, index: int, over: int) -> tuple[str, int]:
        view = ChunkView(records, pair.render, _chunk_seed(pair, variant, index))
        new = await compressor.aupdate(memory, view, pair.query, budget, repeat)
        if compressor.budgeted and len(new.encode("utf-8")) > budget:
            return "", over + 1
        return new, over

    memory, over = "", 0
    chunks = pair.variants.of(variant).chunks
    for index, chunk in enumerate(chunks):
        memory, over = await step(memory, chunk, index, over)
    states: dict[Branch, tuple[str, int]] = {"current": (memory, over)}
    for future in FUTURES:
        m, o = memory, over
        for offset, chunk in enumerate(pair.futures.of(future)):
            m, o = await step(m, chunk, len(chunks) + offset, o)
        states[future] = (m, o)
    streamed = finish_streams(compressor, pair, variant, budget, states)
    return streamed.memories, streamed.overflow


async def run_unit(
    unit: Unit,
    stage: LLMStageConfig,
    writer: ChatClient | None,
    reader: ChatClient | None,
) -> tuple[list[dict[str, Any]], dict[str, str], list[str]]:
    """Rows, memories and log lines of one unit."""
    compressor = build(parse_spec(unit.label))
    if compressor.uses_llm:
        compressor.client = writer
    pair = unit.pair
    assert pair.gold is not None
    base = {
        "job_key": unit.key,
        "pair_id": pair.pair_id,
        "source_pair_id": pair.source_id,
        "family": pair.family,
        "repeat": unit.repeat,
        "condition": unit.label,
        "compressor": compressor.label,
        "kind": compressor.kind,
        "budget": unit.budget,
        "transform": pair.transform.kind if pair.transform else "identity",
        "transform_index": pair.transform.index if pair.transform else 0,
        "writer_model": stage.writer_model if compressor.uses_llm else None,
    }
    log: list[str] = []
    streamed: dict[str, tuple[dict[Branch, str], dict[Branch, int]] | str] = {}

    async def stream(variant: VariantName) -> None:
        try:
            streamed[variant] = await astream_variant(
                compressor, pair, variant, unit.budget, unit.repeat
            )
        except ChatUnavailableError as error:
            streamed[variant] = f"writer unavailable: {error}"
        except Exception:
            trace = traceback.format_exc()
            log.append(f"{unit.label} on {pair.pair_id} (repeat {unit.repeat}): raised\n{trace}")
            streamed[variant] = "error: " + trace.strip().splitlines()[-1]

    await asyncio.gather(*(stream(v) for v in VARIANTS))
    a, b = streamed["A"], streamed["B"]
    collision = None if isinstance(a, str) or isinstance(b, str) else int(
        a[0]["current"] == b[0]["current"]
    )  # fmt: skip
    rows: list[dict[str, Any]] = []
    memories: dict[str, str] = {}

    async def read(variant: VariantName, branch: Branch) -> None:
        gold = pair.gold.of(variant).of(branch)  # type: ignore[union-attr]
        state = streamed[variant]
        common = {**base, "variant": variant, "branch": branch, "gold": json.dumps(gold),
                  "collision": collision}  # fmt: skip
        if isinstance(state, str):  # no memory: writer NA, or the compressor raised
            failed = state.startswith("error")
            readers = ["exact"] if compressor.uses_llm else []
            readers += [stage.reader or "llm"] if reader is not None else []
            for name in readers:
                rows.append({**common, "reader": name, "outcome": "error" if failed else "na",
                             "correct": 0 if failed else None, "error": state})  # fmt: skip
            return
        memory = state[0][branch]
        digest = sha256(memory)
        memories.setdefault(digest, memory)
        exact = read_exact(memory, pair.query, gold)
        shared = {**common, "memory_bytes": len(memory.encode("utf-8")), "memory_sha256": digest,
                  "overflow": state[1][branch]}  # fmt: skip
        adequate = None if exact.outcome == "unparsed" else int(exact.adequate)
        if compressor.uses_llm:
            rows.append(
                {
                    **shared,
                    "reader": "exact",
                    "outcome": exact.outcome,
                    "correct": int(exact.outcome == "pass"),
                    "adequate": adequate,
                    "answer": None if exact.answer is None else json.dumps(exact.answer),
                }
            )
        if reader is None:
            return
        request = reader_request(
            memory, pair.query, use_schema=stage.use_schema, repeat=unit.repeat,
            tag=f"reader:{stage.reader}",
        )  # fmt: skip
        try:
            response: ChatResponse | None = await reader.chat(request)
        except Exception as error:  # a client bug must not lose the read: record NA
            log.append(f"reader failed on {pair.pair_id}: {error!r}")
            response = None
        verdict = judge(response, gold, exact)
        usage = dict(response.usage) if response is not None else {}
        rows.append(
            {
                **shared,
                "reader": stage.reader or "llm",
                "reader_model": (response.model if response else None) or stage.reader_model,
                "outcome": verdict.outcome,
                "correct": verdict.correct,
                "correct_lenient": verdict.correct_lenient,
                "adequate": adequate,
                "answer": None if verdict.answer is None else json.dumps(verdict.answer),
                "raw_answer": None if response is None else (response.content or "")[:2000],
                "finish_reason": response.finish_reason if response else None,
                "reasoning_chars": len(response.reasoning or "") if response else None,
                "tokens_prompt": usage.get("prompt_tokens"),
                "tokens_completion": usage.get("completion_tokens"),
                "latency_s": round(response.latency_s, 4) if response else None,
                "cache_hit": int(response.cached) if response else None,
                "error": response.error if response else "reader client raised",
            }
        )

    await asyncio.gather(*(read(v, b) for v in VARIANTS for b in BRANCHES))
    order = {(v, b): i for i, (v, b) in enumerate((v, b) for v in VARIANTS for b in BRANCHES)}
    rows.sort(key=lambda r: (order[(r["variant"], r["branch"])], r["reader"] != "exact"))
    return rows, memories, log


async def run_stage(
    units: Sequence[Unit],
    stage: LLMStageConfig,
    store: RunStore,
    writer: ChatClient | None,
    reader: ChatClient | None,
    on_done: Callable[[list[str], pa.Table], object],
    concurrency: int = 16,
) -> None:
    """Run the units not yet in the store, committing each as it finishes."""
    done = store.finished_jobs()
    todo = [u for u in units if u.key not in done]
    gate = asyncio.Semaphore(concurrency)

    async def one(unit: Unit) -> None:
        async with gate:
            rows, memories, log = await run_unit(unit, stage, writer, reader)
        packed = pack_job(unit.key, rows, memories, log)
        if store.add_job(packed):
            on_done(log, table_from_bytes(packed.results))

    await asyncio.gather(*(one(u) for u in todo))
