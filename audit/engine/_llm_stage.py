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

from audit.engine._exact import read_exact
from audit.engine._llm_reader import judge, reader_request
from audit.engine._rows import JobRows, golds_of, sha256
from audit.engine._streaming import Streamed, astream_variant, plan_variant
from audit.plan import LLMStagePlan, cells_of
from audit.rundir import RunStore, table_from_bytes
from compressors import (
    ChatClient,
    ChatResponse,
    ChatUnavailableError,
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
    versions = {spec.label: build(spec).label for spec in stage.conditions}
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


async def run_unit(
    unit: Unit,
    stage: LLMStagePlan,
    writer: ChatClient | None,
    reader: ChatClient | None,
) -> JobRows:
    """Rows, memories and log lines of one unit."""
    compressor = build(unit.condition)
    if compressor.uses_llm:
        compressor.client = writer
    pair, label = unit.pair, unit.condition.label
    golds = golds_of(pair)
    rows = JobRows(unit.key, llm=True)
    writer_model = stage.writer_model if compressor.uses_llm else None
    streamed: dict[VariantName, Streamed | str] = {}

    async def stream(variant: VariantName) -> None:
        try:
            streamed[variant] = await astream_variant(
                compressor, pair, variant, unit.budget, unit.repeat, plan_variant(pair, variant)
            )
        except ChatUnavailableError as error:
            streamed[variant] = f"writer unavailable: {error}"
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
        common: dict[str, Any] = {
            "variant": variant, "branch": branch, "gold": gold_json, "adequate": adequate,
            "memory_bytes": len(memory.encode("utf-8")), "memory_sha256": digest,
            "overflow": state.overflow[branch], "writer_model": writer_model,
        }  # fmt: skip
        if compressor.uses_llm:
            found[(variant, branch, "exact")] = rows.read(
                **common,
                outcome=exact.outcome,
                correct=int(exact.outcome == "pass"),
                answer=None if exact.answer is None else json.dumps(exact.answer),
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
    on_done: Callable[[list[str], pa.Table], object],
    concurrency: int = 16,
) -> None:
    """Run the units not yet in the store, committing each as it finishes."""
    done = store.finished_jobs()
    todo = [u for u in units if u.key not in done]
    gate = asyncio.Semaphore(concurrency)

    async def one(unit: Unit) -> None:
        async with gate:
            rows = await run_unit(unit, stage, writer, reader)
        packed = rows.pack()
        if store.add_job(packed):
            on_done(rows.log, table_from_bytes(packed.results))

    await asyncio.gather(*(one(u) for u in todo))
