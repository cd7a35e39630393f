"""``execute``: plan the jobs of a run, run them (in parallel), store, score, summarize.

A job is one source pair through every cell and transform; its key is a hash of
everything that determines its rows, so a run directory can be resumed: finished
jobs are skipped, and a changed plan is refused, never mixed in.  Jobs run on a
local process pool; each finished job is committed to the store as it arrives, and
at the end the result files are rewritten from the store in plan order.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    ExitStack,
    contextmanager,
    suppress,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa

from audit.engine._jobs import run_job
from audit.engine._llm_stage import plan_units, run_stage
from audit.engine._progress import RunProgress, client_counters, request_tallies
from audit.engine._streaming import share_identical_records
from audit.errors import RunDataError, RunDirectoryError, RunStorageError, Terminated
from audit.plan import Cell, RunPlan, TransformSpec
from audit.rundir import (
    LOG_FILE,
    RESULTS_CSV,
    RESULTS_PARQUET,
    SUMMARY_FILE,
    BackendRecord,
    Determinism,
    Invocation,
    LLMStageCost,
    PackedJob,
    RunManifest,
    RunStore,
    StageCost,
    concat_results,
    csv_header,
    csv_rows,
    file_record,
    label_readers,
    new_run_id,
    prepare_directory,
    record_backends,
    record_costs,
    remove_stale_temps,
    retryable_na_keys,
    table_from_bytes,
    write_atomically,
    write_manifest,
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

ClientPair = tuple[ChatClient | None, ChatClient | None]
"""(writer, reader) clients for the LLM stage."""
OpenClients = Callable[[], AbstractAsyncContextManager[ClientPair]]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _why(error: BaseException) -> str:
    """Why an invocation stopped, in one line."""
    if isinstance(error, Terminated):
        return f"terminated (exit {error.code})"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, SystemExit):
        return f"terminated (exit {error.code})"
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"failed: {text[:300]}"


def execute(
    out: Path,
    plan: RunPlan,
    pairs: Sequence[Pair],
    workers: int = 1,
    progress: RunProgress | None = None,
    open_clients: OpenClients | None = None,
    retry_na: bool = True,
    executor: Executor = "local",
    ray_address: str | None = None,
    measure_backends: bool = True,
) -> dict[str, Any]:
    """Run (or resume) every job, then write results.csv/parquet, summary.json and
    manifest.json.

    ``open_clients`` opens the writer/reader backends for the LLM stage (and closes
    them, stopping an embedded server) when ``plan.llm`` is set; they are opened
    before any work, so a backend that cannot be reached stops the run at once.
    ``retry_na``: LLM units holding reads that are NA for want of a server (an outage
    during an earlier invocation) are run again, their new rows replacing the old.

    ``executor``: the deterministic jobs on a local process pool of ``workers``
    processes, or as Ray tasks on the cluster at ``ray_address`` (default:
    ``RAY_ADDRESS``, else a private local Ray with ``workers`` CPUs; checked before any
    work, as the backends are).  The LLM stage runs in this process either way, and the
    run directory (store, manifest, run id, resume) is the same whichever ran the jobs.

    ``measure_backends``: before the LLM stage, each backend's determinism is measured
    (``audit.backends.measure_determinism``) and recorded in config.json and costs.json.
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
    if executor == "ray":
        from audit.engine import _ray  # imports ray itself only now

        _ray.preflight(ray_address)  # ExecutorError: Ray missing, nothing at the address
    with ExitStack() as exits:
        clients: ClientPair = (None, None)
        runner: asyncio.Runner | None = None
        if plan.llm is not None and open_clients is not None:
            runner = exits.enter_context(asyncio.Runner())
            opened = AsyncExitStack()
            clients = runner.run(opened.enter_async_context(open_clients()))
            exits.callback(runner.run, opened.aclose())
        _resuming, run_id = prepare_directory(out, plan)
        _check_writable(out)
        remove_stale_temps(out)
        store = RunStore(out, run_id)  # RunDirectoryError: another version's or run's store
        exits.callback(store.close)
        return _execute_in(out, plan, pairs, store, run_id, workers, progress, runner,
                           clients, retry_na, measure_backends, executor,
                           ray_address)  # fmt: skip


async def _measure_backends(
    plan: RunPlan, clients: ClientPair, measure: bool = True
) -> dict[str, BackendRecord]:
    """Each LLM backend of the run: what it is, and the determinism probe's figure.

    Measured before the stage, so the figure describes the server the reads meet; a probe
    that fails (the server went away) leaves it unmeasured, and the stage records NA.
    """
    from audit.backends import measure_determinism

    assert plan.llm is not None
    writer, reader = clients
    roles: dict[int, tuple[ChatClient, list[str], str | None]] = {}
    for role, client, name in (
        ("writer", writer, plan.llm.writer),
        ("reader", reader, plan.llm.reader),
    ):
        if client is None:
            continue
        entry = roles.setdefault(id(client), (client, [], name))
        entry[1].append(role)
    records: dict[str, BackendRecord] = {}
    for client, role_names, name in roles.values():
        backend = getattr(client, "backend", None)
        kind = getattr(backend, "kind", None)
        result = None
        unmeasured: str | None = "--no-determinism"
        if measure:
            try:
                result = await measure_determinism(client)
                unmeasured = None if result.compared else "no probe request was answered"
            except Exception as error:
                unmeasured = f"the probe failed ({type(error).__name__})"
        records[name or role_names[0]] = BackendRecord(
            roles=role_names,
            kind=kind,
            model=getattr(client, "model", None),
            mode=getattr(backend, "mode", None) if kind == "local" else "server",
            determinism=None
            if result is None or not result.compared
            else Determinism.model_validate(result.as_dict()),
            measured=_now() if unmeasured is None else None,
            unmeasured=unmeasured,
        )
    return records


def _execute_in(
    out: Path,
    plan: RunPlan,
    pairs: Sequence[Pair],
    store: RunStore,
    run_id: str,
    workers: int,
    progress: RunProgress | None,
    runner: asyncio.Runner | None,
    clients: ClientPair,
    retry_na: bool,
    measure_backends: bool = True,
    executor: Executor = "local",
    ray_address: str | None = None,
) -> dict[str, Any]:
    invocation = Invocation(id=new_run_id(), started=_now())
    manifest: RunManifest | None = None
    try:
        started = time.perf_counter()
        planned = plan_jobs(plan, pairs)
        units = plan_units(plan.llm, pairs, plan.budgets, plan.seed) if plan.llm else []
        order = [job.key for job in planned] + [unit.key for unit in units]
        stored = store.finished_jobs()
        foreign = stored - set(order)
        if foreign:
            raise RunDirectoryError(
                f"{store.path} holds {len(foreign)} finished job(s) this run did not plan: "
                "it belongs to another run and is never merged; move it away to run this "
                "directory again from its own results"
            )
        redo = _keys_to_retry(store, order) if retry_na else set()
        done = stored - redo
        jobs = [job for job in planned if job.key not in done]
        todo_units = [u for u in units if u.key not in done]
        manifest = RunManifest(
            run_id=run_id,
            state="running",
            planned_jobs=[job.key for job in planned],
            planned_units=[unit.key for unit in units],
            finished_jobs=len(planned) - len(jobs),
            finished_units=len(units) - len(todo_units),
        )
        store.record_plan(manifest.planned_jobs, manifest.planned_units)
        write_manifest(out, manifest)
        record_costs(out, invocation)  # listed even if this invocation is killed
        if plan.llm is not None and runner is not None and todo_units:
            measured = runner.run(_measure_backends(plan, clients, measure_backends))
            record_backends(out, measured)
            invocation.backends = measured
        jobs_done = len(planned) - len(jobs)
        units_done = len(units) - len(todo_units)
        if progress:
            progress.begin("deterministic", jobs_done, len(planned))

        fresh: dict[str, pa.Table] = {}
        """Jobs finished in this invocation: their table, for ``finish``."""

        def record(result: PackedJob) -> None:
            nonlocal jobs_done
            if store.add_job(result, replace=result.key in redo):
                fresh[result.key] = table_from_bytes(result.results)
                jobs_done += 1
                if progress:
                    progress.advance("deterministic", jobs_done)

        def committed_unit(table: pa.Table, key: str) -> None:
            nonlocal units_done
            fresh[key] = table
            units_done += 1
            if progress:
                progress.advance("llm", units_done)

        cost = StageCost(jobs=len(jobs), executor=executor)
        with _settled_heap():
            if executor == "ray" and jobs:
                cost.cpus = _run_on_ray(jobs, plan, workers, ray_address, record)
            elif min(workers, len(jobs)) <= 1:
                for job in jobs:
                    record(_execute(job, plan.transforms, plan.seed))
            else:
                _run_parallel(
                    jobs, plan, min(workers, len(jobs)), record
                )  # a process a job at most
        cost.seconds = round(time.perf_counter() - started, 3)
        invocation.deterministic = cost
        record_costs(out, invocation)
        if plan.llm is not None and runner is not None:
            invocation.llm = LLMStageCost(units=len(todo_units))
            if progress:
                progress.begin("llm", units_done, len(units), request_tallies(*clients))
            try:
                runner.run(
                    run_stage(units, plan.llm, store, *clients,
                              lambda _log, table, key: committed_unit(table, key), redo=redo)
                )  # fmt: skip
            finally:
                _llm_counters(invocation.llm, clients, time.perf_counter() - started)
        summary, table = finish(out, store, plan, order, fresh)
        retry = retryable_na_keys(table)
        na_units = len(retry & set(manifest.planned_units))
        na_jobs = len(retry & set(manifest.planned_jobs))
        manifest.finished_jobs = len(planned)
        manifest.finished_units = len(units)
        manifest.na_units = na_units
        manifest.na_jobs = na_jobs
        manifest.rows = table.num_rows
        manifest.files = {
            name: file_record(out / name)
            for name in (RESULTS_CSV, RESULTS_PARQUET, SUMMARY_FILE)
            if (out / name).exists()
        }
        manifest.state = "incomplete" if na_units or na_jobs else "complete"
        write_manifest(out, manifest)
        invocation.outcome = "finished"
        return summary
    except BaseException as error:
        invocation.outcome = _why(error)
        if manifest is not None:
            manifest.state, manifest.stopped = "stopped", invocation.outcome
            with suppress(OSError):  # a full disk: the manifest keeps saying "running"
                write_manifest(out, manifest)
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise RunStorageError(
                f"{error.filename or out}: no space left on device; finished jobs are kept "
                f"in {store.path.name}: free space, then `audit resume {out}`"
            ) from None
        raise
    finally:
        invocation.ended = _now()
        with suppress(OSError, RunDataError):  # best effort: the disk may be full
            record_costs(out, invocation)


def _check_writable(out: Path) -> None:
    """Refuse a run directory that cannot take a file (a read-only medium), before work."""
    probe = out / f".write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise RunStorageError(
            f"{out}: {error.strerror}: the run cannot be written or resumed there; copy the "
            "directory somewhere writable and run there (reports can be written elsewhere "
            "with --out)"
        ) from None


def _keys_to_retry(store: RunStore, planned: Sequence[str]) -> set[str]:
    """Stored jobs and LLM units with a read that is NA for want of a server (an LLM
    backend, or an external memory system in a deterministic job)."""
    stored = store.finished_jobs() & set(planned)
    if not stored:
        return set()
    return retryable_na_keys(concat_results(store.tables(only=stored)))


def _llm_counters(cost: LLMStageCost, clients: ClientPair, elapsed: float) -> None:
    """Fill the LLM stage's cost with each backend client's counters."""
    writer, reader = clients
    cost.seconds = round(elapsed, 3)
    if writer is not None and writer is reader:  # one backend serves both roles
        cost.writer_and_reader = client_counters(writer)
    else:
        cost.writer = client_counters(writer) if writer is not None else None
        cost.reader = client_counters(reader) if reader is not None else None


def _watch_parent() -> None:
    """Exit this worker within a second of its parent's death.

    A parent killed outright (SIGKILL, the OOM killer) cannot shut its pool down, and a
    worker waiting on the pipe would wait forever; this thread notices that the process
    has a new parent and ends it.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _run_parallel(
    jobs: Sequence[Job], plan: RunPlan, workers: int, record: Callable[[PackedJob], None]
) -> None:
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_watch_parent)
    try:
        pending: set[Future[PackedJob]] = set()
        # biggest first (stable: plan order among equals), so no long job starts last
        queue = sorted(jobs, key=lambda job: job.size)
        while queue or pending:
            while queue and len(pending) < workers * 2:
                pending.add(pool.submit(_execute, queue.pop(), plan.transforms, plan.seed))
            completed, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in completed:
                record(future.result())
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # stop at once, not after the queue
        raise
    pool.shutdown(wait=True)


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
    fresh: Mapping[str, pa.Table] | None = None,
) -> tuple[dict[str, Any], pa.Table]:
    """Rewrite results.csv, results.parquet and run.log from the store (the planned
    jobs, in plan order), and compute summary.json; returns the summary and the rows.

    ``fresh`` holds the tables of jobs finished by this invocation: they are not
    decoded again.
    """
    fresh = fresh or {}
    tables: list[pa.Table] = []
    keys = store.job_keys(order, only=set(order) if order else None)
    for key in keys:
        found = fresh.get(key)
        tables.append(found if found is not None else store.table(key))
    table = concat_results(tables)
    logs = store.logs(order)

    def write_files() -> None:
        chunks = [csv_header(), *(csv_rows(t) for t in tables)]
        write_results(out, table, chunks)
        if logs:
            write_atomically(out / LOG_FILE, "\n".join(logs) + "\n")

    with ThreadPoolExecutor(max_workers=1) as writer:
        # file writes and Arrow's CSV and Parquet encoding release the GIL: they run
        # beside the scoring below
        written = writer.submit(write_files)
        scored = [c for c in SCORED_COLUMNS if c in table.column_names]  # all the summary reads
        df = label_readers(table.select(scored).to_pandas()) if table.num_rows else pd.DataFrame()
        meta = {"config": plan.model_dump(mode="json")}
        summary = summarize(df, meta, plan.condition_labels)
        written.result()
    write_summary(out, summary)
    return summary, table
