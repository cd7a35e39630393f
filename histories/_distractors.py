"""Distractor records: plausible traffic on keys the task never touches.

Two mixes: ``plain`` distractors are literal sets only (the paper's pilot);
``mixed`` distractors (the default) also revoke, replay, copy, choose and expire,
so a compressor that budgets by record kind meets control records that do not
matter to the task.

Distractors are shared by both variants (so they cannot reveal the hidden
distinction), use every record kind a compressor must budget for (including
control records: revokes, replays, expiries, selectors), never tie revisions on
a key, and never tick the clock (the task owns time).
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
    trusted,
)

DistractorMix = Literal["mixed", "plain"]
"""``mixed``: every record kind, control records included (the default);
``plain``: literal ``set`` records only, as in the paper's pilot."""


class DistractorPool:
    """Draws distractor records over a fixed set of distractor keys."""

    def __init__(
        self, rng: random.Random, labels: Labels, n_keys: int, mix: DistractorMix = "mixed"
    ) -> None:
        self._rng = rng
        self._plain = mix == "plain"
        self._labels = labels
        self.keys = [labels.distractor_key() for _ in range(max(3, n_keys))]
        self._rev = dict.fromkeys(self.keys, 0)
        self._live: list[SetRecord] = []
        """Distractor sets not yet revoked: targets for revokes and replays."""

    def _next_rev(self, key: str) -> int:
        self._rev[key] += between(self._rng, 1, 3)
        return self._rev[key]

    def fresh_set(self) -> SetRecord:
        """A plain literal binding (the bulk of distractor traffic, and future chunks)."""
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
