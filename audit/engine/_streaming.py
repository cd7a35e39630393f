"""Streaming a pair through a compressor: the one loop both stages share.

A variant's prefix is streamed chunk by chunk from the empty memory (``current``), and
each future on from it (``reveal``, ``override``); a memory over the byte budget becomes
the empty string and is counted.  The loop is one generator of update requests
(``_updates``): the deterministic stage answers them by ``update`` (memoized across a
pair's streams), the LLM stage by awaiting ``aupdate``.
"""

from __future__ import annotations

import zlib
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from compressors import ArchiveCompressor, ChatUnavailableError, ChunkView, Compressor
from histories import BRANCHES, FUTURES, Branch, MemoryAuditError, Pair, Record, VariantName


def phrasing_seeds(records: Sequence[Record]) -> tuple[int, ...]:
    """The phrasing seed of each record (prose wording, the chat form's framing): the
    CRC-32 of its canonical line, nothing else.

    A compressor sees every seed, so a seed may carry nothing the record does not
    show: not the source pair, the record's place in it, the variant or the
    transform (a seed that did let a table built from the public generator tell
    every task record from every distractor under every transform).  Equal records
    still read the same wherever they are (a record A and B share, the shared
    future); a renamed record reads as its new content says.
    """
    return tuple(zlib.crc32(r.canonical_line.encode()) for r in records)


ChunkPlan = tuple[ChunkView, tuple[int, ...], int]
"""(the chunk as compressors see it, the memo's names of its records, chunk index) of
one chunk of a stream; one view per chunk of a pair instance, shown to every
condition."""
VariantPlan = tuple[list[ChunkPlan], dict[Branch, list[ChunkPlan]]]
"""A variant's prefix chunks, and each future's chunks after them."""
States = dict[Branch, tuple[str, int]]
"""Per branch: the streamed memory and the over-budget events up to it."""


def plan_variant(pair: Pair, variant: VariantName) -> VariantPlan:
    """The chunks one variant streams: worked out once per pair instance, shared by
    every condition streaming it.

    Each variant shows its own record objects: a record B shares with A is an equal
    object, never the same one (shared objects made B's other records the ones
    allocated apart, which ``id()`` told).  The update memo still serves both: a
    record of B equal to A's at the same place is named by A's record.
    """

    def chunk(records: Sequence[Record], index: int, names: Sequence[Record]) -> ChunkPlan:
        # per-record seeds for prose phrasings and the chat form's wording (each a
        # function of the record's line alone), computed on first use
        view = ChunkView(records, pair.render, partial(phrasing_seeds, records))
        return (view, tuple(map(id, names)), index)

    prefix = pair.variants.of(variant).chunks
    named = prefix if variant == "A" else list(map(_named_by_a, pair.variants.A.chunks, prefix))
    futures: dict[Branch, list[ChunkPlan]] = {
        future: [chunk(c, len(prefix) + i, c) for i, c in enumerate(pair.futures.of(future))]
        for future in FUTURES
    }
    return [chunk(c, i, n) for i, (c, n) in enumerate(zip(prefix, named, strict=True))], futures


def _named_by_a(chunk_a: Sequence[Record], chunk_b: Sequence[Record]) -> list[Record]:
    """B's chunk with each record equal to A's at the same place replaced by A's."""
    names = list(chunk_b)
    for position, (a, b) in enumerate(zip(chunk_a, chunk_b, strict=False)):
        if a is b or (type(a) is type(b) and a.canonical_line == b.canonical_line):
            names[position] = a
    return names


def text_of(memory: object, method: str) -> str:
    """A compressor's answer, which must be a memory string: anything else (bytes,
    None, a number) is the compressor's error here, named, not a crash of the reader."""
    if type(memory) is str:
        return memory
    if isinstance(memory, str):  # a subclass: its text alone (it may carry no other state)
        return "".join([memory])
    raise TypeError(f"{method} returned {type(memory).__name__}, not a str memory")


def over_budget(memory: str, budget: int) -> bool:
    """Whether the memory's UTF-8 bytes exceed the budget (without encoding ASCII)."""
    return len(memory) > budget or (not memory.isascii() and len(memory.encode("utf-8")) > budget)


Update = tuple[str, ChunkPlan]
"""An update the loop asks for: (the memory so far, the next chunk)."""
Answer = tuple[str, bool]
"""What an update gave: the new memory, and whether it is over the byte budget."""


def _updates(plan: VariantPlan) -> Generator[Update, Answer, States]:
    """The streaming loop: yields each update to make, receives its answer.

    A memory over the budget becomes the empty string, and the event is counted.
    """
    prefix, futures = plan
    memory, overflow = "", 0
    for chunk in prefix:
        new, over = yield memory, chunk
        memory, overflow = ("", overflow + 1) if over else (new, overflow)
    states: States = {"current": (memory, overflow)}
    for future, chunks in futures.items():
        m, o = memory, overflow
        for chunk in chunks:
            new, over = yield m, chunk
            m, o = ("", o + 1) if over else (new, o)
        states[future] = (m, o)
    return states


class UpdateRaised(MemoryAuditError):  # noqa: N818 (it wraps the error that was raised)
    """A compressor's update raised ``error``: on which variant, stream and chunk.

    Only where it struck is added; the error (with its traceback) is ``error``, and the
    stages record it as the compressor's (``JobRows.raised``).  An external system's
    outage (``ChatUnavailableError``) is never wrapped: it is NA.
    """

    def __init__(
        self, error: BaseException, variant: VariantName, plan: VariantPlan, chunk: ChunkPlan
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.variant = variant
        prefix, futures = plan
        self.branch = "prefix" if any(c is chunk for c in prefix) else next(
            (future for future, chunks in futures.items() if any(c is chunk for c in chunks)),
            None,
        )  # fmt: skip
        self.chunk = chunk[2]
        self.records = [record.op for record in chunk[0].records]


class ImpureUpdateError(MemoryAuditError):
    """A deterministic compressor whose update is not a pure function of (memory,
    chunk, query, budget): the same history streamed again gave another memory.  Its
    scores would depend on the order the audit ran things in (the update memo serves
    repeated updates), so its reads are recorded as errors, like an update that raised
    (``UpdateRaised``)."""


UpdateMemo = dict[tuple[str, tuple[int, ...], int], Answer]
"""(memory, the memo's names of the chunk's records, chunk index) -> the update's answer."""


@dataclass
class Streamed:
    """What a reader is shown per branch, and over-budget events up to each branch."""

    memories: dict[Branch, str]
    overflow: dict[Branch, int]


def stream_variant(
    compressor: Compressor,
    pair: Pair,
    variant: VariantName,
    budget: int,
    memo: UpdateMemo | None = None,
    plan: VariantPlan | None = None,
) -> Streamed:
    """Stream one variant through a deterministic compressor.

    ``memo`` shares updates between streams of one pair, compressor and budget: A
    and B share every chunk before the hidden distinction, and both futures start
    from the prefix memory.  Only for deterministic compressors, whose update is a
    pure function of (memory, chunk, query, budget) by the protocol.
    """
    if compressor.uses_llm:
        memo = None
    if _streams_nothing(compressor):  # an archive's memory stays empty until recall
        return finish_streams(compressor, pair, variant, budget, dict.fromkeys(BRANCHES, ("", 0)))
    update, query, budgeted = compressor.update, pair.query, compressor.budgeted

    def answer(request: Update) -> Answer:
        memory, (view, ids, index) = request
        key = (memory, ids, index)
        found = memo.get(key) if memo is not None else None
        if found is None:
            new = text_of(update(memory, view, query, budget), "update")
            found = (new, budgeted and over_budget(new, budget))
            if memo is not None:
                memo[key] = found
        return found

    plan = plan or plan_variant(pair, variant)
    steps = _updates(plan)
    try:
        request = next(steps)
        while True:
            request = steps.send(answer(request))
    except StopIteration as stop:
        states: States = stop.value
    except ChatUnavailableError:
        raise
    except (Exception, SystemExit) as error:  # a plugin that exits is one that raised
        raise UpdateRaised(error, variant, plan, request[1]) from error
    return finish_streams(compressor, pair, variant, budget, states)


async def astream_variant(
    compressor: Compressor,
    pair: Pair,
    variant: VariantName,
    budget: int,
    repeat: int,
    plan: VariantPlan | None = None,
) -> Streamed:
    """Stream one variant through any compressor, awaiting each update (LLM writers
    call a model; ``repeat`` makes repeats independent)."""
    query = pair.query

    async def answer(request: Update) -> Answer:
        memory, (view, _, _) = request
        new = text_of(await compressor.aupdate(memory, view, query, budget, repeat), "update")
        return new, compressor.budgeted and over_budget(new, budget)

    plan = plan or plan_variant(pair, variant)
    steps = _updates(plan)
    try:
        request = next(steps)
        while True:
            request = steps.send(await answer(request))
    except StopIteration as stop:
        states: States = stop.value
    except ChatUnavailableError:
        raise
    except (Exception, SystemExit) as error:
        raise UpdateRaised(error, variant, plan, request[1]) from error
    return finish_streams(compressor, pair, variant, budget, states)


def _streams_nothing(compressor: Compressor) -> bool:
    """An archive that keeps the base class's update, which returns the memory as is."""
    return (
        isinstance(compressor, ArchiveCompressor)
        and type(compressor).update is ArchiveCompressor.update
    )


def finish_streams(
    compressor: Compressor,
    pair: Pair,
    variant: VariantName,
    budget: int,
    states: Mapping[Branch, tuple[str, int]],
) -> Streamed:
    """What the reader is shown per branch: the memory, or an archive's recall of the
    raw history (budget-checked like any memory)."""
    memories: dict[Branch, str] = {}
    overflows: dict[Branch, int] = {}
    # (an ABC's isinstance runs Python code: asked once, not per branch)
    archive = compressor if isinstance(compressor, ArchiveCompressor) else None
    for branch, (m, o) in states.items():
        if archive is not None:
            m = text_of(archive.recall(m, pair.history(variant, branch), pair.query, budget),
                        "recall")  # fmt: skip
            if archive.budgeted and len(m.encode("utf-8")) > budget:
                m, o = "", o + 1
        memories[branch], overflows[branch] = m, o
    return Streamed(memories, overflows)
