"""``bm25`` (archive): lexical retrieval over the raw history at answer time.

Each record is a document (its canonical JSON, split into identifier tokens); the
query is the query keys.  Records are ranked by Okapi BM25 (the ``rank-bm25``
library) and packed best-first into the budget.  It finds records that *name*
the query key, and misses what they depend on under other names: the textbook
weakness a late reference exposes.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Sequence
from functools import reduce
from itertools import chain, compress
from typing import Any

import numpy as np
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


_kept: dict[int, Record] = {}
"""id(record) -> record for every record below: holding it keeps its id from being
reused.  Every recall of a history tokenizes the same records again."""
_words: dict[int, list[str]] = {}
_lengths: dict[int, int] = {}
_counts: dict[int, dict[str, int]] = {}


def _remember(records: Sequence[Record]) -> None:
    if len(_kept) > 200_000:
        for cache in (_kept, _words, _lengths, _counts):
            cache.clear()
    for record in records:
        key = id(record)
        if key in _kept:
            continue
        words = [t for t in _TOKEN.findall(record_line(record)) if t not in _FIELD_NAMES]
        counts = dict(Counter(words))  # first-seen order, as rank_bm25 builds it
        _kept[key], _words[key], _lengths[key], _counts[key] = record, words, len(words), counts


def tokens(record: Record) -> list[str]:
    """Identifier-ish tokens of the record's JSON, without the field names."""
    _remember((record,))
    return _words[id(record)]


class RecordBM25(BM25Okapi):  # type: ignore[misc]
    """``rank_bm25.BM25Okapi`` over records, its corpus statistics built from term
    counts cached per record.  The statistics equal what ``BM25Okapi([tokens(r) for r
    in records])`` computes, and idf and scores are the library's formulas evaluated in
    its order; a property test checks all of them against the library, bit for bit."""

    def _initialize(self, corpus: Sequence[Record]) -> dict[str, int]:
        ids = list(map(id, corpus))
        if not all(map(_kept.__contains__, ids)):
            _remember(corpus)
        self.doc_len = list(map(_lengths.__getitem__, ids))
        self.doc_freqs = list(map(_counts.__getitem__, ids))
        self.corpus_size = len(ids)
        self.avgdl = sum(self.doc_len) / self.corpus_size
        # documents in order, words first-seen: the library's insertion order
        return dict(Counter(chain.from_iterable(self.doc_freqs)))

    def _calc_idf(self, nd: dict[str, int]) -> None:
        """The library's ``_calc_idf``, with each idf looked up by document frequency
        (there are at most corpus_size + 1 distinct values) instead of two logarithms per
        word.  Same formula, same insertion order, same left-to-right sum: the same bits."""
        table, negative = _idf_by_frequency(self.corpus_size)
        idfs = list(map(table.__getitem__, nd.values()))
        self.idf.update(zip(nd, idfs, strict=True))
        self.average_idf = reduce(operator.add, idfs, 0) / len(self.idf)
        eps = self.epsilon * self.average_idf
        for word in compress(nd, map(negative.__contains__, nd.values())):
            self.idf[word] = eps

    def score_list(self, query: Sequence[str]) -> list[float]:
        """``get_scores`` as a list, computed without numpy (a recall scores ~40 short
        documents, where numpy's per-call overhead dominates).  The same operations in
        the same order on the same doubles, so the same bits; a document without the
        term adds nothing (the library adds a zero there)."""
        k1, b, avgdl, doc_len = self.k1, self.b, self.avgdl, self.doc_len
        scores = [0.0] * self.corpus_size
        for term in query:
            idf = self.idf.get(term) or 0
            for position, frequencies in enumerate(self.doc_freqs):
                freq = frequencies.get(term)
                if freq:
                    scores[position] += idf * (
                        freq * (k1 + 1) / (freq + k1 * (1 - b + b * doc_len[position] / avgdl))
                    )
        return scores

    def get_scores(self, query: Sequence[str]) -> Any:
        return np.array(self.score_list(query))


_idf_tables: dict[int, tuple[list[float], frozenset[int]]] = {}


def _idf_by_frequency(corpus_size: int) -> tuple[list[float], frozenset[int]]:
    """idf of a word found in n documents, for n = 0..corpus_size (rank_bm25's formula),
    and the n whose idf is negative."""
    found = _idf_tables.get(corpus_size)
    if found is None:
        table = [
            math.log(corpus_size - n + 0.5) - math.log(n + 0.5) for n in range(corpus_size + 1)
        ]
        negative = frozenset(n for n, idf in enumerate(table) if idf < 0)
        found = _idf_tables[corpus_size] = (table, negative)
    return found


@register
class BM25(ArchiveCompressor):
    name = "bm25"
    summary = "archive: Okapi BM25 retrieval of records by the query keys, best-first in budget"

    def recall(
        self, memory: str, history: Sequence[Record], query_keys: Sequence[str], budget: int
    ) -> str:
        if not history:
            return ""
        scores = RecordBM25(list(history)).score_list(query_keys)
        # best first; a stable sort of newest-first positions keeps ties newest first
        order = sorted(range(len(history) - 1, -1, -1), key=scores.__getitem__, reverse=True)
        ranked = [history[i] for i in order]
        return dump(in_stream_order(pack(ranked, budget), history))
