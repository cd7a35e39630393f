"""Distractor records: plausible traffic on keys the task never touches.

Three mixes: ``plain`` distractors are literal sets only (the paper's pilot);
``mixed`` distractors (the default) also revoke, replay, copy, choose and expire,
so a compressor that budgets by record kind meets control records that do not
matter to the task; ``task-like`` distractors (the ``cca-pilot`` preset) are mixed
and also drawn like the task's records, so that nothing but their meaning tells them
apart: each key carries one to three bindings (revisions start at 1 to 3 and climb by
1 to 3, as a task key's do, instead of climbing on a few busy keys), choices get a
selector set to one of their option labels (``x``, ``primary``, ``on``: the labels the
families use), expiries fall in the task's range of ticks, and copies read keys that
have a value.

Distractors are shared by both variants (so they cannot reveal the hidden
distinction), use every record kind a compressor must budget for (including
control records: revokes, replays, expiries, selectors), never tie revisions on
a key, and never move the clock (the task owns time): only task-like distractors
tick, and only where the task's prefix ticks, to a time before its first tick.
"""

from __future__ import annotations

import random
from typing import Literal

from histories._labels import Labels, between, pick
from histories._records import (
    ChooseRecord,
    CopyRecord,
    Record,
    ReplayRecord,
    RevokeRecord,
    SetRecord,
    TickRecord,
    trusted,
)

DistractorMix = Literal["mixed", "plain", "task-like"]
"""``mixed``: every record kind, control records included (the default);
``plain``: literal ``set`` records only, as in the paper's pilot; ``task-like``: mixed,
with revisions, values, expiries and keys drawn like the task's."""

OPTION_LABELS = (
    "x", "y", "primary", "backup", "on", "off", "left", "right", "red", "blue",
    "day", "night", "weekend", "holiday", "peak", "idle",
)  # fmt: skip
"""The option labels and conditions the families draw (``choice_switch``,
``missing_dependency``, ``dormant_rule``): task-like selectors are set to these too."""

PER_KEY = 2
"""Task-like distractors put at most this many bindings on a key in the prefix (a task
key has one or two), so revisions stay in the task's range."""


class DistractorPool:
    """Draws distractor records over a fixed set of distractor keys."""

    def __init__(
        self,
        rng: random.Random,
        labels: Labels,
        n_keys: int,
        mix: DistractorMix = "mixed",
        tick_below: int | None = None,
    ) -> None:
        self._rng = rng
        self._tick_below = tick_below if tick_below is not None and tick_below > 1 else None
        """Task-like: the task prefix's first tick; stale ticks go before it."""
        self._plain = mix == "plain"
        self._task_like = mix == "task-like"
        self._labels = labels
        count = max(3, n_keys) * (2 if self._task_like else 1)
        self.keys = [labels.distractor_key() for _ in range(count)]
        self._rev = dict.fromkeys(self.keys, 0)
        self._live: list[SetRecord] = []
        """Distractor sets not yet revoked: targets for revokes and replays."""
        self._bindings = dict.fromkeys(self.keys, 0)
        """Task-like: bindings drawn per key."""
        self._selectors: dict[str, tuple[str, ...]] = {}
        """Task-like: selector key -> the option labels of the choice reading it."""
        self._pending: list[Record] = []
        """Task-like: a selector's set, drawn with its choice, given out next."""

    def _next_rev(self, key: str) -> int:
        if self._task_like:  # like a task key's: mostly 1, then mostly one more
            roll = self._rng.random()
            if self._rev[key] == 0:
                step = 1 if roll < 0.65 else 2 if roll < 0.85 else between(self._rng, 3, 4)
            else:
                step = 1 if roll < 0.7 else between(self._rng, 2, 3)
            self._rev[key] += step
            return self._rev[key]
        self._rev[key] += between(self._rng, 1, 3)
        return self._rev[key]

    def fresh_set(self) -> SetRecord:
        """A plain literal binding (the bulk of distractor traffic, and future chunks)."""
        if self._task_like:
            return self._task_like_set(self._key())
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
        """One distractor record of a weighted-random kind."""
        if self._plain:
            return self.fresh_set()
        if self._task_like:
            return self._task_like_record()
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

    # ------------------------------------------------------------- task-like

    def _key(self, exclude: tuple[str, ...] = ()) -> str:
        """A key with room for one more binding (any key once every key is full)."""
        open_keys = [k for k in self.keys if self._bindings[k] < PER_KEY and k not in exclude]
        key = pick(self._rng, open_keys or [k for k in self.keys if k not in exclude])
        self._bindings[key] += 1
        return key

    def _task_like_set(self, key: str, value: str | None = None) -> SetRecord:
        """A set drawn like a task's: a selector's value is one of its option labels; one
        in seven expires within the task's range of ticks."""
        if value is None:
            labels = self._selectors.get(key)
            value = pick(self._rng, labels) if labels else self._labels.value()
        timed = self._rng.random() < 0.15
        record = trusted(
            SetRecord,
            id=self._labels.distractor_id(),
            key=key,
            value=value,
            rev=self._next_rev(key),
            expires=between(self._rng, 4, 30) if timed else None,
        )
        self._live.append(record)
        return record

    def _task_like_record(self) -> Record:
        if self._pending:
            return self._pending.pop()
        roll = self._rng.random()
        if self._tick_below is not None and roll < 0.05:  # stale: the clock stays the task's
            now = between(self._rng, 1, self._tick_below - 1)
            return trusted(TickRecord, id=self._labels.distractor_id(), now=now)
        roll = self._rng.random()
        live = self._live
        if roll < 0.08 and live:
            target = live.pop(int(self._rng.random() * len(live)))
            return trusted(RevokeRecord, id=self._labels.distractor_id(), target=target.id)
        if roll < 0.13 and live:
            target = pick(self._rng, live)
            if self._bindings[target.key] < PER_KEY:
                self._bindings[target.key] += 1
                return trusted(
                    ReplayRecord,
                    id=self._labels.distractor_id(),
                    key=target.key,
                    target=target.id,
                    rev=self._next_rev(target.key),
                )
        if roll < 0.23:
            bound = [k for k in self.keys if self._bindings[k]]
            key = self._key()
            sources = [k for k in bound if k != key] or [k for k in self.keys if k != key]
            timed = self._rng.random() < 0.3
            return trusted(
                CopyRecord,
                id=self._labels.distractor_id(),
                key=key,
                src=pick(self._rng, sources),
                rev=self._next_rev(key),
                expires=between(self._rng, 4, 30) if timed else None,
            )
        if roll < 0.28:
            key = self._key()
            selector, left, right = self._rng.sample([k for k in self.keys if k != key], 3)
            labels = tuple(self._rng.sample(OPTION_LABELS, 2))
            self._selectors[selector] = labels
            self._bindings[selector] += 1
            self._pending.append(self._task_like_set(selector, pick(self._rng, labels)))
            return trusted(
                ChooseRecord,
                id=self._labels.distractor_id(),
                key=key,
                selector=selector,
                options=dict(zip(labels, (left, right), strict=True)),
                rev=self._next_rev(key),
            )
        return self._task_like_set(self._key())
