"""``type_pin``: pin control record kinds, fill the rest with the most recent records.

Revokes, ticks, replays, choices, rules and increments are pinned (most recent
first); plain ``set`` / ``copy`` bindings fill what budget is left, most recent
first.  Knows record kinds but not the query.
"""

from __future__ import annotations

from collections.abc import Sequence

from compressors._memory import Stream, pack_positions
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register

PINNED_OPS = frozenset({"revoke", "tick", "replay", "choose", "when", "add"})


@register
class TypePin(Compressor):
    name = "type_pin"
    summary = "pins control record kinds (revoke, tick, replay, choose, ...), then most recent"

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        stream = Stream.of(memory, chunk)
        if stream.fits(budget):
            return stream.dump()
        records = stream.records
        newest_first = range(len(records) - 1, -1, -1)
        pinned = [p for p in newest_first if records[p].op in PINNED_OPS]
        rest = [p for p in newest_first if records[p].op not in PINNED_OPS]
        # the chosen records, in stream order
        return stream.dump(pack_positions([*pinned, *rest], stream.sizes, budget))
