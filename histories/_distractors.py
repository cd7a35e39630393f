"""Distractor records: plausible traffic on keys the task never writes.

Three mixes: ``plain`` distractors are literal sets only (the paper's pilot);
``mixed`` distractors (the default) also revoke, replay, copy, choose and expire,
so a compressor that budgets by record kind meets control records that do not
matter to the task; ``task-like`` distractors (the ``cca-pilot`` preset) are
**decoy drafts**: the pair's own family builds them as it builds the task, on
distractor labels, so their kinds, revisions, values, expiries and the label graph
they draw are the task's own distribution, and nothing but their meaning (they never
reach the query key) tells them apart.  Decoy reads are moved to other drafts' keys,
the task's included, each draft alike (``JOIN_READS``), so the query key's component
in the label graph holds decoys too.

Distractors are shared by both variants (so they cannot reveal the hidden
distinction), never write a task key or target a task record (so no answer moves),
never tie revisions on a key, and never move the clock (the task owns time): a
decoy's tick is moved before the task's first tick, or dropped where the task's
prefix has none.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from histories._labels import Labels, between, pick
from histories._records import (
    ChooseRecord,
    CopyRecord,
    Record,
    ReplayRecord,
    RevokeRecord,
    SetRecord,
    TickRecord,
    referenced_keys,
    replace_fields,
    trusted,
)

if TYPE_CHECKING:
    from histories.families import Draft

DistractorMix = Literal["mixed", "plain", "task-like"]
"""``mixed``: every record kind, control records included (the default);
``plain``: literal ``set`` records only, as in the paper's pilot; ``task-like``: decoy
drafts of the pair's own family on distractor labels."""

DraftBuilder = Callable[[random.Random, Labels], "Draft"]

JOIN_READS = 0.75
"""Task-like: the chance that a decoy borrows one of its input keys (a key it reads:
a copy's source, a choice's selector or option, a rule's condition) from another
draft, the task's included, every draft alike.  Reads never write, so no answer
moves.  Without such reads no distractor shares a label with the task and the query
key's component in the label graph is exactly the task; with reads that only ever go
to the task (the previous design), task keys were named by other records far more
often than distractor keys (89 % against 21 %), a tell of its own."""

OWN_FAMILY = 0.5
"""Task-like: the chance that a decoy draft is of the pair's own family (else of a
paper family, drawn alike): a task's structure recurs among its distractors, and
every pair has decoys that read other keys, to join the task's labels through."""

READ_FIELDS = {"copy": ("src",), "choose": ("selector",), "when": ("cond_key",)}
"""The fields of a record that name a key it reads (besides a choice's options)."""


class _DecoyLabels:
    """A family's label maker for a decoy draft: its keys and ids are distractors'."""

    def __init__(self, labels: Labels) -> None:
        self._labels = labels

    def task_key(self, role: str) -> str:
        return self._labels.distractor_key()

    def task_id(self) -> str:
        return self._labels.distractor_id()

    def distractor_key(self) -> str:
        return self._labels.distractor_key()

    def distractor_id(self) -> str:
        return self._labels.distractor_id()

    def value(self) -> str:
        return self._labels.value()


class DistractorPool:
    """Draws distractor records over a fixed set of distractor keys (``plain`` and
    ``mixed``), or decoy drafts of the pair's family (``task-like``)."""

    def __init__(
        self,
        rng: random.Random,
        labels: Labels,
        n_keys: int,
        mix: DistractorMix = "mixed",
        tick_below: int | None = None,
        task_keys: tuple[str, ...] = (),
        decoys: Sequence[DraftBuilder] = (),
    ) -> None:
        if mix == "task-like" and not decoys:
            raise ValueError("task-like distractors need the families' draft builders")
        self._rng = rng
        self._labels = labels
        self._plain = mix == "plain"
        self._decoys = tuple(decoys) if mix == "task-like" else ()
        """Task-like: the pair's own family's builder, then the paper families'."""
        self._task_keys = task_keys
        self._tick_below = tick_below if tick_below is not None and tick_below > 1 else None
        """Task-like: the task prefix's first tick; a decoy's ticks go before it."""
        self.keys: list[str] = []
        if not self._decoys:
            self.keys = [labels.distractor_key() for _ in range(max(3, n_keys))]
        self._rev = dict.fromkeys(self.keys, 0)
        self._live: list[SetRecord] = []
        """Distractor sets not yet revoked: targets for revokes and replays."""

    def draw(self, count: int) -> list[Record]:
        """The prefix's ``count`` distractor records."""
        if not self._decoys:
            return [self.record() for _ in range(count)]
        drafts: list[list[Record]] = []
        drawn: list[Record] = []
        while len(drawn) < count:  # borrowing drops records: draw until enough remain
            while sum(map(len, drafts)) < count + len(drafts):
                drafts.append(self._decoy_records())
                if len(drafts) > 4 * count + 16:  # a family whose drafts hold only ticks
                    raise ValueError("decoy drafts hold no records")
            drawn = self._borrow(drafts)
            drafts.append(self._decoy_records())
        drawn = drawn[:count]
        for record in drawn:  # future distractors update the decoys' keys
            key, rev = getattr(record, "key", None), getattr(record, "rev", None)
            if key is not None and rev is not None:
                if key not in self._rev:
                    self.keys.append(key)
                self._rev[key] = max(self._rev.get(key, 0), rev)
        return drawn

    def _decoy_records(self) -> list[Record]:
        """One variant of a decoy draft (of the pair's own family half of the time, else
        of a paper family), its ticks moved before the task's first."""
        own = self._rng.random() < OWN_FAMILY
        build = self._decoys[0] if own else pick(self._rng, self._decoys[1:] or self._decoys)
        draft = build(self._rng, _DecoyLabels(self._labels))
        records = draft.variant_a if self._rng.random() < 0.5 else draft.variant_b
        out = []
        for record in records:
            if isinstance(record, TickRecord):
                if self._tick_below is None:
                    continue  # the task's prefix keeps the clock at 0
                now = between(self._rng, 1, self._tick_below - 1)
                record = replace_fields(record, {"now": now})
            out.append(record)
        return out

    def _borrow(self, drafts: list[list[Record]]) -> list[Record]:
        """The drafts' records after each decoy borrows, at ``JOIN_READS``, each of its
        input keys (read, and written only by sets no record targets) from another
        draft, the task's included, every draft alike: its reads name the lent key and
        its sets of the input go.  A lent key gains a reader and no draft loses one, so
        in-degree stays each draft's own profile while the drafts join up."""
        borrowed = [
            [key for key in _inputs(records) if self._rng.random() < JOIN_READS]
            for records in drafts
        ]
        lendable = [list(self._task_keys)] + [
            [key for key in _named(records) if key not in gone]
            for records, gone in zip(drafts, borrowed, strict=True)
        ]
        out: list[Record] = []
        for own, (records, gone) in enumerate(zip(drafts, borrowed, strict=True), start=1):
            others = [i for i, keys in enumerate(lendable) if i != own and keys]
            mapping = {key: pick(self._rng, lendable[pick(self._rng, others)]) for key in gone}
            out.extend(
                _read_through(record, mapping)
                for record in records
                if getattr(record, "key", None) not in mapping
            )
        return out

    def _next_rev(self, key: str) -> int:
        self._rev[key] += between(self._rng, 1, 3)
        return self._rev[key]

    def fresh_set(self) -> SetRecord:
        """A plain literal binding (the bulk of distractor traffic, and future chunks);
        a decoy key's next binding, as a future's override is the task's."""
        if self._decoys:
            if not self.keys:  # no decoy in the prefix
                self.keys.append(self._labels.distractor_key())
                self._rev[self.keys[0]] = 0
            key = pick(self._rng, self.keys)
            self._rev[key] += 1
            return trusted(
                SetRecord,
                id=self._labels.distractor_id(),
                key=key,
                value=self._labels.value(),
                rev=self._rev[key],
            )
        key = pick(self._rng, self.keys)
        timed = not self._plain and self._rng.random() < 0.15
        expires = between(self._rng, 40, 99) if timed else None
        record = trusted(
            SetRecord,
            id=self._labels.distractor_id(),
            key=key,
            value=self._labels.value(),
            rev=self._next_rev(key),
            expires=expires,
        )
        self._live.append(record)
        return record

    def record(self) -> Record:
        """One distractor record of a weighted-random kind (``plain``, ``mixed``)."""
        if self._plain:
            return self.fresh_set()
        roll = self._rng.random()
        live = self._live
        if roll < 0.10 and live:
            target = live.pop(int(self._rng.random() * len(live)))
            return trusted(RevokeRecord, id=self._labels.distractor_id(), target=target.id)
        if roll < 0.15 and live:
            target = pick(self._rng, live)
            return trusted(
                ReplayRecord,
                id=self._labels.distractor_id(),
                key=target.key,
                target=target.id,
                rev=self._next_rev(target.key),
            )
        if roll < 0.25:
            key, src = self._rng.sample(self.keys, 2)
            return trusted(
                CopyRecord,
                id=self._labels.distractor_id(),
                key=key,
                src=src,
                rev=self._next_rev(key),
            )
        if roll < 0.30 and len(self.keys) >= 4:
            key, selector, left, right = self._rng.sample(self.keys, 4)
            return trusted(
                ChooseRecord,
                id=self._labels.distractor_id(),
                key=key,
                selector=selector,
                options={"on": left, "off": right},
                rev=self._next_rev(key),
            )
        return self.fresh_set()


def _named(records: list[Record]) -> list[str]:
    """The keys a draft's records name, in first-seen order."""
    return list(dict.fromkeys(key for record in records for key in referenced_keys(record)))


def _inputs(records: list[Record]) -> list[str]:
    """A draft's input keys: read by one of its records, written by sets only, none of
    them the target of a revoke or replay (so dropping them leaves nothing dangling)."""
    targeted = {getattr(record, "target", None) for record in records}
    derived = {getattr(r, "key", None) for r in records if r.op != "set" or r.id in targeted}
    read = dict.fromkeys(key for record in records for key in referenced_keys(record)[1:])
    return [key for key in read if key not in derived]


def _read_through(record: Record, mapping: dict[str, str]) -> Record:
    """The record with the keys it reads renamed through ``mapping``."""
    if not mapping or record.op not in READ_FIELDS:
        return record
    update: dict[str, object] = {
        name: mapping[getattr(record, name)]
        for name in READ_FIELDS[record.op]
        if getattr(record, name) in mapping
    }
    if isinstance(record, ChooseRecord):
        update["options"] = {label: mapping.get(k, k) for label, k in record.options.items()}
    return replace_fields(record, update)
