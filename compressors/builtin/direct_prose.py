"""``direct_prose`` (archive): the LLM reader answers from the raw history itself.

No memory at all: at answer time the reader is shown the whole history so far,
rendered as natural-language chat turns.  It separates "the model cannot resolve
these semantics" from "the memory lost the evidence".  Unbudgeted extra storage,
and meaningless for the exact reader (prose does not parse), so it only runs with
an LLM reader.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from compressors._protocol import ArchiveCompressor
from compressors._registry import register
from histories import Record, render_records


@register
class DirectProse(ArchiveCompressor):
    name = "direct_prose"
    summary = "archive: the LLM reader answers from the raw history as prose (no memory)"
    budgeted = False
    needs_llm_reader = True

    def recall(
        self, memory: str, history: Sequence[Record], query_keys: Sequence[str], budget: int
    ) -> str:
        seed = zlib.crc32("|".join(r.id for r in history[:1]).encode())
        return render_records(history, "prose", seed)
