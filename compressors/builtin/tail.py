"""``tail``: keep the most recent records that fit.

The simplest strict baseline: what arrived last is kept, contiguously, and
everything older falls off.  It knows nothing of record kinds or of the query.
"""

from __future__ import annotations

from collections.abc import Sequence

from compressors._memory import Stream, pack_positions
from compressors._protocol import ChunkView, Compressor
from compressors._registry import register


@register
class Tail(Compressor):
    name = "tail"
    summary = "most recent whole records that fit (contiguous suffix of the stream)"

    def update(self, memory: str, chunk: ChunkView, query_keys: Sequence[str], budget: int) -> str:
        stream = Stream.of(memory, chunk)
        if stream.fits(budget):
            return stream.dump()
        newest_first = range(len(stream) - 1, -1, -1)
        return stream.dump(pack_positions(newest_first, stream.sizes, budget, contiguous=True))
