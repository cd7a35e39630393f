"""Shortcut probes: conditions that know nothing of semantics, only of labels and order.

Each keeps whole records by one naive ranking, over what it kept and the new chunk,
greedily while the memory fits the budget.  They are the audit's floor: a real
condition that does no better than a probe under every transform cannot be told,
by this audit, from a naming or order heuristic (the report and the console say so).

* ``probe_shortest``: records with the shortest id first (the paper's task ids are
  shorter than its distractor ids);
* ``probe_lexicographic``: records whose smallest label sorts first (the paper's
  task keys sort before its distractor keys);
* ``probe_newest``: the most recent records first (recency, not contiguity);
* ``probe_random``: a fixed pseudo-random order of the records' text (chance).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import ClassVar

from compressors._memory import Stream, pack_positions
from compressors._protocol import ChunkView, Compressor, CompressorKind
from compressors._registry import register
from histories import Record, record_labels


class _Probe(Compressor):
    kind: ClassVar[CompressorKind] = "probe"

    def rank(self, record: Record, position: int) -> tuple[object, ...]:
        """A record's rank (smaller: kept first), given its position in the stream."""
        raise NotImplementedError

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        stream = Stream.of(memory, chunk)
        if stream.fits(budget):
            return stream.dump()
        records, rank = stream.records, self.rank
        order = sorted(range(len(stream)), key=lambda p: rank(records[p], p))
        return stream.dump(pack_positions(order, stream.sizes, budget))


@register
class ShortestLabel(_Probe):
    name = "probe_shortest"
    order_invariant = True
    summary = "probe: records with the shortest id first (a label-length heuristic)"

    def rank(self, record: Record, position: int) -> tuple[object, ...]:
        return (len(record.id), record.id)


@register
class LexicographicLabel(_Probe):
    name = "probe_lexicographic"
    order_invariant = True
    summary = "probe: records whose smallest label sorts first (a label-order heuristic)"

    def rank(self, record: Record, position: int) -> tuple[object, ...]:
        return (min(record_labels(record)), record.id)


@register
class Newest(_Probe):
    name = "probe_newest"
    summary = "probe: the most recent records first (a recency heuristic)"

    def rank(self, record: Record, position: int) -> tuple[object, ...]:
        return (-position,)


@register
class RandomOrder(_Probe):
    name = "probe_random"
    order_invariant = True
    summary = "probe: records in a fixed pseudo-random order of their text (chance)"

    def rank(self, record: Record, position: int) -> tuple[object, ...]:
        return (zlib.crc32(record.canonical_line.encode()), record.id)
