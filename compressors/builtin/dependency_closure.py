"""``dependency_closure`` (archive): re-read the history, keep what the query depends on.

At answer time it computes the query's dependency closure over the raw history
(every key reachable through copies, selectors, options and conditions, through
any record, live or not) and shows the records that touch those keys, revokes of
them, and the clock.  Retrieval with perfect knowledge of the semantics: a ceiling
for structure-aware retrieval.  When they exceed the budget (never at 1,200 B on the
pilots, whose closures reach 514 B), the largest revisions and ticks go in first,
ties broken by the record's text: a rank of the record alone, never its place in the
log, so the claim of order invariance holds at every budget (version 1 took the
newest first by arrival, and broke it).
"""

from __future__ import annotations

from collections.abc import Sequence

from compressors._memory import Stream, pack_positions
from compressors._protocol import ArchiveCompressor
from compressors._registry import register
from histories import Record, referenced_keys


def _own_keys(history: Sequence[Record]) -> list[str | None]:
    """Each record's own key (the first key it references), None for keyless records."""
    return [refs[0] if (refs := referenced_keys(r)) else None for r in history]


def full_closure(
    history: Sequence[Record], query_keys: Sequence[str], own: Sequence[str | None] | None = None
) -> set[str]:
    """Keys reachable from the query through any record that binds a reached key."""
    by_key: dict[str, list[Record]] = {}
    by_id = {r.id: r for r in history}
    for record, key in zip(history, own if own is not None else _own_keys(history), strict=True):
        if key is not None:
            by_key.setdefault(key, []).append(record)
    found: set[str] = set()
    todo = list(query_keys)
    while todo:
        key = todo.pop()
        if key in found:
            continue
        found.add(key)
        for record in by_key.get(key, ()):
            todo.extend(referenced_keys(record))
            if record.op == "replay" and record.target in by_id:
                todo.extend(referenced_keys(by_id[record.target]))
    return found


@register
class DependencyClosure(ArchiveCompressor):
    name = "dependency_closure"
    version = "2"
    order_invariant = True
    summary = "archive: records in the query's dependency closure over the raw history"

    def recall(
        self, memory: str, history: Sequence[Record], query_keys: Sequence[str], budget: int
    ) -> str:
        own = _own_keys(history)
        keys = full_closure(history, query_keys, own)
        ids = {r.id for r, key in zip(history, own, strict=True) if key is not None and key in keys}
        relevant = [
            r
            for r in history
            if r.id in ids or r.op == "tick" or (r.op == "revoke" and r.target in ids)
        ]
        # the largest revisions and ticks first into the budget, ties by text (never by
        # arrival: order_invariant); the memory keeps the history's order
        stream = Stream.from_records(relevant)
        ranked = sorted(range(len(relevant)), key=lambda p: _rank(relevant[p]))
        return stream.dump(pack_positions(ranked, stream.sizes, budget))


def _rank(record: Record) -> tuple[int, str]:
    """Kept first: the largest revision (a tick: the largest time), then by text."""
    number = getattr(record, "rev", None)
    if number is None:
        number = getattr(record, "now", None)
    return (-(number or 0), record.canonical_line)
