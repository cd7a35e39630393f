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

from compressors._memory import Stream, pack_positions, record_lines
from compressors._protocol import ArchiveCompressor
from compressors._registry import register
from histories import Record

_TOKEN = re.compile(r"[A-Za-z0-9_.:\-]+")
_FIELD_NAMES = frozenset(
    {"id", "op", "key", "value", "rev", "expires", "starts", "src", "selector", "options",
     "target", "now", "delta", "cond_key", "cond_value"}
)  # fmt: skip


_words: dict[str, list[str]] = {}
"""A record's canonical line -> its tokens; with their count and term counts below.
Every recall of a history tokenizes the same records again."""
_lengths: dict[str, int] = {}
_counts: dict[str, dict[str, int]] = {}


def _remember(lines: Sequence[str]) -> None:
    if len(_words) > 200_000:
        for cache in (_words, _lengths, _counts):
            cache.clear()
    for line in lines:
        if line in _words:
            continue
        words = [t for t in _TOKEN.findall(line) if t not in _FIELD_NAMES]
        counts = dict(Counter(words))  # first-seen order, as rank_bm25 builds it
        _words[line], _lengths[line], _counts[line] = words, len(words), counts


def _corpus(lines: Sequence[str]) -> tuple[list[int], list[dict[str, int]]]:
    """Each document's length and term counts (documents: records' canonical lines)."""
    try:
        doc_len = list(map(_lengths.__getitem__, lines))
    except KeyError:
        _remember(lines)
        doc_len = list(map(_lengths.__getitem__, lines))
    return doc_len, list(map(_counts.__getitem__, lines))


def tokens(record: Record) -> list[str]:
    """Identifier-ish tokens of the record's JSON, without the field names."""
    line = record.canonical_line
    _remember((line,))
    return _words[line]


class RecordBM25(BM25Okapi):  # type: ignore[misc]
    """``rank_bm25.BM25Okapi`` over records, its corpus statistics built from term
    counts cached per record.  The statistics equal what ``BM25Okapi([tokens(r) for r
    in records])`` computes, and idf and scores are the library's formulas evaluated in
    its order; a property test checks all of them against the library, bit for bit."""

    def _initialize(self, corpus: Sequence[Record]) -> dict[str, int]:
        self.doc_len, self.doc_freqs = _corpus(record_lines(corpus))
        self.corpus_size = len(self.doc_len)
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


def bm25_scores(
    history: Sequence[Record], query: Sequence[str], lines: Sequence[str] | None = None
) -> list[float]:
    """``RecordBM25(history).get_scores(query)``, bit for bit, from the statistics of the
    query's terms alone.

    A term's idf needs only its document frequency, unless it is negative: then the
    library substitutes epsilon times the average idf of every word in the corpus, and
    this falls back to the whole ``RecordBM25``.  Scores are summed in the library's
    order with its formula; a property test compares them with ``rank_bm25`` itself.
    """
    doc_len, doc_freqs = _corpus(lines if lines is not None else record_lines(history))
    corpus_size = len(doc_len)
    avgdl = sum(doc_len) / corpus_size
    table, negative = _idf_by_frequency(corpus_size)
    k1, b = _K1, _B
    scores = [0.0] * corpus_size
    for term in query:
        found = [(p, freq) for p, counts in enumerate(doc_freqs) if (freq := counts.get(term))]
        if not found:  # not in the corpus: the library adds zeros
            continue
        if len(found) in negative:
            return RecordBM25(list(history)).score_list(query)
        idf = table[len(found)] or 0
        for position, freq in found:
            scores[position] += idf * (
                freq * (k1 + 1) / (freq + k1 * (1 - b + b * doc_len[position] / avgdl))
            )
    return scores


_K1, _B = 1.5, 0.75
"""``BM25Okapi``'s default k1 and b, which ``RecordBM25`` uses."""

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
        stream = Stream.from_records(history)
        scores = bm25_scores(history, query_keys, stream.lines)
        # best first; a stable sort of newest-first positions keeps ties newest first
        order = sorted(range(len(history) - 1, -1, -1), key=scores.__getitem__, reverse=True)
        return stream.dump(pack_positions(order, stream.sizes, budget))  # in history order
