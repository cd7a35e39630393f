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

from compressors._memory import dump, load, pack_positions, record_sizes
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register
from histories import (
    LogIndex,
    Record,
)
from histories._records import LABEL_FIELDS

CONTROL_OPS = frozenset({"revoke", "tick", "replay", "choose", "when"})


def is_control(record: Record) -> bool:
    """Records that decide which value counts rather than carrying one."""
    op = record.op
    if op in CONTROL_OPS:
        return True
    if op == "set" or op == "copy":
        return record.expires is not None or record.starts is not None  # type: ignore[union-attr]
    return op == "add" and record.expires is not None  # type: ignore[union-attr]


def identifier_order(record: Record) -> tuple[str, str]:
    """Spelling-based tie-break: the record's first label, then its id."""
    fields = LABEL_FIELDS[record.op]
    return (getattr(record, fields[0]) if fields else "", record.id)


_facts: dict[int, tuple[Record, bool, tuple[str, str]]] = {}
"""id(record) -> (record, is_control, identifier_order): what a record is never changes,
and every update of a stream asks again.  Holding the record keeps its id unique."""


def _facts_of(record: Record) -> tuple[Record, bool, tuple[str, str]]:
    found = _facts.get(id(record))
    if found is None:
        if len(_facts) > 200_000:
            _facts.clear()
        found = _facts[id(record)] = (record, is_control(record), identifier_order(record))
    return found


def _order_key(record: Record) -> tuple[str, str]:
    return _facts_of(record)[2]


def tier_numbers(stream: Sequence[Record], query_keys: Sequence[str]) -> list[int]:
    """Each record's tier: 0 control, 1 live in the query's dependency closure, 2 the rest."""
    index = LogIndex(stream)
    closure = index.closure(query_keys)
    revoked = index.revoked
    facts = _facts.get
    numbers: list[int] = []
    for record in stream:
        if (facts(id(record)) or _facts_of(record))[1]:
            numbers.append(0)
        # What is left is a set, copy or add without a validity window (those are
        # control records): live exactly when not revoked (LogIndex.is_live).
        elif record.key in closure and record.id not in revoked:  # type: ignore[union-attr]
            numbers.append(1)
        else:
            numbers.append(2)
    return numbers


class _FrontierBase(Compressor):
    """Shared packing: candidates -> tiers -> tie-break -> greedy fill."""

    tie_break: ClassVar[str] = "identifier"

    def candidates(self, stream: list[Record]) -> list[Record]:
        return stream

    def rank(self, stream: list[Record], query_keys: Sequence[str]) -> list[int]:
        """Positions in ``stream``, best first: by tier (``tier_numbers``), then by the
        tie-break.  One sort over (tier, tie-break) keys, the same order as sorting
        each tier on its own."""
        tiers = tier_numbers(stream, query_keys)
        if self.tie_break == "identifier":
            keyed = sorted(zip(tiers, map(_order_key, stream), range(len(stream)), strict=True))
            return [position for _, _, position in keyed]
        # recency: most recent first, i.e. the highest position first
        newest = sorted(zip(tiers, range(0, -len(stream), -1), strict=True))
        return [-negated for _, negated in newest]

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        stream = self.candidates([*load(memory), *chunk.records])
        sizes = record_sizes(stream)
        if sum(sizes) + len(stream) - 1 <= budget:  # all fit: ranking cannot matter
            return dump(stream)
        chosen = pack_positions(self.rank(stream, query_keys), sizes, budget)
        return dump([stream[position] for position in chosen])


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

    def candidates(self, stream: list[Record]) -> list[Record]:
        revoked = {r.target for r in stream if r.op == "revoke"}
        return [r for r in stream if r.op != "revoke" and r.id not in revoked]


@register
class FrontierLatest(_FrontierBase):
    name = "frontier_latest"
    summary = "latest live binding per key only (up to date, no history, no control records)"

    def candidates(self, stream: list[Record]) -> list[Record]:
        index = LogIndex(stream)
        latest: dict[str, list[Record]] = {}
        for record in stream:
            if record.op in ("revoke", "tick", "add") or not index.is_live(record):
                continue
            key: str = record.key  # type: ignore[union-attr]
            best = latest.get(key)
            if best is None or record.rev > best[0].rev:  # type: ignore[union-attr]
                latest[key] = [record]
            elif record.rev == best[0].rev:  # type: ignore[union-attr]
                best.append(record)
        keep = {id(r) for group in latest.values() for r in group}
        return [r for r in stream if id(r) in keep]

    def rank(self, stream: list[Record], query_keys: Sequence[str]) -> list[int]:
        closure = LogIndex(stream).closure(query_keys)

        def closure_first(position: int) -> tuple[bool, tuple[str, str]]:
            record = stream[position]
            return (record.key not in closure, _order_key(record))  # type: ignore[union-attr]

        return sorted(range(len(stream)), key=closure_first)
