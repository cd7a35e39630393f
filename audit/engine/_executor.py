"""``execute``: plan the jobs of a run, run them (in parallel), store, score, summarize.

A job is one source pair through every cell and transform; its key is a hash of
everything that determines its rows, so a run directory can be resumed: finished
jobs are skipped, and a changed plan is refused, never mixed in.  Jobs run on a
local process pool; each finished job is committed to the store as it arrives, and
at the end results.parquet is rewritten in plan order, one job at a time, and scored
one job at a time in a child process: no process ever holds every row.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    wait,
)
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    ExitStack,
    contextmanager,
    redirect_stdout,
    suppress,
)
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa

from audit.engine._jobs import run_job
from audit.engine._llm_stage import plan_units, planned_requests, run_stage
from audit.engine._progress import (
    RequestEstimate,
    RunProgress,
    client_counters,
    client_roles,
    request_tallies,
)
from audit.errors import RunDataError, RunDirectoryError, RunStorageError, Terminated
from audit.plan import Cell, RunPlan, TransformSpec
from audit.rundir import (
    LOG_FILE,
    RESULTS_CSV,
    RESULTS_PARQUET,
    STORED_SCHEMA,
    SUMMARY_FILE,
    BackendRecord,
    Determinism,
    Invocation,
    LLMStageCost,
    PackedJob,
    RunManifest,
    RunStore,
    StageCost,
    StepCost,
    export_csv,
    file_record,
    job_tables,
    label_readers,
    log_text,
    lost_jobs,
    merge_errors,
    new_run_id,
    pair_lines,
    prepare_directory,
    read_manifest,
    record_backends,
    record_costs,
    remove_stale_temps,
    summary_errors,
    vouched_parquet,
    write_atomically,
    write_manifest,
    write_parquet,
    write_summary,
)
from audit.scoring import SCORED_COLUMNS, SCORING_VERSION, score_pieces, summarize, summary_of
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
    for text in pair_lines(pairs):  # pairs held as lines are never parsed here
        key = hashlib.sha256(f"{identity}\n{text}".encode()).hexdigest()[:32]
        jobs.append(Job(key, text, cells, len(text)))
    return jobs


def _execute(job: Job, transforms: Sequence[TransformSpec], seed: int) -> PackedJob:
    """Run one job and serialize it (in the worker process, not the writer).

    What a compressor prints goes to stderr: stdout carries the run's answer, which a
    plugin's debugging lines from the workers would otherwise break into."""
    with _stdout_to_stderr(), _cycle_collection_after(acyclic=builtins_only(job.cells)):
        # in a function of its own: its locals (every instance of the pair, the rows)
        # are freed before the collection at the end, which then has less to walk
        return _run_and_pack(job, transforms, seed)


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send a job's output to stderr: Python's ``print`` and, through file descriptor 1,
    what a library's C code or a child process (``cmd:``'s programs answer on pipes of
    their own) writes; put back afterwards (one worker runs jobs in the command's own
    process, whose stdout then prints the answer)."""
    sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no descriptor 1 or 2 to swap: Python's own stream only
        saved = None
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _run_and_pack(job: Job, transforms: Sequence[TransformSpec], seed: int) -> PackedJob:
    pair = Pair.model_validate_json(job.pair_json)
    return run_job(job.key, pair, job.cells, transforms, seed).pack()


@contextmanager
def _settled_heap() -> Iterator[None]:
    """Exempt everything alive before the jobs from cyclic garbage collection while
    they run: otherwise every full collection in the writer walks the whole heap again
    (unpickling a job was 10x slower), and forked workers inherit the burden."""
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

    Left on, the collector walked every cached record again and again (16 % of a job's
    CPU in the pilot audit).  A job of deterministic built-ins leaves no cycles (a test
    checks it), so it freezes what it left (constant time) instead of paying 25-50 ms
    for a pass that finds nothing; any other condition may leave cycles.
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
Note = Callable[[str], object]
"""Hears a status line (``RunProgress.note``)."""
OpenClients = Callable[[Note | None], AbstractAsyncContextManager[ClientPair]]
"""Opens the (writer, reader) clients; the note hears the steps (a model fetched, a
server started)."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _why(error: BaseException) -> str:
    """Why an invocation stopped, in one line."""
    if isinstance(error, (Terminated, SystemExit)):
        return f"terminated (exit {error.code})"
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
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
    csv: bool = False,
) -> dict[str, Any]:
    """Run (or resume) every job, then write results.parquet (results.csv too with
    ``csv``), summary.json and manifest.json.

    ``open_clients`` opens the writer/reader backends for the LLM stage (and closes
    them, stopping an embedded server) when ``plan.llm`` is set; they are opened
    before any work, so a backend that cannot be reached stops the run at once
    (costs.json: ``backends_start``).
    ``retry_na``: LLM units holding reads that are NA for want of a server (an outage
    during an earlier invocation) are run again, their new rows replacing the old.

    ``executor``: the deterministic jobs on a local process pool of ``workers``
    processes, or as Ray tasks on the cluster at ``ray_address`` (default:
    ``RAY_ADDRESS``, else a private local Ray with ``workers`` CPUs; checked before any
    work, as the backends are).  The LLM stage runs in this process either way, and the
    run directory (store, manifest, run id, resume) is the same whichever ran the jobs.

    ``measure_backends``: between the deterministic stage and the LLM stage, each
    backend's determinism is measured (``audit.backends.measure_determinism``) and
    recorded in config.json and costs.json (its time and requests: ``probe``).
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
        start: StepCost | None = None
        if plan.llm is not None and open_clients is not None:
            runner = exits.enter_context(asyncio.Runner())
            opened = AsyncExitStack()
            began = time.perf_counter()
            note = progress.note if progress is not None else None
            clients = runner.run(opened.enter_async_context(open_clients(note)))
            start = StepCost(seconds=round(time.perf_counter() - began, 3))
            exits.callback(runner.run, _close_clients(opened))
        _resuming, run_id = prepare_directory(out, plan, scoring=SCORING_VERSION)
        _check_writable(out)
        remove_stale_temps(out)
        store = RunStore(out, run_id)  # RunDirectoryError: another version's or run's store
        exits.callback(store.close)
        return _execute_in(out, plan, pairs, store, run_id, workers, progress, runner,
                           clients, retry_na, measure_backends, executor,
                           ray_address, csv, start)  # fmt: skip


async def _close_clients(opened: AsyncExitStack) -> None:
    """Close the backends' clients, after cancelling whatever the stage left running: a
    signal (SIGTERM, Ctrl-C) leaves LLM units in flight, and the loop running again to
    close the clients must not let them finish into a closed store or print their
    tracebacks ("Task exception was never retrieved")."""
    current = asyncio.current_task()
    left = [task for task in asyncio.all_tasks() if task is not current]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    await opened.aclose()


async def _measure_backends(
    plan: RunPlan, clients: ClientPair, measure: bool = True, progress: RunProgress | None = None
) -> tuple[dict[str, BackendRecord], StepCost]:
    """Each LLM backend of the run: what it is, and the determinism probe's figure; and
    what the probe cost (its own line of costs.json).

    Measured right before the stage, so the figure describes the server the reads meet; a
    probe that fails (the server went away) leaves it unmeasured, and the stage records
    NA.  ``progress`` counts the probe's requests: a stage of its own, since on two cores
    each request of the embedded model takes seconds.
    """
    from audit.backends import measure_determinism, probe_size

    assert plan.llm is not None
    began = time.perf_counter()
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
    note = progress.note if progress is not None else (lambda _text: None)
    sizes = {key: probe_size(client) for key, (client, _, _) in roles.items()}
    sent = 2 * sum(sizes.values()) if measure else 0
    if progress is not None and sent:
        progress.begin("probe", 0, sent)
    answers = 0

    def answered() -> None:
        nonlocal answers
        answers += 1
        if progress is not None:
            progress.advance("probe", answers)

    for key, (client, role_names, name) in roles.items():
        backend = getattr(client, "backend", None)
        kind = getattr(backend, "kind", None)
        result = None
        unmeasured: str | None = "--no-determinism"
        label, size = name or role_names[0], sizes[key]
        if measure:
            note(f"determinism probe of {label}: {2 * size} requests, {size} one at a time, "
                 "then the same at once in another order")  # fmt: skip
            try:
                result = await measure_determinism(client, size, answered=answered)
                unmeasured = None if result.compared else "no probe request was answered"
            except Exception as error:
                unmeasured = f"the probe failed ({type(error).__name__})"
            found = (
                f"{result.identical}/{result.compared} answers identical"
                if result and result.compared
                else f"not measured ({unmeasured})"
            )
            note(f"determinism probe of {label}: {found}")
        records[label] = BackendRecord(
            roles=role_names,
            kind=kind,
            model=getattr(client, "model", None),
            mode=getattr(backend, "run_mode", "server"),
            determinism=None
            if result is None or not result.compared
            else Determinism.model_validate(result.as_dict()),
            measured=_now() if unmeasured is None else None,
            unmeasured=unmeasured,
        )
    return records, StepCost(seconds=round(time.perf_counter() - began, 3), requests=sent)


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
    csv: bool = False,
    start: StepCost | None = None,
) -> dict[str, Any]:
    invocation = Invocation(id=new_run_id(), started=_now(), backends_start=start)
    manifest: RunManifest | None = None
    try:
        started = time.perf_counter()
        planned = plan_jobs(plan, pairs)
        units = plan_units(plan.llm, pairs, plan.budgets, plan.seed) if plan.llm else []
        job_keys, unit_keys = [job.key for job in planned], [unit.key for unit in units]
        order = job_keys + unit_keys
        stored = store.finished_jobs()
        foreign = stored - set(order)
        if foreign and store.owned and store.planned(job_keys, unit_keys):
            # this run's own store and plan: a record no plan made is damage, run again
            store.drop_jobs(foreign)
            stored -= foreign
            invocation.dropped_jobs = sorted(foreign)
        elif foreign:
            raise RunDirectoryError(
                f"{store.path} holds {len(foreign)} finished job(s) this run did not plan: "
                "it belongs to another run and is never merged; move it away to run this "
                "directory again from its own results"
            )
        # jobs whose rows are gone (a damaged results.parquet) are run again, like NA ones
        redo = (store.retry_keys() & set(order) if retry_na else set()) | lost_jobs(out, store)
        done = stored - redo
        jobs = [job for job in planned if job.key not in done]
        todo_units = [u for u in units if u.key not in done]
        try:
            previous = read_manifest(out)
        except RunDataError:  # damaged: written again below
            previous = None
        csv = csv or (previous is not None and RESULTS_CSV in previous.files)
        manifest = RunManifest(
            run_id=run_id,
            state="running",
            planned_jobs=job_keys,
            planned_units=unit_keys,
            finished_jobs=len(planned) - len(jobs),
            finished_units=len(units) - len(todo_units),
        )
        store.record_plan(manifest.planned_jobs, manifest.planned_units)
        write_manifest(out, manifest)
        record_costs(out, invocation)  # listed even if this invocation is killed
        jobs_done = len(planned) - len(jobs)
        units_done = len(units) - len(todo_units)
        if progress:
            progress.begin("deterministic", jobs_done, len(planned))

        spent: Counter[str] = Counter()
        cost = StageCost(executor=executor)
        invocation.deterministic = cost  # filled in as jobs come: a stopped stage says so

        def record(result: PackedJob) -> None:
            nonlocal jobs_done
            added = store.add_job(result, replace=result.key in redo)
            cost.jobs += 1
            spent.update(result.log.seconds)
            if added:
                jobs_done += 1
                if progress:
                    progress.advance("deterministic", jobs_done)

        def committed_unit() -> None:
            nonlocal units_done
            units_done += 1
            if progress:
                progress.advance("llm", units_done)

        with _settled_heap():
            try:
                if executor == "ray" and jobs:
                    from audit.engine import _ray  # imports ray itself only now

                    cost.cpus = _ray.run_on_ray(
                        jobs, _execute, (plan.transforms, plan.seed), record, ray_address,
                        workers, plan.conditions, plan.compressor_versions,
                    )  # fmt: skip
                elif min(workers, len(jobs)) <= 1:
                    for job in jobs:
                        record(_execute(job, plan.transforms, plan.seed))
                else:
                    _run_parallel(
                        jobs, plan, min(workers, len(jobs)), record
                    )  # a process a job at most
            finally:  # (recorded with the invocation's outcome, however it ends)
                cost.seconds = round(time.perf_counter() - started, 3)
                cost.conditions = {label: round(sec, 3) for label, sec in spent.items()}
        record_costs(out, invocation)
        if plan.llm is not None and runner is not None:
            probe_s = None
            if todo_units:
                measured, probe = runner.run(
                    _measure_backends(plan, clients, measure_backends, progress)
                )
                record_backends(out, measured)
                invocation.backends = measured
                if probe.requests:  # (--no-determinism: no probe, no line)
                    invocation.probe, probe_s = probe, probe.seconds / probe.requests
                record_costs(out, invocation)
            began = time.perf_counter()
            invocation.llm = LLMStageCost(units=len(todo_units))
            if progress:
                requests = planned_requests(todo_units, *clients)
                estimate = RequestEstimate(len(todo_units), requests, probe_s)
                if todo_units:
                    progress.note(estimate.before())
                progress.begin("llm", units_done, len(units), request_tallies(*clients),
                               estimate)  # fmt: skip
            try:
                runner.run(
                    run_stage(units, plan.llm, store, *clients,
                              lambda _log, _table, _key: committed_unit(), redo=redo,
                              note=progress.note if progress else None)
                )  # fmt: skip
            finally:
                _llm_counters(invocation.llm, clients, time.perf_counter() - began)
        summary, rows = finish(out, store, plan, order, csv)
        retry = store.retry_keys()
        na_units = len(retry & set(manifest.planned_units))
        na_jobs = len(retry & set(manifest.planned_jobs))
        manifest.finished_jobs = len(planned)
        manifest.finished_units = len(units)
        manifest.na_units = na_units
        manifest.na_jobs = na_jobs
        manifest.rows = rows
        manifest.files = {
            name: file_record(out / name)
            for name in ((RESULTS_CSV,) if csv else ()) + (RESULTS_PARQUET, SUMMARY_FILE)
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


def _llm_counters(cost: LLMStageCost, clients: ClientPair, elapsed: float) -> None:
    """Fill the LLM stage's cost with each backend client's counters."""
    cost.seconds = round(elapsed, 3)
    for role, client in client_roles(*clients):  # writer_and_reader: one serves both
        setattr(cost, role.replace("+", "_and_"), client_counters(client))


def _watch_parent() -> None:
    """Exit this worker within a second of its parent's death (a SIGKILL leaves no one
    to shut the pool down), die at once on a SIGTERM to the process group, and leave
    Ctrl-C to the parent (a worker raising ``Terminated`` blocked on a pipe nobody read).
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
        workers_left: dict[int, Any] = getattr(pool, "_processes", None) or {}
        for process in list(workers_left.values()):
            process.terminate()  # a job in flight is lost, as a signal means; its store is not
        raise
    pool.shutdown(wait=True)


def finish(
    out: Path,
    store: RunStore,
    plan: RunPlan,
    order: Sequence[str] = (),
    csv: bool = False,
) -> tuple[dict[str, Any], int]:
    """Rewrite results.parquet (and results.csv when asked) and run.log from the store
    and the previous results.parquet (the planned jobs, in plan order, one job at a
    time), and compute summary.json from it; returns the summary and the rows' count."""
    keys = store.job_keys(order, only=set(order) if order else None)
    previous = vouched_parquet(out, store)
    waiting = store.pending_keys()
    rows = 0

    def streamed() -> Iterator[pa.Table]:
        nonlocal rows
        for _key, table in job_tables(keys, store.pending, previous):
            rows += table.num_rows
            yield table

    sha = write_parquet(out, streamed(), store.expect_results)
    store.settle(sha, waiting)
    if csv:
        export_csv(out)
    logs = store.logs(order)
    # each distinct compressor error once, merged in plan order: whichever executor ran
    # the jobs and however many invocations it took, the same text
    errors = merge_errors(log.errors for log in logs)
    if any(logs):  # (errors or lines: a log of timings alone says nothing there)
        lines = [line for log in logs for line in log.lines]
        write_atomically(out / LOG_FILE, log_text(errors, lines))
    # scored in a child process, a job at a time (``_score``): neither process holds the
    # rows, so memory stays flat however many reads a run has
    # (a run with an LLM stage has backend threads alive, which a fork must not copy
    # mid-lock: it scores here)
    if plan.llm is not None:
        summary = _score(out, plan)
    else:
        with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork")) as scorer:
            summary = scorer.submit(_score, out, plan).result()
    summary["compressor_errors"] = summary_errors(errors)
    write_summary(out, summary)
    return summary, rows


SCORED_BATCH_ROWS = 50_000
"""Rows of results.parquet scored together: whole row groups (of whole jobs) up to this
many, so a small run pays a frame's fixed cost (about 14 ms) once, not once a job, and a
large one holds at most a batch of reads (a batch closes at the group that reaches
this, so it can hold up to this plus ``ROW_GROUP_ROWS``)."""


def _score(out: Path, plan: RunPlan) -> dict[str, Any]:
    """summary.json's content from results.parquet's scored columns, scored a batch of
    row groups (whole jobs) at a time: only counts per cell and source pair are held between
    batches, never every read."""
    import pyarrow.parquet as pq

    scored = [c for c in SCORED_COLUMNS if c in STORED_SCHEMA.names]  # all the summary reads
    meta = {"config": plan.model_dump(mode="json")}
    with pq.ParquetFile(out / RESULTS_PARQUET) as handle:
        batches: list[list[int]] = [[]]
        rows = 0
        for group in range(handle.num_row_groups):
            if rows >= SCORED_BATCH_ROWS:
                batches.append([])
                rows = 0
            batches[-1].append(group)
            rows += handle.metadata.row_group(group).num_rows
        pieces = (
            label_readers(handle.read_row_groups(groups, columns=scored).to_pandas())
            for groups in batches
            if groups
        )
        scores, reads, pairs = score_pieces(pieces, plan.condition_labels)
    if not reads:
        return summarize(pd.DataFrame(), meta, plan.condition_labels)
    return summary_of(scores, meta, reads, pairs)
