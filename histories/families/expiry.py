"""expiry: an override's expiry tick differs; reveal advances the clock between them.

Hidden distinction: how long the current value stays valid.  A memory that keeps
the value without its ``expires`` cannot tell when the base value comes back.

Worked example::

    both: e01 tick now=5
          e02 set key_target="amber-101" rev=1
    A:    e03 set key_target="onyx-303" rev=2 expires=8
    B:    e03 set key_target="onyx-303" rev=2 expires=12
    current  -> A: onyx-303   B: onyx-303
    reveal   e04 tick now=10 -> A: amber-101  B: onyx-303
    override e05 set key_target="jade-404" rev=3 -> both jade-404
"""

from __future__ import annotations

import random

from histories._labels import Labels
from histories.families._base import Builder, Draft, Family


def build(rng: random.Random, labels: Labels) -> Draft:
    b = Builder(labels)
    target = b.key("target")
    now = rng.randint(3, 9)
    early = now + rng.randint(1, 4)
    reveal_now = early + rng.randint(1, 4)
    late = reveal_now + rng.randint(1, 6)
    tick, base = b.tick(now), b.set(target, b.value(), 1)
    override_id, current = b.new_id(), b.value()
    return b.draft(
        query=[target],
        variant_a=[tick, base, b.set(target, current, 2, id=override_id, expires=early)],
        variant_b=[tick, base, b.set(target, current, 2, id=override_id, expires=late)],
        reveal=[b.tick(reveal_now)],
        override=[b.set(target, b.value(), 3)],
    )


FAMILY = Family(
    name="expiry",
    summary="an override's expiry tick differs; reveal advances the clock between them",
    paper=True,
    build=build,
)
