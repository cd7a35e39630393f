"""Record-log memories: the canonical JSON-lines form deterministic compressors write.

A memory that keeps records verbatim is read exactly by E_q.  Parsing is cached by
memory string: a strict updater's output is its next input, so the cache turns the
per-chunk re-parse into a dictionary hit without carrying any hidden state (the
string alone still determines the records).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import TypeVar

from compressors._protocol import ChunkView
from histories import MemoryAuditError, Record, RenderParseError, parse_records

_T = TypeVar("_T")
_CACHE_LIMIT = 50_000
Parts = tuple[tuple[Record, ...], tuple[str, ...], tuple[int, ...]]
"""A memory's records, their canonical lines and the lines' UTF-8 sizes."""
_parsed: dict[str, Parts] = {}

_line_of = attrgetter("canonical_line")
_size_of = attrgetter("canonical_size")


class _DuplicateKeyError(MemoryAuditError, ValueError):
    """A key named twice in a JSON object: which value was meant is unknown."""


def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` refusing a key named twice (json keeps the last by default):
    an answer or a record log that names a key twice is malformed, not half read."""
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKeyError(f"duplicate key {key!r}")
        found[key] = value
    return found


def record_lines(records: Sequence[Record]) -> list[str]:
    """Each record's canonical line, cached per record."""
    return list(map(_line_of, records))


def record_sizes(records: Sequence[Record]) -> list[int]:
    """UTF-8 bytes of each record's line (without the newline), cached per record."""
    return list(map(_size_of, records))


def _remember(text: str, parts: Parts) -> str:
    if len(_parsed) > _CACHE_LIMIT:
        _parsed.clear()
    _parsed[text] = parts
    return text


def dump(records: Iterable[Record]) -> str:
    """Records -> memory text (one canonical JSON line each); cached for ``load``."""
    return Stream.from_records(list(records)).dump()


def load_parts(memory: str) -> Parts:
    """``load``, with each record's canonical line and size."""
    cached = _parsed.get(memory)
    if cached is not None:
        return cached
    if not memory.strip():
        records: tuple[Record, ...] = ()
    else:
        try:
            records = tuple(parse_records(memory, "json"))
        except RenderParseError as json_error:
            try:
                records = tuple(parse_records(memory, "log"))
            except RenderParseError as log_error:
                # the form that read further is the one meant: a JSON-lines memory with a
                # stray line 4 is named at line 4, not at the log parser's line 1
                meant = (
                    (json_error, log_error)
                    if memory.lstrip()[:1] == "{"
                    else (log_error, json_error)
                )
                raise max(meant, key=lambda e: e.line) from None
    parts = (records, tuple(map(_line_of, records)), tuple(map(_size_of, records)))
    _remember(memory, parts)
    return parts


def load(memory: str) -> tuple[Record, ...]:
    """Memory text -> records; raises RenderParseError for anything but a record log
    (canonical JSON lines, or tool-log lines)."""
    return load_parts(memory)[0]


class Stream:
    """What a strict packer chooses from: the memory's records, then the chunk's.

    Each record's line and size travel beside it, the memory's taken whole from its
    cache entry: a packer reads every size and writes every chosen line on every
    update, and reaching them record by record is most of a cheap update's cost.
    """

    __slots__ = ("lines", "records", "sizes")

    def __init__(self, records: list[Record], lines: list[str], sizes: list[int]) -> None:
        self.records, self.lines, self.sizes = records, lines, sizes

    @classmethod
    def of(cls, memory: str, chunk: ChunkView) -> Stream:
        """The memory's records followed by the chunk's (raises RenderParseError)."""
        records, lines, sizes = load_parts(memory)
        return cls([*records, *chunk.records], [*lines, *chunk.lines], [*sizes, *chunk.sizes])

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> Stream:
        return cls(list(records), record_lines(records), record_sizes(records))

    def __len__(self) -> int:
        return len(self.records)

    def fits(self, budget: int) -> bool:
        """Whether every record fits in ``budget`` bytes as one memory."""
        return sum(self.sizes) + len(self.sizes) - 1 <= budget

    def select(self, positions: Sequence[int]) -> Stream:
        """The records at ``positions``, in that order."""
        pick = _picker(positions)
        return Stream(list(pick(self.records)), list(pick(self.lines)), list(pick(self.sizes)))

    def dump(self, positions: Sequence[int] | None = None) -> str:
        """The memory of the records at ``positions`` (all by default), in that order."""
        pick = tuple if positions is None else _picker(positions)
        lines = pick(self.lines)
        return _remember("\n".join(lines), (pick(self.records), lines, pick(self.sizes)))


def _picker(positions: Sequence[int]) -> Callable[[Sequence[_T]], tuple[_T, ...]]:
    """A function that takes the items at ``positions`` of a sequence, as a tuple (one
    ``itemgetter`` call in C instead of a comprehension per list)."""
    if len(positions) > 1:
        return itemgetter(*positions)
    if positions:
        only = positions[0]
        return lambda items: (items[only],)
    return lambda items: ()


def memory_bytes(memory: str) -> int:
    return len(memory.encode("utf-8"))


def pack(ordered: Sequence[Record], budget: int, *, contiguous: bool = False) -> list[Record]:
    """Greedily take records in ``ordered`` while the memory fits ``budget`` bytes.

    A record that does not fit is skipped and packing goes on with smaller ones,
    unless ``contiguous`` (then packing stops at the first record that does not fit).
    Returns the chosen records in their ``ordered`` order.
    """
    order = range(len(ordered))
    positions = pack_positions(order, record_sizes(ordered), budget, contiguous=contiguous)
    return [ordered[p] for p in positions]


def pack_positions(
    order: Iterable[int], sizes: Sequence[int], budget: int, *, contiguous: bool = False
) -> list[int]:
    """``pack`` by position: greedily take positions in ``order`` while the lines of
    the chosen records (``sizes``) fit ``budget``; returns them in ascending order."""
    chosen: list[int] = []
    used = -1  # n lines take n-1 newlines
    room = budget - min(sizes, default=0)  # past it, no record fits: stop looking
    for position in order:
        size = sizes[position] + 1
        if used + size <= budget:
            chosen.append(position)
            used += size
            if used >= room:
                break
        elif contiguous:
            break
    chosen.sort()
    return chosen


def by_line(
    cache: dict[str, _T], compute: Callable[[Record], _T], records: Sequence[Record],
    lines: Sequence[str],
) -> list[_T]:  # fmt: skip
    """Each record's value from ``cache`` under its canonical line (``lines``), from
    ``compute`` (which caches it) where missing: in the common case, every record seen
    before, one lookup each and no Python loop."""
    try:
        return list(map(cache.__getitem__, lines))
    except KeyError:
        get = cache.get
        return [get(line) or compute(record) for line, record in zip(lines, records, strict=True)]
