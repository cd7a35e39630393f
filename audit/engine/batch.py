"""LLM reads as offline batches: ``audit batch export`` and ``audit batch import``.

The export replays the run's LLM stage as ``audit run`` would (``run_unit``: the same
prompts, request bodies and cache keys) against a client that never sends: a request
the response cache answers is answered, any other goes into the batch (``custom_id`` =
its cache key) and ends its stream for now.  The import puts the answers into the cache,
so the same ``audit run`` then completes the run sending nothing.  An LLM writer's next
request holds its previous answer, so a stream needs one round per update: round ``r``
is 1 + the updates answered on the least advanced stream still writing.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from audit.backends import (
    BackendsConfig,
    CanonicalRequest,
    OfflineClient,
    OutputFileError,
    ResponseCache,
    Scrub,
    batch_line,
    import_output,
)
from audit.engine._llm_stage import Unit, plan_units, run_unit
from audit.engine._streaming import plan_variant
from audit.errors import BatchError, RunDataError
from audit.plan import PROMPT_LAYOUT, LLMStagePlan, RunPlan
from audit.rundir import read_config_file, rebuild_pairs, settled_job_keys
from compressors import ChatRequest, build
from histories import VARIANTS, Pair

BRANCHES_READ = 3
"""Memories one writer stream leaves for the reader: current, reveal, override."""


@dataclass
class _Stream:
    """One writer stream (a unit's variant): its updates, and how far the cache goes."""

    steps: int
    answered: int = 0
    waiting: bool = False
    """Its next update is in this batch."""


@dataclass
class _Tally:
    """What one replay of the LLM stage found."""

    streams: list[_Stream] = field(default_factory=list)
    writer: dict[str, CanonicalRequest] = field(default_factory=dict)
    reader: dict[str, CanonicalRequest] = field(default_factory=dict)


_UNIT_STEPS: ContextVar[int] = ContextVar("batch_unit_steps", default=0)
"""The writer updates of the unit being replayed (set per unit)."""
_STREAM: ContextVar[_Stream | None] = ContextVar("batch_stream", default=None)
"""The writer stream of the current task: ``run_unit`` streams each variant in a task
of its own, so a stream's requests share this value and no other stream's."""


@dataclass(frozen=True)
class BatchRound:
    """One export: the requests of this round, and what is still to come."""

    round: int
    requests: list[CanonicalRequest]
    writer_requests: int
    reader_requests: int
    streams: int
    """Writer streams of the unfinished units."""
    streams_waiting: int
    """Streams whose next update is in this round."""
    rounds_after: int
    """Rounds still to come after this one (when every answer comes back)."""
    writer_requests_after: int
    """At most this many writer requests after this round."""
    reader_requests_after: int
    """At most this many reader requests after this round (a memory cut off by its
    writer is not read)."""
    refused: int
    """Requests an earlier batch refused: not exported again (``audit run`` sends them)."""
    units: int
    units_finished: int
    """Units already committed to the run store (not replayed)."""


def _steps(pair: Pair) -> int:
    """Writer updates of a pair's longest variant stream (its prefix, then each future)."""
    counts = []
    for variant in VARIANTS:
        prefix, futures = plan_variant(pair, variant)
        counts.append(len(prefix) + sum(len(chunks) for chunks in futures.values()))
    return max(counts)


def load_plan(run_dir: Path) -> tuple[RunPlan, LLMStagePlan, Sequence[Pair]]:
    """A run directory's plan, its LLM stage and its pairs (checked against the recorded
    sha256); ``BatchError`` naming the directory when it cannot be batched."""
    try:
        config = read_config_file(run_dir)
    except RunDataError as error:
        raise BatchError(f"{run_dir}: not a run directory ({error})") from None
    plan = config.config
    if plan.llm is None:
        raise BatchError(
            f"{run_dir}: its plan has no LLM stage (it was run without --reader/--writer): "
            "nothing to batch"
        )
    if plan.llm.prompt_layout != PROMPT_LAYOUT:
        raise BatchError(
            f"{run_dir}: its LLM stage was planned with prompt layout "
            f"{plan.llm.prompt_layout or 1}; this version lays prompts out as {PROMPT_LAYOUT}, "
            "so its requests would not be the run's: plan it again in a new directory"
        )
    try:
        pairs, digest = rebuild_pairs(plan.pairs, run_dir)
    except (OSError, ValueError) as error:
        raise BatchError(f"{run_dir}: the run's pairs cannot be rebuilt ({error})") from None
    if digest != plan.pairs_sha256:
        raise BatchError(
            f"{run_dir}: the pairs rebuilt from config.json differ from the run's (sha256)"
        )
    return plan, plan.llm, pairs


def plan_round(run_dir: Path, config: BackendsConfig, cache: ResponseCache) -> BatchRound:
    """Replay the run's LLM stage against the cache: this round's requests and what is
    still to come.  Nothing is sent and nothing in the run directory changes."""
    found = _replay_run(run_dir, config, cache)
    tally = found.tally
    waiting = [s for s in tally.streams if s.waiting]
    if waiting:
        number = 1 + min(s.answered for s in waiting)
        writer_rounds_after = max(s.steps - s.answered - 1 for s in waiting)
        rounds_after = writer_rounds_after + (1 if found.has_reader else 0)
        writer_after = sum(s.steps - s.answered - 1 for s in waiting)
        reader_after = BRANCHES_READ * len(waiting) if found.has_reader else 0
    else:
        number = 1 + max((s.steps for s in tally.streams), default=0)
        rounds_after = writer_after = reader_after = 0
    requests = [*tally.writer.values(), *tally.reader.values()]
    return BatchRound(
        round=number if requests else 0,
        requests=requests,
        writer_requests=len(tally.writer),
        reader_requests=len(tally.reader),
        streams=len(tally.streams),
        streams_waiting=len(waiting),
        rounds_after=rounds_after,
        writer_requests_after=writer_after,
        reader_requests_after=reader_after,
        refused=len(found.refused),
        units=found.units,
        units_finished=found.finished,
    )


def live_requests(run_dir: Path, config: BackendsConfig, cache: ResponseCache) -> int:
    """How many requests ``audit run`` would still send for the planned run in
    ``run_dir`` (not answered by the cache, or refused by a batch and so sent live);
    0: the run completes from the cache without a server."""
    found = _replay_run(run_dir, config, cache)
    return sum(len(c.deferred) + len(c.refused_asked) for c in found.clients)


@dataclass
class _Replayed:
    tally: _Tally
    clients: list[OfflineClient]
    units: int
    finished: int
    has_reader: bool
    refused: dict[str, str]


def _replay_run(run_dir: Path, config: BackendsConfig, cache: ResponseCache) -> _Replayed:
    """The run's LLM stage (the units a resume would run) replayed against the cache."""
    plan, stage, pairs = load_plan(run_dir)
    for spec in stage.conditions:
        build(spec)
    units = plan_units(stage, pairs, plan.budgets, plan.seed)
    done = settled_job_keys(run_dir, {unit.key for unit in units})  # as `audit run` would
    todo = [unit for unit in units if unit.key not in done]
    tally = _Tally()
    refused = cache.refused()
    clients: dict[str, OfflineClient] = {}
    for name in (stage.writer, stage.reader):
        if name is not None and name not in clients:
            client = OfflineClient.of(name, config, cache, refused)
            client.on_request = _counter(tally, client)
            clients[name] = client
    writer = clients.get(stage.writer) if stage.writer else None
    reader = clients.get(stage.reader) if stage.reader else None
    asyncio.run(_replay(todo, stage, writer, reader))
    return _Replayed(
        tally, list(clients.values()), len(units), len(units) - len(todo), reader is not None,
        refused,
    )  # fmt: skip


def _counter(tally: _Tally, client: OfflineClient) -> Callable[[ChatRequest, bool], None]:
    def on_request(request: ChatRequest, cached: bool) -> None:
        canon = client.canonical(request)
        if request.tag.startswith("reader:"):
            if not cached and canon.key not in client.refused:  # refused: `audit run` sends it
                tally.reader.setdefault(canon.key, canon)
            return
        stream = _STREAM.get()
        if stream is None:  # this task's first writer request: a new stream
            stream = _Stream(_UNIT_STEPS.get())
            _STREAM.set(stream)
            tally.streams.append(stream)
        if cached:
            stream.answered += 1
        elif canon.key not in client.refused:
            stream.waiting = True
            tally.writer.setdefault(canon.key, canon)

    return on_request


async def _replay(
    units: Sequence[Unit],
    stage: LLMStagePlan,
    writer: OfflineClient | None,
    reader: OfflineClient | None,
    concurrency: int = 64,
) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(unit: Unit) -> None:
        async with gate:
            _UNIT_STEPS.set(_steps(unit.pair))  # this task's context, copied by its streams
            await run_unit(unit, stage, writer, reader)

    await asyncio.gather(*(one(unit) for unit in units))


def export_round(
    run_dir: Path, out: Path | None, config: BackendsConfig, cache: ResponseCache
) -> tuple[BatchRound, Path | None]:
    """Write this round's requests as a batch file (default ``RUNDIR/batch/round-NNN.jsonl``)
    and remember them in the cache for the import; (the round, the file or None when
    there is nothing to export)."""
    found = plan_round(run_dir, config, cache)
    if not found.requests:
        return found, None
    path = out if out is not None else run_dir / "batch" / f"round-{found.round:03d}.jsonl"
    with _atomic(path) as sink:
        for request in found.requests:
            sink.write(batch_line(request) + "\n")
    cache.add_pending(found.requests)
    return found, path


@contextmanager
def _atomic(path: Path) -> Iterator[TextIO]:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as sink:
            yield sink
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class ImportReport:
    answered: int
    """Answers stored in the cache."""
    refused: int
    """Requests the batch did not answer (not cached; not exported again)."""
    already: int
    """Answers the cache held already (a file imported twice)."""


def import_answers(path: Path, cache: ResponseCache, scrub: Scrub) -> ImportReport:
    """Store a batch output file's answers in the cache under their keys
    (``audit.backends.import_output``: streamed, bounded, every text scrubbed of the
    configured keys); ``BatchError`` names the file and line, and nothing is stored."""
    try:
        return ImportReport(*import_output(path, cache, scrub))
    except OutputFileError as error:
        raise BatchError(str(error)) from None
