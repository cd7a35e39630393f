"""Record-log memories: the canonical JSON-lines form deterministic compressors write.

A memory that keeps records verbatim is read exactly by E_q.  Parsing is cached by
memory string: a strict updater's output is its next input, so the cache turns the
per-chunk re-parse into a dictionary hit without carrying any hidden state (the
string alone still determines the records).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import attrgetter

from histories import Record
from histories._render import RenderParseError, parse_records

_CACHE_LIMIT = 50_000
_parsed: dict[str, tuple[Record, ...]] = {}

_line_of = attrgetter("canonical_line")
_size_of = attrgetter("canonical_size")


def record_sizes(records: Sequence[Record]) -> list[int]:
    """UTF-8 bytes of each record's line (without the newline), cached per record."""
    return list(map(_size_of, records))


def record_line(record: Record) -> str:
    """Canonical JSON of a record, cached per record object (records are frozen)."""
    return record.canonical_line


def line_bytes(record: Record) -> int:
    """UTF-8 bytes the record's line takes in a memory (without the newline)."""
    return record.canonical_size


def dump(records: Iterable[Record]) -> str:
    """Records -> memory text (one canonical JSON line each); cached for ``load``."""
    records = tuple(records)
    text = "\n".join(map(_line_of, records))
    if len(_parsed) > _CACHE_LIMIT:
        _parsed.clear()
    _parsed[text] = records
    return text


def load(memory: str) -> tuple[Record, ...]:
    """Memory text -> records; raises RenderParseError for anything but a record log
    (canonical JSON lines, or tool-log lines)."""
    cached = _parsed.get(memory)
    if cached is not None:
        return cached
    if not memory.strip():
        records: tuple[Record, ...] = ()
    else:
        try:
            records = tuple(parse_records(memory, "json"))
        except RenderParseError:
            records = tuple(parse_records(memory, "log"))
    if len(_parsed) > _CACHE_LIMIT:
        _parsed.clear()
    _parsed[memory] = records
    return records


def memory_bytes(memory: str) -> int:
    return len(memory.encode("utf-8"))


def pack(ordered: Sequence[Record], budget: int, *, contiguous: bool = False) -> list[Record]:
    """Greedily take records in ``ordered`` while the memory fits ``budget`` bytes.

    A record that does not fit is skipped and packing goes on with smaller ones,
    unless ``contiguous`` (then packing stops at the first record that does not fit).
    Returns the chosen records in their ``ordered`` order.
    """
    chosen: list[Record] = []
    used = -1  # n lines take n-1 newlines
    for record, size in zip(ordered, record_sizes(ordered), strict=True):
        if used + size + 1 <= budget:
            chosen.append(record)
            used += size + 1
        elif contiguous:
            break
    return chosen


def fits(records: Sequence[Record], budget: int) -> bool:
    """Whether all of ``records`` fit in ``budget`` bytes as one memory (then a greedy
    ``pack`` keeps them all, whatever their order)."""
    return sum(record_sizes(records)) + len(records) - 1 <= budget


def pack_positions(order: Iterable[int], sizes: Sequence[int], budget: int) -> list[int]:
    """``pack`` by position: greedily take positions in ``order`` while the lines of
    the chosen records (``sizes``) fit ``budget``; returns them in ascending order."""
    chosen: list[int] = []
    used = -1
    for position in order:
        size = sizes[position] + 1
        if used + size <= budget:
            chosen.append(position)
            used += size
    chosen.sort()
    return chosen


def in_stream_order(chosen: Iterable[Record], stream: Sequence[Record]) -> list[Record]:
    """``chosen`` re-sorted into the order they appear in ``stream`` (memory, then chunk)."""
    keep = set(map(id, chosen))
    return [r for r in stream if id(r) in keep]
