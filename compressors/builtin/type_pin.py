"""``type_pin``: pin control record kinds, fill the rest with the most recent records.

Revokes, ticks, replays, choices, rules and increments are pinned (most recent
first); plain ``set`` / ``copy`` bindings fill what budget is left, most recent
first.  Knows record kinds but not the query.
"""

from __future__ import annotations

from collections.abc import Sequence

from compressors._memory import dump, fits, in_stream_order, load, pack
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register

PINNED_OPS = frozenset({"revoke", "tick", "replay", "choose", "when", "add"})


@register
class TypePin(Compressor):
    name = "type_pin"
    summary = "pins control record kinds (revoke, tick, replay, choose, ...), then most recent"

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        stream = [*load(memory), *chunk.records]
        if fits(stream, budget):
            return dump(stream)
        newest_first = stream[::-1]
        pinned = [r for r in newest_first if r.op in PINNED_OPS]
        rest = [r for r in newest_first if r.op not in PINNED_OPS]
        return dump(in_stream_order(pack(pinned + rest, budget), stream))
