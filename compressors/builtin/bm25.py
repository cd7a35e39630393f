"""``bm25`` (archive): lexical retrieval over the raw history at answer time.

Each record is a document (its canonical JSON, split into identifier tokens); the
query is the query keys.  Records are ranked by Okapi BM25 (the ``rank-bm25``
library) and packed best-first into the budget.  It finds records that *name*
the query key, and misses what they depend on under other names: the textbook
weakness a late reference exposes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rank_bm25 import BM25Okapi

from compressors._memory import dump, in_stream_order, pack, record_line
from compressors._protocol import ArchiveCompressor
from compressors._registry import register
from histories import Record

_TOKEN = re.compile(r"[A-Za-z0-9_.:\-]+")
_FIELD_NAMES = frozenset(
    {"id", "op", "key", "value", "rev", "expires", "starts", "src", "selector", "options",
     "target", "now", "delta", "cond_key", "cond_value"}
)  # fmt: skip


_tokens: dict[int, tuple[Record, list[str]]] = {}
"""id(record) -> (record, tokens); holding the record keeps its id from being reused."""


def tokens(record: Record) -> list[str]:
    """Identifier-ish tokens of the record's JSON, without the field names (cached per
    record object: every recall of a history tokenizes the same records again)."""
    found = _tokens.get(id(record))
    if found is not None:
        return found[1]
    words = [t for t in _TOKEN.findall(record_line(record)) if t not in _FIELD_NAMES]
    if len(_tokens) > 200_000:
        _tokens.clear()
    _tokens[id(record)] = (record, words)
    return words


@register
class BM25(ArchiveCompressor):
    name = "bm25"
    summary = "archive: Okapi BM25 retrieval of records by the query keys, best-first in budget"

    def recall(
        self, memory: str, history: Sequence[Record], query_keys: Sequence[str], budget: int
    ) -> str:
        if not history:
            return ""
        scores = BM25Okapi([tokens(r) for r in history]).get_scores(list(query_keys))
        order = sorted(range(len(history)), key=lambda i: (-scores[i], -i))  # ties: newest
        ranked = [history[i] for i in order]
        return dump(in_stream_order(pack(ranked, budget), history))
