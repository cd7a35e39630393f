"""tombstone_replay: an old record is revoked in A, merely superseded in B.

Hidden distinction: whether a dead record is dead for good (a tombstone) or only
outranked.  The reveal either replays the old record (blocked in A) or revokes the
current one (A has nothing left, so null; B falls back to the old value).

Worked example::

    both: e01 set key_target="amber-101" rev=1
          e02 set key_target="onyx-303" rev=2
    A:    e03 revoke e01                    B: (no revoke)
    current  -> both onyx-303
    reveal   e04 replay key_target target=e01 rev=3 -> A: onyx-303  B: amber-101
      (or    e04 revoke e02                        -> A: null      B: amber-101)
    override e05 set key_target="jade-404" rev=3 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target = b.key("target")
    old = b.set(target, b.value(), 1)
    latest = b.set(target, b.value(), 1 + rng.randint(1, 3))
    tombstone = b.revoke(old.id)
    reveal = b.replay(target, old.id, latest.rev + 1) if rng.random() < 0.5 else b.revoke(latest.id)
    return b.draft(
        query=[target],
        variant_a=[old, latest, tombstone],
        variant_b=[old, latest],
        reveal=[reveal],
        override=[b.set(target, b.value(), latest.rev + 1)],
    )


FAMILY = Family(
    name="tombstone_replay",
    summary="an old record is revoked in A, merely superseded in B; reveal replays it",
    paper=True,
    build=build,
)
