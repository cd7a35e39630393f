"""``audit run``: plan jobs, execute them (in parallel), store, score, summarize.

A job is one source pair through every condition, budget and transform; its key is
a hash of everything that determines its rows, so a run directory can be resumed:
finished jobs are skipped, and a changed configuration is refused, never mixed in.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
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
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field

from audit._evaluate import run_job, share_identical_records
from audit._llm_stage import LLMStageConfig, Unit, plan_units, run_stage
from audit._store import (
    PackedJob,
    RunStore,
    StoreFormatError,
    append_csv,
    concat_results,
    csv_header,
    csv_rows,
    pack_job,
    table_from_bytes,
)
from audit._summary import SCORED_COLUMNS, summarize
from audit._transforms_spec import parse_transforms
from compressors import ChatClient, build, deterministic_builtins, parse_spec
from histories import Pair

CONFIG_FILE = "config.json"
RESULTS_CSV = "results.csv"
RESULTS_PARQUET = "results.parquet"
SUMMARY_FILE = "summary.json"
LOG_FILE = "run.log"


class RunDirectoryError(ValueError):
    """The output directory cannot hold this run (another run is there, or a file)."""


class RunConfig(BaseModel):
    """Everything that determines a run's results (config.json; compared on resume)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pairs: dict[str, Any]
    """Where the pairs came from: a preset and its generation config, or a file + sha256."""
    pairs_sha256: str
    conditions: list[str] = Field(min_length=1)
    compressor_versions: dict[str, str]
    budgets: list[int] = Field(min_length=1)
    transforms: list[str] = Field(min_length=1)
    seed: int = 0
    reader: str = "exact"
    repeats: int = 1
    llm: LLMStageConfig | None = None
    """The LLM stage (model writers and reader on a sample of pairs), if any."""


@dataclass(frozen=True)
class Job:
    key: str
    pair_json: str
    conditions: tuple[tuple[str, int], ...]
    size: int = 0
    """Bytes of the pair's JSON: a job's cost grows with them (used to start big jobs
    first).  Bytes predict it better than the record count: longer records overflow
    the budget sooner, and every update past that point ranks."""


def condition_budgets(config: RunConfig) -> list[tuple[str, int]]:
    """(condition, budget) cells: a condition with its own ``budget=`` runs only there."""
    cells: list[tuple[str, int]] = []
    for label in config.conditions:
        own = parse_spec(label).budget
        cells.extend([(label, own)] if own is not None else [(label, b) for b in config.budgets])
    return cells


def plan_jobs(config: RunConfig, pairs: Sequence[Pair]) -> list[Job]:
    cells = tuple(condition_budgets(config))
    identity = json.dumps(
        {
            "cells": cells,
            "versions": config.compressor_versions,
            "transforms": config.transforms,
            "seed": config.seed,
            "reader": config.reader,
        },
        sort_keys=True,
    )
    jobs = []
    for pair in pairs:
        text = pair.to_json()
        key = hashlib.sha256(f"{identity}\n{text}".encode()).hexdigest()[:32]
        jobs.append(Job(key, text, cells, len(text)))
    return jobs


def _execute(job: Job, transforms: Sequence[str], seed: int) -> PackedJob:
    """Run one job and serialize it (in the worker process, not the writer)."""
    with _cycle_collection_after(acyclic=builtins_only(job.conditions)):
        # in a function of its own: its locals (every instance of the pair, the rows)
        # are freed before the collection at the end, which then has less to walk
        return _run_and_pack(job, transforms, seed)


def _run_and_pack(job: Job, transforms: Sequence[str], seed: int) -> PackedJob:
    specs = [parse_transforms(t)[0] for t in transforms]
    pair = share_identical_records(Pair.model_validate_json(job.pair_json))
    result = run_job(job.key, pair, job.conditions, specs, seed)
    return pack_job(result.key, result.columns.table(), result.memories, result.log)


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


def builtins_only(conditions: Sequence[tuple[str, int]]) -> bool:
    """Whether every condition is a deterministic built-in: code of ours, which leaves
    no reference cycles."""
    return set(deterministic_builtins()).issuperset(
        parse_spec(label).target for label, _ in conditions
    )


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


def environment() -> dict[str, Any]:
    """Package versions, Python, machine and git commit (when available)."""
    versions: dict[str, str | None] = {}
    for name in ("memory-audit", "pydantic", "pandas", "rank-bm25", "typer"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        commit = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "packages": versions,
        "python": sys.version.split()[0],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "git_commit": commit,
    }


def prepare_directory(out: Path, config: RunConfig) -> bool:
    """Create the run directory, or accept it for resuming; True when resuming."""
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"{out} exists and is not a directory")
    config_path = out / CONFIG_FILE
    if out.exists() and any(out.iterdir()):
        if not config_path.exists():
            raise RunDirectoryError(
                f"{out} is not empty and holds no {CONFIG_FILE}: not a run directory; "
                "choose another --out"
            )
        stored = json.loads(config_path.read_text())["config"]
        current = config.model_dump(mode="json")
        differing = sorted(
            k for k in current.keys() | stored.keys() if current.get(k) != stored.get(k)
        )
        if differing:
            raise RunDirectoryError(
                f"{out} holds a different run (differs in: {', '.join(differing)}); "
                "it is never overwritten: choose another --out"
            )
        return True
    out.mkdir(parents=True, exist_ok=True)
    payload = {"config": config.model_dump(mode="json"), "environment": environment(),
               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    temp = config_path.with_suffix(".tmp")
    temp.write_text(json.dumps(payload, indent=2) + "\n")
    temp.replace(config_path)
    return False


ProgressCallback = Callable[[int, int], None]


ClientPair = tuple[ChatClient | None, ChatClient | None]
"""(writer, reader) clients for the LLM stage."""
OpenClients = Callable[[], AbstractAsyncContextManager[ClientPair]]
COSTS_FILE = "costs.json"


def execute(
    out: Path,
    config: RunConfig,
    pairs: Sequence[Pair],
    workers: int = 1,
    progress: ProgressCallback | None = None,
    open_clients: OpenClients | None = None,
) -> dict[str, Any]:
    """Run (or resume) every job, then write results.csv/parquet and summary.json.

    ``open_clients`` opens the writer/reader backends for the LLM stage (and closes
    them, stopping an embedded server) when ``config.llm`` is set.
    """
    for label in config.conditions:  # fail before any work on a bad condition
        build(parse_spec(label))
    if config.llm is not None:
        for label in config.llm.conditions:
            build(parse_spec(label))
        if open_clients is None:
            raise ValueError("the run has an LLM stage but no backends were given")
    prepare_directory(out, config)
    try:
        store = RunStore(out)
    except StoreFormatError as error:
        raise RunDirectoryError(str(error)) from None
    costs: dict[str, Any] = {}
    try:
        started = time.perf_counter()
        done = store.finished_jobs()
        planned = plan_jobs(config, pairs)
        jobs = [job for job in planned if job.key not in done]
        units = plan_units(config.llm, pairs, config.budgets, config.seed) if config.llm else []
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

        with _settled_heap():
            if workers <= 1 or len(jobs) <= 1:
                for job in jobs:
                    record(_execute(job, config.transforms, config.seed))
            else:
                _run_parallel(jobs, config, workers, record)
        costs["deterministic"] = {
            "jobs": len(jobs),
            "seconds": round(time.perf_counter() - started, 3),
        }
        if config.llm is not None and open_clients is not None:
            costs["llm"] = asyncio.run(
                _llm_stage(config.llm, units, store, open_clients, committed)
            )
        _write_costs(out, costs)
        return finish(out, store, config, order, fresh)
    finally:
        store.close()


async def _llm_stage(
    stage: LLMStageConfig,
    units: Sequence[Unit],
    store: RunStore,
    open_clients: OpenClients,
    committed: Callable[[Sequence[str], pa.Table], object],
) -> dict[str, Any]:
    started = time.perf_counter()
    async with open_clients() as (writer, reader):
        await run_stage(units, stage, store, writer, reader, committed)
        if writer is not None and writer is reader:  # one backend serves both roles
            stats = {"writer_and_reader": _client_stats(writer)}
        else:
            stats = {
                role: _client_stats(client)
                for role, client in (("writer", writer), ("reader", reader))
                if client is not None
            }
    return {"units": len(units), "seconds": round(time.perf_counter() - started, 3), **stats}


def _client_stats(client: object) -> dict[str, Any]:
    """Request counters of a backend client, if it keeps them (sent, cache, dedup, tokens)."""
    stats = getattr(client, "stats", None)
    if stats is None:
        return {}
    if hasattr(stats, "as_dict"):
        return dict(stats.as_dict())
    if hasattr(stats, "__dict__"):
        return {k: v for k, v in vars(stats).items() if not k.startswith("_")}
    return {}


def _write_costs(out: Path, costs: dict[str, Any]) -> None:
    """Accumulate per-stage costs across resumed invocations (costs.json)."""
    path = out / COSTS_FILE
    history = json.loads(path.read_text()).get("invocations", []) if path.exists() else []
    history.append(costs)
    path.write_text(json.dumps({"invocations": history}, indent=2, default=str) + "\n")


def _run_parallel(
    jobs: Sequence[Job], config: RunConfig, workers: int, record: Callable[[PackedJob], None]
) -> None:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: set[Future[PackedJob]] = set()
        # biggest first (stable: plan order among equals), so no long job starts last
        queue = sorted(jobs, key=lambda job: job.size)
        while queue or pending:
            while queue and len(pending) < workers * 2:
                pending.add(pool.submit(_execute, queue.pop(), config.transforms, config.seed))
            completed, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in completed:
                record(future.result())


def finish(
    out: Path,
    store: RunStore,
    config: RunConfig,
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
    csv_path = out / RESULTS_CSV

    def write_files() -> None:
        temp = csv_path.with_suffix(".tmp")
        temp.write_bytes(b"".join(chunks))
        temp.replace(csv_path)
        if table.num_rows:
            pq.write_table(table, out / RESULTS_PARQUET)

    with ThreadPoolExecutor(max_workers=1) as writer:
        # file writes and Arrow's Parquet encoding release the GIL: they run beside
        # the scoring below
        written = writer.submit(write_files)
        scored = [c for c in SCORED_COLUMNS if c in table.column_names]  # all the summary reads
        df = table.select(scored).to_pandas() if table.num_rows else pd.DataFrame()
        summary = summarize(df, {"config": config.model_dump(mode="json")})
        written.result()
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def default_run_dir(root: Path = Path("runs")) -> Path:
    """A new timestamped run directory under ``runs/``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = root / stamp
    suffix = 1
    while path.exists():
        suffix += 1
        path = root / f"{stamp}-{suffix}"
    return path


_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def named_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """``runs/NAME`` for ``--name``; a name is one plain path segment, so it can never
    reach outside ``runs/`` (no separators, no ``..``, no leading dot)."""
    if not _RUN_NAME.match(name) or ".." in name:
        raise RunDirectoryError(
            f"--name {name!r}: a run name is 1-100 letters, digits, '_', '.', '-', "
            "starting with a letter or digit, and never contains '..' or '/'"
        )
    return root / name
