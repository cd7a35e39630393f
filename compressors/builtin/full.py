"""``full`` (archive): the reader sees the entire raw history.

A ceiling, not a memory: it ignores the byte budget, which is why it is labelled
extra storage.  Any pair it fails points at a reader, never at retention.
"""

from __future__ import annotations

from collections.abc import Sequence

from compressors._memory import dump
from compressors._protocol import ArchiveCompressor
from compressors._registry import register
from histories import Record


@register
class Full(ArchiveCompressor):
    name = "full"
    order_invariant = True
    summary = "archive: the whole raw history at answer time (unbudgeted ceiling)"
    budgeted = False

    def recall(
        self, memory: str, history: Sequence[Record], query_keys: Sequence[str], budget: int
    ) -> str:
        return dump(history)
