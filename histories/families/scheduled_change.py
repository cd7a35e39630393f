"""scheduled_change: a future-dated change's start tick differs (bi-temporal validity).

Hidden distinction: *when* an already-recorded change takes effect (``starts`` on
``set``).  Recorded now, valid later: a memory that keeps only what is valid
today drops it, and one that keeps it without ``starts`` misdates it.

Worked example::

    both: e01 tick now=5
          e02 set key_target="amber-101" rev=1
    A:    e03 set key_target="cedar-202" rev=2 starts=8
    B:    e03 set key_target="cedar-202" rev=2 starts=14
    current  -> both amber-101
    reveal   e04 tick now=10 -> A: cedar-202  B: amber-101
    override e05 set key_target="jade-404" rev=3 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories._records import Record
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target = b.key("target")
    now = rng.randint(3, 9)
    soon = now + rng.randint(1, 4)
    reveal_now = soon + rng.randint(0, 3)
    later = reveal_now + rng.randint(1, 8)
    shared: list[Record] = [b.tick(now), b.set(target, b.value(), 1)]
    change_id, scheduled = b.new_id(), b.value()
    return b.draft(
        query=[target],
        variant_a=[*shared, b.set(target, scheduled, 2, id=change_id, starts=soon)],
        variant_b=[*shared, b.set(target, scheduled, 2, id=change_id, starts=later)],
        reveal=[b.tick(reveal_now)],
        override=[b.set(target, b.value(), 3)],
    )


FAMILY = Family(
    name="scheduled_change",
    summary="a scheduled change's start tick differs; reveal advances the clock between them",
    paper=False,
    build=build,
)
