"""The frontier family: priority packers over whole records.

``frontier`` ranks every record it holds into three tiers and packs greedily:

1. control records - revokes, ticks, replays, choices, rules, and any record with
   an ``expires`` / ``starts`` window (what decides *which* value counts);
2. live records in the query's dependency closure (what the answer is made of now);
3. everything else.

Within a tier, ties are broken by identifier order (key, then record id).  That
is the naming shortcut the audit exposes: under readable labels where task keys
sort first, "everything else" starts with the task's unrelated keys, which is why
``frontier`` looks good on late references at identity and collapses under
renaming.  The variants:

* ``frontier_latest`` keeps only the latest live binding per key (no control
  records, no superseded history): up to date, and blind to rollbacks.
* ``frontier_no_tombstone`` applies revokes by deleting their targets and never
  stores the revoke itself, so a later replay of a revoked record is not blocked,
  and a revoke that arrives before its target (log order carries no meaning) is
  forgotten: the target later reads as live.  Both are the cost of keeping no
  tombstones, which is what this condition exists to measure.
* ``frontier_alpha`` is the label-equivariant repair: the same tiers, ties broken
  by recency (stream position) instead of spelling, so no decision depends on how
  identifiers are spelled: C(rename(H)) == rename(C(H)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from compressors._memory import Stream, by_line, pack_positions
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register
from histories import (
    LABEL_FIELDS,
    LogIndex,
    Record,
)

CONTROL_OPS = frozenset({"revoke", "tick", "replay", "choose", "when"})


def is_control(record: Record) -> bool:
    """Records that decide which value counts rather than carrying one."""
    op = record.op
    if op in CONTROL_OPS:
        return True
    if op == "set" or op == "copy":
        return record.expires is not None or record.starts is not None  # type: ignore[union-attr]
    return op == "add" and record.expires is not None  # type: ignore[union-attr]


def identifier_order(record: Record) -> str:
    """Spelling-based tie-break: the record's first label, then its id, as one string
    that sorts like the pair (label, id): identifiers never contain NUL, which sorts
    below every character they may contain."""
    fields = LABEL_FIELDS[record.op]
    return f"{getattr(record, fields[0]) if fields else ''}\0{record.id}"


Facts = tuple[bool, str, str | None, str]
"""(is_control, identifier_order, the record's key or None, its id)."""

_facts: dict[str, Facts] = {}
"""A record's canonical line -> its facts: what a record is never changes, and every
update of a stream asks again.  Keyed by content, so equal records share an entry."""


def _facts_of(record: Record) -> Facts:
    if len(_facts) > 200_000:
        _facts.clear()
    found = _facts[record.canonical_line] = (
        is_control(record),
        identifier_order(record),
        getattr(record, "key", None),
        record.id,
    )
    return found


def stream_facts(stream: Sequence[Record], lines: Sequence[str]) -> list[Facts]:
    """Each record's facts (``lines``: the records' canonical lines)."""
    return by_line(_facts, _facts_of, stream, lines)


_tiers: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[int, ...]] = {}
"""(a stream's canonical lines, query keys) -> its tiers: the frontier packers of one
pair meet the same streams (everything they hold is the same until their tie-breaks
first differ)."""


def tier_numbers(
    stream: Sequence[Record],
    query_keys: Sequence[str],
    facts: Sequence[Facts],
    lines: Sequence[str],
) -> tuple[int, ...]:
    """Each record's tier: 0 control, 1 live in the query's dependency closure, 2 the rest
    (``facts`` and ``lines``: the records', from ``stream_facts`` and the stream)."""
    key = (tuple(lines), tuple(query_keys))
    found = _tiers.get(key)
    if found is not None:
        return found
    index = LogIndex(stream)
    closure = index.closure(query_keys)
    revoked = index.revoked
    numbers: list[int] = []
    for control, _, record_key, record_id in facts:
        if control:
            numbers.append(0)
        # What is left is a set, copy or add without a validity window (those are
        # control records): live exactly when not revoked (LogIndex.is_live).
        elif record_key in closure and record_id not in revoked:
            numbers.append(1)
        else:
            numbers.append(2)
    if len(_tiers) > 10_000:  # a pair meets about 2,000 distinct streams
        _tiers.clear()
    tiers = _tiers[key] = tuple(numbers)
    return tiers


class _FrontierBase(Compressor):
    """Shared packing: candidates -> tiers -> tie-break -> greedy fill."""

    tie_break: ClassVar[str] = "identifier"

    def candidates(self, stream: Stream) -> Stream:
        """The records this packer may keep (all of them, here)."""
        return stream

    def rank(self, stream: Stream, query_keys: Sequence[str]) -> list[int]:
        """Positions in ``stream``, best first: by tier (``tier_numbers``), then by the
        tie-break (identifier order, or the most recent first)."""
        records, lines = stream.records, stream.lines
        facts = stream_facts(records, lines)
        tiers = tier_numbers(records, query_keys, facts, lines)
        by_tier: tuple[list[int], list[int], list[int]] = ([], [], [])
        if self.tie_break == "identifier":
            for position, tier in enumerate(tiers):
                by_tier[tier].append(position)
            order = [f[1] for f in facts].__getitem__
            # a stable sort: equal spellings stay in stream order
            return [p for positions in by_tier for p in sorted(positions, key=order)]
        for position in range(len(records) - 1, -1, -1):  # recency: newest first
            by_tier[tiers[position]].append(position)
        return [*by_tier[0], *by_tier[1], *by_tier[2]]

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        stream = self.candidates(Stream.of(memory, chunk))
        if stream.fits(budget):  # all fit: ranking cannot matter
            return stream.dump()
        return stream.dump(pack_positions(self.rank(stream, query_keys), stream.sizes, budget))


@register
class Frontier(_FrontierBase):
    name = "frontier"
    summary = "priority packer: control, then live query closure, then rest; ties by identifier"


@register
class FrontierAlpha(_FrontierBase):
    name = "frontier_alpha"
    summary = "frontier with ties broken by recency: label-equivariant, no spelling decisions"
    tie_break = "recency"


@register
class FrontierNoTombstone(_FrontierBase):
    name = "frontier_no_tombstone"
    summary = "frontier that applies revokes by deleting targets and keeps no tombstones"

    def candidates(self, stream: Stream) -> Stream:
        records = stream.records
        revoked = {r.target for r in records if r.op == "revoke"}
        if not revoked:
            return stream
        return stream.select(
            [p for p, r in enumerate(records) if r.op != "revoke" and r.id not in revoked]
        )


@register
class FrontierLatest(_FrontierBase):
    name = "frontier_latest"
    summary = "latest live binding per key only (up to date, no history, no control records)"

    def candidates(self, stream: Stream) -> Stream:
        records = stream.records
        index = LogIndex(records)
        keep: set[int] = set()
        # the index holds each key's binding records, revoked ones already dropped
        for bindings in index.bindings.values():
            top: int | None = None
            latest: list[Record] = []
            for record in bindings:
                if not index.is_live(record):
                    continue
                rev: int = record.rev  # type: ignore[union-attr]
                if top is None or rev > top:
                    top, latest = rev, [record]
                elif rev == top:
                    latest.append(record)
            keep.update(map(id, latest))
        if len(keep) == len(records):
            return stream
        return stream.select([p for p, r in enumerate(records) if id(r) in keep])

    def rank(self, stream: Stream, query_keys: Sequence[str]) -> list[int]:
        """The query's closure first, then the rest; identifier order within each."""
        records = stream.records
        closure = LogIndex(records).closure(query_keys)
        order = [f[1] for f in stream_facts(records, stream.lines)].__getitem__
        inside = [p for p, r in enumerate(records) if r.key in closure]  # type: ignore[union-attr]
        outside = [p for p, r in enumerate(records) if r.key not in closure]  # type: ignore[union-attr]
        return [*sorted(inside, key=order), *sorted(outside, key=order)]
