"""``execute``: plan the jobs of a run, run them (in parallel), store, score, summarize.

A job is one source pair through every cell and transform; its key is a hash of
everything that determines its rows, so a run directory can be resumed: finished
jobs are skipped, and a changed plan is refused, never mixed in.  Jobs run on a
local process pool; each finished job is committed to the store as it arrives, and
at the end the result files are rewritten from the store in plan order.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa

from audit.engine._jobs import run_job
from audit.engine._llm_stage import Unit, plan_units, run_stage
from audit.engine._streaming import share_identical_records
from audit.plan import Cell, LLMStagePlan, RunPlan, TransformSpec
from audit.rundir import (
    LOG_FILE,
    RESULTS_CSV,
    ClientCounters,
    Invocation,
    LLMStageCost,
    PackedJob,
    RunStore,
    StageCost,
    append_costs,
    append_csv,
    concat_results,
    csv_header,
    csv_rows,
    label_readers,
    prepare_directory,
    table_from_bytes,
    write_results,
    write_summary,
)
from audit.scoring import SCORED_COLUMNS, summarize
from compressors import ChatClient, build, deterministic_builtins
from histories import Pair


@dataclass(frozen=True)
class Job:
    key: str
    pair_json: str
    cells: tuple[Cell, ...]
    size: int = 0
    """Bytes of the pair's JSON: a job's cost grows with them (used to start big jobs
    first).  Bytes predict it better than the record count: longer records overflow
    the budget sooner, and every update past that point ranks."""


def plan_jobs(plan: RunPlan, pairs: Sequence[Pair]) -> list[Job]:
    """One job per source pair, keyed by the plan's identity and the pair's JSON."""
    cells = tuple(plan.cells)
    identity = json.dumps(
        {
            "cells": [(spec.label, budget) for spec, budget in cells],
            "versions": plan.compressor_versions,
            "transforms": [str(t) for t in plan.transforms],
            "seed": plan.seed,
            "reader": plan.reader,
        },
        sort_keys=True,
    )
    jobs = []
    for pair in pairs:
        text = pair.to_json()
        key = hashlib.sha256(f"{identity}\n{text}".encode()).hexdigest()[:32]
        jobs.append(Job(key, text, cells, len(text)))
    return jobs


def _execute(job: Job, transforms: Sequence[TransformSpec], seed: int) -> PackedJob:
    """Run one job and serialize it (in the worker process, not the writer)."""
    with _cycle_collection_after(acyclic=builtins_only(job.cells)):
        # in a function of its own: its locals (every instance of the pair, the rows)
        # are freed before the collection at the end, which then has less to walk
        return _run_and_pack(job, transforms, seed)


def _run_and_pack(job: Job, transforms: Sequence[TransformSpec], seed: int) -> PackedJob:
    pair = share_identical_records(Pair.model_validate_json(job.pair_json))
    return run_job(job.key, pair, job.cells, transforms, seed).pack()


@contextmanager
def _settled_heap() -> Iterator[None]:
    """Exempt everything alive before the jobs (modules, pairs, ...) from cyclic
    garbage collection while they run.

    Otherwise every full collection in the writer walks the whole heap again (it
    made unpickling a finished job 10x slower), and forked workers inherit the same
    burden.  Frozen objects are still freed by reference counting; they return to
    the collector afterwards.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def builtins_only(cells: Sequence[Cell]) -> bool:
    """Whether every condition is a deterministic built-in: code of ours, which leaves
    no reference cycles."""
    return set(deterministic_builtins()).issuperset(spec.target for spec, _ in cells)


@contextmanager
def _cycle_collection_after(acyclic: bool = False) -> Iterator[None]:
    """Hold the cyclic garbage collector off during a job; afterwards, collect the
    youngest generation once, or (``acyclic``) freeze it.

    A job allocates millions of short-lived objects and keeps growing caches; left
    on, the collector ran full collections over every cached record again and again
    (16 % of a job's CPU time in the pilot audit).  Reference counting still frees
    everything at once; only reference cycles wait for the job's end, and with the
    collector off nothing is promoted, so that one young-generation pass sees every
    object the job left behind.

    The deterministic built-in conditions leave no reference cycles (a test checks
    it), so a job of only those has nothing for that pass to find, and the pass
    itself is costly: it walks every reference of the caches the job filled (25 to
    50 ms a job in the pilot audit).  Such a job instead freezes what it left
    (``gc.freeze``, constant time): those objects are still freed by reference
    counting, and never walked again.  A job with any other condition (a plugin, an
    LLM writer) may leave cycles, and gets the collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if acyclic:
            gc.freeze()
        else:
            gc.collect(0)
        if enabled:
            gc.enable()


Executor = Literal["local", "ray"]
EXECUTORS: tuple[Executor, ...] = ("local", "ray")

ProgressCallback = Callable[[int, int], None]
ClientPair = tuple[ChatClient | None, ChatClient | None]
"""(writer, reader) clients for the LLM stage."""
OpenClients = Callable[[], AbstractAsyncContextManager[ClientPair]]


def execute(
    out: Path,
    plan: RunPlan,
    pairs: Sequence[Pair],
    workers: int = 1,
    progress: ProgressCallback | None = None,
    open_clients: OpenClients | None = None,
    executor: Executor = "local",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Run (or resume) every job, then write results.csv/parquet and summary.json.

    ``open_clients`` opens the writer/reader backends for the LLM stage (and closes
    them, stopping an embedded server) when ``plan.llm`` is set.  ``executor``: the
    deterministic jobs on a local process pool of ``workers`` processes, or as Ray
    tasks on the cluster at ``ray_address`` (default: ``RAY_ADDRESS``, else a private
    local Ray with ``workers`` CPUs); the LLM stage runs in this process either way.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}")
    for spec in plan.conditions:  # fail before any work on a bad condition
        build(spec)
    if plan.llm is not None:
        for spec in plan.llm.conditions:
            build(spec)
        if open_clients is None:
            raise ValueError("the run has an LLM stage but no backends were given")
    prepare_directory(out, plan)
    store = RunStore(out)  # StoreFormatError (a RunDirectoryError) for another version's store
    try:
        started = time.perf_counter()
        done = store.finished_jobs()
        planned = plan_jobs(plan, pairs)
        jobs = [job for job in planned if job.key not in done]
        units = plan_units(plan.llm, pairs, plan.budgets, plan.seed) if plan.llm else []
        order = [job.key for job in planned] + [unit.key for unit in units]
        total = len(pairs) + len(units)
        finished = total - len(jobs) - len([u for u in units if u.key not in done])
        if progress:
            progress(finished, total)

        fresh: dict[str, tuple[pa.Table, bytes]] = {}
        """Jobs finished in this invocation: their table and CSV rows, for ``finish``."""

        def committed(log_lines: Sequence[str], table: pa.Table) -> bytes:
            nonlocal finished
            rows = append_csv(out / RESULTS_CSV, table)
            if log_lines:
                with (out / LOG_FILE).open("a", encoding="utf-8") as log:
                    log.write("\n".join(log_lines) + "\n")
            finished += 1
            if progress:
                progress(finished, total)
            return rows

        def record(result: PackedJob) -> None:
            if store.add_job(result):
                table = table_from_bytes(result.results)
                fresh[result.key] = (table, committed(result.log, table))

        cost = StageCost(jobs=len(jobs), executor=executor)
        with _settled_heap():
            if executor == "ray" and jobs:
                cost.cpus = _run_on_ray(jobs, plan, workers, ray_address, record)
            elif workers <= 1 or len(jobs) <= 1:
                for job in jobs:
                    record(_execute(job, plan.transforms, plan.seed))
            else:
                _run_parallel(jobs, plan, workers, record)
        cost.seconds = round(time.perf_counter() - started, 3)
        invocation = Invocation(deterministic=cost)
        if plan.llm is not None and open_clients is not None:
            invocation.llm = asyncio.run(
                _llm_stage(plan.llm, units, store, open_clients, committed)
            )
        append_costs(out, invocation)
        return finish(out, store, plan, order, fresh)
    finally:
        store.close()


async def _llm_stage(
    stage: LLMStagePlan,
    units: Sequence[Unit],
    store: RunStore,
    open_clients: OpenClients,
    committed: Callable[[Sequence[str], pa.Table], object],
) -> LLMStageCost:
    started = time.perf_counter()
    async with open_clients() as (writer, reader):
        await run_stage(units, stage, store, writer, reader, committed)
        if writer is not None and writer is reader:  # one backend serves both roles
            stats = {"writer_and_reader": _counters(writer)}
        else:
            stats = {
                role: _counters(client)
                for role, client in (("writer", writer), ("reader", reader))
                if client is not None
            }
    return LLMStageCost(units=len(units), seconds=round(time.perf_counter() - started, 3), **stats)


def _counters(client: object) -> ClientCounters | None:
    """A backend client's request counters, when it keeps them (a ``BackendClient``)."""
    stats = getattr(client, "stats", None)
    as_dict = getattr(stats, "as_dict", None)
    return ClientCounters.model_validate(as_dict()) if callable(as_dict) else None


def _run_parallel(
    jobs: Sequence[Job], plan: RunPlan, workers: int, record: Callable[[PackedJob], None]
) -> None:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: set[Future[PackedJob]] = set()
        # biggest first (stable: plan order among equals), so no long job starts last
        queue = sorted(jobs, key=lambda job: job.size)
        while queue or pending:
            while queue and len(pending) < workers * 2:
                pending.add(pool.submit(_execute, queue.pop(), plan.transforms, plan.seed))
            completed, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in completed:
                record(future.result())


def _run_on_ray(
    jobs: Sequence[Job],
    plan: RunPlan,
    workers: int,
    address: str | None,
    record: Callable[[PackedJob], None],
) -> int:
    """The jobs as Ray tasks (``_ray``); returns the cluster's CPUs."""
    from audit.engine import _ray  # imports ray itself only now

    cluster = _ray.connect(address, workers)
    try:
        _ray.check_workers(plan.conditions, plan.compressor_versions)
        _ray.run_on_ray(jobs, _execute, (plan.transforms, plan.seed), record, cluster.cpus)
    finally:
        _ray.disconnect()
    return cluster.cpus


def finish(
    out: Path,
    store: RunStore,
    plan: RunPlan,
    order: Sequence[str] = (),
    fresh: Mapping[str, tuple[pa.Table, bytes]] | None = None,
) -> dict[str, Any]:
    """Rewrite results.csv and results.parquet from the store (jobs in plan order),
    and compute summary.json.

    ``fresh`` holds jobs finished by this invocation (table and CSV rows, as
    committed): they are not decoded and encoded again.
    """
    fresh = fresh or {}
    tables: list[pa.Table] = []
    chunks: list[bytes] = [csv_header()]
    for key in store.job_keys(order):
        if key in fresh:
            table, rows = fresh[key]
        else:  # finished by an earlier invocation of this run
            table = store.table(key)
            rows = csv_rows(table)
        tables.append(table)
        chunks.append(rows)
    table = concat_results(tables)

    with ThreadPoolExecutor(max_workers=1) as writer:
        # file writes and Arrow's Parquet encoding release the GIL: they run beside
        # the scoring below
        written = writer.submit(write_results, out, table, chunks)
        scored = [c for c in SCORED_COLUMNS if c in table.column_names]  # all the summary reads
        df = label_readers(table.select(scored).to_pandas()) if table.num_rows else pd.DataFrame()
        meta = {"config": plan.model_dump(mode="json")}
        summary = summarize(df, meta, plan.condition_labels)
        written.result()
    write_summary(out, summary)
    return summary
