"""E_q: the exact interpreter, ground truth for generation and the exact reader.

Rules (``docs/method.md``, made precise here; ``docs/pair-format.md`` repeats them):

* The clock is the largest ``now`` among non-revoked ticks (0 when there are none).
  A record is time-valid while ``starts <= clock <= expires`` (either bound optional).
* A revoke permanently invalidates its target.  Revokes themselves cannot be
  revoked: a revoke that targets a revoke has no effect, so revocation is monotone.
* For each key, the candidates are the binding records for that key that are not
  revoked and are active: time-valid; a ``when`` record only while its condition
  holds; a ``replay`` only while its target is not revoked and the target itself
  would be active (it re-asserts the target's payload, validity window included).
  A replay whose target is absent, or not a binding record, stays a candidate and
  evaluates to null: it depends on something missing.
* The candidate with the highest ``rev`` wins.  Two candidates sharing the top
  revision are a conflict and give null (breaking the tie by id would make the
  answer depend on identifier spelling, which renaming must never change).
* The winner is evaluated: a literal; ``copy`` resolves ``src``; ``choose``
  resolves the selector and then the option it names (no such option -> null).
  If the winner depends on something missing the answer is null; it never falls
  back to an older record.  Cycles resolve to null and never hang.
* ``add`` records newer than the winner (``rev`` strictly greater), valid and not
  revoked, are summed onto the winner's value, which must then be an integer.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from histories._records import (
    AddRecord,
    Record,
    RevokeRecord,
    TickRecord,
    referenced_keys,
)

Answer = dict[str, str | None]
"""Resolved value per query key; ``None`` is the null answer."""

_INTEGER = re.compile(r"^-?[0-9]{1,18}$")
_BINDING_OPS = frozenset({"set", "copy", "choose", "replay", "when"})
"""Record kinds that bind a key (a replay re-asserts one of these)."""


_Entry = TypeVar("_Entry", bound=Record)
_Walked = TypeVar("_Walked")


def _drop_revoked(
    records: Sequence[Record],
    revoked: set[str],
    bindings: dict[str, list[Record]],
    adds: dict[str, list[AddRecord]],
) -> None:
    """Remove revoked records from the per-key lists (and keys left with none).

    Only the keys of revoked records are touched; every record carrying a revoked
    id goes, duplicates of an id included."""
    affected = {r.key for r in records if r.id in revoked and r.op != "revoke" and r.op != "tick"}
    _drop_keys_entries(bindings, affected, revoked)
    _drop_keys_entries(adds, affected, revoked)


def _drop_keys_entries(table: dict[str, list[_Entry]], keys: set[str], revoked: set[str]) -> None:
    for key in keys:
        entries = table.get(key)
        if entries is not None:
            kept = [r for r in entries if r.id not in revoked]
            if kept:
                table[key] = kept
            else:
                del table[key]


class LogIndex:
    """A log indexed once so that many keys can be resolved against it cheaply."""

    __slots__ = ("_by_id", "_records", "adds", "bindings", "clock", "revoked")

    def __init__(self, records: Iterable[Record]) -> None:
        # one pass over the log (the exact reader and the packers build an index per
        # read and per update); revoked records are dropped from the lists afterwards
        records = records if isinstance(records, list | tuple) else list(records)
        bindings: dict[str, list[Record]] = {}
        adds: dict[str, list[AddRecord]] = {}
        revokes: list[RevokeRecord] = []
        ticks: list[TickRecord] = []
        for record in records:
            op = record.op
            if op in _BINDING_OPS:  # most records: tested first
                found = bindings.get(record.key)  # type: ignore[union-attr]
                if found is None:
                    bindings[record.key] = [record]  # type: ignore[union-attr]
                else:
                    found.append(record)
            elif op == "revoke":
                revokes.append(record)  # type: ignore[arg-type]
            elif op == "tick":
                ticks.append(record)  # type: ignore[arg-type]
            else:
                found_add = adds.get(record.key)  # type: ignore[union-attr]
                if found_add is None:
                    adds[record.key] = [record]  # type: ignore[union-attr,list-item]
                else:
                    found_add.append(record)  # type: ignore[arg-type]
        # A revoke of a record absent from this log still counts: it must block a
        # later replay of that record (memories often keep only the tombstone).
        self._records = records
        self._by_id: dict[str, Record] | None = None
        revoked: set[str] = set()
        if revokes:
            by_id = self.by_id
            revoked = {
                r.target for r in revokes if getattr(by_id.get(r.target), "op", None) != "revoke"
            }
            if revoked:
                _drop_revoked(records, revoked, bindings, adds)
        self.revoked: set[str] = revoked
        self.clock = max((t.now for t in ticks if t.id not in revoked), default=0) if ticks else 0
        self.bindings = bindings
        self.adds = adds

    @property
    def by_id(self) -> dict[str, Record]:
        """Records by id (the last one of a duplicated id), built on first use: only
        revokes and replays look records up by id, and most logs have neither."""
        found = self._by_id
        if found is None:
            found = self._by_id = {r.id: r for r in self._records}
        return found

    def extended(self, records: Iterable[Record]) -> LogIndex:
        """The index of this log plus ``records`` (a future), without re-indexing the prefix.

        Falls back to a full rebuild when the new records revoke or tick, since those
        change what the prefix's entries mean.
        """
        records = list(records)
        if any(r.op in ("revoke", "tick") for r in records):
            return LogIndex([*self.by_id.values(), *records])
        new = LogIndex.__new__(LogIndex)
        new._records = [*self._records, *records]
        new._by_id = {**self.by_id, **{r.id: r for r in records}}
        new.revoked = self.revoked
        new.clock = self.clock
        new.bindings = {k: list(v) for k, v in self.bindings.items()}
        new.adds = {k: list(v) for k, v in self.adds.items()}
        for record in records:
            if record.id in new.revoked:
                continue
            if record.op == "add":
                new.adds.setdefault(record.key, []).append(record)
            else:
                new.bindings.setdefault(record.key, []).append(record)  # type: ignore[union-attr]
        return new

    def is_live(self, record: Record) -> bool:
        """Whether a record currently counts: not revoked and, for binding records,
        active (time-valid, condition holding, replay not blocked).  Control records
        (revokes, ticks) are live unless revoked; an ``add`` while time-valid."""
        if record.id in self.revoked:
            return False
        if record.op in ("revoke", "tick"):
            return True
        if record.op == "add":
            return record.expires is None or self.clock <= record.expires
        if record.op == "set" or record.op == "copy":  # the common case, without a resolver
            clock = self.clock
            return (record.expires is None or clock <= record.expires) and (
                record.starts is None or clock >= record.starts
            )
        return self._walk(lambda: _Resolver(self)._active(record, set()))

    def closure(self, keys: Iterable[str]) -> set[str]:
        """The dependency closure of ``keys``: keys reachable through the live binding
        records of keys already in it (copy sources, selectors, options, conditions)."""
        found: set[str] = set()
        frontier = list(keys)
        while frontier:
            key = frontier.pop()
            if key in found:
                continue
            found.add(key)
            for record in self.bindings.get(key, ()):
                if self.is_live(record):
                    frontier.extend(referenced_keys(record))
                    if record.op == "replay" and record.target in self.by_id:
                        frontier.extend(referenced_keys(self.by_id[record.target]))
        return found

    def asserted(self) -> tuple[set[str], set[str]]:
        """Every value this log binds, as (live, dead): what each binding record asserts,
        evaluated as if it won (a ``copy`` its source's value now, a ``choose`` the
        option its selector names now), split by whether the record is dead (revoked, or
        expired at the clock); live also holds every key's resolved value (a sum of
        ``add`` records).  A value in both is dead to a reader of wrong answers, which
        looks there first.  Says what a wrong answer is."""
        return self._walk(self._asserted)

    def _asserted(self) -> tuple[set[str], set[str]]:
        resolver = _Resolver(self)
        live: set[str] = set()
        dead: set[str] = set()
        clock, revoked = self.clock, self.revoked
        for record in self._records:
            if record.op not in _BINDING_OPS:
                continue
            # (a replay asserts its target's value, which the target's own window and
            # revocation already class)
            expires = getattr(record, "expires", None)
            value = resolver._payload(record, set())
            if value is not None:
                gone = record.id in revoked or (expires is not None and clock > expires)
                (dead if gone else live).add(value)
        # a key's winner is live, so its value is in ``live`` already, unless ``add``
        # records sum onto it
        live.update(v for v in self.resolve(list(self.adds)).values() if v is not None)
        return live, dead

    def resolve(self, keys: Sequence[str]) -> Answer:
        """E_q for ``keys``; each key is resolved on its own, so answers never
        depend on which other keys were asked."""
        return self._walk(lambda: {key: _Resolver(self).value(key) for key in keys})

    def _walk(self, walk: Callable[[], _Walked]) -> _Walked:
        """Run a resolver walk with room for its recursion, then give the limit back.

        A walk recurses once per dependency link, and a log of n records has chains of at
        most n links (Python 3.11 frames are heap-allocated, so Python recursion this deep
        is safe). The limit is restored because C code counts against it too: left raised
        after a long log, json's decoder could recurse through deeply nested input (a
        hostile server's response) past the C stack and crash the process."""
        needed = 4 * len(self._records) + 200
        previous = sys.getrecursionlimit()
        if previous >= needed:
            return walk()
        sys.setrecursionlimit(needed)
        try:
            return walk()
        finally:
            sys.setrecursionlimit(previous)


class _Resolver:
    """One resolution pass: memo plus the set of keys in progress (cycle guard).

    A value computed while the cycle guard cut some dependency to null depends on
    where the walk entered the cycle, so it is never memoised: that keeps answers
    independent of log order (and of which key was asked first).
    """

    __slots__ = ("cut", "in_progress", "index", "memo")

    def __init__(self, index: LogIndex) -> None:
        self.index = index
        self.memo: dict[str, str | None] = {}
        self.in_progress: set[str] = set()
        self.cut = False
        """Whether the value being computed hit the cycle guard."""

    def value(self, key: str) -> str | None:
        if key in self.memo:
            return self.memo[key]
        if key in self.in_progress:
            self.cut = True
            return None
        outer_cut, self.cut = self.cut, False
        self.in_progress.add(key)
        try:
            result = self._compute(key)
        finally:
            self.in_progress.discard(key)
        if not self.cut:
            self.memo[key] = result
        self.cut = outer_cut or self.cut
        return result

    def _compute(self, key: str) -> str | None:
        winner: Record | None = None
        tied = False
        for record in self.index.bindings.get(key, ()):
            if not self._active(record, set()):
                continue
            rev: int = record.rev  # type: ignore[union-attr]
            if winner is None or rev > winner.rev:  # type: ignore[union-attr]
                winner, tied = record, False
            elif rev == winner.rev:  # type: ignore[union-attr]
                tied = True
        if winner is None or tied:
            return None
        value = self._payload(winner, set())
        newer_adds = [
            a
            for a in self.index.adds.get(key, ())
            if a.rev > winner.rev and self._time_valid(a.expires, None)  # type: ignore[union-attr]
        ]
        if not newer_adds:
            return value
        if value is None or not _INTEGER.fullmatch(value):
            return None
        return str(int(value) + sum(a.delta for a in newer_adds))

    def _time_valid(self, expires: int | None, starts: int | None) -> bool:
        clock = self.index.clock
        return (expires is None or clock <= expires) and (starts is None or clock >= starts)

    # The two methods below dispatch on ``op`` (one literal per record kind), not on
    # the class: ``isinstance`` on a pydantic model runs a Python-level __instancecheck__.

    def _active(self, record: Record, seen: set[str]) -> bool:
        """Whether a binding record competes for its key right now."""
        op = record.op
        if op == "set" or op == "copy":
            return self._time_valid(record.expires, record.starts)  # type: ignore[union-attr]
        if op == "choose":
            return True
        if op == "when":
            return self._time_valid(record.expires, None) and (  # type: ignore[union-attr]
                self.value(record.cond_key) == record.cond_value  # type: ignore[union-attr]
            )
        if op == "replay":
            if record.target in self.index.revoked:  # type: ignore[union-attr]
                return False
            target = self.index.by_id.get(record.target)  # type: ignore[union-attr]
            if target is None or target.op not in _BINDING_OPS or record.id in seen:
                return True  # a candidate that depends on something missing
            seen.add(record.id)
            return self._active(target, seen)
        return False

    def _payload(self, record: Record, seen: set[str]) -> str | None:
        """Evaluate what a winning record asserts."""
        op = record.op
        if op == "set" or op == "when":
            return record.value  # type: ignore[union-attr]
        if op == "copy":
            return self.value(record.src)  # type: ignore[union-attr]
        if op == "choose":
            label = self.value(record.selector)  # type: ignore[union-attr]
            if label is None or label not in record.options:  # type: ignore[union-attr]
                return None
            return self.value(record.options[label])  # type: ignore[union-attr]
        if op == "replay":
            target = self.index.by_id.get(record.target)  # type: ignore[union-attr]
            if (
                target is None
                or record.id in seen
                or target.id in self.index.revoked
                or target.op not in _BINDING_OPS
            ):
                return None
            seen.add(record.id)
            return self._payload(target, seen)
        return None


def resolve(records: Iterable[Record], keys: Sequence[str]) -> Answer:
    """E_q(records, keys): ``{key: value | None}`` by the rules in this module's docstring."""
    return LogIndex(records).resolve(keys)
